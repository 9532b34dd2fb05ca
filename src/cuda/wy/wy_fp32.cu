// wy-fp32 arm: the chunked WY form (DESIGN.md §2, C = 64) with fp32 FMA folds, an fp32
// unit-lower-triangular solve by forward substitution and an fp32 state.
//
// Variants in this file (one kernel source each, templated on dtypes and head sizes):
//   wy_chunk_kernel  fully parallel over (chunk, value head): G, A, P, and [W | U] by forward
//                    substitution, written to an fp32 workspace.
//   wy_state_kernel  sequential over a sequence's chunks per (sequence, value head, V slice of 16
//                    columns), state slice in shared memory: Vn = U - W S, o, S'.
// The host mirror of this decomposition, operation for operation, is src/ref/segment_ref.cpp
// (prefill_segmented<float>), checked against the serial recurrence.
//
// FLOPs per chunk and value head (K = V = 128, C = 64; 1 FMA = 2 FLOPs):
//   chunk kernel: K K^T and Q K^T on 2560 of the 4096 entries (per thread the 10 row/column
//                 block pairs on or below the block diagonal): 2 * 2560 * 128 FMA = 0.66 MFMA;
//                 forward substitution on K + V = 256 columns: 256 * 2016 = 0.52 MFMA;
//                 total ~1.2 MFMA = 2.4 MFLOP.
//   state kernel: W S 64*128*128 + Q S 64*128*128 + P Vn 64*48*128 (rows < 32 to j = 32)
//                 + Kd^T Vn 128*64*128 = 3.5 MFMA = 7.0 MFLOP, sequential over chunks.
//   T = 32768, HV = 48 (qwen3.5-27b): 24576 chunk-heads x 9.2 MFLOP = 226 GFLOP of fp32 FMA;
//   at ~50 TFLOP/s of sustained fp32 FMA on an H200 that is ~4.5 ms (estimate, not measured),
//   plus the workspace round trip (24576 x 82 KiB = 2.0 GB written and re-read, ~1 ms).
// Workspace: per chunk-head W [C,K], U [C,V], P [C,C], G [C] in fp32 (82 KiB at K = V = 128).
//
// Deterministic: every sum has a fixed order; no atomics.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/common/common.cuh"

namespace gdn::cuda {
namespace {

constexpr int kC = 64;  // chunk length (fla convention; DESIGN.md §2)

// Tile configuration of wy_chunk_kernel.
template <int K_, int V_>
struct ChunkCfg {
  static constexpr int K = K_, V = V_;
  static constexpr int C = kC;
  // 256 threads: one per column of [W | U] in the solve (K + V <= 256) and one per 4x4 tile of
  // the 64 x 64 A/P matrices (16 x 16 tiles).
  static constexpr int NT = 256;
  // Row stride of the Q/K/V tiles (V reuses the Q buffer): float4 rows stay 16-B aligned.
  static constexpr int LDK = (K > V ? K : V) + 4;
  static constexpr int LDA = C + 4;  // row stride of A: float4 reads of A[i][j..j+3]
  // Rows per warp loaded before reducing (load_rows): all 8 of a warp's rows in one round trip.
  static constexpr int RB = C / (NT / 32);
  // smem: Ks 64 x 132 x 4 = 33,792 B; Qs (later V) 64 x 132 x 4 = 33,792 B; A 64 x 68 x 4 =
  // 17,408 B; G, beta 512 B: ~85 KiB at K = 128, two blocks per SM.
  static constexpr int smem_floats = 2 * C * LDK + C * LDA + 2 * C;
  static constexpr std::size_t smem_bytes = sizeof(float) * smem_floats;
  static_assert(K + V <= NT, "one solve column per thread");
  static_assert((C / 4) * (C / 4) == NT, "one 4x4 A/P tile per thread");
  static_assert(V + 4 <= LDK, "V tile reuses the Q buffer");
  static_assert(K % 32 == 0 && V % 4 == 0, "warp-row loaders and float4 columns");
  static_assert(LDK % 32 == 4, "strided A/P rows: row stride of 33 float4 (mod 8 = 1)");
};

// Tile configuration of wy_state_kernel.
// Thread mapping (v3): warp = column group, lane = row group. Every shared-memory read of S and
// Vn is then warp-uniform (one wavefront for an LDS.128, against four for a warp reading 4 or 8
// distinct float4), and every read of W/Q/P/Kd covers 32 distinct conflict-free rows.
template <int K_, int V_>
struct StateCfg {
  static constexpr int K = K_, V = V_;
  static constexpr int C = kC;
  static constexpr int VS = 16;      // V columns per block: 48 heads x 8 slices = 384 blocks, ~3/SM
  static constexpr int CG = VS / 4;  // float4 column groups per row: one per warp
  static constexpr int NT = 128;     // CG warps of 32 lanes
  static constexpr int RK = K / 32;  // state rows per thread: lane + 32 r, r < RK
  static constexpr int LDK = K + 4;  // Op row stride (33 float4): 8 consecutive rows, 8 bank groups
  static constexpr int LDP = C + 4;  // P row stride (17 float4): same property
  static constexpr int LDS = VS + 4; // S and Vn row stride (5 float4): rows r..r+7 of a
                                     // quarter-warp fall in 8 distinct 16-B bank groups
  // Rows per warp loaded before reducing (load_rows): 8 rows x K/32 values in flight, two round
  // trips for a warp's 16 rows; 16 would hold 64 more registers across the loader.
  static constexpr int RB = 8;
  // smem: S K x 20 x 4 = 10,240 B; Op 64 x 132 x 4 = 33,792 B (W, then Q, then Kd); P 64 x 68 x
  // 4 = 17,408 B; Vn 64 x 20 x 4 = 5,120 B; G, exp(G), exp(G_C - G) 768 B: ~66 KiB at K = 128,
  // three blocks per SM.
  static constexpr int smem_floats = K * LDS + C * LDK + C * LDP + C * LDS + 3 * C;
  static constexpr std::size_t smem_bytes = sizeof(float) * smem_floats;
  static_assert(CG == NT / 32, "one column group per warp");
  static_assert(C == 64, "phase a/b: rows lane and lane + 32 per thread");
  static_assert(K % 32 == 0, "phase c: state rows lane + 32 r");
  static_assert(V % VS == 0, "whole slices");
  static_assert((C * K / 4) % NT == 0 && (C * C / 4) % NT == 0, "W and P loads: whole rounds");
  static_assert(C % (RB * (NT / 32)) == 0, "load_rows: whole batches");
};

// Chunk table (cuda/common/chunk_table.cuh), built on the device: tok0[ci], len[ci] (1..64) and
// first[n], the first chunk of sequence n (first[N] = the chunk count).
struct ChunkTab {
  const std::int32_t* __restrict__ tok0;
  const std::int32_t* __restrict__ len;
  const std::int32_t* __restrict__ first;
  int N;
};

// Loads rows [0, C) of a [T, H, D] tensor (rows >= len are zero) into smem tile[C][ld] as fp32,
// one warp per row, optionally l2-normalized, then optionally multiplied by row_scale[r] (a
// separate fp32 multiply after the normalization, as a later pass over the tile would do). Used
// by both kernels on the same values, so the normalization is bitwise identical in both.
// NB rows per warp are loaded before any is reduced: one global round trip per NB rows instead
// of one per row (the per-row arithmetic and its order are unchanged).
template <int D, int NB, typename E>
__device__ __forceinline__ void load_rows(float* tile, int ld, const E* x, std::int64_t s0,
                                          std::int64_t t0, int len, bool l2norm, int nwarps,
                                          const float* row_scale = nullptr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int r0 = warp; r0 < kC; r0 += NB * nwarps) {
    float e[NB][D / 32];
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const int r = r0 + b * nwarps;
#pragma unroll
      for (int m = 0; m < D / 32; ++m)
        e[b][m] = r < len ? to_f32(x[(t0 + r) * s0 + lane + 32 * m]) : 0.f;
    }
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const int r = r0 + b * nwarps;
      if (l2norm) {
        float ss = 0.f;
#pragma unroll
        for (int m = 0; m < D / 32; ++m) ss = fmaf(e[b][m], e[b][m], ss);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
        const float rn = rsqrtf(ss + 1e-6f);
#pragma unroll
        for (int m = 0; m < D / 32; ++m) e[b][m] *= rn;
      }
      if (row_scale) {
        const float f = row_scale[r];
#pragma unroll
        for (int m = 0; m < D / 32; ++m) e[b][m] *= f;
      }
#pragma unroll
      for (int m = 0; m < D / 32; ++m) tile[r * ld + lane + 32 * m] = e[b][m];
    }
  }
}

// Per chunk-head workspace offsets (floats). X (v4): the chunk kernel also writes the
// normalized Q [C, K] and Kd = diag(exp(G_C - G)) K [C, K] (normalized K), so the state kernel
// streams every operand with cp.async instead of re-loading and re-normalizing q, k per V slice.
// Every offset is a multiple of 4 floats (16-B cp.async chunks).
template <int K, int V, bool X = false>
struct Ws {
  static constexpr std::int64_t W = 0, U = kC * K, P = U + kC * V, G = P + kC * kC;
  static constexpr std::int64_t Q = G + kC, Kd = Q + kC * K;
  static constexpr std::int64_t size = X ? Kd + kC * K : G + kC;
  static_assert(U % 4 == 0 && P % 4 == 0 && G % 4 == 0 && Q % 4 == 0 && Kd % 4 == 0 &&
                    size % 4 == 0,
                "16-B aligned tiles");
};

// Raw K K^T and Q K^T of thread (ti, tj) of a 16 x 16 grid: kk[a][b] = K_(ti+16a) . K_(tj+16b) and
// qk[a][b] = Q_(ti+16a) . K_(tj+16b) for b <= a (the pairs wholly above the diagonal skipped),
// each sum in increasing d from the caller's zeros. Both chunk kernels use it, so their A and P
// are formed by the same operations (the grouped kernel's workspace is bit-equal to v1's).
template <int K, int LDK>
__device__ __forceinline__ void kk_qk_tiles(float (&kk)[4][4], float (&qk)[4][4], const float* Ks,
                                            const float* Qs, int ti, int tj) {
  for (int d = 0; d < K; d += 4) {
    float4 ki[4], qi[4], kj[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      ki[r] = *reinterpret_cast<const float4*>(&Ks[(ti + 16 * r) * LDK + d]);
      qi[r] = *reinterpret_cast<const float4*>(&Qs[(ti + 16 * r) * LDK + d]);
      kj[r] = *reinterpret_cast<const float4*>(&Ks[(tj + 16 * r) * LDK + d]);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b <= a; ++b) {
        kk[a][b] = fmaf(ki[a].x, kj[b].x, kk[a][b]);
        kk[a][b] = fmaf(ki[a].y, kj[b].y, kk[a][b]);
        kk[a][b] = fmaf(ki[a].z, kj[b].z, kk[a][b]);
        kk[a][b] = fmaf(ki[a].w, kj[b].w, kk[a][b]);
        qk[a][b] = fmaf(qi[a].x, kj[b].x, qk[a][b]);
        qk[a][b] = fmaf(qi[a].y, kj[b].y, qk[a][b]);
        qk[a][b] = fmaf(qi[a].z, kj[b].z, qk[a][b]);
        qk[a][b] = fmaf(qi[a].w, kj[b].w, qk[a][b]);
      }
  }
}

template <typename E, typename B, int K, int V, bool X>
__global__ void __launch_bounds__(ChunkCfg<K, V>::NT, 2)
    wy_chunk_kernel(const ChunkTab tab,  // grid.x may exceed the chunk count (early exit)
                    const E* __restrict__ q, std::int64_t qs0, std::int64_t qs1,  // [T, HK, K]
                    const E* __restrict__ k, std::int64_t ks0, std::int64_t ks1,  // [T, HK, K]
                    const E* __restrict__ v, std::int64_t vs0, std::int64_t vs1,  // [T, HV, V]
                    const float* __restrict__ g, std::int64_t gs0,                // [T, HV]
                    const B* __restrict__ beta, std::int64_t bs0,                 // [T, HV]
                    int HV, int HK, int grouped, int l2norm,
                    float* __restrict__ ws) {  // [NC, HV, Ws::size]
  using Cfg = ChunkCfg<K, V>;
  constexpr int C = Cfg::C, LDK = Cfg::LDK, LDA = Cfg::LDA;
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);  // [C][LDK]: K, then the W right-hand side
  float* Qs = Ks + C * LDK;                     // [C][LDK]: Q, then the U right-hand side
  float* As = Qs + C * LDK;                     // [C][LDA]: A, zero on and above the diagonal
  float* Gs = As + C * LDA;                     // [C]
  float* Bs = Gs + C;                           // [C] beta, zero on padded rows

  const int ci = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  if (ci >= tab.first[tab.N]) return;  // slack of an upper-bound grid (block-uniform)
  const int kh = grouped ? h / (HV / HK) : h % HK;
  const struct { int t0, len; } cd = {tab.tok0[ci], tab.len[ci]};
  using WS = Ws<K, V, X>;
  float* out = ws + (static_cast<std::int64_t>(ci) * HV + h) * WS::size;

  if (tid < C) {
    Gs[tid] = tid < cd.len ? g[(cd.t0 + tid) * gs0 + h] : 0.f;
    Bs[tid] = tid < cd.len ? to_f32(beta[(cd.t0 + tid) * bs0 + h]) : 0.f;
  }
  load_rows<K, Cfg::RB>(Ks, LDK, k + kh * ks1, ks0, cd.t0, cd.len, l2norm, Cfg::NT / 32);
  load_rows<K, Cfg::RB>(Qs, LDK, q + kh * qs1, qs0, cd.t0, cd.len, l2norm, Cfg::NT / 32);
  __syncthreads();
  if (tid == 0) {  // in-chunk cumulative log-decay, fixed order; padded rows add g = 0
    float acc = 0.f;
    for (int i = 0; i < C; ++i) Gs[i] = acc += Gs[i];
  }
  __syncthreads();

  // A and P: thread (ti, tj) owns rows ti + 16a and columns tj + 16b (a, b in 0..3). Strided
  // rows put the 16 tj of a warp in 16 distinct float4 bank groups (row stride LDK = 33 float4),
  // where contiguous 4x4 tiles put them in 2 (an 8-way conflict); and the pairs a < b, which lie
  // wholly above the diagonal, are skipped (10 of 16 computed). Each dot product keeps its
  // sequential order over d, so A and P are bitwise those of the contiguous-tile version.
  {
    const int ti = tid / 16, tj = tid % 16;
    float kk[4][4] = {}, qk[4][4] = {};
    kk_qk_tiles<K, LDK>(kk, qk, Ks, Qs, ti, tj);
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int i = ti + 16 * a, j = tj + 16 * b;
        // Gam is formed only for i >= j, where the exponent is <= 0 (mask before the exp).
        const float gam = i >= j ? expf(Gs[i] - Gs[j]) : 0.f;
        As[i * LDA + j] = i > j ? Bs[i] * gam * kk[a][b] : 0.f;
        out[WS::P + i * C + j] = i >= j ? gam * qk[a][b] : 0.f;
      }
  }
  __syncthreads();
  if constexpr (X) {
    // v4: normalized Q and Kd = exp(G_C - G_i) k_i for the state kernel. Ks holds exactly the
    // values v3's state-kernel loader forms (same load_rows normalization) and Ed_i is formed
    // from the same G floats, so Kd is bitwise v3's; Q is stored unscaled (v3 applies exp(G_i)
    // after the Q S sum).
    const float GCc = Gs[C - 1];
    for (int e = tid; e < C * K / 4; e += Cfg::NT) {
      const int i = e / (K / 4), d = 4 * (e % (K / 4));
      const float ed = expf(GCc - Gs[i]);
      const float4 kv = *reinterpret_cast<const float4*>(&Ks[i * LDK + d]);
      *reinterpret_cast<float4*>(&out[WS::Q + i * K + d]) =
          *reinterpret_cast<const float4*>(&Qs[i * LDK + d]);
      *reinterpret_cast<float4*>(&out[WS::Kd + i * K + d]) =
          make_float4(kv.x * ed, kv.y * ed, kv.z * ed, kv.w * ed);
    }
  }
  // Right-hand sides: [diag(beta exp G) K | diag(beta) V]; V overwrites Q (no longer needed).
  if (tid < C) As[tid * LDA + tid] = Bs[tid] * expf(Gs[tid]);  // row factor on A's (zero) diagonal
  __syncthreads();
  for (int e = tid; e < C * K; e += Cfg::NT) {
    const int i = e / K, d = e % K;
    Ks[i * LDK + d] *= As[i * LDA + i];
  }
  for (int e = tid; e < C * V; e += Cfg::NT) {
    const int i = e / V, d = e % V;
    Qs[i * LDK + d] = i < cd.len ? Bs[i] * to_f32(v[(cd.t0 + i) * vs0 + h * vs1 + d]) : 0.f;
  }
  if (tid < C) out[WS::G + tid] = Gs[tid];
  __syncthreads();

  // Forward substitution, one column of [W | U] per thread, the column held in registers:
  // X_i = R_i - sum_{j<i} A_ij X_j (four partial sums for latency, fixed order).
  if (tid < K + V) {
    const float* rhs = tid < K ? &Ks[tid] : &Qs[tid - K];
    float* dst = tid < K ? out + WS::W + tid : out + WS::U + (tid - K);
    const int ld = tid < K ? K : V;
    float x[C];
#pragma unroll
    for (int i = 0; i < C; ++i) {
      float acc[4] = {rhs[i * LDK], 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < i; j += 4) {
        const float4 a = *reinterpret_cast<const float4*>(&As[i * LDA + j]);
        acc[0] = fmaf(-a.x, x[j], acc[0]);
        if (j + 1 < i) acc[1] = fmaf(-a.y, x[j + 1], acc[1]);
        if (j + 2 < i) acc[2] = fmaf(-a.z, x[j + 2], acc[2]);
        if (j + 3 < i) acc[3] = fmaf(-a.w, x[j + 3], acc[3]);
      }
      x[i] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      dst[i * ld] = x[i];
    }
  }
}

// Grouped chunk kernel (GDN_WYFP32_CHUNK=g): one block per (chunk, key head), the same
// workspace bit for bit (defined inside this namespace; uses ChunkTab, Ws, load_rows above).
#include "cuda/wy/wy_fp32_chunk_grouped.cuh"  // NOLINT(build/include)

template <typename E, typename OT, int K, int V>
__global__ void __launch_bounds__(StateCfg<K, V>::NT, 3)
    wy_state_kernel(const ChunkTab tab,
                    const float* __restrict__ ws,              // [NC, HV, Ws::size]
                    const E* __restrict__ q, std::int64_t qs0, std::int64_t qs1,  // [T, HK, K]
                    const E* __restrict__ k, std::int64_t ks0, std::int64_t ks1,  // [T, HK, K]
                    OT* __restrict__ o, std::int64_t os0, std::int64_t os1,       // [T, HV, V]
                    const float* h0,  // [N, HV, K, V] or [N, HV, V, K]; may alias hT
                    float* hT,        // same shape; may be null
                    int HV, int HK, int grouped, int l2norm, int vk, float scale) {
  using Cfg = StateCfg<K, V>;
  constexpr int C = Cfg::C, VS = Cfg::VS, LDK = Cfg::LDK, LDP = Cfg::LDP, LDS = Cfg::LDS,
                RK = Cfg::RK;
  extern __shared__ float4 smem4[];
  float* Ss = reinterpret_cast<float*>(smem4);  // [K][LDS] state slice (VS columns used)
  float* Op = Ss + K * LDS;                     // [C][LDK]: W, then Q, then Kd
  float* Pm = Op + C * LDK;                     // [C][LDP]
  float* Vn = Pm + C * LDP;                     // [C][LDS] (VS columns used)
  float* Gs = Vn + C * LDS;                     // [C] G
  float* Eg = Gs + C;                           // [C] exp(G_i)
  float* Ed = Eg + C;                           // [C] exp(G_C - G_i)

  const int v0 = blockIdx.x * VS, h = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
  const int kh = grouped ? h / (HV / HK) : h % HK;
  const int lane = tid & 31, warp = tid >> 5;
  const int col = 4 * warp;  // this thread's 4 columns within the slice (warp-uniform)
  const std::int64_t sbase = (static_cast<std::int64_t>(n) * HV + h) * K * V;

  // State slice in: h0 or zeros. Thread owns rows lane + 32 r, columns col..col+3; it reads and
  // later writes exactly these elements (in-place h0 == hT is safe without a barrier).
  float st[RK][4];
#pragma unroll
  for (int r = 0; r < RK; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = lane + 32 * r, vc = v0 + col + c;
      st[r][c] = h0 ? h0[sbase + (vk ? std::int64_t(vc) * K + d : std::int64_t(d) * V + vc)] : 0.f;
      Ss[d * LDS + col + c] = st[r][c];
    }

  const int c_begin = tab.first[n], c_end = tab.first[n + 1];
  for (int ci = c_begin; ci < c_end; ++ci) {
    const struct { int t0, len; } cd = {tab.tok0[ci], tab.len[ci]};
    const float* w = ws + (static_cast<std::int64_t>(ci) * HV + h) * Ws<K, V>::size;
    // Load G, W and P.
    if (tid < C) {  // exponents are <= 0: G_i <= 0 and G_C <= G_i
      const float gi = w[Ws<K, V>::G + tid];
      Gs[tid] = gi;
      Eg[tid] = expf(gi);
      Ed[tid] = expf(w[Ws<K, V>::G + C - 1] - gi);
    }
    // Fixed trip counts, unrolled by 8: eight float4 loads in flight per thread (32 registers;
    // full unrolling of the 16 W loads spilled at the 168-register cap of 3 blocks per SM).
#pragma unroll 8
    for (int it = 0; it < C * K / 4 / Cfg::NT; ++it) {
      const int e = tid + it * Cfg::NT, i = e / (K / 4), d = 4 * (e % (K / 4));
      *reinterpret_cast<float4*>(&Op[i * LDK + d]) =
          *reinterpret_cast<const float4*>(&w[Ws<K, V>::W + i * K + d]);
    }
#pragma unroll 8
    for (int it = 0; it < C * C / 4 / Cfg::NT; ++it) {
      const int e = tid + it * Cfg::NT, i = e / (C / 4), j = 4 * (e % (C / 4));
      *reinterpret_cast<float4*>(&Pm[i * LDP + j]) =
          *reinterpret_cast<const float4*>(&w[Ws<K, V>::P + i * C + j]);
    }
    __syncthreads();

    // Phase a: Vn = U - W S for rows lane and lane + 32, columns col..col+3. Each accumulator
    // runs over d in order (bitwise the v1/v2 sums); the S reads are warp-uniform.
    {
      float acc[2][4] = {};
      for (int d = 0; d < K; d += 4) {
        const float4 w0 = *reinterpret_cast<const float4*>(&Op[lane * LDK + d]);
        const float4 w1 = *reinterpret_cast<const float4*>(&Op[(lane + 32) * LDK + d]);
        const float wa[2][4] = {{w0.x, w0.y, w0.z, w0.w}, {w1.x, w1.y, w1.z, w1.w}};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 s = *reinterpret_cast<const float4*>(&Ss[(d + m) * LDS + col]);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            acc[r][0] = fmaf(wa[r][m], s.x, acc[r][0]);
            acc[r][1] = fmaf(wa[r][m], s.y, acc[r][1]);
            acc[r][2] = fmaf(wa[r][m], s.z, acc[r][2]);
            acc[r][3] = fmaf(wa[r][m], s.w, acc[r][3]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = lane + 32 * r;
        const float4 u = *reinterpret_cast<const float4*>(&w[Ws<K, V>::U + i * V + v0 + col]);
        *reinterpret_cast<float4*>(&Vn[i * LDS + col]) =
            make_float4(u.x - acc[r][0], u.y - acc[r][1], u.z - acc[r][2], u.w - acc[r][3]);
      }
    }
    __syncthreads();
    load_rows<K, Cfg::RB>(Op, LDK, q + kh * qs1, qs0, cd.t0, cd.len, l2norm, Cfg::NT / 32);
    __syncthreads();

    // Phase b: o = scale (exp(G_i) q_i S + sum_{j <= i} P_ij Vn_j).
    {
      float qs[2][4] = {}, pv[2][4] = {};
      for (int d = 0; d < K; d += 4) {
        const float4 q0 = *reinterpret_cast<const float4*>(&Op[lane * LDK + d]);
        const float4 q1 = *reinterpret_cast<const float4*>(&Op[(lane + 32) * LDK + d]);
        const float qa[2][4] = {{q0.x, q0.y, q0.z, q0.w}, {q1.x, q1.y, q1.z, q1.w}};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 s = *reinterpret_cast<const float4*>(&Ss[(d + m) * LDS + col]);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            qs[r][0] = fmaf(qa[r][m], s.x, qs[r][0]);
            qs[r][1] = fmaf(qa[r][m], s.y, qs[r][1]);
            qs[r][2] = fmaf(qa[r][m], s.z, qs[r][2]);
            qs[r][3] = fmaf(qa[r][m], s.w, qs[r][3]);
          }
        }
      }
      // P is zero above the diagonal: row lane (< 32) needs j < 32, row lane + 32 all j. The
      // terms dropped against v2 were exact zeros (P_ij = 0 for j > i).
      for (int j = 0; j < 32; j += 4) {
        const float4 p0 = *reinterpret_cast<const float4*>(&Pm[lane * LDP + j]);
        const float4 p1 = *reinterpret_cast<const float4*>(&Pm[(lane + 32) * LDP + j]);
        const float pa[2][4] = {{p0.x, p0.y, p0.z, p0.w}, {p1.x, p1.y, p1.z, p1.w}};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 x = *reinterpret_cast<const float4*>(&Vn[(j + m) * LDS + col]);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            pv[r][0] = fmaf(pa[r][m], x.x, pv[r][0]);
            pv[r][1] = fmaf(pa[r][m], x.y, pv[r][1]);
            pv[r][2] = fmaf(pa[r][m], x.z, pv[r][2]);
            pv[r][3] = fmaf(pa[r][m], x.w, pv[r][3]);
          }
        }
      }
      for (int j = 32; j < C; j += 4) {
        const float4 p1 = *reinterpret_cast<const float4*>(&Pm[(lane + 32) * LDP + j]);
        const float pa[4] = {p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 x = *reinterpret_cast<const float4*>(&Vn[(j + m) * LDS + col]);
          pv[1][0] = fmaf(pa[m], x.x, pv[1][0]);
          pv[1][1] = fmaf(pa[m], x.y, pv[1][1]);
          pv[1][2] = fmaf(pa[m], x.z, pv[1][2]);
          pv[1][3] = fmaf(pa[m], x.w, pv[1][3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = lane + 32 * r;
        if (i < cd.len) {
          const float eg = Eg[i];
          OT* orow = o + (cd.t0 + i) * os0 + h * os1 + v0 + col;
#pragma unroll
          for (int c = 0; c < 4; ++c) orow[c] = from_f32<OT>(scale * fmaf(eg, qs[r][c], pv[r][c]));
        }
      }
    }
    __syncthreads();
    // Kd = diag(exp(G_C - G)) K, with K normalized exactly as in the chunk kernel; the row
    // factor is applied in the loader (same two fp32 multiplies as a separate pass, no extra
    // smem pass or barrier).
    load_rows<K, Cfg::RB>(Op, LDK, k + kh * ks1, ks0, cd.t0, cd.len, l2norm, Cfg::NT / 32, Ed);
    __syncthreads();
    const float GC = Gs[C - 1];

    // Phase c: S' = exp(G_C) S + Kd^T Vn on this thread's RK x 4 block (rows lane + 32 r):
    // Kd reads are 32 consecutive floats per warp, Vn reads warp-uniform.
    {
      const float eC = expf(GC);
#pragma unroll
      for (int r = 0; r < RK; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) st[r][c] *= eC;
      for (int i = 0; i < cd.len; ++i) {
        float kd[RK];
#pragma unroll
        for (int r = 0; r < RK; ++r) kd[r] = Op[i * LDK + lane + 32 * r];
        const float4 x = *reinterpret_cast<const float4*>(&Vn[i * LDS + col]);
#pragma unroll
        for (int r = 0; r < RK; ++r) {
          st[r][0] = fmaf(kd[r], x.x, st[r][0]);
          st[r][1] = fmaf(kd[r], x.y, st[r][1]);
          st[r][2] = fmaf(kd[r], x.z, st[r][2]);
          st[r][3] = fmaf(kd[r], x.w, st[r][3]);
        }
      }
#pragma unroll
      for (int r = 0; r < RK; ++r)
        *reinterpret_cast<float4*>(&Ss[(lane + 32 * r) * LDS + col]) =
            make_float4(st[r][0], st[r][1], st[r][2], st[r][3]);
    }
    __syncthreads();
  }

  if (hT) {
#pragma unroll
    for (int r = 0; r < RK; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * r, vc = v0 + col + c;
        hT[sbase + (vk ? std::int64_t(vc) * K + d : std::int64_t(d) * V + vc)] = st[r][c];
      }
  }
}

// ---------------------------------------------------------------------------------------------
// v4 state kernel (GDN_WYFP32_VARIANT=v4). Same thread mapping, per-element operation order and
// results as wy_state_kernel (v3): o and hT are bitwise v3's. What changes is how operands reach
// shared memory. The v3 profile (ncu, T = 8192) had 43% of instructions outside FFMA, a large
// part of them the per-slice q/k loaders (scalar bf16 loads, conversion, l2 norm, repeated by
// every one of the V / 16 slice blocks), and 22% of stall samples on long scoreboards: every
// global load (W + P, q, k, U) sat between two barriers on the sequential path of every chunk.
// v4 reads only the workspace (the chunk kernel now also writes the normalized Q and Kd) and
// streams it with cp.async in six half-tiles per chunk through two 17 KiB buffers: while the
// block computes on one half-tile the next is in flight. One barrier per half-tile (six per
// chunk, as v3).
//   step  buffer  tile                                  compute
//   s0    B0      W[:, 0:K/2]  (+ U slice, P: earlier)   Vn acc over d < K/2
//   s1    B1      W[:, K/2:K]                            Vn acc over d >= K/2; Vn = U - acc
//   s2    B0      Q[:, 0:K/2]                            Q S over d < K/2
//   s3    B1      Q[:, K/2:K]                            Q S over d >= K/2; P Vn; o
//   s4    B0      Kd[0:32, :]                            S' = exp(G_C) S + rows i < 32
//   s5    B1      Kd[32:64, :] (+ next chunk's P)        S' += rows i >= 32; S -> smem
// At step s (after the barrier) the tile of step s + 1 is issued (of the next chunk at s5:
// W[:, 0:K/2] + U slice), so each wait covers one group only (cp.async.wait_group 0).
template <int K_, int V_>
struct State4Cfg {
  static constexpr int K = K_, V = V_;
  static constexpr int C = kC;
  static constexpr int VS = 16, CG = VS / 4, NT = 128, RK = K / 32;
  static constexpr int KH = K / 2;       // column half of W and Q
  static constexpr int LDH = KH + 4;     // 17 float4 (K = 128) / 9 (K = 64): odd, conflict-free rows
  static constexpr int LDK = K + 4;      // Kd half rows
  static constexpr int LDP = C + 4;
  static constexpr int LDS = VS + 4;     // S, Vn, U slice
  static constexpr int BUF = (C * LDH > (C / 2) * LDK) ? C * LDH : (C / 2) * LDK;
  // smem: S 128 x 20 + Vn 64 x 20 + U 64 x 20 + P 64 x 68 + 2 x 4352 floats = 72.7 KiB at
  // K = 128: three blocks per SM, as v3.
  static constexpr int smem_floats = K * LDS + 2 * C * LDS + C * LDP + 2 * BUF;
  static constexpr std::size_t smem_bytes = sizeof(float) * smem_floats;
  static_assert(CG == NT / 32 && C == 64 && K % 32 == 0 && V % VS == 0, "v3 mapping");
  static_assert((C * KH / 4) % NT == 0 && ((C / 2) * K / 4) % NT == 0 && (C * C / 4) % NT == 0 &&
                    (C * VS / 4) % NT == 0,
                "cp.async tiles: whole rounds");
  static_assert(LDH % 4 == 0 && LDK % 4 == 0 && LDP % 4 == 0 && LDS % 4 == 0 && BUF % 4 == 0,
                "16-B aligned smem rows");
};

// cp.async needs sm_80; an older target (not in the default gencode) copies synchronously, which
// the barrier after every wait makes equally visible.
__device__ __forceinline__ void cp16(float* smem, const float* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#else
  *reinterpret_cast<float4*>(smem) = *reinterpret_cast<const float4*>(gmem);
#endif
}
__device__ __forceinline__ void cp_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// Columns [h K/2, (h + 1) K/2) of a [C][K] workspace matrix into dst[C][LDH].
template <class Cfg>
__device__ __forceinline__ void issue_colhalf(float* dst, const float* src, int h) {
  constexpr int Q4 = Cfg::KH / 4;
#pragma unroll 1
  for (int it = 0; it < Cfg::C * Q4 / Cfg::NT; ++it) {
    const int e = threadIdx.x + it * Cfg::NT, i = e / Q4, d = 4 * (e % Q4);
    cp16(&dst[i * Cfg::LDH + d], &src[i * Cfg::K + h * Cfg::KH + d]);
  }
}
// Rows [32 h, 32 h + 32) of a [C][K] workspace matrix into dst[32][LDK].
template <class Cfg>
__device__ __forceinline__ void issue_rowhalf(float* dst, const float* src, int h) {
  constexpr int Q4 = Cfg::K / 4;
#pragma unroll 1
  for (int it = 0; it < (Cfg::C / 2) * Q4 / Cfg::NT; ++it) {
    const int e = threadIdx.x + it * Cfg::NT, i = e / Q4, d = 4 * (e % Q4);
    cp16(&dst[i * Cfg::LDK + d], &src[(32 * h + i) * Cfg::K + d]);
  }
}
template <class Cfg>
__device__ __forceinline__ void issue_p(float* Pm, const float* src) {
  constexpr int Q4 = Cfg::C / 4;
#pragma unroll 1
  for (int it = 0; it < Cfg::C * Q4 / Cfg::NT; ++it) {
    const int e = threadIdx.x + it * Cfg::NT, i = e / Q4, j = 4 * (e % Q4);
    cp16(&Pm[i * Cfg::LDP + j], &src[i * Cfg::C + j]);
  }
}
template <class Cfg>
__device__ __forceinline__ void issue_u(float* Us, const float* src, int v0) {
  constexpr int Q4 = Cfg::VS / 4;
#pragma unroll 1
  for (int it = 0; it < Cfg::C * Q4 / Cfg::NT; ++it) {
    const int e = threadIdx.x + it * Cfg::NT, i = e / Q4, c = 4 * (e % Q4);
    cp16(&Us[i * Cfg::LDS + c], &src[i * Cfg::V + v0 + c]);
  }
}

// acc[r][c] += sum_{d in half} A[lane + 32 r][d] S[d][col + c], d in increasing order (v3's
// phases a and b restricted to one column half; A is a [C][LDH] half tile).
template <class Cfg, int UNROLL>
__device__ __forceinline__ void rows_times_s(float (&acc)[2][4], const float* A, const float* Ss,
                                             int lane, int col, int h) {
  constexpr int LDH = Cfg::LDH, LDS = Cfg::LDS;
  const float* S0 = Ss + h * Cfg::KH * LDS;
  auto step = [&](int d) {
    const float4 a0 = *reinterpret_cast<const float4*>(&A[lane * LDH + d]);
    const float4 a1 = *reinterpret_cast<const float4*>(&A[(lane + 32) * LDH + d]);
    const float aa[2][4] = {{a0.x, a0.y, a0.z, a0.w}, {a1.x, a1.y, a1.z, a1.w}};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const float4 s = *reinterpret_cast<const float4*>(&S0[(d + m) * LDS + col]);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        acc[r][0] = fmaf(aa[r][m], s.x, acc[r][0]);
        acc[r][1] = fmaf(aa[r][m], s.y, acc[r][1]);
        acc[r][2] = fmaf(aa[r][m], s.z, acc[r][2]);
        acc[r][3] = fmaf(aa[r][m], s.w, acc[r][3]);
      }
    }
  };
  if constexpr (UNROLL == 2) {
#pragma unroll 2
    for (int d = 0; d < Cfg::KH; d += 4) step(d);
  } else {
    for (int d = 0; d < Cfg::KH; d += 4) step(d);  // v4: the compiler's choice
  }
}

// Kd values of one row for this thread's RK state rows: lane + 32 r (v4, scalar loads of 32
// consecutive floats per warp) or RK lane + r (v5, one vector load).
template <bool V5, int RK>
__device__ __forceinline__ void load_kd(float (&kd)[RK], const float* row, int lane) {
  if constexpr (V5 && RK == 4) {
    const float4 x = *reinterpret_cast<const float4*>(&row[4 * lane]);
    kd[0] = x.x, kd[1] = x.y, kd[2] = x.z, kd[3] = x.w;
  } else if constexpr (V5 && RK == 2) {
    const float2 x = *reinterpret_cast<const float2*>(&row[2 * lane]);
    kd[0] = x.x, kd[1] = x.y;
  } else {
#pragma unroll
    for (int r = 0; r < RK; ++r) kd[r] = row[lane + 32 * r];
  }
}

// V5 (GDN_WYFP32_VARIANT=v5): v4 with the thread's state rows RK lane + r (RK consecutive rows,
// was lane + 32 r), so phase c reads its Kd values as one LDS.128 (K = 128; LDS.64 at K = 64) per
// row i instead of RK scalar loads (5 -> 2 shared loads per 16 FFMA), and the W S / Q S loops
// unrolled by 2 (loads of the next d step issued before this step's FMAs). Same per-element
// operation order: o and hT still v3's value for value.
template <typename OT, int K, int V, bool V5>
__global__ void __launch_bounds__(State4Cfg<K, V>::NT, 3)
    wy_state_kernel_v4(const ChunkTab tab,
                       const float* __restrict__ ws,  // [NC, HV, Ws<K, V, true>::size]
                       OT* __restrict__ o, std::int64_t os0, std::int64_t os1,  // [T, HV, V]
                       const float* h0,  // [N, HV, K, V] or [N, HV, V, K]; may alias hT
                       float* hT,        // same shape; may be null
                       int HV, int vk, float scale) {
  using Cfg = State4Cfg<K, V>;
  using WS = Ws<K, V, true>;
  constexpr int C = Cfg::C, VS = Cfg::VS, LDK = Cfg::LDK, LDP = Cfg::LDP, LDS = Cfg::LDS,
                RK = Cfg::RK;
  extern __shared__ float4 smem4[];
  float* Ss = reinterpret_cast<float*>(smem4);  // [K][LDS] state slice
  float* Vn = Ss + K * LDS;                     // [C][LDS]
  float* Us = Vn + C * LDS;                     // [C][LDS] U slice
  float* Pm = Us + C * LDS;                     // [C][LDP]
  float* B0 = Pm + C * LDP;                     // half tiles (see the table above)
  float* B1 = B0 + Cfg::BUF;

  const int v0 = blockIdx.x * VS, h = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int col = 4 * warp;
  const std::int64_t sbase = (static_cast<std::int64_t>(n) * HV + h) * K * V;
  // State row of this thread's r-th row (r < RK).
  auto srow = [&](int r) { return V5 ? RK * lane + r : lane + 32 * r; };
  const int c_begin = tab.first[n], c_end = tab.first[n + 1];
  auto wsp = [&](int ci) { return ws + (static_cast<std::int64_t>(ci) * HV + h) * WS::size; };

  // First chunk's W[:, 0:K/2], U slice and P in flight while the state slice is read.
  if (c_begin < c_end) {
    const float* w = wsp(c_begin);
    issue_colhalf<Cfg>(B0, w + WS::W, 0);
    issue_u<Cfg>(Us, w + WS::U, v0);
    issue_p<Cfg>(Pm, w + WS::P);
  }
  cp_commit();

  float st[RK][4];
#pragma unroll
  for (int r = 0; r < RK; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = srow(r), vc = v0 + col + c;
      st[r][c] = h0 ? h0[sbase + (vk ? std::int64_t(vc) * K + d : std::int64_t(d) * V + vc)] : 0.f;
      Ss[d * LDS + col + c] = st[r][c];
    }

  for (int ci = c_begin; ci < c_end; ++ci) {
    const float* w = wsp(ci);
    const bool more = ci + 1 < c_end;
    const int t0 = tab.tok0[ci], len = tab.len[ci];
    // exp(G_i) for rows lane, lane + 32 and G_C, as v3 forms them (needed from s3 on).
    const float g0 = w[WS::G + lane], g1 = w[WS::G + lane + 32], GC = w[WS::G + C - 1];
    float acc[2][4] = {};

    // s0: W[:, 0:K/2] (B0).
    cp_wait_all();
    __syncthreads();
    issue_colhalf<Cfg>(B1, w + WS::W, 1);
    cp_commit();
    rows_times_s<Cfg, V5 ? 2 : 1>(acc, B0, Ss, lane, col, 0);

    // s1: W[:, K/2:K] (B1); Vn = U - W S.
    cp_wait_all();
    __syncthreads();
    issue_colhalf<Cfg>(B0, w + WS::Q, 0);
    cp_commit();
    rows_times_s<Cfg, V5 ? 2 : 1>(acc, B1, Ss, lane, col, 1);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = lane + 32 * r;
      const float4 u = *reinterpret_cast<const float4*>(&Us[i * LDS + col]);
      *reinterpret_cast<float4*>(&Vn[i * LDS + col]) =
          make_float4(u.x - acc[r][0], u.y - acc[r][1], u.z - acc[r][2], u.w - acc[r][3]);
    }

    // s2: Q[:, 0:K/2] (B0).
    float qs[2][4] = {};
    cp_wait_all();
    __syncthreads();
    issue_colhalf<Cfg>(B1, w + WS::Q, 1);
    cp_commit();
    rows_times_s<Cfg, V5 ? 2 : 1>(qs, B0, Ss, lane, col, 0);

    // s3: Q[:, K/2:K] (B1); o = scale (exp(G_i) q_i S + sum_{j <= i} P_ij Vn_j).
    cp_wait_all();
    __syncthreads();
    issue_rowhalf<Cfg>(B0, w + WS::Kd, 0);
    cp_commit();
    rows_times_s<Cfg, V5 ? 2 : 1>(qs, B1, Ss, lane, col, 1);
    {
      float pv[2][4] = {};
      for (int j = 0; j < 32; j += 4) {
        const float4 p0 = *reinterpret_cast<const float4*>(&Pm[lane * LDP + j]);
        const float4 p1 = *reinterpret_cast<const float4*>(&Pm[(lane + 32) * LDP + j]);
        const float pa[2][4] = {{p0.x, p0.y, p0.z, p0.w}, {p1.x, p1.y, p1.z, p1.w}};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 x = *reinterpret_cast<const float4*>(&Vn[(j + m) * LDS + col]);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            pv[r][0] = fmaf(pa[r][m], x.x, pv[r][0]);
            pv[r][1] = fmaf(pa[r][m], x.y, pv[r][1]);
            pv[r][2] = fmaf(pa[r][m], x.z, pv[r][2]);
            pv[r][3] = fmaf(pa[r][m], x.w, pv[r][3]);
          }
        }
      }
      for (int j = 32; j < C; j += 4) {
        const float4 p1 = *reinterpret_cast<const float4*>(&Pm[(lane + 32) * LDP + j]);
        const float pa[4] = {p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 x = *reinterpret_cast<const float4*>(&Vn[(j + m) * LDS + col]);
          pv[1][0] = fmaf(pa[m], x.x, pv[1][0]);
          pv[1][1] = fmaf(pa[m], x.y, pv[1][1]);
          pv[1][2] = fmaf(pa[m], x.z, pv[1][2]);
          pv[1][3] = fmaf(pa[m], x.w, pv[1][3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = lane + 32 * r;
        if (i < len) {
          const float eg = expf(r ? g1 : g0);
          OT* orow = o + (t0 + i) * os0 + h * os1 + v0 + col;
#pragma unroll
          for (int c = 0; c < 4; ++c) orow[c] = from_f32<OT>(scale * fmaf(eg, qs[r][c], pv[r][c]));
        }
      }
    }

    // s4: Kd rows 0..31 (B0); S' = exp(G_C) S + Kd^T Vn over rows i < 32.
    cp_wait_all();
    __syncthreads();  // also: every warp is done with P (next P may land)
    issue_rowhalf<Cfg>(B1, w + WS::Kd, 1);
    if (more) issue_p<Cfg>(Pm, wsp(ci + 1) + WS::P);
    cp_commit();
    {
      const float eC = expf(GC);
#pragma unroll
      for (int r = 0; r < RK; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) st[r][c] *= eC;
      const int n0 = len < 32 ? len : 32;
      for (int i = 0; i < n0; ++i) {
        float kd[RK];
        load_kd<V5, RK>(kd, B0 + i * LDK, lane);
        const float4 x = *reinterpret_cast<const float4*>(&Vn[i * LDS + col]);
#pragma unroll
        for (int r = 0; r < RK; ++r) {
          st[r][0] = fmaf(kd[r], x.x, st[r][0]);
          st[r][1] = fmaf(kd[r], x.y, st[r][1]);
          st[r][2] = fmaf(kd[r], x.z, st[r][2]);
          st[r][3] = fmaf(kd[r], x.w, st[r][3]);
        }
      }
    }

    // s5: Kd rows 32..63 (B1); S' += rows i >= 32; S' -> smem.
    cp_wait_all();
    __syncthreads();  // also: every warp is done with U (next U may land)
    if (more) {
      const float* wn = wsp(ci + 1);
      issue_colhalf<Cfg>(B0, wn + WS::W, 0);
      issue_u<Cfg>(Us, wn + WS::U, v0);
    }
    cp_commit();
    for (int i = 32; i < len; ++i) {
      float kd[RK];
      load_kd<V5, RK>(kd, B1 + (i - 32) * LDK, lane);
      const float4 x = *reinterpret_cast<const float4*>(&Vn[i * LDS + col]);
#pragma unroll
      for (int r = 0; r < RK; ++r) {
        st[r][0] = fmaf(kd[r], x.x, st[r][0]);
        st[r][1] = fmaf(kd[r], x.y, st[r][1]);
        st[r][2] = fmaf(kd[r], x.z, st[r][2]);
        st[r][3] = fmaf(kd[r], x.w, st[r][3]);
      }
    }
    // The next chunk's s0 barrier orders these stores before its reads of S (and this
    // chunk's s4/s5 barriers order them after the Q S / W S reads).
#pragma unroll
    for (int r = 0; r < RK; ++r)
      *reinterpret_cast<float4*>(&Ss[srow(r) * LDS + col]) =
          make_float4(st[r][0], st[r][1], st[r][2], st[r][3]);
  }
  cp_wait_all();  // no copy may outlive the block (none is pending here: the last issue is guarded)

  if (hT) {
#pragma unroll
    for (int r = 0; r < RK; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = srow(r), vc = v0 + col + c;
        hT[sbase + (vk ? std::int64_t(vc) * K + d : std::int64_t(d) * V + vc)] = st[r][c];
      }
  }
}

// State pass v6 (defined inside this namespace; uses the helpers above).
#include "cuda/wy/wy_fp32_state6.cuh"  // NOLINT(build/include)

// GDN_WYFP32_VARIANT = v3 | v4 | v5 | v6 selects the state pass (unset or unknown: v6). Read per
// call, so tests can switch variants by setting the variable between calls.
// v4 was measured faster than v3 with outputs equal value for value (H200, 288b22a, T = 32768:
// v3 13.86 ms, v4 12.92, v5 13.06; bench/results/2026-12-03-h200-r4-288b22a.*). v6 (wider
// register tiles, wy_fp32_state6.cuh; another fixed summation order in W S and Q S) is the
// default since r16 (cf0bb37, T = 32768: v4 12.89 ms, v6 11.12, with the grouped chunk kernel
// 11.26 and 9.51; bench/results/2026-12-03-h200-r16-cf0bb37.*).
int wy_fp32_variant() {
  const char* e = std::getenv("GDN_WYFP32_VARIANT");
  if (e && std::string(e) == "v3") return 3;
  if (e && std::string(e) == "v5") return 5;
  if (e && std::string(e) == "v4") return 4;
  return 6;
}

template <typename E, typename OT, typename B, int K, int V>
Status launch(const Problem& p, const PrefillArgs& a, const detail::Seqs& s,
              std::uint64_t* size_only) {
  using CC = ChunkCfg<K, V>;
  using SC = StateCfg<K, V>;
  using SC4 = State4Cfg<K, V>;
  const int variant = wy_fp32_variant();
  const bool v4 = variant >= 4;  // v4, v5 and v6 share the chunk kernel and the workspace layout
  cudaStream_t stream = stream_of(a);
  // Chunk table built on the device from cu_seqlens (by value or the caller's device copy):
  // no pageable upload, so the call is legal under stream capture. Sequences never share a
  // chunk; the last chunk of a sequence may be partial. NC is exact here (host offsets known);
  // the chunk kernel also tolerates an upper-bound grid.
  const Offsets off = offsets_of(a, s);
  const ChunkTablePlan plan = plan_chunk_table(off, kC);
  const std::int64_t NC = plan.nc;

  const std::size_t tab_bytes = plan.bytes;
  const std::size_t ws_bytes =
      sizeof(float) * NC * p.HV * (v4 ? Ws<K, V, true>::size : Ws<K, V>::size);
  if (size_only) {  // the workspace query (detail::cuda_wy_fp32_prefill)
    *size_only = tab_bytes + ws_bytes;
    return Status::Ok();
  }
  Scratch scratch(stream, a.workspace, a.workspace_bytes);
  Status st = scratch.alloc(tab_bytes + ws_bytes);
  if (!st.ok()) return st;
  ChunkTable table;
  st = build_chunk_table(plan, off, scratch.as<void>(0), stream, &table);
  if (!st.ok()) return st;
  const ChunkTab tab{table.tok0, table.len, table.first, s.N};
  float* ws = scratch.as<float>(tab_bytes);

  const E* q = static_cast<const E*>(a.q.data);
  const E* k = static_cast<const E*>(a.k.data);
  const int grouped = p.head_map == HeadMap::grouped, l2 = p.qk_l2norm;
  // Grouped chunk kernel (v4/v5/v6 workspace only): cp.async of v rows needs 16-B aligned rows,
  // else v1 runs (same workspace either way).
  const bool v_vec = reinterpret_cast<std::uintptr_t>(a.v.data) % 16 == 0 &&
                     (a.v.stride[0] * static_cast<std::int64_t>(sizeof(E))) % 16 == 0 &&
                     (a.v.stride[1] * static_cast<std::int64_t>(sizeof(E))) % 16 == 0;
  if (NC > 0 && v4 && v_vec && wy_fp32_chunk_variant() == 1) {
    using GC = GroupCfg<E, B, K, V>;
    auto kern = wy_chunk_grouped_kernel<E, B, K, V>;
    const int nsub = (p.HV / p.HK + GC::GMAX - 1) / GC::GMAX;  // parts per key head
    GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(GC::smem_bytes)));
    kern<<<dim3(static_cast<unsigned>(NC), p.HK * nsub), GC::NT, GC::smem_bytes, stream>>>(
        tab, q, a.q.stride[0], a.q.stride[1], k, a.k.stride[0], a.k.stride[1],
        static_cast<const E*>(a.v.data), a.v.stride[0], a.v.stride[1],
        static_cast<const float*>(a.g.data), a.g.stride[0], static_cast<const B*>(a.beta.data),
        a.beta.stride[0], p.HV, p.HK, grouped, l2, ws);
    GDN_CUDA_LAUNCH_CHECK("wy_chunk_grouped_kernel");
  } else if (NC > 0) {
    auto kern = v4 ? wy_chunk_kernel<E, B, K, V, true> : wy_chunk_kernel<E, B, K, V, false>;
    GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(CC::smem_bytes)));
    kern<<<dim3(static_cast<unsigned>(NC), p.HV), CC::NT, CC::smem_bytes, stream>>>(
        tab, q, a.q.stride[0], a.q.stride[1], k, a.k.stride[0], a.k.stride[1],
        static_cast<const E*>(a.v.data), a.v.stride[0], a.v.stride[1],
        static_cast<const float*>(a.g.data), a.g.stride[0], static_cast<const B*>(a.beta.data),
        a.beta.stride[0], p.HV, p.HK, grouped, l2, ws);
    GDN_CUDA_LAUNCH_CHECK("wy_chunk_kernel");
  }
  if (variant == 6) {
    using SC6 = State6Cfg<K, V>;
    auto kern6 = wy_state_kernel_v6<OT, K, V>;
    GDN_CUDA_TRY(cudaFuncSetAttribute(kern6, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(SC6::smem_bytes)));
    // 16-B output stores where the base and both strides keep every row segment aligned.
    const int o_vec = reinterpret_cast<std::uintptr_t>(a.o.data) % 16 == 0 &&
                      (a.o.stride[0] * static_cast<std::int64_t>(sizeof(OT))) % 16 == 0 &&
                      (a.o.stride[1] * static_cast<std::int64_t>(sizeof(OT))) % 16 == 0;
    kern6<<<dim3(V / SC6::VS, p.HV, s.N), SC6::NT, SC6::smem_bytes, stream>>>(
        tab, ws, static_cast<OT*>(a.o.data), a.o.stride[0], a.o.stride[1],
        a.h0.defined() ? static_cast<const float*>(a.h0.data) : nullptr,
        a.hT.defined() ? static_cast<float*>(a.hT.data) : nullptr, p.HV,
        p.state_layout == StateLayout::vk, p.scale, o_vec);
    GDN_CUDA_LAUNCH_CHECK("wy_state_kernel_v6");
    return Status::Ok();
  }
  if (v4) {
    auto kern4 = variant == 5 ? wy_state_kernel_v4<OT, K, V, true>
                              : wy_state_kernel_v4<OT, K, V, false>;
    GDN_CUDA_TRY(cudaFuncSetAttribute(kern4, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(SC4::smem_bytes)));
    kern4<<<dim3(V / SC4::VS, p.HV, s.N), SC4::NT, SC4::smem_bytes, stream>>>(
        tab, ws, static_cast<OT*>(a.o.data), a.o.stride[0], a.o.stride[1],
        a.h0.defined() ? static_cast<const float*>(a.h0.data) : nullptr,
        a.hT.defined() ? static_cast<float*>(a.hT.data) : nullptr, p.HV,
        p.state_layout == StateLayout::vk, p.scale);
    GDN_CUDA_LAUNCH_CHECK("wy_state_kernel_v4");
    return Status::Ok();
  }
  auto kern2 = wy_state_kernel<E, OT, K, V>;
  GDN_CUDA_TRY(cudaFuncSetAttribute(kern2, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(SC::smem_bytes)));
  kern2<<<dim3(V / SC::VS, p.HV, s.N), SC::NT, SC::smem_bytes, stream>>>(
      tab, ws, q, a.q.stride[0], a.q.stride[1], k, a.k.stride[0], a.k.stride[1],
      static_cast<OT*>(a.o.data), a.o.stride[0], a.o.stride[1],
      a.h0.defined() ? static_cast<const float*>(a.h0.data) : nullptr,
      a.hT.defined() ? static_cast<float*>(a.hT.data) : nullptr, p.HV, p.HK, grouped, l2,
      p.state_layout == StateLayout::vk, p.scale);
  GDN_CUDA_LAUNCH_CHECK("wy_state_kernel");
  return Status::Ok();
}

template <typename E, typename OT, typename B>
Status dispatch_kv(const Problem& p, const PrefillArgs& a, const detail::Seqs& s,
                   std::uint64_t* size_only) {
  if (p.K == 128 && p.V == 128) return launch<E, OT, B, 128, 128>(p, a, s, size_only);
  if (p.K == 128 && p.V == 64) return launch<E, OT, B, 128, 64>(p, a, s, size_only);
  if (p.K == 64 && p.V == 128) return launch<E, OT, B, 64, 128>(p, a, s, size_only);
  return launch<E, OT, B, 64, 64>(p, a, s, size_only);
}

}  // namespace
}  // namespace gdn::cuda

namespace gdn::detail {

bool cuda_wy_fp32_supports(const Problem& p, std::string* why) {
  const bool ok = (p.K == 64 || p.K == 128) && (p.V == 64 || p.V == 128);
  if (!ok && why)
    *why = "wy-fp32 supports K, V in {64, 128}, got K=" + std::to_string(p.K) +
           ", V=" + std::to_string(p.V);
  return ok;
}

Status cuda_wy_fp32_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s,
                            std::uint64_t* size_only) {
  using namespace gdn::cuda;
  std::string why;
  if (!cuda_wy_fp32_supports(p, &why)) return Status::Unsupported(why);
  return dispatch_dtype(a.q.dtype, [&](auto tag) -> Status {
    using E = decltype(tag);
    const bool out_f32 = a.o.dtype == DType::f32;
    const bool beta_bf16 = a.beta.dtype == DType::bf16;
    if (out_f32)
      return beta_bf16 ? dispatch_kv<E, float, __nv_bfloat16>(p, a, s, size_only)
                       : dispatch_kv<E, float, float>(p, a, s, size_only);
    return beta_bf16 ? dispatch_kv<E, E, __nv_bfloat16>(p, a, s, size_only)
                     : dispatch_kv<E, E, float>(p, a, s, size_only);
  });
}

}  // namespace gdn::detail
