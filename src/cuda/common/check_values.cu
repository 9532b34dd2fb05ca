// Device-side input value scan for `check_values`: NaN/Inf anywhere in q, k, v, g, beta, h0;
// g > 0 (a growing state); beta outside [0, 1]. One pass over the inputs, then one 4-byte copy
// back and a stream synchronization — so engines on the hot path turn it off. The same pass
// notes (not an error) whether any |q|, |k| > kWyTcHalfMaxQK or |v|, |h0| > kWyTcHalfMaxV: the
// wy-tc arm then runs its split scheme instead of the half one (gdn.hpp).
#include <cstdint>
#include <string>

#include "cuda/common/common.cuh"

namespace gdn::cuda {
namespace {

enum Flag : unsigned {
  kQ = 1u << 0, kK = 1u << 1, kV = 1u << 2, kG = 1u << 3, kGPos = 1u << 4,
  kBeta = 1u << 5, kBetaRange = 1u << 6, kH0 = 1u << 7,
  kWide = 1u << 8  // outside the half scheme's domain: information, not an error
};

// Block-wide: `flag` if any thread saw a non-finite value, kWide if any saw one above the half
// scheme's limit; one atomic per block.
__device__ __forceinline__ void report_block(bool bad, bool big, unsigned flag, unsigned* out) {
  const bool any_bad = __syncthreads_or(bad), any_big = __syncthreads_or(big);
  if (threadIdx.x == 0 && (any_bad || any_big))
    atomicOr(out, (any_bad ? flag : 0u) | (any_big ? kWide : 0u));
}

// Scans a [rows, H, D] strided tensor (innermost contiguous) for non-finite values, and for
// finite values above `wide` in magnitude (kWide).
template <typename T>
__global__ void scan3(const T* x, std::int64_t rows, int H, int D, std::int64_t s0, std::int64_t s1,
                      unsigned flag, float wide, unsigned* out) {
  const std::int64_t n = rows * H * D;
  bool bad = false, big = false;
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    const std::int64_t d = i % D, h = (i / D) % H, r = i / ((std::int64_t)D * H);
    const float v = to_f32(x[r * s0 + h * s1 + d]);
    bad |= !isfinite(v);
    big |= fabsf(v) > wide;  // false for NaN; true for Inf (already an error)
  }
  report_block(bad, big, flag, out);
}

// g and beta: [T, HV] with row stride.
template <typename B>
__global__ void scan_gates(const float* g, std::int64_t gs, const B* beta, std::int64_t bs,
                           std::int64_t T, int HV, unsigned* out) {
  unsigned f = 0;
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < T * HV;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    const std::int64_t t = i / HV, h = i % HV;
    const float gv = g[t * gs + h];
    const float bv = to_f32(beta[t * bs + h]);
    if (!isfinite(gv)) f |= kG;
    else if (gv > 0.f) f |= kGPos;
    if (!isfinite(bv)) f |= kBeta;
    else if (bv < 0.f || bv > 1.f) f |= kBetaRange;
  }
  if (f) atomicOr(out, f);
}

__global__ void scan_flat(const float* x, std::int64_t n, unsigned flag, float wide,
                          unsigned* out) {
  bool bad = false, big = false;
  for (std::int64_t i = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; i < n;
       i += (std::int64_t)gridDim.x * blockDim.x) {
    bad |= !isfinite(x[i]);
    big |= fabsf(x[i]) > wide;
  }
  report_block(bad, big, flag, out);
}

int grid_for(std::int64_t n) {
  const std::int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace
}  // namespace gdn::cuda

namespace gdn::detail {

Status cuda_check_values(const Problem& p, const PrefillArgs& a, const Seqs& s, bool* wide) {
  using namespace gdn::cuda;
  if (wide) *wide = false;
  cudaStream_t st = stream_of(a);
  // The flag word: from the start of the caller's workspace when given (the arm takes the
  // workspace after this scan, in stream order), else from the pool.
  static_assert(sizeof(unsigned) == kCheckValuesWorkspaceBytes);
  Scratch scratch(a);
  Status status = scratch.alloc(kCheckValuesWorkspaceBytes);
  if (!status.ok()) return status;
  unsigned* flags = scratch.as<unsigned>();
  GDN_CUDA_TRY(cudaMemsetAsync(flags, 0, sizeof(unsigned), st));
  const std::int64_t T = s.T;
  if (T > 0) {
    dispatch_dtype(a.q.dtype, [&](auto tag) {
      using E = decltype(tag);
      scan3<E><<<grid_for(T * p.HK * p.K), 256, 0, st>>>(static_cast<const E*>(a.q.data), T, p.HK, p.K,
                                                        a.q.stride[0], a.q.stride[1], kQ, kWyTcHalfMaxQK, flags);
      scan3<E><<<grid_for(T * p.HK * p.K), 256, 0, st>>>(static_cast<const E*>(a.k.data), T, p.HK, p.K,
                                                        a.k.stride[0], a.k.stride[1], kK, kWyTcHalfMaxQK, flags);
      scan3<E><<<grid_for(T * p.HV * p.V), 256, 0, st>>>(static_cast<const E*>(a.v.data), T, p.HV, p.V,
                                                        a.v.stride[0], a.v.stride[1], kV, kWyTcHalfMaxV, flags);
      return 0;
    });
    GDN_CUDA_LAUNCH_CHECK("scan3");
    if (a.beta.dtype == DType::bf16)
      scan_gates<__nv_bfloat16><<<grid_for(T * p.HV), 256, 0, st>>>(
          static_cast<const float*>(a.g.data), a.g.stride[0],
          static_cast<const __nv_bfloat16*>(a.beta.data), a.beta.stride[0], T, p.HV, flags);
    else
      scan_gates<float><<<grid_for(T * p.HV), 256, 0, st>>>(
          static_cast<const float*>(a.g.data), a.g.stride[0], static_cast<const float*>(a.beta.data),
          a.beta.stride[0], T, p.HV, flags);
    GDN_CUDA_LAUNCH_CHECK("scan_gates");
  }
  if (a.h0.defined() && a.h0.numel() > 0) {
    scan_flat<<<grid_for(a.h0.numel()), 256, 0, st>>>(static_cast<const float*>(a.h0.data),
                                                      a.h0.numel(), kH0, kWyTcHalfMaxV, flags);
    GDN_CUDA_LAUNCH_CHECK("scan_flat");
  }
  unsigned host = 0;
  GDN_CUDA_TRY(cudaMemcpyAsync(&host, flags, sizeof(unsigned), cudaMemcpyDeviceToHost, st));
  GDN_CUDA_TRY(cudaStreamSynchronize(st));
  if (wide) *wide = (host & kWide) != 0;
  host &= ~static_cast<unsigned>(kWide);
  if (host == 0) return Status::Ok();
  std::string msg = "input values rejected:";
  const std::pair<unsigned, const char*> names[] = {
      {kQ, " q has NaN/Inf;"}, {kK, " k has NaN/Inf;"}, {kV, " v has NaN/Inf;"},
      {kG, " g has NaN/Inf;"}, {kGPos, " g > 0 (log-decay must be <= 0);"},
      {kBeta, " beta has NaN/Inf;"}, {kBetaRange, " beta outside [0, 1];"},
      {kH0, " h0 has NaN/Inf;"}};
  for (auto& [f, n] : names)
    if (host & f) msg += n;
  msg.pop_back();
  return Status::Invalid(msg);
}

}  // namespace gdn::detail
