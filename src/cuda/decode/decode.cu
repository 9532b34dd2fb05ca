// Decode / speculative-verify kernel, variant v2 (default until 2026-12-03, now v3: decode_v3.cu; GDN_DECODE_VARIANT:
// decode_variants.hpp): persistent blocks, each working through a strided list of
// (sequence, value head, V slice) items; an item's state slice is streamed into shared memory
// with cp.async kStages - 1 items ahead (so loads stay in flight while earlier items compute),
// held in registers across the T <= 16 tokens, and written once (or at the accepted token) with
// 16-byte streaming stores.
//
// Variants (one kernel template, dispatched in cuda_decode):
//   decode_kernel<TI, TS, K, BV>  TI = q/k/v dtype (f32, f16, bf16); TS = state dtype (f32, bf16);
//                                 K in {64, 128}; BV = V columns per item (32 default, 16 when
//                                 there would be few items, e.g. N = 1, so all SMs get work).
//   State layout [K, V] only; [V, K] returns Unsupported (the CPU path implements it).
//
// The step, per V column j (columns are independent in the [K, V] form):
//   kv_j = (S^T k)_j, sq_j = (S^T q)_j       both from the OLD state, in ONE reduction pass
//   u_j  = beta (v_j - a kv_j)               a = exp(g)
//   o_j  = scale (a sq_j + (k.q) u_j)        = scale (S_new^T q)_j, since S_new = a S + k u^T
//   S_ij = a S_ij + k_i u_j
// so each token costs one cross-thread reduction (two values per column), not two.
//
// Error bound (fp32 state, one step; derivation in docs/bounds_decode.md), u = 2^-24,
// gamma_n = n u / (1 - n u), per column j, with exact inputs as stored:
//   |d kv_j| <= gamma_{K+3} a sum_i |S_ij| |k_i|           (exp, decay product, K-term dot)
//   |d u_j|  <= beta |d kv_j| + gamma_3 beta (|v_j| + a |kv_j|)
//   |d S_ij| <= gamma_3 (a |S_ij| + |k_i| |u_j|) + |k_i| |d u_j|
//   |d o_j|  <= scale (gamma_{K+3} sum_i |S'_ij| |q_i| + sum_i |q_i| |d S_ij|) + u_o |o_j|
// plus the fused-gate / sigmoid / L2-norm terms of the doc. tests evaluate this bound elementwise
// in fp64 (src/cuda/decode/decode_ref.hpp) and report utilisation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/common/common.cuh"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_variants.hpp"
#include "gdn/decode.hpp"

namespace gdn::detail {
namespace {

using cuda::from_f32;
using cuda::to_f32;
using namespace decode_dev;

// Tile configuration for one (TS, K, BV) variant.
template <typename TS, int K, int BV>
struct DecodeTile {
  // 4 warps: a 16 KiB fp32 tile per work item at BV = 32; 80 registers (ptxas) leave the
  // shared-memory ring, not registers, as the occupancy limit.
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  // State elements per 16-byte access: the widest global load/store and cp.async size.
  static constexpr int kVec = 16 / static_cast<int>(sizeof(TS));
  // Threads across the BV columns of a row; must divide 32 so a warp holds whole row groups
  // and the K reduction starts with shuffles.
  static constexpr int kLanesV = BV / kVec;
  static constexpr int kRowGroups = kThreads / kLanesV;  // threads down the K rows
  static constexpr int kRows = K / kRowGroups;           // rows per thread (registers: kRows*kVec)
  // Pipeline depth: the state tiles of the next kStages - 1 work items of a block stream into
  // shared memory while the current one is computed, so every resident block keeps
  // (kStages - 1) tiles of loads in flight at all times (fp32 K = 128, BV = 32: 4 blocks/SM x
  // 2 x 16 KiB = 128 KiB/SM, ~3x what Little's law asks for 4.3 TB/s at a 3 us loaded latency).
  static constexpr int kStages = 3;
  // One stage: each thread's kRows 16-byte vectors, laid out [row][thread] so a warp's 16-byte
  // shared accesses are consecutive (conflict-free). = K * BV * sizeof(TS) bytes.
  static constexpr int kStageBytes = kRows * kThreads * 16;
  static constexpr int kRingBytes = kStages * kStageBytes;  // dynamic smem: 48 KiB at f32/128/32
  static_assert(BV % kVec == 0, "BV must hold whole 16-byte vectors");
  static_assert(kLanesV >= 1 && 32 % kLanesV == 0, "a warp must hold whole row groups");
  static_assert(kRows >= 1 && kRows * kRowGroups == K, "K must split evenly over row groups");
  static_assert(K % 32 == 0, "q/k staging gives each lane K/32 elements");
  static_assert(kStageBytes == K * BV * static_cast<int>(sizeof(TS)), "stage holds one slice");
};

// 16-byte global -> shared copy, L1 bypassed (each state byte is read once per call); the
// issuing thread is the only reader of its destination, so cp.async.wait_group alone orders it.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Persistent: block b handles work items b, b + G, b + 2G, ... (G = gridDim.x); an item is one
// (sequence n, value head h, V slice vb), n slowest, so co-resident blocks stream neighbouring
// bytes. State tiles are prefetched kStages - 1 items ahead with cp.async into a per-thread
// shared ring; the slot indices one item further ahead, so no load waits on another load.
template <typename TI, typename TS, int K, int BV>
__global__ void __launch_bounds__(128, 4) decode_kernel(const DecodeLaunch L, const int items) {
  using C = DecodeTile<TS, K, BV>;
  constexpr int R = C::kRows, VEC = C::kVec, NST = C::kStages;
  extern __shared__ uint4 ring[];           // [NST][R][kThreads] 16-byte state vectors
  __shared__ float qk_s[2][2][K];           // [buffer][q|k][K] fp32: 2 KiB at K = 128
  __shared__ float kq_s[2];                 // k.q per buffer
  __shared__ float part_s[C::kWarps][2][BV];  // per-warp (S^T k, S^T q) partials: 1 KiB at BV 32

  const int V = L.V, nvb = V / BV, per_n = L.HV * nvb, G = gridDim.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vl = tid % C::kLanesV, rg = tid / C::kLanesV;
  TS* const state = static_cast<TS*>(L.state);

  auto slot_at = [&](int item) { return item < items ? __ldg(L.idx + item / per_n) : -1; };
  // Issues the copies of one item's slice into ring stage `stage` (none for padding, out-of-range
  // or past-the-end items) and always commits a group, so group counting stays uniform.
  auto prefetch = [&](int item, int slot, int stage) {
    if (item < items && slot >= 0 && slot < L.S) {
      const int rem = item % per_n, h = rem / nvb, vb = rem % nvb;
      const TS* src = state + (static_cast<std::int64_t>(slot) * L.HV + h) * K * V + vb * BV +
                      vl * VEC + rg * V;
      uint4* dst = ring + stage * R * C::kThreads + tid;
#pragma unroll
      for (int r = 0; r < R; ++r) cp_async16(dst + r * C::kThreads, src + r * C::kRowGroups * V);
    }
    cp_async_commit();
  };

  int it = blockIdx.x;
  int sl[NST];  // slots of items it, it + G, ..., it + (NST - 1) G
#pragma unroll
  for (int p = 0; p < NST; ++p) sl[p] = slot_at(it + p * G);
#pragma unroll
  for (int p = 0; p < NST - 1; ++p) prefetch(it + p * G, sl[p], p);

  const TI* q = static_cast<const TI*>(L.q);
  const TI* k = static_cast<const TI*>(L.k);
  const TI* v = static_cast<const TI*>(L.v);
  int stage = 0, step = 0;
  for (; it < items; it += G) {
    prefetch(it + (NST - 1) * G, sl[NST - 1], stage == 0 ? NST - 1 : stage - 1);
    const int slot = sl[0];
#pragma unroll
    for (int p = 0; p + 1 < NST; ++p) sl[p] = sl[p + 1];
    sl[NST - 1] = slot_at(it + NST * G);  // used by the next iteration's prefetch
    cp_async_wait<NST - 1>();             // this item's group has landed (own copies only)
    const int cur = stage;
    stage = stage + 1 == NST ? 0 : stage + 1;

    const int n = it / per_n, rem = it % per_n, h = rem / nvb, vb = rem % nvb;
    if (warp == 1 && it + G < items) {  // warm L2 with the next item's token-0 q, k, v rows
      const int n2 = (it + G) / per_n, rem2 = (it + G) % per_n, h2 = rem2 / nvb;
      const int kh2 = L.grouped ? h2 / (L.HV / L.HK) : h2 % L.HK;
      const char* row = lane < 8 ? reinterpret_cast<const char*>(q + n2 * L.q_sn + kh2 * L.q_sh)
                        : lane < 16 ? reinterpret_cast<const char*>(k + n2 * L.k_sn + kh2 * L.k_sh)
                                    : reinterpret_cast<const char*>(v + n2 * L.v_sn + h2 * L.v_sh);
      const int bytes = (lane < 16 ? K : V) * static_cast<int>(sizeof(TI));
      const int off = (lane & 7) * 128;  // one 128-byte line per lane, up to 1 KiB per row
      if (off < bytes) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + off));
    }
    if (slot < 0) continue;  // padding row: nothing read, nothing written
    const int acc = L.acc ? L.acc[n] : L.T;
    if (slot >= L.S || acc < 0 || acc > L.T) {
      if (tid == 0 && L.err)
        atomicOr(L.err, (slot >= L.S ? kErrStateIndex : 0) |
                            (acc < 0 || acc > L.T ? kErrNumAccepted : 0));
      continue;
    }
    const int kh = L.grouped ? h / (L.HV / L.HK) : h % L.HK;
    const int col0 = vb * BV + vl * VEC;
    TS* st = state + (static_cast<std::int64_t>(slot) * L.HV + h) * K * V;
    float s[R][VEC];
#pragma unroll
    for (int r = 0; r < R; ++r) unpack_vec<TS, VEC>(ring[(cur * R + r) * C::kThreads + tid], s[r]);

    for (int t = 0; t < L.T; ++t, ++step) {
      const int buf = step & 1;
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
        const float x = load_any(L.a, L.a_dtype, n * L.a_sn + t * L.a_st + h) + L.dt_bias[h];
        const float sp = x > 20.f ? x : log1pf(expf(x));
        g = -expf(L.A_log[h]) * sp;
      } else {
        g = L.g[n * L.g_sn + t * L.g_st + h];
      }
      const float decay = expf(g);
      float beta = load_any(L.beta, L.beta_dtype, n * L.beta_sn + t * L.beta_st + h);
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
  cp_async_wait<0>();  // nothing is pending here (every prefetched item is a later iteration)
}

template <typename TI, typename TS, int K, int BV>
Status launch(const DecodeLaunch& L) {
  using C = DecodeTile<TS, K, BV>;
  auto kern = decode_kernel<TI, TS, K, BV>;
  // Host-side attribute/occupancy queries only: no synchronisation, legal under graph capture.
  GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    C::kRingBytes));
  int dev = 0, sms = 0, per_sm = 0;
  GDN_CUDA_TRY(cudaGetDevice(&dev));
  GDN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  GDN_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, C::kThreads,
                                                             C::kRingBytes));
  const int items = L.N * L.HV * (L.V / BV);
  // One wave of persistent blocks; fewer items than resident slots: one block per item.
  const int grid = std::max(1, std::min(items, std::max(1, per_sm) * sms));
  kern<<<grid, C::kThreads, C::kRingBytes, static_cast<cudaStream_t>(L.stream)>>>(L, items);
  GDN_CUDA_LAUNCH_CHECK("decode_kernel");
  return Status::Ok();
}

template <typename TI, typename TS, int K>
Status launch_bv(const DecodeLaunch& L) {
  // Small grids (N = 1: HV * V/32 = 192 blocks on 132 SMs) finish sooner with half-width slices:
  // twice the blocks, half the serial work per block.
  const std::int64_t blocks32 = static_cast<std::int64_t>(L.N) * L.HV * (L.V / 32);
  if (L.V % 32 != 0 || blocks32 < 1024) return launch<TI, TS, K, 16>(L);
  return launch<TI, TS, K, 32>(L);
}

template <typename TI>
Status launch_ts(const DecodeLaunch& L) {
  const bool bf = L.state_dtype == DType::bf16;
  if (L.K == 128) return bf ? launch_bv<TI, __nv_bfloat16, 128>(L) : launch_bv<TI, float, 128>(L);
  return bf ? launch_bv<TI, __nv_bfloat16, 64>(L) : launch_bv<TI, float, 64>(L);
}

}  // namespace

bool cuda_decode_supports(const DecodeLaunch& L, std::string* why) {
  auto no = [&](std::string s) {
    if (why) *why = std::move(s);
    return false;
  };
  if (L.vk) return no("GPU decode implements state layout [K, V] only ([V, K]: use host tensors)");
  if (L.K != 64 && L.K != 128) return no("GPU decode supports K in {64, 128}, got " + std::to_string(L.K));
  if (L.V % 16 != 0 || L.V > 256)
    return no("GPU decode needs V a multiple of 16 up to 256, got " + std::to_string(L.V));
  // Work items (and the prefetch look-ahead past them) are counted in int.
  if (static_cast<std::int64_t>(L.N) * L.HV * (L.V / 16) > (std::int64_t{1} << 30))
    return no("too many (sequence, head) work items for one call (N * HV * V/16 > 2^30)");
  // 16-byte vector accesses (cp.async, streaming stores) need 16-byte aligned pool and cache.
  if (reinterpret_cast<std::uintptr_t>(L.state) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(L.cache) % 16 != 0)
    return no("GPU decode needs 16-byte aligned state and state_cache pointers");
  return true;
}

Status cuda_decode_v2(const DecodeLaunch& L) {
  switch (L.io) {
    case DType::bf16: return launch_ts<__nv_bfloat16>(L);
    case DType::f16: return launch_ts<__half>(L);
    default: return launch_ts<float>(L);
  }
}

DecodeVariant decode_variant() {
  const char* e = std::getenv("GDN_DECODE_VARIANT");
  // Default v3: measured fastest on the H200 in all three issue cases (2026-12-03, 9b06ffe:
  // N=256 3.81 TB/s vs v2 3.28; N=1 3.61 us vs 4.26; verify T=4 N=64 130 us vs 196).
  if (!e) return DecodeVariant::v3;
  const std::string s(e);
  if (s == "v2") return DecodeVariant::v2;
  if (s == "v3") return DecodeVariant::v3;
  if (s == "v3w") return DecodeVariant::v3w;
  if (s == "v3s") return DecodeVariant::v3s;
  if (s == "v4") return DecodeVariant::v4;
  if (s == "v4w") return DecodeVariant::v4w;
  return DecodeVariant::v3;
}

Status cuda_decode(const DecodeLaunch& L) {
  if (L.N == 0) return Status::Ok();
  switch (decode_variant()) {
    case DecodeVariant::v3: return cuda_decode_v3(L, 0);
    case DecodeVariant::v3w: return cuda_decode_v3(L, 1);
    case DecodeVariant::v3s: return cuda_decode_v3(L, 2);
    case DecodeVariant::v4: return cuda_decode_v4(L, false);
    case DecodeVariant::v4w: return cuda_decode_v4(L, true);
    default: return cuda_decode_v2(L);
  }
}

}  // namespace gdn::detail
