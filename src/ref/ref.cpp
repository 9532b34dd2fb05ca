// fp64 oracles: serial recurrence and chunked WY form (see ref.hpp for the variant list).
// Parallel over (sequence, value head) tasks with std::thread; each task owns its state and
// writes disjoint output rows, so results do not depend on the thread count.
#include "ref/ref.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

namespace gdn::ref {
namespace {

template <typename F>
void parallel_for(int n, int threads, F&& f) {
  int nt = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  nt = std::max(1, std::min(nt, n));
  if (nt == 1) {
    for (int i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < nt; ++w)
    pool.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) f(i);
    });
  for (auto& t : pool) t.join();
}

// q, k normalized per (token, head) when l2norm is set; otherwise the caller's arrays.
struct QK {
  std::vector<double> qn, kn;
  const double* q;
  const double* k;
};
QK prepare_qk(const Geometry& geo, const double* q, const double* k) {
  QK r{{}, {}, q, k};
  if (!geo.l2norm) return r;
  const std::int64_t rows = geo.T() * geo.HK;
  r.qn.assign(q, q + rows * geo.K);
  r.kn.assign(k, k + rows * geo.K);
  for (auto* x : {&r.qn, &r.kn})
    for (std::int64_t i = 0; i < rows; ++i) {
      double* p = x->data() + i * geo.K;
      double ss = 0;
      for (int d = 0; d < geo.K; ++d) ss += p[d] * p[d];
      const double inv = 1.0 / std::sqrt(ss + 1e-6);
      for (int d = 0; d < geo.K; ++d) p[d] *= inv;
    }
  r.q = r.qn.data();
  r.k = r.kn.data();
  return r;
}

void load_state(const Geometry& geo, const double* h0, int n, int h, std::vector<double>& S) {
  const int K = geo.K, V = geo.V;
  S.assign(static_cast<std::size_t>(K) * V, 0.0);
  if (!h0) return;
  const double* src = h0 + (static_cast<std::int64_t>(n) * geo.HV + h) * K * V;
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < V; ++j) S[i * V + j] = geo.state_vk ? src[j * K + i] : src[i * V + j];
}
void store_state(const Geometry& geo, double* hT, int n, int h, const std::vector<double>& S) {
  if (!hT) return;
  const int K = geo.K, V = geo.V;
  double* dst = hT + (static_cast<std::int64_t>(n) * geo.HV + h) * K * V;
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < V; ++j) (geo.state_vk ? dst[j * K + i] : dst[i * V + j]) = S[i * V + j];
}

// Runs `body(n, h, S)` per task with S loaded from h0; stores S to hT afterwards. When hT
// aliases h0 every task reads its own slice before writing it, so aliasing is safe.
template <typename Body>
void for_each_head(const Geometry& geo, const double* h0, double* hT, Body&& body) {
  parallel_for(geo.N * geo.HV, geo.threads, [&](int task) {
    const int n = task / geo.HV, h = task % geo.HV;
    std::vector<double> S;
    load_state(geo, h0, n, h, S);
    body(n, h, S.data());
    store_state(geo, hT, n, h, S);
  });
}

}  // namespace

void serial_step(int K, int V, const double* q_K, const double* k_K, const double* v_V, double g,
                 double beta, double scale, double* S_KV, double* o_V) {
  const double a = std::exp(g);
  std::vector<double> u(V);
  for (int i = 0; i < K * V; ++i) S_KV[i] *= a;
  for (int j = 0; j < V; ++j) {
    double sk = 0;
    for (int i = 0; i < K; ++i) sk += S_KV[i * V + j] * k_K[i];
    u[j] = beta * (v_V[j] - sk);
  }
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < V; ++j) S_KV[i * V + j] += k_K[i] * u[j];
  if (!o_V) return;
  for (int j = 0; j < V; ++j) {
    double s = 0;
    for (int i = 0; i < K; ++i) s += S_KV[i * V + j] * q_K[i];
    o_V[j] = scale * s;
  }
}

void chunk_step(int L, int K, int V, const double* q_LK, const double* k_LK, std::int64_t ldk,
                const double* v_LV, std::int64_t ldv, const double* g_L, const double* beta_L,
                std::int64_t ldg, double scale, double* S_KV, double* o_LV) {
  if (L <= 0) return;
  auto qr = [&](int t) { return q_LK + t * ldk; };
  auto kr = [&](int t) { return k_LK + t * ldk; };
  std::vector<double> G(L), A(static_cast<std::size_t>(L) * L, 0.0);
  double acc = 0;
  for (int t = 0; t < L; ++t) G[t] = (acc += g_L[t * ldg]);
  auto dot = [&](const double* x, const double* y) {
    double s = 0;
    for (int d = 0; d < K; ++d) s += x[d] * y[d];
    return s;
  };
  // Gam_ij = exp(G_i - G_j) for i >= j only: the mask is applied before the exp.
  auto gam = [&](int i, int j) { return std::exp(G[i] - G[j]); };
  for (int i = 0; i < L; ++i)
    for (int j = 0; j < i; ++j) A[i * L + j] = beta_L[i * ldg] * dot(kr(i), kr(j)) * gam(i, j);
  // (I + A) W = diag(beta exp(G)) K and (I + A) U = diag(beta) V by forward substitution.
  std::vector<double> W(static_cast<std::size_t>(L) * K), U(static_cast<std::size_t>(L) * V);
  for (int i = 0; i < L; ++i) {
    const double b = beta_L[i * ldg], e = std::exp(G[i]);
    for (int d = 0; d < K; ++d) W[i * K + d] = b * e * kr(i)[d];
    for (int d = 0; d < V; ++d) U[i * V + d] = b * v_LV[i * ldv + d];
    for (int j = 0; j < i; ++j) {
      const double a = A[i * L + j];
      if (a == 0) continue;
      for (int d = 0; d < K; ++d) W[i * K + d] -= a * W[j * K + d];
      for (int d = 0; d < V; ++d) U[i * V + d] -= a * U[j * V + d];
    }
  }
  // Vn = U - W S.
  std::vector<double>& Vn = U;
  for (int i = 0; i < L; ++i)
    for (int kk = 0; kk < K; ++kk) {
      const double w = W[i * K + kk];
      if (w == 0) continue;
      const double* s = S_KV + kk * V;
      for (int d = 0; d < V; ++d) Vn[i * V + d] -= w * s[d];
    }
  if (o_LV) {
    // O = scale (diag(exp G) Q S + (Q K^T .* Gam, lower incl. diag) Vn), with the old S.
    for (int i = 0; i < L; ++i) {
      double* o = o_LV + i * ldv;
      std::fill(o, o + V, 0.0);
      const double e = std::exp(G[i]);
      for (int kk = 0; kk < K; ++kk) {
        const double w = e * qr(i)[kk];
        if (w == 0) continue;
        for (int d = 0; d < V; ++d) o[d] += w * S_KV[kk * V + d];
      }
      for (int j = 0; j <= i; ++j) {
        const double w = dot(qr(i), kr(j)) * gam(i, j);
        for (int d = 0; d < V; ++d) o[d] += w * Vn[j * V + d];
      }
      for (int d = 0; d < V; ++d) o[d] *= scale;
    }
  }
  // S' = exp(G_last) S + (diag(exp(G_last - G)) K)^T Vn.
  const double eL = std::exp(G[L - 1]);
  for (int i = 0; i < K * V; ++i) S_KV[i] *= eL;
  for (int j = 0; j < L; ++j) {
    const double e = gam(L - 1, j);
    for (int kk = 0; kk < K; ++kk) {
      const double w = e * kr(j)[kk];
      if (w == 0) continue;
      for (int d = 0; d < V; ++d) S_KV[kk * V + d] += w * Vn[j * V + d];
    }
  }
}

void serial(const Geometry& geo, const double* q, const double* k, const double* v,
            const double* g, const double* beta, const double* h0, double* o, double* hT) {
  const QK qk = prepare_qk(geo, q, k);
  const int HK = geo.HK, HV = geo.HV, K = geo.K, V = geo.V;
  for_each_head(geo, h0, hT, [&](int n, int h, double* S) {
    const int kh = geo.kv_head(h);
    for (std::int64_t t = geo.cu[n]; t < geo.cu[n + 1]; ++t)
      serial_step(K, V, qk.q + (t * HK + kh) * K, qk.k + (t * HK + kh) * K, v + (t * HV + h) * V,
                  g[t * HV + h], beta[t * HV + h], geo.scale, S, o + (t * HV + h) * V);
  });
}

void chunked(const Geometry& geo, const double* q, const double* k, const double* v,
             const double* g, const double* beta, const double* h0, double* o, double* hT,
             int chunk) {
  const QK qk = prepare_qk(geo, q, k);
  const int HK = geo.HK, HV = geo.HV, K = geo.K, V = geo.V;
  chunk = std::max(1, chunk);
  for_each_head(geo, h0, hT, [&](int n, int h, double* S) {
    const int kh = geo.kv_head(h);
    for (std::int64_t t0 = geo.cu[n]; t0 < geo.cu[n + 1]; t0 += chunk) {
      const int L = static_cast<int>(std::min<std::int64_t>(chunk, geo.cu[n + 1] - t0));
      chunk_step(L, K, V, qk.q + (t0 * HK + kh) * K, qk.k + (t0 * HK + kh) * K,
                 static_cast<std::int64_t>(HK) * K, v + (t0 * HV + h) * V,
                 static_cast<std::int64_t>(HV) * V, g + t0 * HV + h, beta + t0 * HV + h, HV,
                 geo.scale, S, o + (t0 * HV + h) * V);
    }
  });
}

}  // namespace gdn::ref
