// `auto` on a GPU: pick the arm measured fastest for this device and geometry.
// The crossover data is a table of measured points per arm (src/core/auto.hpp): a tune file
// written by `gdn tune` (GDN_TUNE_FILE, else ~/.cache/gdn/tune-<device>.json) when present and
// valid, else the built-in table for the device's sm. The lookup is a pure function of
// (table, tokens per sequence, sequences x value heads); the choice is printed once per arm.
#include "core/auto.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/internal.hpp"

namespace gdn::detail {

namespace {

// H200 (sm_90), K = V = 128, bf16 q/k/v, h0 in, hT out. HV 48 (qwen3.5-27b), 1 and 8 sequences
// of 64..32768 tokens: the `gdn tune` run of r20 (6daa8a8, bench/results/2026-12-03-h200-r20-
// 6daa8a8-tune.json; tune synchronises after every call; since the scratch pool (r19) its figures
// match the pipelined bench: wy-tc 2.41 vs 2.40 ms at 32768). HV 32 (qwen3-next), one sequence of
// 4096..131072: bench/compare.py at 128eb09 (bench/results/2026-12-03-h200-compare-128eb09.jsonl;
// older kernels, same ranking). A fresh `gdn tune` file (GDN_TUNE_FILE, ~/.cache/gdn) replaces
// this table.
const TuneTable& h200_table() {
  static const TuneTable t = [] {
    TuneTable x;
    x.device = "NVIDIA H200";
    x.sm = 90;
    x.source = "built-in (H200: gdn tune r20 6daa8a8 + compare.py 128eb09, 2026-12-03)";
    const struct { Arm arm; std::int64_t len, seqs, heads; double ms; } rows[] = {
        {Arm::serial, 64, 1, 48, 0.06205}, {Arm::wy_fp32, 64, 1, 48, 0.08166},
        {Arm::wy_tc, 64, 1, 48, 0.05126}, {Arm::serial, 128, 1, 48, 0.09616},
        {Arm::wy_fp32, 128, 1, 48, 0.09859}, {Arm::wy_tc, 128, 1, 48, 0.05069},
        {Arm::serial, 256, 1, 48, 0.1598}, {Arm::wy_fp32, 256, 1, 48, 0.1246},
        {Arm::wy_tc, 256, 1, 48, 0.06144}, {Arm::serial, 512, 1, 48, 0.2877},
        {Arm::wy_fp32, 512, 1, 48, 0.1773}, {Arm::wy_tc, 512, 1, 48, 0.08266},
        {Arm::serial, 1024, 1, 48, 0.6098}, {Arm::wy_fp32, 1024, 1, 48, 0.295},
        {Arm::wy_tc, 1024, 1, 48, 0.1228}, {Arm::serial, 2048, 1, 48, 1.218},
        {Arm::wy_fp32, 2048, 1, 48, 0.5491}, {Arm::wy_tc, 2048, 1, 48, 0.1866},
        {Arm::serial, 4096, 1, 48, 2.427}, {Arm::wy_fp32, 4096, 1, 48, 1.071},
        {Arm::wy_tc, 4096, 1, 48, 0.3272}, {Arm::serial, 8192, 1, 48, 4.772},
        {Arm::wy_fp32, 8192, 1, 48, 2.033}, {Arm::wy_tc, 8192, 1, 48, 0.6164},
        {Arm::serial, 16384, 1, 48, 9.49}, {Arm::wy_fp32, 16384, 1, 48, 3.943},
        {Arm::wy_tc, 16384, 1, 48, 1.195}, {Arm::serial, 32768, 1, 48, 18.89},
        {Arm::wy_fp32, 32768, 1, 48, 7.827}, {Arm::wy_tc, 32768, 1, 48, 2.408},
        {Arm::serial, 64, 8, 48, 0.2777}, {Arm::wy_fp32, 64, 8, 48, 0.2431},
        {Arm::wy_tc, 64, 8, 48, 0.09974}, {Arm::serial, 128, 8, 48, 0.4632},
        {Arm::wy_fp32, 128, 8, 48, 0.3502}, {Arm::wy_tc, 128, 8, 48, 0.1388},
        {Arm::serial, 256, 8, 48, 0.8478}, {Arm::wy_fp32, 256, 8, 48, 0.5953},
        {Arm::wy_tc, 256, 8, 48, 0.1903}, {Arm::serial, 512, 8, 48, 1.632},
        {Arm::wy_fp32, 512, 8, 48, 1.081}, {Arm::wy_tc, 512, 8, 48, 0.3145},
        {Arm::serial, 1024, 8, 48, 3.19}, {Arm::wy_fp32, 1024, 8, 48, 2.068},
        {Arm::wy_tc, 1024, 8, 48, 0.5645}, {Arm::serial, 2048, 8, 48, 6.305},
        {Arm::wy_fp32, 2048, 8, 48, 3.967}, {Arm::wy_tc, 2048, 8, 48, 1.092},
        {Arm::serial, 4096, 8, 48, 12.61}, {Arm::wy_fp32, 4096, 8, 48, 7.88},
        {Arm::wy_tc, 4096, 8, 48, 2.219}, {Arm::serial, 8192, 8, 48, 24.98},
        {Arm::wy_fp32, 8192, 8, 48, 15.65}, {Arm::wy_tc, 8192, 8, 48, 4.354},
        {Arm::serial, 4096, 1, 32, 2.278}, {Arm::wy_fp32, 4096, 1, 32, 1.326},
        {Arm::wy_tc, 4096, 1, 32, 0.614}, {Arm::serial, 8192, 1, 32, 4.526},
        {Arm::wy_fp32, 8192, 1, 32, 2.62}, {Arm::wy_tc, 8192, 1, 32, 1.175},
        {Arm::serial, 32768, 1, 32, 18.02}, {Arm::wy_fp32, 32768, 1, 32, 10.38},
        {Arm::wy_tc, 32768, 1, 32, 4.513}, {Arm::serial, 131072, 1, 32, 72.19},
        {Arm::wy_fp32, 131072, 1, 32, 41.97}, {Arm::wy_tc, 131072, 1, 32, 17.91},
    };
    for (const auto& r : rows) x.points.push_back({r.arm, r.len, r.seqs, r.heads, r.ms});
    return x;
  }();
  return t;
}

double log_dist(std::int64_t a, std::int64_t b) {
  return std::abs(std::log(static_cast<double>(a)) - std::log(static_cast<double>(b)));
}

}  // namespace

double estimate_ms(const TuneTable& t, Arm arm, std::int64_t len, std::int64_t seqs_heads) {
  len = std::max<std::int64_t>(len, 1);
  seqs_heads = std::max<std::int64_t>(seqs_heads, 1);
  // Nearest measured seqs_heads row of this arm.
  std::int64_t row = -1;
  for (const auto& p : t.points)
    if (p.arm == arm && p.len > 0 && p.seqs_heads() > 0 && p.ms > 0 &&
        (row < 0 || log_dist(p.seqs_heads(), seqs_heads) < log_dist(row, seqs_heads)))
      row = p.seqs_heads();
  if (row < 0) return -1.0;
  std::vector<std::pair<std::int64_t, double>> pts;  // (len, ms) of the row, sorted by len
  for (const auto& p : t.points)
    if (p.arm == arm && p.seqs_heads() == row && p.len > 0 && p.ms > 0) pts.push_back({p.len, p.ms});
  std::sort(pts.begin(), pts.end());
  double ms;
  if (len <= pts.front().first) {
    ms = pts.front().second * static_cast<double>(len) / pts.front().first;
  } else if (len >= pts.back().first) {
    ms = pts.back().second * static_cast<double>(len) / pts.back().first;
  } else {
    std::size_t i = 1;
    while (pts[i].first < len) ++i;
    const auto [l0, m0] = pts[i - 1];
    const auto [l1, m1] = pts[i];
    const double f = (std::log(static_cast<double>(len)) - std::log(static_cast<double>(l0))) /
                     (std::log(static_cast<double>(l1)) - std::log(static_cast<double>(l0)));
    ms = std::exp(std::log(m0) + f * (std::log(m1) - std::log(m0)));
  }
  return ms * static_cast<double>(seqs_heads) / static_cast<double>(row);
}

Arm pick_arm(const TuneTable& t, std::int64_t len, std::int64_t seqs_heads,
             const std::vector<Arm>& candidates) {
  Arm best = Arm::serial;
  double best_ms = std::numeric_limits<double>::infinity();
  for (Arm a : candidates) {
    const double ms = estimate_ms(t, a, len, seqs_heads);
    if (ms > 0 && ms < best_ms) {
      best_ms = ms;
      best = a;
    }
  }
  return best;
}

Status parse_tune_table(const std::string& json_text, TuneTable* out) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return Status::Invalid(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::Invalid("top level is not a JSON object");
  if (!j.contains("format") || j["format"] != "gdn-tune-1")
    return Status::Invalid("\"format\" is not \"gdn-tune-1\"");
  if (!j.contains("sm") || !j["sm"].is_number_integer())
    return Status::Invalid("\"sm\" missing or not an integer");
  if (!j.contains("points") || !j["points"].is_array() || j["points"].empty())
    return Status::Invalid("\"points\" missing, not an array, or empty");
  TuneTable t;
  t.sm = j["sm"].get<int>();
  if (j.contains("device") && j["device"].is_string()) t.device = j["device"].get<std::string>();
  int idx = 0;
  for (const auto& p : j["points"]) {
    const std::string where = "point " + std::to_string(idx++);
    if (!p.is_object()) return Status::Invalid(where + " is not an object");
    TunePoint tp;
    if (!p.contains("arm") || !p["arm"].is_string() ||
        !parse_arm(p["arm"].get<std::string>(), &tp.arm) ||
        !(tp.arm == Arm::serial || tp.arm == Arm::wy_fp32 || tp.arm == Arm::wy_tc))
      return Status::Invalid(where + ": \"arm\" must be serial, wy-fp32 or wy-tc");
    for (auto [name, dst] : {std::pair<const char*, std::int64_t*>{"len", &tp.len},
                             {"seqs", &tp.seqs},
                             {"heads", &tp.heads}}) {
      if (!p.contains(name) || !p[name].is_number_integer() || p[name].get<std::int64_t>() <= 0)
        return Status::Invalid(where + ": \"" + name + "\" must be a positive integer");
      *dst = p[name].get<std::int64_t>();
    }
    if (!p.contains("ms") || !p["ms"].is_number() || !(p["ms"].get<double>() > 0) ||
        !std::isfinite(p["ms"].get<double>()))
      return Status::Invalid(where + ": \"ms\" must be a finite number > 0");
    tp.ms = p["ms"].get<double>();
    t.points.push_back(tp);
  }
  *out = std::move(t);
  return Status::Ok();
}

Status load_tune_file(const std::string& path, TuneTable* out) {
  std::ifstream f(path);
  if (!f) return Status::Invalid("cannot open tune file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  Status st = parse_tune_table(ss.str(), out);
  if (!st.ok()) return Status::Invalid("tune file " + path + ": " + st.message());
  out->source = path;
  return Status::Ok();
}

std::string tune_table_json(const TuneTable& t) {
  nlohmann::json j;
  j["format"] = "gdn-tune-1";
  j["device"] = t.device;
  j["sm"] = t.sm;
  j["points"] = nlohmann::json::array();
  for (const auto& p : t.points)
    j["points"].push_back({{"arm", to_string(p.arm)}, {"len", p.len}, {"seqs", p.seqs},
                           {"heads", p.heads}, {"ms", p.ms}});
  return j.dump(1) + "\n";
}

const TuneTable* builtin_tune_table(int sm) { return sm == 90 ? &h200_table() : nullptr; }

std::string default_tune_path(const std::string& device_name) {
  const char* home = std::getenv("HOME");
  std::string name = device_name.empty() ? "unknown" : device_name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '-';
  return std::string(home && *home ? home : ".") + "/.cache/gdn/tune-" + name + ".json";
}

const TuneTable* select_tune_table(const DeviceInfo& d, const std::string& path, TuneTable* storage,
                                   std::string* note) {
  if (note) note->clear();
  if (!path.empty()) {
    std::ifstream probe(path);
    const bool explicit_file = std::getenv("GDN_TUNE_FILE") != nullptr;
    if (probe || explicit_file) {
      Status st = load_tune_file(path, storage);
      if (st.ok() && storage->sm == d.sm) return storage;
      if (note)
        *note = st.ok() ? "tune file " + path + " is for sm_" + std::to_string(storage->sm) +
                              ", device is sm_" + std::to_string(d.sm)
                        : st.message();
    }
  }
  return builtin_tune_table(d.sm);
}

Arm auto_gpu_arm(const DeviceInfo& d, const Problem& p, const Seqs& s) {
  // The table is chosen once per process (the file does not change under a running engine).
  static std::once_flag once;
  static TuneTable storage;
  static const TuneTable* table = nullptr;
  std::call_once(once, [&] {
    const char* env = std::getenv("GDN_TUNE_FILE");
    const std::string path = env && *env ? std::string(env) : default_tune_path(d.name);
    std::string note;
    table = select_tune_table(d, path, &storage, &note);
    if (!note.empty())
      std::fprintf(stderr, "gdn auto: %s; using %s\n", note.c_str(),
                   table ? table->source.c_str() : "no table (serial)");
  });
  Arm arm = Arm::serial;
  if (table) {
    std::vector<Arm> cands;
    for (Arm a : {Arm::serial, Arm::wy_fp32, Arm::wy_tc}) {
#ifdef GDN_WITH_CUDA
      const bool ok = a == Arm::serial    ? cuda_serial_supports(p, nullptr)
                      : a == Arm::wy_fp32 ? cuda_wy_fp32_supports(p, nullptr)
                                          : cuda_wy_tc_supports(p, nullptr);
#else
      const bool ok = true;  // no GPU arm is built; resolve_arm falls back to cpu
#endif
      if (ok) cands.push_back(a);
    }
    arm = pick_arm(*table, s.max_len, static_cast<std::int64_t>(s.N) * p.HV, cands);
  }
  static std::mutex mu;
  static std::set<int> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(static_cast<int>(arm)).second)
    std::fprintf(stderr, "gdn arm = %s (auto: %s, %lld tokens per sequence, %lld seqs x heads)\n",
                 to_string(arm), table ? table->source.c_str() : "no table for this device",
                 static_cast<long long>(s.max_len), static_cast<long long>(s.N) * p.HV);
  return arm;
}

}  // namespace gdn::detail
