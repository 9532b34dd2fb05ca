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

// Per chunk-head workspace offsets (floats).
template <int K, int V>
struct Ws {
  static constexpr std::int64_t W = 0, U = kC * K, P = U + kC * V, G = P + kC * kC;
  static constexpr std::int64_t size = G + kC;
};

template <typename E, typename B, int K, int V>
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
  float* out = ws + (static_cast<std::int64_t>(ci) * HV + h) * Ws<K, V>::size;

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
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int i = ti + 16 * a, j = tj + 16 * b;
        // Gam is formed only for i >= j, where the exponent is <= 0 (mask before the exp).
        const float gam = i >= j ? expf(Gs[i] - Gs[j]) : 0.f;
        As[i * LDA + j] = i > j ? Bs[i] * gam * kk[a][b] : 0.f;
        out[Ws<K, V>::P + i * C + j] = i >= j ? gam * qk[a][b] : 0.f;
      }
  }
  __syncthreads();
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
  if (tid < C) out[Ws<K, V>::G + tid] = Gs[tid];
  __syncthreads();

  // Forward substitution, one column of [W | U] per thread, the column held in registers:
  // X_i = R_i - sum_{j<i} A_ij X_j (four partial sums for latency, fixed order).
  if (tid < K + V) {
    const float* rhs = tid < K ? &Ks[tid] : &Qs[tid - K];
    float* dst = tid < K ? out + Ws<K, V>::W + tid : out + Ws<K, V>::U + (tid - K);
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

template <typename E, typename OT, typename B, int K, int V>
Status launch(const Problem& p, const PrefillArgs& a, const detail::Seqs& s) {
  using CC = ChunkCfg<K, V>;
  using SC = StateCfg<K, V>;
  cudaStream_t stream = stream_of(a);
  // Chunk table built on the device from cu_seqlens (by value or the caller's device copy):
  // no pageable upload, so the call is legal under stream capture. Sequences never share a
  // chunk; the last chunk of a sequence may be partial. NC is exact here (host offsets known);
  // the chunk kernel also tolerates an upper-bound grid.
  const Offsets off = offsets_of(a, s);
  const ChunkTablePlan plan = plan_chunk_table(off, kC);
  const std::int64_t NC = plan.nc;

  const std::size_t tab_bytes = plan.bytes;
  const std::size_t ws_bytes = sizeof(float) * NC * p.HV * Ws<K, V>::size;
  Scratch scratch(stream);
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
  if (NC > 0) {
    auto kern = wy_chunk_kernel<E, B, K, V>;
    GDN_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(CC::smem_bytes)));
    kern<<<dim3(static_cast<unsigned>(NC), p.HV), CC::NT, CC::smem_bytes, stream>>>(
        tab, q, a.q.stride[0], a.q.stride[1], k, a.k.stride[0], a.k.stride[1],
        static_cast<const E*>(a.v.data), a.v.stride[0], a.v.stride[1],
        static_cast<const float*>(a.g.data), a.g.stride[0], static_cast<const B*>(a.beta.data),
        a.beta.stride[0], p.HV, p.HK, grouped, l2, ws);
    GDN_CUDA_LAUNCH_CHECK("wy_chunk_kernel");
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
Status dispatch_kv(const Problem& p, const PrefillArgs& a, const detail::Seqs& s) {
  if (p.K == 128 && p.V == 128) return launch<E, OT, B, 128, 128>(p, a, s);
  if (p.K == 128 && p.V == 64) return launch<E, OT, B, 128, 64>(p, a, s);
  if (p.K == 64 && p.V == 128) return launch<E, OT, B, 64, 128>(p, a, s);
  return launch<E, OT, B, 64, 64>(p, a, s);
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

Status cuda_wy_fp32_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s) {
  using namespace gdn::cuda;
  std::string why;
  if (!cuda_wy_fp32_supports(p, &why)) return Status::Unsupported(why);
  return dispatch_dtype(a.q.dtype, [&](auto tag) -> Status {
    using E = decltype(tag);
    const bool out_f32 = a.o.dtype == DType::f32;
    const bool beta_bf16 = a.beta.dtype == DType::bf16;
    if (out_f32)
      return beta_bf16 ? dispatch_kv<E, float, __nv_bfloat16>(p, a, s)
                       : dispatch_kv<E, float, float>(p, a, s);
    return beta_bf16 ? dispatch_kv<E, E, __nv_bfloat16>(p, a, s) : dispatch_kv<E, E, float>(p, a, s);
  });
}

}  // namespace gdn::detail
