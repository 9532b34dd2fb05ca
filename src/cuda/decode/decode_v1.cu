// Decode variant v1 (GDN_DECODE_VARIANT=v1): the first kernel (9d8c67c), kept as a measured
// baseline (H200, qwen3.5-27b: N = 256 3.21 TB/s, N = 1 3.96 us, verify T = 4 N = 64 150.8 us).
// One block per (sequence, value head, V slice), grid (N, HV, V / BV), the slice held in registers
// across the T <= 16 tokens, 16-byte streaming loads/stores, two block barriers per token.
// Same per-token arithmetic as v2 (decode.cu), whose header has the step and its error bound.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/common.cuh"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/decode_variants.hpp"
#include "gdn/decode.hpp"

namespace gdn::detail {
namespace {

using cuda::from_f32;
using cuda::to_f32;

// Tile configuration for one (TS, K, BV) variant.
template <typename TS, int K, int BV>
struct V1Tile {
  // 4 warps: a 16 KiB fp32 tile per block at BV = 32 keeps >= 8 blocks (128 KiB of loads) in
  // flight per SM, well above the ~32 KiB/SM that Little's law asks for 4.3 TB/s at ~1 us.
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  // State elements per 16-byte access: the widest global load/store.
  static constexpr int kVec = 16 / static_cast<int>(sizeof(TS));
  // Threads across the BV columns of a row; must divide 32 so a warp holds whole row groups
  // and the K reduction starts with shuffles.
  static constexpr int kLanesV = BV / kVec;
  static constexpr int kRowGroups = kThreads / kLanesV;  // threads down the K rows
  static constexpr int kRows = K / kRowGroups;           // rows per thread (registers: kRows*kVec)
  static_assert(BV % kVec == 0, "BV must hold whole 16-byte vectors");
  static_assert(kLanesV >= 1 && 32 % kLanesV == 0, "a warp must hold whole row groups");
  static_assert(kRows >= 1 && kRows * kRowGroups == K, "K must split evenly over row groups");
  static_assert(K % 32 == 0, "q/k staging gives each lane K/32 elements");
};

__device__ __forceinline__ float v1_load_any(const void* p, DType d, std::int64_t i) {
  switch (d) {
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// 16-byte state vector <-> fp32, streaming (evict-first): each byte is touched once per call.
template <typename TS, int VEC>
__device__ __forceinline__ void load_vec(const TS* p, float (&x)[VEC]) {
  if constexpr (sizeof(TS) == 4) {
    const float4 r = __ldcs(reinterpret_cast<const float4*>(p));
    x[0] = r.x, x[1] = r.y, x[2] = r.z, x[3] = r.w;
  } else {
    const uint4 r = __ldcs(reinterpret_cast<const uint4*>(p));
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // bf16 -> f32 is a 16-bit shift: no address taken
      x[2 * e] = __uint_as_float(w[e] << 16);
      x[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
    }
  }
}
template <typename TS, int VEC>
__device__ __forceinline__ void store_vec(TS* p, const float (&x)[VEC]) {
  if constexpr (sizeof(TS) == 4) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(x[0], x[1], x[2], x[3]));
  } else {
    unsigned w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      w[e] = unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(x[2 * e]))) |
             unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(x[2 * e + 1]))) << 16;
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
}

template <typename TI, typename TS, int K, int BV>
__global__ void __launch_bounds__(128) v1_kernel(const DecodeLaunch L) {
  using C = V1Tile<TS, K, BV>;
  constexpr int R = C::kRows, VEC = C::kVec;
  const int n = blockIdx.x, h = blockIdx.y, vb = blockIdx.z;
  const int slot = L.idx[n];
  if (slot < 0) return;  // padding row: nothing read, nothing written
  const int acc = L.acc ? L.acc[n] : L.T;
  if (slot >= L.S || acc < 0 || acc > L.T) {
    if (threadIdx.x == 0 && L.err)
      atomicOr(L.err, (slot >= L.S ? kErrStateIndex : 0) | (acc < 0 || acc > L.T ? kErrNumAccepted : 0));
    return;
  }
  const int V = L.V;
  const int kh = L.grouped ? h / (L.HV / L.HK) : h % L.HK;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vl = tid % C::kLanesV, rg = tid / C::kLanesV;
  const int col0 = vb * BV + vl * VEC;

  TS* st = static_cast<TS*>(L.state) + (static_cast<std::int64_t>(slot) * L.HV + h) * K * V;
  float s[R][VEC];
#pragma unroll
  for (int r = 0; r < R; ++r) load_vec<TS, VEC>(st + (rg + r * C::kRowGroups) * V + col0, s[r]);

  __shared__ float qk_s[2][2][K];           // [buffer][q|k][K] fp32: 2 KiB at K = 128
  __shared__ float kq_s[2];                 // k.q per buffer
  __shared__ float part_s[C::kWarps][2][BV];  // per-warp (S^T k, S^T q) partials: 1 KiB at BV 32

  const TI* q = static_cast<const TI*>(L.q);
  const TI* k = static_cast<const TI*>(L.k);
  const TI* v = static_cast<const TI*>(L.v);
  for (int t = 0; t < L.T; ++t) {
    const int buf = t & 1;
    if (warp == 0) {  // stage (normalized) q, k of this token and their dot product
      constexpr int E = K / 32;
      const TI* qp = q + n * L.q_sn + t * L.q_st + kh * L.q_sh;
      const TI* kp = k + n * L.k_sn + t * L.k_st + kh * L.k_sh;
      float qv[E], kv[E], sq = 0.f, sk = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        qv[e] = to_f32(qp[lane + 32 * e]);
        kv[e] = to_f32(kp[lane + 32 * e]);
        sq += qv[e] * qv[e];
        sk += kv[e] * kv[e];
      }
      if (L.l2norm) {
        const float rq = rsqrtf(warp_sum(sq) + 1e-6f), rk = rsqrtf(warp_sum(sk) + 1e-6f);
#pragma unroll
        for (int e = 0; e < E; ++e) qv[e] *= rq, kv[e] *= rk;
      }
      float kq = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        qk_s[buf][0][lane + 32 * e] = qv[e];
        qk_s[buf][1][lane + 32 * e] = kv[e];
        kq += qv[e] * kv[e];
      }
      kq = warp_sum(kq);
      if (lane == 0) kq_s[buf] = kq;
    }
    // Per-token scalars, computed redundantly by every thread (broadcast loads).
    float g;
    if (L.fused_gate) {
      const float x = v1_load_any(L.a, L.a_dtype, n * L.a_sn + t * L.a_st + h) + L.dt_bias[h];
      const float sp = x > 20.f ? x : log1pf(expf(x));
      g = -expf(L.A_log[h]) * sp;
    } else {
      g = L.g[n * L.g_sn + t * L.g_st + h];
    }
    const float decay = expf(g);
    float beta = v1_load_any(L.beta, L.beta_dtype, n * L.beta_sn + t * L.beta_st + h);
    if (L.beta_sigmoid) beta = 1.f / (1.f + expf(-beta));
    float vv[VEC];
    const TI* vp = v + n * L.v_sn + t * L.v_st + h * L.v_sh + col0;
#pragma unroll
    for (int c = 0; c < VEC; ++c) vv[c] = to_f32(vp[c]);
    __syncthreads();

    float kr[R], qr[R], pk[VEC], pq[VEC];
#pragma unroll
    for (int c = 0; c < VEC; ++c) pk[c] = 0.f, pq[c] = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = rg + r * C::kRowGroups;
      qr[r] = qk_s[buf][0][row];
      kr[r] = qk_s[buf][1][row];
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
        pk[c] = fmaf(s[r][c], kr[r], pk[c]);
        pq[c] = fmaf(s[r][c], qr[r], pq[c]);
      }
    }
    // Row groups of a warp: lanes that differ by multiples of kLanesV.
#pragma unroll
    for (int off = C::kLanesV; off < 32; off <<= 1)
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
        pk[c] += __shfl_xor_sync(0xffffffffu, pk[c], off);
        pq[c] += __shfl_xor_sync(0xffffffffu, pq[c], off);
      }
    if (lane < C::kLanesV)
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
        part_s[warp][0][vl * VEC + c] = pk[c];
        part_s[warp][1][vl * VEC + c] = pq[c];
      }
    __syncthreads();

    const float kq = kq_s[buf];
    float u[VEC], o[VEC];
#pragma unroll
    for (int c = 0; c < VEC; ++c) {
      float kvc = 0.f, sqc = 0.f;
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) {  // fixed order: bitwise reproducible
        kvc += part_s[w][0][vl * VEC + c];
        sqc += part_s[w][1][vl * VEC + c];
      }
      u[c] = beta * (vv[c] - decay * kvc);
      o[c] = L.scale * (decay * sqc + kq * u[c]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < VEC; ++c) s[r][c] = fmaf(decay, s[r][c], kr[r] * u[c]);

    if (tid < C::kLanesV) {
      const std::int64_t oo = n * L.o_sn + t * L.o_st + h * L.o_sh + col0;
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
        if (L.o_dtype == DType::f32) static_cast<float*>(L.o)[oo + c] = o[c];
        else static_cast<TI*>(L.o)[oo + c] = from_f32<TI>(o[c]);
      }
    }
    if (t + 1 == acc)
#pragma unroll
      for (int r = 0; r < R; ++r)
        store_vec<TS, VEC>(st + (rg + r * C::kRowGroups) * V + col0, s[r]);
    if (L.cache) {
      TS* cp = static_cast<TS*>(L.cache) +
               ((static_cast<std::int64_t>(n) * L.T + t) * L.HV + h) * K * V;
#pragma unroll
      for (int r = 0; r < R; ++r)
        store_vec<TS, VEC>(cp + (rg + r * C::kRowGroups) * V + col0, s[r]);
    }
  }
}

template <typename TI, typename TS, int K, int BV>
Status launch_v1(const DecodeLaunch& L) {
  const dim3 grid(L.N, L.HV, L.V / BV);
  v1_kernel<TI, TS, K, BV>
      <<<grid, V1Tile<TS, K, BV>::kThreads, 0, static_cast<cudaStream_t>(L.stream)>>>(L);
  GDN_CUDA_LAUNCH_CHECK("v1_kernel");
  return Status::Ok();
}

template <typename TI, typename TS, int K>
Status v1_bv(const DecodeLaunch& L) {
  // Small grids (N = 1: HV * V/32 = 192 blocks on 132 SMs) finish sooner with half-width slices:
  // twice the blocks, half the serial work per block.
  const std::int64_t blocks32 = static_cast<std::int64_t>(L.N) * L.HV * (L.V / 32);
  if (L.V % 32 != 0 || blocks32 < 1024) return launch_v1<TI, TS, K, 16>(L);
  return launch_v1<TI, TS, K, 32>(L);
}

template <typename TI>
Status v1_ts(const DecodeLaunch& L) {
  const bool bf = L.state_dtype == DType::bf16;
  if (L.K == 128) return bf ? v1_bv<TI, __nv_bfloat16, 128>(L) : v1_bv<TI, float, 128>(L);
  return bf ? v1_bv<TI, __nv_bfloat16, 64>(L) : v1_bv<TI, float, 64>(L);
}

}  // namespace

Status cuda_decode_v1(const DecodeLaunch& L) {
  if (L.HV > 65535 || L.V / 16 > 65535) return Status::Unsupported("decode v1: grid too large");
  switch (L.io) {
    case DType::bf16: return v1_ts<__nv_bfloat16>(L);
    case DType::f16: return v1_ts<__half>(L);
    default: return v1_ts<float>(L);
  }
}

}  // namespace gdn::detail
