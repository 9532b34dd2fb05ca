// The `cpu` arm: fp32 chunked WY (DESIGN.md §2, C = 64), multithreaded over (sequence, value head)
// tasks. Variants in this file:
//   cpu_prefill       the arm: per task, chunks of 64 tokens through five register-blocked GEMMs
//                     (K K^T / Q K^T, W S, Q S, P Vn, K^T Vn) and a forward-substitution solve
//   cpu_check_values  the host value scan (NaN/Inf, g > 0, beta outside [0, 1], h0 NaN)
// Each task owns its state and writes disjoint output rows, so results are bitwise identical for
// any thread count; hT may alias h0 because a task reads its h0 slice before writing its hT slice.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/internal.hpp"

namespace gdn::detail {
namespace {

// Tile configuration of the host GEMM micro-kernel.
struct CpuTile {
  static constexpr int C = 64;   // chunk length: the fla convention all arms share
  static constexpr int MR = 4;   // rows per micro-tile: 4 x 2 accumulators + 2 B + 1 A of 16 ymm
  static constexpr int NR = 16;  // cols per micro-tile: two 8-float AVX2 registers
  static constexpr int kMaxDim = 256;  // validate() caps K, V at 256
};
static_assert(CpuTile::C % CpuTile::MR == 0 && CpuTile::C % CpuTile::NR == 0);

inline int pad16(int x) { return (x + 15) / 16 * 16; }

// 8 fp32 lanes (one AVX2 register) as a GCC vector type: the micro-kernel below is written in
// whole registers so the accumulators stay in ymm registers (plain arrays got spilled).
typedef float v8f __attribute__((vector_size(32)));
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// C[M, N] (+|-)= A[M, P] B[P, N]; M % MR == 0, N % NR == 0 (buffers are zero-padded to that).
template <bool kSub>
void gemm(int M, int N, int P, const float* A, int lda, const float* B, int ldb, float* Cm,
          int ldc) {
  constexpr int MR = CpuTile::MR, NR = CpuTile::NR;
  static_assert(NR == 16, "two v8f per row");
  for (int i0 = 0; i0 < M; i0 += MR)
    for (int j0 = 0; j0 < N; j0 += NR) {
      v8f acc[MR][2] = {};
      const float* a0 = A + static_cast<std::ptrdiff_t>(i0) * lda;
      for (int p = 0; p < P; ++p) {
        const float* b = B + static_cast<std::ptrdiff_t>(p) * ldb + j0;
        const v8f b0 = load8(b), b1 = load8(b + 8);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
          const float a = a0[static_cast<std::ptrdiff_t>(r) * lda + p];
          acc[r][0] += a * b0;
          acc[r][1] += a * b1;
        }
      }
      for (int r = 0; r < MR; ++r) {
        float* cr = Cm + static_cast<std::ptrdiff_t>(i0 + r) * ldc + j0;
        for (int h = 0; h < 2; ++h)
          store8(cr + 8 * h, kSub ? load8(cr + 8 * h) - acc[r][h] : load8(cr + 8 * h) + acc[r][h]);
      }
    }
}

inline float load_elem(const void* base, DType dt, std::int64_t i) {
  switch (dt) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: {
      const std::uint32_t b = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(base)[i])
                              << 16;
      float x;
      std::memcpy(&x, &b, 4);
      return x;
    }
    case DType::f16: return static_cast<float>(static_cast<const _Float16*>(base)[i]);
  }
  return 0.f;
}
inline void store_elem(void* base, DType dt, std::int64_t i, float x) {
  switch (dt) {
    case DType::f32: static_cast<float*>(base)[i] = x; return;
    case DType::bf16: {
      std::uint32_t b;
      std::memcpy(&b, &x, 4);
      if ((b & 0x7fffffffu) > 0x7f800000u) b |= 0x00400000u;  // keep NaN a NaN
      else b += 0x7fffu + ((b >> 16) & 1u);                  // round to nearest even
      static_cast<std::uint16_t*>(base)[i] = static_cast<std::uint16_t>(b >> 16);
      return;
    }
    case DType::f16: static_cast<_Float16*>(base)[i] = static_cast<_Float16>(x); return;
  }
}

// Per-thread buffers, zero-padded: Kp = pad16(K), Vp = pad16(V), rows padded to C.
struct Work {
  int Kp, Vp;
  std::vector<float> S;    // [Kp, Vp] state
  std::vector<float> q, k;  // [C, Kp] chunk q (scaled by exp(G) later in qg), k
  std::vector<float> qg;   // [C, Kp] diag(exp G) Q
  std::vector<float> kT;   // [Kp, C] K^T, then (diag(exp(G_L - G)) K)^T
  std::vector<float> w;    // [C, Kp] W
  std::vector<float> u;    // [C, Vp] U, then Vn
  std::vector<float> o;    // [C, Vp] output rows
  std::vector<float> kk, qk;  // [C, C] K K^T and Q K^T, then A and P
  float G[CpuTile::C], beta[CpuTile::C];
  Work(int K, int V) : Kp(pad16(K)), Vp(pad16(V)) {
    const int C = CpuTile::C;
    S.assign(Kp * Vp, 0.f);
    q.assign(C * Kp, 0.f);
    k.assign(C * Kp, 0.f);
    qg.assign(C * Kp, 0.f);
    kT.assign(Kp * C, 0.f);
    w.assign(C * Kp, 0.f);
    u.assign(C * Vp, 0.f);
    o.assign(C * Vp, 0.f);
    kk.assign(C * C, 0.f);
    qk.assign(C * C, 0.f);
  }
};

void load_rows(const TensorView& t, std::int64_t t0, int L, int head, int D, int Dp, float* dst) {
  for (int r = 0; r < CpuTile::C; ++r) {
    float* d = dst + r * Dp;
    if (r >= L) {
      std::fill(d, d + Dp, 0.f);
      continue;
    }
    const std::int64_t base = offset3(t, t0 + r, head, 0);
    for (int i = 0; i < D; ++i) d[i] = load_elem(t.data, t.dtype, base + i);
  }
}

void l2norm_rows(float* x, int L, int K, int Kp) {
  for (int r = 0; r < L; ++r) {
    float ss = 0;
    for (int i = 0; i < K; ++i) ss += x[r * Kp + i] * x[r * Kp + i];
    const float inv = 1.f / std::sqrt(ss + 1e-6f);
    for (int i = 0; i < K; ++i) x[r * Kp + i] *= inv;
  }
}

// One chunk of L <= C tokens of one head: updates w.S, writes o rows.
void chunk(const Problem& p, const PrefillArgs& a, std::int64_t t0, int L, int h, Work& w) {
  constexpr int C = CpuTile::C;
  const int K = p.K, V = p.V, Kp = w.Kp, Vp = w.Vp, kh = p.kv_head(h);
  load_rows(a.q, t0, L, kh, K, Kp, w.q.data());
  load_rows(a.k, t0, L, kh, K, Kp, w.k.data());
  load_rows(a.v, t0, L, h, V, Vp, w.u.data());
  if (p.qk_l2norm) {
    l2norm_rows(w.q.data(), L, K, Kp);
    l2norm_rows(w.k.data(), L, K, Kp);
  }
  float acc = 0;
  for (int r = 0; r < C; ++r) {
    const bool in = r < L;
    acc += in ? a.g.data ? static_cast<const float*>(a.g.data)[offset2(a.g, t0 + r, h)] : 0.f : 0.f;
    w.G[r] = acc;
    w.beta[r] = in ? load_elem(a.beta.data, a.beta.dtype, offset2(a.beta, t0 + r, h)) : 0.f;
  }
  for (int r = 0; r < C; ++r)
    for (int i = 0; i < Kp; ++i) w.kT[i * C + r] = w.k[r * Kp + i];
  // K K^T and Q K^T (full C x C; the masks are applied below).
  std::fill(w.kk.begin(), w.kk.end(), 0.f);
  std::fill(w.qk.begin(), w.qk.end(), 0.f);
  gemm<false>(C, C, Kp, w.k.data(), Kp, w.kT.data(), C, w.kk.data(), C);
  gemm<false>(C, C, Kp, w.q.data(), Kp, w.kT.data(), C, w.qk.data(), C);
  // Gam_ij = exp(G_i - G_j) only for j <= i: masked before the exp, never a ratio of products.
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < C; ++j) {
      const float gm = j <= i ? std::exp(w.G[i] - w.G[j]) : 0.f;
      w.kk[i * C + j] = j < i ? w.beta[i] * w.kk[i * C + j] * gm : 0.f;  // A
      w.qk[i * C + j] = w.qk[i * C + j] * gm;                              // P
    }
  // (I + A) W = diag(beta exp G) K, (I + A) U = diag(beta) V: forward substitution.
  for (int i = 0; i < L; ++i) {
    float* wi = w.w.data() + i * Kp;
    float* ui = w.u.data() + i * Vp;
    const float b = w.beta[i], be = b * std::exp(w.G[i]);
    for (int d = 0; d < Kp; ++d) wi[d] = be * w.k[i * Kp + d];
    for (int d = 0; d < Vp; ++d) ui[d] *= b;
    for (int j = 0; j < i; ++j) {
      const float aij = w.kk[i * C + j];
      const float* wj = w.w.data() + j * Kp;
      const float* uj = w.u.data() + j * Vp;
      for (int d = 0; d < Kp; ++d) wi[d] -= aij * wj[d];
      for (int d = 0; d < Vp; ++d) ui[d] -= aij * uj[d];
    }
  }
  for (int i = L; i < C; ++i) {
    std::fill(w.w.begin() + i * Kp, w.w.begin() + (i + 1) * Kp, 0.f);
    std::fill(w.u.begin() + i * Vp, w.u.begin() + (i + 1) * Vp, 0.f);
  }
  // O = scale (diag(exp G) Q S + P Vn) with the state before this chunk; Vn = U - W S.
  for (int i = 0; i < C; ++i) {
    const float e = i < L ? std::exp(w.G[i]) : 0.f;
    for (int d = 0; d < Kp; ++d) w.qg[i * Kp + d] = e * w.q[i * Kp + d];
  }
  std::fill(w.o.begin(), w.o.end(), 0.f);
  gemm<false>(C, Vp, Kp, w.qg.data(), Kp, w.S.data(), Vp, w.o.data(), Vp);
  gemm<true>(C, Vp, Kp, w.w.data(), Kp, w.S.data(), Vp, w.u.data(), Vp);
  gemm<false>(C, Vp, C, w.qk.data(), C, w.u.data(), Vp, w.o.data(), Vp);
  for (int r = 0; r < L; ++r) {
    const std::int64_t base = offset3(a.o, t0 + r, h, 0);
    for (int d = 0; d < V; ++d) store_elem(a.o.data, a.o.dtype, base + d, p.scale * w.o[r * Vp + d]);
  }
  // S' = exp(G_last) S + (diag(exp(G_last - G)) K)^T Vn.
  const float GL = w.G[L - 1], eL = std::exp(GL);
  for (int r = 0; r < C; ++r) {
    const float e = r < L ? std::exp(GL - w.G[r]) : 0.f;
    for (int i = 0; i < Kp; ++i) w.kT[i * C + r] = e * w.k[r * Kp + i];
  }
  for (auto& x : w.S) x *= eL;
  gemm<false>(Kp, Vp, C, w.kT.data(), C, w.u.data(), Vp, w.S.data(), Vp);
}

int thread_count(int tasks) {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  if (const char* e = std::getenv("GDN_THREADS"); e && *e) n = std::atoi(e);
  return std::max(1, std::min(n, tasks));
}

}  // namespace

bool cpu_supports(const Problem& p, std::string* why) {
  if (p.K < 1 || p.K > CpuTile::kMaxDim || p.V < 1 || p.V > CpuTile::kMaxDim) {
    if (why) *why = "cpu arm supports K, V in 1..256";
    return false;
  }
  return true;
}

Status cpu_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s) {
  const int HV = p.HV, K = p.K, V = p.V;
  const bool vk = p.state_layout == StateLayout::vk;
  const int tasks = s.N * HV;
  const int nt = thread_count(tasks);
  // Allocate everything up front: nothing below can fail, so a failure leaves outputs untouched.
  std::vector<Work> work;
  try {
    work.reserve(nt);
    for (int i = 0; i < nt; ++i) work.emplace_back(K, V);
  } catch (const std::bad_alloc&) {
    return Status::Internal("cpu arm: out of host memory for work buffers");
  }
  const float* h0 = static_cast<const float*>(a.h0.data);
  float* hT = static_cast<float*>(a.hT.data);
  std::atomic<int> next{0};
  auto worker = [&](int wi) {
    Work& w = work[wi];
    const int Vp = w.Vp;
    for (int task; (task = next.fetch_add(1)) < tasks;) {
      const int n = task / HV, h = task % HV;
      const std::int64_t sl = (static_cast<std::int64_t>(n) * HV + h) * K * V;
      std::fill(w.S.begin(), w.S.end(), 0.f);
      if (h0)
        for (int i = 0; i < K; ++i)
          for (int j = 0; j < V; ++j) w.S[i * Vp + j] = vk ? h0[sl + j * K + i] : h0[sl + i * V + j];
      for (std::int64_t t0 = s.cu[n]; t0 < s.cu[n + 1]; t0 += CpuTile::C)
        chunk(p, a, t0, static_cast<int>(std::min<std::int64_t>(CpuTile::C, s.cu[n + 1] - t0)), h,
              w);
      if (hT)
        for (int i = 0; i < K; ++i)
          for (int j = 0; j < V; ++j) (vk ? hT[sl + j * K + i] : hT[sl + i * V + j]) = w.S[i * Vp + j];
    }
  };
  if (nt == 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    for (int i = 0; i < nt; ++i) pool.emplace_back(worker, i);
    for (auto& t : pool) t.join();
  }
  return Status::Ok();
}

namespace {
std::string where3(std::int64_t t, std::int64_t h, std::int64_t d) {
  return " (first at token " + std::to_string(t) + ", head " + std::to_string(h) + ", dim " +
         std::to_string(d) + ")";
}
Status scan3(const char* name, const TensorView& x, std::int64_t T) {
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < x.shape[1]; ++h)
      for (std::int64_t d = 0; d < x.shape[2]; ++d)
        if (!std::isfinite(load_elem(x.data, x.dtype, offset3(x, t, h, d))))
          return Status::Invalid(std::string(name) + " contains NaN/Inf" + where3(t, h, d));
  return Status::Ok();
}
}  // namespace

Status cpu_check_values(const Problem& p, const PrefillArgs& a, const Seqs& s) {
  Status st;
  if (!(st = scan3("q", a.q, s.T)).ok() || !(st = scan3("k", a.k, s.T)).ok() ||
      !(st = scan3("v", a.v, s.T)).ok())
    return st;
  for (std::int64_t t = 0; t < s.T; ++t)
    for (int h = 0; h < p.HV; ++h) {
      const float g = static_cast<const float*>(a.g.data)[offset2(a.g, t, h)];
      const std::string at = " at token " + std::to_string(t) + ", head " + std::to_string(h);
      if (!std::isfinite(g)) return Status::Invalid("g contains NaN/Inf" + at);
      if (g > 0.f)
        return Status::Invalid("g must be <= 0 (log-decay), got " + std::to_string(g) + at);
      const float b = load_elem(a.beta.data, a.beta.dtype, offset2(a.beta, t, h));
      if (!std::isfinite(b)) return Status::Invalid("beta contains NaN/Inf" + at);
      if (b < 0.f || b > 1.f)
        return Status::Invalid("beta must be in [0, 1], got " + std::to_string(b) + at);
    }
  if (a.h0.defined()) {
    const float* h0 = static_cast<const float*>(a.h0.data);
    for (std::int64_t i = 0; i < a.h0.numel(); ++i)
      if (!std::isfinite(h0[i]))
        return Status::Invalid("h0 contains NaN/Inf (first at flat index " + std::to_string(i) +
                               ")");
  }
  return Status::Ok();
}

}  // namespace gdn::detail
