// v9 state pass (the default with the exact workspace on sm_90a): the v6 pass (exact format)
// with its wgmma groups software-pipelined (the schedule of v8, measured in r11-r18 and removed
// after r19) and with less bookkeeping per chunk (helper-26). Included at the end of
// wy_tc_state_wgmma.cuh (so inside wy_tc.cu's anonymous namespace, after everything it uses:
// wg::, StateSmemWg, wg_issue_a / _b, wg_stage_o, wg_store_o, load_state, store_state, acc_to_a).
//
// Schedule. v6 ran each chunk as
//   split S^T | X, OS groups | Vn, splits | wait OS, eq | ST + OP group | wait all |
//   stage O, barrier, store o
// and the r8 profile showed the tensor pipe busy ~2.2K of ~5.0K cycles per chunk with one warp per
// scheduler: every "|" above left it idle. The pipelined pass issues four groups per chunk c, each
// while the previous one runs, and does the non-MMA work in their shadow:
//   X(c) = S^T W^T          meanwhile: O epilogue of chunk c - 1 (stage, barrier, store o)
//   OS(c) = S^T Q^T         meanwhile: Vn^T = U^T - X (after X), D = Vn^T diag(ed) split (dh, dl)
//   ST(c): S^T += D K       meanwhile: Vn^T split (vh, vl); after OS: O^T *= eq; barrier;
//                                      tiles A of chunk c + NBUF
//   OP(c): O^T += Vn^T P^T  meanwhile: after ST: next chunk's S^T split, S^T *= exp(G_C(c + 1))
// Every group completes inside its iteration (wait<0> at the end): ptxas does not follow a
// group in flight across the loop edge and serialises all wgmma of the loop if one is (checked:
// C7514/C7517 diagnostics), and it also serialises when S^T is rescaled while a group runs
// (so the rescale sits next to the split). Same products, operands and fp32 accumulation order
// per product as v6, so o and hT equal v6 bit for bit (test WyTcState.V9EqualsV6BitForBit).
//
// Bookkeeping (v9 against v8, bit for bit equal in r19 on every state case; 1191 -> 920 SASS
// instructions per warp and chunk at bf16 out, K = V = 128; 320 -> 290 us at T = 8192):
//   - wgmma smem descriptors: v8 rebuilds each one from its address (wg::desc: mask, shift, or,
//     64-bit pack, 5-8 instructions, in vector registers for the B tiles, then R2UR per use). v9
//     forms the descriptor's low word of each buffer's tile bases once per chunk and adds the tile
//     offset / 16 as an immediate: desc(a + off) == desc(a) + off / 16 for 16-byte multiples off
//     as long as (a & 0x3FFFF) + off < 2^18, true for every shared address of the CTA (228 KiB).
//   - O staging (2-byte out): the 32 16-bit stores per thread become 16 packs (the same
//     round-to-nearest conversions) and 4 stmatrix .x4 .trans (the accumulator layout is
//     stmatrix's fragment layout with tokens as the columns; .trans writes them as token rows):
//     the same bytes at the same smem addresses. The packs sit before X(c)'s fence (see the
//     loop). fp32 out: wg_stage_o, also before X(c), which removes v8's injected wgmma wait.
//   - o stores: each thread's pieces (rows tid / kPieces + 128 / kPieces j, columns fixed) from a
//     precomputed address (2-byte out: row-predicated by len; fp32 out: whole chunks only)
//     instead of wg_store_o's div/mod loop, which still serves the other cases (the element path
//     where o rows are not 16-byte aligned, fp32 partial chunks).
#pragma once

// Low 32 bits of a wgmma descriptor -> the descriptor (high word: SBO 128 bytes, as wg::desc).
__device__ __forceinline__ std::uint64_t wg9_desc(unsigned lo) {
  return (static_cast<std::uint64_t>(128u >> 4) << 32) + lo;
}
__device__ __forceinline__ unsigned wg9_desc_lo(unsigned saddr, unsigned lbo) {
  return static_cast<unsigned>(wg::desc(saddr, lbo, 128u));
}

// Two fp32 values rounded to TOut (2-byte types) and packed, the first in the low half: the same
// conversion (round to nearest even) as from_f32 on each (wy_tc.cu's pack_bf16 / pack_f16).
template <typename TOut> __device__ __forceinline__ std::uint32_t wg9_pack2(float a, float b) {
  static_assert(std::is_same_v<TOut, __nv_bfloat16> || std::is_same_v<TOut, __half>,
                "2-byte outputs only");
  if constexpr (std::is_same_v<TOut, __half>) return pack_f16(a, b);
  else return pack_bf16(a, b);
}

#if GDN_WYTC_WG_DEVICE
__device__ __forceinline__ void wg9_stsm_x4_trans(unsigned saddr, std::uint32_t r0,
                                                  std::uint32_t r1, std::uint32_t r2,
                                                  std::uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                   saddr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// The fused gated norm's cluster primitives (kNorm: the two V slices of a value head are one
// cluster of two blocks, rank = slice).
__device__ __forceinline__ unsigned wg9_peer_addr(unsigned saddr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(saddr), "r"(rank));
  return r;
}
// 16 bytes into the other block's shared memory, completing (complete_tx) on its mbarrier: no
// fence, and the receiver waits on its own mbarrier (CTA scope).
__device__ __forceinline__ void wg9_st_async4(unsigned raddr, const float (&v)[4], unsigned rbar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(raddr),
      "r"(__float_as_uint(v[0])), "r"(__float_as_uint(v[1])), "r"(__float_as_uint(v[2])),
      "r"(__float_as_uint(v[3])), "r"(rbar)
      : "memory");
}
__device__ __forceinline__ float4 wg9_ld_shared4(unsigned addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void wg9_bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void wg9_bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void wg9_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
#endif

// wg_stage_o for 2-byte TOut, in two steps. O^T in the accumulator layout (element (nt, e) =
// value row gid + 8 (e >> 1) of this warp, token nt * 8 + 2 tig + (e & 1)) goes to token rows
// sO[token][value] (row stride kLdO, the bytes wg_stage_o writes). Per 8 x 8 block (8 tokens x
// 8 values) the thread holds (value gid, tokens 2 tig, 2 tig + 1): the stmatrix fragment with
// values as rows, so .trans stores its columns (tokens) as rows of 8 values. opk[q][j]: matrix j
// of the .x4 of token block q, tokens 16 q + 8 (j >> 1), values 8 (j & 1) of the warp's 16.
template <typename TOut>
__device__ __forceinline__ void wg9_pack_o(const float (&ot)[Cfg::kChunk / 8][4],
                                           std::uint32_t (&opk)[Cfg::kChunk / 16][4]) {
#pragma unroll
  for (int q = 0; q < Cfg::kChunk / 16; ++q) {
    opk[q][0] = wg9_pack2<TOut>(ot[2 * q][0], ot[2 * q][1]);
    opk[q][1] = wg9_pack2<TOut>(ot[2 * q][2], ot[2 * q][3]);
    opk[q][2] = wg9_pack2<TOut>(ot[2 * q + 1][0], ot[2 * q + 1][1]);
    opk[q][3] = wg9_pack2<TOut>(ot[2 * q + 1][2], ot[2 * q + 1][3]);
  }
}
// s_lane: lane L's row address for q = 0, row L & 7 of matrix L >> 3 (wy_tc_state_kernel_wg9).
template <typename TOut>
__device__ __forceinline__ void wg9_stage_o(const std::uint32_t (&opk)[Cfg::kChunk / 16][4],
                                            unsigned s_lane) {
#if GDN_WYTC_WG_DEVICE
  constexpr int kLdO = SCfg::kVSlice + 16 / static_cast<int>(sizeof(TOut));
#pragma unroll
  for (int q = 0; q < Cfg::kChunk / 16; ++q)
    wg9_stsm_x4_trans(s_lane + q * 16 * kLdO * static_cast<int>(sizeof(TOut)), opk[q][0],
                      opk[q][1], opk[q][2], opk[q][3]);
#else
  (void)opk, (void)s_lane;
#endif
}

// fp16 A fragment of the 16 x 16 block ks of a 16-row accumulator array (acc_to_a's layout, one
// round to nearest fp16 per value instead of the bf16 hi + lo split): the half scheme.
template <int NT>
__device__ __forceinline__ void acc_to_a_f16(std::uint32_t (&h)[4], const float (&acc)[NT][4],
                                             int ks) {
  h[0] = pack_f16(acc[2 * ks][0], acc[2 * ks][1]);
  h[1] = pack_f16(acc[2 * ks][2], acc[2 * ks][3]);
  h[2] = pack_f16(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
  h[3] = pack_f16(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
}

#if GDN_WYTC_WG_DEVICE
// The fused gated norm (kNorm): y = rmsnorm(o) * w * silu(z) over a value head's V = 128 values per
// token, o the bf16 value the pass would store, with the layer's gated_norm_kernel arithmetic
// (src/cuda/layer/layer.cu, 16 lanes per row of 8 values), so that y equals the unfused layer's
// bit for bit: a thread's 8 values (row i0 + 16 j, piece c0 / 8 of its slice) are that kernel's
// lane (slice * 8 + c0 / 8) and its sum of squares that lane's; that kernel's first butterfly
// step (xor 8) adds the lanes of the two slices, here each block's partial plus the other
// block's; then xor 4, 2, 1 in the warp.
// Run by a second warpgroup of the block (threads 128 .. 255), off the state chain: r54 / r55
// ran it in the chain's warpgroup (one warp per scheduler, so every instruction of it costs its
// full latency) and the pass took 505-550 us against 234 at T = 8192. The chain's warpgroup
// stages each chunk's o tile as before and signals named barrier 2; this warpgroup reads it,
// then signals barrier 3 (the tile may be overwritten), so one staging buffer suffices.
// Exchange between the slices: each thread sends its 4 partials (16 bytes) into the other
// block's shared memory by st.async, completing on that block's mbarrier gn_bar[e & 1] (2 KiB
// expected per chunk e, announced by the receiver's thread); the receiver waits on its own
// mbarrier, no fences. A block sends into buffer b again (chunk e + 2) only after it has
// received the other block's partials of chunk e + 1, which that block sends after reading its
// buffer b for chunk e.
template <typename Sm>
__device__ __forceinline__ void wg9_norm_warpgroup(const StateParams& p, unsigned sb,
                                                   const unsigned char* smem_wg,
                                                   std::uint64_t* gn_bar, int slice, int h,
                                                   int c_begin, int c_end) {
  constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice, kLdO = VS + 8, kPieces = VS / 8;
  constexpr int kRows = SCfg::kThreads / kPieces, kNR = C / kRows;
  static_assert(kPieces == 8 && kNR == 4, "8 threads per 64-value row segment, 4 rows each");
  constexpr unsigned kGnBuf = SCfg::kThreads * 16;  // bytes of partials per chunk
  static_assert(C * kLdO * 2 + 2 * kGnBuf <= C * (VS * 4 + 16),
                "the partials fit behind the bf16 staging in the O region");
  constexpr int kStepS = kRows * kLdO * 2 / 16;  // uint4 per row step of the staged tile
  const int t = threadIdx.x - SCfg::kThreads;
  const int i0 = t / kPieces, c0 = (t % kPieces) * 8;
  const uint4* const s_thr =
      reinterpret_cast<const uint4*>(smem_wg + Sm::oO + (i0 * kLdO + c0) * 2);
  const unsigned gn_local = sb + Sm::oO + C * kLdO * 2 + t * 16;  // this thread's partials
  const unsigned gn_peer = wg9_peer_addr(gn_local, static_cast<unsigned>(slice ^ 1));
  const unsigned gn_peer_bar = wg9_peer_addr(cuda::smem_u32(gn_bar), static_cast<unsigned>(slice ^ 1));
  const __nv_bfloat16* const z_thr =
      p.gn_z + static_cast<std::int64_t>(i0) * p.gn_z_st + h * p.gn_z_sh + slice * VS + c0;
  __nv_bfloat16* const y_thr = static_cast<__nv_bfloat16*>(p.o) +
                               static_cast<std::int64_t>(i0) * p.o_st + h * p.o_sh + slice * VS + c0;
  float w[8];
  {
    const float4* wp = reinterpret_cast<const float4*>(p.gn_w + slice * VS + c0);
    const float4 a = wp[0], b = wp[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
  // z of chunk cg arrives one chunk ahead and its SiLU is formed before the tile is waited for:
  // what remains between "staged" and "free" is the row sums, the exchange and the products
  // (r56: with the SiLU and the z loads in that window the pass took 362 against 252 us).
  uint4 zv[kNR];
  auto load_z = [&](int cg) {
    const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
#pragma unroll
    for (int j = 0; j < kNR; ++j)
      zv[j] = i0 + j * kRows < len
                  ? *reinterpret_cast<const uint4*>(
                        z_thr + static_cast<std::int64_t>(tok0 + j * kRows) * p.gn_z_st)
                  : make_uint4(0u, 0u, 0u, 0u);
  };
  if (c_begin < c_end) load_z(c_begin);
  for (int cg = c_begin; cg < c_end; ++cg) {
    const int e = cg - c_begin, b = e & 1;
    const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
    float sz[kNR][8];  // silu(z) of this chunk
    {
      bool fast = true;
#pragma unroll
      for (int j = 0; j < kNR; ++j) {
        const std::uint32_t zu[4] = {zv[j].x, zv[j].y, zv[j].z, zv[j].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float z0 = __uint_as_float(zu[i] << 16), z1 = __uint_as_float(zu[i] & 0xffff0000u);
          sz[j][2 * i] = cuda::silu_fast(z0);
          sz[j][2 * i + 1] = cuda::silu_fast(z1);
          fast &= cuda::silu_fast_in_range(z0) & cuda::silu_fast_in_range(z1);
        }
      }
      if (!fast) {  // rare: z outside the fast path's range (the layer kernel's fallback)
#pragma unroll
        for (int j = 0; j < kNR; ++j) {
          const std::uint32_t zu[4] = {zv[j].x, zv[j].y, zv[j].z, zv[j].w};
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const float z = __uint_as_float(i & 1 ? zu[i / 2] & 0xffff0000u : zu[i / 2] << 16);
            if (!cuda::silu_fast_in_range(z)) sz[j][i] = cuda::silu(z);
          }
        }
      }
    }
    if (cg + 1 < c_end) load_z(cg + 1);
    if (t == 0) cuda::mbar_arrive_tx(&gn_bar[b], kGnBuf);  // the other block's 2 KiB
    wg9_bar_sync(2, 2 * SCfg::kThreads);                    // chunk cg's o tile staged
    float ss[kNR];
#pragma unroll
    for (int j = 0; j < kNR; ++j) {
      const uint4 pc = s_thr[j * kStepS];
      const std::uint32_t u[4] = {pc.x, pc.y, pc.z, pc.w};
      float a = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float lo = __uint_as_float(u[i] << 16), hi = __uint_as_float(u[i] & 0xffff0000u);
        a += lo * lo;
        a += hi * hi;
      }
      ss[j] = a;
    }
    wg9_st_async4(gn_peer + b * kGnBuf, ss, gn_peer_bar + b * 8);
    cuda::mbar_wait(&gn_bar[b], static_cast<unsigned>(e >> 1) & 1u);  // the other slice's sums
    const float4 o4 = wg9_ld_shared4(gn_local + b * kGnBuf);
    const float other[4] = {o4.x, o4.y, o4.z, o4.w};
#pragma unroll
    for (int j = 0; j < kNR; ++j) {
      float tt = ss[j];
      if (!p.gn_negctl) tt += other[j];
#pragma unroll
      for (int s = kPieces / 2; s > 0; s >>= 1) tt += __shfl_xor_sync(0xffffffffu, tt, s);
      const float inv = rsqrtf(tt / static_cast<float>(2 * VS) + p.gn_eps);
      const uint4 pc = s_thr[j * kStepS];
      const std::uint32_t u[4] = {pc.x, pc.y, pc.z, pc.w};
      std::uint32_t y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float x0 = __uint_as_float(u[i] << 16), x1 = __uint_as_float(u[i] & 0xffff0000u);
        y[i] = pack_bf16(x0 * inv * w[2 * i] * sz[j][2 * i], x1 * inv * w[2 * i + 1] * sz[j][2 * i + 1]);
      }
      if (i0 + j * kRows < len)
        *reinterpret_cast<uint4*>(y_thr + static_cast<std::int64_t>(tok0 + j * kRows) * p.o_st) =
            make_uint4(y[0], y[1], y[2], y[3]);
    }
    if (cg + 1 < c_end) wg9_bar_arrive(3, 2 * SCfg::kThreads);  // the staging buffer is free
  }
}
#endif

// v9: see the top of this file. kHalf (v10, the half operand scheme, docs/bounds.md; the half
// workspace format): X = S^T W^T and OS = S^T Q^T as ONE fp16 product each (S^T rounded once to
// fp16; W, Q fp16 tiles), OP = Vn^T P^T one fp16 product (Vn^T rounded once); ST unchanged (Vn^T
// diag(ed) split bf16 hi + lo times the exact bf16 K). 9 units of 64^3 MACs per chunk instead of
// 17 (X 2, OS 2, ST 4, OP 1), and no hi + lo split of S^T or of Vn^T for OP.
// kU16 (half format only, Workspace U16): the U slice arrives in fp16 (half the bytes) and is
// widened to fp32 where Vn^T = U^T - X is formed; everything else as kHalf.
// kNorm (the layer's gated RMSNorm fused into the o epilogue; bf16 out, V = 2 slices, launched as
// clusters of 2 blocks of 256 threads): threads 128 .. 255 run wg9_norm_warpgroup (above).
template <typename TOut, int K, int V, bool kHalf = false, bool kU16 = false, bool kNorm = false>
__global__ void __launch_bounds__(kNorm ? 2 * SCfg::kThreads : SCfg::kThreads, 1)
    wy_tc_state_kernel_wg9(StateParams p) {
#if GDN_WYTC_WG_DEVICE
  constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice;
  static_assert(V % VS == 0 && VS == 64 && SCfg::kThreads == 128, "one warpgroup = 64 rows of S^T");
  using Sm = StateSmemWg<K, V, true, kHalf, kU16>;
  constexpr int NBUF = Sm::NBUF;
  static_assert(NBUF == 2, "buffer = chunk parity");
  // Descriptor arithmetic below: every shared address of the CTA is below 228 KiB < 2^18.
  static_assert(Sm::bytes + 1024 <= (1u << 18), "descriptor start fields add without carry");
  extern __shared__ __align__(128) unsigned char smem_wg[];
  __shared__ __align__(8) std::uint64_t bar[2 * NBUF];  // [A buffers..., B buffers...]
  const unsigned sb = cuda::smem_u32(smem_wg);
  float st[K / 8][4];
  const WgBlock wb = wg_begin<K, V, 2 * NBUF, kNorm>(p, bar, st);
  const int slice = wb.slice, h = wb.h, n = wb.n, lane = wb.lane, tig = wb.tig, warp = wb.warp;
  const int v0 = wb.v0;
  const std::int64_t nh = wb.nh;

  constexpr unsigned lC = C * 16u, lK = K * 16u;
  const unsigned oWh = p.wg_negctl ? Sm::oQh : Sm::oWh;  // negative control: W^T reads Q
  const unsigned oWl = p.wg_negctl ? Sm::oQh : Sm::oWl;  // (not read with kHalf)
  const int c_begin = max(p.seq_chunk0[n], p.seg_c0), c_end = min(p.seq_chunk0[n + 1], p.seg_c1);
  if constexpr (kNorm) {  // threads 128 .. 255: the fused gated norm (wg9_norm_warpgroup)
    static_assert(std::is_same_v<TOut, __nv_bfloat16> && V == 2 * VS, "bf16 out, two V slices");
    __shared__ __align__(8) std::uint64_t gn_bar[2];
    if (threadIdx.x == 0) {
      cuda::mbar_init(&gn_bar[0], 1);
      cuda::mbar_init(&gn_bar[1], 1);
      cuda::mbar_init_fence();
    }
    wg9_cluster_sync();  // both blocks' mbarriers initialised before any st.async reaches them
    if (threadIdx.x >= SCfg::kThreads) {
      wg9_norm_warpgroup<Sm>(p, sb, smem_wg, gn_bar, slice, h, c_begin, c_end);
      return;
    }
  }
  // This warpgroup alone (kNorm: named barrier 1; otherwise the block is this warpgroup).
  auto wg_sync = [] {
    if constexpr (kNorm) wg9_bar_sync(1, SCfg::kThreads);
    else __syncthreads();
  };
  if (threadIdx.x == 0)
    for (int cg = c_begin; cg < c_end && cg < c_begin + NBUF; ++cg) {
      wg_issue_a<Sm, K, V, true>(p, smem_wg, bar, cg, c_begin, h, slice);
      wg_issue_b<Sm, K, true>(p, smem_wg, bar, cg, c_begin, h);
    }
  // Descriptor low word of the tile at byte offset off (from smem_wg) with LBO lbo:
  // d0 + off / 16 + (lbo / 16 << 16), d0 = the start-address field of smem_wg (no field
  // overlaps: the start address is bits 0-13, LBO bits 16-29). One base per buffer and chunk.
  const unsigned d0 = wg9_desc_lo(sb, 0u);
  constexpr unsigned kLC = (lC >> 4) << 16, kLK = (lK >> 4) << 16;
  // O staging (2-byte out): this lane's stmatrix row address, token 8 (L >> 4) + (L & 7), value
  // warp * 16 + 8 ((L >> 3) & 1) (see wg9_pack_o).
  constexpr bool kPack = sizeof(TOut) == 2;
  constexpr int kLdO = VS + 16 / static_cast<int>(sizeof(TOut));
  const unsigned s_stage =
      sb + Sm::oO +
      static_cast<unsigned>(((8 * (lane >> 4) + (lane & 7)) * kLdO + warp * 16 + 8 * ((lane >> 3) & 1)) *
                            static_cast<int>(sizeof(TOut)));
  // o stores (16-byte pieces): this thread's rows i0 + kRows j, columns c0 .. c0 + kEl - 1.
  constexpr int kEl = 16 / static_cast<int>(sizeof(TOut)), kPieces = VS / kEl;
  constexpr int kRows = SCfg::kThreads / kPieces;
  static_assert(SCfg::kThreads % kPieces == 0 && C % kRows == 0, "whole rows per pass");
  const int i0 = threadIdx.x / kPieces, c0 = (threadIdx.x % kPieces) * kEl;
  TOut* const o_thr = static_cast<TOut*>(p.o) + static_cast<std::int64_t>(i0) * p.o_st +
                      h * p.o_sh + slice * VS + c0;
  const std::int64_t o_step = kRows * p.o_st;
  const uint4* const s_thr =
      reinterpret_cast<const uint4*>(smem_wg + Sm::oO + (i0 * kLdO + c0) * static_cast<int>(sizeof(TOut)));
  constexpr int kStepS = kRows * kLdO * static_cast<int>(sizeof(TOut)) / 16;  // uint4 per row step
  auto store_o = [&](int tok0, int len) {  // after the barrier that follows the staging
    if (p.o_vec && (kPack || len == C)) {
      TOut* const dst = o_thr + static_cast<std::int64_t>(tok0) * p.o_st;
#pragma unroll
      for (int j = 0; j < C / kRows; ++j)
        if (!kPack || i0 + j * kRows < len)
          *reinterpret_cast<uint4*>(dst + j * o_step) = s_thr[j * kStepS];
    } else {
      wg_store_o<TOut, Sm>(p, smem_wg, tok0, len, h, slice);
    }
  };
  // S^T of the next chunk split hi + lo (X and OS operands; kHalf: rounded to fp16 once), and
  // S^T scaled by its decay.
  std::uint32_t ah[K / 16][4], al[kHalf ? 1 : K / 16][4];
  auto split_and_decay = [&](float decay) {
#pragma unroll
    for (int ks = 0; ks < K / 16; ++ks) {
      if constexpr (kHalf) acc_to_a_f16(ah[ks], st, ks);
      else acc_to_a(ah[ks], al[ks], st, ks);
    }
#pragma unroll
    for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] *= decay;
    wg::keep(st);  // before any later fence: the compiler may not sink these past it
    wg::keep_u(ah);
    if constexpr (!kHalf) wg::keep_u(al);
  };
  auto gc_of = [&](int cg) {  // G_C of chunk cg, 0 (decay 1) past the sequence's end
    return cg < c_end ? p.ws.gc[static_cast<std::int64_t>(cg) * p.HV + h] : 0.f;
  };
  split_and_decay(expf(gc_of(c_begin)));
  float ot[C / 8][4] = {};  // O^T of the previous chunk until its epilogue, then of this one
  int prev_tok0 = 0, prev_len = 0;  // the previous chunk's tokens (its epilogue's stores)
  for (int cg = c_begin; cg < c_end; ++cg) {
    const float gc_next = gc_of(cg + 1);
    const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
    const int it = cg - c_begin, b = it & 1;
    const unsigned parity = (it >> 1) & 1;
    // This chunk's buffer: descriptor low words of its tile bases.
    const unsigned dA = d0 + b * (Sm::kStrideA >> 4);
    const unsigned dB = d0 + (Sm::oB >> 4) + b * (Sm::kStrideB >> 4);
    const unsigned dWh = dA + kLC + (oWh >> 4), dWl = dA + kLC + (oWl >> 4);
    // O^T of chunk cg - 1 (the epilogue below). 2-byte out: rounded and packed here, before X(c)
    // is issued, and stored (stmatrix) in X(c)'s shadow below; packing it there, with X(c) in
    // flight, makes ptxas inject a wgmma wait (C7517) that serialises the epilogue behind X(c)
    // (wg_stage_o's 16-bit stores do not, but cost ~45 more instructions). fp32 out: staged here
    // (v8 stages it in X(c)'s shadow and gets that injected wait).
    std::uint32_t opk[kPack ? C / 16 : 1][4];
    if constexpr (kPack) {
      wg9_pack_o<TOut>(ot, opk);
      wg::keep_u(opk);  // before the fence: not sunk to the stores
    } else {
      wg_stage_o<TOut, Sm>(ot, smem_wg);
    }
    cuda::mbar_wait(&bar[b], parity);  // tiles A of this chunk
    float xw[C / 8][4];
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < K / 16; ++ks) {  // X(c)
      const unsigned kofs = ks * C * 2;  // ks * C * 32 bytes
      const std::uint64_t wh = wg9_desc(dWh + kofs);
      if constexpr (kHalf) {
        if (ks == 0) wg::wgmma_n64<0, true>(xw, ah[ks], wh);
        else wg::wgmma_n64<1, true>(xw, ah[ks], wh);
      } else {
        const std::uint64_t wl = wg9_desc(dWl + kofs);
        if (ks == 0) wg::wgmma_n64<0>(xw, ah[ks], wl);
        else wg::wgmma_n64<1>(xw, ah[ks], wl);
        wg::wgmma_n64<1>(xw, al[ks], wh);
        wg::wgmma_n64<1>(xw, ah[ks], wh);
      }
    }
    wg::commit();
    if constexpr (kNorm) {  // chunk cg - 1's o tile to the norm warpgroup (none in the first)
      if (cg > c_begin) {
        if (cg - c_begin >= 2) wg9_bar_sync(3, 2 * SCfg::kThreads);  // it is done with cg - 2's
        wg9_stage_o<TOut>(opk, s_stage);
        wg_sync();  // every warp's OP(c - 1) done: tiles B of c - 1 free
        if (cg - 1 + NBUF < c_end && threadIdx.x == 0)
          wg_issue_b<Sm, K, true>(p, smem_wg, bar, cg - 1 + NBUF, c_begin, h);
        wg9_bar_arrive(2, 2 * SCfg::kThreads);  // staged
      }
    } else {  // epilogue of chunk cg - 1 (as v8; stores nothing in the first iteration: len 0)
      if constexpr (kPack) wg9_stage_o<TOut>(opk, s_stage);
      __syncthreads();  // sO complete; every warp's OP(c - 1) done: tiles B of c - 1 free
      if (cg > c_begin && cg - 1 + NBUF < c_end && threadIdx.x == 0)
        wg_issue_b<Sm, K, true>(p, smem_wg, bar, cg - 1 + NBUF, c_begin, h);
      store_o(prev_tok0, prev_len);
    }
    prev_tok0 = tok0, prev_len = len;
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < K / 16; ++ks) {  // OS(c)
      const std::uint64_t qh = wg9_desc(dA + kLC + (Sm::oQh >> 4) + ks * C * 2);
      if constexpr (kHalf) {
        if (ks == 0) wg::wgmma_n64<0, true>(ot, ah[ks], qh);
        else wg::wgmma_n64<1, true>(ot, ah[ks], qh);
      } else {
        if (ks == 0) wg::wgmma_n64<0>(ot, al[ks], qh);
        else wg::wgmma_n64<1>(ot, al[ks], qh);
        wg::wgmma_n64<1>(ot, ah[ks], qh);
      }
    }
    wg::commit();
    wg::wait<1>();  // X(c) done (OS(c) may run)
    wg::keep(xw);
    using UPiece = std::conditional_t<kU16, uint2, float4>;  // a lane's four U values
    const UPiece* sU = reinterpret_cast<const UPiece*>(smem_wg + b * Sm::kStrideA + Sm::oU);
    float vn[C / 8][4];  // Vn^T = U^T - S^T W^T
    wg_vn(vn, xw, sU, warp, lane);
    cuda::mbar_wait(&bar[NBUF + b], parity);  // tiles B of this chunk (ed)
    std::uint32_t dh[C / 16][4], dl[C / 16][4];
    {
      const float* sEd = reinterpret_cast<const float*>(smem_wg + Sm::oB + b * Sm::kStrideB +
                                                        Sm::oEd);
      float dn[C / 8][4];
      wg_scale_cols(dn, vn, sEd, tig);
#pragma unroll
      for (int kc = 0; kc < C / 16; ++kc) acc_to_a(dh[kc], dl[kc], dn, kc);
    }
    wg::keep_u(dh);
    wg::keep_u(dl);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc) {  // ST(c)
      const std::uint64_t kh = wg9_desc(dB + kLK + (Sm::oKh >> 4) + kc * K * 2);
      wg::wgmma_nk<K>(st, dl[kc], kh);
      wg::wgmma_nk<K>(st, dh[kc], kh);
    }
    wg::commit();
    std::uint32_t vh[C / 16][4], vl[kHalf ? 1 : C / 16][4];  // OP's Vn^T (kHalf: fp16, vh only)
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc) {
      if constexpr (kHalf) acc_to_a_f16(vh[kc], vn, kc);
      else acc_to_a(vh[kc], vl[kc], vn, kc);
    }
    wg::keep_u(vh);
    if constexpr (!kHalf) wg::keep_u(vl);
    wg::wait<1>();  // OS(c) done (ST(c) may run)
    wg::keep(ot);
    {  // O^T columns (tokens) scaled by eq before the P fold adds in
      const float* sEq = reinterpret_cast<const float*>(smem_wg + b * Sm::kStrideA + Sm::oEq);
      wg_scale_cols(ot, ot, sEq, tig);
    }
    wg::keep(ot);  // pins the scaling before the fence of OP(c)
    wg_sync();  // every warp's X(c), OS(c) done and U, eq read: tiles A of c free
    if (cg + NBUF < c_end && threadIdx.x == 0)
      wg_issue_a<Sm, K, V, true>(p, smem_wg, bar, cg + NBUF, c_begin, h, slice);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc) {  // OP(c)
      const std::uint64_t ph = wg9_desc(dB + kLC + (Sm::oPh >> 4) + kc * C * 2);
      if constexpr (kHalf) {
        wg::wgmma_n64<1, true>(ot, vh[kc], ph);
      } else {
        const std::uint64_t pl = wg9_desc(dB + kLC + (Sm::oPl >> 4) + kc * C * 2);
        wg::wgmma_n64<1>(ot, vh[kc], pl);
        wg::wgmma_n64<1>(ot, vl[kc], ph);
        wg::wgmma_n64<1>(ot, vh[kc], ph);
      }
    }
    wg::commit();
    wg::wait<1>();  // ST(c) done (OP(c) may run)
    wg::keep(st);
    split_and_decay(expf(gc_next));  // the next chunk's operands, under OP(c)
    wg::wait<0>();  // OP(c) done
    wg::keep(ot);
    wg::keep_u(vh);
    if constexpr (!kHalf) wg::keep_u(vl);
  }
  if constexpr (kNorm) {  // the last chunk's o tile to the norm warpgroup
    if (c_end > c_begin) {
      if (c_end - c_begin >= 2) wg9_bar_sync(3, 2 * SCfg::kThreads);
      std::uint32_t opk[C / 16][4];
      wg9_pack_o<TOut>(ot, opk);
      wg9_stage_o<TOut>(opk, s_stage);
      wg9_bar_arrive(2, 2 * SCfg::kThreads);
    }
  } else {  // epilogue of the last chunk (stores nothing for an empty sequence: prev_len 0)
    if constexpr (kPack) {
      std::uint32_t opk[C / 16][4];
      wg9_pack_o<TOut>(ot, opk);
      wg9_stage_o<TOut>(opk, s_stage);
    } else {
      wg_stage_o<TOut, Sm>(ot, smem_wg);
    }
    __syncthreads();
    store_o(prev_tok0, prev_len);
  }
  store_state<K, V>(st, p, nh, v0);
#else
  (void)p;
  __trap();  // launched only where the sm_90a image runs (use_wg_state)
#endif
}
