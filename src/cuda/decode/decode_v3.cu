// Decode variants v3 and v4 (GDN_DECODE_VARIANT, decode_variants.hpp). Same step and error bound
// as v2 (decode.cu's header): per V column j, kv_j = (S^T k)_j and sq_j = (S^T q)_j from the old
// state in one reduction pass, u_j = beta (v_j - a kv_j), o_j = scale (a sq_j + (k.q) u_j),
// S_ij = a S_ij + k_i u_j. What changes is how the bytes move:
//
// * Full-width rows. A block owns BV = min(V, 128) whole columns (fp32: 512-byte rows), and a
//   warp's 16-byte accesses cover whole contiguous rows (fp32: one row per instruction; bf16: two),
//   so a (n, h) tile is read and written as one contiguous 64 KiB stream. v1/v2 read 128-byte
//   pieces of every 512-byte row per block (the other three pieces by other blocks, at other
//   times in v1).
// * No global load on the critical path after the state arrives. Every token's q, k (normalized),
//   v slice, decay, beta and k.q are staged into shared memory while the state loads are in
//   flight (v3: right after the state loads are issued; v4: before waiting on the item's tile),
//   and the token loop has one block barrier per token (partials double-buffered by token).
// * The K reduction: per thread over its rows (fixed order), then lanes of the same columns
//   (xor shuffles), then warps in index order through shared memory: deterministic.
//
// v3: non-persistent, one block per (n, h, V slice), the slice in registers (fp32: 64 floats per
//     thread at 256 threads); the state is loaded with 16-byte evict-first loads issued up front.
//     Small grids (items < 2 x SMs, e.g. N = 1) use 32-column slices on 128 threads instead.
// v4: persistent, one 256-thread block per SM; thread 0 streams whole (n, h) tiles into a ring of
//     2-4 shared stages with cp.async.bulk (TMA, completion on an mbarrier), so (stages - 1)
//     tiles (128 KiB at fp32) per SM stay in flight independent of what the consumers wait for.
//     V not in {64, 128}, or small grids (N * HV < 2 x SMs), run v3.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/common.cuh"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_variants.hpp"
#include "gdn/decode.hpp"

namespace gdn::detail {
namespace {

using cuda::bulk_g2s;
using cuda::from_f32;
using cuda::mbar_arrive;
using cuda::mbar_arrive_tx;
using cuda::mbar_init;
using cuda::mbar_init_fence;
using cuda::mbar_wait;
using cuda::to_f32;
using namespace decode_dev;

template <typename TS, int K, int BV, int THREADS>
struct WTile {
  static constexpr int kWarps = THREADS / 32;
  static constexpr int kVec = 16 / static_cast<int>(sizeof(TS));  // state elements per 16 B
  static constexpr int kLanesV = BV / kVec;                        // lanes across a row slice
  static constexpr int kRowGroups = THREADS / kLanesV;
  static constexpr int kRows = K / kRowGroups;  // rows per thread
  // Staged token record (floats): q[K], k[K], v[BV], decay, beta, k.q, pad (16-byte multiple).
  static constexpr int kTok = 2 * K + BV + 4;
  static constexpr int kPartFloats = 2 * kWarps * 2 * BV;  // [parity][warp][kv|sq][BV]
  static_assert(BV % kVec == 0 && kLanesV >= 1 && 32 % kLanesV == 0, "row slice per warp");
  static_assert(kRows >= 1 && kRows * kRowGroups == K, "K must split evenly over row groups");
  static_assert(K % 32 == 0 && BV <= 128, "staging: K / 32 and BV / 32 elements per lane");
};

// Warp `warp` stages tokens warp, warp + kWarps, ... of sequence n / value head h into `tok`
// (q, k normalized as in v1/v2: same operations, same order).
template <typename TI, int K, int BV, int WARPS, int TOK>
__device__ __forceinline__ void stage_tokens(const DecodeLaunch& L, float* tok, int n, int h,
                                             int kh, int col_base, int warp, int lane) {
  constexpr int E = K / 32;
  const TI* q = static_cast<const TI*>(L.q);
  const TI* k = static_cast<const TI*>(L.k);
  const TI* v = static_cast<const TI*>(L.v);
  for (int t = warp; t < L.T; t += WARPS) {
    float* rec = tok + t * TOK;
    const TI* qp = q + n * L.q_sn + t * L.q_st + kh * L.q_sh;
    const TI* kp = k + n * L.k_sn + t * L.k_st + kh * L.k_sh;
    const TI* vp = v + n * L.v_sn + t * L.v_st + h * L.v_sh + col_base;
    float qv[E], kv[E], vv[(BV + 31) / 32], sq = 0.f, sk = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      qv[e] = to_f32(qp[lane + 32 * e]);
      kv[e] = to_f32(kp[lane + 32 * e]);
    }
#pragma unroll
    for (int e = 0; e < (BV + 31) / 32; ++e)
      if (lane + 32 * e < BV) vv[e] = to_f32(vp[lane + 32 * e]);
    float g = 0.f, beta = 0.f;
    if (lane == 0) {
      if (L.fused_gate) {
        const float x = load_any(L.a, L.a_dtype, n * L.a_sn + t * L.a_st + h) + L.dt_bias[h];
        const float sp = x > 20.f ? x : log1pf(expf(x));
        g = -expf(L.A_log[h]) * sp;
      } else {
        g = L.g[n * L.g_sn + t * L.g_st + h];
      }
      beta = load_any(L.beta, L.beta_dtype, n * L.beta_sn + t * L.beta_st + h);
      if (L.beta_sigmoid) beta = 1.f / (1.f + expf(-beta));
    }
#pragma unroll
    for (int e = 0; e < E; ++e) sq += qv[e] * qv[e], sk += kv[e] * kv[e];
    if (L.l2norm) {
      const float rq = rsqrtf(warp_sum(sq) + 1e-6f), rk = rsqrtf(warp_sum(sk) + 1e-6f);
#pragma unroll
      for (int e = 0; e < E; ++e) qv[e] *= rq, kv[e] *= rk;
    }
    float kq = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      rec[lane + 32 * e] = qv[e];
      rec[K + lane + 32 * e] = kv[e];
      kq += qv[e] * kv[e];
    }
#pragma unroll
    for (int e = 0; e < (BV + 31) / 32; ++e)
      if (lane + 32 * e < BV) rec[2 * K + lane + 32 * e] = vv[e];
    kq = warp_sum(kq);
    if (lane == 0) {
      rec[2 * K + BV] = expf(g);
      rec[2 * K + BV + 1] = beta;
      rec[2 * K + BV + 2] = kq;
    }
  }
}

// The token loop on a register-resident slice s (columns col_base + vl * VEC ..), tokens staged
// in `tok`; `part` is the [2][warps][2][BV] partial buffer, `step` the running parity counter.
template <typename TI, typename TS, int K, int BV, int THREADS>
__device__ __forceinline__ void run_tokens(const DecodeLaunch& L, float (&s)[WTile<TS, K, BV, THREADS>::kRows]
                                                                        [WTile<TS, K, BV, THREADS>::kVec],
                                           const float* tok, float* part, int& step, int n, int h,
                                           int acc, TS* st, int col_base) {
  using C = WTile<TS, K, BV, THREADS>;
  constexpr int R = C::kRows, VEC = C::kVec, W = C::kWarps, TOK = C::kTok;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vl = tid % C::kLanesV, rg = tid / C::kLanesV;
  const int colw = vl * VEC;  // column within the slice
  const int V = L.V;
  for (int t = 0; t < L.T; ++t, ++step) {
    const float* rec = tok + t * TOK;
    float* pb = part + (step & 1) * (W * 2 * BV);
    float pk[VEC], pq[VEC], vv[VEC];
#pragma unroll
    for (int c = 0; c < VEC; ++c) pk[c] = 0.f, pq[c] = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = rg + r * C::kRowGroups;
      const float qr = rec[row], kr = rec[K + row];
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
        pk[c] = fmaf(s[r][c], kr, pk[c]);
        pq[c] = fmaf(s[r][c], qr, pq[c]);
      }
    }
#pragma unroll
    for (int c = 0; c < VEC; ++c) vv[c] = rec[2 * K + colw + c];
    const float decay = rec[2 * K + BV], beta = rec[2 * K + BV + 1], kq = rec[2 * K + BV + 2];
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
        pb[(warp * 2 + 0) * BV + colw + c] = pk[c];
        pb[(warp * 2 + 1) * BV + colw + c] = pq[c];
      }
    __syncthreads();  // the only barrier of the token (partials double-buffered by parity)

    float u[VEC], o[VEC];
#pragma unroll
    for (int c = 0; c < VEC; ++c) {
      float kvc = 0.f, sqc = 0.f;
#pragma unroll
      for (int w = 0; w < W; ++w) {  // fixed order: bitwise reproducible
        kvc += pb[(w * 2 + 0) * BV + colw + c];
        sqc += pb[(w * 2 + 1) * BV + colw + c];
      }
      u[c] = beta * (vv[c] - decay * kvc);
      o[c] = L.scale * (decay * sqc + kq * u[c]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {  // k re-read from shared memory: registers stay for the state
      const float kr = rec[K + rg + r * C::kRowGroups];
#pragma unroll
      for (int c = 0; c < VEC; ++c) s[r][c] = fmaf(decay, s[r][c], kr * u[c]);
    }

    if (tid < C::kLanesV) {
      const std::int64_t oo = n * L.o_sn + t * L.o_st + h * L.o_sh + col_base + colw;
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
        if (L.o_dtype == DType::f32) static_cast<float*>(L.o)[oo + c] = o[c];
        else static_cast<TI*>(L.o)[oo + c] = from_f32<TI>(o[c]);
      }
    }
    if (t + 1 == acc)
#pragma unroll
      for (int r = 0; r < R; ++r)
        store_vec<TS, VEC>(st + (rg + r * C::kRowGroups) * V + col_base + colw, s[r]);
    if (L.cache) {
      TS* cp = static_cast<TS*>(L.cache) +
               ((static_cast<std::int64_t>(n) * L.T + t) * L.HV + h) * K * V;
#pragma unroll
      for (int r = 0; r < R; ++r)
        store_vec<TS, VEC>(cp + (rg + r * C::kRowGroups) * V + col_base + colw, s[r]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// v3: one block per item (n, h, vb), n slowest (neighbouring blocks stream neighbouring bytes).
template <typename TI, typename TS, int K, int BV, int THREADS, int MINB>
__global__ void __launch_bounds__(THREADS, MINB) v3_kernel(const DecodeLaunch L) {
  using C = WTile<TS, K, BV, THREADS>;
  constexpr int R = C::kRows, VEC = C::kVec;
  extern __shared__ float4 v3_dyn[];  // [part: kPartFloats][tok: T * kTok]
  float* part = reinterpret_cast<float*>(v3_dyn);
  float* tok = part + C::kPartFloats;
  const int nvb = L.V / BV;
  const int item = blockIdx.x, vb = item % nvb, nh = item / nvb, h = nh % L.HV, n = nh / L.HV;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vl = tid % C::kLanesV, rg = tid / C::kLanesV;
  const int slot = __ldg(L.idx + n);
  const int acc = L.acc ? __ldg(L.acc + n) : L.T;
  if (slot < 0) return;  // padding row: nothing read, nothing written
  if (slot >= L.S || acc < 0 || acc > L.T) {
    if (tid == 0 && L.err)
      atomicOr(L.err, (slot >= L.S ? kErrStateIndex : 0) | (acc < 0 || acc > L.T ? kErrNumAccepted : 0));
    return;
  }
  const int col_base = vb * BV;
  TS* st = static_cast<TS*>(L.state) + (static_cast<std::int64_t>(slot) * L.HV + h) * K * L.V;
  // All state loads first (R independent 16-byte loads per thread), then the token staging,
  // whose global loads overlap them.
  uint4 raw[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    raw[r] = __ldcs(reinterpret_cast<const uint4*>(st + (rg + r * C::kRowGroups) * L.V + col_base +
                                                   vl * VEC));
  const int kh = L.grouped ? h / (L.HV / L.HK) : h % L.HK;
  stage_tokens<TI, K, BV, C::kWarps, C::kTok>(L, tok, n, h, kh, col_base, warp, lane);
  float s[R][VEC];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack_vec<TS, VEC>(raw[r], s[r]);
  __syncthreads();  // tokens staged
  int step = 0;
  run_tokens<TI, TS, K, BV, THREADS>(L, s, tok, part, step, n, h, acc, st, col_base);
}

template <typename TI, typename TS, int K, int BV, int THREADS, int MINB>
Status launch_v3(const DecodeLaunch& L) {
  using C = WTile<TS, K, BV, THREADS>;
  auto kern = v3_kernel<TI, TS, K, BV, THREADS, MINB>;
  const int smem = (C::kPartFloats + L.T * C::kTok) * 4;
  GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const std::int64_t items = static_cast<std::int64_t>(L.N) * L.HV * (L.V / BV);
  if (items > 0x7fffffff) return Status::Unsupported("decode v3: too many blocks");
  kern<<<static_cast<unsigned>(items), THREADS, smem, static_cast<cudaStream_t>(L.stream)>>>(L);
  GDN_CUDA_LAUNCH_CHECK("decode v3_kernel");
  return Status::Ok();
}

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 132;
  return sms;
}

// force: 0 auto, 1 wide, 2 small.
template <typename TI, typename TS, int K>
Status v3_cfg(const DecodeLaunch& L, int force) {
  const std::int64_t nh = static_cast<std::int64_t>(L.N) * L.HV;
  const int bv_wide = L.V % 128 == 0 ? 128 : (L.V % 64 == 0 ? 64 : 0);
  const bool small = force == 2 || bv_wide == 0 ||
                     (force == 0 && nh * (L.V / bv_wide) < 2 * sm_count());
  if (small) {
    if (L.V % 32 == 0) return launch_v3<TI, TS, K, 32, 128, 4>(L);
    return launch_v3<TI, TS, K, 16, 128, 4>(L);
  }
  if (bv_wide == 128) return launch_v3<TI, TS, K, 128, 256, 2>(L);
  return launch_v3<TI, TS, K, 64, 128, 4>(L);
}

template <typename TI>
Status v3_ts(const DecodeLaunch& L, int force) {
  const bool bf = L.state_dtype == DType::bf16;
  if (L.K == 128) return bf ? v3_cfg<TI, __nv_bfloat16, 128>(L, force) : v3_cfg<TI, float, 128>(L, force);
  return bf ? v3_cfg<TI, __nv_bfloat16, 64>(L, force) : v3_cfg<TI, float, 64>(L, force);
}

// ---------------------------------------------------------------------------------------------
// v4: persistent; items are whole (n, h) tiles (BV = V), ring of `nst` shared stages filled by
// cp.async.bulk from thread 0.
template <typename TI, typename TS, int K, int BV>
__global__ void __launch_bounds__(256, 1) v4_kernel(const DecodeLaunch L, const int items,
                                                    const int nst) {
  using C = WTile<TS, K, BV, 256>;
  constexpr int R = C::kRows, VEC = C::kVec;
  constexpr unsigned kTileBytes = K * BV * sizeof(TS);
  extern __shared__ float4 v4_dyn[];  // [ring: nst tiles][part][tok: T * kTok]
  __shared__ std::uint64_t bar[4];
  TS* ring = reinterpret_cast<TS*>(v4_dyn);
  float* part = reinterpret_cast<float*>(reinterpret_cast<char*>(v4_dyn) + nst * kTileBytes);
  float* tok = part + C::kPartFloats;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vl = tid % C::kLanesV, rg = tid / C::kLanesV;
  const int G = gridDim.x;
  const TS* state = static_cast<const TS*>(L.state);
  auto tile_src = [&](int item, int slot) {
    return state + (static_cast<std::int64_t>(slot) * L.HV + item % L.HV) * K * BV;
  };
  // Thread 0: fill stage `stg` with item `item` (slot = its sequence's slot, loaded earlier).
  auto issue = [&](int stg, int item, int slot) {
    if (item >= items) return;  // nobody waits on it
    if (slot >= 0 && slot < L.S) {
      mbar_arrive_tx(&bar[stg], kTileBytes);
      bulk_g2s(ring + stg * (K * BV), tile_src(item, slot), kTileBytes, &bar[stg]);
    } else {
      mbar_arrive(&bar[stg]);  // padding / bad slot: complete the phase with no bytes
    }
  };
  if (tid == 0) {
    for (int i = 0; i < nst; ++i) mbar_init(&bar[i], 1);
    mbar_init_fence();
    int sl[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int it = blockIdx.x + i * G;
      sl[i] = i < nst && it < items ? __ldg(L.idx + it / L.HV) : -1;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (i < nst) issue(i, blockIdx.x + i * G, sl[i]);
  }
  __syncthreads();

  int step = 0;
  for (int it = blockIdx.x, i = 0; it < items; it += G, ++i) {
    const int stg = i % nst;
    const unsigned parity = (i / nst) & 1;
    const int n = it / L.HV, h = it % L.HV;
    const int slot = __ldg(L.idx + n);
    const int acc = L.acc ? __ldg(L.acc + n) : L.T;
    const int refill = it + nst * G;
    const int refill_slot = tid == 0 && refill < items ? __ldg(L.idx + refill / L.HV) : -1;
    const bool live = slot >= 0 && slot < L.S && acc >= 0 && acc <= L.T;
    const int kh = L.grouped ? h / (L.HV / L.HK) : h % L.HK;
    if (warp == C::kWarps - 1 && it + G < items) {  // warm L2 with the next item's q, k, v rows
      const int n2 = (it + G) / L.HV, h2 = (it + G) % L.HV;
      const int kh2 = L.grouped ? h2 / (L.HV / L.HK) : h2 % L.HK;
      constexpr int kLines = (K > BV ? K : BV) * static_cast<int>(sizeof(TI)) / 128;  // <= 4
      for (int j = lane; j < 3 * L.T * kLines; j += 32) {
        const int line = j % kLines, row = j / kLines, t = row / 3, which = row % 3;
        const TI* base = which == 0 ? static_cast<const TI*>(L.q) + n2 * L.q_sn + t * L.q_st + kh2 * L.q_sh
                       : which == 1 ? static_cast<const TI*>(L.k) + n2 * L.k_sn + t * L.k_st + kh2 * L.k_sh
                                    : static_cast<const TI*>(L.v) + n2 * L.v_sn + t * L.v_st + h2 * L.v_sh;
        const int bytes = (which == 2 ? BV : K) * static_cast<int>(sizeof(TI));
        if (line * 128 < bytes)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(base) + line * 128));
      }
    }
    if (live) stage_tokens<TI, K, BV, C::kWarps, C::kTok>(L, tok, n, h, kh, 0, warp, lane);
    mbar_wait(&bar[stg], parity);
    float s[R][VEC];
    if (live) {
      const TS* tile = ring + stg * (K * BV);
#pragma unroll
      for (int r = 0; r < R; ++r)
        unpack_vec<TS, VEC>(*reinterpret_cast<const uint4*>(tile + (rg + r * C::kRowGroups) * BV + vl * VEC),
                          s[r]);
    }
    __syncthreads();  // stage read by everyone, tokens staged
    if (tid == 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
      issue(stg, refill, refill_slot);
    }
    if (!live) {
      if (slot >= 0 && tid == 0 && L.err)
        atomicOr(L.err, (slot >= L.S ? kErrStateIndex : 0) |
                            (acc < 0 || acc > L.T ? kErrNumAccepted : 0));
      continue;
    }
    TS* st = static_cast<TS*>(L.state) + (static_cast<std::int64_t>(slot) * L.HV + h) * K * BV;
    run_tokens<TI, TS, K, BV, 256>(L, s, tok, part, step, n, h, acc, st, 0);
    __syncthreads();  // tok is rewritten by the next item's staging
  }
}

template <typename TI, typename TS, int K, int BV>
Status launch_v4(const DecodeLaunch& L, int max_grid) {
  using C = WTile<TS, K, BV, 256>;
  auto kern = v4_kernel<TI, TS, K, BV>;
  constexpr int kTileBytes = K * BV * static_cast<int>(sizeof(TS));
  const int side = (C::kPartFloats + L.T * C::kTok) * 4;
  int dev = 0, optin = 0;
  GDN_CUDA_TRY(cudaGetDevice(&dev));
  GDN_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int budget = optin - 64;  // static: 4 mbarriers
  const int nst = std::min(4, (budget - side) / kTileBytes);
  if (nst < 2) return v3_cfg<TI, TS, K>(L, 0);
  const int smem = nst * kTileBytes + side;
  GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const std::int64_t items = static_cast<std::int64_t>(L.N) * L.HV;
  if (items > (std::int64_t{1} << 30)) return Status::Unsupported("decode v4: too many items");
  const int grid = static_cast<int>(std::min<std::int64_t>(items, max_grid));
  kern<<<grid, 256, smem, static_cast<cudaStream_t>(L.stream)>>>(L, static_cast<int>(items), nst);
  GDN_CUDA_LAUNCH_CHECK("decode v4_kernel");
  return Status::Ok();
}

// force (tests): the persistent kernel at any size, on at most 3 blocks, so that every block
// runs many items and wraps its ring several times.
template <typename TI, typename TS, int K>
Status v4_cfg(const DecodeLaunch& L, bool force) {
  const std::int64_t nh = static_cast<std::int64_t>(L.N) * L.HV;
  const int sms = sm_count();
  if (!force && nh < 2 * sms) return v3_cfg<TI, TS, K>(L, 0);  // small grid: v3's small config
  const int max_grid = force ? 3 : sms;
  if (L.V == 128) return launch_v4<TI, TS, K, 128>(L, max_grid);
  if (L.V == 64) return launch_v4<TI, TS, K, 64>(L, max_grid);
  return v3_cfg<TI, TS, K>(L, 0);
}

template <typename TI>
Status v4_ts(const DecodeLaunch& L, bool force) {
  const bool bf = L.state_dtype == DType::bf16;
  if (L.K == 128)
    return bf ? v4_cfg<TI, __nv_bfloat16, 128>(L, force) : v4_cfg<TI, float, 128>(L, force);
  return bf ? v4_cfg<TI, __nv_bfloat16, 64>(L, force) : v4_cfg<TI, float, 64>(L, force);
}

}  // namespace

Status cuda_decode_v3(const DecodeLaunch& L, int force) {
  switch (L.io) {
    case DType::bf16: return v3_ts<__nv_bfloat16>(L, force);
    case DType::f16: return v3_ts<__half>(L, force);
    default: return v3_ts<float>(L, force);
  }
}

Status cuda_decode_v4(const DecodeLaunch& L, bool force) {
  // cp.async.bulk and mbarrier transaction counts need sm_90: older GPUs run v3.
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
      major < 9)
    return cuda_decode_v3(L, 0);
  switch (L.io) {
    case DType::bf16: return v4_ts<__nv_bfloat16>(L, force);
    case DType::f16: return v4_ts<__half>(L, force);
    default: return v4_ts<float>(L, force);
  }
}

}  // namespace gdn::detail
