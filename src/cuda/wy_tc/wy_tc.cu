// wy-tc arm: chunked WY (DESIGN.md §2, C = 64) with tensor-core folds (mma.sync m16n8k16 bf16,
// fp32 accumulate; runs on sm_80 and sm_90), an fp32 triangular solve and fp32 state.
//
// Variants in this file (v1, docs/NOTES_wy_tc.md):
//   wy_tc_chunk_kernel<TIn, TBeta, K, V>  chunk-local, fully parallel over (chunk, value head):
//       G = cumsum(g); A = strict_lower(diag(beta)(K K^T .* Gam)); Tm = (I + A)^-1 diag(beta)
//       (fp32 column-parallel forward substitution); W = Tm diag(exp G) K; U = Tm V;
//       P = scale (Q K^T .* Gam, lower incl. diag); Qs = scale diag(exp G) Q;
//       Kd = diag(exp(G_C - G)) K; all written fp32 to the workspace.
//   wy_tc_state_kernel<TOut, K, V>  sequential over the chunks of one sequence, one block per
//       (sequence, value head, 32-column slice of V):
//       Vn = U - W S;  O = Qs S + P Vn;  S' = exp(G_C) S + Kd^T Vn.
//
// Fold precision (what the derived bound must use). Every operand that is not exactly a bf16
// number is split x = hi + lo with hi = bf16(x), lo = bf16(x - hi) (16 significant bits, relative
// representation error <= 2^-17), and a product a b is formed as hi_a hi_b + hi_a lo_b + lo_a hi_b
// (3 mma's; the dropped lo_a lo_b term is <= 2^-16 |a||b|), accumulated in fp32. Exactly
// representable operands (bf16 q/k/v) use hi only. So: K K^T and Q K^T are exact products with fp32
// accumulation for bf16 io; every other fold, and every fold for f16 io (f16 splits exactly) and
// f32 io (inputs carried to 16 bits), has per-product relative error <= ~2^-15 plus fp32
// accumulation. The state never passes through a 2-byte format.
//
// Cost model, per (chunk of 64 tokens, value head), K = V = 128 (qwen3.5-27b: 512 chunks x 48
// heads at T = 32768):
//   chunk kernel: mma FLOP 2*64*64*128*(1 + 1) [KK^T, QK^T; x3 if split] + 2*64*64*(128+128)*3
//     [W, U] = 2.1 MFLOP + solve 64*63/2*64 = 129 k FMA; bytes in: q, k (2 x 16 KiB at bf16),
//     v 16 KiB; out fp32: W, U, Qs, Kd 4 x 32 KiB + P 16 KiB = 144 KiB.
//   state kernel (4 slices of 32 columns): mma FLOP 3 * 2*(64*128*128 [WS] + 64*128*128 [QsS] +
//     64*64*128 [PVn] + 128*64*128 [KdVn]) = 22 MFLOP; bytes read per slice ~ 112 KiB
//     (W, Qs, Kd, P shared by 4 slices, mostly from L2) + 8 KiB U; o out 16 KiB (bf16).
//   T = 32768, HV = 48: workspace 3.5 GB written + ~3.5-7 GB read => ~1.7-2.5 ms of bytes;
//   this v1 is bound by that and by the per-chunk latency of the state kernel: per chunk one
//   block issues 1344 mma's from scalar smem fragment loads (~15-20 k instructions per warp,
//   ~5-8 us), x 512 chunks => ~3-4 ms at T = 32768. v1 predicted total ~3.5 ms (fla 2.78 ms);
//   the plan to reach <= 0.55 ms is in docs/NOTES_wy_tc.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/internal.hpp"
#include "cuda/common/common.cuh"

namespace gdn::detail {
namespace {

using cuda::from_f32;
using cuda::to_f32;

struct WyTcConfig {
  static constexpr int kChunk = 64;    // C: fla convention; 4 warps x one m16 row tile each
  static constexpr int kThreads = 128; // 4 warps: the 64 chunk rows split into m16 tiles
  static constexpr int kVSlice = 32;   // state pass columns per block: HV=48, V=128 gives 192
                                       // blocks for one sequence (>= 132 SMs on the H200)
  static constexpr int kPad = 4;       // fp32 words of padding per smem row (fragment loads)
};
using Cfg = WyTcConfig;
static_assert(Cfg::kChunk == 16 * (Cfg::kThreads / 32), "one m16 tile per warp over the chunk");
static_assert(Cfg::kVSlice % 8 == 0, "slice is a whole number of n8 tiles");

// ---- mma.sync m16n8k16 bf16 -> fp32, fragments per the PTX ISA (lane = 4 * gid + tig):
// A (16x16, row): a0 (gid, 2tig..+1), a1 (gid+8, 2tig..), a2 (gid, 2tig+8..), a3 (gid+8, 2tig+8..)
// B (16x8, col):  b0 (k = 2tig..+1, n = gid), b1 (k = 2tig+8..+9, n = gid)
// C (16x8 fp32):  c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig), c3 (gid+8, 2tig+1)
// The lower-indexed element of a pair sits in the low 16 bits.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo_idx, float hi_idx) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo_idx, hi_idx);  // .x (low bits) = first argument
  return *reinterpret_cast<std::uint32_t*>(&v);
}
// x = hi + lo, both bf16; returns the residual that lo represents.
__device__ __forceinline__ float bf16_residual(float x) {
  return x - __bfloat162float(__float2bfloat16_rn(x));
}

// acc[nt] (16 x 8 tiles, nt < NT) += A[16 x 16*KSTEPS] B[16*KSTEPS x 8*NT] for one warp, with
// element accessors a(r, k) and b(k, n). kSplitA / kSplitB: operand is not exactly bf16 and gets
// the hi + lo treatment described in the file header.
template <bool kSplitA, bool kSplitB, int NT, int KSTEPS, typename FA, typename FB>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], FA a, FB b) {
  const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
#pragma unroll 1
  for (int ks = 0; ks < KSTEPS; ++ks) {
    const int k0 = ks * 16 + 2 * tig;
    float av[8];
    av[0] = a(gid, k0);
    av[1] = a(gid, k0 + 1);
    av[2] = a(gid + 8, k0);
    av[3] = a(gid + 8, k0 + 1);
    av[4] = a(gid, k0 + 8);
    av[5] = a(gid, k0 + 9);
    av[6] = a(gid + 8, k0 + 8);
    av[7] = a(gid + 8, k0 + 9);
    std::uint32_t ahi[4], alo[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      ahi[r] = pack_bf16(av[2 * r], av[2 * r + 1]);
      if constexpr (kSplitA)
        alo[r] = pack_bf16(bf16_residual(av[2 * r]), bf16_residual(av[2 * r + 1]));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = nt * 8 + gid;
      const float b0 = b(k0, n), b1 = b(k0 + 1, n), b2 = b(k0 + 8, n), b3 = b(k0 + 9, n);
      const std::uint32_t bhi[2] = {pack_bf16(b0, b1), pack_bf16(b2, b3)};
      if constexpr (kSplitB) {
        const std::uint32_t blo[2] = {pack_bf16(bf16_residual(b0), bf16_residual(b1)),
                                      pack_bf16(bf16_residual(b2), bf16_residual(b3))};
        mma_bf16(acc[nt], ahi, blo);
      }
      if constexpr (kSplitA) mma_bf16(acc[nt], alo, bhi);
      mma_bf16(acc[nt], ahi, bhi);
    }
  }
}

// Row / column of accumulator element e of n-tile nt for this lane (C layout above).
__device__ __forceinline__ int acc_row(int e) { return ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int acc_col(int nt, int e) {
  return nt * 8 + 2 * (threadIdx.x & 3) + (e & 1);
}

// Workspace tiles per (global chunk, value head), fp32.
struct Workspace {
  float* w;   // [NC, HV, C, K]
  float* u;   // [NC, HV, C, V]
  float* qs;  // [NC, HV, C, K]
  float* kd;  // [NC, HV, C, K]
  float* p;   // [NC, HV, C, C]
  float* gc;  // [NC, HV]  G at the chunk's end
};

struct ChunkParams {
  const void* q;  // [T, HK, K]
  const void* k;  // [T, HK, K]
  const void* v;  // [T, HV, V]
  const float* g;      // [T, HV]
  const void* beta;    // [T, HV]
  std::int64_t q_st, q_sh, k_st, k_sh, v_st, v_sh, g_st, b_st;  // token / head strides
  const std::int32_t* chunk_tok0;  // [NC] first token of each chunk
  const std::int32_t* chunk_len;   // [NC] 1..64
  int HK, HV;
  bool tiled, l2norm;
  float scale;
  Workspace ws;
};

template <int K, int V> struct ChunkSmem {
  static constexpr int LK = K + Cfg::kPad;                  // sK row stride
  static constexpr int LQ = (K > V ? K : V) + Cfg::kPad;   // sQ row stride (q, then v)
  static constexpr int LA = Cfg::kChunk + Cfg::kPad;        // sA / sX row stride
  // sK 64 x LK x 4 B (33.8 KiB at K=128), sQ 64 x LQ x 4 B (33.8 KiB), sA and sX 64 x 68 x 4 B
  // (17 KiB each), sG, sE, sB 3 x 256 B: ~102 KiB, two blocks per SM on the H200.
  static constexpr int floats = Cfg::kChunk * (LK + LQ + 2 * LA) + 3 * Cfg::kChunk;
  static constexpr std::size_t bytes = sizeof(float) * floats;
};

// kExactQK: q and k reach the folds exactly as bf16 numbers (bf16 io without in-kernel L2 norm).
template <typename TIn, typename TBeta, int K, int V, bool kExactQK>
__global__ void __launch_bounds__(Cfg::kThreads) wy_tc_chunk_kernel(ChunkParams p) {
  constexpr int C = Cfg::kChunk;
  constexpr bool kExact = kExactQK;
  constexpr bool kExactV = std::is_same_v<TIn, __nv_bfloat16>;  // v is never normalized
  static_assert(!kExactQK || kExactV, "exact q/k only for bf16 io");
  using Sm = ChunkSmem<K, V>;
  constexpr int LK = Sm::LK, LQ = Sm::LQ, LA = Sm::LA;
  extern __shared__ float smem[];
  float* sK = smem;          // [C][LK] keys (normalized if asked)
  float* sQ = sK + C * LK;   // [C][LQ] queries, later values
  float* sA = sQ + C * LQ;   // [C][LA] strict-lower A
  float* sX = sA + C * LA;   // [C][LA] (I + A)^-1
  float* sG = sX + C * LA;   // [C] cumulative log-decay
  float* sE = sG + C;        // [C] exp(G)
  float* sB = sE + C;        // [C] beta

  const int cg = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
  const int kh = p.tiled ? h % p.HK : h / (p.HV / p.HK);
  const TIn* q = static_cast<const TIn*>(p.q);
  const TIn* k = static_cast<const TIn*>(p.k);
  const TIn* v = static_cast<const TIn*>(p.v);
  const TBeta* beta = static_cast<const TBeta*>(p.beta);

  // Rows past the sequence's end are zero with g = 0, beta = 0: they add nothing to W, U, P, Kd
  // and leave G at the chunk's end equal to G of its last token.
  for (int i = tid; i < C * K; i += Cfg::kThreads) {
    const int r = i / K, c = i % K;
    const std::int64_t t = tok0 + r;
    sK[r * LK + c] = r < len ? to_f32(k[t * p.k_st + kh * p.k_sh + c]) : 0.f;
    sQ[r * LQ + c] = r < len ? to_f32(q[t * p.q_st + kh * p.q_sh + c]) : 0.f;
  }
  if (tid < C) {
    const std::int64_t t = tok0 + tid;
    sG[tid] = tid < len ? p.g[t * p.g_st + h] : 0.f;
    sB[tid] = tid < len ? to_f32(beta[t * p.b_st + h]) : 0.f;
  }
  __syncthreads();
  if (p.l2norm) {
    for (int r = warp; r < 2 * C; r += Cfg::kThreads / 32) {
      float* row = r < C ? sK + r * LK : sQ + (r - C) * LQ;
      float ss = 0.f;
      for (int c = lane; c < K; c += 32) ss += row[c] * row[c];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = rsqrtf(ss + 1e-6f);
      for (int c = lane; c < K; c += 32) row[c] *= inv;
    }
  }
  if (tid == 0) {
    float run = 0.f;
    for (int i = 0; i < C; ++i) {
      run += sG[i];
      sG[i] = run;
    }
  }
  __syncthreads();
  if (tid < C) sE[tid] = expf(sG[tid]);

  const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
  const int m0 = warp * 16;
  // K K^T -> A (strict lower, gated, beta rows); the gate exponent is masked before the exp.
  {
    float acc[C / 8][4] = {};
    warp_mma<!kExact, !kExact, C / 8, K / 16>(
        acc, [&](int r, int c) { return sK[(m0 + r) * LK + c]; },
        [&](int c, int n) { return sK[n * LK + c]; });
#pragma unroll
    for (int nt = 0; nt < C / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = m0 + acc_row(e), j = acc_col(nt, e);
        sA[i * LA + j] = i > j ? sB[i] * acc[nt][e] * expf(sG[i] - sG[j]) : 0.f;
      }
  }
  // scale (Q K^T .* Gam), lower incl. diagonal -> P.
  {
    float acc[C / 8][4] = {};
    warp_mma<!kExact, !kExact, C / 8, K / 16>(
        acc, [&](int r, int c) { return sQ[(m0 + r) * LQ + c]; },
        [&](int c, int n) { return sK[n * LK + c]; });
    float* P = p.ws.p + base * C * C;
#pragma unroll
    for (int nt = 0; nt < C / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = m0 + acc_row(e), j = acc_col(nt, e);
        P[i * C + j] = i >= j ? p.scale * acc[nt][e] * expf(sG[i] - sG[j]) : 0.f;
      }
  }
  __syncthreads();  // sE ready; sQ reads done
  {
    float* Qs = p.ws.qs + base * C * K;
    float* Kd = p.ws.kd + base * C * K;
    const float gC = sG[C - 1];
    for (int i = tid; i < C * K; i += Cfg::kThreads) {
      const int r = i / K, c = i % K;
      Qs[i] = p.scale * sE[r] * sQ[r * LQ + c];
      Kd[i] = expf(gC - sG[r]) * sK[r * LK + c];
    }
    if (tid == 0) p.ws.gc[base] = gC;
  }
  __syncthreads();  // sQ free for the values
  if (tid < C) {
    // Column c of X = (I + A)^-1 by forward substitution: X[i][c] = d_ic - sum_j<i A[i][j] X[j][c].
    // Each thread owns its column, so no barrier inside; A[i][j] is a broadcast read.
    const int c = tid;
    for (int i = 0; i < C; ++i) {
      float x = i == c ? 1.f : 0.f;
      for (int j = c; j < i; ++j) x -= sA[i * LA + j] * sX[j * LA + c];
      sX[i * LA + c] = i < c ? 0.f : x;
    }
  } else {
    for (int i = tid - C; i < C * V; i += Cfg::kThreads - C) {
      const int r = i / V, c = i % V;
      sQ[r * LQ + c] = r < len ? to_f32(v[(tok0 + r) * p.v_st + h * p.v_sh + c]) : 0.f;
    }
  }
  __syncthreads();
  // Tm = X diag(beta). W = Tm diag(exp G) K, U = Tm V.
  auto tm = [&](int r, int j) { return sX[(m0 + r) * LA + j] * sB[j]; };
  {
    float acc[K / 8][4] = {};
    warp_mma<true, true, K / 8, C / 16>(acc, tm,
                                        [&](int j, int n) { return sE[j] * sK[j * LK + n]; });
    float* W = p.ws.w + base * C * K;
#pragma unroll
    for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; e += 2)
        *reinterpret_cast<float2*>(&W[(m0 + acc_row(e)) * K + acc_col(nt, e)]) =
            make_float2(acc[nt][e], acc[nt][e + 1]);
  }
  {
    float acc[V / 8][4] = {};
    warp_mma<true, !kExactV, V / 8, C / 16>(acc, tm,
                                           [&](int j, int n) { return sQ[j * LQ + n]; });
    float* U = p.ws.u + base * C * V;
#pragma unroll
    for (int nt = 0; nt < V / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; e += 2)
        *reinterpret_cast<float2*>(&U[(m0 + acc_row(e)) * V + acc_col(nt, e)]) =
            make_float2(acc[nt][e], acc[nt][e + 1]);
  }
}

struct StateParams {
  void* o;  // [T, HV, V]
  std::int64_t o_st, o_sh;
  const float* h0;  // [N, HV, K, V] or [N, HV, V, K]; null = zero
  float* hT;        // same; null = not written; may equal h0
  bool vk;
  const std::int32_t* chunk_tok0;  // [NC]
  const std::int32_t* chunk_len;   // [NC]
  const std::int32_t* seq_chunk0;  // [N+1] first global chunk of each sequence
  int HV;
  Workspace ws;
};

template <int K, int V> struct StateSmem {
  static constexpr int VS = Cfg::kVSlice;
  static constexpr int LK = K + Cfg::kPad;        // sW, sQs, sKd row stride
  static constexpr int LP = Cfg::kChunk + Cfg::kPad;  // sP row stride
  static constexpr int LS = VS + Cfg::kPad;       // sU, sVn, sS row stride
  // sW, sQs, sKd 3 x 64 x 132 x 4 B (101 KiB at K=128), sP 64 x 68 x 4 B (17 KiB), sU, sVn
  // 2 x 64 x 36 x 4 B (18 KiB), sS K x 36 x 4 B (18 KiB): ~155 KiB, fits sm_80 (163 KiB) and
  // sm_90 (227 KiB), one block per SM.
  static constexpr int floats = Cfg::kChunk * (3 * LK + LP + 2 * LS) + K * LS;
  static constexpr std::size_t bytes = sizeof(float) * floats;
};

template <typename TOut, int K, int V>
__global__ void __launch_bounds__(Cfg::kThreads, 1) wy_tc_state_kernel(StateParams p) {
  constexpr int C = Cfg::kChunk, VS = Cfg::kVSlice, NS = V / VS;
  using Sm = StateSmem<K, V>;
  constexpr int LK = Sm::LK, LP = Sm::LP, LS = Sm::LS;
  constexpr int MT = K / 16 / (Cfg::kThreads / 32);  // m16 tiles of S' rows per warp
  static_assert(MT >= 1 && K % (16 * (Cfg::kThreads / 32)) == 0, "state rows split over warps");
  extern __shared__ float smem[];
  float* sW = smem;           // [C][LK]
  float* sQs = sW + C * LK;   // [C][LK]
  float* sKd = sQs + C * LK;  // [C][LK]
  float* sP = sKd + C * LK;   // [C][LP]
  float* sU = sP + C * LP;    // [C][LS] U slice
  float* sVn = sU + C * LS;   // [C][LS] Vn slice
  float* sS = sVn + C * LS;   // [K][LS] state slice S[:, s0 : s0 + VS]

  const int slice = blockIdx.x % NS, h = (blockIdx.x / NS) % p.HV, n = blockIdx.x / (NS * p.HV);
  const int s0 = slice * VS, tid = threadIdx.x, warp = tid >> 5;
  const std::int64_t nh = static_cast<std::int64_t>(n) * p.HV + h;
  for (int i = tid; i < K * VS; i += Cfg::kThreads) {
    const int r = i / VS, c = i % VS;
    const std::int64_t idx = p.vk ? (nh * V + s0 + c) * K + r : (nh * K + r) * V + s0 + c;
    sS[r * LS + c] = p.h0 ? p.h0[idx] : 0.f;
  }
  TOut* o = static_cast<TOut*>(p.o);
  const int m0 = warp * 16;
  for (int cg = p.seq_chunk0[n]; cg < p.seq_chunk0[n + 1]; ++cg) {
    const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
    const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
    for (int i = tid; i < C * K / 4; i += Cfg::kThreads) {
      const int r = (4 * i) / K, c = (4 * i) % K;
      const float4 w = reinterpret_cast<const float4*>(p.ws.w + base * C * K)[i];
      const float4 qs = reinterpret_cast<const float4*>(p.ws.qs + base * C * K)[i];
      const float4 kd = reinterpret_cast<const float4*>(p.ws.kd + base * C * K)[i];
      *reinterpret_cast<float4*>(&sW[r * LK + c]) = w;
      *reinterpret_cast<float4*>(&sQs[r * LK + c]) = qs;
      *reinterpret_cast<float4*>(&sKd[r * LK + c]) = kd;
    }
    for (int i = tid; i < C * C / 4; i += Cfg::kThreads) {
      const int r = (4 * i) / C, c = (4 * i) % C;
      *reinterpret_cast<float4*>(&sP[r * LP + c]) =
          reinterpret_cast<const float4*>(p.ws.p + base * C * C)[i];
    }
    for (int i = tid; i < C * VS / 4; i += Cfg::kThreads) {
      const int r = (4 * i) / VS, c = (4 * i) % VS;
      *reinterpret_cast<float4*>(&sU[r * LS + c]) =
          *reinterpret_cast<const float4*>(p.ws.u + (base * C + r) * V + s0 + c);
    }
    const float decay = expf(p.ws.gc[base]);
    __syncthreads();
    auto s_at = [&](int r, int c) { return sS[r * LS + c]; };
    {  // Vn = U - W S
      float acc[VS / 8][4] = {};
      warp_mma<true, true, VS / 8, K / 16>(
          acc, [&](int r, int c) { return sW[(m0 + r) * LK + c]; }, s_at);
#pragma unroll
      for (int nt = 0; nt < VS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = m0 + acc_row(e), j = acc_col(nt, e);
          sVn[i * LS + j] = sU[i * LS + j] - acc[nt][e];
        }
    }
    __syncthreads();
    {  // O = Qs S + P Vn (scale is inside Qs and P)
      float acc[VS / 8][4] = {};
      warp_mma<true, true, VS / 8, K / 16>(
          acc, [&](int r, int c) { return sQs[(m0 + r) * LK + c]; }, s_at);
      warp_mma<true, true, VS / 8, C / 16>(
          acc, [&](int r, int c) { return sP[(m0 + r) * LP + c]; },
          [&](int c, int nn) { return sVn[c * LS + nn]; });
#pragma unroll
      for (int nt = 0; nt < VS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = m0 + acc_row(e), j = acc_col(nt, e);
          if (i < len) o[(tok0 + i) * p.o_st + h * p.o_sh + s0 + j] = from_f32<TOut>(acc[nt][e]);
        }
    }
    // S' = exp(G_C) S + Kd^T Vn; warp owns state rows [warp * 16 MT, +16 MT).
    float acc[MT][VS / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r0 = (warp * MT + mt) * 16;
#pragma unroll
      for (int nt = 0; nt < VS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[mt][nt][e] = decay * sS[(r0 + acc_row(e)) * LS + acc_col(nt, e)];
      warp_mma<true, true, VS / 8, C / 16>(
          acc[mt], [&](int r, int c) { return sKd[c * LK + r0 + r]; },
          [&](int c, int nn) { return sVn[c * LS + nn]; });
    }
    __syncthreads();  // every read of sS and the tiles is done
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r0 = (warp * MT + mt) * 16;
#pragma unroll
      for (int nt = 0; nt < VS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sS[(r0 + acc_row(e)) * LS + acc_col(nt, e)] = acc[mt][nt][e];
    }
  }
  __syncthreads();
  if (p.hT) {
    for (int i = tid; i < K * VS; i += Cfg::kThreads) {
      const int r = i / VS, c = i % VS;
      const std::int64_t idx = p.vk ? (nh * V + s0 + c) * K + r : (nh * K + r) * V + s0 + c;
      p.hT[idx] = sS[r * LS + c];
    }
  }
}

std::size_t align_up(std::size_t x) { return (x + 255) / 256 * 256; }

template <int K, int V>
Status launch(const Problem& pr, const PrefillArgs& a, const Seqs& s) {
  constexpr int C = Cfg::kChunk;
  cudaStream_t st = cuda::stream_of(a);
  // Chunk table on the host: chunks never cross sequence boundaries.
  std::vector<std::int32_t> tab;  // [tok0 x NC | len x NC | seq_chunk0 x (N+1)]
  std::vector<std::int32_t> tok0, len, first(s.N + 1, 0);
  for (int n = 0; n < s.N; ++n) {
    first[n] = static_cast<std::int32_t>(tok0.size());
    for (std::int64_t t = 0; t < s.seq_len(n); t += C) {
      tok0.push_back(static_cast<std::int32_t>(s.cu[n] + t));
      len.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(C, s.seq_len(n) - t)));
    }
  }
  const std::int64_t NC = static_cast<std::int64_t>(tok0.size());
  first[s.N] = static_cast<std::int32_t>(NC);
  tab.insert(tab.end(), tok0.begin(), tok0.end());
  tab.insert(tab.end(), len.begin(), len.end());
  tab.insert(tab.end(), first.begin(), first.end());

  const std::int64_t tiles = NC * pr.HV;
  const std::size_t b_tab = align_up(tab.size() * 4);
  const std::size_t b_ck = align_up(sizeof(float) * tiles * C * K);
  const std::size_t b_cv = align_up(sizeof(float) * tiles * C * V);
  const std::size_t b_cc = align_up(sizeof(float) * tiles * C * C);
  const std::size_t b_gc = align_up(sizeof(float) * tiles);
  cuda::Scratch scratch(st);
  Status stt = scratch.alloc(b_tab + 3 * b_ck + b_cv + b_cc + b_gc);
  if (!stt.ok()) return stt;
  std::int32_t* d_tab = scratch.as<std::int32_t>(0);
  GDN_CUDA_TRY(cudaMemcpyAsync(d_tab, tab.data(), tab.size() * 4, cudaMemcpyHostToDevice, st));
  Workspace ws;
  std::size_t off = b_tab;
  ws.w = scratch.as<float>(off), off += b_ck;
  ws.qs = scratch.as<float>(off), off += b_ck;
  ws.kd = scratch.as<float>(off), off += b_ck;
  ws.u = scratch.as<float>(off), off += b_cv;
  ws.p = scratch.as<float>(off), off += b_cc;
  ws.gc = scratch.as<float>(off);
  const std::int32_t* d_tok0 = d_tab;
  const std::int32_t* d_len = d_tab + NC;
  const std::int32_t* d_first = d_tab + 2 * NC;

  if (NC > 0) {
    ChunkParams cp{};
    cp.q = a.q.data, cp.k = a.k.data, cp.v = a.v.data;
    cp.g = static_cast<const float*>(a.g.data);
    cp.beta = a.beta.data;
    cp.q_st = a.q.stride[0], cp.q_sh = a.q.stride[1];
    cp.k_st = a.k.stride[0], cp.k_sh = a.k.stride[1];
    cp.v_st = a.v.stride[0], cp.v_sh = a.v.stride[1];
    cp.g_st = a.g.stride[0], cp.b_st = a.beta.stride[0];
    cp.chunk_tok0 = d_tok0, cp.chunk_len = d_len;
    cp.HK = pr.HK, cp.HV = pr.HV;
    cp.tiled = pr.head_map == HeadMap::tiled;
    cp.l2norm = pr.qk_l2norm;
    cp.scale = pr.scale;
    cp.ws = ws;
    if (NC > 0x7fffffff) return Status::Unsupported("wy-tc: too many chunks");
    const dim3 grid(static_cast<unsigned>(NC), static_cast<unsigned>(pr.HV));
    Status ls = cuda::dispatch_dtype(a.q.dtype, [&](auto tin) -> Status {
      using TIn = decltype(tin);
      auto go = [&](auto kern) -> Status {
        constexpr std::size_t smem = ChunkSmem<K, V>::bytes;
        GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
        kern<<<grid, Cfg::kThreads, smem, st>>>(cp);
        GDN_CUDA_LAUNCH_CHECK("wy_tc_chunk_kernel");
        return Status::Ok();
      };
      constexpr bool kBf16 = std::is_same_v<TIn, __nv_bfloat16>;
      const bool exact = kBf16 && !pr.qk_l2norm;
      if (a.beta.dtype == DType::bf16)
        return exact ? go(wy_tc_chunk_kernel<TIn, __nv_bfloat16, K, V, kBf16>)
                     : go(wy_tc_chunk_kernel<TIn, __nv_bfloat16, K, V, false>);
      return exact ? go(wy_tc_chunk_kernel<TIn, float, K, V, kBf16>)
                   : go(wy_tc_chunk_kernel<TIn, float, K, V, false>);
    });
    if (!ls.ok()) return ls;
  }

  StateParams sp{};
  sp.o = a.o.data, sp.o_st = a.o.stride[0], sp.o_sh = a.o.stride[1];
  sp.h0 = static_cast<const float*>(a.h0.data);
  sp.hT = static_cast<float*>(a.hT.data);
  sp.vk = pr.state_layout == StateLayout::vk;
  sp.chunk_tok0 = d_tok0, sp.chunk_len = d_len, sp.seq_chunk0 = d_first;
  sp.HV = pr.HV;
  sp.ws = ws;
  const std::int64_t blocks = static_cast<std::int64_t>(s.N) * pr.HV * (V / Cfg::kVSlice);
  if (blocks > 0x7fffffff) return Status::Unsupported("wy-tc: too many state blocks");
  Status ls = cuda::dispatch_dtype(a.o.dtype, [&](auto tout) -> Status {
    using TOut = decltype(tout);
    auto kern = wy_tc_state_kernel<TOut, K, V>;
    constexpr std::size_t smem = StateSmem<K, V>::bytes;
    GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
    kern<<<static_cast<unsigned>(blocks), Cfg::kThreads, smem, st>>>(sp);
    GDN_CUDA_LAUNCH_CHECK("wy_tc_state_kernel");
    return Status::Ok();
  });
  // The scratch is freed stream-ordered (cudaFreeAsync) after the kernels; no host sync here.
  return ls;
}

}  // namespace

bool cuda_wy_tc_supports(const Problem& p, std::string* why) {
  const bool ok = (p.K == 64 || p.K == 128) && (p.V == 64 || p.V == 128);
  if (!ok && why)
    *why = "wy-tc supports K, V in {64, 128}, got K=" + std::to_string(p.K) +
           ", V=" + std::to_string(p.V);
  return ok;
}

Status cuda_wy_tc_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s) {
  std::string why;
  if (!cuda_wy_tc_supports(p, &why)) return Status::Unsupported(why);
  if (p.K == 64 && p.V == 64) return launch<64, 64>(p, a, s);
  if (p.K == 64 && p.V == 128) return launch<64, 128>(p, a, s);
  if (p.K == 128 && p.V == 64) return launch<128, 64>(p, a, s);
  return launch<128, 128>(p, a, s);
}

}  // namespace gdn::detail
