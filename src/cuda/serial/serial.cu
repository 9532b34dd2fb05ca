// Serial arm: the gated delta rule one token at a time, fp32 state in registers (DESIGN.md §1).
// The original engine's "cols_pipe" baseline, and the fastest path for short sequences.
//
// Variants in this file (one kernel template; the launcher dispatches):
//   serial_prefill_kernel<K = 64 | 128, TIn = f32 | f16 | bf16, TOut = TIn | f32>
//     runtime options (warp-uniform branches): q/k L2 norm, head map, state layout, beta dtype.
//
// Decomposition: grid (N sequences, HV value heads, V / kSliceV column slices of V). A block is
// kWarps *independent* warps (no shared memory, no barriers); warp w owns kCols columns of the
// state, lane l owns rows l + 32 r (r < K / 32) of them: (K / 32) x kCols fp32 registers per lane.
// Rows strided by 32 make every q/k load one coalesced 32-lane access. Reductions over K are warp
// shuffles in a fixed order (bitwise reproducible, no atomics): a reduce-scatter leaves each
// column's sum in its owner lanes (which also load that column's v and store its o), and u is
// gathered back with one shuffle per column. Each warp reads its slice of h0 before it writes
// the same slice of hT, so hT may alias h0.
//
// Per token, exactly the order of DESIGN.md §1:
//   S = exp(g) S;  u = beta (v - S^T k);  S += k u^T;  o = scale S^T q
// The next token's q, k, v, g, beta are loaded into registers before the current token's math,
// so their latency hides behind it.
//
// Cost model (qwen3.5-27b: HK=16 HV=48 K=V=128, one sequence, H200: 132 SMs, ~1.98 GHz):
//   blocks = 48 x 128/16 = 384 of 4 warps -> 11.6 warps per SM (max 12: ~3 per scheduler).
//   SASS per warp per token (bf16, K=128, no l2norm): 192 instructions — 48 FFMA for
//   S^T k / update / S^T q, 16 FMUL decay, 16 SHFL + 14 FADD + 12 FSEL for the two
//   reduce-scatters and the u gather, 12 LDG, ~40 address/convert/loop, expf.
//   Issue bound: 3 warps x 192 = ~580 cycles per token per scheduler (SHFL: 12 x 16 = 192 per
//   SM, not binding). Loop-carried critical path: decay + 4-deep FFMA chain (~20) + 5 shuffle
//   levels (~5 x 28) + u (~8) + gather shuffle (~24) + update FFMA (4) = ~200 cycles, below the
//   issue bound, so the kernel is issue bound: ~580 cycles = ~0.29 us per token
//   -> T = 32768 in ~10 ms (target <= 30 ms; fla's recurrent kernel: 47.5 ms).
#include <cstdint>
#include <string>

#include "cuda/common/common.cuh"

namespace gdn::detail {
namespace {

// Tile configuration of the serial kernel.
template <int K_>
struct SerialTile {
  static constexpr int K = K_;
  // A warp spans all of K, so the reductions over K stay inside one warp (shuffles, no smem).
  static constexpr int kRows = K / 32;
  // Columns per warp: 4 gives 4 independent FFMA chains and shuffles in flight per warp (ILP
  // against the ~24-cycle shuffle latency) with kRows x 4 = 16 state registers at K = 128; a
  // power of two for the reduce-scatter.
  static constexpr int kCols = 4;
  // Warps per block: 4 warps share one head's q/k stream through L1 (one fetch, four readers).
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  // 16 columns per block: HV = 48, V = 128 gives 384 blocks on 132 SMs (2.9 per SM, max 3:
  // 97% balance); V must be a multiple of this.
  static constexpr int kSliceV = kCols * kWarps;
  static_assert(K % 32 == 0 && K >= 32, "a warp's lanes split K evenly");
  static_assert(kRows * kCols <= 64, "state registers per lane: keep well under the 255 limit");
  static_assert(kCols >= 1 && kCols <= 32 && (kCols & (kCols - 1)) == 0,
                "the warp reduce-scatter halves the columns log2(kCols) times");
};

struct SerialParams {
  const void* q;     // [T, HK, K] TIn
  const void* k;     // [T, HK, K] TIn
  const void* v;     // [T, HV, V] TIn
  const float* g;    // [T, HV]
  const void* beta;  // [T, HV] f32 or bf16
  void* o;           // [T, HV, V] TOut
  const float* h0;   // [N, HV, K, V] or [N, HV, V, K]; may be null
  float* hT;         // same; may be null; may equal h0
  const std::int32_t* cu_seqlens;  // device [N+1]
  std::int64_t q_st, q_sh, k_st, k_sh, v_st, v_sh, g_st, g_sh, b_st, b_sh, o_st, o_sh;
  int HK, HV, V;
  int group;  // HV / HK
  float scale;
  bool tiled, vk, l2norm, beta_bf16;
};

template <int N>
__device__ __forceinline__ void warp_allreduce(float (&x)[N]) {
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1)
#pragma unroll
    for (int c = 0; c < N; ++c) x[c] += __shfl_xor_sync(0xffffffffu, x[c], m);
}

// Warp reduce-scatter of C (a power of two) columns: on entry x[c] is this lane's partial of
// column c; returns the warp-wide sum of column owned_col<C>(lane), held with the same bits by
// the 32 / C lanes that own it. log2(C) halving steps (C - 1 shuffles) then 5 - log2(C) butterfly
// steps: 6 shuffles for C = 4 where an all-reduce takes 20.
template <int C>
__device__ __forceinline__ float warp_reduce_scatter(float (&x)[C], int lane) {
#pragma unroll
  for (int s = 0, m = 16; (C >> s) > 1; ++s, m >>= 1) {
    const int half = (C >> s) / 2;
    const bool hi = lane & m;  // the upper half of the remaining columns stays with this lane
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = hi ? x[i] : x[i + half];
      const float keep = hi ? x[i + half] : x[i];
      x[i] = keep + __shfl_xor_sync(0xffffffffu, send, m);
    }
  }
  float r = x[0];
#pragma unroll
  for (int m = 16 / C; m >= 1; m >>= 1) r += __shfl_xor_sync(0xffffffffu, r, m);
  return r;
}
// The column whose sum warp_reduce_scatter leaves in `lane`.
template <int C>
__device__ __forceinline__ int owned_col(int lane) {
  int col = 0;
#pragma unroll
  for (int s = 0, m = 16; (C >> s) > 1; ++s, m >>= 1)
    if (lane & m) col += (C >> s) / 2;
  return col;
}
// The lowest lane that owns column c (compile-time for unrolled c).
template <int C>
__host__ __device__ constexpr int owner_lane(int c) {
  int lane = 0;
  for (int s = 0; (C >> s) > 1; ++s) lane += ((c / ((C >> s) / 2)) & 1) * (16 >> s);
  return lane;
}

template <int K, typename TIn>
struct Token {
  TIn q[K / 32], k[K / 32];  // rows lane + 32 r
  TIn v;                     // column col0 + owned_col(lane)
  float g, beta;
};

template <int K, typename TIn, typename TOut>
__global__ void __launch_bounds__(SerialTile<K>::kThreads)
    serial_prefill_kernel(const SerialParams p) {
  using Tile = SerialTile<K>;
  constexpr int R = Tile::kRows, C = Tile::kCols;
  const int n = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col0 = blockIdx.z * Tile::kSliceV + warp * C;
  const int my_col = owned_col<C>(lane);
  const bool stores_o = (lane & (32 / C - 1)) == 0;  // one owner lane per column writes o
  const int kh = p.tiled ? h % p.HK : h / p.group;
  const std::int64_t t0 = p.cu_seqlens[n], t1 = p.cu_seqlens[n + 1];

  // Element (i, j) of this (n, h) state; rows i = lane + 32 r, columns j = col0 + c.
  const std::int64_t state0 = (static_cast<std::int64_t>(n) * p.HV + h) * K * p.V;
  auto state_at = [&](int r, int c) {
    const std::int64_t i = lane + 32 * r, j = col0 + c;
    return state0 + (p.vk ? j * K + i : i * p.V + j);
  };
  float S[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) S[r][c] = p.h0 ? p.h0[state_at(r, c)] : 0.f;

  // Pointers at token t0, advanced by one token stride per load (no 64-bit multiplies per token).
  const TIn* q = static_cast<const TIn*>(p.q) + t0 * p.q_st + kh * p.q_sh + lane;
  const TIn* k = static_cast<const TIn*>(p.k) + t0 * p.k_st + kh * p.k_sh + lane;
  const TIn* v = static_cast<const TIn*>(p.v) + t0 * p.v_st + h * p.v_sh + col0 + my_col;
  const float* g = p.g + t0 * p.g_st + h * p.g_sh;
  const char* beta = static_cast<const char*>(p.beta) +
                     (t0 * p.b_st + h * p.b_sh) * (p.beta_bf16 ? 2 : 4);
  const std::int64_t beta_step = p.b_st * (p.beta_bf16 ? 2 : 4);
  TOut* o = static_cast<TOut*>(p.o) + t0 * p.o_st + h * p.o_sh + col0 + my_col;
  auto load = [&](Token<K, TIn>& x) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      x.q[r] = q[32 * r];
      x.k[r] = k[32 * r];
    }
    x.v = *v;
    x.g = *g;
    x.beta = p.beta_bf16 ? cuda::to_f32(*reinterpret_cast<const __nv_bfloat16*>(beta))
                         : *reinterpret_cast<const float*>(beta);
    q += p.q_st;
    k += p.k_st;
    v += p.v_st;
    g += p.g_st;
    beta += beta_step;
  };

  Token<K, TIn> cur{}, nxt{};
  if (t0 < t1) load(cur);
  for (std::int64_t t = t0; t < t1; ++t) {
    // Next token's loads in flight during this token's math.
    if (t + 1 < t1) load(nxt);

    float kf[R], qf[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      kf[r] = cuda::to_f32(cur.k[r]);
      qf[r] = cuda::to_f32(cur.q[r]);
    }
    if (p.l2norm) {
      float ss[2] = {0.f, 0.f};
#pragma unroll
      for (int r = 0; r < R; ++r) {
        ss[0] = fmaf(kf[r], kf[r], ss[0]);
        ss[1] = fmaf(qf[r], qf[r], ss[1]);
      }
      warp_allreduce(ss);
      const float rk = rsqrtf(ss[0] + 1e-6f), rq = rsqrtf(ss[1] + 1e-6f);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        kf[r] *= rk;
        qf[r] *= rq;
      }
    }

    // S = exp(g) S; then S^T k: partials over this lane's rows, reduced onto the owner lanes.
    const float a = expf(cur.g);
    float sk[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      sk[c] = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        S[r][c] *= a;
        sk[c] = fmaf(S[r][c], kf[r], sk[c]);
      }
    }
    // u = beta (v - S^T k) for the owned column, then gathered so every lane has all C.
    const float u_mine = cur.beta * (cuda::to_f32(cur.v) - warp_reduce_scatter(sk, lane));

    // S += k u^T; then S^T q of the updated state.
    float so[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float u = __shfl_sync(0xffffffffu, u_mine, owner_lane<C>(c));
      so[c] = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        S[r][c] = fmaf(kf[r], u, S[r][c]);
        so[c] = fmaf(S[r][c], qf[r], so[c]);
      }
    }
    const float o_mine = p.scale * warp_reduce_scatter(so, lane);
    if (stores_o) *o = cuda::from_f32<TOut>(o_mine);
    o += p.o_st;
    cur = nxt;
  }

  if (p.hT) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) p.hT[state_at(r, c)] = S[r][c];
  }
}

template <int K, typename TIn, typename TOut>
Status launch(const SerialParams& prm, int N, int HV, int V, cudaStream_t stream) {
  using Tile = SerialTile<K>;
  const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>(HV),
                  static_cast<unsigned>(V / Tile::kSliceV));
  serial_prefill_kernel<K, TIn, TOut><<<grid, Tile::kThreads, 0, stream>>>(prm);
  GDN_CUDA_LAUNCH_CHECK("serial_prefill_kernel");
  return Status::Ok();
}

template <int K>
Status launch_k(const SerialParams& prm, DType io, DType out, int N, int HV, int V,
                cudaStream_t stream) {
  return cuda::dispatch_dtype(io, [&](auto tin) {
    using TIn = decltype(tin);
    if (out == DType::f32) return launch<K, TIn, float>(prm, N, HV, V, stream);
    return launch<K, TIn, TIn>(prm, N, HV, V, stream);
  });
}

}  // namespace

bool cuda_serial_supports(const Problem& p, std::string* why) {
  constexpr int slice = SerialTile<128>::kSliceV;
  static_assert(SerialTile<64>::kSliceV == slice, "one slice width for every K");
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return false;
  };
  // A warp spans K with K/32 rows per lane; only the two head sizes of the target models
  // (64, 128) are instantiated.
  if (p.K != 64 && p.K != 128)
    return say("serial arm supports K in {64, 128}, got K=" + std::to_string(p.K));
  // Whole column slices only (no masked tail slice).
  if (p.V % slice != 0)
    return say("serial arm needs V a multiple of " + std::to_string(slice) + ", got V=" +
               std::to_string(p.V));
  // Value heads index grid.y.
  if (p.HV > 65535) return say("serial arm supports HV <= 65535, got HV=" + std::to_string(p.HV));
  return true;
}

Status cuda_serial_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s,
                           std::uint64_t* size_only) {
  std::string why;
  if (!cuda_serial_supports(p, &why)) return Status::Unsupported(why);
  const cudaStream_t stream = cuda::stream_of(a);
  // Scratch: the device copy of the offsets, unless the caller gave one.
  const std::size_t scratch_bytes = a.cu_seqlens_device ? 0 : sizeof(std::int32_t) * (s.N + 1);
  if (size_only) {
    *size_only = scratch_bytes;
    return Status::Ok();
  }
  cuda::Scratch scratch(a);
  if (scratch_bytes) {
    Status st = scratch.alloc(scratch_bytes);
    if (!st.ok()) return st;
  }
  SerialParams prm{};
  Status st = cuda::device_cu_seqlens(a, s, scratch, 0, &prm.cu_seqlens);
  if (!st.ok()) return st;
  prm.q = a.q.data;
  prm.k = a.k.data;
  prm.v = a.v.data;
  prm.g = static_cast<const float*>(a.g.data);
  prm.beta = a.beta.data;
  prm.o = a.o.data;
  prm.h0 = a.h0.defined() ? static_cast<const float*>(a.h0.data) : nullptr;
  prm.hT = a.hT.defined() ? static_cast<float*>(a.hT.data) : nullptr;
  prm.q_st = a.q.stride[0];
  prm.q_sh = a.q.stride[1];
  prm.k_st = a.k.stride[0];
  prm.k_sh = a.k.stride[1];
  prm.v_st = a.v.stride[0];
  prm.v_sh = a.v.stride[1];
  prm.g_st = a.g.stride[0];
  prm.g_sh = a.g.stride[1];
  prm.b_st = a.beta.stride[0];
  prm.b_sh = a.beta.stride[1];
  prm.o_st = a.o.stride[0];
  prm.o_sh = a.o.stride[1];
  prm.HK = p.HK;
  prm.HV = p.HV;
  prm.V = p.V;
  prm.group = p.HV / p.HK;
  prm.scale = p.scale;
  prm.tiled = p.head_map == HeadMap::tiled;
  prm.vk = p.state_layout == StateLayout::vk;
  prm.l2norm = p.qk_l2norm;
  prm.beta_bf16 = a.beta.dtype == DType::bf16;
  if (p.K == 64) return launch_k<64>(prm, a.q.dtype, a.o.dtype, s.N, p.HV, p.V, stream);
  return launch_k<128>(prm, a.q.dtype, a.o.dtype, s.N, p.HV, p.V, stream);
}

}  // namespace gdn::detail
