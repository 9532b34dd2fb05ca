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

// v9: see the top of this file. kHalf (v10, the half operand scheme, docs/bounds.md; the half
// workspace format): X = S^T W^T and OS = S^T Q^T as ONE fp16 product each (S^T rounded once to
// fp16; W, Q fp16 tiles), OP = Vn^T P^T one fp16 product (Vn^T rounded once); ST unchanged (Vn^T
// diag(ed) split bf16 hi + lo times the exact bf16 K). 9 units of 64^3 MACs per chunk instead of
// 17 (X 2, OS 2, ST 4, OP 1), and no hi + lo split of S^T or of Vn^T for OP.
// kU16 (half format only, Workspace U16): the U slice arrives in fp16 (half the bytes) and is
// widened to fp32 where Vn^T = U^T - X is formed; everything else as kHalf.
// kNS = 2 (paired slices; half format, fp16 U, 2-byte o, V = 128): one block per (sequence,
// head) with two warpgroups, warpgroup s the V slice s, instead of one block per slice. The W, Q,
// P, K^T tiles and eq, ed are copied once for both (the one-slice blocks of a head each copy
// them), U holds both slices, O is staged per slice; the barriers span both warpgroups. 2 x 128
// threads x <= 255 registers take the whole register file, so no chunk block shares the SM, but
// the state pass takes half as many SMs. Each warpgroup runs the one-slice pass's instructions
// on its slice: o and hT equal it bit for bit. p.pair_negctl (GDN_WYTC_PAIR=negctl): both
// warpgroups read slice 0's U (must differ).
// kD16 (fp16 U only; Workspace K16, bound row half-u16-d16): ST as ONE fp16 product, D = Vn^T
// diag(ed) rounded once to fp16 times the fp16 K^T, instead of D's bf16 hi + lo split times the
// bf16 K^T (two products): 9 -> 7 units of 64^3 MACs per chunk, and no lo half of D. The default
// with fp16 U since session 22 (r70, H100: this pass 99.9 -> 92.5 us at T = 4096, 17.0 M -> 15.2 M
// instructions; 254 registers against 236, no spills).
// kFlags (the flag pipeline, launch(): one sequence; paired slices, or one slice per block with
// GDN_WYTC_PAIR=0, thread 0 copying for both warpgroups as without flags): the chunk kernel runs
// at the same time, and thread 0 copies chunk c's tiles only after acquiring c's ready word
// (ChunkParams::ready: the arrivals of its value head's block and of its key head's Q / K
// writer, and G_C). Thread 0 probes the words ahead of the chain at two check points a step
// (`poll`) and waits (`wait_for`) only at the middle barrier, for chunk c + 1, when the chain has
// caught up with the chunk pass. G_C travels through shared memory (s_gc), read by the others
// after a block barrier that follows its acquire. Without kFlags the kernel is the one above,
// instruction for instruction.
template <typename TOut, int K, int V, bool kHalf = false, bool kU16 = false, int kNS = 1,
          bool kD16 = false, bool kFlags = false>
__global__ void __launch_bounds__(SCfg::kThreads * kNS, 1) wy_tc_state_kernel_wg9(StateParams p) {
#if GDN_WYTC_WG_DEVICE
  constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice;
  static_assert(V % VS == 0 && VS == 64 && SCfg::kThreads == 128, "one warpgroup = 64 rows of S^T");
  static_assert(kNS == 1 || (kHalf && kU16 && sizeof(TOut) == 2 && V == 2 * VS), "paired slices");
  static_assert(!kD16 || (kHalf && kU16), "D16: fp16 U");
  using Sm = StateSmemWg<K, V, true, kHalf, kU16, static_cast<int>(sizeof(TOut)), kNS>;
  constexpr int NBUF = Sm::NBUF;
  static_assert(NBUF == 2, "buffer = chunk parity");
  // Descriptor arithmetic below: every shared address of the CTA is below 228 KiB < 2^18.
  static_assert(Sm::bytes + 1024 <= (1u << 18), "descriptor start fields add without carry");
  extern __shared__ __align__(128) unsigned char smem_wg[];
  __shared__ __align__(8) std::uint64_t bar[2 * NBUF];  // [A buffers..., B buffers...]
  const unsigned sb = cuda::smem_u32(smem_wg);
  float st[K / 8][4];
  const WgBlock wb = wg_begin<K, V, 2 * NBUF, kNS>(p, bar, st);
  const int slice = wb.slice, h = wb.h, n = wb.n, lane = wb.lane, tig = wb.tig, warp = wb.warp;
  const int v0 = wb.v0;
  const std::int64_t nh = wb.nh;
  // Paired slices: the warpgroup's thread index, its O staging, its U slice in the A buffers.
  const int ltid = static_cast<int>(threadIdx.x & 127);
  const int o_off = Sm::oO + (kNS == 1 ? 0 : slice * Sm::kOStride);
  const int u_off = Sm::oU + (kNS == 1 || p.pair_negctl ? 0 : slice * Sm::kU1);
  const int slice_a = kNS == 1 ? slice : 0;  // the slice wg_issue_a copies from (kNS slices)

  constexpr unsigned lC = C * 16u, lK = K * 16u;
  const unsigned oWh = p.wg_negctl ? Sm::oQh : Sm::oWh;  // negative control: W^T reads Q
  const unsigned oWl = p.wg_negctl ? Sm::oQh : Sm::oWl;  // (not read with kHalf)
  const int c_begin = max(p.seq_chunk0[n], p.seg_c0), c_end = min(p.seq_chunk0[n + 1], p.seg_c1);
  __shared__ float s_gc[kFlags ? 4 : 1];  // kFlags: G_C of chunk c in s_gc[c & 3]
  // kFlags, thread 0 only: acq = the last chunk acquired (in order; its G_C in s_gc), next_a /
  // next_b = the next chunk whose tiles A / B are still to be copied; with `probing`, `probe` is
  // chunk acq + 1's ready word, loaded (relaxed) at an earlier check point and looked at only at
  // the next one, so the load's latency stays off the chain (session 29: three dependent acquire
  // loads per step at the middle barrier cost ~1.3 us a step, r83).
  int acq = c_begin - 1, next_a = c_begin, next_b = c_begin;
  bool probing = false;
  unsigned long long probe = 0;
  // Ready at 1 arrival where this head writes its key head's Q / K tiles, else 2
  // (ChunkParams::ready).
  const unsigned long long need = (writes_qk_tiles(h, p.HV, p.HK, p.tiled) ? 1ull : 2ull) << 32;
  const unsigned long long* const rw = p.ready + h;  // chunk c's word: rw[c * HV]
  __shared__ unsigned long long s_tr[kFlags ? 2 : 1];  // GDN_WYTC_FLAGS_TRACE: ns waited, waits
  auto take = [&](unsigned long long w) {  // chunk acq + 1's word w is up
    ++acq;
    s_gc[acq & 3] = __uint_as_float(static_cast<unsigned>(w));
    if (p.trace && blockIdx.x == 0) p.trace[4 * gridDim.x + acq] = cuda::global_ns();
  };
  auto poll = [&](int lim) {  // thread 0, never waits for a flag: the outstanding probe's chunk
    bool got = false;         // if it is up, then a probe of the next chunk if acq < lim
    if (probing) {
      probing = false;
      if (probe >= need) take(probe), got = true;
    }
    if (got) cuda::fence_acquire_gpu(), cuda::fence_proxy_async_global();
    if (acq < lim && acq + 1 < c_end) {
      probe = cuda::ready_peek(rw + static_cast<std::int64_t>(acq + 1) * p.HV);
      probing = true;
    }
  };
  auto wait_for = [&](int c) {  // thread 0: chunks up to c acquired, waiting for them if need be
    if (acq >= c) return;
    while (acq < c) {
      const unsigned long long* w = rw + static_cast<std::int64_t>(acq + 1) * p.HV;
      unsigned long long v = probing ? probe : cuda::ready_peek(w);
      probing = false;
      if (v < need) {
        const std::uint64_t t0 = cuda::global_ns();
        do {
          __nanosleep(64);
          v = cuda::ready_peek(w);
          if (cuda::global_ns() - t0 > 20000000000ull) __trap();  // 20 s: the producer is gone
        } while (v < need);
        if (p.trace) s_tr[0] += cuda::global_ns() - t0, s_tr[1] += 1;
      }
      take(v);
    }
    cuda::fence_acquire_gpu();          // the acquire pattern with the loads above
    cuda::fence_proxy_async_global();   // the bulk copies below read what was acquired
  };
  auto issue_a = [&](int cg) { wg_issue_a<Sm, K, V, true>(p, smem_wg, bar, cg, c_begin, h, slice_a); };
  auto issue_b = [&](int cg) { wg_issue_b<Sm, K, true>(p, smem_wg, bar, cg, c_begin, h); };
  if constexpr (kFlags) {
    if (threadIdx.x == 0 && p.trace) {
      p.trace[4 * blockIdx.x] = cuda::global_ns();
      s_tr[0] = s_tr[1] = 0;
    }
    if (threadIdx.x == 0 && c_begin < c_end) {
      wait_for(c_begin);
      issue_a(c_begin), issue_b(c_begin);
      next_a = next_b = c_begin + 1;
      poll(c_begin + 2);  // probes chunk c_begin + 1
    }
    __syncthreads();  // s_gc[c_begin]
  } else {
    (void)poll, (void)wait_for, (void)next_a, (void)next_b, (void)need, (void)rw;
    if (threadIdx.x == 0)
      for (int cg = c_begin; cg < c_end && cg < c_begin + NBUF; ++cg) issue_a(cg), issue_b(cg);
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
      sb + o_off +
      static_cast<unsigned>(((8 * (lane >> 4) + (lane & 7)) * kLdO + warp * 16 + 8 * ((lane >> 3) & 1)) *
                            static_cast<int>(sizeof(TOut)));
  // o stores (16-byte pieces): this thread's rows i0 + kRows j, columns c0 .. c0 + kEl - 1.
  constexpr int kEl = 16 / static_cast<int>(sizeof(TOut)), kPieces = VS / kEl;
  constexpr int kRows = SCfg::kThreads / kPieces;
  static_assert(SCfg::kThreads % kPieces == 0 && C % kRows == 0, "whole rows per pass");
  const int i0 = ltid / kPieces, c0 = (ltid % kPieces) * kEl;
  TOut* const o_thr = static_cast<TOut*>(p.o) + static_cast<std::int64_t>(i0) * p.o_st +
                      h * p.o_sh + slice * VS + c0;
  const std::int64_t o_step = kRows * p.o_st;
  const uint4* const s_thr =
      reinterpret_cast<const uint4*>(smem_wg + o_off + (i0 * kLdO + c0) * static_cast<int>(sizeof(TOut)));
  constexpr int kStepS = kRows * kLdO * static_cast<int>(sizeof(TOut)) / 16;  // uint4 per row step
  auto store_o = [&](int tok0, int len) {  // after the barrier that follows the staging
    if (p.o_vec && (kPack || len == C)) {
      TOut* const dst = o_thr + static_cast<std::int64_t>(tok0) * p.o_st;
#pragma unroll
      for (int j = 0; j < C / kRows; ++j)
        if (!kPack || i0 + j * kRows < len)
          *reinterpret_cast<uint4*>(dst + j * o_step) = s_thr[j * kStepS];
    } else {
      wg_store_o<TOut, Sm>(p, smem_wg, tok0, len, h, slice, ltid, o_off);
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
    if constexpr (kFlags) return cg < c_end ? s_gc[cg & 3] : 0.f;  // after its barrier
    else return cg < c_end ? p.ws.gc[static_cast<std::int64_t>(cg) * p.HV + h] : 0.f;
  };
  split_and_decay(expf(gc_of(c_begin)));
  float ot[C / 8][4] = {};  // O^T of the previous chunk until its epilogue, then of this one
  int prev_tok0 = 0, prev_len = 0;  // the previous chunk's tokens (its epilogue's stores)
  for (int cg = c_begin; cg < c_end; ++cg) {
    float gc_next = kFlags ? 0.f : gc_of(cg + 1);  // kFlags: read after the middle barrier
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
    {  // epilogue of chunk cg - 1 (as v8; stores nothing in the first iteration: len 0)
      if constexpr (kPack) wg9_stage_o<TOut>(opk, s_stage);
      __syncthreads();  // sO complete; every warp's OP(c - 1) done: tiles B of c - 1 free
      if constexpr (kFlags) {  // check point: A / B(c + 1) if acquired; else at the middle
        if (threadIdx.x == 0) {
          poll(cg + 3);
          if (next_b == cg + 1 && acq >= cg + 1) issue_b(cg + 1), ++next_b;
          if (next_a == cg + 1 && acq >= cg + 1) issue_a(cg + 1), ++next_a;
        }
      } else if (cg > c_begin && cg - 1 + NBUF < c_end && threadIdx.x == 0) {
        issue_b(cg - 1 + NBUF);
      }
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
    const UPiece* sU = reinterpret_cast<const UPiece*>(smem_wg + b * Sm::kStrideA + u_off);
    float vn[C / 8][4];  // Vn^T = U^T - S^T W^T
    wg_vn(vn, xw, sU, warp, lane);
    cuda::mbar_wait(&bar[NBUF + b], parity);  // tiles B of this chunk (ed)
    std::uint32_t dh[C / 16][4], dl[kD16 ? 1 : C / 16][4];  // D (kD16: fp16, dh only)
    {
      const float* sEd = reinterpret_cast<const float*>(smem_wg + Sm::oB + b * Sm::kStrideB +
                                                        Sm::oEd);
      float dn[C / 8][4];
      wg_scale_cols(dn, vn, sEd, tig);
#pragma unroll
      for (int kc = 0; kc < C / 16; ++kc) {
        if constexpr (kD16) acc_to_a_f16(dh[kc], dn, kc);
        else acc_to_a(dh[kc], dl[kc], dn, kc);
      }
    }
    wg::keep_u(dh);
    if constexpr (!kD16) wg::keep_u(dl);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc) {  // ST(c)
      const std::uint64_t kh = wg9_desc(dB + kLK + (Sm::oKh >> 4) + kc * K * 2);
      if constexpr (kD16) {
        wg::wgmma_nk<K, true>(st, dh[kc], kh);
      } else {
        wg::wgmma_nk<K>(st, dl[kc], kh);
        wg::wgmma_nk<K>(st, dh[kc], kh);
      }
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
    if constexpr (kFlags) {  // chunk c + 1 acquired (waiting here if need be), its B copied
      if (threadIdx.x == 0 && cg + 1 < c_end) {
        wait_for(cg + 1);
        if (next_b == cg + 1) issue_b(cg + 1), ++next_b;
      }
    }
    __syncthreads();  // every warp's X(c), OS(c) done and U, eq read: tiles A of c free
    if constexpr (kFlags) {  // check point: A(c + 1) if it waited, A(c + 2) if acquired
      if (threadIdx.x == 0) {
        if (next_a == cg + 1 && cg + 1 < c_end) issue_a(cg + 1), ++next_a;
        poll(cg + 3);
        if (next_a == cg + 2 && acq >= cg + 2) issue_a(cg + 2), ++next_a;
      }
      gc_next = gc_of(cg + 1);  // s_gc[c + 1], written before the barrier above
    } else if (cg + NBUF < c_end && threadIdx.x == 0) {
      issue_a(cg + NBUF);
    }
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
  {  // epilogue of the last chunk (stores nothing for an empty sequence: prev_len 0)
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
  if constexpr (kFlags) {
    if (threadIdx.x == 0 && p.trace) {
      unsigned long long* t = p.trace + 4 * blockIdx.x;
      t[1] = cuda::global_ns(), t[2] = s_tr[0], t[3] = s_tr[1];
    }
  }
#else
  (void)p;
  __trap();  // launched only where the sm_90a image runs (use_wg_state)
#endif
}
