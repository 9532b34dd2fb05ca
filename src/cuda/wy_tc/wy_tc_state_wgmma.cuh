// wy-tc state pass on sm_90a (v6): the same algebra and the same workspace as
// wy_tc_state_kernel (wy_tc.cu), with every fold issued as warpgroup MMAs (wgmma.mma_async,
// m64nNk16 bf16 -> fp32) instead of per-warp mma.sync. Included by wy_tc.cu inside its anonymous
// namespace (it uses StateParams, Workspace, SCfg, Cfg and acc_to_a from there).
//
// One block = one warpgroup (4 warps) = one (sequence, value head, 64 columns of V), as in v5: the
// transposed state S^T (64 x K) lives in the wgmma accumulator registers for the whole sequence.
// Warp w owns rows 16 w .. 16 w + 15; the accumulator layout of m64nN is, per warp, the mma.sync
// C layout per 8-column n-tile (float[N/8][4]), and the register A operand is the mma.sync A
// layout of the warp's 16 rows, so acc_to_a() carries over unchanged.
// Per chunk (3 wgmma per split product: hi lo + lo hi + hi hi, as mma_split):
//   phase 1 (tiles A: W, Qs hi/lo; U):  X = S^T W^T, O^T = S^T Qs^T      24 + 24 x m64n64k16
//   phase 2 (tiles B: P, Kd^T hi/lo):   Vn^T = U^T - X; S^T = exp(G_C) S^T + Vn^T Kd;
//                                       O^T += Vn^T P^T           12 x m64nKk16 + 12 x m64n64k16
// B operands are read by the tensor cores straight from shared memory through matrix
// descriptors: every bf16 tile sits in the canonical K-major layout without swizzle (8 rows x
// 16 bytes core matrices, 128 contiguous bytes each; core matrix (n-block nb, k-block kb) of a
// tile with NR rows at byte (kb * NR / 8 + nb) * 128), so LBO (next core matrix along k) is
// NR * 16 bytes and SBO (next core matrix along n) 128 bytes. The chunk kernels write the
// workspace in exactly that order (ws_word, wy_tc.cu), so each tile, and the block's U slice
// (ws_u), arrives by one bulk copy (cp.async.bulk, the TMA engine) issued by one thread and
// completing on an mbarrier: the compute warps issue no copy instructions. (The first version
// copied 16-byte pieces with cp.async from all 128 threads: 64 per thread and chunk, and the
// issue of those stalled the warpgroup on the load path; 1.05 ms for the pass at T = 8192.)
//
// Cost per chunk and block (K = V = 128): 48 m64n64k16 + 12 m64n128k16 + 12 m64n64k16 =
// 2688 tensor cycles at 2048 bf16 FMA/cycle/SM (~1.4 us at 1.9 GHz), against v5's 2688 mma.sync
// spread over 4 warps' issue slots (~6 us measured). The tiles (129 KiB per block and chunk, the
// W/Qs/P/Kd^T part shared by the head's two blocks through L2) make it close to memory-bound:
// 48 heads x ~144 KiB of DRAM per chunk step.
#pragma once
// (cuda/common/bulk_copy.cuh, gdn::cuda::mbar_* / bulk_g2s, is included by wy_tc.cu at file scope.)

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GDN_WYTC_WG_DEVICE 1  // this device pass has wgmma (sm_90a)
#else
#define GDN_WYTC_WG_DEVICE 0
#endif

namespace wg {

#if GDN_WYTC_WG_DEVICE
// The m64n64k16 / m64n128k16 wgmma with fp32 accumulators, A in registers (4 16-bit pair
// registers, this warp's 16 rows), B by smem descriptor; TY the operand type (bf16 or f16).
// Operands: the accumulator d[nt][e] (N / 2 registers, %0 ..), then A (4), the descriptor and the
// scale-d flag.
#define GDN_WG_ACC4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define GDN_WG_ACC32                                                                    \
  GDN_WG_ACC4(0), GDN_WG_ACC4(1), GDN_WG_ACC4(2), GDN_WG_ACC4(3), GDN_WG_ACC4(4),       \
      GDN_WG_ACC4(5), GDN_WG_ACC4(6), GDN_WG_ACC4(7)
#define GDN_WG_ACC64                                                                    \
  GDN_WG_ACC32, GDN_WG_ACC4(8), GDN_WG_ACC4(9), GDN_WG_ACC4(10), GDN_WG_ACC4(11),       \
      GDN_WG_ACC4(12), GDN_WG_ACC4(13), GDN_WG_ACC4(14), GDN_WG_ACC4(15)
#define GDN_WG_REGS32                                                                   \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "              \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GDN_WG_REGS64                                                                   \
  GDN_WG_REGS32 ", "                                                                    \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "    \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GDN_WGMMA_N64(TY)                                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                            \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "              \
               "{" GDN_WG_REGS32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"       \
               : GDN_WG_ACC32                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(kAccum))
#define GDN_WGMMA_N128(TY)                                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                            \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "             \
               "{" GDN_WG_REGS64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"       \
               : GDN_WG_ACC64                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(kAccum))

// d[8][4] += A (4 bf16x2 registers, or f16x2 with kF16) x B (smem descriptor), m64n64k16.
template <int kAccum, bool kF16 = false>  // kAccum 0: d = A B, 1: d += A B; kF16: f16 operands
__device__ __forceinline__ void wgmma_n64(float (&d)[8][4], const std::uint32_t (&a)[4],
                                          std::uint64_t desc) {
  if constexpr (kF16) GDN_WGMMA_N64("f16");
  else GDN_WGMMA_N64("bf16");
}

// d[16][4] += A x B, m64n128k16 (as wgmma_n64).
template <int kAccum, bool kF16 = false>  // kAccum 0: d = A B, 1: d += A B; kF16: f16 operands
__device__ __forceinline__ void wgmma_n128(float (&d)[16][4], const std::uint32_t (&a)[4],
                                          std::uint64_t desc) {
  if constexpr (kF16) GDN_WGMMA_N128("f16");
  else GDN_WGMMA_N128("bf16");
}
#undef GDN_WGMMA_N64
#undef GDN_WGMMA_N128
#undef GDN_WG_ACC4
#undef GDN_WG_ACC32
#undef GDN_WG_ACC64
#undef GDN_WG_REGS32
#undef GDN_WG_REGS64

// m64nKk16 accumulate into a K-column accumulator (K = 64 or 128); kF16: f16 operands.
template <int K, bool kF16 = false>
__device__ __forceinline__ void wgmma_nk(float (&d)[K / 8][4], const std::uint32_t (&a)[4],
                                         std::uint64_t desc) {
  if constexpr (K == 128) wgmma_n128<1, kF16>(d, a, desc);
  else wgmma_n64<1, kF16>(d, a, desc);
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
#endif  // GDN_WYTC_WG_DEVICE

// Keeps the compiler from moving reads or writes of accumulators across wgmma issue / wait.
template <int NT> __device__ __forceinline__ void keep(float (&d)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[nt][e])::"memory");
}

// The same for register A operands (bf16x2 words) of wgmma groups that may still run.
template <int NT> __device__ __forceinline__ void keep_u(std::uint32_t (&a)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[nt][e])::"memory");
}

// Shared-memory matrix descriptor, no swizzle, base offset 0: start address, LBO (bytes between
// core matrices adjacent along k), SBO (bytes between core matrices adjacent along m / n).
__device__ __forceinline__ std::uint64_t desc(unsigned saddr, unsigned lbo, unsigned sbo) {
  return static_cast<std::uint64_t>((saddr & 0x3FFFFu) >> 4) |
         (static_cast<std::uint64_t>((lbo & 0x3FFFFu) >> 4) << 16) |
         (static_cast<std::uint64_t>((sbo & 0x3FFFFu) >> 4) << 32);
}

}  // namespace wg

// Shared memory of one block: NBUF buffers of tiles A (phase 1) and tiles B (phase 2).
// Split format (kExact = false): A = W hi/lo, Qs hi/lo (4 x 16 KiB at K = 128), U slice (16 KiB);
// B = P hi/lo (2 x 8 KiB), Kd^T hi/lo (2 x 16 KiB); 128 KiB, one buffer each (NBUF = 1).
// Exact format (kExact): A = W hi/lo, Q, U slice, eq (64.25 KiB); B = P hi/lo, K^T, ed
// (32.25 KiB); two buffers each (NBUF = 2, 193 KiB), so a chunk's tiles load during the whole
// previous chunk. Half format (kHalf, kExact too; Workspace::half_ws): no W lo, P lo tiles (oWl, oPl
// unused): A = W, Q (fp16), U slice, eq (48.25 KiB); B = P (fp16), K^T, ed (24.25 KiB).
// kU16 (half format with fp16 U, Workspace U16): the U slice is 8 KiB (A 40.25 KiB).
// Every tile 128-byte aligned.
// kNS (v9 half format with fp16 U only): V slices per block, one warpgroup each; the block's U
// is kNS slices (contiguous in ws_u order) and it stages O once per slice; the W, Q, P, K^T tiles
// and eq, ed are the head's and shared by the slices.
template <int K, int V, bool kExact, bool kHalf = false, bool kU16 = false, int kOutBytes = 4,
          int kNS = 1>
struct StateSmemWg {
  static_assert(kExact || !kHalf, "the half format is an exact format");
  static_assert(kHalf || !kU16, "fp16 U only in the half format");
  static_assert(kOutBytes == 2 || kOutBytes == 4, "2- or 4-byte o");
  static_assert(kNS == 1 || (kU16 && kNS * SCfg::kVSlice == V), "paired slices: fp16 U, whole V");
  static constexpr bool kHalfFmt = kHalf, kU16Fmt = kU16;
  static constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice;
  static constexpr int NBUF = kExact ? 2 : 1;
  static constexpr int kCK = C * K * 2;  // bytes of a C x K (or K x C) bf16 tile
  static constexpr int kCC = C * C * 2;  // bytes of a C x C bf16 tile
  static constexpr int kU1 = C * VS * (kU16 ? 2 : 4);  // bytes of one U slice (ws_u order)
  static constexpr int kU = kNS * kU1;                  // bytes of the block's U slice(s)
  static constexpr int kVec = C * 4;     // bytes of eq or ed
  // offsets inside one A buffer / one B buffer
  static constexpr int oWh = 0, oWl = kCK, oQh = kHalf ? kCK : 2 * kCK, oQl = 3 * kCK;
  static constexpr int oU = kHalf ? 2 * kCK : kExact ? 3 * kCK : 4 * kCK, oEq = oU + kU;
  static constexpr int kBytesA = oEq + (kExact ? kVec : 0);
  static constexpr int kStrideA = (kBytesA + 127) / 128 * 128;
  static constexpr int oPh = 0, oPl = kCC, oKh = kHalf ? kCC : 2 * kCC, oKl = 2 * kCC + kCK;
  static constexpr int oEd = kExact ? oKh + kCK : 0;
  static constexpr int kBytesB = kExact ? oEd + kVec : 2 * kCC + 2 * kCK;
  static constexpr int kStrideB = (kBytesB + 127) / 128 * 128;
  static constexpr int oB = NBUF * kStrideA;  // first B buffer
  // O^T staged as rows of tokens (C x 64 values, 16 bytes of padding per row, sized for the o
  // dtype: kOutBytes) so that the block writes o in 16-byte pieces of whole 64-value row segments.
  static constexpr int oO = oB + NBUF * kStrideB;
  static constexpr int kOStride = C * (VS * kOutBytes + 16);  // one slice's staging
  static constexpr std::size_t bytes = static_cast<std::size_t>(oO) + kNS * kOStride;
  static_assert(bytes <= 227 * 1024, "fits the H200's shared memory per block");
};

// Tile index of the exact workspace's Q and K^T planes for chunk cg and value head h: one tile
// per (chunk, key head), shared by the key head's value heads (Workspace, wy_tc.cu). The key
// head without an integer division (h / d or h % d with d = HV / HK or HK): q = trunc((h + 1/2)
// fl(1/d)) = floor(h / d) exactly, since the product's relative error 2^-24 moves it by less than
// 1/(2d), its distance to the nearest integer, for any h < 2^22. (The division's temporaries
// made ptxas spill 12 B in the K = V = 128 pipelined pass; this form spills nothing there.)
__device__ __forceinline__ std::int64_t wg_qk_tile(const StateParams& p, int cg, int h) {
  const int q = __float2int_rz((static_cast<float>(h) + 0.5f) * p.qk_inv);
  const int hk = p.tiled ? h - p.HK * q : q;
  return static_cast<std::int64_t>(cg) * p.HK + hk;
}

// Bulk copies of chunk cg's tiles A (W hi/lo, Q(s) hi[/lo], the block's U slice[, eq]) or tiles B
// (P hi/lo, K(d)^T hi[/lo][, ed]) into buffer (cg - c_begin) % NBUF, completing on that buffer's
// mbarrier (bar[b] for A, bar[NBUF + b] for B). One thread issues.
template <typename Sm, int K, int V, bool kExact>
__device__ __forceinline__ void wg_issue_a(const StateParams& p, unsigned char* smem,
                                           std::uint64_t* bar, int cg, int c_begin, int h,
                                           int slice) {
  constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice;
  const int b = (cg - c_begin) % Sm::NBUF;
  unsigned char* d = smem + b * Sm::kStrideA;
  const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
  const std::int64_t bq = kExact ? wg_qk_tile(p, cg, h) : base;  // Q: per key head if exact
  cuda::mbar_arrive_tx(&bar[b], Sm::kBytesA);
  cuda::bulk_g2s(d + Sm::oWh, p.ws.wh + base * C * K / 2, Sm::kCK, &bar[b]);
  if constexpr (!Sm::kHalfFmt)
    cuda::bulk_g2s(d + Sm::oWl, p.ws.wl + base * C * K / 2, Sm::kCK, &bar[b]);
  cuda::bulk_g2s(d + Sm::oQh, p.ws.qh + bq * C * K / 2, Sm::kCK, &bar[b]);
  if constexpr (!kExact) cuda::bulk_g2s(d + Sm::oQl, p.ws.ql + base * C * K / 2, Sm::kCK, &bar[b]);
  if constexpr (Sm::kU16Fmt)  // fp16 U: [NC, HV, C, V] halves at the start of ws.u
    cuda::bulk_g2s(d + Sm::oU,
                   reinterpret_cast<const __half*>(p.ws.u) + base * C * V + slice * C * VS,
                   Sm::kU, &bar[b]);
  else
    cuda::bulk_g2s(d + Sm::oU, p.ws.u + base * C * V + slice * C * VS, Sm::kU, &bar[b]);
  if constexpr (kExact) cuda::bulk_g2s(d + Sm::oEq, p.ws.eq + base * C, Sm::kVec, &bar[b]);
}
template <typename Sm, int K, bool kExact>
__device__ __forceinline__ void wg_issue_b(const StateParams& p, unsigned char* smem,
                                           std::uint64_t* bar, int cg, int c_begin, int h) {
  constexpr int C = Cfg::kChunk;
  const int b = (cg - c_begin) % Sm::NBUF;
  unsigned char* d = smem + Sm::oB + b * Sm::kStrideB;
  std::uint64_t* bb = &bar[Sm::NBUF + b];
  const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
  const std::int64_t bk = kExact ? wg_qk_tile(p, cg, h) : base;  // K^T: per key head if exact
  cuda::mbar_arrive_tx(bb, Sm::kBytesB);
  cuda::bulk_g2s(d + Sm::oPh, p.ws.ph + base * C * C / 2, Sm::kCC, bb);
  if constexpr (!Sm::kHalfFmt) cuda::bulk_g2s(d + Sm::oPl, p.ws.pl + base * C * C / 2, Sm::kCC, bb);
  cuda::bulk_g2s(d + Sm::oKh, p.ws.kh + bk * K * C / 2, Sm::kCK, bb);
  if constexpr (!kExact) cuda::bulk_g2s(d + Sm::oKl, p.ws.kl + base * K * C / 2, Sm::kCK, bb);
  if constexpr (kExact) cuda::bulk_g2s(d + Sm::oEd, p.ws.ed + base * C, Sm::kVec, bb);
}
// O^T (this warp's 16 value rows x C tokens, accumulator layout) -> token rows in shared memory
// (row stride: 16 bytes of padding keep the four tig rows of one store on distinct banks).
template <typename TOut, typename Sm>
__device__ __forceinline__ void wg_stage_o(const float (&ot)[Cfg::kChunk / 8][4],
                                           unsigned char* smem) {
  constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice;
  constexpr int kLdO = VS + 16 / static_cast<int>(sizeof(TOut));
  const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3, warp = threadIdx.x >> 5;
  TOut* sO = reinterpret_cast<TOut*>(smem + Sm::oO);
#pragma unroll
  for (int nt = 0; nt < C / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      sO[(nt * 8 + 2 * tig + (e & 1)) * kLdO + warp * 16 + gid + 8 * (e >> 1)] =
          from_f32<TOut>(ot[nt][e]);
}
// The staged rows (len tokens x VS values) to o in whole 16-byte pieces (element stores where o
// rows are not 16-byte aligned). After a barrier that follows wg_stage_o. tid: the thread's
// index in its warpgroup, o_off: the staging's offset (paired slices: one per warpgroup).
template <typename TOut, typename Sm>
__device__ __forceinline__ void wg_store_o(const StateParams& p, const unsigned char* smem,
                                           int tok0, int len, int h, int slice,
                                           int tid = threadIdx.x, int o_off = Sm::oO) {
  constexpr int VS = SCfg::kVSlice;
  constexpr int kLdO = VS + 16 / static_cast<int>(sizeof(TOut));
  constexpr int kEl = 16 / static_cast<int>(sizeof(TOut)), kPieces = VS / kEl;
  TOut* o = static_cast<TOut*>(p.o);
  const TOut* sO = reinterpret_cast<const TOut*>(smem + o_off);
  for (int q = tid; q < len * kPieces; q += SCfg::kThreads) {
    const int i = q / kPieces, c0 = (q % kPieces) * kEl;
    TOut* dst = o + (tok0 + i) * p.o_st + h * p.o_sh + slice * VS + c0;
    const TOut* src = sO + i * kLdO + c0;
    if (p.o_vec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
#pragma unroll
      for (int j = 0; j < kEl; ++j) dst[j] = src[j];
    }
  }
}

// A lane's four U values as fp32: a float4 (fp32 U) or an 8-byte piece of four halves (U16).
__device__ __forceinline__ float4 u_piece(const float4& u) { return u; }
__device__ __forceinline__ float4 u_piece(const uint2& u) {
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
// Vn^T = U^T - X in the accumulator layout (U slice in ws_u order: this lane's four values of
// n-tile nt are piece number nt * 128 + 32 warp + lane; UPiece float4 or, U16, uint2).
template <typename UPiece>
__device__ __forceinline__ void wg_vn(float (&vn)[Cfg::kChunk / 8][4],
                                      const float (&xw)[Cfg::kChunk / 8][4], const UPiece* sU,
                                      int warp, int lane) {
#pragma unroll
  for (int nt = 0; nt < Cfg::kChunk / 8; ++nt) {
    const float4 u4 = u_piece(sU[nt * 128 + warp * 32 + lane]);
    vn[nt][0] = u4.x - xw[nt][0];
    vn[nt][1] = u4.y - xw[nt][1];
    vn[nt][2] = u4.z - xw[nt][2];
    vn[nt][3] = u4.w - xw[nt][3];
  }
}
// dst = src diag(vec): accumulator columns (tokens) scaled by a per-token fp32 vector in shared
// memory (eq, ed); dst may be src.
__device__ __forceinline__ void wg_scale_cols(float (&dst)[Cfg::kChunk / 8][4],
                                              const float (&src)[Cfg::kChunk / 8][4],
                                              const float* vec, int tig) {
#pragma unroll
  for (int nt = 0; nt < Cfg::kChunk / 8; ++nt) {
    const float2 e2 = *reinterpret_cast<const float2*>(vec + nt * 8 + 2 * tig);
    dst[nt][0] = src[nt][0] * e2.x, dst[nt][1] = src[nt][1] * e2.y;
    dst[nt][2] = src[nt][2] * e2.x, dst[nt][3] = src[nt][3] * e2.y;
  }
}

// The start of a wgmma state pass: thread 0 initialises the block's mbarriers (one per tile
// buffer), the block's place is decoded (one warpgroup = sequence n, value head h, 64 columns
// `slice` of V; warp w holds S^T rows v0 .. v0 + 15), and S^T is loaded from h0 (or zeroed).
struct WgBlock {
  int slice, h, n, lane, tig, warp, v0;
  std::int64_t nh;  // (sequence, value head) of h0 / hT
};
// kNS: V slices per block (one warpgroup each; v9's paired slices: 2, slice = warpgroup).
template <int K, int V, int NB, int kNS = 1>
__device__ __forceinline__ WgBlock wg_begin(const StateParams& p, std::uint64_t (&bar)[NB],
                                            float (&st)[K / 8][4]) {
  constexpr int VS = SCfg::kVSlice, NS = V / VS / kNS;  // NS: blocks per (sequence, head)
  if (threadIdx.x == 0) {
    for (int i = 0; i < NB; ++i) cuda::mbar_init(&bar[i], 1);
    cuda::mbar_init_fence();
  }
  __syncthreads();
  WgBlock b;
  b.slice = kNS == 1 ? blockIdx.x % NS : static_cast<int>(threadIdx.x >> 7);
  b.h = (blockIdx.x / NS) % p.HV;
  b.n = p.seq0 + blockIdx.x / (NS * p.HV);
  b.lane = threadIdx.x & 31, b.tig = b.lane & 3, b.warp = (threadIdx.x >> 5) & 3;
  b.v0 = b.slice * VS + b.warp * 16;
  b.nh = static_cast<std::int64_t>(b.n) * p.HV + b.h;
  load_state<K, V>(st, p, b.nh, b.v0);
  return b;
}

// The v5 state pass (wy_tc_state_kernel) with wgmma folds; see the top of this file. kExact:
// the workspace carries Q and K^T themselves (exact bf16) plus the vectors eq, ed: O^T =
// (S^T Q^T) diag(eq) + Vn^T P^T and S^T' = exp(G_C) S^T + (Vn^T diag(ed)) K, two wgmma per
// product (S^T or Vn^T diag(ed) split, times the exact tile) instead of three.
template <typename TOut, int K, int V, bool kExact>
__global__ void __launch_bounds__(SCfg::kThreads, 1) wy_tc_state_kernel_wg(StateParams p) {
#if GDN_WYTC_WG_DEVICE
  constexpr int C = Cfg::kChunk, VS = SCfg::kVSlice;
  static_assert(V % VS == 0 && VS == 64 && SCfg::kThreads == 128, "one warpgroup = 64 rows of S^T");
  using Sm = StateSmemWg<K, V, kExact>;
  constexpr int NBUF = Sm::NBUF;
  extern __shared__ __align__(128) unsigned char smem_wg[];
  __shared__ __align__(8) std::uint64_t bar[2 * NBUF];  // [A buffers..., B buffers...]
  const unsigned sb = cuda::smem_u32(smem_wg);
  float st[K / 8][4];
  const WgBlock wb = wg_begin<K, V>(p, bar, st);
  const int slice = wb.slice, h = wb.h, n = wb.n, lane = wb.lane, tig = wb.tig, warp = wb.warp;
  const int v0 = wb.v0;
  const std::int64_t nh = wb.nh;

  // Descriptor strides: a tile of NR rows has LBO = NR * 16 and advances NR * 32 bytes per k16.
  constexpr unsigned lC = C * 16u, lK = K * 16u, kSbo = 128u;
  // Negative control: the W^T fold reads the Q(s) tiles.
  const unsigned oWh = p.wg_negctl ? Sm::oQh : Sm::oWh;
  const unsigned oWl = p.wg_negctl ? (kExact ? Sm::oQh : Sm::oQl) : Sm::oWl;
  const int c_begin = p.seq_chunk0[n], c_end = p.seq_chunk0[n + 1];
  // Tiles of chunk cg into buffer (cg - c_begin) % NBUF; thread 0 only.
  auto issue_a = [&](int cg) { wg_issue_a<Sm, K, V, kExact>(p, smem_wg, bar, cg, c_begin, h, slice); };
  auto issue_b = [&](int cg) { wg_issue_b<Sm, K, kExact>(p, smem_wg, bar, cg, c_begin, h); };
  if (threadIdx.x == 0)
    for (int cg = c_begin; cg < c_end && cg < c_begin + NBUF; ++cg) {
      issue_a(cg);
      issue_b(cg);
    }
  for (int cg = c_begin; cg < c_end; ++cg) {
    const std::int64_t base = static_cast<std::int64_t>(cg) * p.HV + h;
    const int tok0 = p.chunk_tok0[cg], len = p.chunk_len[cg];
    const float decay = expf(p.ws.gc[base]);
    const int b = (cg - c_begin) % NBUF;
    const unsigned parity = ((cg - c_begin) / NBUF) & 1;
    const unsigned bufA = sb + b * Sm::kStrideA, bufB = sb + Sm::oB + b * Sm::kStrideB;
    cuda::mbar_wait(&bar[b], parity);  // tiles A of this chunk
    // Phase 1: X = S^T W^T and O^T = S^T Q(s)^T, S^T split hi + lo in registers.
    std::uint32_t ah[K / 16][4], al[K / 16][4];
#pragma unroll
    for (int ks = 0; ks < K / 16; ++ks) acc_to_a(ah[ks], al[ks], st, ks);
    float xw[C / 8][4], ot[C / 8][4];  // written by the first wgmma of each (scale-d = 0)
    wg::fence();
    // Two groups: X (on the chain to the state update) first, then O^T's S^T part, which runs on
    // the tensor cores while this warpgroup forms Vn^T and splits it.
#pragma unroll
    for (int ks = 0; ks < K / 16; ++ks) {
      const unsigned kofs = ks * C * 32;
      const std::uint64_t wh = wg::desc(bufA + oWh + kofs, lC, kSbo);
      const std::uint64_t wl = wg::desc(bufA + oWl + kofs, lC, kSbo);
      if (ks == 0) wg::wgmma_n64<0>(xw, ah[ks], wl);
      else wg::wgmma_n64<1>(xw, ah[ks], wl);
      wg::wgmma_n64<1>(xw, al[ks], wh);
      wg::wgmma_n64<1>(xw, ah[ks], wh);
    }
    wg::commit();
#pragma unroll
    for (int ks = 0; ks < K / 16; ++ks) {
      const unsigned kofs = ks * C * 32;
      const std::uint64_t qh = wg::desc(bufA + Sm::oQh + kofs, lC, kSbo);
      if (ks == 0) wg::wgmma_n64<0>(ot, al[ks], qh);
      else wg::wgmma_n64<1>(ot, al[ks], qh);
      if constexpr (!kExact) {
        const std::uint64_t ql = wg::desc(bufA + Sm::oQl + kofs, lC, kSbo);
        wg::wgmma_n64<1>(ot, ah[ks], ql);
      }
      wg::wgmma_n64<1>(ot, ah[ks], qh);
    }
    wg::commit();
    wg::wait<1>();  // X done (O^T's group may still run)
    wg::keep(xw);
    const float4* sU = reinterpret_cast<const float4*>(smem_wg + b * Sm::kStrideA + Sm::oU);
    float vn[C / 8][4];  // Vn^T = U^T - S^T W^T, element (v, c) of this lane's slots
    wg_vn(vn, xw, sU, warp, lane);
    cuda::mbar_wait(&bar[NBUF + b], parity);  // tiles B of this chunk (ed)
    std::uint32_t vh[C / 16][4], vl[C / 16][4];
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc) acc_to_a(vh[kc], vl[kc], vn, kc);
    std::uint32_t dh[kExact ? C / 16 : 1][4], dl[kExact ? C / 16 : 1][4];
    if constexpr (kExact) {
      const float* sEd = reinterpret_cast<const float*>(smem_wg + Sm::oB + b * Sm::kStrideB +
                                                        Sm::oEd);
      wg_scale_cols(vn, vn, sEd, tig);
#pragma unroll
      for (int kc = 0; kc < C / 16; ++kc) acc_to_a(dh[kc], dl[kc], vn, kc);
    }
#pragma unroll
    for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] *= decay;
    wg::wait<0>();  // O^T's S^T part done
    wg::keep(ot);
    if constexpr (kExact) {  // O^T columns (tokens) scaled by eq before the P fold adds in
      const float* sEq = reinterpret_cast<const float*>(smem_wg + b * Sm::kStrideA + Sm::oEq);
      wg_scale_cols(ot, ot, sEq, tig);
    }
    __syncthreads();  // every warp is done with tiles A (its wgmmas completed at wait<0>)
    if (cg + NBUF < c_end && threadIdx.x == 0) issue_a(cg + NBUF);
    // Phase 2: S^T += Vn^T Kd (or (Vn^T diag(ed)) K) and O^T += Vn^T P^T, A operands split.
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < C / 16; ++kc) {
      const std::uint64_t kh = wg::desc(bufB + Sm::oKh + kc * K * 32, lK, kSbo);
      const std::uint64_t ph = wg::desc(bufB + Sm::oPh + kc * C * 32, lC, kSbo);
      const std::uint64_t pl = wg::desc(bufB + Sm::oPl + kc * C * 32, lC, kSbo);
      if constexpr (kExact) {
        wg::wgmma_nk<K>(st, dl[kc], kh);
        wg::wgmma_nk<K>(st, dh[kc], kh);
      } else {
        const std::uint64_t kl = wg::desc(bufB + Sm::oKl + kc * K * 32, lK, kSbo);
        wg::wgmma_nk<K>(st, vh[kc], kl);
        wg::wgmma_nk<K>(st, vl[kc], kh);
        wg::wgmma_nk<K>(st, vh[kc], kh);
      }
      wg::wgmma_n64<1>(ot, vh[kc], pl);
      wg::wgmma_n64<1>(ot, vl[kc], ph);
      wg::wgmma_n64<1>(ot, vh[kc], ph);
    }
    wg::commit();
    wg::wait<0>();
    wg::keep(st);
    wg::keep(ot);
    // O^T -> token rows in shared memory, then whole 16-byte pieces to o.
    wg_stage_o<TOut, Sm>(ot, smem_wg);
    __syncthreads();  // every warp is done with tiles B; sO complete
    if (cg + NBUF < c_end && threadIdx.x == 0) issue_b(cg + NBUF);
    wg_store_o<TOut, Sm>(p, smem_wg, tok0, len, h, slice);
  }
  store_state<K, V>(st, p, nh, v0);
#else
  (void)p;
  __trap();  // launched only where the sm_90a image runs (use_wg_state)
#endif
}

// The pipelined pass (v9): wy_tc_state_wg9.cuh.
#include "cuda/wy_tc/wy_tc_state_wg9.cuh"
