// `gdn bench --decode [--seqs N] [--verify-tokens T] [--json FILE]`: decode / verify kernel time
// (CUDA graph of `iters` launches, replayed; median per launch), effective state traffic vs the
// 4.27 TB/s copy ceiling of the H200, and o/state error vs the fp64 oracle for the run's inputs.
// Verify (T > 0) is reported next to T single-token decodes of the same N.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "cuda/decode/decode_ref.hpp"
#include "gdn/commands.hpp"
#include "gdn/decode.hpp"

#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gdn::cli {

namespace {
constexpr double kCopyCeilingTBps = 4.27;  // H200 measured copy (read + write), DESIGN.md §6

struct Geometry {
  int HK, HV, K, V;
};
bool preset_geometry(const std::string& p, Geometry* g) {
  if (p == "qwen3.5-27b") return *g = {16, 48, 128, 128}, true;
  if (p == "qwen3-next-80b" || p == "qwen3.5-35b") return *g = {16, 32, 128, 128}, true;
  if (p == "qwen3.5-397b" || p == "qwen3.5-122b") return *g = {16, 64, 128, 128}, true;
  return false;
}
}  // namespace

#ifndef GDN_WITH_CUDA
int bench_decode(const DecodeBenchOptions&) {
  std::fprintf(stderr, "gdn bench --decode: this build has no CUDA\n");
  return 2;
}
#else

namespace {

#define BENCH_CU(x)                                                               \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));               \
      return -1.0;                                                                \
    }                                                                             \
  } while (0)

struct DevFixture {
  std::vector<void*> owned;
  decode_ref::Fixture::Ptrs p{};
  void* up(decode_ref::Buf& b) {
    if (b.raw.empty()) return nullptr;
    void* d = nullptr;
    if (cudaMalloc(&d, b.raw.size()) != cudaSuccess) return nullptr;
    cudaMemcpy(d, b.raw.data(), b.raw.size(), cudaMemcpyHostToDevice);
    owned.push_back(d);
    return d;
  }
  const std::int32_t* up_i(const std::vector<std::int32_t>& v) {
    if (v.empty()) return nullptr;
    void* d = nullptr;
    if (cudaMalloc(&d, v.size() * 4) != cudaSuccess) return nullptr;
    cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    owned.push_back(d);
    return static_cast<const std::int32_t*>(d);
  }
  explicit DevFixture(decode_ref::Fixture& f) {
    p.q = up(f.q), p.k = up(f.k), p.v = up(f.v), p.o = up(f.o), p.g = up(f.g);
    p.A_log = up(f.A_log), p.a = up(f.a), p.dt_bias = up(f.dt_bias), p.beta = up(f.beta);
    p.state = up(f.state), p.cache = up(f.cache);
    p.idx = up_i(f.spec.idx), p.acc = up_i(f.spec.acc);
  }
  ~DevFixture() {
    for (void* d : owned) cudaFree(d);
  }
};

// Median microseconds per launch: `iters` launches captured in one graph, replayed `reps` times.
template <typename Launch>
double time_graph_us(Launch&& launch, int iters, int reps, cudaStream_t st) {
  for (int i = 0; i < 3; ++i)
    if (!launch(st)) return -1.0;  // warm-up (and a launch error surfaces here)
  BENCH_CU(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < iters; ++i) launch(st);
  BENCH_CU(cudaStreamEndCapture(st, &graph));
  BENCH_CU(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  std::vector<double> per;
  BENCH_CU(cudaGraphLaunch(exec, st));  // warm replay
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(e0, st);
    cudaGraphLaunch(exec, st);
    cudaEventRecord(e1, st);
    BENCH_CU(cudaEventSynchronize(e1));
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    per.push_back(1e3 * ms / iters);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

}  // namespace

int bench_decode(const DecodeBenchOptions& opt) {
  Geometry geo;
  if (!preset_geometry(opt.preset, &geo)) {
    std::fprintf(stderr, "gdn bench --decode: unknown preset '%s'\n", opt.preset.c_str());
    return 2;
  }
  if (opt.seqs < 1 || opt.verify_tokens < 0 || opt.verify_tokens > 16 || opt.iters < 1) {
    std::fprintf(stderr, "gdn bench --decode: need seqs >= 1, 0 <= verify-tokens <= 16, iters >= 1\n");
    return 2;
  }
  const DeviceInfo dev = device_info();
  if (dev.device_count == 0) {
    std::fprintf(stderr, "gdn bench --decode: no CUDA device\n");
    return 2;
  }
  const bool is_verify = opt.verify_tokens > 0;
  const int T = is_verify ? opt.verify_tokens : 1;
  // Kernel variant (src/cuda/decode/decode_variants.hpp); unset = the library's default.
  const char* variant_env = std::getenv("GDN_DECODE_VARIANT");
  const std::string variant = variant_env && *variant_env ? variant_env : "default";
  std::printf("# gdn bench --decode  device=%s  cuda=%s  commit=%s  preset=%s  variant=%s\n",
              dev.name.c_str(), dev.cuda_runtime.c_str(), commit_id(), opt.preset.c_str(),
              variant.c_str());

  decode_ref::FixtureSpec s;
  s.N = opt.seqs, s.S = opt.seqs, s.T = T, s.verify = is_verify;
  s.HK = geo.HK, s.HV = geo.HV, s.K = geo.K, s.V = geo.V;
  s.io = DType::bf16, s.o = DType::bf16, s.state = DType::f32, s.l2norm = true;
  for (int n = 0; n < s.N; ++n) s.idx.push_back((n * 7 + 3) % s.N);  // a permutation for N % 7 != 0
  if (s.N % 7 == 0)
    for (int n = 0; n < s.N; ++n) s.idx[n] = s.N - 1 - n;
  if (is_verify)
    for (int n = 0; n < s.N; ++n) s.acc.push_back(n % (T + 1));
  decode_ref::Fixture f(s);
  DevFixture d(f);
  if (!d.p.state || !d.p.o) {
    std::fprintf(stderr, "gdn bench --decode: device allocation failed\n");
    return 1;
  }
  cudaStream_t st;
  cudaStreamCreate(&st);
  DecodeArgs args = f.args(d.p);
  args.on_device = true;
  args.stream = st;
  args.state_indices_host = f.spec.idx.data();
  args.num_accepted_host = f.spec.acc.empty() ? nullptr : f.spec.acc.data();
  auto call = [&](const DecodeArgs& a) { return is_verify ? verify(f.prob, a) : decode(f.prob, a); };

  // Accuracy: one call from the fixture's initial state, compared with the fp64 oracle.
  Status stt = call(args);
  if (!stt.ok()) {
    std::fprintf(stderr, "gdn bench --decode: %s\n", stt.message().c_str());
    return 1;
  }
  cudaStreamSynchronize(st);
  cudaMemcpy(f.o.raw.data(), d.p.o, f.o.raw.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(f.state.raw.data(), d.p.state, f.state.raw.size(), cudaMemcpyDeviceToHost);
  const auto rep = f.check(false);
  const bool acc_ok = rep.ok();
  if (!acc_ok) std::fprintf(stderr, "accuracy check FAILED:\n%s\n", rep.str().c_str());

  // Timing: launches only (validation with host copies is host work; time the kernel path).
  DecodeArgs targs = args;
  targs.state_indices_host = targs.num_accepted_host = nullptr;
  const double us = time_graph_us([&](cudaStream_t) { return call(targs).ok(); }, opt.iters, 21, st);
  if (us < 0) return 1;
  std::int64_t live = 0;
  std::int64_t accepted_live = 0;
  for (int n = 0; n < s.N; ++n)
    if (s.idx[n] >= 0) ++live, accepted_live += (s.acc.empty() || s.acc[n] > 0);
  // Effective state traffic: each live tile read once; written once if any token is committed.
  const double tile = double(s.HV) * s.K * s.V * dtype_size(s.state);
  const double bytes = tile * (live + accepted_live);
  const double tbps = bytes / (us * 1e-6) / 1e12;
  std::printf("%-7s N=%-4d T=%-2d  %9.2f us/call  %6.3f TB/s effective state traffic (%.0f%% of "
              "%.2f TB/s copy)  o_err=%.2e state_err=%.2e util o=%.2f state=%.2f %s\n",
              is_verify ? "verify" : "decode", s.N, T, us, tbps, 100 * tbps / kCopyCeilingTBps,
              kCopyCeilingTBps, rep.o.rel_rms(), rep.state.rel_rms(), rep.o.max_util,
              rep.state.max_util, acc_ok ? "ok" : "FAILED");

  double decode_x_T_us = -1;
  if (is_verify) {  // T single-token decodes of the same N, for the comparison the issue asks
    decode_ref::FixtureSpec s1 = s;
    s1.verify = false, s1.T = 1, s1.acc.clear();
    decode_ref::Fixture f1(s1);
    DevFixture d1(f1);
    DecodeArgs a1 = f1.args(d1.p);
    a1.on_device = true, a1.stream = st;
    const double one = time_graph_us([&](cudaStream_t) { return decode(f1.prob, a1).ok(); },
                                     opt.iters, 21, st);
    decode_x_T_us = one * T;
    std::printf("        vs %d x decode N=%d: %9.2f us (%.2fx)\n", T, s.N, decode_x_T_us,
                decode_x_T_us / us);
  }

  if (!opt.json_path.empty()) {
    char date[16];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    nlohmann::json j = {{"date", date},
                        {"commit", commit_id()},
                        {"device", dev.name},
                        {"cuda", dev.cuda_runtime},
                        {"impl", "gdn"},
                        {"arm", "decode"},
                        {"variant", variant},
                        {"op", is_verify ? "verify" : "decode"},
                        {"preset", opt.preset},
                        {"tokens", std::int64_t(s.N) * T},
                        {"seqs", s.N},
                        {"verify_tokens", T},
                        {"ms", us * 1e-3},
                        {"us", us},
                        {"tbps", tbps},
                        {"ceiling_tbps", kCopyCeilingTBps},
                        {"state_dtype", "f32"},
                        {"o_err", rep.o.rel_rms()},
                        {"state_err", rep.state.rel_rms()},
                        {"o_util", rep.o.max_util},
                        {"state_util", rep.state.max_util},
                        {"check_ok", acc_ok}};
    if (is_verify) j["decode_x_T_ms"] = decode_x_T_us * 1e-3;
    std::ofstream out(opt.json_path, std::ios::app);
    out << j.dump() << "\n";
  }
  cudaStreamDestroy(st);
  return acc_ok ? 0 : 1;
}
#endif

}  // namespace gdn::cli
