// `gdn bench`: times one prefill case on a preset geometry and reports it against the cost-model
// floor (tools/gdn/cost.hpp), with errors vs the fp64 oracle on a sample of heads.
//
// Variants in this file:
//   run_gpu   device tensors; CUDA events around each call; L2 flushed by a memset before each
//   run_cpu   host tensors (the cpu arm); steady_clock around each call
// Inputs (as a model would give them): bf16 q, k (unit-norm per head, as after l2norm), bf16 v,
// fp32 g with slow decay (g in [-0.05, -0.005]), fp32 beta = sigmoid(N(0,1)) in (0, 1), fp32 h0
// in, hT out; varlen as `seqs` equal-length sequences.
// The timed runs pass check_values = false (no input scan): the figure is the arm's own time.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "check/check.hpp"
#include "gdn/commands.hpp"
#include "gdn/cp.hpp"
#include "gdn/cost.hpp"
#include "gdn/gdn.hpp"
#include "gdn/presets.hpp"

#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gdn::cli {
namespace {

struct BenchOptions {
  std::string preset = "qwen3.5-27b";
  std::int64_t tokens = 0;  // 0: the default of the device that runs
  int seqs = 0;             // 0: 1 (prefill) or 256 (decode)
  std::string arm = "auto";
  std::string dtype = "bf16";
  int iters = 0;    // 0: auto (about 1 s of GPU time, or about 20 s on the CPU)
  int warmup = -1;  // -1: 3 on the GPU, 1 on the CPU
  std::string json;
  bool no_check = false;
  bool decode = false;
  int verify_tokens = 0;
  std::uint64_t seed = 1;
  int cp = 0;  // > 0: prefill_cp with this many segments (virtual ranks on one device)
};

// Default size of the CPU fallback: finishes in well under a minute on 2 cores (docs/NOTES.md).
constexpr std::int64_t kCpuDefaultTokens = 4096;
constexpr std::int64_t kGpuDefaultTokens = 32768;
constexpr int kSampledHeads = 4;  // value heads checked against the fp64 oracle

// ---------------------------------------------------------------- small utilities

std::string today_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// Progress on stderr: stage lines always, a live counter only on a terminal.
struct Progress {
  bool tty = isatty(2) != 0;
  void stage(const std::string& s) const { std::fprintf(stderr, "[bench] %s\n", s.c_str()); }
  void tick(const char* what, int i, int n) const {
    if (!tty) return;
    std::fprintf(stderr, "\r[bench] %s %d/%d", what, i, n);
    if (i == n) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
};

// Runs fn(begin, end) over [0, n) on all hardware threads.
void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn) {
  const int nt = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::int64_t per = (n + nt - 1) / nt;
  std::vector<std::thread> th;
  for (int i = 0; i < nt; ++i) {
    std::int64_t b = i * per, e = std::min(n, b + per);
    if (b < e) th.emplace_back(fn, b, e);
  }
  for (auto& t : th) t.join();
}

// Counter-based random numbers: the inputs do not depend on the thread count.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double uniform01(std::uint64_t key) {
  return (static_cast<double>(mix(key) >> 11) + 0.5) * 0x1.0p-53;
}
float normal(std::uint64_t key) {
  const double u1 = uniform01(2 * key), u2 = uniform01(2 * key + 1);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}
float from_bf16(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// IEEE half, round to nearest even; inputs here are finite and |x| < 65504.
std::uint16_t to_f16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const int e = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  std::uint32_t m = u & 0x7fffffu;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // subnormal half
    if (e < -10) return static_cast<std::uint16_t>(sign);
    m |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = (static_cast<std::uint32_t>(e) << 10) | (m >> 13);
  const std::uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}
float from_f16(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  int e = (h >> 10) & 0x1f;
  std::uint32_t m = h & 0x3ffu, u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    if (m == 0) {
      u = sign;
    } else {
      e = 1;
      while (!(m & 0x400u)) {
        m <<= 1;
        --e;
      }
      u = sign | (static_cast<std::uint32_t>(e - 15 + 127) << 23) | ((m & 0x3ffu) << 13);
    }
  } else {
    u = sign | (static_cast<std::uint32_t>(e - 15 + 127) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------- inputs

// Host inputs of one case. q, k, v, o are stored in the io dtype: 16-bit patterns in *16 or
// floats in *32 (exactly one of the two is used).
struct Inputs {
  Problem prob;
  DType io = DType::bf16;
  std::int64_t T = 0;
  int N = 1;
  std::vector<std::int32_t> cu;              // [N+1]
  std::vector<std::uint16_t> q16, k16, v16;  // [T, HK, K], [T, HK, K], [T, HV, V]
  std::vector<float> q32, k32, v32;          // same shapes, for io = f32
  std::vector<float> g, beta;                // [T, HV]
  std::vector<float> h0;                     // [N, HV, K, V]

  bool half() const { return io != DType::f32; }
  float decode(std::uint16_t h) const { return io == DType::bf16 ? from_bf16(h) : from_f16(h); }
  std::uint16_t encode(float f) const { return io == DType::bf16 ? to_bf16(f) : to_f16(f); }
  const void* ptr(const std::vector<std::uint16_t>& a, const std::vector<float>& b) const {
    return half() ? static_cast<const void*>(a.data()) : static_cast<const void*>(b.data());
  }
  // Decoded element i of q, k or v.
  float at(const std::vector<std::uint16_t>& a, const std::vector<float>& b, std::int64_t i) const {
    return half() ? decode(a[i]) : b[i];
  }
  std::size_t io_bytes(std::int64_t n) const { return n * dtype_size(io); }
};

Inputs make_inputs(const Problem& p, DType io, std::int64_t T, int N, std::uint64_t seed) {
  Inputs in;
  in.prob = p;
  in.io = io;
  in.T = T;
  in.N = N;
  in.cu.resize(N + 1);
  for (int n = 0; n <= N; ++n) in.cu[n] = static_cast<std::int32_t>(T / N * n);
  const std::int64_t nq = T * p.HK * p.K, nv = T * p.HV * p.V;
  if (in.half()) {
    in.q16.resize(nq), in.k16.resize(nq), in.v16.resize(nv);
  } else {
    in.q32.resize(nq), in.k32.resize(nq), in.v32.resize(nv);
  }
  in.g.resize(T * p.HV), in.beta.resize(T * p.HV);
  in.h0.resize(std::int64_t(N) * p.HV * p.K * p.V);
  const std::uint64_t base = mix(seed);
  auto stream = [&](std::uint64_t id) { return mix(base ^ (id << 56)); };
  const std::uint64_t sq = stream(1), sk = stream(2), sv = stream(3), sg = stream(4),
                      sb = stream(5), sh = stream(6);
  auto store = [&](std::vector<std::uint16_t>& a16, std::vector<float>& a32, std::int64_t i,
                   float x) {
    if (in.half())
      a16[i] = in.encode(x);
    else
      a32[i] = x;
  };
  parallel_for(T, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> row(std::max(p.K, p.V));
    for (std::int64_t t = t0; t < t1; ++t) {
      // q, k: unit-norm per head, as after the model's l2norm.
      for (int pass = 0; pass < 2; ++pass) {
        auto& a16 = pass ? in.k16 : in.q16;
        auto& a32 = pass ? in.k32 : in.q32;
        const std::uint64_t s = pass ? sk : sq;
        for (int h = 0; h < p.HK; ++h) {
          const std::int64_t off = (t * p.HK + h) * p.K;
          double ss = 0;
          for (int i = 0; i < p.K; ++i) {
            row[i] = normal(s + off + i);
            ss += double(row[i]) * row[i];
          }
          const float inv = static_cast<float>(1.0 / std::sqrt(ss));
          for (int i = 0; i < p.K; ++i) store(a16, a32, off + i, row[i] * inv);
        }
      }
      for (int h = 0; h < p.HV; ++h) {
        const std::int64_t off = (t * p.HV + h) * p.V;
        for (int i = 0; i < p.V; ++i) store(in.v16, in.v32, off + i, normal(sv + off + i));
        const std::int64_t gi = t * p.HV + h;
        in.g[gi] = static_cast<float>(-(0.005 + 0.045 * uniform01(sg + gi)));
        in.beta[gi] = static_cast<float>(1.0 / (1.0 + std::exp(-normal(sb + gi))));
      }
    }
  });
  for (std::size_t i = 0; i < in.h0.size(); ++i) in.h0[i] = 0.1f * normal(sh + i);
  return in;
}

// Views over device or host copies of the inputs; o and hT are separate buffers.
PrefillArgs make_args(const Inputs& in, const void* q, const void* k, const void* v, const float* g,
                      const float* beta, void* o, const float* h0, float* hT) {
  const Problem& p = in.prob;
  PrefillArgs a;
  a.q = TensorView::contiguous(q, in.io, {in.T, p.HK, p.K});
  a.k = TensorView::contiguous(k, in.io, {in.T, p.HK, p.K});
  a.v = TensorView::contiguous(v, in.io, {in.T, p.HV, p.V});
  a.g = TensorView::contiguous(g, DType::f32, {in.T, p.HV});
  a.beta = TensorView::contiguous(beta, DType::f32, {in.T, p.HV});
  a.o = TensorView::contiguous(o, in.io, {in.T, p.HV, p.V});
  a.h0 = TensorView::contiguous(h0, DType::f32, {in.N, p.HV, p.K, p.V});
  a.hT = TensorView::contiguous(hT, DType::f32, {in.N, p.HV, p.K, p.V});
  a.cu_seqlens = in.cu.data();
  a.num_seqs = in.N;
  a.check_values = false;
  return a;
}

// ---------------------------------------------------------------- timing

struct Timing {
  std::vector<double> ms;  // per timed call
  double host_ms = 0;      // median host time of the API call (GPU: launch overhead)
  double flush_ms = 0;     // median time of the L2 flush before each call (GPU)
  double first_call_ms = -1;  // GPU: wall time of the process's first prefill call, inputs
                              // already on the device, until its stream is synchronized
  int warmup = 0;
  Arm ran = Arm::automatic;
  std::string note;
  Status status;
  // Outputs of the last call, for the oracle check: o of the sampled heads, all of hT.
  std::vector<int> heads;
  std::vector<std::vector<double>> o_heads;  // [heads][T * V]
  std::vector<float> hT;                     // [N, HV, K, V]
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int auto_iters(double one_ms, double budget_ms, int lo, int hi) {
  if (!(one_ms > 0)) return lo;
  return std::clamp(static_cast<int>(std::ceil(budget_ms / one_ms)), lo, hi);
}

// Copies o of head h out of an [T, HV, V] buffer (host) into doubles.
std::vector<double> extract_head(const Inputs& in, const void* o, int h) {
  const Problem& p = in.prob;
  std::vector<double> out(in.T * p.V);
  for (std::int64_t t = 0; t < in.T; ++t)
    for (int j = 0; j < p.V; ++j) {
      const std::int64_t i = (t * p.HV + h) * p.V + j;
      out[t * p.V + j] = in.half() ? in.decode(static_cast<const std::uint16_t*>(o)[i])
                                   : static_cast<const float*>(o)[i];
    }
  return out;
}

Timing run_cpu(const Inputs& in, Arm arm, int warmup, int iters, const std::vector<int>& heads,
               const Progress& prog, int cp) {
  Timing tm;
  tm.heads = heads;
  const Problem& p = in.prob;
  std::vector<std::uint8_t> o(in.io_bytes(in.T * p.HV * p.V));
  tm.hT.assign(in.h0.size(), 0.f);
  PrefillArgs a =
      make_args(in, in.ptr(in.q16, in.q32), in.ptr(in.k16, in.k32), in.ptr(in.v16, in.v32),
                in.g.data(), in.beta.data(), o.data(), in.h0.data(), tm.hT.data());
  a.on_device = false;
  auto call = [&]() -> double {
    RunInfo info;
    auto t0 = std::chrono::steady_clock::now();
    tm.status = cp > 0 ? prefill_cp(p, a, cp, arm, &info) : prefill(p, a, arm, &info);
    auto t1 = std::chrono::steady_clock::now();
    tm.ran = info.ran;
    tm.note = info.note;
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  double first = 0;
  for (int i = 0; i < warmup; ++i) {
    prog.tick("warm-up", i + 1, warmup);
    first = call();
    if (!tm.status.ok()) return tm;
  }
  tm.warmup = warmup;
  // Auto: about 20 s of timed calls, at least one (the 2-core CI box must finish in a minute).
  if (iters <= 0) iters = auto_iters(first, 20000, 1, 20);
  for (int i = 0; i < iters; ++i) {
    prog.tick("timing", i + 1, iters);
    tm.ms.push_back(call());
    if (!tm.status.ok()) return tm;
  }
  tm.host_ms = median(tm.ms);
  for (int h : heads) tm.o_heads.push_back(extract_head(in, o.data(), h));
  return tm;
}

#ifdef GDN_WITH_CUDA
#define BENCH_CUDA(call)                                                                     \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      tm.status = Status::Cuda(fmt::format("{} failed: {}", #call, cudaGetErrorString(e_))); \
      return tm;                                                                             \
    }                                                                                        \
  } while (0)

// Device buffer freed at scope exit.
struct DevBuf {
  void* p = nullptr;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

Timing run_gpu(const Inputs& in, Arm arm, int warmup, int iters, const std::vector<int>& heads,
               const Progress& prog, int cp) {
  Timing tm;
  tm.heads = heads;
  const Problem& p = in.prob;
  const std::size_t nq = in.io_bytes(in.T * p.HK * p.K), nv = in.io_bytes(in.T * p.HV * p.V);
  const std::size_t ng = in.T * p.HV * sizeof(float), ns = in.h0.size() * sizeof(float);
  int dev = 0, l2 = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  // L2 flush: a memset of 4x the L2 (at least 256 MiB) before each timed call; it also covers
  // the host's launch overhead, which is measured and reported.
  const std::size_t flush_bytes = std::max<std::size_t>(4ull * l2, 256ull << 20);
  DevBuf q, k, v, g, beta, o, h0, hT, cu, flush;
  for (auto [buf, n] : {std::pair{&q, nq},
                        {&k, nq},
                        {&v, nv},
                        {&g, ng},
                        {&beta, ng},
                        {&o, nv},
                        {&h0, ns},
                        {&hT, ns},
                        {&cu, in.cu.size() * 4},
                        {&flush, flush_bytes}})
    BENCH_CUDA(cudaMalloc(&buf->p, std::max<std::size_t>(n, 1)));
  BENCH_CUDA(cudaMemcpy(q.p, in.ptr(in.q16, in.q32), nq, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(k.p, in.ptr(in.k16, in.k32), nq, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(v.p, in.ptr(in.v16, in.v32), nv, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(g.p, in.g.data(), ng, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(beta.p, in.beta.data(), ng, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(h0.p, in.h0.data(), ns, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(cu.p, in.cu.data(), in.cu.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemset(o.p, 0xff, nv));  // NaN pattern: an unwritten element shows in o_err
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> stream_guard(
      stream, [](cudaStream_t s) { cudaStreamDestroy(s); });

  PrefillArgs a =
      make_args(in, q.p, k.p, v.p, static_cast<float*>(g.p), static_cast<float*>(beta.p), o.p,
                static_cast<float*>(h0.p), static_cast<float*>(hT.p));
  a.on_device = true;
  a.cu_seqlens_device = static_cast<const std::int32_t*>(cu.p);
  a.stream = stream;
  auto call = [&]() -> double {
    RunInfo info;
    auto t0 = std::chrono::steady_clock::now();
    tm.status = cp > 0 ? prefill_cp(p, a, cp, arm, &info) : prefill(p, a, arm, &info);
    auto t1 = std::chrono::steady_clock::now();
    tm.ran = info.ran;
    tm.note = info.note;
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };

  cudaEvent_t w0, w1;
  BENCH_CUDA(cudaEventCreate(&w0));
  BENCH_CUDA(cudaEventCreate(&w1));
  BENCH_CUDA(cudaEventRecord(w0, stream));
  for (int i = 0; i < warmup; ++i) {
    prog.tick("warm-up", i + 1, warmup);
    const auto f0 = std::chrono::steady_clock::now();
    call();
    if (!tm.status.ok()) return tm;
    if (i == 0) {  // first call in this process: module loading, attributes, pools included
      BENCH_CUDA(cudaStreamSynchronize(stream));
      tm.first_call_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - f0).count();
    }
  }
  BENCH_CUDA(cudaEventRecord(w1, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  BENCH_CUDA(cudaGetLastError());
  float warm_ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&warm_ms, w0, w1));
  cudaEventDestroy(w0);
  cudaEventDestroy(w1);
  tm.warmup = warmup;
  if (iters <= 0) iters = auto_iters(warmup ? warm_ms / warmup : 0, 1000, 10, 200);

  std::vector<cudaEvent_t> ev(3 * iters);
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  std::vector<double> host;
  for (int i = 0; i < iters; ++i) {
    prog.tick("timing", i + 1, iters);
    BENCH_CUDA(cudaEventRecord(ev[3 * i], stream));
    BENCH_CUDA(cudaMemsetAsync(flush.p, i & 0xff, flush_bytes, stream));
    BENCH_CUDA(cudaEventRecord(ev[3 * i + 1], stream));
    host.push_back(call());
    if (!tm.status.ok()) break;
    BENCH_CUDA(cudaEventRecord(ev[3 * i + 2], stream));
  }
  cudaError_t sync = cudaStreamSynchronize(stream);
  if (tm.status.ok() && sync != cudaSuccess)
    tm.status = Status::Cuda(fmt::format("kernel failed: {}", cudaGetErrorString(sync)));
  std::vector<double> flush_ms;
  for (std::size_t i = 0; tm.status.ok() && i < host.size(); ++i) {
    float a_ms = 0, b_ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&a_ms, ev[3 * i], ev[3 * i + 1]));
    BENCH_CUDA(cudaEventElapsedTime(&b_ms, ev[3 * i + 1], ev[3 * i + 2]));
    flush_ms.push_back(a_ms);
    tm.ms.push_back(b_ms);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  if (!tm.status.ok()) return tm;
  tm.host_ms = median(host);
  tm.flush_ms = median(flush_ms);

  // Outputs of the last call: o of the sampled heads (strided copy), all of hT.
  const std::size_t es = dtype_size(in.io), row = p.V * es, pitch = p.HV * p.V * es;
  std::vector<std::uint8_t> oh(in.T * row);
  for (int h : heads) {
    BENCH_CUDA(cudaMemcpy2D(oh.data(), row, static_cast<std::uint8_t*>(o.p) + h * row, pitch, row,
                            in.T, cudaMemcpyDeviceToHost));
    std::vector<double> out(in.T * p.V);
    for (std::int64_t i = 0; i < in.T * p.V; ++i)
      out[i] = in.half() ? in.decode(reinterpret_cast<const std::uint16_t*>(oh.data())[i])
                         : reinterpret_cast<const float*>(oh.data())[i];
    tm.o_heads.push_back(std::move(out));
  }
  tm.hT.resize(in.h0.size());
  BENCH_CUDA(cudaMemcpy(tm.hT.data(), hT.p, ns, cudaMemcpyDeviceToHost));
  return tm;
}
#endif

// ---------------------------------------------------------------- oracle check

// Value heads to check: kSampledHeads spread over [0, HV).
std::vector<int> sample_heads(int HV) {
  std::vector<int> h;
  const int n = std::min(HV, kSampledHeads);
  for (int i = 0; i < n; ++i) {
    int x = n == 1 ? 0 : static_cast<int>(std::lround(double(i) * (HV - 1) / (n - 1)));
    if (h.empty() || h.back() != x) h.push_back(x);
  }
  return h;
}

// A one-head case holding value head h and its key head, for the fp64 oracle.
check::Case head_case(const Inputs& in, int h) {
  const Problem& p = in.prob;
  const int kh = p.kv_head(h);
  check::Case c;
  c.spec.seq_lens.clear();
  for (int n = 0; n < in.N; ++n) c.spec.seq_lens.push_back(in.cu[n + 1] - in.cu[n]);
  c.spec.HK = 1, c.spec.HV = 1, c.spec.K = p.K, c.spec.V = p.V;
  c.spec.head_map = HeadMap::grouped;
  c.spec.io_dtype = in.io, c.spec.out_dtype = in.io, c.spec.beta_dtype = DType::f32;
  c.spec.decay = check::Decay::slow;
  c.spec.beta = check::BetaKind::random;
  c.spec.h0 = true;
  c.spec.l2norm_in_kernel = false;
  c.spec.state_layout = StateLayout::kv;
  c.prob = Problem::make(1, 1, p.K, p.V);
  c.prob.scale = p.scale;
  c.cu_seqlens = in.cu;
  c.T = in.T;
  // Both the stored 16-bit patterns and the decoded values are filled (check.hpp's Case holds
  // "fp32 storage or decoded values" in *32).
  const std::int64_t T = in.T;
  c.q32.resize(T * p.K), c.k32.resize(T * p.K), c.v32.resize(T * p.V);
  if (in.half()) c.q16.resize(T * p.K), c.k16.resize(T * p.K), c.v16.resize(T * p.V);
  c.g.resize(T), c.beta32.resize(T);
  for (std::int64_t t = 0; t < T; ++t) {
    for (int i = 0; i < p.K; ++i) {
      const std::int64_t src = (t * p.HK + kh) * p.K + i, dst = t * p.K + i;
      c.q32[dst] = in.at(in.q16, in.q32, src);
      c.k32[dst] = in.at(in.k16, in.k32, src);
      if (in.half()) c.q16[dst] = in.q16[src], c.k16[dst] = in.k16[src];
    }
    for (int j = 0; j < p.V; ++j) {
      const std::int64_t src = (t * p.HV + h) * p.V + j, dst = t * p.V + j;
      c.v32[dst] = in.at(in.v16, in.v32, src);
      if (in.half()) c.v16[dst] = in.v16[src];
    }
    c.g[t] = in.g[t * p.HV + h];
    c.beta32[t] = in.beta[t * p.HV + h];
  }
  const std::int64_t S = std::int64_t(p.K) * p.V;
  c.h0.resize(in.N * S);
  for (int n = 0; n < in.N; ++n)
    std::copy_n(in.h0.begin() + (std::int64_t(n) * p.HV + h) * S, S, c.h0.begin() + n * S);
  return c;
}

struct Errors {
  std::optional<double> o, state;
  std::int64_t nan_o = 0, nan_state = 0;
};

// Relative RMS errors vs the fp64 serial oracle over the sampled heads (all tokens, all
// sequences); the heads run in parallel.
Errors oracle_errors(const Inputs& in, const Timing& tm) {
  const Problem& p = in.prob;
  const std::size_t nh = tm.heads.size();
  std::vector<check::Oracle> ref(nh);
  std::vector<std::thread> th;
  for (std::size_t i = 0; i < nh; ++i)
    th.emplace_back([&, i] { ref[i] = check::ref_serial(head_case(in, tm.heads[i])); });
  for (auto& t : th) t.join();
  std::vector<double> ro, go, rs, gs;
  const std::int64_t S = std::int64_t(p.K) * p.V;
  for (std::size_t i = 0; i < nh; ++i) {
    ro.insert(ro.end(), ref[i].o.begin(), ref[i].o.end());
    go.insert(go.end(), tm.o_heads[i].begin(), tm.o_heads[i].end());
    rs.insert(rs.end(), ref[i].hT.begin(), ref[i].hT.end());
    for (int n = 0; n < in.N; ++n) {
      auto b = tm.hT.begin() + (std::int64_t(n) * p.HV + tm.heads[i]) * S;
      gs.insert(gs.end(), b, b + S);
    }
  }
  Errors e;
  const check::Metrics mo = check::compare(ro, go), ms = check::compare(rs, gs);
  e.o = mo.rel_rms, e.state = ms.rel_rms;
  e.nan_o = mo.nan_count, e.nan_state = ms.nan_count;
  return e;
}

// ---------------------------------------------------------------- the command

std::string fmt_rate(double per_s, const char* unit) {
  if (per_s >= 1e12) return fmt::format("{:.2f} T{}", per_s / 1e12, unit);
  if (per_s >= 1e9) return fmt::format("{:.2f} G{}", per_s / 1e9, unit);
  if (per_s >= 1e6) return fmt::format("{:.2f} M{}", per_s / 1e6, unit);
  if (per_s >= 1e3) return fmt::format("{:.2f} k{}", per_s / 1e3, unit);
  return fmt::format("{:.3g} {}", per_s, unit);
}

nlohmann::ordered_json opt_num(const std::optional<double>& x) {
  if (!x || !std::isfinite(*x)) return nullptr;
  return *x;
}

int run_bench(const BenchOptions& opt) {
  if (opt.decode) {
    DecodeBenchOptions d;
    d.preset = opt.preset;
    if (opt.seqs > 0) d.seqs = opt.seqs;
    d.verify_tokens = opt.verify_tokens;
    d.json_path = opt.json;
    if (opt.iters > 0) d.iters = opt.iters;
    return bench_decode(d);
  }
  Preset preset;
  if (!find_preset(opt.preset, &preset)) {
    std::string names;
    for (auto& n : preset_names()) names += " " + n;
    std::fprintf(stderr, "gdn bench: unknown preset '%s'; known:%s\n", opt.preset.c_str(),
                 names.c_str());
    return 1;
  }
  Arm arm;
  if (!parse_arm(opt.arm, &arm)) {
    std::fprintf(stderr, "gdn bench: unknown arm '%s' (auto|cpu|serial|wy-fp32|wy-tc)\n",
                 opt.arm.c_str());
    return 1;
  }
  DType io;
  if (!parse_dtype(opt.dtype, &io)) {
    std::fprintf(stderr, "gdn bench: unknown dtype '%s' (bf16|f16|f32)\n", opt.dtype.c_str());
    return 1;
  }
  const DeviceInfo dev = device_info();
  // The GPU runs unless the cpu arm is asked for or there is no usable device.
  std::string gpu_why;
  const bool gpu_ok = arm_available(Arm::serial, dev, nullptr);
  if (!dev.cuda_built)
    gpu_why = "this build has no CUDA (nvcc was not found at configure time)";
  else if (dev.device_count == 0)
    gpu_why = "no CUDA device found";
  else if (!gpu_ok)
    gpu_why = fmt::format("device {} is sm_{}, the GPU arms need sm_80+", dev.name, dev.sm);
  const bool on_gpu = gpu_ok && arm != Arm::cpu;
  std::string fallback;
  if (!on_gpu && arm != Arm::cpu) {
    fallback =
        fmt::format("CPU fallback: {} -> running the cpu arm{}", gpu_why,
                    opt.tokens ? "" : fmt::format(" at the CPU default T = {}", kCpuDefaultTokens));
    arm = Arm::cpu;
  }
  const int seqs = opt.seqs > 0 ? opt.seqs : 1;
  const std::int64_t T =
      opt.tokens > 0 ? opt.tokens : (on_gpu ? kGpuDefaultTokens : kCpuDefaultTokens);
  if (T % seqs != 0) {
    std::fprintf(stderr, "gdn bench: --tokens %lld is not a multiple of --seqs %d\n",
                 static_cast<long long>(T), seqs);
    return 1;
  }
  const int warmup = opt.warmup >= 0 ? opt.warmup : (on_gpu ? 3 : 1);

  const std::string date = today_utc(), commit = commit_id();
  const CpuPeak cpu = cpu_fp32_peak();
  const std::string device =
      on_gpu ? dev.name : fmt::format("CPU: {} ({} threads)", cpu.model, cpu.cores);
  std::string cuda = dev.cuda_built ? dev.cuda_runtime : "";
  std::printf("gdn bench | device %s%s | CUDA %s | commit %s | %s\n", device.c_str(),
              on_gpu ? fmt::format(" (sm_{}, {} SMs)", dev.sm, dev.multiprocessors).c_str() : "",
              dev.cuda_built ? cuda.c_str() : "not built", commit.c_str(), date.c_str());
  if (!fallback.empty()) std::printf("%s\n", fallback.c_str());
  const Problem prob = preset.problem();
  std::printf(
      "case   %s (HK %d, HV %d, K %d, V %d)%s, %lld tokens in %d sequence%s of %lld; "
      "%s q/k/v/o, fp32 g/beta/state, h0 in, hT out\n",
      preset.name.c_str(), prob.HK, prob.HV, prob.K, prob.V,
      preset.note.empty() ? "" : (" [" + preset.note + "]").c_str(), static_cast<long long>(T),
      seqs, seqs > 1 ? "s" : "", static_cast<long long>(T / seqs), to_string(io));
  std::fflush(stdout);

  Progress prog;
  prog.stage(fmt::format("generating inputs ({} tokens)", T));
  const Inputs in = make_inputs(prob, io, T, seqs, opt.seed);
  const std::vector<int> heads = sample_heads(prob.HV);
  prog.stage(on_gpu ? "running on the GPU" : "running on the CPU");
  Timing tm;
#ifdef GDN_WITH_CUDA
  if (on_gpu)
    tm = run_gpu(in, arm, warmup, opt.iters, heads, prog, opt.cp);
  else
    tm = run_cpu(in, arm, warmup, opt.iters, heads, prog, opt.cp);
#else
  tm = run_cpu(in, arm, warmup, opt.iters, heads, prog, opt.cp);
#endif
  if (!tm.status.ok()) {
    std::fprintf(stderr, "gdn bench: arm %s failed: %s\n", to_string(tm.ran),
                 tm.status.message().c_str());
    return tm.status.code() == Code::unsupported ? 2 : 1;
  }
  std::printf("arm    %s (requested %s)%s\n", to_string(tm.ran), to_string(arm),
              tm.note.empty() ? "" : (": " + tm.note).c_str());
  if (opt.cp > 0)
    std::printf("cp     prefill_cp, %d segments per sequence as virtual ranks in one process\n",
                opt.cp);

  CostInputs ci;
  ci.HK = prob.HK, ci.HV = prob.HV, ci.K = prob.K, ci.V = prob.V;
  ci.seq_lens.assign(seqs, T / seqs);
  ci.io = io, ci.out = io, ci.beta = DType::f32;
  const Cost cost = prefill_cost(ci);
  const double ms = median(tm.ms);
  const double s = ms / 1e3;
  const double tbps = cost.bytes() / s / 1e12, tflops = cost.flops() / s / 1e12;
  const auto [mn, mx] = std::minmax_element(tm.ms.begin(), tm.ms.end());

  std::printf("timing median of %zu after %d warm-up, %s; check_values=false in timed runs\n",
              tm.ms.size(), tm.warmup,
              on_gpu ? "CUDA events, L2 flushed before each call" : "steady_clock");
  std::printf("  ms         %.4f  (min %.4f, max %.4f)\n", ms, *mn, *mx);
  if (tm.first_call_ms >= 0)
    std::printf("  first call %.1f ms (first prefill in this process, stream synchronized)\n",
                tm.first_call_ms);
  std::printf("  tokens/s   %s\n", fmt_rate(T / s, "tok/s").c_str());
  double floor_ms = 0;
  std::string bound;
  if (on_gpu) {
    const Ceilings c = h200_ceilings();
    floor_ms = floor_seconds(cost, c, &bound) * 1e3;
    std::printf("  achieved   %.3f TB/s of %.2f (%.1f%%)  [%.4g GB moved]\n", tbps,
                c.bytes_per_s / 1e12, 100 * tbps * 1e12 / c.bytes_per_s, cost.bytes() / 1e9);
    std::printf("  arithmetic %.1f TFLOP/s of %.0f (%.1f%%)  [%.4g GFLOP, chunked form C=64]\n",
                tflops, c.flops_per_s / 1e12, 100 * tflops * 1e12 / c.flops_per_s,
                cost.flops() / 1e9);
    std::printf("  floor      %.4f ms (%s-bound; %s) -> this run at %.1f%% of floor speed\n",
                floor_ms, bound.c_str(), c.source.c_str(), 100 * floor_ms / ms);
    if (tm.host_ms > tm.flush_ms)
      std::printf("  note       host API time %.3f ms > flush %.3f ms: launch gaps may be in ms\n",
                  tm.host_ms, tm.flush_ms);
  } else {
    const Ceilings c{0, cpu.flops_per_s, cpu.formula};
    floor_ms = floor_seconds(cost, c, &bound) * 1e3;
    std::printf("  achieved   %.2f GB/s  [%.4g GB moved; no measured CPU bandwidth ceiling]\n",
                cost.bytes() / s / 1e9, cost.bytes() / 1e9);
    std::printf(
        "  arithmetic %.2f GFLOP/s = %.1f%% of this machine's fp32 peak  [%.4g GFLOP, "
        "chunked form C=64]\n",
        cost.flops() / s / 1e9, 100 * cost.flops() / s / cpu.flops_per_s, cost.flops() / 1e9);
    std::printf("  peak       %s\n", cpu.formula.c_str());
    std::printf("  floor      %.3f ms (arithmetic at peak)\n", floor_ms);
  }
  std::fflush(stdout);

  Errors err;
  if (!opt.no_check) {
    prog.stage(fmt::format("fp64 oracle on {} value heads", heads.size()));
    err = oracle_errors(in, tm);
    std::string hs;
    for (int h : heads) hs += fmt::format("{}{}", hs.empty() ? "" : " ", h);
    std::printf(
        "errors vs fp64 serial oracle (value heads %s, all tokens): o %.3e, state %.3e "
        "(relative RMS)%s\n",
        hs.c_str(), *err.o, *err.state,
        err.nan_o + err.nan_state
            ? fmt::format("; NaN: o {}, state {}", err.nan_o, err.nan_state).c_str()
            : "");
  } else {
    std::printf("errors not checked (--no-check)\n");
  }

  if (!opt.json.empty()) {
    nlohmann::ordered_json j;
    j["date"] = date;
    j["commit"] = commit;
    j["device"] = on_gpu ? dev.name : device;
    j["cuda"] = dev.cuda_built ? nlohmann::ordered_json(cuda) : nlohmann::ordered_json(nullptr);
    j["impl"] = "gdn";
    j["arm"] = to_string(tm.ran);
    j["op"] = opt.cp > 0 ? "cp" : "prefill";
    j["preset"] = preset.name;
    j["tokens"] = T;
    j["seqs"] = seqs;
    j["ms"] = ms;
    j["o_err"] = opt_num(err.o);
    j["state_err"] = opt_num(err.state);
    j["tbps"] = tbps;
    j["tflops"] = tflops;
    j["floor_ms"] = floor_ms;
    j["floor_bound"] = bound;
    j["iters"] = tm.ms.size();
    j["warmup"] = tm.warmup;
    j["check_values"] = false;
    {  // wy-tc's operand scheme switch as set for this run (auto: half where it can run)
      const char* prec = std::getenv("GDN_WYTC_PRECISION");
      j["wy_tc_precision"] = prec && *prec ? prec : "auto";
      const char* u16 = std::getenv("GDN_WYTC_U16");  // half scheme: U in fp16 unless "0"
      j["wy_tc_u16"] = !(u16 && std::string(u16) == "0");
      const char* d16 = std::getenv("GDN_WYTC_D16");  // fp16 U: ST as one fp16 product unless "0"
      j["wy_tc_d16"] = !(d16 && std::string(d16) == "0");
      // varlen groups (several sequences): "0" off (the default), n groups, "negctl"
      const char* vg = std::getenv("GDN_WYTC_VGROUPS");
      j["wy_tc_vgroups"] = vg && *vg ? vg : "0";
    }
    j["dtype"] = to_string(io);
    j["requested_arm"] = to_string(arm);
    j["first_call_ms"] = tm.first_call_ms >= 0 ? nlohmann::ordered_json(tm.first_call_ms)
                                               : nlohmann::ordered_json(nullptr);
    if (opt.cp > 0) {  // one process, one device: no cp_efficiency (that needs P real GPUs)
      j["ranks"] = opt.cp;
      j["virtual_ranks"] = true;
    }
    if (!on_gpu) j["cpu_peak_pct"] = 100 * cost.flops() / s / cpu.flops_per_s;
    std::ofstream f(opt.json, std::ios::app);
    if (!f) {
      std::fprintf(stderr, "gdn bench: cannot open %s for appending\n", opt.json.c_str());
      return 1;
    }
    f << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

void add_bench(CLI::App& app) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Time a prefill (or, with --decode, a decode/verify step) on a preset geometry");
  std::string presets;
  for (auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  sub->add_option("--preset", opt->preset, "Geometry: " + presets)->capture_default_str();
  sub->add_option("--tokens", opt->tokens,
                  "Total tokens over all sequences (default: 32768 on a GPU, 4096 on the CPU)");
  sub->add_option("--seqs", opt->seqs, "Number of equal-length sequences (default 1; decode 256)");
  sub->add_option("--arm", opt->arm, "auto|cpu|serial|wy-fp32|wy-tc")->capture_default_str();
  sub->add_option("--dtype", opt->dtype, "q/k/v/o dtype: bf16|f16|f32")->capture_default_str();
  sub->add_option("--iters", opt->iters, "Timed calls (default: auto, about 1 s GPU / 20 s CPU)");
  sub->add_option("--warmup", opt->warmup, "Untimed calls first (default 3 GPU, 1 CPU)");
  sub->add_option("--json", opt->json, "Append one JSON line per case (DESIGN.md §7) to FILE");
  sub->add_flag("--no-check", opt->no_check, "Skip the fp64 oracle errors (recorded as null)");
  sub->add_flag("--decode", opt->decode, "Decode benchmark (one token per sequence)");
  sub->add_option("--verify-tokens", opt->verify_tokens,
                  "With --decode: speculative verify of N tokens per sequence");
  sub->add_option("--seed", opt->seed, "Input seed")->capture_default_str();
  sub->add_option("--cp", opt->cp,
                  "Context-parallel prefill: P segments per sequence, run as virtual ranks on one "
                  "device (prefill_cp)")
      ->check(CLI::Range(1, 1024));
  sub->callback([opt] { exit_code() = run_bench(*opt); });
}

}  // namespace gdn::cli
