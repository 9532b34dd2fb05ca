// Segment transitions on the host: see segment_ref.hpp. The chunk step mirrors the wy-fp32 kernels
// (src/cuda/wy/wy_fp32.cu) operation for operation: padded rows of a partial chunk carry g = 0,
// beta = 0 and zero q/k/v; W and U come from one forward substitution on [diag(beta exp G) K |
// diag(beta) V]; Gam is formed as exp(G_i - G_j) only for i >= j.
#include "ref/segment_ref.hpp"

#include <algorithm>
#include <cmath>

namespace gdn::ref {
namespace {

// One chunk of one (sequence, value head), prepared in precision R.
template <typename R>
struct Chunk {
  int C = 0, K = 0, V = 0, len = 0;
  std::vector<R> G;       // [C] in-chunk cumulative log-decay
  std::vector<R> qn, kn;  // [C, K] (l2-normalized if requested)
  std::vector<R> W;       // [C, K] = (I + A)^-1 diag(beta exp G) K
  std::vector<R> U;       // [C, V] = (I + A)^-1 diag(beta) V
  std::vector<R> P;       // [C, C] = (Q K^T .* Gam), lower incl. diagonal, zero above
};

template <typename R>
R inv_norm(const R* x, int n) {
  R ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  return R(1) / std::sqrt(ss + R(1e-6));
}

template <typename R>
Chunk<R> prepare(const Problem& p, const SegmentInputs& in, std::int64_t t0, int len, int h,
                 int C) {
  const int K = p.K, V = p.V, HK = p.HK, HV = p.HV, kh = p.kv_head(h);
  Chunk<R> c;
  c.C = C, c.K = K, c.V = V, c.len = len;
  c.G.assign(C, 0);
  c.qn.assign(std::size_t(C) * K, 0);
  c.kn.assign(std::size_t(C) * K, 0);
  std::vector<R> beta(C, 0), vv(std::size_t(C) * V, 0);
  R acc = 0;
  for (int i = 0; i < C; ++i) {
    if (i < len) {
      const std::int64_t t = t0 + i;
      acc += R(in.g[t * HV + h]);
      beta[i] = R(in.beta[t * HV + h]);
      for (int d = 0; d < K; ++d) {
        c.qn[i * K + d] = R(in.q[(t * HK + kh) * K + d]);
        c.kn[i * K + d] = R(in.k[(t * HK + kh) * K + d]);
      }
      for (int d = 0; d < V; ++d) vv[i * V + d] = R(in.v[(t * HV + h) * V + d]);
      if (p.qk_l2norm) {
        const R rq = inv_norm(&c.qn[i * K], K), rk = inv_norm(&c.kn[i * K], K);
        for (int d = 0; d < K; ++d) c.qn[i * K + d] *= rq, c.kn[i * K + d] *= rk;
      }
    }
    c.G[i] = acc;
  }
  auto dot = [&](const R* a, const R* b) {
    R s = 0;
    for (int d = 0; d < K; ++d) s += a[d] * b[d];
    return s;
  };
  // A (strict lower) and P (lower incl. diagonal); the exponent is <= 0 where it is evaluated.
  std::vector<R> A(std::size_t(C) * C, 0);
  c.P.assign(std::size_t(C) * C, 0);
  for (int i = 0; i < C; ++i)
    for (int j = 0; j <= i; ++j) {
      const R gam = std::exp(c.G[i] - c.G[j]);
      if (j < i) A[i * C + j] = beta[i] * gam * dot(&c.kn[i * K], &c.kn[j * K]);
      c.P[i * C + j] = gam * dot(&c.qn[i * K], &c.kn[j * K]);
    }
  // Forward substitution, one column of [W | U] at a time: X_i = B_i - sum_{j<i} A_ij X_j.
  c.W.assign(std::size_t(C) * K, 0);
  c.U.assign(std::size_t(C) * V, 0);
  for (int col = 0; col < K + V; ++col) {
    R* X = col < K ? &c.W[col] : &c.U[col - K];
    const int ld = col < K ? K : V;
    for (int i = 0; i < C; ++i) {
      R b = col < K ? beta[i] * std::exp(c.G[i]) * c.kn[i * K + col] : beta[i] * vv[i * V + col - K];
      for (int j = 0; j < i; ++j) b -= A[i * C + j] * X[j * ld];
      X[i * ld] = b;
    }
  }
  return c;
}

// S [K, V] <- chunk applied to S; writes o rows [len, V] (scaled) when `o` is non-null.
template <typename R>
void apply(const Chunk<R>& c, R scale, std::vector<R>& S, R* o) {
  const int C = c.C, K = c.K, V = c.V;
  std::vector<R> Vn(std::size_t(C) * V);
  for (int i = 0; i < C; ++i)
    for (int col = 0; col < V; ++col) {
      R s = 0;
      for (int d = 0; d < K; ++d) s += c.W[i * K + d] * S[d * V + col];
      Vn[i * V + col] = c.U[i * V + col] - s;
    }
  if (o) {
    for (int i = 0; i < c.len; ++i)
      for (int col = 0; col < V; ++col) {
        R qs = 0, pv = 0;
        for (int d = 0; d < K; ++d) qs += c.qn[i * K + d] * S[d * V + col];
        for (int j = 0; j <= i; ++j) pv += c.P[i * C + j] * Vn[j * V + col];
        o[i * V + col] = scale * (std::exp(c.G[i]) * qs + pv);
      }
  }
  const R GC = c.G[C - 1];
  const R eC = std::exp(GC);
  for (int d = 0; d < K; ++d)
    for (int col = 0; col < V; ++col) {
      R s = 0;
      for (int i = 0; i < C; ++i) s += std::exp(GC - c.G[i]) * c.kn[i * K + d] * Vn[i * V + col];
      S[d * V + col] = eC * S[d * V + col] + s;
    }
}

// M [K, K] <- (exp(G_C) I - Kd^T W) M.
template <typename R>
void apply_to_map(const Chunk<R>& c, std::vector<R>& M) {
  const int C = c.C, K = c.K;
  std::vector<R> WM(std::size_t(C) * K);
  for (int i = 0; i < C; ++i)
    for (int b = 0; b < K; ++b) {
      R s = 0;
      for (int d = 0; d < K; ++d) s += c.W[i * K + d] * M[d * K + b];
      WM[i * K + b] = s;
    }
  const R GC = c.G[C - 1];
  const R eC = std::exp(GC);
  for (int a = 0; a < K; ++a)
    for (int b = 0; b < K; ++b) {
      R s = 0;
      for (int i = 0; i < C; ++i) s += std::exp(GC - c.G[i]) * c.kn[i * K + a] * WM[i * K + b];
      M[a * K + b] = eC * M[a * K + b] - s;
    }
}

}  // namespace

template <typename R>
SegmentOutputs prefill_segmented(const Problem& p, const SegmentInputs& in, int segments,
                                 int chunk, std::vector<Affine>* maps) {
  const int K = p.K, V = p.V, HV = p.HV, N = in.N, C = chunk;
  const bool vk = p.state_layout == StateLayout::vk;
  const std::int64_t T = in.cu_seqlens[N];
  SegmentOutputs out;
  out.o.assign(std::size_t(T) * HV * V, 0);
  out.hT.assign(std::size_t(N) * HV * K * V, 0);
  if (maps) maps->assign(std::size_t(N) * HV * segments, {});
  const R scale = R(p.scale);
  for (int n = 0; n < N; ++n) {
    const std::int64_t t0 = in.cu_seqlens[n], len = in.cu_seqlens[n + 1] - t0;
    const int nch = static_cast<int>((len + C - 1) / C);
    const int per = (nch + segments - 1) / segments;  // chunks per segment (last ones may be short)
    for (int h = 0; h < HV; ++h) {
      const std::size_t sbase = (std::size_t(n) * HV + h) * K * V;
      std::vector<R> S0(std::size_t(K) * V, 0);
      if (in.h0)
        for (int d = 0; d < K; ++d)
          for (int col = 0; col < V; ++col)
            S0[d * V + col] = R(in.h0[sbase + (vk ? std::size_t(col) * K + d : std::size_t(d) * V + col)]);
      auto chunk_at = [&](int ci) {
        const std::int64_t a = t0 + std::int64_t(ci) * C;
        return prepare<R>(p, in, a, static_cast<int>(std::min<std::int64_t>(C, t0 + len - a)), h, C);
      };
      auto seg_range = [&](int s) {
        const int c0 = std::min(nch, s * per), c1 = std::min(nch, (s + 1) * per);
        return std::pair<int, int>(c0, c1);
      };
      // Phase 1: every segment's (M, B), independent of the others.
      std::vector<std::vector<R>> Ms(segments), Bs(segments);
      for (int s = 0; s < segments; ++s) {
        std::vector<R>& M = Ms[s];
        M.assign(std::size_t(K) * K, 0);
        for (int d = 0; d < K; ++d) M[d * K + d] = 1;
        Bs[s].assign(std::size_t(K) * V, 0);
        auto [c0, c1] = seg_range(s);
        for (int ci = c0; ci < c1; ++ci) {
          const Chunk<R> c = chunk_at(ci);
          apply_to_map(c, M);
          apply(c, scale, Bs[s], static_cast<R*>(nullptr));
        }
        if (maps) {
          Affine& m = (*maps)[(std::size_t(n) * HV + h) * segments + s];
          m.M.assign(Ms[s].begin(), Ms[s].end());
          m.B.assign(Bs[s].begin(), Bs[s].end());
        }
      }
      // Phase 2: sequential scan of the maps gives each segment's true initial state.
      std::vector<std::vector<R>> Sin(segments + 1);
      Sin[0] = S0;
      for (int s = 0; s < segments; ++s) {
        Sin[s + 1] = Bs[s];
        for (int a = 0; a < K; ++a)
          for (int col = 0; col < V; ++col) {
            R acc = 0;
            for (int b = 0; b < K; ++b) acc += Ms[s][a * K + b] * Sin[s][b * V + col];
            Sin[s + 1][a * V + col] += acc;
          }
      }
      // Phase 3: rerun each segment from its true initial state, writing o.
      std::vector<R> S, orow(std::size_t(C) * V);
      for (int s = 0; s < segments; ++s) {
        S = Sin[s];
        auto [c0, c1] = seg_range(s);
        for (int ci = c0; ci < c1; ++ci) {
          const Chunk<R> c = chunk_at(ci);
          apply(c, scale, S, orow.data());
          for (int i = 0; i < c.len; ++i)
            for (int col = 0; col < V; ++col)
              out.o[((t0 + std::int64_t(ci) * C + i) * HV + h) * V + col] = double(orow[i * V + col]);
        }
        if (s == segments - 1)
          for (int d = 0; d < K; ++d)
            for (int col = 0; col < V; ++col)
              out.hT[sbase + (vk ? std::size_t(col) * K + d : std::size_t(d) * V + col)] =
                  double(S[d * V + col]);
      }
    }
  }
  return out;
}

template SegmentOutputs prefill_segmented<double>(const Problem&, const SegmentInputs&, int, int,
                                                  std::vector<Affine>*);
template SegmentOutputs prefill_segmented<float>(const Problem&, const SegmentInputs&, int, int,
                                                 std::vector<Affine>*);

}  // namespace gdn::ref
