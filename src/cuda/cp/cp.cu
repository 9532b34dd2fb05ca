// Device ops of context-parallel prefill (src/cp/cp_internal.hpp): workspace, identity fill,
// state copies between layouts, and the segment-map combine. The passes themselves are ordinary
// arm calls; nothing here runs the recurrence.
//
// Variants:
//   fill_identity_kernel  count K x K identities, one thread per element (grid-stride)
//   copy_states_kernel    [K, V] <-> [V, K] state copies with item strides, one thread per element
//   combine_kernel        X_{j+1} = M_j X_j + B_j per (n, h) and 16-column slice, fp32 FMA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cp/cp_internal.hpp"
#include "cuda/common/common.cuh"

namespace gdn::cp {
namespace {

struct ElementwiseCfg {
  static constexpr int kThreads = 256;     // one warp-multiple block; the ops are memory-bound
  static constexpr int kMaxBlocks = 4096;  // grid-stride beyond ~30 blocks per SM of an H200
};

struct CombineCfg {
  static constexpr int kCols = 16;       // value columns per block: 2 x 256 x 16 x 4 B = 32 KiB
                                         // of double-buffered X at K = 256 (static limit 48 KiB)
  static constexpr int kRowGroups = 16;  // threads per column; each owns rows a = r (mod 16)
  static constexpr int kThreads = kCols * kRowGroups;  // 256
  static constexpr int kMaxK = 256;                    // validate() bound on K
};
static_assert(CombineCfg::kThreads % 32 == 0, "whole warps");

__global__ void fill_identity_kernel(float* __restrict__ p, std::int64_t total, int K) {
  const std::int64_t KK = std::int64_t(K) * K;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t e = i % KK;
    p[i] = (e / K == e % K) ? 1.f : 0.f;
  }
}

__global__ void copy_states_kernel(StateCopy c) {
  const std::int64_t KV = std::int64_t(c.K) * c.V;
  const std::int64_t total = std::int64_t(c.N) * c.HV * KV;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    // i enumerates the destination in its own layout: item n, head h, then rows x cols.
    const std::int64_t n = i / (c.HV * KV), r = i % (c.HV * KV), h = r / KV, e = r % KV;
    const int d = c.dst_vk ? int(e % c.K) : int(e / c.V);    // key index
    const int col = c.dst_vk ? int(e / c.K) : int(e % c.V);  // value index
    const std::int64_t se = c.src_vk ? std::int64_t(col) * c.K + d : std::int64_t(d) * c.V + col;
    c.dst[n * c.dst_item + h * KV + e] = c.src[n * c.src_item + h * KV + se];
  }
}

// grid (N * HV, ceil(V / kCols)); each block carries a [K, kCols] slice of X through all steps.
__global__ void __launch_bounds__(CombineCfg::kThreads) combine_kernel(Combine c) {
  using Cfg = CombineCfg;
  __shared__ float x_KC[2][Cfg::kMaxK][Cfg::kCols];  // 32 KiB: X_j and X_{j+1}
  const int n = blockIdx.x / c.HV, h = blockIdx.x % c.HV;
  const int tc = threadIdx.x % Cfg::kCols, tr = threadIdx.x / Cfg::kCols;
  const int col = blockIdx.y * Cfg::kCols + tc;
  const bool live = col < c.V;
  const int K = c.K, V = c.V;
  float* out = c.out + n * c.o_n + h * c.o_h;
  const float* x0 = c.x0 ? c.x0 + n * c.x_n + h * c.x_h : nullptr;
  for (int a = tr; a < K; a += Cfg::kRowGroups) {
    const float x = live && x0 ? x0[std::int64_t(a) * V + col] : 0.f;
    x_KC[0][a][tc] = x;
    if (live) out[std::int64_t(a) * V + col] = x;
  }
  __syncthreads();
  int cur = 0;
  for (int j = 0; j < c.steps; ++j) {
    const float* M = c.m + j * c.m_step + n * c.m_n + h * c.m_h;  // [K, K]
    const float* B = c.b + j * c.b_step + n * c.b_n + h * c.b_h;  // [K, V]
    float* o = out + (j + 1) * c.o_step;
    for (int a = tr; a < K; a += Cfg::kRowGroups) {
      const float* m_row = M + std::int64_t(a) * K;
      float acc = live ? B[std::int64_t(a) * V + col] : 0.f;
#pragma unroll 8
      for (int b = 0; b < K; ++b) acc = fmaf(__ldg(m_row + b), x_KC[cur][b][tc], acc);
      x_KC[cur ^ 1][a][tc] = acc;
      if (live) o[std::int64_t(a) * V + col] = acc;
    }
    __syncthreads();
    cur ^= 1;
  }
}

int blocks_for(std::int64_t total) {
  const std::int64_t b = (total + ElementwiseCfg::kThreads - 1) / ElementwiseCfg::kThreads;
  return static_cast<int>(std::clamp<std::int64_t>(b, 1, ElementwiseCfg::kMaxBlocks));
}

}  // namespace

void* device_workspace_new(void* stream, std::size_t bytes, void* borrowed, std::uint64_t capacity,
                           Status* st) {
  auto* s = new cuda::Scratch(static_cast<cudaStream_t>(stream), borrowed, capacity);
  *st = s->alloc(bytes);
  return s;
}
void device_workspace_delete(void* ws) { delete static_cast<cuda::Scratch*>(ws); }
char* device_workspace_data(void* ws) { return static_cast<cuda::Scratch*>(ws)->as<char>(); }

Status device_zero(void* stream, float* p, std::size_t count) {
  if (count == 0) return Status::Ok();
  GDN_CUDA_TRY(cudaMemsetAsync(p, 0, count * sizeof(float), static_cast<cudaStream_t>(stream)));
  return Status::Ok();
}

Status device_fill_identity(void* stream, float* p, std::int64_t count, int K) {
  const std::int64_t total = count * K * K;
  if (total == 0) return Status::Ok();
  fill_identity_kernel<<<blocks_for(total), ElementwiseCfg::kThreads, 0,
                         static_cast<cudaStream_t>(stream)>>>(p, total, K);
  GDN_CUDA_LAUNCH_CHECK("fill_identity_kernel");
  return Status::Ok();
}

Status device_copy_states(void* stream, const StateCopy& c) {
  const std::int64_t total = std::int64_t(c.N) * c.HV * c.K * c.V;
  if (total == 0) return Status::Ok();
  copy_states_kernel<<<blocks_for(total), ElementwiseCfg::kThreads, 0,
                       static_cast<cudaStream_t>(stream)>>>(c);
  GDN_CUDA_LAUNCH_CHECK("copy_states_kernel");
  return Status::Ok();
}

Status device_combine(void* stream, const Combine& c) {
  if (c.K > CombineCfg::kMaxK)
    return Status::Unsupported("cp combine: K > " + std::to_string(CombineCfg::kMaxK));
  if (std::int64_t(c.N) * c.HV == 0 || c.V == 0) return Status::Ok();
  const dim3 grid(static_cast<unsigned>(std::int64_t(c.N) * c.HV),
                  static_cast<unsigned>((c.V + CombineCfg::kCols - 1) / CombineCfg::kCols));
  combine_kernel<<<grid, CombineCfg::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(c);
  GDN_CUDA_LAUNCH_CHECK("combine_kernel");
  return Status::Ok();
}

}  // namespace gdn::cp
