// wy-fp32 state pass v6 (GDN_WYFP32_VARIANT=v6). Included by wy_fp32.cu after the v4 kernel: it
// uses that file's workspace layout (Ws<K, V, true>), chunk table and cp.async helpers.
//
// Why (H200 profile of v4, r12): the v4 pass is bound by the shared-memory return path, not by
// the FMA pipe (L1 77%, FMA 32%). An SM returns one 32-lane register per cycle from shared
// memory; an LDS.128 whose lanes read distinct rows costs 4 such cycles, a warp-uniform LDS.128
// (the S and Vn reads) 2. v4's thread tile is 2 rows x 4 columns, so each 4-d step of W S costs
// 2 x 4 + 4 x 2 = 16 cycles for 32 FFMA (0.5 cycles per FFMA against the FMA pipe's 0.25).
//
// v6 raises the tile to 4 rows x 8 columns: a thread accumulates rows lane and lane + 32 of W
// and of Q ([W; Q] S in one pass over S, read once for both) over 8 columns, and the two warps
// of a column group split the d range (each takes one half of every d quarter) and exchange
// partial sums through shared memory once per chunk. Per 4-d step: 4 x 4 + 8 x 2 = 32 cycles
// for 128 FFMA (0.25). P Vn and the state update keep v4's cycles per FFMA. Per warp and chunk (K = 128)
// the shared-memory cycles drop from ~1630 to ~1150.
//
// Pipeline (two buffers B0/B1, each one [W | Q] d quarter or one Kd row half; one barrier per
// step, the next step's tile in flight while the current one is used):
//   s0..s3  [W | Q][:, 32q .. 32q + 32) (K = 128; 16q at K = 64), q = 0..3
//           after s3: partial sums exchanged, Vn = U - W S (dh = 0 warps), Q S (dh = 1 warps);
//           P Vn split: dh = 0 sums j < 32 (rows lane, lane + 32), dh = 1 sums j >= 32
//   s4      Kd[0:32, :]   dh = 1: o = scale (exp(G_i) Q S + P Vn) from both P Vn parts;
//                         S' = exp(G_C) S + rows i < 32      (+ next chunk's P in flight)
//   s5      Kd[32:64, :]  S' += rows i >= 32; S' -> smem      (+ next chunk's W|Q q0 and U)
//
// Numerics: the same products as v4 with a different (fixed) summation order in W S and Q S:
// per element, the sum over d is (sum over the first halves of the four quarters) + (sum over
// the second halves); P Vn of rows >= 32 is (sum over j < 32) + (sum over j >= 32); the state
// update keeps v4's order. Deterministic (no atomics, fixed order), but not bit-equal to v3/v4:
// checked against the fp64 oracle with the arm's bound.
#pragma once

template <int K_, int V_>
struct State6Cfg {
  static constexpr int K = K_, V = V_;
  static constexpr int C = kC;
  static constexpr int VS = 16, NT = 128;
  static constexpr int KQ = K / 4;     // d columns of one quarter
  static constexpr int KQH = KQ / 2;   // d columns of one quarter per warp pair
  static constexpr int LDQ = KQ + 4;   // 9 float4 (K = 128) / 5 (K = 64): odd, conflict-free rows
  static constexpr int LDK = K + 4;    // Kd half rows: 33 / 17 float4
  static constexpr int LDP = C + 4;    // 17 float4
  static constexpr int LDS = VS + 4;   // S, Vn, U: 5 float4
  static constexpr int RS = K / 64;    // state rows per lane: (K / 2) rows per warp pair
  static constexpr int QT = 2 * C * LDQ;            // one [W | Q] quarter: W then Q
  static constexpr int KT = (C / 2) * LDK;          // one Kd row half
  static constexpr int BUF = QT > KT ? QT : KT;
  // smem at K = V = 128: S 128 x 20 + Vn 64 x 20 + U 64 x 20 + P 64 x 68 + 2 x 4608 floats
  // = 74.75 KiB: three blocks per SM (3 x (74.75 + 1 reserved) = 227.25 of 228 KiB).
  static constexpr int smem_floats = K * LDS + 2 * C * LDS + C * LDP + 2 * BUF;
  static constexpr std::size_t smem_bytes = sizeof(float) * smem_floats;
  static_assert(C == 64 && NT == 128 && VS == 16, "4 warps: 2 column groups of 8 x 2 d halves");
  static_assert(K % 64 == 0 && KQH % 4 == 0, "whole float4 steps per d half");
  static_assert(V % VS == 0, "whole slices");
  static_assert((2 * C * KQ / 4) % NT == 0 && ((C / 2) * K / 4) % NT == 0 &&
                    (C * C / 4) % NT == 0 && (C * VS / 4) % NT == 0,
                "cp.async tiles: whole rounds");
  static_assert(LDQ % 4 == 0 && LDK % 4 == 0 && LDP % 4 == 0 && LDS % 4 == 0 && BUF % 4 == 0,
                "16-B aligned smem rows");
};

// ROWS rows of Q4 float4 each from src (row stride LDSRC floats) into dst (row stride LDD): the
// thread copies column 4 (t % Q4) of rows t / Q4 + RPI r. Fully unrolled from one base per side,
// so each copy is one LDGSTS with immediate offsets (v4's `unroll 1` loops with a runtime
// division cost ~33 instructions per 16-B copy: 27% of v6's first cut, r16 profile).
template <int ROWS, int Q4, int LDD, int LDSRC, int NT>
__device__ __forceinline__ void issue_tile6(float* dst, const float* src) {
  constexpr int RPI = NT / Q4;
  static_assert(NT % Q4 == 0 && ROWS % RPI == 0, "whole rounds");
  const unsigned t = threadIdx.x, ti = t / Q4, td = 4 * (t % Q4);
  float* d = dst + ti * LDD + td;
  const float* s = src + ti * LDSRC + td;
#pragma unroll
  for (int r = 0; r < ROWS / RPI; ++r) cp16(d + r * RPI * LDD, s + r * RPI * LDSRC);
}

// Columns [q KQ, (q + 1) KQ) of W and of Q (both [C][K] in the workspace) into dst: W rows at
// dst[i * LDQ], Q rows at dst[C * LDQ + i * LDQ].
template <class Cfg>
__device__ __forceinline__ void issue_wq_quarter(float* dst, const float* w, int q) {
  using WS = Ws<Cfg::K, Cfg::V, true>;
  constexpr int C = Cfg::C, K = Cfg::K, KQ = Cfg::KQ, LDQ = Cfg::LDQ, NT = Cfg::NT;
  issue_tile6<C, KQ / 4, LDQ, K, NT>(dst, w + WS::W + q * KQ);
  issue_tile6<C, KQ / 4, LDQ, K, NT>(dst + C * LDQ, w + WS::Q + q * KQ);
}
// Rows [32 h, 32 h + 32) of Kd into dst[32][LDK].
template <class Cfg>
__device__ __forceinline__ void issue_kd_half(float* dst, const float* w, int h) {
  using WS = Ws<Cfg::K, Cfg::V, true>;
  constexpr int C = Cfg::C, K = Cfg::K;
  issue_tile6<C / 2, K / 4, Cfg::LDK, K, Cfg::NT>(dst, w + WS::Kd + (C / 2) * K * h);
}
template <class Cfg>
__device__ __forceinline__ void issue_p6(float* Pm, const float* w) {
  using WS = Ws<Cfg::K, Cfg::V, true>;
  issue_tile6<Cfg::C, Cfg::C / 4, Cfg::LDP, Cfg::C, Cfg::NT>(Pm, w + WS::P);
}
template <class Cfg>
__device__ __forceinline__ void issue_u6(float* Us, const float* w, int v0) {
  using WS = Ws<Cfg::K, Cfg::V, true>;
  issue_tile6<Cfg::C, Cfg::VS / 4, Cfg::LDS, Cfg::V, Cfg::NT>(Us, w + WS::U + v0);
}

// acc[0..1] += W rows (lane, lane + 32), acc[2..3] += Q rows, over this warp pair's d half of
// quarter q, 8 columns from col; d in increasing order.
template <class Cfg>
__device__ __forceinline__ void wq_times_s(float (&acc)[4][8], const float* Bq, const float* Ss,
                                           int lane, int col, int q, int dh) {
  constexpr int LDQ = Cfg::LDQ, LDS = Cfg::LDS, C = Cfg::C;
  const float* Wr = Bq + lane * LDQ;
  const float* Qr = Bq + C * LDQ + lane * LDQ;
  const float* S0 = Ss + (q * Cfg::KQ) * LDS + col;
#pragma unroll
  for (int s4 = 0; s4 < Cfg::KQH; s4 += 4) {
    const int d = dh * Cfg::KQH + s4;
    const float4 a0 = *reinterpret_cast<const float4*>(&Wr[d]);
    const float4 a1 = *reinterpret_cast<const float4*>(&Wr[32 * LDQ + d]);
    const float4 a2 = *reinterpret_cast<const float4*>(&Qr[d]);
    const float4 a3 = *reinterpret_cast<const float4*>(&Qr[32 * LDQ + d]);
    const float aa[4][4] = {{a0.x, a0.y, a0.z, a0.w},
                            {a1.x, a1.y, a1.z, a1.w},
                            {a2.x, a2.y, a2.z, a2.w},
                            {a3.x, a3.y, a3.z, a3.w}};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const float4 s0 = *reinterpret_cast<const float4*>(&S0[(d + m) * LDS]);
      const float4 s1 = *reinterpret_cast<const float4*>(&S0[(d + m) * LDS + 4]);
      const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(aa[r][m], s[c], acc[r][c]);
    }
  }
}

__device__ __forceinline__ void ld8(float (&x)[8], const float* p) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ void st8(float* p, const float (&x)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(x[4], x[5], x[6], x[7]);
}

// Eight consecutive outputs, rounded by from_f32 each (the same rounding as scalar stores); one
// or two 16-B stores where the caller has checked the alignment of the base and strides.
template <typename OT>
__device__ __forceinline__ void store_o8(OT* dst, const float (&x)[8], bool vec) {
  if (vec) {
    if constexpr (sizeof(OT) == 4) {
      *reinterpret_cast<float4*>(dst) = make_float4(x[0], x[1], x[2], x[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(x[4], x[5], x[6], x[7]);
    } else {
      static_assert(sizeof(OT) == 2, "16-bit or 32-bit outputs");
      union {
        OT h[8];
        uint4 u;
      } pk;
#pragma unroll
      for (int c = 0; c < 8; ++c) pk.h[c] = from_f32<OT>(x[c]);
      *reinterpret_cast<uint4*>(dst) = pk.u;
    }
  } else {
#pragma unroll
    for (int c = 0; c < 8; ++c) dst[c] = from_f32<OT>(x[c]);
  }
}

template <typename OT, int K, int V>
__global__ void __launch_bounds__(State6Cfg<K, V>::NT, 3)
    wy_state_kernel_v6(const ChunkTab tab,
                       const float* __restrict__ ws,  // [NC, HV, Ws<K, V, true>::size]
                       OT* __restrict__ o, std::int64_t os0, std::int64_t os1,  // [T, HV, V]
                       const float* h0,  // [N, HV, K, V] or [N, HV, V, K]; may alias hT
                       float* hT,        // same shape; may be null
                       int HV, int vk, float scale, int o_vec) {
  using Cfg = State6Cfg<K, V>;
  using WS = Ws<K, V, true>;
  constexpr int C = Cfg::C, VS = Cfg::VS, LDK = Cfg::LDK, LDP = Cfg::LDP, LDS = Cfg::LDS,
                RS = Cfg::RS;
  extern __shared__ float4 smem4[];
  float* Ss = reinterpret_cast<float*>(smem4);  // [K][LDS] state slice
  float* Vn = Ss + K * LDS;                     // [C][LDS]: W S partials of dh = 1, then Vn
  float* Us = Vn + C * LDS;                     // [C][LDS]: U slice, then Q S partials of dh = 0
  float* Pm = Us + C * LDS;                     // [C][LDP]
  float* B0 = Pm + C * LDP;
  float* B1 = B0 + Cfg::BUF;

  const int v0 = blockIdx.x * VS, h = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int col = 8 * (warp & 1);  // this warp's 8 columns within the slice
  const int dh = warp >> 1;        // d half of every quarter; also the state row half
  const std::int64_t sbase = (static_cast<std::int64_t>(n) * HV + h) * K * V;
  // State rows of this thread: dh (K / 2) + lane + 32 r, r < RS; columns col .. col + 7.
  auto srow = [&](int r) { return dh * (K / 2) + lane + 32 * r; };
  const int c_begin = tab.first[n], c_end = tab.first[n + 1];
  auto wsp = [&](int ci) { return ws + (static_cast<std::int64_t>(ci) * HV + h) * WS::size; };

  if (c_begin < c_end) {
    const float* w = wsp(c_begin);
    issue_wq_quarter<Cfg>(B0, w, 0);
    issue_u6<Cfg>(Us, w, v0);
    issue_p6<Cfg>(Pm, w);
  }
  cp_commit();

  float st[RS][8];
#pragma unroll
  for (int r = 0; r < RS; ++r) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int d = srow(r), vc = v0 + col + c;
      st[r][c] = h0 ? h0[sbase + (vk ? std::int64_t(vc) * K + d : std::int64_t(d) * V + vc)] : 0.f;
    }
    st8(&Ss[srow(r) * LDS + col], st[r]);
  }

  for (int ci = c_begin; ci < c_end; ++ci) {
    const float* w = wsp(ci);
    const bool more = ci + 1 < c_end;
    const int t0 = tab.tok0[ci], len = tab.len[ci];
    const float g0 = w[WS::G + lane], g1 = w[WS::G + lane + 32], GC = w[WS::G + C - 1];
    float acc[4][8] = {};

    // s0..s3: the four [W | Q] quarters.
#pragma unroll 1
    for (int qq = 0; qq < 4; ++qq) {
      cp_wait_all();
      __syncthreads();
      float* cur = (qq & 1) ? B1 : B0;
      float* nxt = (qq & 1) ? B0 : B1;
      if (qq < 3)
        issue_wq_quarter<Cfg>(nxt, w, qq + 1);
      else
        issue_kd_half<Cfg>(nxt, w, 0);
      cp_commit();
      wq_times_s<Cfg>(acc, cur, Ss, lane, col, qq, dh);
    }

    // Exchange: dh = 0 keeps the W rows (Vn), dh = 1 the Q rows; each hands the other's rows
    // over through the buffer it will not read (U for Q partials: read into registers first).
    float u[2][8];
    if (dh == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        ld8(u[r], &Us[(lane + 32 * r) * LDS + col]);
        st8(&Us[(lane + 32 * r) * LDS + col], acc[2 + r]);
      }
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) st8(&Vn[(lane + 32 * r) * LDS + col], acc[r]);
    }
    __syncthreads();
    float qs[2][8];
    if (dh == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float p[8], x[8];
        ld8(p, &Vn[(lane + 32 * r) * LDS + col]);
#pragma unroll
        for (int c = 0; c < 8; ++c) x[c] = u[r][c] - (acc[r][c] + p[c]);
        st8(&Vn[(lane + 32 * r) * LDS + col], x);
      }
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float p[8];
        ld8(p, &Us[(lane + 32 * r) * LDS + col]);
#pragma unroll
        for (int c = 0; c < 8; ++c) qs[r][c] = p[c] + acc[2 + r][c];
      }
    }
    __syncthreads();  // Vn complete for every warp

    // P Vn split over the warp pair (r16/r17: with all of it on the dh = 1 warps, the dh = 0 warps
    // waited at the next barrier for 13% of the samples): dh = 0 sums j < 32 for rows lane and
    // lane + 32 and hands the sums over through U (free since the exchange); dh = 1 sums
    // j >= 32 for row lane + 32 (P is zero above the diagonal) and, after the s4 barrier, forms
    // o = scale (exp(G_i) Q S + P Vn) with P Vn = (j < 32 part) + (j >= 32 part).
    float pv[2][8] = {};
    if (dh == 0) {
      for (int j = 0; j < 32; j += 4) {
        const float4 p0 = *reinterpret_cast<const float4*>(&Pm[lane * LDP + j]);
        const float4 p1 = *reinterpret_cast<const float4*>(&Pm[(lane + 32) * LDP + j]);
        const float pa[2][4] = {{p0.x, p0.y, p0.z, p0.w}, {p1.x, p1.y, p1.z, p1.w}};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          float x[8];
          ld8(x, &Vn[(j + m) * LDS + col]);
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int c = 0; c < 8; ++c) pv[r][c] = fmaf(pa[r][m], x[c], pv[r][c]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) st8(&Us[(lane + 32 * r) * LDS + col], pv[r]);
    } else {
      for (int j = 32; j < C; j += 4) {
        const float4 p1 = *reinterpret_cast<const float4*>(&Pm[(lane + 32) * LDP + j]);
        const float pa[4] = {p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          float x[8];
          ld8(x, &Vn[(j + m) * LDS + col]);
#pragma unroll
          for (int c = 0; c < 8; ++c) pv[1][c] = fmaf(pa[m], x[c], pv[1][c]);
        }
      }
    }

    // s4: Kd rows 0..31 (B0); S' = exp(G_C) S + Kd^T Vn over rows i < 32.
    cp_wait_all();
    __syncthreads();  // also: every warp is done with P (the next one may land); P Vn sums in U
    issue_kd_half<Cfg>(B1, w, 1);
    if (more) issue_p6<Cfg>(Pm, wsp(ci + 1));
    cp_commit();
    if (dh == 1) {  // U is overwritten only after the s5 barrier
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = lane + 32 * r;
        float p[8];
        ld8(p, &Us[i * LDS + col]);
        if (i < len) {
          const float eg = expf(r ? g1 : g0);
          float y[8];
#pragma unroll
          for (int c = 0; c < 8; ++c)
            y[c] = scale * fmaf(eg, qs[r][c], r ? p[c] + pv[1][c] : p[c]);
          store_o8<OT>(o + (t0 + i) * os0 + h * os1 + v0 + col, y, o_vec != 0);
        }
      }
    }
    {
      const float eC = expf(GC);
#pragma unroll
      for (int r = 0; r < RS; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) st[r][c] *= eC;
      const int n0 = len < 32 ? len : 32;
      for (int i = 0; i < n0; ++i) {
        float kd[RS], x[8];
#pragma unroll
        for (int r = 0; r < RS; ++r) kd[r] = B0[i * LDK + srow(r)];
        ld8(x, &Vn[i * LDS + col]);
#pragma unroll
        for (int r = 0; r < RS; ++r)
#pragma unroll
          for (int c = 0; c < 8; ++c) st[r][c] = fmaf(kd[r], x[c], st[r][c]);
      }
    }

    // s5: Kd rows 32..63 (B1); S' += rows i >= 32; S' -> smem.
    cp_wait_all();
    __syncthreads();
    if (more) {
      const float* wn = wsp(ci + 1);
      issue_wq_quarter<Cfg>(B0, wn, 0);
      issue_u6<Cfg>(Us, wn, v0);
    }
    cp_commit();
    for (int i = 32; i < len; ++i) {
      float kd[RS], x[8];
#pragma unroll
      for (int r = 0; r < RS; ++r) kd[r] = B1[(i - 32) * LDK + srow(r)];
      ld8(x, &Vn[i * LDS + col]);
#pragma unroll
      for (int r = 0; r < RS; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) st[r][c] = fmaf(kd[r], x[c], st[r][c]);
    }
    // The next chunk's s0 barrier orders these stores before its reads of S.
#pragma unroll
    for (int r = 0; r < RS; ++r) st8(&Ss[srow(r) * LDS + col], st[r]);
  }
  cp_wait_all();

  if (hT) {
#pragma unroll
    for (int r = 0; r < RS; ++r)
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int d = srow(r), vc = v0 + col + c;
        hT[sbase + (vk ? std::int64_t(vc) * K + d : std::int64_t(d) * V + vc)] = st[r][c];
      }
  }
}
