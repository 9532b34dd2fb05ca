// wy-tc arm: chunked WY (DESIGN.md §2, C = 64) with tensor-core folds (mma.sync m16n8k16 bf16,
// fp32 accumulate; runs on sm_80 and sm_90), an fp32 triangular solve and fp32 state.
//
// Variants in this file (v2, docs/NOTES_wy_tc.md):
//   wy_tc_chunk_kernel<TIn, TBeta, K, V, kExactQK>  chunk-local, fully parallel over (chunk,
//       value head): G = cumsum(g) (warp scan); A = strict_lower(diag(beta)(K K^T .* Gam));
//       Tm = (I + A)^-1 diag(beta) (fp32 forward substitution, one column per thread in
//       registers); W = Tm diag(exp G) K; U = Tm V; P = scale (Q K^T .* Gam, lower incl. diag);
//       Qs = scale diag(exp G) Q; Kd = diag(exp(G_C - G)) K. W, Qs, Kd^T, P are written as
//       bf16 hi / lo planes (the split below, done once), U fp32.
//   wy_tc_chunk_kernel_v7  the same for bf16 io from bf16 smem tiles (ldmatrix, exact K K^T,
//       Q K^T; the default there, GDN_WYTC_CHUNK=v2 forces v2); solves by 16 x 16 blocks on all
//       four warps and forms U transposed (v6's work layout, see its section below), at 4
//       blocks per SM (128 registers, 52.75 KiB: the v tile loads into A's bytes after the
//       solve) with W balanced over the warps. (v6, bit-equal and 10% slower, was removed after
//       r12; in git at 636faf7.)
//   wy_tc_state_kernel<TOut, K, V>  sequential over the chunks of one sequence, one block per
//       (sequence, value head, 64 columns of V), 4 warps of 16 columns each; the transposed
//       state S^T lives in mma accumulator registers for the whole sequence:
//       Vn^T = U^T - S^T W^T;  O^T = S^T Qs^T + Vn^T P^T;  S^T' = exp(G_C) S^T + Vn^T Kd,
//       tiles double-buffered in two cp.async groups (W, Qs, U | P, Kd^T).
//
// Fold precision (what the derived bound must use). Every operand that is not exactly a bf16
// number is split x = hi + lo with hi = bf16(x), lo = bf16(x - hi) (16 significant bits, relative
// representation error <= 2^-17), and a product a b is formed as hi_a hi_b + hi_a lo_b + lo_a hi_b
// (3 mma's; the dropped lo_a lo_b term is <= 2^-16 |a||b|), accumulated in fp32. Exactly
// representable operands (bf16 q/k/v) use hi only. So: K K^T and Q K^T are exact products with fp32
// accumulation for bf16 io; every other fold, and every fold for f16 io (f16 splits exactly) and
// f32 io (inputs carried to 16 bits), has per-product relative error <= ~2^-15 plus fp32
// accumulation. The state never passes through a 2-byte format.
// That is the split scheme. The half scheme (the default on sm_90a for bf16 q/k/v, a 2-byte o and
// inputs inside gdn::kWyTcHalfMaxV / kWyTcHalfMaxQK; docs/bounds.md, Workspace::half_ws,
// wy_tc_state_kernel_wg9<..., kHalf>) rounds W, P, Q, the state read S^T (in X and OS) and OP's
// Vn^T once to fp16 (one product per fold); K K^T, Q K^T stay exact, the W / U T side and the
// state update's Vn^T diag(ed) stay split; the state itself is fp32 in both schemes.
//
// Cost model (v2), per (chunk of 64 tokens, value head), K = V = 128 (qwen3.5-27b: 512 chunks x
// 48 heads at T = 32768):
//   chunk kernel: ~2.1 MFLOP of mma + the 64 x 64 solve (2 k FMA per column thread); reads q, k,
//     v (48 KiB bf16), writes W, Qs, Kd^T hi/lo (96 KiB), P hi/lo (16 KiB), U fp32 (32 KiB).
//   state kernel: per warp and chunk 8 x 8 x 6 (S^T [W; Qs]^T) + 4 x 8 x 3 (Vn^T P^T) +
//     4 x 16 x 3 (Vn^T Kd) = 672 mma.sync on one warp's issue slot; per block 139 KiB of tiles
//     pulled per chunk (two blocks per head read the same tiles, the second mostly from L2).
//   Both passes are bound by the 144 KiB per (chunk, head) of workspace (3.5 GB written and
//   >= 3.5 GB read at T = 32768) and by the per-chunk latency of the 672 dependent-ish mma's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/internal.hpp"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/chunk_table.cuh"
#include "cuda/common/common.cuh"

namespace gdn::detail {
namespace {

using cuda::from_f32;
using cuda::to_f32;

struct WyTcConfig {
  static constexpr int kChunk = 64;    // C: fla convention; 4 warps x one m16 row tile each
  static constexpr int kThreads = 128; // 4 warps: the 64 chunk rows split into m16 tiles
  static constexpr int kPad = 4;       // fp32 words of padding per smem row (fragment loads)
};
using Cfg = WyTcConfig;
static_assert(Cfg::kChunk == 16 * (Cfg::kThreads / 32), "one m16 tile per warp over the chunk");

// ---- mma.sync m16n8k16 bf16 -> fp32, fragments per the PTX ISA (lane = 4 * gid + tig):
// A (16x16, row): a0 (gid, 2tig..+1), a1 (gid+8, 2tig..), a2 (gid, 2tig+8..), a3 (gid+8, 2tig+8..)
// B (16x8, col):  b0 (k = 2tig..+1, n = gid), b1 (k = 2tig+8..+9, n = gid)
// C (16x8 fp32):  c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig), c3 (gid+8, 2tig+1)
// The lower-indexed element of a pair sits in the low 16 bits.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         const std::uint32_t (&b)[2]) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo_idx, float hi_idx) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo_idx, hi_idx);  // .x (low bits) = first argument
  return *reinterpret_cast<std::uint32_t*>(&v);
}
// Two fp32 values rounded to fp16 (round to nearest even) and packed, the first in the low half.
__device__ __forceinline__ std::uint32_t pack_f16(float lo_idx, float hi_idx) {
  __half2 v = __floats2half2_rn(lo_idx, hi_idx);
  return *reinterpret_cast<std::uint32_t*>(&v);
}
// A bf16 pair as an fp16 pair (exact for |x| in [2^-14, 65504]: bf16's 8 significant bits fit in
// fp16's 11; smaller values lose bits as fp16 subnormals, larger ones overflow: the half
// scheme's input domain, gdn::kWyTcHalfMaxQK).
__device__ __forceinline__ std::uint32_t bf16x2_to_f16x2(std::uint32_t w) {
  return pack_f16(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
// 2^x by one MUFU.EX2 (ex2.approx.ftz.f32: about 2 ulp, as CUDA documents for exp2f, which
// compiles to it; results below 2^-126 flushed to zero). exp(x) = ex2_approx(x * log2 e) is CUDA's __expf without the
// input scaling that __expf adds for subnormal results.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
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

// Split x = hi + lo (bf16 each) for a pair of values; returns {hi pair, lo pair} as mma registers.
// hi's two bf16 halves are read back as fp32 by bit moves (bf16 is the top half of an fp32), so
// the split costs two conversions (the packs) instead of four.
__device__ __forceinline__ void split_pair(float a, float b, std::uint32_t& hi, std::uint32_t& lo) {
  hi = pack_bf16(a, b);
  const float ha = __uint_as_float(hi << 16), hb = __uint_as_float(hi & 0xffff0000u);
  lo = pack_bf16(a - ha, b - hb);
}

// Inclusive prefix sum of g over the C = 64 rows of a chunk, in place, by one warp: lane owns
// rows 2 lane and 2 lane + 1 (both chunk kernels).
__device__ __forceinline__ void chunk_cumsum(float* sG) {
  const int lane = threadIdx.x & 31;
  const float a = sG[2 * lane], b = sG[2 * lane + 1];
  float run = a + b;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float up = __shfl_up_sync(0xffffffffu, run, o);
    if (lane >= o) run += up;
  }
  const float before = __shfl_up_sync(0xffffffffu, run, 1);
  const float excl = lane == 0 ? 0.f : before;
  sG[2 * lane] = excl + a;
  sG[2 * lane + 1] = run;
}

// Column c of X = (I + A)^-1 (A strictly lower, C x C fp32 rows of stride LA in shared memory) by
// forward substitution, X[i][c] = d_ic - sum_j<i A[i][j] X[j][c], one thread per column, the
// column in registers (fully unrolled; X[j][c] = 0 for j < c), A rows read as float4 broadcasts,
// four partial sums to shorten the dependency chain (v2 chunk kernel: C = 64; v6: the
// 16 x 16 diagonal blocks, C = 16, sA and sX pointing at the block's first element).
template <int LA, int C = Cfg::kChunk>
__device__ __forceinline__ void solve_column(const float* sA, float* sX, int c) {
  float x[C];
#pragma unroll
  for (int i = 0; i < C; ++i) {
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
    for (int j = 0; j + 3 < i; j += 4) {
      const float4 a4 = *reinterpret_cast<const float4*>(&sA[i * LA + j]);
      s0 += a4.x * x[j];
      s1 += a4.y * x[j + 1];
      s2 += a4.z * x[j + 2];
      s3 += a4.w * x[j + 3];
    }
#pragma unroll
    for (int j = i & ~3; j < i; ++j) s0 += sA[i * LA + j] * x[j];
    const float xi = (i == c ? 1.f : 0.f) - ((s0 + s1) + (s2 + s3));
    x[i] = i < c ? 0.f : xi;
    sX[i * LA + c] = x[i];
  }
}

// Workspace tiles per (global chunk, value head). Tiles that feed mma B operands are pre-split
// into bf16 hi / lo planes, stored so that a B fragment register is one aligned 32-bit load
// (row = the mma's n index, contiguous pairs along its k index).
struct Workspace {
  std::uint32_t* wh;  // [NC, HV, C, K/2] W hi (bf16 pairs)
  std::uint32_t* wl;  // [NC, HV, C, K/2] W lo
  std::uint32_t* qh;  // [NC, HV, C, K/2] Qs = scale diag(exp G) Q, hi (exact format: below)
  std::uint32_t* ql;  // [NC, HV, C, K/2] Qs lo
  std::uint32_t* kh;  // [NC, HV, K, C/2] Kd^T, Kd = diag(exp(G_C - G)) K, hi
  std::uint32_t* kl;  // [NC, HV, K, C/2] Kd^T lo
  std::uint32_t* ph;  // [NC, HV, C, C/2] P = scale (Q K^T .* Gam) lower incl. diagonal, hi
  std::uint32_t* pl;  // [NC, HV, C, C/2] P lo
  float* u;           // [NC, HV, C, V] U = Tm V, fp32
  float* gc;          // [NC, HV] G at the chunk's end
  // Exact format (ChunkParams::exact_ws, bf16 q/k, wgmma state pass): qh holds Q itself and kh
  // K^T itself (exact bf16, no lo planes: ql, kl are not allocated), one tile per (chunk, KEY
  // head) [NC, HK, ...], written by the key head's first value head and read by all of them
  // (the tiles are the same for every value head of a key head; 1/3 of the bytes at HV = 3 HK);
  // the diagonal scalings travel as fp32 vectors:
  float* eq;          // [NC, HV, C] scale exp(G_i) / |q_i|  (O^T = (S^T Q^T) diag(eq) + ...)
  float* ed;          // [NC, HV, C] exp(G_C - G_j) / |k_j|  (S^T += (Vn^T diag(ed)) K)
  // Half format (ChunkParams::half_ws, the exact format of the half operand scheme, docs/
  // bounds.md): wh holds W rounded once to fp16 (wl not used), ph P rounded once to fp16 (pl not
  // used), qh Q converted to fp16 (exact inside gdn::kWyTcHalfMaxQK); kh stays the exact bf16 K^T
  // and u, gc, eq, ed are unchanged. Same tile layouts, 2-byte elements.
  // K16 (ChunkParams::k16, U16 only; bound row half-u16-d16, docs/bounds.md): kh holds K^T
  // converted to fp16 as qh holds Q (exact inside gdn::kWyTcHalfMaxQK), still per key head.
  // U16 (ChunkParams::u16, half format only): U rounded once to fp16 from its fp32 accumulator,
  // [NC, HV, C, V] halves in the first half of u's bytes, the same element order (ws_u order:
  // a lane's four values of an n-tile are one 8-byte piece instead of one float4).
};

// Workspace layouts. A bf16 tile of NR rows (the mma's n index) and KC columns (its k index)
// is stored in the canonical no-swizzle K-major order of the Hopper tensor cores: the 16-byte
// piece (row r, columns 8 kb .. 8 kb + 7) is piece number (kb * NR / 8 + r / 8) * 8 + r % 8, so
// every 8 x 16-byte core matrix is 128 contiguous bytes. The wgmma state pass copies whole tiles
// with one bulk copy each and reads them through matrix descriptors; the mma.sync state pass
// copies whole tiles too and reads its fragments by ldmatrix. ws_word: 32-bit word of the pair
// (r, c..c+1), c even.
template <int NR> __device__ __forceinline__ int ws_word(int r, int c) {
  return ((((c >> 3) * (NR / 8) + (r >> 3)) << 3) + (r & 7)) * 4 + ((c & 7) >> 1);
}
// U = Tm V (fp32, C x V per (chunk, head)) in slices of 64 columns (one state block each), each
// slice in the state pass's accumulator-fragment order: the 4 elements of n-tile nt = c / 8 that
// lane l of warp w holds are float4 number nt * 128 + 32 w + l (a warp reads 512 contiguous
// bytes per n-tile). ws_u: word of element (c, v).
__device__ __forceinline__ int ws_u(int c, int v) {
  const int s = v >> 6, w = (v & 63) >> 4, gid = v & 7, hi = (v & 15) >> 3;
  const int nt = c >> 3, tig = (c & 7) >> 1, lo = c & 1;
  return s * 64 * 64 + ((nt * 128 + w * 32 + gid * 4 + tig) << 2) + 2 * hi + lo;
}

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
  bool exact_ws;  // write the exact workspace format (v7 chunk kernel only; see Workspace)
  bool half_ws;   // exact format with fp16 W, P, Q (the half scheme; v7 only; see Workspace)
  bool u16;       // half format with U stored as fp16 (v7 only; see Workspace)
  bool k16;       // U16 with K^T converted to fp16 (v7 only; see Workspace)
  float scale;
  Workspace ws;
  int chunk0;  // global chunk of blockIdx.x = 0 (a segment's first chunk; 0 for all chunks)
  // Flag pipeline (v7 only; null = off): the grid is (HV, chunks), heads fastest, so blocks are
  // dispatched chunk by chunk in the state chain's order. ready[cg * HV + h] (zeroed before the
  // launch) counts in its high half the blocks whose tiles value head h's state block needs for
  // chunk cg: block (cg, h) adds 1 and G_C's bits (the low half), and the block that writes the
  // key head's Q / K tiles, if another, adds 1 (publish_ready). The state pass, running at the same
  // time, waits for 1 or 2 (see launch()).
  unsigned long long* ready;
  // GDN_WYTC_FLAGS_TRACE (experiments; null = off): the %globaltimer of each block's publication,
  // [NC * HV].
  unsigned long long* trace;
};

// Whether value head h writes its key head's Q / K workspace tiles in the exact format (the key
// head's first value head: h < HK in the tiled map, h % (HV / HK) == 0 in the grouped one). The
// chunk kernel, the flag pipeline's publication and the state pass's ready count agree on it.
__host__ __device__ __forceinline__ bool writes_qk_tiles(int h, int HV, int HK, bool tiled) {
  return tiled ? h < HK : h % (HV / HK) == 0;
}

// The flag pipeline's publication of chunk block (cg, h), thread 0, after every thread's
// workspace stores, a fence and a block barrier: its own word (one arrival, G_C in the low half),
// and, for the block that writes the key head's Q / K tiles, one arrival in the words of the key
// head's other value heads.
__device__ __forceinline__ void publish_ready(const ChunkParams& p, int cg, int h, float gc) {
  unsigned long long* w = p.ready + static_cast<std::int64_t>(cg) * p.HV;
  if (p.trace) p.trace[static_cast<std::int64_t>(cg) * p.HV + h] = cuda::global_ns();
  cuda::ready_add(w + h, (1ull << 32) | __float_as_uint(gc));
  const int g = p.HV / p.HK;
  if (g > 1 && writes_qk_tiles(h, p.HV, p.HK, p.tiled))
    for (int j = 1; j < g; ++j) cuda::ready_add(w + (p.tiled ? h + j * p.HK : h + j), 1ull << 32);
}

template <int K, int V> struct ChunkSmem {
  static constexpr int LK = K + Cfg::kPad;                  // sK row stride
  static constexpr int LQ = (K > V ? K : V) + Cfg::kPad;   // sQ row stride (q, then v)
  static constexpr int LA = Cfg::kChunk + Cfg::kPad;        // sA / sX row stride (float4 rows)
  // sK 64 x LK x 4 B (33.8 KiB at K=128), sQ 64 x LQ x 4 B (33.8 KiB), sA and sX 64 x 68 x 4 B
  // (17 KiB each), sG, sE, sB, sD 4 x 256 B: ~102 KiB, two blocks per SM on the H200.
  static constexpr int floats = Cfg::kChunk * (LK + LQ + 2 * LA) + 4 * Cfg::kChunk;
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
  float* sD = sB + C;        // [C] exp(G_C - G)

  const int cg = p.chunk0 + blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5,
            lane = tid & 31;
  const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
  if (len == 0) return;  // slack entry of an upper-bound chunk table (whole block)
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
  if (warp == 0) chunk_cumsum(sG);
  __syncthreads();
  if (tid < C) {
    sE[tid] = expf(sG[tid]);
    sD[tid] = expf(sG[C - 1] - sG[tid]);
  }

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
  // scale (Q K^T .* Gam), lower incl. diagonal -> P (hi / lo pairs).
  {
    float acc[C / 8][4] = {};
    warp_mma<!kExact, !kExact, C / 8, K / 16>(
        acc, [&](int r, int c) { return sQ[(m0 + r) * LQ + c]; },
        [&](int c, int n) { return sK[n * LK + c]; });
    std::uint32_t* Ph = p.ws.ph + base * C * C / 2;
    std::uint32_t* Pl = p.ws.pl + base * C * C / 2;
#pragma unroll
    for (int nt = 0; nt < C / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int i = m0 + acc_row(e), j = acc_col(nt, e);
        const float x0 = i >= j ? p.scale * acc[nt][e] * expf(sG[i] - sG[j]) : 0.f;
        const float x1 = i >= j + 1 ? p.scale * acc[nt][e + 1] * expf(sG[i] - sG[j + 1]) : 0.f;
        split_pair(x0, x1, Ph[ws_word<C>(i, j)], Pl[ws_word<C>(i, j)]);
      }
  }
  __syncthreads();  // sE, sD ready; sQ reads done
  {
    std::uint32_t* Qh = p.ws.qh + base * C * K / 2;
    std::uint32_t* Ql = p.ws.ql + base * C * K / 2;
    for (int i = tid; i < C * K / 2; i += Cfg::kThreads) {
      const int r = (2 * i) / K, c = (2 * i) % K;
      const float f = p.scale * sE[r];
      split_pair(f * sQ[r * LQ + c], f * sQ[r * LQ + c + 1], Qh[ws_word<C>(r, c)],
                 Ql[ws_word<C>(r, c)]);
    }
    std::uint32_t* Kh = p.ws.kh + base * K * C / 2;  // Kd^T: row = key dim, pairs along tokens
    std::uint32_t* Kl = p.ws.kl + base * K * C / 2;
    for (int i = tid; i < C * K / 2; i += Cfg::kThreads) {
      const int d = (2 * i) / C, r = (2 * i) % C;
      split_pair(sD[r] * sK[r * LK + d], sD[r + 1] * sK[(r + 1) * LK + d], Kh[ws_word<K>(d, r)],
                 Kl[ws_word<K>(d, r)]);
    }
    if (tid == 0) p.ws.gc[base] = sG[C - 1];
  }
  __syncthreads();  // sQ free for the values
  if (tid < C) {
    solve_column<LA>(sA, sX, tid);
  } else {
    for (int i = tid - C; i < C * V; i += Cfg::kThreads - C) {
      const int r = i / V, c = i % V;
      sQ[r * LQ + c] = r < len ? to_f32(v[(tok0 + r) * p.v_st + h * p.v_sh + c]) : 0.f;
    }
  }
  __syncthreads();
  // Tm = X diag(beta). W = Tm diag(exp G) K (hi / lo pairs), U = Tm V (fp32).
  auto tm = [&](int r, int j) { return sX[(m0 + r) * LA + j] * sB[j]; };
  {
    float acc[K / 8][4] = {};
    warp_mma<true, true, K / 8, C / 16>(acc, tm,
                                        [&](int j, int n) { return sE[j] * sK[j * LK + n]; });
    std::uint32_t* Wh = p.ws.wh + base * C * K / 2;
    std::uint32_t* Wl = p.ws.wl + base * C * K / 2;
#pragma unroll
    for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int at = ws_word<C>(m0 + acc_row(e), acc_col(nt, e));
        split_pair(acc[nt][e], acc[nt][e + 1], Wh[at], Wl[at]);
      }
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
      {
        const int r = m0 + acc_row(e), c = acc_col(nt, e);
        U[ws_u(r, c)] = acc[nt][e];
        U[ws_u(r, c + 1)] = acc[nt][e + 1];
      }
  }
}

struct StateParams {
  void* o;  // [T, HV, V]
  std::int64_t o_st, o_sh;
  bool o_vec;     // o rows start 16-byte aligned (v6 writes 16-byte pieces)
  const float* h0;  // [N, HV, K, V] or [N, HV, V, K]; null = zero
  float* hT;        // same; null = not written; may equal h0
  bool vk;
  const std::int32_t* chunk_tok0;  // [NC]
  const std::int32_t* chunk_len;   // [NC]
  const std::int32_t* seq_chunk0;  // [N+1] first global chunk of each sequence
  int HV;
  int HK;        // key heads: the exact workspace's Q and K^T tiles are per (chunk, key head)
  bool tiled;    // head map (value head h reads key head h % HK if tiled, else h / (HV / HK))
  float qk_inv;  // 1 / HK if tiled, else HK / HV (wg_qk_tile)
  int seg_c0, seg_c1;  // v9 only: the block runs its sequence's chunks in [seg_c0, seg_c1)
  int seq0;            // the sequence of blockIdx.x = 0 (a varlen group's first; else 0)
  bool wg_negctl;  // wgmma passes only (v6, v9), negative control (GDN_WYTC_WG_NEGCTL=1): the W^T fold reads the Qs
                   // tiles; parity must fail, which shows that the wgmma pass is the one running
  bool pair_negctl;  // v9 with paired slices only, negative control (GDN_WYTC_PAIR=negctl): both
                     // warpgroups read slice 0's U
  // Flag pipeline (the kFlags instantiation of v9 only): ready[cg * HV + h] counts, in its high
  // half, the chunk blocks (running at the same time) that have written chunk cg's tiles of value
  // head h (ready at 1 where h writes its key head's Q / K tiles, else 2); its low half holds
  // G_C (ChunkParams::ready).
  const unsigned long long* ready;
  // GDN_WYTC_FLAGS_TRACE (kFlags only; null = off), %globaltimer values: per state block [4]
  // (start, end, ns spent waiting, waits), then from trace + 4 * blocks the acquire time of each
  // chunk of block 0 [NC].
  unsigned long long* trace;
  Workspace ws;
};

// The state rows a warp of a state pass holds: S^T rows v0 + gid (+ 8) as mma accumulators,
// element (nt, e) = (row v0 + gid + 8 (e >> 1), key column nt * 8 + 2 tig + (e & 1)); h0 / hT of
// (sequence, value head) nh in the [K, V] or [V, K] layout. Used by both state passes.
template <int K, int V>
__device__ __forceinline__ std::int64_t state_index(const StateParams& p, std::int64_t nh, int v0,
                                                    int nt, int e) {
  const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const std::int64_t vv = v0 + gid + 8 * (e >> 1), kk = nt * 8 + 2 * tig + (e & 1);
  return p.vk ? (nh * V + vv) * K + kk : (nh * K + kk) * V + vv;
}
template <int K, int V>
__device__ __forceinline__ void load_state(float (&st)[K / 8][4], const StateParams& p,
                                           std::int64_t nh, int v0) {
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) st[nt][e] = p.h0 ? p.h0[state_index<K, V>(p, nh, v0, nt, e)] : 0.f;
}
template <int K, int V>
__device__ __forceinline__ void store_state(const float (&st)[K / 8][4], const StateParams& p,
                                            std::int64_t nh, int v0) {
  if (!p.hT) return;
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) p.hT[state_index<K, V>(p, nh, v0, nt, e)] = st[nt][e];
}

struct WyTcStateConfig {
  static constexpr int kWarps = 4;  // each warp owns 16 columns of V (one m16 tile of S^T) and
                                    // runs its whole recurrence in registers; 4 warps share the
                                    // chunk tiles in smem: V = 128 gives 2 blocks per head
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kVSlice = 16 * kWarps;  // columns of V per block
};
using SCfg = WyTcStateConfig;

// Shared memory of the mma.sync state pass: every tile exactly as the workspace stores it (bf16
// tiles in ws_word order, the U slice in ws_u order; no padding), so each tile is one contiguous
// copy. Word offsets of the tiles. Group A (phase 1): W hi/lo, Qs hi/lo (4 x 16 KiB at K = 128),
// U slice (16 KiB). Group B (phase 2): P hi/lo (2 x 8 KiB), Kd^T hi/lo (2 x 16 KiB). Each group
// is refilled (cp.async) while the other one is in use: 128 KiB at K = V = 128 (K = 64: 80 KiB).
template <int K, int V> struct StateSmem {
  static constexpr int C = Cfg::kChunk;
  static constexpr int kWK = C * K / 2;            // words of one W or Qs plane
  static constexpr int kWU = C * SCfg::kVSlice;    // words of the U slice
  static constexpr int kWP = C * C / 2;            // words of one P plane
  static constexpr int kWKd = K * C / 2;           // words of one Kd^T plane
  static constexpr int Wh = 0, Wl = Wh + kWK, Qh = Wl + kWK, Ql = Qh + kWK, U = Ql + kWK;
  static constexpr int Ph = U + kWU, Pl = Ph + kWP, Kh = Pl + kWP, Kl = Kh + kWKd;
  static constexpr int words = Kl + kWKd;
  static constexpr std::size_t bytes = 4 * static_cast<std::size_t>(words);
};

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// cp.async of 16 bytes to a shared-window address.
__device__ __forceinline__ void cp_async16_sa(unsigned smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_dst), "l"(gmem_src));
}
// WORDS contiguous 32-bit words from global to shared memory in 16-byte pieces, piece
// threadIdx.x + kThreads it (a warp moves 512 contiguous bytes per instruction). dst: shared
// address of the tile plus 16 threadIdx.x (one register serves every tile: the tiles sit at
// compile-time offsets); src: the tile's first word in global memory (16-byte aligned).
template <int WORDS>
__device__ __forceinline__ void copy_lin(unsigned dst, const void* src) {
  constexpr int kStep = 16 * SCfg::kThreads;  // bytes per round
  static_assert((4 * WORDS) % kStep == 0, "whole rounds of 16-byte pieces");
  const char* s = static_cast<const char*>(src) + 16 * threadIdx.x;
#pragma unroll
  for (int it = 0; it < 4 * WORDS / kStep; ++it) cp_async16_sa(dst + it * kStep, s + it * kStep);
}

// B fragments of one n-tile from a hi and a lo tile at once (ldmatrix x4), the tiles in the
// canonical order of ws_word<NR> (NR rows = the mma's n index): matrices (hi, k0..k0+7),
// (hi, k0+8..), (lo, k0..), (lo, k0+8..), rows n0..n0+7. Core matrix (n0 / 8, k0 / 8) is the 128
// contiguous bytes from byte 16 n0 + 2 NR k0 of its tile, one 16-byte row per ldmatrix row
// address: the 8 addresses of a phase cover all 32 banks once. Lane l gives row l & 7 of matrix
// l >> 3; thread 4 gid + tig gets the pair (row n0 + gid, columns k0 + 2 tig ..), the B fragment.
// Per-lane base (shared bytes): hi tile for lanes 0-15, lo tile for 16-31, k + 8 for lanes 8-15
// and 24-31.
template <int NR>
__device__ __forceinline__ unsigned hl_base(unsigned th, unsigned tl) {
  const int lane = threadIdx.x & 31;
  return ((lane & 16) ? tl : th) + 16 * (lane & 7) + ((lane >> 3) & 1) * 16 * NR;
}
template <int NR>
__device__ __forceinline__ void load_b_hl(std::uint32_t (&bh)[2], std::uint32_t (&bl)[2],
                                          unsigned base, int n0, int k0) {
  const unsigned a = base + 16 * n0 + 2 * NR * k0;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(bh[0]), "=r"(bh[1]), "=r"(bl[0]), "=r"(bl[1])
               : "r"(a));
}


// A fragments (hi, lo) of the 16 x 16 block ks of a 16-row accumulator array (C layout -> A
// layout: tiles 2 ks and 2 ks + 1 are the two k halves).
template <int NT>
__device__ __forceinline__ void acc_to_a(std::uint32_t (&hi)[4], std::uint32_t (&lo)[4],
                                         const float (&acc)[NT][4], int ks) {
  split_pair(acc[2 * ks][0], acc[2 * ks][1], hi[0], lo[0]);
  split_pair(acc[2 * ks][2], acc[2 * ks][3], hi[1], lo[1]);
  split_pair(acc[2 * ks + 1][0], acc[2 * ks + 1][1], hi[2], lo[2]);
  split_pair(acc[2 * ks + 1][2], acc[2 * ks + 1][3], hi[3], lo[3]);
}

// d += a b with a, b split hi + lo (3 mma's, the lo lo term dropped).
__device__ __forceinline__ void mma_split(float (&d)[4], const std::uint32_t (&ah)[4],
                                          const std::uint32_t (&al)[4],
                                          const std::uint32_t (&bh)[2],
                                          const std::uint32_t (&bl)[2]) {
  mma_bf16(d, ah, bl);
  mma_bf16(d, al, bh);
  mma_bf16(d, ah, bh);
}

// Sequential pass, one block per (sequence, value head, kVSlice columns of V). Works on the
// transposed state: warp w holds S^T rows v0 .. v0 + 15 (v0 = s0 + 16 w) x all K columns as mma
// accumulators, fp32, across all chunks. Per chunk:
//   phase 1 (tiles A):  X = S^T [W; Qs]^T              (A operand = S^T split in registers)
//                       Vn^T = U^T - S^T W^T,  O^T = S^T Qs^T
//   phase 2 (tiles B):  O^T += Vn^T P^T (O stored),  S^T' = exp(G_C) S^T + Vn^T Kd
//                       (A = Vn^T split in registers)
// Tiles reach shared memory as contiguous cp.async copies of the workspace (no re-layout) and
// the B fragments come from them by ldmatrix (load_b_hl). Warps never exchange data; barriers
// only guard the smem tile refills.
template <typename TOut, int K, int V>
__global__ void __launch_bounds__(SCfg::kThreads, 1) wy_tc_state_kernel(StateParams p) {
  constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice, NS = V / VS;
  static_assert(V % VS == 0, "V is a whole number of slices");
  using Sm = StateSmem<K, V>;
  extern __shared__ std::uint32_t smem_u32[];
  const unsigned sb = static_cast<unsigned>(__cvta_generic_to_shared(smem_u32));
  const float* sU = reinterpret_cast<const float*>(smem_u32 + Sm::U);  // U slice, ws_u order

  const int slice = blockIdx.x % NS, h = (blockIdx.x / NS) % p.HV,
            n = p.seq0 + blockIdx.x / (NS * p.HV);
  const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3, warp = threadIdx.x >> 5;
  const int v0 = slice * VS + warp * 16;
  const std::int64_t nh = static_cast<std::int64_t>(n) * p.HV + h;
  float st[K / 8][4];
  load_state<K, V>(st, p, nh, v0);

  // Per-lane ldmatrix bases (W and Qs tiles: C rows; P: C rows; Kd^T: K rows).
  const unsigned hbW = hl_base<C>(sb + 4 * Sm::Wh, sb + 4 * Sm::Wl);
  const unsigned hbQ = hl_base<C>(sb + 4 * Sm::Qh, sb + 4 * Sm::Ql);
  const unsigned hbP = hl_base<C>(sb + 4 * Sm::Ph, sb + 4 * Sm::Pl);
  const unsigned hbK = hl_base<K>(sb + 4 * Sm::Kh, sb + 4 * Sm::Kl);
  const unsigned sdst = sb + 16 * threadIdx.x;  // this thread's first copy piece
  const int c_begin = p.seq_chunk0[n], c_end = p.seq_chunk0[n + 1];
  // Whole tiles, contiguous in the workspace and in shared memory.
  auto issue_a = [&](int cg) {
    const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
    copy_lin<Sm::kWK>(sdst + 4 * Sm::Wh, p.ws.wh + base * Sm::kWK);
    copy_lin<Sm::kWK>(sdst + 4 * Sm::Wl, p.ws.wl + base * Sm::kWK);
    copy_lin<Sm::kWK>(sdst + 4 * Sm::Qh, p.ws.qh + base * Sm::kWK);
    copy_lin<Sm::kWK>(sdst + 4 * Sm::Ql, p.ws.ql + base * Sm::kWK);
    copy_lin<Sm::kWU>(sdst + 4 * Sm::U, p.ws.u + base * C * V + slice * Sm::kWU);
  };
  auto issue_b = [&](int cg) {
    const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
    copy_lin<Sm::kWP>(sdst + 4 * Sm::Ph, p.ws.ph + base * Sm::kWP);
    copy_lin<Sm::kWP>(sdst + 4 * Sm::Pl, p.ws.pl + base * Sm::kWP);
    copy_lin<Sm::kWKd>(sdst + 4 * Sm::Kh, p.ws.kh + base * Sm::kWKd);
    copy_lin<Sm::kWKd>(sdst + 4 * Sm::Kl, p.ws.kl + base * Sm::kWKd);
  };
  if (c_begin < c_end) {
    issue_a(c_begin);
    cp_async_commit();
    issue_b(c_begin);
    cp_async_commit();
  }
  TOut* o = static_cast<TOut*>(p.o);
  for (int cg = c_begin; cg < c_end; ++cg) {
    const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
    const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
    const float decay = expf(p.ws.gc[base]);
    cp_async_wait<1>();  // tiles A of this chunk (tiles B may still be in flight)
    __syncthreads();
    float ws[C / 8][4] = {}, ot[C / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < K / 16; ++ks) {
      std::uint32_t ah[4], al[4];
      acc_to_a(ah, al, st, ks);
#pragma unroll
      for (int nt = 0; nt < C / 8; ++nt) {
        std::uint32_t bh[2], bl[2];
        load_b_hl<C>(bh, bl, hbW, nt * 8, ks * 16);
        mma_split(ws[nt], ah, al, bh, bl);
        load_b_hl<C>(bh, bl, hbQ, nt * 8, ks * 16);
        mma_split(ot[nt], ah, al, bh, bl);
      }
    }
    float vn[C / 8][4];  // Vn^T = U^T - S^T W^T, element (v, c) of this lane's slots
#pragma unroll
    for (int nt = 0; nt < C / 8; ++nt) {
      const float4 u4 = reinterpret_cast<const float4*>(sU)[nt * 128 + warp * 32 + lane];
      vn[nt][0] = u4.x - ws[nt][0];
      vn[nt][1] = u4.y - ws[nt][1];
      vn[nt][2] = u4.z - ws[nt][2];
      vn[nt][3] = u4.w - ws[nt][3];
    }
    __syncthreads();  // every warp is done with tiles A
    if (cg + 1 < c_end) issue_a(cg + 1);
    cp_async_commit();
    // Phase 2 in two sweeps over the 4 k-blocks of Vn^T (split once, 32 registers; Vn^T itself
    // dies): first O^T += Vn^T P^T, then O^T is stored and dies, then S^T' = exp(G_C) S^T +
    // Vn^T Kd. Each accumulator sees the same products in the same order as one interleaved
    // sweep would (bitwise the same results); the live set stays S^T + O^T + Vn^T splits, so
    // ptxas does not spill at K = 128 (it did with one interleaved sweep and the O store after
    // the last barrier).
    std::uint32_t vh[C / 16][4], vl[C / 16][4];
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc) acc_to_a(vh[kc], vl[kc], vn, kc);
    cp_async_wait<1>();  // tiles B of this chunk (tiles A of the next may be in flight)
    __syncthreads();
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc)
#pragma unroll
      for (int nt = 0; nt < C / 8; ++nt) {
        std::uint32_t bh[2], bl[2];
        load_b_hl<C>(bh, bl, hbP, nt * 8, kc * 16);
        mma_split(ot[nt], vh[kc], vl[kc], bh, bl);
      }
#pragma unroll
    for (int nt = 0; nt < C / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = nt * 8 + 2 * tig + (e & 1);
        if (i < len)
          o[(tok0 + i) * p.o_st + h * p.o_sh + v0 + gid + 8 * (e >> 1)] =
              from_f32<TOut>(ot[nt][e]);
      }
#pragma unroll
    for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] *= decay;
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc)
#pragma unroll
      for (int nt = 0; nt < K / 8; ++nt) {
        std::uint32_t bh[2], bl[2];
        load_b_hl<K>(bh, bl, hbK, nt * 8, kc * 16);
        mma_split(st[nt], vh[kc], vl[kc], bh, bl);
      }
    __syncthreads();  // every warp is done with tiles B
    if (cg + 1 < c_end) issue_b(cg + 1);
    cp_async_commit();
  }
  cp_async_wait<0>();
  store_state<K, V>(st, p, nh, v0);
}

#include "cuda/wy_tc/wy_tc_state_wgmma.cuh"

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// ldmatrix from a 32-bit shared address (per-lane base + compile-time offset: no address math
// per fragment).
__device__ __forceinline__ void ldsm_x4_a(std::uint32_t (&r)[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t_a(std::uint32_t (&r)[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void cp_async16_zfill(void* smem_dst, const void* gmem_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int n = valid ? 16 : 0;  // src-size 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(n));
}

// The v5 chunk kernel (the first bf16-tile version, 5.29 ms for the whole arm at 9b06ffe) was
// replaced by v6 and removed after the A/B run r8 (3936abf: v6 0.43 ms faster at 32768); it
// remains in git at 3936abf. v6 was replaced by v7 (below; bit-equal outputs, r12) and removed
// after r12; it remains in git at 636faf7.

// ---- the chunk kernels' work layout (v6, docs/NOTES_wy_tc.md "v6 chunk kernel"; kept by v7) ----
// Same workspace, same products and the same fold precision as v5; what changed is the work
// layout:
//   * X = (I + A)^-1 by blocks of 16, fp32 FFMA throughout (as v5's column solve): warp w inverts
//     its diagonal block X_ww (solve_column on 16 columns); then, for row blocks I = 1..3,
//     R_Ij = sum_{j <= k < I} A_Ik X_kj and X_Ij = -X_II R_Ij. Columns never interact, so warp w
//     owns columns 16 j + 4 w .. 16 j + 4 w + 3 of every column block j and runs all of its chain
//     with __syncwarp only (one barrier after the diagonal blocks, one when X is complete); every
//     thread does 512 FMA instead of 2016 on half of the threads. Checked against plain forward
//     substitution on the CPU (fp64 and an fp32 mirror of this code): same fp32 error level.
//     (A 3xTF32 tensor-core form of the row blocks, v7t, was measured in r46 and removed: same
//     kernel time, IPC 1.73 -> 1.49, the arm 3% slower; docs/NOTES_wy_tc.md.)
//   * W = Y K skips the k-steps above the diagonal (warp w: w + 1 of 4); U is formed transposed,
//     U^T = V^T Xb^T (A = V^T exact by ldmatrix.trans, B = Xb^T split hi + lo, the same two mma
//     per product as v5's U = Xb V), warp w owning the token n-tiles w and 7 - w (5 k-steps per
//     warp); a lane's accumulators are then exactly one float4 of the ws_u order: one 16-byte
//     store per n-tile, a warp's store 512 contiguous bytes.
//   * Qs pieces are whole 16-byte rows of the q tile (one 16-byte load and store each, per warp
//     for its own rows); Kd^T words come from ldmatrix.trans of the k tile (a warp's four stores
//     per x4 load cover 512 contiguous bytes), on warps 0-1 while warps 2-3 finish their longer
//     Q K^T rows.
//   * 4 barriers (v5: 5), ~168 registers at most (3 blocks of 4 warps per SM; v5 used 186
//     registers, which allowed only 2).

// Row block I (1..3) of X for this warp's columns: lane = (row r = lane & 15, column pair h =
// lane >> 4), columns 16 j + 4 warp + 2 h + {0, 1} for every column block j < I. sX: X so far
// (diagonal blocks and row blocks < I), rows of stride LA; sA: A, same stride. R is staged in
// place (the warp's own columns of row block I), then replaced by X_Ij = -X_II R_Ij.
template <int I, int LA>
__device__ __forceinline__ void solve_row_block(const float* sA, float* sX, int warp, int lane) {
  const int r = lane & 15, cw = 4 * warp + 2 * (lane >> 4), row = 16 * I + r;
  float2 acc[I];
#pragma unroll
  for (int j = 0; j < I; ++j) acc[j] = make_float2(0.f, 0.f);
#pragma unroll
  for (int kb = 0; kb < I; ++kb)
#pragma unroll
    for (int k4 = 0; k4 < 16; k4 += 4) {
      const float4 a4 = *reinterpret_cast<const float4*>(sA + row * LA + 16 * kb + k4);
      const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int k = 16 * kb + k4 + q;
#pragma unroll
        for (int j = 0; j <= kb; ++j) {  // X[k][c] = 0 for column blocks j > kb
          const float2 x = *reinterpret_cast<const float2*>(sX + k * LA + 16 * j + cw);
          acc[j].x = fmaf(av[q], x.x, acc[j].x);
          acc[j].y = fmaf(av[q], x.y, acc[j].y);
        }
      }
    }
#pragma unroll
  for (int j = 0; j < I; ++j) *reinterpret_cast<float2*>(sX + row * LA + 16 * j + cw) = acc[j];
  __syncwarp();
#pragma unroll
  for (int j = 0; j < I; ++j) acc[j] = make_float2(0.f, 0.f);
#pragma unroll
  for (int m4 = 0; m4 < 16; m4 += 4) {
    const float4 d4 = *reinterpret_cast<const float4*>(sX + row * LA + 16 * I + m4);  // X_II row
    const float dv[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int m = 16 * I + m4 + q;
#pragma unroll
      for (int j = 0; j < I; ++j) {
        const float2 rr = *reinterpret_cast<const float2*>(sX + m * LA + 16 * j + cw);
        acc[j].x = fmaf(dv[q], rr.x, acc[j].x);
        acc[j].y = fmaf(dv[q], rr.y, acc[j].y);
      }
    }
  }
  __syncwarp();  // every lane has read R
#pragma unroll
  for (int j = 0; j < I; ++j)
    *reinterpret_cast<float2*>(sX + row * LA + 16 * j + cw) = make_float2(-acc[j].x, -acc[j].y);
  __syncwarp();  // the next row block reads these rows
}

// ---- v7 chunk kernel (docs/NOTES_wy_tc.md, "v7 chunk kernel"; the default for bf16 io) ----
// v6's arithmetic, operand values and summation order unchanged (results bitwise equal to v6,
// checked on the GPU in r12 before v6 was removed);
// what changes is occupancy and the balance of the W fold:
//   * 4 blocks of 4 warps per SM instead of 3: __launch_bounds__(128, 4) (<= 128 registers) and
//     52.75 KiB of shared memory (v6 69.75): the v tile is not loaded with q and k but into the
//     bytes of A once the solve is done (after barrier 4), its cp.async in flight while W is
//     formed; one more barrier (5) before U reads it.
//   * W = Y K balanced over the warps: warps 0-1 take row tiles 0 and 3, warps 2-3 row tiles 1
//     and 2 (1 + 4 = 2 + 3 k-steps), each warp one half of W's columns: 80 mma per warp on every
//     warp (v6: 32 .. 128), so barrier 5 costs no waiting on an unbalanced phase. Per element
//     the same mma's in the same order (k-steps ascending, lo then hi) as v6.
//   * The first wait (barrier 1) covers q and k only (32 KiB instead of 48 at K = V = 128).
template <int K, int V> struct ChunkSmemV7 {
  static constexpr int LB = K + 8;   // bf16 row stride of the k and q tiles (16-byte rows, the 8
                                     // rows of one ldmatrix hit distinct bank groups)
  static constexpr int LBV = V + 8;  // bf16 row stride of the v tile
  static constexpr int LA = Cfg::kChunk + Cfg::kPad;  // fp32 rows of A and X
  // X = (I + A)^-1 (64 x LA fp32) reuses sQ once Qs is written where it fits (K >= 128).
  static constexpr bool kXInQ = 2 * LB >= 4 * LA;
  static_assert(2 * LBV <= 4 * LA, "a v row fits in the bytes of an A row");
  // sK, sQ 64 x LB bf16; sA 64 x LA fp32, later the v tile; X in sQ (K = 128) or its own
  // 64 x LA fp32 region (K = 64); 7 vectors of 64 fp32.
  static constexpr std::size_t bytes = 2 * static_cast<std::size_t>(Cfg::kChunk) * (2 * LB) +
                                       4 * static_cast<std::size_t>(Cfg::kChunk) *
                                           ((kXInQ ? 1 : 2) * LA + 7);
};

// negctl (negative control, GDN_WYTC_CHUNK=v7neg): U is written negated, so parity must fail
// and the outputs must differ from v7's; shows that the v7 kernel is the one that ran.
// kRoll (the default since r40; GDN_WYTC_CHUNK=v7u for the unrolled form): the k-step loops of the
// Q K^T / K K^T, W and U folds are not unrolled (r35: 13% of the stall samples were "no
// instruction" in the 6.5 K-line unrolled kernel; rolled: 5.8 K lines, 10%); the same operations
// in the same order, so results are bit for bit the unrolled form's. r39 / r40 (fe0be8b, one
// process image, interleaved): 1.2-3% faster on every 27b / qwen3-next case (27b T = 32768 1.736
// - 1.741 against 1.759 - 1.763 ms), although ncu times the kernel alone equal (281.0 vs 281.8 us
// at T = 8192).
// kIlv (session 23; GDN_WYTC_CHUNK=v7s for the form before): in the W and U folds the lo
// products of all accumulators that share a B (W) or A (U) fragment are issued before their hi
// products, so consecutive mma no longer depend on each other (before: lo then hi of the same
// accumulator back to back, a NOP and a dependency stall between them in r69's SASS). Per
// accumulator the order is unchanged (k-steps ascending, lo then hi), so the results are bit for
// bit the same. r72 (H100, against v7s, two rounds): 27b T = 4096 -1.2%, 8 x 4096 -0.4%, 27b
// T = 32768 and qwen3-next 0% (probably: beside a state block its warps already used those slots).
// (Session 12 measured the warp index through a shuffle, which makes the branches around
// mma.sync warp-uniform: 91.4 M -> 86.9 M instructions at T = 8192, but 114 -> 126 registers and
// 238.2 -> 240.0 us, the arm 3% slower at T = 32768 (r47); not kept.)
template <typename TBeta, int K, int V, bool kL2, bool kRoll = true, bool kIlv = true>
__global__ void __launch_bounds__(Cfg::kThreads, 4)
    wy_tc_chunk_kernel_v7(ChunkParams p, int negctl) {
  constexpr int C = Cfg::kChunk;
  using Sm = ChunkSmemV7<K, V>;
  constexpr int LB = Sm::LB, LBV = Sm::LBV, LA = Sm::LA;
  static_assert(!Sm::kXInQ || 2 * LB == 4 * LA, "X row r takes exactly the bytes of q row r");
  static_assert(K % 32 == 0 && V % 32 == 0, "whole x4 groups of the Kd^T tile, m-tile pairs of V");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [C][LB]
  __nv_bfloat16* sQ = sK + C * LB;                                  // [C][LB]
  float* sA = reinterpret_cast<float*>(sQ + C * LB);                // [C][LA] strict-lower A
  __nv_bfloat16* sV = reinterpret_cast<__nv_bfloat16*>(sA);         // [C][LBV] after barrier 4
  float* sX = Sm::kXInQ ? reinterpret_cast<float*>(sQ) : sA + C * LA;
  float* sG = sA + C * LA + (Sm::kXInQ ? 0 : C * LA);  // cumulative log-decay
  float* sE = sG + C;       // exp(G)
  float* sD = sE + C;       // exp(G_C - G) / |k|
  float* sB = sD + C;       // beta
  float* sRk = sB + C;      // 1 / |k| (1 without l2norm)
  float* sRq = sRk + C;     // 1 / |q|
  float* sS = sRq + C;      // beta E rk: column scaling of X for W

  const bool flags = p.ready != nullptr;  // flag pipeline: grid (HV, chunks)
  const int cg = p.chunk0 + (flags ? blockIdx.y : blockIdx.x), h = flags ? blockIdx.x : blockIdx.y,
            tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
  if (len == 0) {  // slack entry of an upper-bound chunk table (whole block)
    if (flags && tid == 0) publish_ready(p, cg, h, 0.f);  // (no state block reads past its end)
    return;
  }
  const int kh = p.tiled ? h % p.HK : h / (p.HV / p.HK);
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);
  const auto* k = static_cast<const __nv_bfloat16*>(p.k);
  const auto* v = static_cast<const __nv_bfloat16*>(p.v);
  const TBeta* beta = static_cast<const TBeta*>(p.beta);

  // q, k tiles: 16-byte pieces, rows past the chunk's length zero-filled (g = 0, beta = 0 there).
  // Thread tid takes piece tid % PK of rows tid / PK + kStep it (the pieces i = tid + 128 it of a
  // loop over C * PK), its global addresses advanced by a precomputed row step (no 64-bit
  // multiply per piece); rows past the length read row 0's address, zero-filled.
  {
    constexpr int PK = K / 8, kStep = Cfg::kThreads / PK;  // 16-byte pieces per row
    static_assert(Cfg::kThreads % PK == 0 && C % kStep == 0, "whole rows per pass");
    const int r0 = tid / PK, c = (tid % PK) * 8;
    const __nv_bfloat16* const k0 = k + tok0 * p.k_st + kh * p.k_sh + c;
    const __nv_bfloat16* const q0 = q + tok0 * p.q_st + kh * p.q_sh + c;
    const __nv_bfloat16* kr = k0 + r0 * p.k_st;
    const __nv_bfloat16* qr = q0 + r0 * p.q_st;
    const std::int64_t kst = kStep * p.k_st, qst = kStep * p.q_st;
#pragma unroll
    for (int it = 0; it < C / kStep; ++it, kr += kst, qr += qst) {
      const int r = r0 + it * kStep;
      const bool ok = r < len;
      cp_async16_zfill(sK + r * LB + c, ok ? kr : k0, ok);
      cp_async16_zfill(sQ + r * LB + c, ok ? qr : q0, ok);
    }
    cp_async_commit();
  }
  if (tid < C) {
    const std::int64_t t = tok0 + tid;
    sG[tid] = tid < len ? p.g[t * p.g_st + h] : 0.f;
    sB[tid] = tid < len ? to_f32(beta[t * p.b_st + h]) : 0.f;
  }
  cp_async_wait<0>();
  __syncthreads();  // barrier 1: q, k tiles, g, beta
  if (warp == 0) chunk_cumsum(sG);
  if (kL2) {  // every warp (warp 0 after the cumsum): row norms of k and q (rows of zeros get
              // 1 / sqrt(1e-6)).
    // kRows independent rows per pass, their loads and shuffle chains interleaved (r21: warps
    // 1-3 one row at a time, each row waiting on its 5 dependent shuffles, cost the layer's chunk
    // kernel 397 us against 295 at T = 8192). Per row the same sums in the same order as before:
    // lane l adds x[l], x[l + 32], ... then the xor butterfly 16 .. 1.
    constexpr int kWarps = Cfg::kThreads / 32, kRows = 8;
    static_assert(2 * C % (kWarps * kRows) == 0, "whole passes");
    for (int r0 = warp; r0 < 2 * C; r0 += kWarps * kRows) {
      float ss[kRows];
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const int r = r0 + kWarps * j;
        const __nv_bfloat16* row = r < C ? sK + r * LB : sQ + (r - C) * LB;
        ss[j] = 0.f;
#pragma unroll
        for (int c = lane; c < K; c += 32) {
          const float x = __bfloat162float(row[c]);
          ss[j] += x * x;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int j = 0; j < kRows; ++j) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
      if (lane < kRows) {  // lane j stores row j's norm (ss[j] is the same on every lane)
        float mine = ss[0];
#pragma unroll
        for (int j = 1; j < kRows; ++j) mine = lane == j ? ss[j] : mine;
        const int r = r0 + kWarps * lane;
        (r < C ? sRk[r] : sRq[r - C]) = rsqrtf(mine + 1e-6f);
      }
    }
  }
  if (!kL2 && tid < C) sRk[tid] = 1.f, sRq[tid] = 1.f;
  __syncthreads();  // barrier 2: G, norms

  const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
  // Q and K^T tiles: per value head in the split format (scaled per head); per key head in the
  // exact format (the raw bf16 tiles, the same for the key head's value heads), written by the
  // key head's first value head only.
  const bool qk_writer = !p.exact_ws || writes_qk_tiles(h, p.HV, p.HK, p.tiled);
  const std::int64_t base_qk = p.exact_ws ? static_cast<std::int64_t>(cg) * p.HK + kh : base;
  const int m0 = warp * 16;
  if (lane < 16) {
    const int r = m0 + lane;
    sE[r] = expf(sG[r]);
    sD[r] = expf(sG[C - 1] - sG[r]) * sRk[r];
    sS[r] = sB[r] * sE[r] * sRk[r];
    if (p.exact_ws) {
      p.ws.eq[base * C + r] = p.scale * sE[r] * sRq[r];
      p.ws.ed[base * C + r] = sD[r];
    }
  }
  if (tid == 0) p.ws.gc[base] = sG[C - 1];
  __syncwarp();

  const unsigned aK = smem_addr(sK + (m0 + (lane & 15)) * LB + (lane >> 4) * 8);
  const unsigned aQ = smem_addr(sQ + (m0 + (lane & 15)) * LB + (lane >> 4) * 8);
  const unsigned bK = smem_addr(sK + ((lane & 7) + ((lane >> 4) << 3)) * LB + ((lane >> 3) & 1) * 8);
  const unsigned tK = smem_addr(sK + (lane & 15) * LB + (lane >> 4) * 8);
  // Q K^T and K K^T for the warp's 16 rows, n-tiles up to the diagonal only (as v6).
  {
    float akk[C / 8][4] = {}, aqk[C / 8][4] = {};
    const int ntiles = 2 * (warp + 1);  // columns 0 .. m0 + 15
#pragma unroll(kRoll ? 1 : K / 16)
    for (int ks = 0; ks < K / 16; ++ks) {
      std::uint32_t ak[4], aq[4];
      ldsm_x4_a(ak, aK + 2 * (ks * 16));
      ldsm_x4_a(aq, aQ + 2 * (ks * 16));
#pragma unroll
      for (int np = 0; np < C / 16; ++np) {
        if (2 * np < ntiles) {
          std::uint32_t b[4];
          ldsm_x4_a(b, bK + 2 * (np * 16 * LB + ks * 16));
          const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          mma_bf16(akk[2 * np], ak, b0);
          mma_bf16(akk[2 * np + 1], ak, b1);
          mma_bf16(aqk[2 * np], aq, b0);
          mma_bf16(aqk[2 * np + 1], aq, b1);
        }
      }
    }
    // The thread's words of P: ws_word<C>(m0 + acc_row(e), acc_col(nt, e)) = at0 + nt * C * 4 +
    // (e >> 1) * 32, at0 = ws_word<C>(m0 + gid, 2 tig) (rows m0 + gid + 8 (e >> 1): row block
    // 2 warp + (e >> 1); columns nt * 8 + 2 tig: column block nt), so every store below has a
    // constant offset from one pointer.
    const int at0 = ws_word<C>(m0 + gid, 2 * tig);
    std::uint32_t* Ph = p.ws.ph + base * C * C / 2 + at0;
    std::uint32_t* Pl = p.ws.pl + base * C * C / 2 + at0;
    // The thread's two rows (e = 0, 2): G_i log2 e, beta_i / |k_i|, scale / |q_i|, read once (the
    // sA stores below would otherwise make the compiler re-read them per element).
    constexpr float kLog2e = 1.4426950408889634f;
    float gi2[2], ri2[2], rq2[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = m0 + acc_row(2 * r);
      gi2[r] = sG[i], ri2[r] = sB[i] * sRk[i], rq2[r] = p.scale * sRq[i];
    }
#pragma unroll
    for (int nt = 0; nt < C / 8; ++nt) {
      const int j = acc_col(nt, 0);  // even: the pair j, j + 1
      const float2 gj = nt < ntiles ? *reinterpret_cast<const float2*>(sG + j) : float2{};
      const float2 rkj = nt < ntiles ? *reinterpret_cast<const float2*>(sRk + j) : float2{};
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int i = m0 + acc_row(e);
        const int at = nt * C * 4 + (e >> 1) * 32;
        if (nt < ntiles) {
          // exp(G_i - G_j) = 2^((G_i - G_j) log2 e) by one ex2.approx: relative error
          // <= 2^-22 + |G_i - G_j| 2^-24 (the product's rounding), an fp32-level error like
          // expf's (docs/bounds.md). expf's accurate path and its branches cost ~18
          // instructions per element, this 3. Computed for every element and masked after:
          // above the diagonal (G_i - G_j > 0) it may overflow to inf, which the selects drop.
          const float gi = gi2[e >> 1], ri = ri2[e >> 1], rq = rq2[e >> 1];
          const float e0 = ex2_approx((gi - gj.x) * kLog2e) * rkj.x;
          const float e1 = ex2_approx((gi - gj.y) * kLog2e) * rkj.y;
          const float c0 = i >= j ? e0 : 0.f, c1 = i >= j + 1 ? e1 : 0.f;
          *reinterpret_cast<float2*>(sA + i * LA + j) =
              make_float2(i > j ? ri * akk[nt][e] * c0 : 0.f,
                          i > j + 1 ? ri * akk[nt][e + 1] * c1 : 0.f);
          const float x0 = i >= j ? rq * aqk[nt][e] * c0 : 0.f;
          const float x1 = i >= j + 1 ? rq * aqk[nt][e + 1] * c1 : 0.f;
          if (p.half_ws) Ph[at] = pack_f16(x0, x1);
          else split_pair(x0, x1, Ph[at], Pl[at]);
        } else {  // above the diagonal block: P is zero (the state pass reads the whole tile)
          Ph[at] = 0u;
          if (!p.half_ws) Pl[at] = 0u;
        }
      }
    }
  }
  // Qs as v6: piece (row r, 8 kb .. 8 kb + 7) of the ws_word<C> order is one 16-byte row segment
  // of the q tile, the warp's own rows.
  if (qk_writer) {
    uint4* Qh4 = reinterpret_cast<uint4*>(p.ws.qh + base_qk * C * K / 2);
    uint4* Ql4 = reinterpret_cast<uint4*>(p.ws.ql + base_qk * C * K / 2);
    const int r = m0 + (lane & 15);
    const float f = p.scale * sE[r] * sRq[r];
#pragma unroll
    for (int it = 0; it < K / 16; ++it) {
      const int kb = 2 * it + (lane >> 4);
      const int piece = (kb * (C / 8) + (r >> 3)) * 8 + (r & 7);
      const uint4 qq = *reinterpret_cast<const uint4*>(sQ + r * LB + 8 * kb);
      if (p.half_ws) {
        Qh4[piece] = make_uint4(bf16x2_to_f16x2(qq.x), bf16x2_to_f16x2(qq.y),
                                bf16x2_to_f16x2(qq.z), bf16x2_to_f16x2(qq.w));
      } else if (p.exact_ws) {
        Qh4[piece] = qq;
      } else {
        const std::uint32_t w4[4] = {qq.x, qq.y, qq.z, qq.w};
        std::uint32_t hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const __nv_bfloat162 b2 = *reinterpret_cast<const __nv_bfloat162*>(&w4[e]);
          split_pair(f * __low2float(b2), f * __high2float(b2), hi[e], lo[e]);
        }
        Qh4[piece] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        Ql4[piece] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
    }
  }
  __syncwarp();  // the warp's A rows written, its q rows read: X_ww may overwrite them
  solve_column<LA, 16>(sA + m0 * LA + m0, sX + m0 * LA + m0, lane & 15);  // lanes 16-31 repeat 0-15
  if (warp < 2 && qk_writer) {
    // Kd^T as v6 (ldmatrix.trans of the k tile, x4 group g = matrices 4 g .. 4 g + 3 of the
    // ws_word<K> order).
    std::uint32_t* Kh = p.ws.kh + base_qk * K * C / 2;
    std::uint32_t* Kl = p.ws.kl + base_qk * K * C / 2;
#pragma unroll 2
    for (int g = warp; g < C * K / 256; g += 2) {
      const int mi = 4 * g + (lane >> 3), kb = mi / (K / 8), db = mi % (K / 8);
      std::uint32_t w4[4];
      ldsm_x4_t_a(w4, smem_addr(sK + (8 * kb + (lane & 7)) * LB + 8 * db));
      if (p.exact_ws) {  // K^T itself: bf16, or converted to fp16 (K16)
#pragma unroll
        for (int m = 0; m < 4; ++m)
          Kh[(4 * g + m) * 32 + lane] = p.k16 ? bf16x2_to_f16x2(w4[m]) : w4[m];
      } else {
        const int r = 8 * ((4 * g) / (K / 8)) + 2 * tig;
        const float d0 = expf(sG[C - 1] - sG[r]) * sRk[r];
        const float d1 = expf(sG[C - 1] - sG[r + 1]) * sRk[r + 1];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const __nv_bfloat162 b2 = *reinterpret_cast<const __nv_bfloat162*>(&w4[m]);
          split_pair(d0 * __low2float(b2), d1 * __high2float(b2), Kh[(4 * g + m) * 32 + lane],
                     Kl[(4 * g + m) * 32 + lane]);
        }
      }
    }
  }
  __syncthreads();  // barrier 3: every diagonal block of X, every row of A and of sS, sD; q read
  solve_row_block<1, LA>(sA, sX, warp, lane);
  solve_row_block<2, LA>(sA, sX, warp, lane);
  solve_row_block<3, LA>(sA, sX, warp, lane);
  __syncthreads();  // barrier 4: X complete, A dead

  // The v tile into the bytes of A (zero-filled past the chunk's length); lands while W is formed.
  {
    constexpr int PV = V / 8, kStep = Cfg::kThreads / PV;  // as the q, k tiles
    static_assert(Cfg::kThreads % PV == 0 && C % kStep == 0, "whole rows per pass");
    const int r0 = tid / PV, c = (tid % PV) * 8;
    const __nv_bfloat16* const v0 = v + tok0 * p.v_st + h * p.v_sh + c;
    const __nv_bfloat16* vr = v0 + r0 * p.v_st;
    const std::int64_t vst = kStep * p.v_st;
#pragma unroll
    for (int it = 0; it < C / kStep; ++it, vr += vst) {
      const int r = r0 + it * kStep;
      const bool ok = r < len;
      cp_async16_zfill(sV + r * LBV + c, ok ? vr : v0, ok);
    }
    cp_async_commit();
  }

  // W = Y K, Y = X diag(beta E rk). Warp w: row tiles mt0 = (w < 2 ? 0 : 1) and mt1 = 3 - mt0,
  // columns n0 .. n0 + K/2 - 1 with n0 = (w & 1) K/2; k-steps ks <= mt (Y[i][j] = 0 for j > i).
  // A fragments split hi + lo (the same values as v6), B fragments of the exact k tile by
  // ldmatrix.trans; per accumulator the mma's run in v6's order (ks ascending, lo then hi).
  {
    constexpr int NH = K / 16;  // n-tiles per column half
    const int mt0 = warp < 2 ? 0 : 1, mt1 = 3 - mt0, n0 = (warp & 1) * (K / 2);
    float acc[2][NH][4] = {};
    auto y_frag = [&](std::uint32_t (&yh)[4], std::uint32_t (&yl)[4], int mt, int ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = 16 * mt + gid + 8 * (r & 1), col = ks * 16 + 2 * tig + 8 * (r >> 1);
        const float2 x2 = *reinterpret_cast<const float2*>(sX + row * LA + col);
        split_pair(x2.x * sS[col], x2.y * sS[col + 1], yh[r], yl[r]);
      }
    };
#pragma unroll(kRoll ? 1 : C / 16)
    for (int ks = 0; ks < C / 16; ++ks) {
      if (ks <= mt1) {  // mt1 >= 2 > mt0 or mt1 = 3: every k-step of mt0 is one of mt1's
        const bool use0 = ks <= mt0;
        std::uint32_t y0h[4] = {}, y0l[4] = {}, y1h[4], y1l[4];
        y_frag(y1h, y1l, mt1, ks);
        if (use0) y_frag(y0h, y0l, mt0, ks);
#pragma unroll
        for (int np = 0; np < NH / 2; ++np) {
          std::uint32_t b[4];
          ldsm_x4_t_a(b, tK + 2 * (ks * 16 * LB + n0 + np * 16));
          const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          if (kIlv) {  // every lo product of the four accumulators, then every hi product
            if (use0) {
              mma_bf16(acc[0][2 * np], y0l, b0);
              mma_bf16(acc[0][2 * np + 1], y0l, b1);
            }
            mma_bf16(acc[1][2 * np], y1l, b0);
            mma_bf16(acc[1][2 * np + 1], y1l, b1);
            if (use0) {
              mma_bf16(acc[0][2 * np], y0h, b0);
              mma_bf16(acc[0][2 * np + 1], y0h, b1);
            }
            mma_bf16(acc[1][2 * np], y1h, b0);
            mma_bf16(acc[1][2 * np + 1], y1h, b1);
          } else {
            if (use0) {
              mma_bf16(acc[0][2 * np], y0l, b0);
              mma_bf16(acc[0][2 * np], y0h, b0);
              mma_bf16(acc[0][2 * np + 1], y0l, b1);
              mma_bf16(acc[0][2 * np + 1], y0h, b1);
            }
            mma_bf16(acc[1][2 * np], y1l, b0);
            mma_bf16(acc[1][2 * np], y1h, b0);
            mma_bf16(acc[1][2 * np + 1], y1l, b1);
            mma_bf16(acc[1][2 * np + 1], y1h, b1);
          }
        }
      }
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      // ws_word<C>(16 mt + acc_row(e), n0 + acc_col(nt, e)) = ws_word<C>(16 mt + gid, n0 + 2 tig)
      // + nt * C * 4 + (e >> 1) * 32 (column block n0 / 8 + nt, row block 2 mt + (e >> 1)):
      // constant offsets from one pointer per row tile.
      const int at0 = ws_word<C>(16 * (s ? mt1 : mt0) + gid, n0 + 2 * tig);
      std::uint32_t* Wh = p.ws.wh + base * C * K / 2 + at0;
      std::uint32_t* Wl = p.ws.wl + base * C * K / 2 + at0;
#pragma unroll
      for (int nt = 0; nt < NH; ++nt)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int at = nt * C * 4 + (e >> 1) * 32;
          if (p.half_ws) Wh[at] = pack_f16(acc[s][nt][e], acc[s][nt][e + 1]);
          else split_pair(acc[s][nt][e], acc[s][nt][e + 1], Wh[at], Wl[at]);
        }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // barrier 5: the v tile

  // U^T = V^T Xb^T exactly as v6 (warp w: token n-tiles w and 7 - w, 5 k-steps).
  {
    const int t0 = warp, t1 = 7 - warp;
    const unsigned aV =
        smem_addr(sV + ((lane & 7) + ((lane >> 4) << 3)) * LBV + ((lane >> 3) & 1) * 8);
    auto xb_frag = [&](std::uint32_t (&hi)[2], std::uint32_t (&lo)[2], int t, int ks) {
      const int i = 8 * t + gid, j = 16 * ks + 2 * tig;
      const float2 x0 = *reinterpret_cast<const float2*>(sX + i * LA + j);
      const float2 x1 = *reinterpret_cast<const float2*>(sX + i * LA + j + 8);
      split_pair(x0.x * sB[j], x0.y * sB[j + 1], hi[0], lo[0]);
      split_pair(x1.x * sB[j + 8], x1.y * sB[j + 9], hi[1], lo[1]);
    };
    float acc[V / 16][2][4] = {};
#pragma unroll(kRoll ? 1 : C / 16)
    for (int ks = 0; ks < C / 16; ++ks) {
      if (2 * ks <= t1) {
        const bool use0 = 2 * ks <= t0;
        std::uint32_t b0h[2] = {}, b0l[2] = {}, b1h[2], b1l[2];
        xb_frag(b1h, b1l, t1, ks);
        if (use0) xb_frag(b0h, b0l, t0, ks);
        if (kIlv) {  // m-tiles by pairs: the lo products of up to four accumulators, then the hi
#pragma unroll
          for (int mt = 0; mt < V / 16; mt += 2) {
            std::uint32_t a0[4], a1[4];
            ldsm_x4_t_a(a0, aV + 2 * (ks * 16 * LBV + mt * 16));
            ldsm_x4_t_a(a1, aV + 2 * (ks * 16 * LBV + (mt + 1) * 16));
            if (use0) {
              mma_bf16(acc[mt][0], a0, b0l);
              mma_bf16(acc[mt + 1][0], a1, b0l);
            }
            mma_bf16(acc[mt][1], a0, b1l);
            mma_bf16(acc[mt + 1][1], a1, b1l);
            if (use0) {
              mma_bf16(acc[mt][0], a0, b0h);
              mma_bf16(acc[mt + 1][0], a1, b0h);
            }
            mma_bf16(acc[mt][1], a0, b1h);
            mma_bf16(acc[mt + 1][1], a1, b1h);
          }
        } else {
#pragma unroll
          for (int mt = 0; mt < V / 16; ++mt) {
            std::uint32_t a[4];
            ldsm_x4_t_a(a, aV + 2 * (ks * 16 * LBV + mt * 16));
            if (use0) {
              mma_bf16(acc[mt][0], a, b0l);
              mma_bf16(acc[mt][0], a, b0h);
            }
            mma_bf16(acc[mt][1], a, b1l);
            mma_bf16(acc[mt][1], a, b1h);
          }
        }
      }
    }
    if (negctl) {
#pragma unroll
      for (int mt = 0; mt < V / 16; ++mt)
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][s][e] = -acc[mt][s][e];
    }
    if (p.u16) {  // fp16 U (Workspace, U16): same order, 8-byte pieces
      uint2* U2 = reinterpret_cast<uint2*>(p.ws.u) + base * C * V / 4;
#pragma unroll
      for (int mt = 0; mt < V / 16; ++mt) {
        U2[(mt >> 2) * 1024 + t0 * 128 + (mt & 3) * 32 + lane] =
            make_uint2(pack_f16(acc[mt][0][0], acc[mt][0][1]), pack_f16(acc[mt][0][2], acc[mt][0][3]));
        U2[(mt >> 2) * 1024 + t1 * 128 + (mt & 3) * 32 + lane] =
            make_uint2(pack_f16(acc[mt][1][0], acc[mt][1][1]), pack_f16(acc[mt][1][2], acc[mt][1][3]));
      }
    } else {
      float4* U4 = reinterpret_cast<float4*>(p.ws.u + base * C * V);
#pragma unroll
      for (int mt = 0; mt < V / 16; ++mt) {
        U4[(mt >> 2) * 1024 + t0 * 128 + (mt & 3) * 32 + lane] =
            make_float4(acc[mt][0][0], acc[mt][0][1], acc[mt][0][2], acc[mt][0][3]);
        U4[(mt >> 2) * 1024 + t1 * 128 + (mt & 3) * 32 + lane] =
            make_float4(acc[mt][1][0], acc[mt][1][1], acc[mt][1][2], acc[mt][1][3]);
      }
    }
  }
  if (flags) {  // publish: every thread's workspace stores, then the ready words (release, gpu)
    __threadfence();
    cuda::fence_proxy_async_global();  // the readers copy these tiles with bulk copies
    __syncthreads();
    if (tid == 0) publish_ready(p, cg, h, p.ws.gc[base]);  // (its own store above)
  }
}

// The flag pipeline's test delay (GDN_WYTC_FLAGS=delay): one thread sleeps for ns nanoseconds.
__global__ void wy_tc_sleep_kernel(unsigned ns) {
  const std::uint64_t t0 = cuda::global_ns();
  while (cuda::global_ns() - t0 < ns) __nanosleep(1000);
}

std::size_t align_up(std::size_t x) { return (x + 255) / 256 * 256; }

// GDN_WYTC_FLAGS_TRACE: one line on stderr from the flag pipeline's stamps (launch(), trace_chunk):
// times in us from the first stamp; block 0 serves value head 0, whose own chunk block writes
// its key head's tiles, so its chunk c is ready at that block's publication.
void print_flag_trace(const std::vector<unsigned long long>& t, std::int64_t nc, int hv, int nb) {
  const unsigned long long* pub = t.data();
  const unsigned long long* blk = pub + nc * hv;
  const unsigned long long* acq = blk + 4 * static_cast<std::int64_t>(nb);
  unsigned long long t0 = ~0ull, pub_end = 0;
  for (std::int64_t i = 0; i < nc * hv; ++i)
    if (pub[i]) t0 = std::min(t0, pub[i]), pub_end = std::max(pub_end, pub[i]);
  std::vector<double> starts;
  unsigned long long end = 0;
  double wait_ns = 0, waits = 0;
  for (int b = 0; b < nb; ++b) {
    t0 = std::min(t0, blk[4 * b]);
    starts.push_back(static_cast<double>(blk[4 * b]));
    end = std::max(end, blk[4 * b + 1]);
    wait_ns += static_cast<double>(blk[4 * b + 2]), waits += static_cast<double>(blk[4 * b + 3]);
  }
  auto us = [&](double x) { return (x - static_cast<double>(t0)) * 1e-3; };
  std::sort(starts.begin(), starts.end());
  std::vector<double> lag;
  std::int64_t first = -1, last = -1;
  for (std::int64_t c = 0; c < nc; ++c)
    if (acq[c] && pub[c * hv]) {
      lag.push_back((static_cast<double>(acq[c]) - static_cast<double>(pub[c * hv])) * 1e-3);
      if (first < 0) first = c;
      last = c;
    }
  std::sort(lag.begin(), lag.end());
  auto pct = [&](double q) { return lag.empty() ? 0.0 : lag[static_cast<std::size_t>(q * (lag.size() - 1))]; };
  const double step = last > first ? (static_cast<double>(acq[last]) - static_cast<double>(acq[first])) *
                                         1e-3 / static_cast<double>(last - first)
                                   : 0.0;
  std::fprintf(stderr,
               "wy-tc flags trace: %lld chunks x %d heads, %d state blocks; chunk publications "
               "end +%.1f us; state blocks start +%.1f / +%.1f / +%.1f (min / median / max), end "
               "+%.1f; waits per block %.1f, %.1f us; block 0: acquire - publication lag p10 / p50 "
               "/ p90 %.2f / %.2f / %.2f us, acquire step %.3f us\n",
               static_cast<long long>(nc), hv, nb, us(static_cast<double>(pub_end)),
               starts.empty() ? 0.0 : us(starts.front()),
               starts.empty() ? 0.0 : us(starts[starts.size() / 2]),
               starts.empty() ? 0.0 : us(starts.back()), us(static_cast<double>(end)),
               nb ? waits / nb : 0.0, nb ? wait_ns * 1e-3 / nb : 0.0, pct(0.1), pct(0.5), pct(0.9),
               step);
}

using cuda::env_is;

// The wgmma state pass (v6, wy_tc_state_wgmma.cuh) runs where the sm_90a image runs: a build with
// sm_90a code (GDN_SM90A, set by CMake / setup.py from the -gencode list) on a compute
// capability 9.0 device. GDN_WYTC_STATE=v5 forces the mma.sync state pass (A/B runs, sm_80).
// With the exact workspace format the wgmma pass is v9 (software-pipelined groups, r19: v8's
// schedule with less bookkeeping); GDN_WYTC_STATE=v6 selects the v6 schedule (same results bit
// for bit; A/B runs).
bool use_wg_state() {
#if defined(GDN_SM90A)
  if (env_is("GDN_WYTC_STATE", "v5")) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return n;
}

// The side stream of the overlapped passes (one per process and device; high priority so that
// its state blocks are placed before pending chunk blocks) and its events, reused under `m`.
struct SideStream {
  std::mutex m;
  cudaStream_t s = nullptr;
  std::vector<cudaEvent_t> ev;
  Status ensure(int n_events) {
    if (!s) {
      int lo = 0, hi = 0;
      GDN_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&lo, &hi));
      GDN_CUDA_TRY(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi));
    }
    while (static_cast<int>(ev.size()) < n_events) {
      cudaEvent_t e = nullptr;
      GDN_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      ev.push_back(e);
    }
    return Status::Ok();
  }
};
SideStream& side_stream() {
  static std::mutex table_m;
  static std::vector<std::unique_ptr<SideStream>> table;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  std::lock_guard<std::mutex> lock(table_m);
  if (static_cast<int>(table.size()) <= dev) table.resize(dev + 1);
  if (!table[dev]) table[dev] = std::make_unique<SideStream>();
  return *table[dev];
}

// Chunk kernel variant: 2 = v2 (any io), 7 = v7 (reads q, k, v as bf16 in 16-byte pieces: bf16 io
// with 16-byte aligned rows; the default there since r12). GDN_WYTC_CHUNK=v2 forces v2 (A/B
// measurements and tests in one build; read at every call); v7neg (returns 8) = v7 with its
// negative control (U negated; tests only); v7u (9) = v7 unrolled; v7s (10) = v7 with the W and
// U folds' mma in the sequence before session 23 (kIlv = false).
int chunk_variant(const Problem& pr, const PrefillArgs& a) {
  (void)pr;
  if (env_is("GDN_WYTC_CHUNK", "v2")) return 2;
  if (a.q.dtype != DType::bf16 || a.k.dtype != DType::bf16 || a.v.dtype != DType::bf16)
    return 2;
  auto aligned = [](const TensorView& t) {
    return reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0 && (t.stride[0] * 2) % 16 == 0 &&
           (t.stride[1] * 2) % 16 == 0;
  };
  if (!(aligned(a.q) && aligned(a.k) && aligned(a.v))) return 2;
  if (env_is("GDN_WYTC_CHUNK", "v7neg")) return 8;
  if (env_is("GDN_WYTC_CHUNK", "v7u")) return 9;  // v7 with unrolled k-step loops (before r40)
  if (env_is("GDN_WYTC_CHUNK", "v7s")) return 10;  // v7 with the W / U mma in sequence (before
                                                    // session 23)
  return 7;  // r12 (f3184ee): arm 2.589 ms at T = 32768 against 2.689 with v6 (removed since)
}

template <int K, int V>
Status launch(const Problem& pr, const PrefillArgs& a, const Seqs& s, std::uint64_t* size_only) {
  constexpr int C = Cfg::kChunk;
  // wg_qk_tile finds a value head's key head in fp32, exact below 2^22 heads: checked before any
  // work is queued.
  if (pr.HV >= (1 << 22)) return Status::Unsupported("wy-tc: more than 2^22 value heads");
  cudaStream_t st = cuda::stream_of(a);
  // Chunk table built on the device (cuda/common/chunk_table.cuh): no pageable copy, no host
  // sync, so the call can be captured into a CUDA graph. Chunks never cross sequences.
  const cuda::Offsets offs = cuda::offsets_of(a, s);
  const cuda::ChunkTablePlan plan = cuda::plan_chunk_table(offs, C);
  const std::int64_t NC = plan.nc;  // exact (host offsets known) or an upper bound: the chunk
                                    // kernels return at once for slack entries (len = 0)
  const std::int64_t tiles = NC * pr.HV;
  const std::size_t b_tab = align_up(plan.bytes);
  const std::size_t b_ck = align_up(2 * tiles * C * K);  // one bf16 plane of a C x K tile
  const std::size_t b_cc = align_up(2 * tiles * C * C);  // one bf16 plane of a C x C tile
  const std::size_t b_cv = align_up(sizeof(float) * tiles * C * V);
  // The exact format's Q and K^T planes: one tile per (chunk, key head); no ql, kl planes.
  const std::size_t b_ckqk = align_up(2 * NC * pr.HK * C * K);
  const std::size_t b_gc = align_up(sizeof(float) * tiles);
  const std::size_t b_vec = align_up(sizeof(float) * tiles * C);
  // The exact workspace format (Q, K^T themselves + eq, ed) needs the v7 chunk kernel
  // (bf16 q/k) and is read by the wgmma state pass only.
  const int chunk_v = chunk_variant(pr, a);
  const bool v7_chunk = chunk_v >= 7, wg = use_wg_state();
  const bool exact_ws = v7_chunk && wg;
  // Overlapped passes (see below): one sequence, the v9 state pass, and state blocks that leave
  // at least half of the SMs to the chunk kernels (or, from 512 chunks, that fit in one wave:
  // below); segments of >= 16 chunks, as many as `want_segs` below asks. By
  // default from 256 chunks (T >= 16384) on: r13 (ab693ee, qwen3-next) measured 1.775 against
  // 2.125 ms at T = 32768, but 0.553 / 0.531 at 8192 and 0.319 / 0.277 at 4096 (the per-segment
  // launches and the pipeline's fill cost more than the overlap gains on short sequences).
  // GDN_WYTC_OVERLAP=0 disables it, =1 forces it wherever it can run (tests), =negctl forces it
  // with the carry dropped (negative control), =all forces it also where the state blocks take
  // more than half of the SMs (an experiment: qwen3.5-27b's 96 of 132). GDN_WYTC_SEGS=n asks for
  // n segments (at least 16 chunks each) instead of the default below (experiments).
  const int state_blocks = static_cast<int>(std::min<std::int64_t>(
      static_cast<std::int64_t>(s.N) * pr.HV * (V / SCfg::kVSlice), 0x7fffffff));
  const bool want_v9 = exact_ws && !env_is("GDN_WYTC_STATE", "v6");
  // Operand scheme (docs/bounds.md): half (fp16 W, P, Q, S^T and OP's Vn^T, one product per
  // fold except ST) where the v9 pass runs and the inputs are in its domain, else split (bf16
  // hi + lo). The domain: promised by the caller with check_values off, checked by the value
  // scan with it on (detail::wide_values(): outside -> split). GDN_WYTC_PRECISION=split|half
  // forces one (half: also outside the domain; tests). Not by default for an fp32 o: there the
  // half operands, not the output rounding, would set o's error (r34: 2.6e-4 against split's
  // 4e-6). The workspace is sized for split in every case (the half format uses a subset of it),
  // so its size does not depend on values.
  const bool half = want_v9 && !env_is("GDN_WYTC_PRECISION", "split") &&
                    (env_is("GDN_WYTC_PRECISION", "half") ||
                     (a.o.dtype != DType::f32 && !detail::wide_values()));
  // U stored in fp16 between the passes (half scheme only; Workspace U16; bound row half-u16,
  // docs/bounds.md). The default there since r47 (cb5f272, one process image): 27b T = 32768
  // 1.441 against 1.537 ms, 8 x 4096 1.461 against 1.554, T = 4096 0.218 against 0.229,
  // qwen3-next T = 32768 1.124 against 1.201; the chunk kernel 238.2 -> 218.9 us at T = 8192
  // (16 KiB less to write per chunk and value head), the 8 x 4096 state pass 612 -> 592 us.
  // Cost: the final state's error 1.8e-5 -> 2.2e-4 at 27b T = 32768 (o 1.685e-3 -> 1.699e-3).
  // GDN_WYTC_U16=0 keeps U in fp32.
  const bool u16 = half && !env_is("GDN_WYTC_U16", "0");
  // D16 (session 22; Workspace K16; bound row half-u16-d16, docs/bounds.md): the state update as
  // ONE fp16 product, D = Vn^T diag(ed) rounded once to fp16 times K^T converted to fp16 (exact in
  // the half domain), instead of D split bf16 hi + lo times the bf16 K^T (two products). The same
  // workspace bytes; the state pass loses D's lo half and one of ST's products. The default with
  // fp16 U since r70 (8c754c3, H100, one process image, ms default / D16): 27b T = 4096 0.2325 /
  // 0.2304 -> 0.2255 / 0.2256, qwen3-next T = 32768 1.265 / 1.267 -> 1.225 / 1.224, 27b T = 32768
  // 1.615 / 1.600 -> 1.602 / 1.601, 8 x 4096 1.629 / 1.628 -> 1.627 / 1.629; the state pass at
  // T = 4096 99.9 -> 92.5 us. Cost: the final state's error 2.17e-4 -> 3.10e-4 at 27b T = 32768
  // (o 1.699e-3 -> 1.703e-3). GDN_WYTC_D16=0 keeps the split D.
  const bool d16 = u16 && !env_is("GDN_WYTC_D16", "0");
  // Segments: split scheme 8 (r13, r28); half scheme about one per 85 chunks within [4, 32]
  // (r74 / r75, H100, after U16 / D16 had shortened the state pass; against r38's NC / 128 in
  // [4, 16], same run: 27b T = 32768 1.55 vs 1.60 ms, 131072 6.01 vs 6.16, qwen3-next T = 32768
  // 1.19 vs 1.23; the floor of 4 kept for 256 chunks, where r38 measured 4 as best; the sweep
  // is in docs/NOTES_wy_tc.md, session 25).
  std::int64_t want_segs = half ? std::clamp<std::int64_t>((NC + 42) / 85, 4, 32) : 8;
  if (const char* e = std::getenv("GDN_WYTC_SEGS")) want_segs = std::max(2, std::atoi(e));
  const std::int64_t seg = std::max<std::int64_t>(16, (NC + want_segs - 1) / want_segs);
  const int nseg = static_cast<int>((NC + seg - 1) / seg);
  const bool overlap_all = env_is("GDN_WYTC_OVERLAP", "all");
  const bool overlap_negctl = env_is("GDN_WYTC_OVERLAP", "negctl");
  const bool overlap_forced = overlap_negctl || overlap_all || env_is("GDN_WYTC_OVERLAP", "1");
  // Where the state blocks take more than half of the SMs (but fit in one wave), the overlap
  // pays from 512 chunks on: r28 (qwen3.5-27b, 96 state blocks of 132) measured 2.280 against
  // 2.395 ms at T = 32768 and 8.92 against 9.69 at 131072, but 1.309 against 1.184 at 16384.
  // Half scheme (r38): from 256 chunks in both cases (27b T = 16384, 4 segments: 0.927 against
  // 0.959 ms without the overlap; qwen3-next 8192, 128 chunks: 0.407 against 0.399, so not
  // below 256).
  const int sms = sm_count();
  const bool fits = 2 * state_blocks <= sms ? NC >= 256
                                            : state_blocks <= sms && NC >= (half ? 256 : 512);
  // Flag pipeline (sessions 28-29): one chunk launch and one state launch for the whole
  // sequence, at the same time on two streams. The chunk grid runs chunk by chunk (all heads of
  // chunk c before c + 1) and each chunk block counts into 64-bit ready words once its workspace
  // tiles are written (ChunkParams::ready: its own head's word, with G_C, and, for a key head's
  // Q / K writer, the words of the key head's other value heads); each state block copies chunk
  // c's tiles once c's word is up (v9's kFlags: probed ahead of the chain, waited for only when
  // the chain has caught up). So the chain starts after the first chunk instead of the first
  // segment and no segment boundary stalls it. The chunk kernel never waits, so it always
  // completes and every word is set: no deadlock whatever the block placement (a serialising
  // environment, e.g. a sanitizer, runs the chunk kernel, enqueued first, to the end before the
  // state kernel, which then never waits).
  // Where it can run: the default state pass (half, fp16 U, D16; paired slices, or one slice
  // per block with GDN_WYTC_PAIR=0) at K = V = 128 with bf16 o, one sequence, state blocks
  // within one wave, at most 65535 chunks.
  // Opt-in. r81 (478ebe1, H100): one slice per block 10-42% slower than the segments (27b
  // T = 32768 2.00 against 1.575 ms): 96 resident state blocks leave each of their SMs one chunk
  // block for the whole run. r83 (1203a52, H100): paired 14-47% slower (27b T = 32768 1.89-1.96
  // against 1.58, qwen3-next 1.79-1.83 against 1.23), though the same two kernels without the
  // waits ran 1.38 / 1.16 (r81): thread 0 acquired each chunk with three dependent L2 round trips
  // (two acquire loads, then G_C) on the chain's critical path, twice a step. Session 29's words
  // (one relaxed load, probed a check point ahead, G_C in the word) take that off the chain;
  // not yet measured.
  // GDN_WYTC_FLAGS=1 forces it where it can run (paired unless GDN_WYTC_PAIR=0); =negctl too with
  // its negative control (the state pass run BEFORE the chunk kernel on one stream with every
  // word preset and the workspace poisoned: must differ); =delay (test): the workspace poisoned
  // and the chunk kernel held back ~20 ms behind a sleeping kernel, so a state pass that does not
  // wait for the words reads poison (must still equal the single pass); =delay-negctl (test, the
  // delay check's negative control): the same with the ordinary state kernel, which does not
  // wait (must differ where the two streams run at once); =0 or unset: off.
  // GDN_WYTC_FLAGS_TRACE=1 with it (experiments; ignored under graph capture): a summary line of
  // %globaltimer stamps on stderr after each call (print_flag_trace).
  const bool flags_neg = env_is("GDN_WYTC_FLAGS", "negctl");
  const bool flags_delay_neg = env_is("GDN_WYTC_FLAGS", "delay-negctl");
  const bool flags_delay = flags_delay_neg || env_is("GDN_WYTC_FLAGS", "delay");
  const bool flags = want_v9 && d16 && K == 128 && V == 128 && a.o.dtype == DType::bf16 &&
                     s.N == 1 && state_blocks <= sms && NC <= 65535 &&
                     !env_is("GDN_WYTC_PAIR", "negctl") &&
                     (flags_neg || flags_delay || env_is("GDN_WYTC_FLAGS", "1"));
  const bool overlap = !flags && want_v9 && s.N == 1 && nseg >= 2 &&
                       !env_is("GDN_WYTC_OVERLAP", "0") &&
                       (overlap_forced ? (overlap_all || 2 * state_blocks <= sms) : fits);
  const std::size_t b_carry =
      overlap ? align_up(sizeof(float) * static_cast<std::size_t>(pr.HV) * K * V) : 0;
  const std::size_t b_ready = flags ? align_up(sizeof(unsigned long long) * tiles) : 0;
  const std::size_t b_qk_planes = exact_ws ? 2 * b_ckqk : 4 * b_ck;  // qh, kh [, ql, kl]
  const std::size_t b_all =
      b_tab + 2 * b_ck + b_qk_planes + 2 * b_cc + b_cv + b_gc + 2 * b_vec + b_carry + b_ready;
  if (size_only) {  // the workspace query (detail::cuda_wy_tc_prefill): nothing queued
    *size_only = b_all;
    return Status::Ok();
  }
  cuda::Scratch scratch(st, a.workspace, a.workspace_bytes);  // the caller's, else the pool
  Status stt = scratch.alloc(b_all);
  if (!stt.ok()) return stt;
  cuda::ChunkTable table;
  stt = cuda::build_chunk_table(plan, offs, scratch.as<void>(0), st, &table);
  if (!stt.ok()) return stt;
  Workspace ws;
  std::size_t off = b_tab;
  for (std::uint32_t** plane : {&ws.wh, &ws.wl})
    *plane = scratch.as<std::uint32_t>(off), off += b_ck;
  if (exact_ws) {  // ql, kl stay null (never read or written in this format)
    ws.qh = scratch.as<std::uint32_t>(off), off += b_ckqk;
    ws.kh = scratch.as<std::uint32_t>(off), off += b_ckqk;
  } else {
    for (std::uint32_t** plane : {&ws.qh, &ws.ql, &ws.kh, &ws.kl})
      *plane = scratch.as<std::uint32_t>(off), off += b_ck;
  }
  ws.ph = scratch.as<std::uint32_t>(off), off += b_cc;
  ws.pl = scratch.as<std::uint32_t>(off), off += b_cc;
  ws.u = scratch.as<float>(off), off += b_cv;
  ws.gc = scratch.as<float>(off), off += b_gc;
  ws.eq = scratch.as<float>(off), off += b_vec;
  ws.ed = scratch.as<float>(off), off += b_vec;
  float* carry = overlap ? scratch.as<float>(off) : nullptr;  // one sequence's state, fp32
  off += b_carry;
  unsigned long long* ready = flags ? scratch.as<unsigned long long>(off) : nullptr;  // [NC, HV]
  // GDN_WYTC_FLAGS_TRACE=1 (experiments, with the flag pipeline): %globaltimer stamps in a
  // buffer of their own (never freed), summarised on stderr after each call (which then
  // synchronises its stream): [NC * HV] publications, then [4 * state blocks] (start, end, ns
  // waited, waits), then block 0's acquire time of each chunk [NC].
  unsigned long long* trace_chunk = nullptr;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (flags && env_is("GDN_WYTC_FLAGS_TRACE", "1") &&
      cudaStreamIsCapturing(st, &capturing) == cudaSuccess &&
      capturing == cudaStreamCaptureStatusNone) {  // (it synchronises: not under capture)
    static unsigned long long* buf = nullptr;
    static std::size_t cap = 0;
    const std::size_t n = static_cast<std::size_t>(tiles + 4 * state_blocks + NC);
    if (n > cap) {
      if (buf) GDN_CUDA_TRY(cudaFree(buf));
      buf = nullptr, cap = 0;
      GDN_CUDA_TRY(cudaMalloc(&buf, n * sizeof(unsigned long long)));
      cap = n;
    }
    trace_chunk = buf;
  }
  const std::int32_t* d_tok0 = table.tok0;
  const std::int32_t* d_len = table.len;
  const std::int32_t* d_first = table.first;

  // Chunk kernels over the global chunks [c0, c1) on `stream`.
  // ready: the flag pipeline's flags (v7 only; the grid is then (HV, chunks)).
  auto run_chunks = [&](std::int64_t c0, std::int64_t c1, cudaStream_t stream,
                        unsigned long long* ready = nullptr) -> Status {
    if (c1 <= c0) return Status::Ok();
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
    cp.exact_ws = exact_ws;
    cp.half_ws = half;
    cp.u16 = u16;
    cp.k16 = d16;
    cp.ws = ws;
    cp.chunk0 = static_cast<int>(c0);
    cp.ready = ready;
    cp.trace = ready ? trace_chunk : nullptr;
    if (NC > 0x7fffffff) return Status::Unsupported("wy-tc: too many chunks");
    if (ready && !v7_chunk) return Status::Internal("wy-tc: flag pipeline without the v7 kernel");
    const dim3 grid = ready ? dim3(static_cast<unsigned>(pr.HV), static_cast<unsigned>(c1 - c0))
                            : dim3(static_cast<unsigned>(c1 - c0), static_cast<unsigned>(pr.HV));
    if (v7_chunk) {
      auto go = [&](auto kern) -> Status {
        constexpr std::size_t smem = ChunkSmemV7<K, V>::bytes;
        GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
        kern<<<grid, Cfg::kThreads, smem, stream>>>(cp, chunk_v == 8 ? 1 : 0);
        GDN_CUDA_LAUNCH_CHECK("wy_tc_chunk_kernel_v7");
        return Status::Ok();
      };
      Status ls;
      if (chunk_v == 10) {
        if (a.beta.dtype == DType::bf16)
          ls = pr.qk_l2norm ? go(wy_tc_chunk_kernel_v7<__nv_bfloat16, K, V, true, true, false>)
                            : go(wy_tc_chunk_kernel_v7<__nv_bfloat16, K, V, false, true, false>);
        else
          ls = pr.qk_l2norm ? go(wy_tc_chunk_kernel_v7<float, K, V, true, true, false>)
                            : go(wy_tc_chunk_kernel_v7<float, K, V, false, true, false>);
      } else if (chunk_v == 9) {
        if (a.beta.dtype == DType::bf16)
          ls = pr.qk_l2norm ? go(wy_tc_chunk_kernel_v7<__nv_bfloat16, K, V, true, false>)
                            : go(wy_tc_chunk_kernel_v7<__nv_bfloat16, K, V, false, false>);
        else
          ls = pr.qk_l2norm ? go(wy_tc_chunk_kernel_v7<float, K, V, true, false>)
                            : go(wy_tc_chunk_kernel_v7<float, K, V, false, false>);
      } else if (a.beta.dtype == DType::bf16) {
        ls = pr.qk_l2norm ? go(wy_tc_chunk_kernel_v7<__nv_bfloat16, K, V, true>)
                          : go(wy_tc_chunk_kernel_v7<__nv_bfloat16, K, V, false>);
      } else {
        ls = pr.qk_l2norm ? go(wy_tc_chunk_kernel_v7<float, K, V, true>)
                          : go(wy_tc_chunk_kernel_v7<float, K, V, false>);
      }
      if (!ls.ok()) return ls;
    } else {
    Status ls = cuda::dispatch_dtype(a.q.dtype, [&](auto tin) -> Status {
      using TIn = decltype(tin);
      auto go = [&](auto kern) -> Status {
        constexpr std::size_t smem = ChunkSmem<K, V>::bytes;
        GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
        kern<<<grid, Cfg::kThreads, smem, stream>>>(cp);
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
    return Status::Ok();
  };

  StateParams sp{};
  sp.o = a.o.data, sp.o_st = a.o.stride[0], sp.o_sh = a.o.stride[1];
  sp.h0 = static_cast<const float*>(a.h0.data);
  sp.hT = static_cast<float*>(a.hT.data);
  sp.vk = pr.state_layout == StateLayout::vk;
  sp.chunk_tok0 = d_tok0, sp.chunk_len = d_len, sp.seq_chunk0 = d_first;
  sp.HV = pr.HV;
  sp.HK = pr.HK;
  sp.tiled = pr.head_map == HeadMap::tiled;
  sp.qk_inv = 1.f / static_cast<float>(sp.tiled ? pr.HK : pr.HV / pr.HK);
  sp.ws = ws;
  if (static_cast<std::int64_t>(s.N) * pr.HV * (V / SCfg::kVSlice) > 0x7fffffff)
    return Status::Unsupported("wy-tc: too many state blocks");
  sp.wg_negctl = wg && env_is("GDN_WYTC_WG_NEGCTL", "1");
  sp.seg_c0 = 0, sp.seg_c1 = 0x7fffffff;
  // v9 (wy_tc_state_wg9.cuh): the pipelined pass; GDN_WYTC_STATE=v6 the unpipelined one.
  const bool v9 = wg && exact_ws && !env_is("GDN_WYTC_STATE", "v6");
  // Paired slices (wy_tc_state_wg9.cuh, kNS = 2: one block of two warpgroups per sequence and
  // value head, V = 128, half scheme with fp16 U, 2-byte o). Its chain step is ~2.06 us against
  // 1.41 (r64, H100: the two warpgroups share the SM's tensor pipes), but it takes half the SMs.
  // r64 (0f960e4, one process image, ms one-slice / paired): 27b T = 32768 1.597-1.601 / 1.648-
  // 1.653, 131072 6.33-6.34 / 6.16-6.18, 4096 0.231 / 0.273, 8 x 4096 1.626-1.631 / 1.590,
  // qwen3-next T = 32768 1.258 / 1.442. By default where it won: without the overlap when the
  // one-slice blocks take more than one wave (one wave at 2.06 us per step beats two at 1.41),
  // and in the overlap of state blocks that take more than half of the SMs (the chunk pass is
  // the bound: it gets the other SMs whole) from 2048 chunks on (T >= 131072: the state segment
  // that runs alone at the end costs its slower chain once, the overlapped ones gain). GDN_WYTC_PAIR=0
  // / 1 off / forced wherever it can run, =negctl forced with its negative control.
  sp.pair_negctl = env_is("GDN_WYTC_PAIR", "negctl");
  const bool pair_auto = overlap ? 2 * state_blocks > sms && NC >= 2048 : state_blocks > sms;
  const bool pair = v9 && half && u16 && V == 2 * SCfg::kVSlice && a.o.dtype != DType::f32 &&
                    (sp.pair_negctl || env_is("GDN_WYTC_PAIR", "1") ||
                     ((pair_auto || flags) && !env_is("GDN_WYTC_PAIR", "0")));
  // The state pass of `nseq` sequences from spp.seq0 on `stream`, with parameters `spp` (a
  // segment's, or the whole sequences').
  auto run_state = [&](StateParams spp, int nseq, cudaStream_t stream) -> Status {
  const std::int64_t blocks = static_cast<std::int64_t>(nseq) * pr.HV * (V / SCfg::kVSlice);
  return cuda::dispatch_dtype(a.o.dtype, [&](auto tout) -> Status {
    using TOut = decltype(tout);
    constexpr std::int64_t kEs = sizeof(TOut);
    spp.o_vec = reinterpret_cast<std::uintptr_t>(a.o.data) % 16 == 0 &&
                (a.o.stride[0] * kEs) % 16 == 0 && (a.o.stride[1] * kEs) % 16 == 0;
    auto go = [&](auto kern, std::size_t smem, const char* name, int ns = 1) -> Status {
      GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
      kern<<<static_cast<unsigned>(blocks / ns), SCfg::kThreads * ns, smem, stream>>>(spp);
      return cuda::from_cuda(cudaGetLastError(), name);
    };
    constexpr int kOB = static_cast<int>(kEs);  // v9's o staging sized for the o dtype
    // The flag pipeline's kernels first: spp.ready must never reach a kernel that does not wait
    // for the flags (session 28's first paired measurement, r81 / r82, did: the paired branch
    // below came first).
    if constexpr (K == 128 && V == 128 && std::is_same_v<TOut, __nv_bfloat16>) {
      if (spp.ready && d16 && pair)
        return go(wy_tc_state_kernel_wg9<TOut, K, V, true, true, 2, true, true>,
                  StateSmemWg<K, V, true, true, true, kOB, 2>::bytes,
                  "wy_tc_state_kernel_wg9 (half, fp16 U, paired slices, D16, flag pipeline) launch",
                  2);
      if (spp.ready && d16)
        return go(wy_tc_state_kernel_wg9<TOut, K, V, true, true, 1, true, true>,
                  StateSmemWg<K, V, true, true, true, kOB>::bytes,
                  "wy_tc_state_kernel_wg9 (half, fp16 U, D16, flag pipeline) launch");
    }
    if (spp.ready) return Status::Internal("wy-tc: flag pipeline without its state kernel");
    if constexpr (kEs == 2 && V == 2 * SCfg::kVSlice) {
      if (pair && d16)
        return go(wy_tc_state_kernel_wg9<TOut, K, V, true, true, 2, true>,
                  StateSmemWg<K, V, true, true, true, kOB, 2>::bytes,
                  "wy_tc_state_kernel_wg9 (half, fp16 U, paired slices, D16) launch", 2);
      if (pair)
        return go(wy_tc_state_kernel_wg9<TOut, K, V, true, true, 2>,
                  StateSmemWg<K, V, true, true, true, kOB, 2>::bytes,
                  "wy_tc_state_kernel_wg9 (half, fp16 U, paired slices) launch", 2);
    }
    if (d16)
      return go(wy_tc_state_kernel_wg9<TOut, K, V, true, true, 1, true>,
                StateSmemWg<K, V, true, true, true, kOB>::bytes,
                "wy_tc_state_kernel_wg9 (half, fp16 U, D16) launch");
    if (v9 && half && u16)
      return go(wy_tc_state_kernel_wg9<TOut, K, V, true, true>,
                StateSmemWg<K, V, true, true, true, kOB>::bytes,
                "wy_tc_state_kernel_wg9 (half, fp16 U) launch");
    if (v9 && half)
      return go(wy_tc_state_kernel_wg9<TOut, K, V, true>,
                StateSmemWg<K, V, true, true, false, kOB>::bytes,
                "wy_tc_state_kernel_wg9 (half) launch");
    if (v9)
      return go(wy_tc_state_kernel_wg9<TOut, K, V>, StateSmemWg<K, V, true, false, false, kOB>::bytes,
                "wy_tc_state_kernel_wg9 launch");
    if (wg && exact_ws)
      return go(wy_tc_state_kernel_wg<TOut, K, V, true>, StateSmemWg<K, V, true>::bytes,
                "wy_tc_state_kernel_wg launch");
    if (wg)
      return go(wy_tc_state_kernel_wg<TOut, K, V, false>, StateSmemWg<K, V, false>::bytes,
                "wy_tc_state_kernel_wg launch");
    return go(wy_tc_state_kernel<TOut, K, V>, StateSmem<K, V>::bytes,
              "wy_tc_state_kernel launch");
  });
  };

  // Varlen groups (several sequences, host offsets known, the v9 pass): the sequences are cut
  // into runs of whole sequences (groups) with about equal chunk counts; the chunk kernels of
  // group i + 1 run on `st` while the state pass of group i runs on the side stream (as the
  // segments below, without a carry: no sequence spans two groups). Same blocks, same
  // arithmetic: the results equal the single pass bit for bit. r48 (two groups, split scheme)
  // measured no gain: a group whose state blocks take more than one wave splits the SMs with the
  // next group's chunk blocks instead of sharing them. Default (session 26, half scheme): groups
  // of as many whole sequences as have their state blocks in one wave (SMs / blocks per
  // sequence, at least one sequence), at most one group per 64 chunks, and only from 256 chunks
  // in all (as for the overlap: below that the extra launches and the fill cost more than they
  // hide). r77 (H100, same run, ms grouped / not): 27b 8 x 4096 1.54 / 1.59, 4 x 8192 1.57 /
  // 1.66, 6 x 4096 1.155 / 1.254, 16 x 2048 1.577 / 1.603, 8 x 8192 3.148 / 3.158; qwen3.5-397b
  // 8 x 4096 1.99 / 2.04; qwen3-next -0.2% to +0.8% (docs/NOTES_wy_tc.md, session 26).
  // GDN_WYTC_VGROUPS=n asks for n groups wherever it can run (0: none; tests, experiments),
  // =negctl forces 2 groups and drops the second group's h0 (negative control).
  std::vector<int> group_n0;        // first sequence of each group, then N
  std::vector<std::int64_t> first;  // host copy of the table's `first` (groups only)
  const bool vneg = env_is("GDN_WYTC_VGROUPS", "negctl");
  if (!overlap && v9 && s.N >= 2 && offs.host && plan.exact) {
    int want = 0;
    if (vneg) want = 2;
    else if (const char* e = std::getenv("GDN_WYTC_VGROUPS")) want = std::max(0, std::atoi(e));
    else if (half && sms > 0 && NC >= 256) {
      const int per_seq = pr.HV * (V / SCfg::kVSlice) / (pair ? 2 : 1);  // state blocks
      const int per_group = std::max(1, sms / std::max(1, per_seq));      // sequences
      want = static_cast<int>(std::min<std::int64_t>((s.N + per_group - 1) / per_group, NC / 64));
    }
    want = std::min(want, s.N);
    if (want >= 2) {
      first.assign(s.N + 1, 0);
      for (int n = 0; n < s.N; ++n)
        first[n + 1] = first[n] +
                       (std::max<std::int64_t>(0, offs.host[n + 1] - offs.host[n]) + C - 1) / C;
      // Cut before sequence n where the chunks so far first reach g * NC / want.
      group_n0.push_back(0);
      for (int n = 1; n < s.N; ++n) {
        const int g = static_cast<int>(group_n0.size());
        if (first[n] > 0 && g < want && first[n] * want >= g * NC)
          group_n0.push_back(n);
      }
      group_n0.push_back(s.N);
      if (group_n0.size() < 3) group_n0.clear();  // one group: the plain passes
    }
  }
  if (flags) {
    StateParams spf = sp;
    spf.ready = ready;
    const std::size_t b_flags = sizeof(unsigned long long) * static_cast<std::size_t>(tiles);
    if (flags_neg) {  // negative control: the state pass reads a poisoned workspace first
      GDN_CUDA_TRY(cudaMemsetAsync(scratch.as<unsigned char>(b_tab), 0xFF, off - b_tab, st));
      GDN_CUDA_TRY(cudaMemsetAsync(ready, 1, b_flags, st));
      Status ls = run_state(spf, s.N, st);
      if (!ls.ok()) return ls;
      return run_chunks(0, NC, st, ready);
    }
    SideStream& side = side_stream();
    std::lock_guard<std::mutex> lock(side.m);
    Status ls = side.ensure(2);
    if (!ls.ok()) return ls;
    // (GDN_WYTC_FLAGS_LEAD=n, the first n chunks alone before the state launch, was measured
    // slower in r81 and removed; it stays in git at 6289d81.)
    if (flags_delay)  // test: anything read before its flag is poison
      GDN_CUDA_TRY(cudaMemsetAsync(scratch.as<unsigned char>(b_tab), 0xFF, off - b_tab, st));
    GDN_CUDA_TRY(cudaMemsetAsync(ready, 0, b_flags, st));
    const int trace_nb = pair ? state_blocks / 2 : state_blocks;
    if (trace_chunk) {
      spf.trace = trace_chunk + tiles;
      GDN_CUDA_TRY(cudaMemsetAsync(trace_chunk, 0,
                                   sizeof(unsigned long long) * (tiles + 4 * trace_nb + NC), st));
    }
    GDN_CUDA_TRY(cudaEventRecord(side.ev[0], st));
    GDN_CUDA_TRY(cudaStreamWaitEvent(side.s, side.ev[0], 0));
    if (flags_delay) {
      wy_tc_sleep_kernel<<<1, 1, 0, st>>>(20u * 1000u * 1000u);
      GDN_CUDA_LAUNCH_CHECK("wy_tc_sleep_kernel");
    }
    // The chunk kernel first: if it cannot be queued, no state block is left waiting for it.
    // GDN_WYTC_FLAGS_ORDER=state (experiment): the state kernel first, so that its blocks are
    // placed before the chunk blocks fill the SMs; it deadlocks (until the 20 s trap) where the
    // launches are serialised (e.g. under compute-sanitizer), so never by default.
    if (flags_delay_neg) spf.ready = nullptr;  // the ordinary state kernel: it does not wait
    Status res = Status::Ok();
    const bool state_first = env_is("GDN_WYTC_FLAGS_ORDER", "state") && !flags_delay;
    if (state_first) res = run_state(spf, s.N, side.s);
    if (res.ok()) ls = run_chunks(0, NC, st, ready);
    if (state_first && res.ok() && !ls.ok()) {  // release the waiting state blocks (o is lost)
      (void)cudaMemsetAsync(ready, 0xFF, b_flags, st);
      return ls;
    }
    if (!res.ok() || !ls.ok()) return res.ok() ? ls : res;
    if (!state_first) res = run_state(spf, s.N, side.s);
    Status j = cuda::from_cuda(cudaEventRecord(side.ev[1], side.s), "wy-tc flags: join");
    if (j.ok()) j = cuda::from_cuda(cudaStreamWaitEvent(st, side.ev[1], 0), "wy-tc flags: join");
    if (trace_chunk && res.ok() && j.ok()) {
      std::vector<unsigned long long> t(static_cast<std::size_t>(tiles + 4 * trace_nb + NC));
      GDN_CUDA_TRY(cudaStreamSynchronize(st));
      GDN_CUDA_TRY(cudaMemcpy(t.data(), trace_chunk, t.size() * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost));
      print_flag_trace(t, NC, pr.HV, trace_nb);
    }
    return res.ok() ? j : res;
  }
  if (!overlap && group_n0.empty()) {
    Status ls = run_chunks(0, NC, st);
    if (!ls.ok()) return ls;
    return run_state(sp, s.N, st);
  }
  if (!overlap) {
    const int ng = static_cast<int>(group_n0.size()) - 1;
    SideStream& side = side_stream();
    std::lock_guard<std::mutex> lock(side.m);
    Status ls = side.ensure(ng + 1);
    if (!ls.ok()) return ls;
    Status res = Status::Ok();
    int recorded = 0;
    for (int i = 0; i < ng && res.ok(); ++i) {
      const int n0 = group_n0[i], n1 = group_n0[i + 1];
      res = run_chunks(first[n0], first[n1], st);
      if (!res.ok()) break;
      res = cuda::from_cuda(cudaEventRecord(side.ev[i], st), "wy-tc groups: event record");
      if (!res.ok()) break;
      res = cuda::from_cuda(cudaStreamWaitEvent(side.s, side.ev[i], 0), "wy-tc groups: wait");
      if (!res.ok()) break;
      StateParams spi = sp;
      spi.seq0 = n0;
      if (i > 0 && vneg) spi.h0 = nullptr;  // negative control: the group's h0 is dropped
      res = run_state(spi, n1 - n0, side.s);
      ++recorded;
    }
    if (recorded > 0) {
      Status j = cuda::from_cuda(cudaEventRecord(side.ev[ng], side.s), "wy-tc groups: join");
      if (j.ok()) j = cuda::from_cuda(cudaStreamWaitEvent(st, side.ev[ng], 0), "wy-tc groups: join");
      if (res.ok()) res = j;
    }
    return res;
  }
  // Overlapped passes (one sequence whose state blocks fill at most half of the SMs; the
  // conditions are at `overlap` above): the chunk kernels of segment i + 1 run on `st` while the state pass of
  // segment i runs on a high-priority side stream on the SMs it leaves free. Each segment's state
  // pass continues from the previous one's state through `carry` (fp32, the caller's layout): the
  // results equal the single pass bit for bit. Ordering by events only (no spinning), so a
  // serialising environment (sanitizers, no concurrent kernels) loses the overlap, not progress.
  SideStream& side = side_stream();
  std::lock_guard<std::mutex> lock(side.m);
  Status ls = side.ensure(nseg + 1);
  if (!ls.ok()) return ls;
  Status res = Status::Ok();
  int recorded = 0;  // state passes enqueued on the side stream
  for (int i = 0; i < nseg && res.ok(); ++i) {
    const std::int64_t c0 = i * seg, c1 = std::min<std::int64_t>(NC, c0 + seg);
    res = run_chunks(c0, c1, st);
    if (!res.ok()) break;
    res = cuda::from_cuda(cudaEventRecord(side.ev[i], st), "wy-tc overlap: event record");
    if (!res.ok()) break;
    res = cuda::from_cuda(cudaStreamWaitEvent(side.s, side.ev[i], 0), "wy-tc overlap: wait");
    if (!res.ok()) break;
    StateParams spi = sp;
    spi.seg_c0 = static_cast<int>(c0), spi.seg_c1 = static_cast<int>(c1);
    spi.h0 = i == 0 ? sp.h0 : carry;
    spi.hT = i == nseg - 1 ? sp.hT : carry;
    if (i > 0 && overlap_negctl) spi.h0 = nullptr;  // negative control: the carry is dropped
    res = run_state(spi, s.N, side.s);
    ++recorded;
  }
  // Join: `st` (and the scratch's stream-ordered free) waits for every state pass enqueued.
  if (recorded > 0) {
    Status j = cuda::from_cuda(cudaEventRecord(side.ev[nseg], side.s), "wy-tc overlap: join");
    if (j.ok()) j = cuda::from_cuda(cudaStreamWaitEvent(st, side.ev[nseg], 0), "wy-tc overlap: join");
    if (res.ok()) res = j;
  }
  return res;
}
// (The scratch is freed stream-ordered (cudaFreeAsync) after the kernels; no host sync.)


}  // namespace

bool cuda_wy_tc_supports(const Problem& p, std::string* why) {
  const bool ok = (p.K == 64 || p.K == 128) && (p.V == 64 || p.V == 128);
  if (!ok && why)
    *why = "wy-tc supports K, V in {64, 128}, got K=" + std::to_string(p.K) +
           ", V=" + std::to_string(p.V);
  return ok;
}

Status cuda_wy_tc_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s,
                          std::uint64_t* size_only) {
  std::string why;
  if (!cuda_wy_tc_supports(p, &why)) return Status::Unsupported(why);
  if (p.K == 64 && p.V == 64) return launch<64, 64>(p, a, s, size_only);
  if (p.K == 64 && p.V == 128) return launch<64, 128>(p, a, s, size_only);
  if (p.K == 128 && p.V == 64) return launch<128, 64>(p, a, s, size_only);
  return launch<128, 128>(p, a, s, size_only);
}

}  // namespace gdn::detail
