// `gdn prefill`: the model's stack of GDN layers over synthetic hidden states on the GPU —
// per-stage device time (CUDA events), tokens/s, the non-GEMM share and the layer's time over
// its GEMMs alone. Each layer gets the same synthetic hidden states (the attention and MLP blocks
// between GDN layers are not run). Needs a CUDA GPU: without one it says so and exits 2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gdn/commands.hpp"
#include "gdn/gdn.hpp"
#include "gdn/layer.hpp"

#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gdn::cli {
namespace {

struct PrefillOptions {
  std::string preset = "qwen3.5-27b";
  std::int64_t tokens = 32768;
  int layers = 0;  // 0: every GDN layer of the model
  std::string checkpoint;
  std::string arm = "auto";
  std::string json;
  int iters = 5;
  std::uint64_t seed = 1;
};

void progress(const char* what, int done, int total) {
  const int width = 30, fill = total ? done * width / total : width;
  std::fprintf(stderr, "\r%-10s [%.*s%*s] %d/%d", what, fill, "##############################",
               width - fill, "", done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

#ifdef GDN_WITH_CUDA
int run_prefill(const PrefillOptions& opt) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "gdn prefill: %s\n", m.c_str());
    return 1;
  };
  Arm arm;
  if (!parse_arm(opt.arm, &arm)) return fail("unknown arm '" + opt.arm + "'");
  const DeviceInfo dev = device_info();
  if (dev.device_count == 0) {
    std::fprintf(stderr, "gdn prefill: needs a CUDA GPU (none found); the layer runs on the GPU only\n");
    return 2;
  }
  if (opt.tokens < 1 || opt.tokens > INT32_MAX) return fail("--tokens must be in 1..2^31-1");
  layer::Config c;
  std::unique_ptr<layer::Checkpoint> ck;
  if (!opt.checkpoint.empty()) {
    Status st = layer::load_config(opt.checkpoint + "/config.json", &c);
    if (!st.ok()) return fail(st.message());
    if (!(st = layer::Checkpoint::open(opt.checkpoint, &ck)).ok()) return fail(st.message());
  } else if (!layer::preset(opt.preset, &c)) {
    std::string names;
    for (auto& n : layer::preset_names()) names += " " + n;
    return fail("unknown preset '" + opt.preset + "' (have:" + names + ")");
  }
  std::vector<int> ids = c.gdn_layers;
  if (opt.layers > 0 && opt.layers < static_cast<int>(ids.size())) ids.resize(opt.layers);
  const int NL = static_cast<int>(ids.size());
  if (NL == 0) return fail("the model has no GDN layers");
  const std::int64_t T = opt.tokens;
  std::printf("gdn prefill  %s  device %s (sm_%d)  cuda %s  commit %s\n", c.name.c_str(),
              dev.name.c_str(), dev.sm, dev.cuda_runtime.c_str(), commit_id());
  std::printf("hidden %d  HK %d  HV %d  K %d  V %d  conv %d  GDN layers %d  tokens %lld  weights %s\n",
              c.hidden, c.HK, c.HV, c.K, c.V, c.conv_kernel, NL, static_cast<long long>(T),
              ck ? opt.checkpoint.c_str() : "synthetic");

  std::vector<std::unique_ptr<layer::GpuLayer>> stack(NL);
  for (int l = 0; l < NL; ++l) {
    layer::Weights w;
    Status st = ck ? ck->load_layer(c, ids[l], &w) : Status::Ok();
    if (!ck) w = layer::synthesize(c, opt.seed * 1000003ULL + ids[l]);
    if (!st.ok()) return fail(st.message());
    if (!(st = layer::GpuLayer::create(c, w, 1, &stack[l])).ok())
      return fail("layer " + std::to_string(ids[l]) + ": " + st.message());
    progress("weights", l + 1, NL);
  }
  std::unique_ptr<layer::Workspace> ws;
  Status st = layer::Workspace::create(c, T, 1, &ws);
  if (!st.ok()) return fail(st.message());
  const std::size_t xn = static_cast<std::size_t>(T) * c.hidden;
  void *x = nullptr, *y = nullptr;
  if (cudaMalloc(&x, xn * 2) != cudaSuccess || cudaMalloc(&y, xn * 2) != cudaSuccess)
    return fail("cannot allocate hidden states");
  {
    std::vector<std::uint16_t> xh(xn);
    std::mt19937_64 rng(opt.seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : xh) v = layer::f32_to_bf16(nd(rng));
    cudaMemcpy(x, xh.data(), xn * 2, cudaMemcpyHostToDevice);
  }
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(T)}, slot = 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  RunInfo info;
  auto pass = [&](layer::StageTimes* times) -> Status {
    for (int l = 0; l < NL; ++l) {
      Status s = stack[l]->prefill(x, y, cu, 1, &slot, *ws, nullptr, arm, times, &info);
      if (!s.ok()) return Status(s.code(), "layer " + std::to_string(ids[l]) + ": " + s.message());
    }
    return Status::Ok();
  };
  const int units = 3 * opt.iters + 1;
  int done = 0;
  // Warm-up (cuBLAS heuristics, arm first call), then timed passes of the whole stack.
  if (!(st = pass(nullptr)).ok()) return fail(st.message());
  progress("measure", ++done, units);
  // Three kinds of timed passes: the stack (uninstrumented), its GEMMs alone, and the stack with
  // an event between stages (the per-stage table: per-stage medians over opt.iters passes, the
  // non-GEMM share the median of the passes' shares). They run interleaved, the order rotating
  // from round to round, so that no kind is favoured by when it runs: run one kind after another
  // (until session 19), the instrumented passes' GEMMs took 7-8% longer than the GEMM-only passes
  // run just before them (r66, H100; the power cap lowers the clock as the GEMMs run, NOTES.md).
  std::vector<double> stack_ms, gemm_ms;
  std::vector<layer::StageTimes> tms;
  std::vector<double> shares;
  auto timed = [&](auto&& body, std::vector<double>& out) -> Status {
    cudaEventRecord(e0);
    Status s = body();
    if (!s.ok()) return s;
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    out.push_back(ms);
    return Status::Ok();
  };
  auto run_kind = [&](int kind) -> Status {
    if (kind == 0) {  // the stack
      for (auto& L : stack) L->zero_slots();
      return timed([&] { return pass(nullptr); }, stack_ms);
    }
    if (kind == 1)  // its GEMMs alone
      return timed(
          [&]() -> Status {
            for (auto& L : stack)
              if (Status s = L->gemms_only(x, y, T, *ws); !s.ok()) return s;
            return Status::Ok();
          },
          gemm_ms);
    layer::StageTimes t;  // instrumented
    for (auto& L : stack) L->zero_slots();
    if (Status s = pass(&t); !s.ok()) return s;
    const double tot = t.total();
    shares.push_back(tot > 0 ? (t.conv + t.gates + t.recur + t.norm) / tot : 0.0);
    tms.push_back(t);
    return Status::Ok();
  };
  for (int i = 0; i < opt.iters; ++i)
    for (int j = 0; j < 3; ++j) {
      if (!(st = run_kind((i + j) % 3)).ok()) return fail(st.message());
      progress("measure", ++done, units);
    }
  if (cudaDeviceSynchronize() != cudaSuccess) return fail("CUDA error after the runs");
  cudaFree(x);
  cudaFree(y);
  auto stage_median = [&](double layer::StageTimes::*f) {
    std::vector<double> v;
    for (const auto& t : tms) v.push_back(t.*f);
    return median(v);
  };
  layer::StageTimes tm;
  for (double layer::StageTimes::*f :
       {&layer::StageTimes::proj, &layer::StageTimes::conv, &layer::StageTimes::gates,
        &layer::StageTimes::recur, &layer::StageTimes::norm, &layer::StageTimes::out})
    tm.*f = stage_median(f);

  const double layer_ms = median(stack_ms) / NL, gemm_only_ms = median(gemm_ms) / NL;
  const double total = tm.total();
  const double nongemm = median(shares);
  const auto [share_lo, share_hi] = std::minmax_element(shares.begin(), shares.end());
  // The layer's time beyond its GEMMs alone, over the layer (both from uninstrumented passes).
  const double exposed = layer_ms > 0 ? (layer_ms - gemm_only_ms) / layer_ms : 0.0;
  const double ratio = gemm_only_ms > 0 ? layer_ms / gemm_only_ms : 0.0;
  const double tok_s = static_cast<double>(T) / (median(stack_ms) * 1e-3);
  std::printf("\nrecurrence arm: %s%s%s\n", to_string(info.ran), info.note.empty() ? "" : " — ",
              info.note.c_str());
  std::printf("%-12s %10s %8s   (per layer, median of %d instrumented passes)\n", "stage", "ms",
              "share", opt.iters);
  const std::pair<const char*, double> rows[] = {{"projections", tm.proj}, {"conv", tm.conv},
                                                 {"gates", tm.gates},      {"recurrence", tm.recur},
                                                 {"norm", tm.norm},        {"out-proj", tm.out}};
  for (auto& [n, v] : rows)
    std::printf("%-12s %10.4f %7.1f%%\n", n, v / NL, total > 0 ? 100.0 * v / total : 0.0);
  std::printf("%-12s %10.4f\n", "sum", total / NL);
  std::printf("\nlayer %.4f ms (median of %d stack passes / %d layers)  stack %.3f ms  %.0f tokens/s\n",
              layer_ms, opt.iters, NL, median(stack_ms), tok_s);
  std::printf("GEMMs alone %.4f ms/layer  layer / GEMMs = %.3fx (target <= 1.2x)\n", gemm_only_ms, ratio);
  std::printf("non-GEMM share (conv+gates+recurrence+norm) = %.1f%% (target <= 15%%; passes %.1f-%.1f%%)\n",
              100 * nongemm, 100 * *share_lo, 100 * *share_hi);
  std::printf("layer beyond its GEMMs alone: %.1f%% of the layer\n", 100 * exposed);
  // Every pass in the order it ran (round i runs kinds i % 3, (i + 1) % 3, (i + 2) % 3), so a
  // drift with time or a slow first pass shows beside the medians.
  auto list = [](const std::vector<double>& v) {
    std::string s;
    char b[32];
    for (double x : v) {
      std::snprintf(b, sizeof b, "%s%.3f", s.empty() ? "" : " ", x);
      s += b;
    }
    return s;
  };
  std::printf("passes (ms, in run order): stack %s | GEMMs alone %s\n", list(stack_ms).c_str(),
              list(gemm_ms).c_str());

  if (!opt.json.empty()) {
    char date[16];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    nlohmann::ordered_json j;
    j["date"] = date;
    j["commit"] = commit_id();
    j["device"] = dev.name;
    j["cuda"] = dev.cuda_runtime;
    j["impl"] = "gdn";
    j["arm"] = to_string(info.ran);
    j["op"] = "layer";
    j["preset"] = ck ? c.name : opt.preset;
    j["tokens"] = T;
    j["seqs"] = 1;
    j["ms"] = layer_ms;
    j["o_err"] = nullptr;
    j["state_err"] = nullptr;
    j["layers"] = NL;
    j["stack_ms"] = median(stack_ms);
    j["tokens_per_s"] = tok_s;
    j["gemm_ms"] = gemm_only_ms;
    j["layer_over_gemm"] = ratio;
    j["nongemm_share"] = nongemm;
    j["nongemm_share_passes"] = shares;
    j["stack_ms_passes"] = stack_ms;
    j["gemm_ms_passes"] = gemm_ms;
    j["beyond_gemm_share"] = exposed;
    j["stage_ms"] = {{"proj", tm.proj / NL}, {"conv", tm.conv / NL}, {"gates", tm.gates / NL},
                     {"recur", tm.recur / NL}, {"norm", tm.norm / NL}, {"out", tm.out / NL}};
    std::ofstream f(opt.json, std::ios::app);
    if (!f) return fail("cannot open " + opt.json + " for appending");
    f << j.dump() << "\n";
  }
  return 0;
}
#else
int run_prefill(const PrefillOptions&) {
  std::fprintf(stderr, "gdn prefill: needs a CUDA build and a GPU (this build has no CUDA)\n");
  return 2;
}
#endif

}  // namespace

void add_prefill(CLI::App& app) {
  auto opt = std::make_shared<PrefillOptions>();
  CLI::App* sub = app.add_subcommand("prefill", "Run the model's stack of GDN layers (GPU) and time each stage");
  sub->add_option("--preset", opt->preset, "Model geometry: qwen3.5-27b, qwen3-next-80b, tiny")
      ->capture_default_str();
  sub->add_option("--tokens", opt->tokens, "Tokens in the one prefill sequence")->capture_default_str();
  sub->add_option("--layers", opt->layers, "Run only the first N GDN layers (0: all)");
  sub->add_option("--checkpoint", opt->checkpoint,
                  "HF checkpoint directory (config.json + *.safetensors); default: synthetic weights");
  sub->add_option("--arm", opt->arm, "Recurrence arm: auto, serial, wy-fp32, wy-tc")->capture_default_str();
  sub->add_option("--json", opt->json, "Append a JSON record (DESIGN.md §7, op \"layer\") to FILE");
  sub->add_option("--iters", opt->iters, "Timed passes of the stack, of its GEMMs alone and of the per-stage instrumented stack (medians)")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--seed", opt->seed, "Seed of synthetic weights and hidden states");
  sub->callback([opt] { exit_code() = run_prefill(*opt); });
}

}  // namespace gdn::cli
