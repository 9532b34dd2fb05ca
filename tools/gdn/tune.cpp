// `gdn tune`: measures the GPU arms (serial, wy-fp32, wy-tc) over a grid of sequence lengths,
// for one sequence and for several, at one preset; prints the table with the serial/WY crossover
// length and writes the per-device table that `auto` loads (src/core/auto.hpp, "gdn-tune-1").
// Inputs: bf16 q, k (unit-norm rows), bf16 v, fp32 g in [-0.05, -0.005], beta in (0.1, 0.9),
// h0 in (zeros), hT out; CUDA events around each call, median. Without a GPU: exit 2.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/auto.hpp"
#include "gdn/commands.hpp"
#include "gdn/gdn.hpp"
#include "gdn/presets.hpp"

#ifdef GDN_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace gdn::cli {
namespace {

struct TuneOptions {
  std::string preset = "qwen3.5-27b";
  std::string out;                       // default: detail::default_tune_path(device name)
  std::vector<int> seqs = {1, 8};        // sequence counts measured
  std::int64_t max_len = 131072;         // longest sequence for seqs = 1
  std::int64_t max_tokens = 131072;      // cap on seqs x len for seqs > 1
  std::int64_t min_len = 64;
  double budget_ms = 150;                // timed GPU time per point (3..20 calls)
};

#ifdef GDN_WITH_CUDA
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
float u01(std::uint64_t key) { return static_cast<float>((mix(key) >> 11) * 0x1.0p-53); }

struct Dev {
  void* p = nullptr;
  ~Dev() {
    if (p) cudaFree(p);
  }
};

#define TUNE_CUDA(call)                                                                    \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "gdn tune: %s failed: %s\n", #call, cudaGetErrorString(e_));    \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

// Fills a device buffer of `total` elements by repeating a host pattern of `n` elements.
template <typename T>
int fill_repeat(void* dst, const std::vector<T>& pat, std::size_t total) {
  auto* d = static_cast<T*>(dst);
  const std::size_t n = pat.size();
  TUNE_CUDA(cudaMemcpy(d, pat.data(), std::min(n, total) * sizeof(T), cudaMemcpyHostToDevice));
  for (std::size_t done = n; done < total; done *= 2)
    TUNE_CUDA(cudaMemcpy(d + done, d, std::min(done, total - done) * sizeof(T),
                         cudaMemcpyDeviceToDevice));
  return 0;
}

int run_tune(const TuneOptions& opt) {
  const DeviceInfo dev = device_info();
  if (!dev.cuda_built || dev.device_count == 0) {
    std::fprintf(stderr, "gdn tune: %s; nothing measured\n",
                 dev.cuda_built ? "no CUDA device" : "this build has no CUDA");
    return 2;
  }
  Preset pr;
  if (!find_preset(opt.preset, &pr)) {
    std::fprintf(stderr, "gdn tune: unknown preset '%s'\n", opt.preset.c_str());
    return 2;
  }
  const Problem p = pr.problem();
  const int maxN = *std::max_element(opt.seqs.begin(), opt.seqs.end());
  std::int64_t T = opt.max_len;
  for (int n : opt.seqs)
    if (n > 1) T = std::max<std::int64_t>(T, std::min<std::int64_t>(opt.max_tokens, n * opt.max_len));
  std::printf("gdn tune | device %s (sm_%d, %d SMs) | preset %s (HK %d, HV %d, K %d, V %d) | "
              "bf16 q/k/v/o, fp32 g/beta/state, h0 in, hT out\n",
              dev.name.c_str(), dev.sm, dev.multiprocessors, pr.name.c_str(), p.HK, p.HV, p.K, p.V);

  // Device inputs for T tokens, a 4096-token host pattern repeated.
  const std::int64_t P = std::min<std::int64_t>(T, 4096);
  std::vector<__nv_bfloat16> qk(P * p.HK * p.K), vv(P * p.HV * p.V);
  std::vector<float> gg(P * p.HV), bb(P * p.HV);
  for (std::int64_t r = 0; r < P * p.HK; ++r) {
    double ss = 0;
    std::vector<float> x(p.K);
    for (int d = 0; d < p.K; ++d) ss += (x[d] = u01(3 * (r * p.K + d)) - 0.5f) * x[d];
    for (int d = 0; d < p.K; ++d) qk[r * p.K + d] = __float2bfloat16(x[d] / std::sqrt(ss));
  }
  for (std::size_t i = 0; i < vv.size(); ++i) vv[i] = __float2bfloat16(u01(3 * i + 1) - 0.5f);
  for (std::size_t i = 0; i < gg.size(); ++i) {
    gg[i] = -0.005f - 0.045f * u01(3 * i + 2);
    bb[i] = 0.1f + 0.8f * u01(7 * i + 5);
  }
  Dev q, k, v, g, beta, o, h0, hT;
  const std::size_t nq = T * p.HK * p.K, nv = T * p.HV * p.V, ng = T * p.HV;
  const std::size_t ns = static_cast<std::size_t>(maxN) * p.HV * p.K * p.V;
  for (auto [b, bytes] : {std::pair{&q, nq * 2}, {&k, nq * 2}, {&v, nv * 2}, {&g, ng * 4},
                          {&beta, ng * 4}, {&o, nv * 2}, {&h0, ns * 4}, {&hT, ns * 4}})
    TUNE_CUDA(cudaMalloc(&b->p, bytes));
  if (fill_repeat(q.p, qk, nq) || fill_repeat(k.p, qk, nq) || fill_repeat(v.p, vv, nv) ||
      fill_repeat(g.p, gg, ng) || fill_repeat(beta.p, bb, ng))
    return 1;
  TUNE_CUDA(cudaMemset(h0.p, 0, ns * 4));
  cudaEvent_t e0, e1;
  TUNE_CUDA(cudaEventCreate(&e0));
  TUNE_CUDA(cudaEventCreate(&e1));

  // One point: median ms of `arm` on N sequences of `len`, or a negative value when it did not
  // run as that arm.
  auto measure = [&](Arm arm, int N, std::int64_t len) -> double {
    const std::int64_t TT = N * len;
    std::vector<std::int32_t> cu(N + 1);
    for (int n = 0; n <= N; ++n) cu[n] = static_cast<std::int32_t>(n * len);
    PrefillArgs a;
    a.q = TensorView::contiguous(q.p, DType::bf16, {TT, p.HK, p.K});
    a.k = TensorView::contiguous(k.p, DType::bf16, {TT, p.HK, p.K});
    a.v = TensorView::contiguous(v.p, DType::bf16, {TT, p.HV, p.V});
    a.g = TensorView::contiguous(g.p, DType::f32, {TT, p.HV});
    a.beta = TensorView::contiguous(beta.p, DType::f32, {TT, p.HV});
    a.o = TensorView::contiguous(o.p, DType::bf16, {TT, p.HV, p.V});
    a.h0 = TensorView::contiguous(h0.p, DType::f32, {N, p.HV, p.K, p.V});
    a.hT = TensorView::contiguous(hT.p, DType::f32, {N, p.HV, p.K, p.V});
    a.cu_seqlens = cu.data();
    a.num_seqs = N;
    a.on_device = true;
    a.check_values = false;
    RunInfo info;
    auto call = [&]() -> double {
      cudaEventRecord(e0);
      const Status st = prefill(p, a, arm, &info);
      cudaEventRecord(e1);
      if (!st.ok() || cudaEventSynchronize(e1) != cudaSuccess) {
        std::fprintf(stderr, "gdn tune: %s at %d x %lld: %s\n", to_string(arm), N,
                     static_cast<long long>(len), st.ok() ? "CUDA error" : st.message().c_str());
        return -1;
      }
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      return ms;
    };
    const double first = call();
    if (first < 0 || info.ran != arm) return -1;
    const int iters = std::clamp(static_cast<int>(opt.budget_ms / std::max(first, 1e-3)), 3, 20);
    std::vector<double> ms;
    for (int i = 0; i < iters; ++i) {
      const double m = call();
      if (m < 0) return -1;
      ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };

  detail::TuneTable table;
  table.device = dev.name;
  table.sm = dev.sm;
  const Arm arms[] = {Arm::serial, Arm::wy_fp32, Arm::wy_tc};
  for (int N : opt.seqs) {
    const std::int64_t top = N == 1 ? opt.max_len : std::min(opt.max_len, opt.max_tokens / N);
    std::printf("\n%d sequence%s x len, %d value heads: median ms (CUDA events)\n", N,
                N == 1 ? "" : "s", p.HV);
    std::printf("%9s %10s %10s %10s   %s\n", "len", "serial", "wy-fp32", "wy-tc", "fastest");
    std::int64_t crossover = -1;
    for (std::int64_t len = opt.min_len; len <= top; len *= 2) {
      double t[3];
      for (int i = 0; i < 3; ++i) {
        t[i] = measure(arms[i], N, len);
        if (t[i] > 0) table.points.push_back({arms[i], len, N, p.HV, t[i]});
      }
      int best = -1;
      for (int i = 0; i < 3; ++i)
        if (t[i] > 0 && (best < 0 || t[i] < t[best])) best = i;
      const double wy = std::min(t[1] > 0 ? t[1] : INFINITY, t[2] > 0 ? t[2] : INFINITY);
      if (crossover < 0 && t[0] > 0 && wy < t[0]) crossover = len;
      auto cell = [](double x) { return x > 0 ? std::to_string(x).substr(0, 9) : std::string("-"); };
      std::printf("%9lld %10s %10s %10s   %s\n", static_cast<long long>(len), cell(t[0]).c_str(),
                  cell(t[1]).c_str(), cell(t[2]).c_str(), best < 0 ? "-" : to_string(arms[best]));
    }
    if (crossover > 0)
      std::printf("serial/WY crossover (%d seq): WY first faster at len %lld\n", N,
                  static_cast<long long>(crossover));
    else
      std::printf("serial/WY crossover (%d seq): none up to len %lld (serial fastest throughout)\n",
                  N, static_cast<long long>(top));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (table.points.empty()) {
    std::fprintf(stderr, "gdn tune: no arm ran; no table written\n");
    return 1;
  }
  const std::string path = opt.out.empty() ? detail::default_tune_path(dev.name) : opt.out;
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  std::ofstream f(path);
  if (!f || !(f << detail::tune_table_json(table))) {
    std::fprintf(stderr, "gdn tune: cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("\nwrote %s (%zu points); auto loads it on this device (GDN_TUNE_FILE overrides)\n",
              path.c_str(), table.points.size());
  return 0;
}
#else
int run_tune(const TuneOptions&) {
  std::fprintf(stderr, "gdn tune: this build has no CUDA; nothing measured\n");
  return 2;
}
#endif

}  // namespace

void add_tune(CLI::App& app) {
  auto opt = std::make_shared<TuneOptions>();
  CLI::App* sub =
      app.add_subcommand("tune", "Measure the GPU arms over sequence lengths; write auto's table");
  sub->add_option("--preset", opt->preset, "geometry preset (default qwen3.5-27b)");
  sub->add_option("--out", opt->out, "table file (default ~/.cache/gdn/tune-<device>.json)");
  sub->add_option("--seqs", opt->seqs, "sequence counts to measure (default 1 8)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-len", opt->max_len, "longest sequence (default 131072)")
      ->check(CLI::Range(std::int64_t{64}, std::int64_t{1} << 22));
  sub->add_option("--max-tokens", opt->max_tokens,
                  "cap on sequences x length for several sequences (default 131072)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--budget-ms", opt->budget_ms, "timed GPU ms per point (default 150)")
      ->check(CLI::PositiveNumber);
  sub->callback([opt] { exit_code() = run_tune(*opt); });
}

}  // namespace gdn::cli
