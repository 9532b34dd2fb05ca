// The GDN layer on the GPU (include/gdn/layer.hpp): cuBLAS bf16 GEMMs around the recurrence,
// with small elementwise kernels between them.
//
// Kernels in this file:
//   conv_silu_v3_kernel      prefill (default): causal depthwise conv (state-prefixed) + SiLU, q|k|v
//                            channels; 8 channels x a run of tokens per thread, rows streamed through
//                            a per-thread cp.async ring in shared memory, branch-free SiLU fast path
//   conv_silu_kernel         prefill, v2 (GDN_LAYER_CONV=v2; same outputs bit for bit): 8 channels x
//                            32 tokens per thread, 16-B accesses, window in registers
//   conv_state_kernel        prefill: the last kernel-1 conv inputs of each sequence -> its slot
//   gates_kernel             beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)
//   gated_norm_kernel        rmsnorm(o) * norm_w * silu(z) per (token, value head) row, V/8 lanes
//                            per row with 16-B accesses, one row per thread (GDN_LAYER_NORM=v4: two rows
//                            per thread, =v2: v2's SiLU code; the same bits)
// (conv and norm: docs/NOTES.md "layer conv/norm kernels v2" for their byte floors.)
//   decode_conv_kernel       decode: conv over the slot's state + the new token, state shifted
// The decode recurrence is gdn::decode (include/gdn/decode.hpp, the decode arm's kernel) on strided
// q/k/v views of the conv output with the slot pool as its state pool, updated in place.
// The prefill recurrence runs through gdn::prefill (any arm) on strided q/k/v views of the conv
// output, with the slot states as h0/hT (in place when the slots are consecutive).
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/common/common.cuh"
#include "gdn/decode.hpp"
#include "gdn/layer.hpp"
#include "layer/testing.hpp"

namespace gdn::layer {

using bf16 = __nv_bfloat16;
using bf162 = __nv_bfloat162;
using cuda::copy_i32_by_value;
using cuda::from_cuda;

namespace {

struct ConvTile {
  static constexpr int kThreads = 128;  // channel vectors per block: 2 KB of a token row (vec 8)
  static constexpr int kTokens = 32;    // tokens per thread: the kernel-1 halo rows it re-reads
                                        // (from L2) are 3/32 of its reads
  static constexpr int kBatch = 8;      // rows loaded before the first is used: 8 x 16 B in flight
  static constexpr int kMaxKernel = 8;  // Config::validate caps the conv kernel
};
struct NormTile {
  static constexpr int kThreads = 256;
  static constexpr int kMaxV = 256;  // Config::validate caps the head dims
};

__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

// VEC consecutive bf16 elements as one load/store: 16 B (VEC 8) when every row start and column
// offset is a multiple of 8 elements, else 4 B (VEC 2: the conv widths are even,
// Config::validate) or 2 B (VEC 1: the norm, whose head dim V may be odd).
template <int VEC> struct BfVec;
template <> struct BfVec<8> {
  uint4 r;
  __device__ __forceinline__ void load(const bf16* p) { r = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void store(bf16* p) const { *reinterpret_cast<uint4*>(p) = r; }
  __device__ __forceinline__ bf162 pair(int i) const {
    const unsigned u = i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
    return *reinterpret_cast<const bf162*>(&u);
  }
  __device__ __forceinline__ void set_pair(int i, bf162 h) {
    const unsigned u = *reinterpret_cast<const unsigned*>(&h);
    (i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w) = u;
  }
};
template <> struct BfVec<2> {
  bf162 r;
  __device__ __forceinline__ void load(const bf16* p) { r = *reinterpret_cast<const bf162*>(p); }
  __device__ __forceinline__ void store(bf16* p) const { *reinterpret_cast<bf162*>(p) = r; }
  __device__ __forceinline__ bf162 pair(int) const { return r; }
  __device__ __forceinline__ void set_pair(int, bf162 h) { r = h; }
};
template <> struct BfVec<1> {
  bf16 r;
  __device__ __forceinline__ void load(const bf16* p) { r = *p; }
  __device__ __forceinline__ void store(bf16* p) const { *p = r; }
};
template <int VEC> __device__ __forceinline__ void to_f32(const BfVec<VEC>& v, float (&x)[VEC]) {
  if constexpr (VEC == 1) {
    x[0] = __bfloat162float(v.r);
  } else {
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) {
      const float2 f = __bfloat1622float2(v.pair(i));
      x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
  }
}
template <int VEC> __device__ __forceinline__ BfVec<VEC> to_bf16(const float (&x)[VEC]) {
  BfVec<VEC> v;
  if constexpr (VEC == 1) {
    v.r = __float2bfloat16_rn(x[0]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) v.set_pair(i, __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]));
  }
  return v;
}
template <int VEC> __device__ __forceinline__ void load_f32(const bf16* p, float (&x)[VEC]) {
  BfVec<VEC> v;
  v.load(p);
  to_f32(v, x);
}
// VEC consecutive floats (VEC 8: p 32-byte aligned, two 16-B loads).
template <int VEC> __device__ __forceinline__ void load_floats(const float* p, float (&x)[VEC]) {
  if constexpr (VEC == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) x[i] = p[i];
  }
}

// Sequence of token t: the largest n in [0, N) with cu[n] <= t (skips empty sequences).
__device__ __forceinline__ int seq_of(const int* cu, int N, int t) {
  int lo = 0, hi = N - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Start of a conv run (v2 and v3): this thread's VEC channels' weights, the sequence of token t0
// (n, and next = the first token after it) and the KW-1 conv inputs before t0, from proj or,
// before the sequence's start, from its conv state.
template <int KW, int VEC>
__device__ __forceinline__ void conv_begin(const bf16* __restrict__ proj, int P,
                                           const bf16* __restrict__ conv_pool,
                                           const int* __restrict__ slots, const int* __restrict__ cu,
                                           int N, const float* __restrict__ conv_w, int CD, int c,
                                           int t0, float (&w)[KW][VEC],
                                           float (&hist)[KW > 1 ? KW - 1 : 1][VEC], int& n,
                                           int& next) {
#pragma unroll
  for (int j = 0; j < KW; ++j)
#pragma unroll
    for (int i = 0; i < VEC; ++i) w[j][i] = conv_w[(c + i) * KW + j];
  n = seq_of(cu, N, t0);
  next = cu[n + 1];
  const int start = cu[n];
  const bf16* st = conv_pool + static_cast<std::int64_t>(slots[n]) * (KW - 1) * CD + c;
#pragma unroll
  for (int i = 0; i < KW - 1; ++i) {
    const int p = t0 - (KW - 1) + i;
    load_f32<VEC>(p >= start ? proj + static_cast<std::int64_t>(p) * P + c
                             : st + static_cast<std::int64_t>(KW - 1 + p - start) * CD,
                  hist[i]);
  }
}

// Token t starts a later sequence than n: advance n (past empty sequences) and next, and load
// that sequence's conv state as the window (v2 and v3).
template <int KW, int VEC>
__device__ __forceinline__ void conv_next_seq(const bf16* __restrict__ conv_pool,
                                              const int* __restrict__ slots,
                                              const int* __restrict__ cu, int CD, int c, int t,
                                              float (&hist)[KW > 1 ? KW - 1 : 1][VEC], int& n,
                                              int& next) {
  do ++n;
  while (t >= cu[n + 1]);
  next = cu[n + 1];
  const bf16* st = conv_pool + static_cast<std::int64_t>(slots[n]) * (KW - 1) * CD + c;
#pragma unroll
  for (int i = 0; i < KW - 1; ++i) load_f32<VEC>(st + static_cast<std::int64_t>(i) * CD, hist[i]);
}
// The window moves one token: x (this token's conv input) becomes its newest row.
template <int KW, int VEC>
__device__ __forceinline__ void conv_shift(float (&hist)[KW > 1 ? KW - 1 : 1][VEC],
                                           const float (&x)[VEC]) {
  if constexpr (KW > 1) {
#pragma unroll
    for (int j = 0; j + 1 < KW - 1; ++j)
#pragma unroll
      for (int i = 0; i < VEC; ++i) hist[j][i] = hist[j + 1][i];
#pragma unroll
    for (int i = 0; i < VEC; ++i) hist[KW - 2][i] = x[i];
  }
}

// proj: [T, P] bf16 (q|k|v in columns [0, CD)); conv_pool: [slots, KW-1, CD] bf16;
// conv_w: [CD, KW] f32; qkv: [T, CD] bf16 out.
// One thread: VEC consecutive channels over a run of kTokens tokens. The KW-1 previous rows of
// the causal window live in registers (fp32), so each proj element is read once (plus the KW-1
// halo rows at the start of the run); the rows of a batch are loaded before any is used.
// Block b: channel block b % chan_blocks of token run b / chan_blocks (1-D grid: any T).
template <int KW, int VEC>
__global__ void __launch_bounds__(ConvTile::kThreads)
    conv_silu_kernel(const bf16* __restrict__ proj, int P, const bf16* __restrict__ conv_pool,
                     const int* __restrict__ slots, const int* __restrict__ cu, int N,
                     const float* __restrict__ conv_w, int CD, int T, int chan_blocks,
                     bf16* __restrict__ qkv) {
  constexpr int H = KW > 1 ? KW - 1 : 1;  // history rows (unused when KW == 1)
  const int cb = static_cast<int>(blockIdx.x % chan_blocks);
  const int t0 = static_cast<int>(blockIdx.x / chan_blocks) * ConvTile::kTokens;
  const int c = VEC * (cb * ConvTile::kThreads + threadIdx.x);
  if (c >= CD || t0 >= T) return;
  float w[KW][VEC];
  float hist[H][VEC];  // conv inputs of tokens t-KW+1 .. t-1, oldest first
  int n = 0, next = 0;
  conv_begin<KW, VEC>(proj, P, conv_pool, slots, cu, N, conv_w, CD, c, t0, w, hist, n, next);
  const int t_end = min(T, t0 + ConvTile::kTokens);
  for (int tb = t0; tb < t_end; tb += ConvTile::kBatch) {
    BfVec<VEC> in[ConvTile::kBatch];
#pragma unroll
    for (int b = 0; b < ConvTile::kBatch; ++b)
      if (tb + b < t_end) in[b].load(proj + static_cast<std::int64_t>(tb + b) * P + c);
#pragma unroll
    for (int b = 0; b < ConvTile::kBatch; ++b) {
      const int t = tb + b;
      if (t >= t_end) break;
      if (t >= next) conv_next_seq<KW, VEC>(conv_pool, slots, cu, CD, c, t, hist, n, next);
      float x[VEC], y[VEC];
      to_f32(in[b], x);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        float a = 0.f;
#pragma unroll
        for (int j = 0; j < KW - 1; ++j) a += w[j][i] * hist[j][i];
        a += w[KW - 1][i] * x[i];
        y[i] = silu(a);
      }
      to_bf16(y).store(qkv + static_cast<std::int64_t>(t) * CD + c);
      conv_shift<KW, VEC>(hist, x);
    }
  }
}

// ---- conv_silu v3 (docs/NOTES.md "layer conv kernel v3"): the same outputs as v2 bit for bit ----
//
// v2 is latency-bound in its instruction stream: every SiLU divide is a separate branch region
// (fast path, FCHK, call to the slow path), so a thread's 8 channels run one after another, and
// with 16 warps per SM neither the divides nor the loads overlap. v3:
//  * the rows of a run stream through a per-thread ring in shared memory (cp.async, kStages groups
//    of kGroup rows; a thread only reads what it copied itself, so no barrier): the loads of the
//    next groups are in flight while the current one is computed;
//  * SiLU as a branch-free fast path over the 8 channels of a row (the instruction sequence the
//    compiler emits for x / (1 + __expf(-x)) when FCHK passes, without the FCHK) plus one rare
//    branch per row that recomputes, with silu() itself, every element outside the range
//    2^-40 <= |x| <= 32 where that sequence is the correctly rounded quotient (zero, tiny, large,
//    inf, NaN);
//  * the run length is chosen per launch (a multiple of kGroup) to fill whole waves of blocks.
struct ConvTile3 {
  static constexpr int kThreads = 128;   // 8 channels each: 2 KB of a token row per block
  static constexpr int kGroup = 6;       // rows per cp.async group; a multiple of KW-1 for
                                         // KW = 2, 3, 4, 7, so the window rotates without moves
  static constexpr int kStages = 3;      // groups in the ring: 2 in flight while one is used
  static constexpr int kMinGroups = 4;   // run length bounds (in groups) for the wave fit
  static constexpr int kMaxGroups = 16;
  // Blocks per SM the registers must allow: the weights and window take 8 (2 KW - 1) registers.
  static constexpr int min_blocks(int kw) { return kw <= 4 ? 4 : kw <= 6 ? 3 : 2; }
};

__device__ __forceinline__ float ex2_ftz(float x) {  // MUFU.EX2; = ex2.approx.f32 for x >= -126
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_ftz(float x) {  // MUFU.RCP; = rcp.approx.f32 for normal x
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// silu(a) = a / (1 + __expf(-a)) without the divide's range check: __expf(-a) is
// ex2.approx(-a * log2(e)) (libdevice __nv_fast_expf) whose non-ftz lowering only differs below
// an argument of -126, and the divide is div.rn's fast path (rcp, one Newton step, quotient, one
// correction). Both equal the reference sequence where `in_range` holds; the caller recomputes the
// others with silu().
__device__ __forceinline__ float silu_fast(float a) {
  const float e = ex2_ftz(__fmul_rn(-a, 0x1.715476p+0f));
  const float d = 1.f + e;
  const float r = rcp_ftz(d);
  const float r2 = __fmaf_rn(r, __fmaf_rn(-d, r, 1.f), r);
  const float q = __fmaf_rn(a, r2, 0.f);
  return __fmaf_rn(r2, __fmaf_rn(-d, q, a), q);
}
__device__ __forceinline__ bool silu_fast_in_range(float a) {
  return (fabsf(a) >= 0x1p-40f) & (fabsf(a) <= 32.f);
}

// bf16 pairs to fp32 by shifts (exact, as __bfloat1622float2).
template <int VEC> __device__ __forceinline__ void unpack_f32(const BfVec<VEC>& v, float (&x)[VEC]) {
  const unsigned* u = reinterpret_cast<const unsigned*>(&v.r);
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) {
    x[2 * i] = __uint_as_float(u[i] << 16);
    x[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

template <int VEC> __device__ __forceinline__ void cp_async_vec(BfVec<VEC>* smem, const bf16* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (VEC == 8)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
#else
  smem->load(gmem);  // older targets (not in the default gencode): synchronous
#endif
}
__device__ __forceinline__ void cp_async_commit_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// The arguments of conv_silu_kernel plus run_groups (run length = run_groups * kGroup tokens).
// kNegCtl (tests only, GDN_LAYER_CONV=v3negctl): the taps summed in the reverse order, which
// changes the rounding of some outputs.
template <int KW, int VEC, bool kNegCtl>
__global__ void __launch_bounds__(ConvTile3::kThreads, ConvTile3::min_blocks(KW))
    conv_silu_v3_kernel(const bf16* __restrict__ proj, int P, const bf16* __restrict__ conv_pool,
                        const int* __restrict__ slots, const int* __restrict__ cu, int N,
                        const float* __restrict__ conv_w, int CD, int T, int chan_blocks,
                        int run_groups, bf16* __restrict__ qkv) {
  using C3 = ConvTile3;
  constexpr int H = KW > 1 ? KW - 1 : 1;
  __shared__ BfVec<VEC> ring[C3::kStages * C3::kGroup][C3::kThreads];
  const int cb = static_cast<int>(blockIdx.x % chan_blocks);
  const int run_len = run_groups * C3::kGroup;
  const int t0 = static_cast<int>(blockIdx.x / chan_blocks) * run_len;
  const int c = VEC * (cb * C3::kThreads + threadIdx.x);
  if (c >= CD || t0 >= T) return;
  const int t_end = min(T, t0 + run_len);
  const int groups = (t_end - t0 + C3::kGroup - 1) / C3::kGroup;
  const bf16* src = proj + static_cast<std::int64_t>(t0) * P + c;  // row t0, advanced per group
  auto issue = [&](int g) {  // group g of the run into its ring slot (rows past t_end skipped)
    if (g < groups) {
      BfVec<VEC>* dst = &ring[(g % C3::kStages) * C3::kGroup][threadIdx.x];
      const int rows = min(C3::kGroup, t_end - (t0 + g * C3::kGroup));
#pragma unroll
      for (int b = 0; b < C3::kGroup; ++b)
        if (b < rows) cp_async_vec<VEC>(dst + b * C3::kThreads, src + static_cast<std::int64_t>(b) * P);
      src += static_cast<std::int64_t>(C3::kGroup) * P;
    }
    cp_async_commit_group();  // possibly empty: the group count stays uniform for wait_group
  };
#pragma unroll
  for (int g = 0; g < C3::kStages - 1; ++g) issue(g);

  float w[KW][VEC];
  float hist[H][VEC];  // conv inputs of tokens t-KW+1 .. t-1, oldest first
  int n = 0, next = 0;
  conv_begin<KW, VEC>(proj, P, conv_pool, slots, cu, N, conv_w, CD, c, t0, w, hist, n, next);
  bf16* out = qkv + static_cast<std::int64_t>(t0) * CD + c;
  // One token: window sum (v2's terms in v2's order), SiLU, store, window shift.
  auto step = [&](const BfVec<VEC>& raw, int t) {
    if (t >= next) conv_next_seq<KW, VEC>(conv_pool, slots, cu, CD, c, t, hist, n, next);
    float x[VEC], a[VEC], y[VEC];
    unpack_f32(raw, x);
    bool fast = true;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      a[i] = 0.f;
      if constexpr (kNegCtl) {
        a[i] += w[KW - 1][i] * x[i];
#pragma unroll
        for (int j = KW - 2; j >= 0; --j) a[i] += w[j][i] * hist[j][i];
      } else {
#pragma unroll
        for (int j = 0; j < KW - 1; ++j) a[i] += w[j][i] * hist[j][i];
        a[i] += w[KW - 1][i] * x[i];
      }
      y[i] = silu_fast(a[i]);
      fast &= silu_fast_in_range(a[i]);
    }
    if (!fast) {  // rare: recompute the out-of-range elements exactly as v2
#pragma unroll
      for (int i = 0; i < VEC; ++i)
        if (!silu_fast_in_range(a[i])) y[i] = silu(a[i]);
    }
    to_bf16(y).store(out);
    out += CD;
    conv_shift<KW, VEC>(hist, x);
  };
  // Whole groups: no per-row end test, so the unrolled rows keep the window in place (a group
  // is a multiple of KW-1 rows for KW = 2, 3, 4, 7).
  const int full = (t_end - t0) / C3::kGroup;
  for (int g = 0; g < full; ++g) {
    issue(g + C3::kStages - 1);  // into the slot read in iteration g-1
    cp_async_wait_group<C3::kStages - 1>();  // group g has landed
    const BfVec<VEC>* row = &ring[(g % C3::kStages) * C3::kGroup][threadIdx.x];
    const int tg = t0 + g * C3::kGroup;
#pragma unroll
    for (int b = 0; b < C3::kGroup; ++b) step(row[b * C3::kThreads], tg + b);
  }
  if (full < groups) {  // the last, partial group (already issued)
    cp_async_wait_group<0>();
    const BfVec<VEC>* row = &ring[(full % C3::kStages) * C3::kGroup][threadIdx.x];
    const int tg = t0 + full * C3::kGroup;
#pragma unroll 1
    for (int b = 0; b < t_end - tg; ++b) step(row[b * C3::kThreads], tg + b);
  }
}

// New conv state of each sequence: its last KW-1 conv inputs (older ones from the old state).
// One thread per (sequence, VEC channels) reads everything before writing: in place is safe.
template <int VEC>
__global__ void conv_state_kernel(const bf16* __restrict__ proj, int P, bf16* conv_pool,
                                  const int* __restrict__ slots, const int* __restrict__ cu, int N,
                                  int KW, int CD) {
  const int c = VEC * (blockIdx.x * blockDim.x + threadIdx.x);
  const int n = blockIdx.y;
  if (c >= CD || n >= N) return;
  const int start = cu[n], L = cu[n + 1] - cu[n];
  bf16* st = conv_pool + static_cast<std::int64_t>(slots[n]) * (KW - 1) * CD + c;
  BfVec<VEC> v[ConvTile::kMaxKernel - 1];
#pragma unroll
  for (int i = 0; i < ConvTile::kMaxKernel - 1; ++i) {
    if (i >= KW - 1) break;
    const int p = L - (KW - 1) + i;
    v[i].load(p >= 0 ? proj + static_cast<std::int64_t>(start + p) * P + c
                     : st + static_cast<std::int64_t>(L + i) * CD);
  }
#pragma unroll
  for (int i = 0; i < ConvTile::kMaxKernel - 1; ++i) {
    if (i >= KW - 1) break;
    v[i].store(st + static_cast<std::int64_t>(i) * CD);
  }
}

// g, beta: [T, HV] f32 out; b and a read from proj columns b_col, a_col.
__global__ void gates_kernel(const bf16* __restrict__ proj, int P, int b_col, int a_col,
                             const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                             int HV, std::int64_t T, float* __restrict__ g,
                             float* __restrict__ beta) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * HV) return;
  const std::int64_t t = i / HV;
  const int h = static_cast<int>(i % HV);
  const float b = __bfloat162float(proj[t * P + b_col + h]);
  const float a = __bfloat162float(proj[t * P + a_col + h]) + dt_bias[h];
  const float sp = a > 20.f ? a : log1pf(expf(a));  // torch softplus, threshold 20
  beta[i] = 1.f / (1.f + expf(-b));
  g[i] = -expf(A_log[h]) * sp;
}

// o: [rows = T*HV, V] bf16; z from proj columns [z_col, z_col + HV*V); out: [rows, V] bf16.
// rmsnorm(o) * norm_w * silu(z) per (token, value head) row, fp32 math. 2^lpr_log2 lanes per row
// (a power of two: the rows of a warp are aligned lane groups), each holding the VEC-element
// vectors at j = VEC*(lane + 2^lpr_log2 * k); o and z are both loaded before the row sum.
// kV3 (default; GDN_LAYER_NORM=v2 for the v2 code): the SiLUs of a thread as conv v3's
// branch-free fast path plus one rare fallback branch (the same bits; v2's divides each form a
// branch region, so a thread's 8 SiLUs ran one after another).
// R rows per thread (v3, the default: R = 1; GDN_LAYER_NORM=v4: R = 2): a block covers R
// consecutive row groups of kThreads / lanes-per-row rows, and a thread loads the o and z vectors
// of all its R rows before the first row sum, so R times the bytes are in flight per thread. Per
// row the same operations in the same order: the same bits for every R. r66 (H100) measured v4
// slower (121 against 112 us at T = 8192: 59 registers, 43% occupancy, DRAM 71% against v3's
// 78%); kept selectable for a measurement on the H200, where v3 reached only 53-55% of DRAM
// bandwidth (NOTES.md, session 19). negctl (GDN_LAYER_NORM=v4negctl, the negative control of the
// test that holds v4 to v3): every row after a thread's first is scaled by the first row's 1 / rms.
template <int VEC, bool kV3, int R>
__global__ void __launch_bounds__(NormTile::kThreads)
    gated_norm_kernel(const bf16* __restrict__ o, const bf16* __restrict__ proj, int P, int z_col,
                      const float* __restrict__ norm_w, int HV, int V, float eps, int lpr_log2,
                      std::int64_t rows, bf16* __restrict__ out, int negctl) {
  constexpr int kChunks = NormTile::kMaxV / (32 * VEC);  // vectors per lane at 32 lanes per row
  if constexpr (VEC == 1) lpr_log2 = 5;  // one element per lane: always a warp per row
  const int lpr = 1 << lpr_log2;
  const int lane = threadIdx.x & (lpr - 1);
  const std::int64_t group_rows = NormTile::kThreads >> lpr_log2;  // rows of one row group
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * R * group_rows +
                            (threadIdx.x >> lpr_log2);
  float ov[R][kChunks][VEC], zv[R][kChunks][VEC];
  float ss[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t row = row0 + r * group_rows;
    const bool valid = row < rows;  // lanes past the last row still take part in the shuffles
    const std::int64_t t = row / HV;
    const int h = static_cast<int>(row % HV);
    const bf16* orow = o + row * V;
    const bf16* z = proj + t * P + z_col + static_cast<std::int64_t>(h) * V;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int j = VEC * (lane + lpr * k);
      if (valid && j < V) {
        load_f32<VEC>(orow + j, ov[r][k]);
        load_f32<VEC>(z + j, zv[r][k]);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) ov[r][k][i] = zv[r][k][i] = 0.f;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    ss[r] = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k)
#pragma unroll
      for (int i = 0; i < VEC; ++i) ss[r] += ov[r][k][i] * ov[r][k][i];
  }
  for (int s = lpr >> 1; s > 0; s >>= 1)
#pragma unroll
    for (int r = 0; r < R; ++r) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], s);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t row = row0 + r * group_rows;
    const bool valid = row < rows;
    const float inv = rsqrtf(ss[negctl && r > 0 ? 0 : r] / static_cast<float>(V) + eps);
    float sz[kChunks][VEC];  // silu(z)
    if constexpr (kV3) {
      bool fast = true;
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const bool live = valid && VEC * (lane + lpr * k) < V;
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          sz[k][i] = silu_fast(zv[r][k][i]);
          fast &= !live | silu_fast_in_range(zv[r][k][i]);
        }
      }
      if (!fast) {  // rare: out-of-range z (dead chunks hold 0 and are recomputed harmlessly)
#pragma unroll
        for (int k = 0; k < kChunks; ++k)
#pragma unroll
          for (int i = 0; i < VEC; ++i)
            if (!silu_fast_in_range(zv[r][k][i])) sz[k][i] = silu(zv[r][k][i]);
      }
    } else {  // v2: one silu() per element (dead chunks hold 0 and are never stored)
#pragma unroll
      for (int k = 0; k < kChunks; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) sz[k][i] = silu(zv[r][k][i]);
    }
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int j = VEC * (lane + lpr * k);
      if (!valid || j >= V) continue;
      float w[VEC], y[VEC];
      load_floats<VEC>(norm_w + j, w);
#pragma unroll
      for (int i = 0; i < VEC; ++i) y[i] = ov[r][k][i] * inv * w[i] * sz[k][i];
      to_bf16(y).store(out + row * V + j);
    }
  }
}

// Decode: proj [N, P]; conv_pool [slots, KW-1, CD] updated in place; qkv [N, CD] out.
__global__ void decode_conv_kernel(const bf16* __restrict__ proj, int P, bf16* conv_pool,
                                   const int* __restrict__ slots, const float* __restrict__ conv_w,
                                   int KW, int CD, int N, bf16* __restrict__ qkv) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int n = blockIdx.y;
  if (c >= CD || n >= N) return;
  bf16* st = conv_pool + static_cast<std::int64_t>(slots[n]) * (KW - 1) * CD + c;
  const bf16 x = proj[static_cast<std::int64_t>(n) * P + c];
  float acc = conv_w[c * KW + KW - 1] * __bfloat162float(x);
  for (int j = 0; j < KW - 1; ++j) {
    const bf16 s = st[static_cast<std::int64_t>(j) * CD];
    acc += conv_w[c * KW + j] * __bfloat162float(s);
    if (j > 0) st[static_cast<std::int64_t>(j - 1) * CD] = s;
  }
  if (KW > 1) st[static_cast<std::int64_t>(KW - 2) * CD] = x;
  qkv[static_cast<std::int64_t>(n) * CD + c] = __float2bfloat16_rn(silu(acc));
}

// ---- launchers (prefill and decode share the norm) ----

// GDN_LAYER_CONV (read at each call): unset or "v3" = conv_silu_v3_kernel; "v2" = conv_silu_kernel
// (A/B runs; the same outputs bit for bit); "v3negctl" = v3 with its taps summed in the reverse
// order (tests: a comparison that must fail; KW = 4 with 16-B vectors only, else plain v3).
enum class ConvVariant { v3, v2, v3negctl };
ConvVariant conv_variant() {
  if (cuda::env_is("GDN_LAYER_CONV", "v2")) return ConvVariant::v2;
  if (cuda::env_is("GDN_LAYER_CONV", "v3negctl")) return ConvVariant::v3negctl;
  return ConvVariant::v3;
}

// conv_silu_v3 over all T tokens. Run length: kGroup * run_groups tokens, run_groups in
// [kMinGroups, kMaxGroups] minimising (waves of blocks, rounded up) x (run length + 4 rows of
// per-run overhead: the window refill and the ring's fill latency), at the resident block count.
Status launch_conv_v3(const bf16* proj, int P, const bf16* conv_pool, const int* slots, const int* cu,
                      int N, const float* conv_w, int KW, int CD, std::int64_t T, bf16* qkv,
                      cudaStream_t s, bool negctl) {
  using C3 = ConvTile3;
  using Fn = void (*)(const bf16*, int, const bf16*, const int*, const int*, int, const float*, int,
                      int, int, int, bf16*);
  static constexpr Fn k8[ConvTile::kMaxKernel] = {
      conv_silu_v3_kernel<1, 8, false>, conv_silu_v3_kernel<2, 8, false>,
      conv_silu_v3_kernel<3, 8, false>, conv_silu_v3_kernel<4, 8, false>,
      conv_silu_v3_kernel<5, 8, false>, conv_silu_v3_kernel<6, 8, false>,
      conv_silu_v3_kernel<7, 8, false>, conv_silu_v3_kernel<8, 8, false>};
  static constexpr Fn k2[ConvTile::kMaxKernel] = {
      conv_silu_v3_kernel<1, 2, false>, conv_silu_v3_kernel<2, 2, false>,
      conv_silu_v3_kernel<3, 2, false>, conv_silu_v3_kernel<4, 2, false>,
      conv_silu_v3_kernel<5, 2, false>, conv_silu_v3_kernel<6, 2, false>,
      conv_silu_v3_kernel<7, 2, false>, conv_silu_v3_kernel<8, 2, false>};
  const bool v8 = CD % 8 == 0 && P % 8 == 0;
  const int vec = v8 ? 8 : 2;
  Fn k = (v8 ? k8 : k2)[KW - 1];
  if (negctl && v8 && KW == 4) k = conv_silu_v3_kernel<4, 8, true>;
  int dev = 0, sms = 0, per_sm = 0;
  GDN_CUDA_TRY(cudaGetDevice(&dev));
  GDN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // Shared memory first (the ring: 36 KB per block at vec 8); L1 holds only conv_w and cu.
  GDN_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(k),
                                    cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
  GDN_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(k),
                                                             C3::kThreads, 0));
  const std::int64_t resident = std::max<std::int64_t>(1, static_cast<std::int64_t>(sms) * per_sm);
  const int chan_blocks = (CD / vec + C3::kThreads - 1) / C3::kThreads;
  int best_g = C3::kMinGroups;
  std::int64_t best_cost = INT64_MAX;
  for (int g = C3::kMinGroups; g <= C3::kMaxGroups; ++g) {
    const std::int64_t len = static_cast<std::int64_t>(g) * C3::kGroup;
    const std::int64_t blocks = chan_blocks * ((T + len - 1) / len);
    const std::int64_t cost = (blocks + resident - 1) / resident * (len + 4);
    if (cost < best_cost) best_cost = cost, best_g = g;
  }
  const std::int64_t len = static_cast<std::int64_t>(best_g) * C3::kGroup;
  const std::int64_t blocks = chan_blocks * ((T + len - 1) / len);
  k<<<static_cast<unsigned>(blocks), C3::kThreads, 0, s>>>(proj, P, conv_pool, slots, cu, N, conv_w, CD,
                                                          static_cast<int>(T), chan_blocks, best_g, qkv);
  GDN_CUDA_LAUNCH_CHECK("conv_silu_v3_kernel");
  return Status::Ok();
}

// Prefill conv: conv_silu over all T tokens, then the new conv state of each sequence (after, since
// the state is updated in place and a run's first rows may read the old state).
Status launch_conv(const bf16* proj, int P, bf16* conv_pool, const int* slots, const int* cu, int N,
                   const float* conv_w, int KW, int CD, std::int64_t T, bf16* qkv, cudaStream_t s) {
  const bool v8 = CD % 8 == 0 && P % 8 == 0;  // every row start and the q|k|v offset 16-B aligned
  const int vec = v8 ? 8 : 2;
  const ConvVariant variant = conv_variant();
  if (T > 0 && variant != ConvVariant::v2) {
    Status st = launch_conv_v3(proj, P, conv_pool, slots, cu, N, conv_w, KW, CD, T, qkv, s,
                               variant == ConvVariant::v3negctl);
    if (!st.ok()) return st;
  } else if (T > 0) {
    using Fn = void (*)(const bf16*, int, const bf16*, const int*, const int*, int, const float*, int,
                        int, int, bf16*);
    static constexpr Fn k8[ConvTile::kMaxKernel] = {
        conv_silu_kernel<1, 8>, conv_silu_kernel<2, 8>, conv_silu_kernel<3, 8>, conv_silu_kernel<4, 8>,
        conv_silu_kernel<5, 8>, conv_silu_kernel<6, 8>, conv_silu_kernel<7, 8>, conv_silu_kernel<8, 8>};
    static constexpr Fn k2[ConvTile::kMaxKernel] = {
        conv_silu_kernel<1, 2>, conv_silu_kernel<2, 2>, conv_silu_kernel<3, 2>, conv_silu_kernel<4, 2>,
        conv_silu_kernel<5, 2>, conv_silu_kernel<6, 2>, conv_silu_kernel<7, 2>, conv_silu_kernel<8, 2>};
    const int chan_blocks = (CD / vec + ConvTile::kThreads - 1) / ConvTile::kThreads;
    const std::int64_t runs = (T + ConvTile::kTokens - 1) / ConvTile::kTokens;
    const Fn k = (v8 ? k8 : k2)[KW - 1];
    k<<<static_cast<unsigned>(chan_blocks * runs), ConvTile::kThreads, 0, s>>>(
        proj, P, conv_pool, slots, cu, N, conv_w, CD, static_cast<int>(T), chan_blocks, qkv);
    GDN_CUDA_LAUNCH_CHECK("conv_silu_kernel");
  }
  return Status::Ok();
}

// The slots' new conv states (after the recurrence succeeded: a failed prefill leaves them as
// they were). Reads proj's q|k|v columns and the old states.
Status launch_conv_state(const bf16* proj, int P, bf16* conv_pool, const int* slots, const int* cu,
                         int N, int KW, int CD, cudaStream_t s) {
  const bool v8 = CD % 8 == 0 && P % 8 == 0;
  const int vec = v8 ? 8 : 2;
  if (KW > 1) {
    dim3 grid((CD / vec + 127) / 128, N);
    if (v8) conv_state_kernel<8><<<grid, 128, 0, s>>>(proj, P, conv_pool, slots, cu, N, KW, CD);
    else conv_state_kernel<2><<<grid, 128, 0, s>>>(proj, P, conv_pool, slots, cu, N, KW, CD);
    GDN_CUDA_LAUNCH_CHECK("conv_state_kernel");
  }
  return Status::Ok();
}

// Gated norm over rows = tokens * HV rows: 16-B vectors (V/8 lanes per row, rounded up to a power
// of two) when V, P and z_col are multiples of 8, else one element per lane and 32 lanes per row.
Status launch_gated_norm(const bf16* o, const bf16* proj, int P, int z_col, const float* norm_w,
                         int HV, int V, float eps, std::int64_t rows, bf16* out, cudaStream_t s) {
  if (rows <= 0) return Status::Ok();
  const bool v8 = V % 8 == 0 && P % 8 == 0 && z_col % 8 == 0;
  int lpr_log2 = 5;
  if (v8)
    for (lpr_log2 = 0; (8 << lpr_log2) < V;) ++lpr_log2;  // V <= 256: at most 32 lanes
  // GDN_LAYER_NORM: v2 (the earlier SiLU code), v4 (two rows per thread; slower on the H100,
  // r66), v4negctl (v4's negative control); unset: v3. All but v4negctl give the same bits.
  const bool v2 = cuda::env_is("GDN_LAYER_NORM", "v2");
  const int negctl = cuda::env_is("GDN_LAYER_NORM", "v4negctl") ? 1 : 0;
  const bool v3 = !negctl && !cuda::env_is("GDN_LAYER_NORM", "v4");
  const int R = v2 || v3 ? 1 : 2;
  const std::int64_t per_block = static_cast<std::int64_t>(R) * NormTile::kThreads;
  const std::int64_t blocks = ((rows << lpr_log2) + per_block - 1) / per_block;
  using Fn = void (*)(const bf16*, const bf16*, int, int, const float*, int, int, float, int,
                      std::int64_t, bf16*, int);
  const Fn k = v8 ? (v2 ? gated_norm_kernel<8, false, 1>
                        : v3 ? gated_norm_kernel<8, true, 1> : gated_norm_kernel<8, true, 2>)
                  : (v2 ? gated_norm_kernel<1, false, 1>
                        : v3 ? gated_norm_kernel<1, true, 1> : gated_norm_kernel<1, true, 2>);
  k<<<static_cast<unsigned>(blocks), NormTile::kThreads, 0, s>>>(o, proj, P, z_col, norm_w, HV, V,
                                                                eps, lpr_log2, rows, out, negctl);
  GDN_CUDA_LAUNCH_CHECK("gated_norm_kernel");
  return Status::Ok();
}

Status from_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Cuda(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

template <typename T> Status upload(const std::vector<T>& h, T** d) {
  GDN_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(d), std::max<std::size_t>(1, h.size()) * sizeof(T)));
  GDN_CUDA_TRY(cudaMemcpy(*d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return Status::Ok();
}

}  // namespace

// ---- Workspace ----

struct Workspace::Impl {
  Config c;
  std::int64_t max_tokens = 0;
  int max_seqs = 0;
  bf16 *proj = nullptr, *qkv = nullptr, *o = nullptr, *normed = nullptr;  // [T, P|CD|VD|VD]
  float *g = nullptr, *beta = nullptr;                                     // [T, HV]
  float* h0 = nullptr;                                                     // [max_seqs, HV, K, V]
  int *cu = nullptr, *slots = nullptr;                                     // [max_seqs+1], [max_seqs]
  cublasHandle_t blas = nullptr;
  cudaEvent_t ev[7] = {};
  ~Impl() {
    for (void* p : {static_cast<void*>(proj), static_cast<void*>(qkv), static_cast<void*>(o),
                    static_cast<void*>(normed), static_cast<void*>(g), static_cast<void*>(beta),
                    static_cast<void*>(h0), static_cast<void*>(cu), static_cast<void*>(slots)})
      if (p) cudaFree(p);
    if (blas) cublasDestroy(blas);
    for (auto e : ev)
      if (e) cudaEventDestroy(e);
  }
};
Workspace::Workspace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Workspace::~Workspace() = default;

Status Workspace::create(const Config& c, std::int64_t max_tokens, int max_seqs,
                         std::unique_ptr<Workspace>* out) {
  Status st = c.validate();
  if (!st.ok()) return st;
  if (max_tokens < 1 || max_tokens > INT32_MAX || max_seqs < 1)
    return Status::Invalid("layer workspace: need 1 <= max_tokens < 2^31 and max_seqs >= 1");
  auto w = std::make_unique<Impl>();
  w->c = c;
  w->max_tokens = max_tokens;
  w->max_seqs = max_seqs;
  const std::size_t T = static_cast<std::size_t>(max_tokens);
  GDN_CUDA_TRY(cudaMalloc(&w->proj, T * c.proj_dim() * sizeof(bf16)));
  GDN_CUDA_TRY(cudaMalloc(&w->qkv, T * c.conv_dim() * sizeof(bf16)));
  GDN_CUDA_TRY(cudaMalloc(&w->o, T * c.value_dim() * sizeof(bf16)));
  GDN_CUDA_TRY(cudaMalloc(&w->normed, T * c.value_dim() * sizeof(bf16)));
  GDN_CUDA_TRY(cudaMalloc(&w->g, T * c.HV * sizeof(float)));
  GDN_CUDA_TRY(cudaMalloc(&w->beta, T * c.HV * sizeof(float)));
  GDN_CUDA_TRY(cudaMalloc(&w->h0, static_cast<std::size_t>(max_seqs) * c.HV * c.K * c.V * sizeof(float)));
  GDN_CUDA_TRY(cudaMalloc(&w->cu, (max_seqs + 1) * sizeof(int)));
  GDN_CUDA_TRY(cudaMalloc(&w->slots, max_seqs * sizeof(int)));
  if (!(st = from_cublas(cublasCreate(&w->blas), "cublasCreate")).ok()) return st;
  for (auto& e : w->ev) GDN_CUDA_TRY(cudaEventCreate(&e));
  out->reset(new Workspace(std::move(w)));
  return Status::Ok();
}

// ---- GpuLayer ----

struct GpuLayer::Impl {
  Config c;
  int slots = 0;
  bf16 *w_in = nullptr, *w_out = nullptr;  // [P, H], [H, VD]
  float *conv_w = nullptr, *A_log = nullptr, *dt_bias = nullptr, *norm_w = nullptr;
  bf16* conv_pool = nullptr;  // [slots, KW-1, CD]
  float* ssm_pool = nullptr;  // [slots, HV, K, V]
  ~Impl() {
    for (void* p : {static_cast<void*>(w_in), static_cast<void*>(w_out), static_cast<void*>(conv_w),
                    static_cast<void*>(A_log), static_cast<void*>(dt_bias),
                    static_cast<void*>(norm_w), static_cast<void*>(conv_pool),
                    static_cast<void*>(ssm_pool)})
      if (p) cudaFree(p);
  }
  std::size_t conv_slot() const { return static_cast<std::size_t>(c.conv_kernel - 1) * c.conv_dim(); }
  std::size_t ssm_slot() const { return static_cast<std::size_t>(c.HV) * c.K * c.V; }

  // y[T, n_out] = x[T, k] W[n_out, k]^T, bf16 in/out, fp32 accumulate.
  Status gemm(cublasHandle_t h, const bf16* x, const bf16* W, bf16* y, std::int64_t T, int n_out,
              int k) const {
    const float one = 1.f, zero = 0.f;
    return from_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n_out, static_cast<int>(T), k, &one,
                                    W, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &zero, y, CUDA_R_16BF,
                                    n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
  }
};
GpuLayer::GpuLayer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuLayer::~GpuLayer() = default;
const Config& GpuLayer::config() const { return impl_->c; }

Status GpuLayer::create(const Config& c, const Weights& w, int slots, std::unique_ptr<GpuLayer>* out) {
  Status st = c.validate();
  if (!st.ok()) return st;
  const std::size_t H = c.hidden;
  auto need = [&](const char* name, std::size_t got, std::size_t want) -> Status {
    if (got == want) return Status::Ok();
    return Status::Invalid(std::string("layer weights: ") + name + " has " + std::to_string(got) +
                           " elements, config needs " + std::to_string(want));
  };
  if (!(st = need("w_qkv", w.w_qkv.size(), c.conv_dim() * H)).ok() ||
      !(st = need("w_z", w.w_z.size(), c.value_dim() * H)).ok() ||
      !(st = need("w_b", w.w_b.size(), c.HV * H)).ok() ||
      !(st = need("w_a", w.w_a.size(), c.HV * H)).ok() ||
      !(st = need("conv_w", w.conv_w.size(), static_cast<std::size_t>(c.conv_dim()) * c.conv_kernel)).ok() ||
      !(st = need("A_log", w.A_log.size(), c.HV)).ok() ||
      !(st = need("dt_bias", w.dt_bias.size(), c.HV)).ok() ||
      !(st = need("norm_w", w.norm_w.size(), c.V)).ok() ||
      !(st = need("w_out", w.w_out.size(), H * c.value_dim())).ok())
    return st;
  if (slots < 1) return Status::Invalid("layer: need at least one state slot");
  auto L = std::make_unique<Impl>();
  L->c = c;
  L->slots = slots;
  std::vector<std::uint16_t> w_in;
  w_in.reserve(static_cast<std::size_t>(c.proj_dim()) * H);
  for (auto* m : {&w.w_qkv, &w.w_z, &w.w_b, &w.w_a}) w_in.insert(w_in.end(), m->begin(), m->end());
  if (!(st = upload(w_in, reinterpret_cast<std::uint16_t**>(&L->w_in))).ok()) return st;
  if (!(st = upload(w.w_out, reinterpret_cast<std::uint16_t**>(&L->w_out))).ok()) return st;
  if (!(st = upload(w.conv_w, &L->conv_w)).ok()) return st;
  if (!(st = upload(w.A_log, &L->A_log)).ok()) return st;
  if (!(st = upload(w.dt_bias, &L->dt_bias)).ok()) return st;
  if (!(st = upload(w.norm_w, &L->norm_w)).ok()) return st;
  GDN_CUDA_TRY(cudaMalloc(&L->conv_pool, std::max<std::size_t>(1, L->conv_slot() * slots) * sizeof(bf16)));
  GDN_CUDA_TRY(cudaMalloc(&L->ssm_pool, L->ssm_slot() * slots * sizeof(float)));
  out->reset(new GpuLayer(std::move(L)));
  return (*out)->zero_slots();
}

Status GpuLayer::zero_slots(void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  GDN_CUDA_TRY(cudaMemsetAsync(impl_->conv_pool, 0, impl_->conv_slot() * impl_->slots * sizeof(bf16), s));
  GDN_CUDA_TRY(cudaMemsetAsync(impl_->ssm_pool, 0, impl_->ssm_slot() * impl_->slots * sizeof(float), s));
  return from_cuda(cudaStreamSynchronize(s), "zero_slots");
}

Status GpuLayer::get_state(int slot, std::vector<float>* conv, std::vector<float>* ssm) const {
  if (slot < 0 || slot >= impl_->slots) return Status::Invalid("get_state: slot out of range");
  std::vector<std::uint16_t> c16(impl_->conv_slot());
  GDN_CUDA_TRY(cudaDeviceSynchronize());
  GDN_CUDA_TRY(cudaMemcpy(c16.data(), impl_->conv_pool + slot * impl_->conv_slot(),
                          c16.size() * 2, cudaMemcpyDeviceToHost));
  conv->resize(c16.size());
  for (std::size_t i = 0; i < c16.size(); ++i) (*conv)[i] = bf16_to_f32(c16[i]);
  ssm->resize(impl_->ssm_slot());
  GDN_CUDA_TRY(cudaMemcpy(ssm->data(), impl_->ssm_pool + slot * impl_->ssm_slot(),
                          ssm->size() * sizeof(float), cudaMemcpyDeviceToHost));
  return Status::Ok();
}

Status GpuLayer::set_state(int slot, const std::vector<float>& conv, const std::vector<float>& ssm) {
  if (slot < 0 || slot >= impl_->slots) return Status::Invalid("set_state: slot out of range");
  if (conv.size() != impl_->conv_slot() || ssm.size() != impl_->ssm_slot())
    return Status::Invalid("set_state: wrong state sizes");
  std::vector<std::uint16_t> c16(conv.size());
  for (std::size_t i = 0; i < conv.size(); ++i) c16[i] = f32_to_bf16(conv[i]);
  GDN_CUDA_TRY(cudaDeviceSynchronize());
  GDN_CUDA_TRY(cudaMemcpy(impl_->conv_pool + slot * impl_->conv_slot(), c16.data(), c16.size() * 2,
                          cudaMemcpyHostToDevice));
  GDN_CUDA_TRY(cudaMemcpy(impl_->ssm_pool + slot * impl_->ssm_slot(), ssm.data(),
                          ssm.size() * sizeof(float), cudaMemcpyHostToDevice));
  return Status::Ok();
}

namespace {
Status check_call(const Config& c, const Workspace::Impl& w, int pool_slots, std::int64_t T, int N,
                  const std::int32_t* cu, const std::int32_t* slots) {
  if (w.c.hidden != c.hidden || w.c.proj_dim() != c.proj_dim() || w.c.HV != c.HV ||
      w.c.K != c.K || w.c.V != c.V)
    return Status::Invalid("layer: workspace was made for a different layer geometry");
  if (N < 1 || N > w.max_seqs)
    return Status::Invalid("layer: N=" + std::to_string(N) + " sequences, workspace holds 1.." +
                           std::to_string(w.max_seqs));
  if (T > w.max_tokens)
    return Status::Invalid("layer: T=" + std::to_string(T) + " tokens, workspace holds " +
                           std::to_string(w.max_tokens));
  if (cu) {
    if (cu[0] != 0) return Status::Invalid("layer: cu_seqlens[0] must be 0");
    for (int n = 0; n < N; ++n)
      if (cu[n + 1] < cu[n]) return Status::Invalid("layer: cu_seqlens not monotone");
  }
  if (!slots) return Status::Invalid("layer: slots is null");
  std::vector<char> seen(pool_slots, 0);
  for (int n = 0; n < N; ++n) {
    if (slots[n] < 0 || slots[n] >= pool_slots)
      return Status::Invalid("layer: slot " + std::to_string(slots[n]) + " out of range 0.." +
                             std::to_string(pool_slots - 1));
    if (seen[slots[n]]++) return Status::Invalid("layer: slot " + std::to_string(slots[n]) + " repeated");
  }
  return Status::Ok();
}

// The recurrence inside the layer: HF's normalised q, k and grouped head map, over strided views
// of the conv output (q | k | v per token row) and the gates / output of the workspace, T rows.
Problem recurrence_problem(const Config& c) {
  Problem p = Problem::make(c.HK, c.HV, c.K, c.V);
  p.qk_l2norm = true;
  p.head_map = HeadMap::grouped;  // HF repeat_interleave
  return p;
}
void recurrence_views(const Config& c, const Workspace::Impl& ws, std::int64_t T, TensorView* q,
                      TensorView* k, TensorView* v, TensorView* g, TensorView* beta, TensorView* o) {
  const std::int64_t HKK = static_cast<std::int64_t>(c.HK) * c.K, CD = c.conv_dim();
  *q = TensorView::strided(ws.qkv, DType::bf16, {T, c.HK, c.K}, {CD, c.K, 1});
  *k = TensorView::strided(ws.qkv + HKK, DType::bf16, {T, c.HK, c.K}, {CD, c.K, 1});
  *v = TensorView::strided(ws.qkv + 2 * HKK, DType::bf16, {T, c.HV, c.V}, {CD, c.V, 1});
  *g = TensorView::contiguous(ws.g, DType::f32, {T, c.HV});
  *beta = TensorView::contiguous(ws.beta, DType::f32, {T, c.HV});
  *o = TensorView::contiguous(ws.o, DType::bf16, {T, c.HV, c.V});
}
}  // namespace

Status GpuLayer::prefill(const void* x, void* y, const std::int32_t* cu_seqlens, int N,
                         const std::int32_t* slots, Workspace& wsp, void* stream, Arm arm,
                         StageTimes* times, RunInfo* info) {
  const Impl& L = *impl_;
  const Config& c = L.c;
  Workspace::Impl& ws = *wsp.impl();
  if (!cu_seqlens) return Status::Invalid("layer prefill: cu_seqlens is null");
  if (N < 1) return Status::Invalid("layer prefill: N must be >= 1");
  const std::int64_t T = cu_seqlens[N];
  Status st = check_call(c, ws, L.slots, T, N, cu_seqlens, slots);
  if (!st.ok()) return st;
  if (!x || !y) return Status::Invalid("layer prefill: null x or y");
  auto s = static_cast<cudaStream_t>(stream);
  const int P = c.proj_dim(), CD = c.conv_dim(), VD = c.value_dim(), KW = c.conv_kernel;
  // Offsets and slots travel by value in kernel parameters (cuda/common/chunk_table.cuh): no
  // pageable copy and no sync, so the host arrays may be temporaries and the call is capturable.
  if (!(st = copy_i32_by_value(cu_seqlens, N + 1, ws.cu, s)).ok()) return st;
  if (!(st = copy_i32_by_value(slots, N, ws.slots, s)).ok()) return st;
  if (times) GDN_CUDA_TRY(cudaEventRecord(ws.ev[0], s));
  if (!(st = from_cublas(cublasSetStream(ws.blas, s), "cublasSetStream")).ok()) return st;

  if (T > 0) {
    if (!(st = L.gemm(ws.blas, static_cast<const bf16*>(x), L.w_in, ws.proj, T, P, c.hidden)).ok())
      return st;
  }
  if (times) GDN_CUDA_TRY(cudaEventRecord(ws.ev[1], s));
  if (!(st = launch_conv(ws.proj, P, L.conv_pool, ws.slots, ws.cu, N, L.conv_w, KW, CD, T, ws.qkv,
                         s)).ok())
    return st;
  if (times) GDN_CUDA_TRY(cudaEventRecord(ws.ev[2], s));
  if (T > 0) {
    const std::int64_t n = T * c.HV;
    gates_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(
        ws.proj, P, c.b_col(), c.a_col(), L.A_log, L.dt_bias, c.HV, T, ws.g, ws.beta);
    GDN_CUDA_LAUNCH_CHECK("gates_kernel");
  }
  if (times) GDN_CUDA_TRY(cudaEventRecord(ws.ev[3], s));

  // Recurrence over strided views of qkv; slot states as h0/hT (gathered unless consecutive).
  bool consecutive = true;
  for (int n = 1; n < N; ++n) consecutive &= slots[n] == slots[0] + n;
  const std::size_t ss = L.ssm_slot();
  float* h = consecutive ? L.ssm_pool + slots[0] * ss : ws.h0;
  if (!consecutive)
    for (int n = 0; n < N; ++n)
      GDN_CUDA_TRY(cudaMemcpyAsync(ws.h0 + n * ss, L.ssm_pool + slots[n] * ss, ss * sizeof(float),
                                   cudaMemcpyDeviceToDevice, s));
  const Problem p = recurrence_problem(c);
  PrefillArgs a;
  recurrence_views(c, ws, T, &a.q, &a.k, &a.v, &a.g, &a.beta, &a.o);
  a.h0 = TensorView::contiguous(h, DType::f32, {N, c.HV, c.K, c.V});
  a.hT = a.h0;
  a.cu_seqlens = cu_seqlens;
  a.num_seqs = N;
  a.cu_seqlens_device = ws.cu;
  a.on_device = true;
  a.check_values = false;  // g <= 0 and beta in [0, 1] by construction
  a.stream = s;
  // GDN_LAYER_TEST_FAIL=recurrence (tests only): the recurrence reports a failure without
  // running, to test that a failed prefill leaves the slots' states and y untouched.
  if (cuda::env_is("GDN_LAYER_TEST_FAIL", "recurrence"))
    return Status::Internal("layer recurrence: injected failure (GDN_LAYER_TEST_FAIL)");
  if (!(st = gdn::prefill(p, a, arm, info)).ok())
    return Status(st.code(), "layer recurrence: " + st.message());
  if (!consecutive)
    for (int n = 0; n < N; ++n)
      GDN_CUDA_TRY(cudaMemcpyAsync(L.ssm_pool + slots[n] * ss, ws.h0 + n * ss, ss * sizeof(float),
                                   cudaMemcpyDeviceToDevice, s));
  // The slots' new conv states only now: a failed conv, gates or recurrence leaves them as they
  // were. (Stage times count this small kernel, CD x KW-1 values per sequence, in "recurrence".)
  if (!(st = launch_conv_state(ws.proj, P, L.conv_pool, ws.slots, ws.cu, N, KW, CD, s)).ok())
    return st;
  if (times) GDN_CUDA_TRY(cudaEventRecord(ws.ev[4], s));
  if (!(st = launch_gated_norm(ws.o, ws.proj, P, c.z_col(), L.norm_w, c.HV, c.V,
                               static_cast<float>(c.eps), T * c.HV, ws.normed, s)).ok())
    return st;
  if (times) GDN_CUDA_TRY(cudaEventRecord(ws.ev[5], s));
  if (T > 0) {
    if (!(st = L.gemm(ws.blas, ws.normed, L.w_out, static_cast<bf16*>(y), T, c.hidden, VD)).ok())
      return st;
  }
  if (times) {
    GDN_CUDA_TRY(cudaEventRecord(ws.ev[6], s));
    GDN_CUDA_TRY(cudaEventSynchronize(ws.ev[6]));
    float ms[6];
    for (int i = 0; i < 6; ++i) GDN_CUDA_TRY(cudaEventElapsedTime(&ms[i], ws.ev[i], ws.ev[i + 1]));
    times->proj += ms[0], times->conv += ms[1], times->gates += ms[2], times->recur += ms[3],
        times->norm += ms[4], times->out += ms[5];
  }
  return from_cuda(cudaGetLastError(), "layer prefill");
}

Status GpuLayer::decode(const void* x, void* y, int N, const std::int32_t* slots, Workspace& wsp,
                        void* stream) {
  const Impl& L = *impl_;
  const Config& c = L.c;
  Workspace::Impl& ws = *wsp.impl();
  Status st = check_call(c, ws, L.slots, N, N, nullptr, slots);
  if (!st.ok()) return st;
  if (!x || !y) return Status::Invalid("layer decode: null x or y");
  auto s = static_cast<cudaStream_t>(stream);
  const int P = c.proj_dim(), CD = c.conv_dim(), KW = c.conv_kernel;
  // The recurrence step: gdn::decode over the slot pool (indices checked above, host copy given),
  // its arguments checked before anything runs: the conv below updates the slots' conv states in
  // place, so a decode call rejected after it would have advanced them.
  const Problem p = recurrence_problem(c);
  DecodeArgs d;
  recurrence_views(c, ws, N, &d.q, &d.k, &d.v, &d.g, &d.beta, &d.o);
  d.state = TensorView::contiguous(L.ssm_pool, DType::f32, {L.slots, c.HV, c.K, c.V});
  d.state_indices = ws.slots;
  d.state_indices_host = slots;
  d.on_device = true;
  d.stream = s;
  if (!(st = gdn::validate_decode(p, d, false)).ok())
    return Status(st.code(), "layer decode recurrence: " + st.message());
  if (!(st = copy_i32_by_value(slots, N, ws.slots, s)).ok()) return st;  // by value, no sync
  if (!(st = from_cublas(cublasSetStream(ws.blas, s), "cublasSetStream")).ok()) return st;
  if (!(st = L.gemm(ws.blas, static_cast<const bf16*>(x), L.w_in, ws.proj, N, P, c.hidden)).ok())
    return st;
  decode_conv_kernel<<<dim3((CD + 127) / 128, N), 128, 0, s>>>(ws.proj, P, L.conv_pool, ws.slots,
                                                               L.conv_w, KW, CD, N, ws.qkv);
  GDN_CUDA_LAUNCH_CHECK("decode_conv_kernel");
  gates_kernel<<<(N * c.HV + 255) / 256, 256, 0, s>>>(ws.proj, P, c.b_col(), c.a_col(), L.A_log,
                                                      L.dt_bias, c.HV, N, ws.g, ws.beta);
  GDN_CUDA_LAUNCH_CHECK("gates_kernel");
  if (!(st = gdn::decode(p, d)).ok()) return st;
  if (!(st = launch_gated_norm(ws.o, ws.proj, P, c.z_col(), L.norm_w, c.HV, c.V,
                               static_cast<float>(c.eps), static_cast<std::int64_t>(N) * c.HV,
                               ws.normed, s)).ok())
    return st;
  if (!(st = L.gemm(ws.blas, ws.normed, L.w_out, static_cast<bf16*>(y), N, c.hidden, c.value_dim())).ok())
    return st;
  return from_cuda(cudaGetLastError(), "layer decode");
}

// Test hook (src/layer/testing.hpp): the conv output qkv that the last prefill on `wsp` left.
Status debug_read_conv_output(const Workspace& wsp, std::int64_t T, std::vector<std::uint16_t>* out) {
  const Workspace::Impl& ws = *wsp.impl();
  if (!out || T < 0 || T > ws.max_tokens) return Status::Invalid("debug_read_conv_output: bad call");
  out->resize(static_cast<std::size_t>(T) * ws.c.conv_dim());
  GDN_CUDA_TRY(cudaDeviceSynchronize());
  GDN_CUDA_TRY(cudaMemcpy(out->data(), ws.qkv, out->size() * sizeof(std::uint16_t), cudaMemcpyDeviceToHost));
  return Status::Ok();
}

Status GpuLayer::gemms_only(const void* x, void* y, std::int64_t T, Workspace& wsp, void* stream) {
  const Impl& L = *impl_;
  Workspace::Impl& ws = *wsp.impl();
  if (T < 1 || T > ws.max_tokens) return Status::Invalid("gemms_only: T out of workspace range");
  auto s = static_cast<cudaStream_t>(stream);
  Status st = from_cublas(cublasSetStream(ws.blas, s), "cublasSetStream");
  if (!st.ok()) return st;
  if (!(st = L.gemm(ws.blas, static_cast<const bf16*>(x), L.w_in, ws.proj, T, L.c.proj_dim(),
                    L.c.hidden)).ok())
    return st;
  return L.gemm(ws.blas, ws.normed, L.w_out, static_cast<bf16*>(y), T, L.c.hidden, L.c.value_dim());
}

}  // namespace gdn::layer
