// fp64 oracle for decode / verify with the derived elementwise error bound (docs/bounds_decode.md).
// Header-only; included by tests and `gdn bench --decode` only, never by libgdn.
//
// Streams over (n, h): computes the exact step(s) in fp64 from the stored inputs (decoded to
// float), propagates the first-order error bound of the fp32 implementation, and compares the
// implementation's outputs element by element. Memory stays O(K * V) besides the caller's arrays.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gdn::decode_ref {

struct RefProblem {
  int N = 0, T = 1, HK = 0, HV = 0, K = 0, V = 0;
  std::int64_t S = 0;
  bool grouped = true, l2norm = false, vk = false, fused_gate = false, beta_sigmoid = false;
  double scale = 1.0;
  double u_o = 0x1p-24;      // unit roundoff of o's dtype (f32 2^-24, f16 2^-11, bf16 2^-8)
  double u_state = 0.0;      // rounding of the stored state (0 for f32, 2^-8 for bf16)
};

// Inputs decoded to float, contiguous: q, k [N, T, HK, K]; v [N, T, HV, V]; g, a, beta
// [N, T, HV]; A_log, dt_bias [HV]; state0 [S, HV, K, V] (or [.., V, K]) before the call.
struct RefInputs {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const float *g = nullptr, *A_log = nullptr, *a = nullptr, *dt_bias = nullptr;
  const float* beta = nullptr;
  const float* state0 = nullptr;
  const std::int32_t* idx = nullptr;  // [N]
  const std::int32_t* acc = nullptr;  // [N] or null (all T)
};

// The implementation's results, decoded to float: o [N, T, HV, V]; state [S, HV, K, V] after
// the call; cache [N, T, HV, K, V] or null.
struct RefGot {
  const float* o = nullptr;
  const float* state = nullptr;
  const float* cache = nullptr;
};

struct Metric {
  double err2 = 0, ref2 = 0, max_abs = 0, max_util = 0;
  std::int64_t count = 0, bad = 0, nan_bad = 0, first_bad = -1;
  double first_bad_got = 0, first_bad_ref = 0, first_bad_bound = 0;
  double rel_rms() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }
  bool ok() const { return bad == 0 && nan_bad == 0; }
  std::string str(const char* name) const {
    char b[512];
    std::snprintf(b, sizeof b,
                  "%s: n=%lld rel_rms=%.3e max_abs=%.3e util=%.3f bad=%lld nan=%lld "
                  "first_bad=%lld (got %.9g ref %.9g bound %.3e)",
                  name, (long long)count, rel_rms(), max_abs, max_util, (long long)bad,
                  (long long)nan_bad, (long long)first_bad, first_bad_got, first_bad_ref,
                  first_bad_bound);
    return b;
  }
  // neg: the negative control — the got value is pushed 2.5 bounds further from ref.
  void add(double got, double ref, double bound, std::int64_t at, bool neg) {
    if (neg) got += (got >= ref ? 2.5 : -2.5) * bound;
    ++count;
    const double e = std::fabs(got - ref);
    const bool nan = std::isnan(got) && !std::isnan(ref);
    if (nan) ++nan_bad;
    if (!nan) {
      err2 += e * e;
      max_abs = std::max(max_abs, e);
    }
    ref2 += ref * ref;
    const double util = bound > 0 ? e / bound : (e > 0 ? INFINITY : 0.0);
    if (!nan) max_util = std::max(max_util, util);
    if (nan || !(e <= bound)) {
      if (!nan) ++bad;
      if (first_bad < 0) first_bad = at, first_bad_got = got, first_bad_ref = ref, first_bad_bound = bound;
    }
  }
};

struct Report {
  Metric o, state, cache;
  bool ok() const { return o.ok() && state.ok() && cache.ok(); }
  std::string str() const { return o.str("o") + "\n" + state.str("state") + "\n" + cache.str("cache"); }
};

inline Report compare(const RefProblem& P, const RefInputs& in, const RefGot& got, bool neg = false) {
  constexpr double u = 0x1p-24;  // fp32 unit roundoff
  auto gamma = [&](int n) { return n * u / (1 - n * u); };
  const int K = P.K, V = P.V, T = P.T;
  const std::int64_t tile = std::int64_t(K) * V;
  auto at = [&](int i, int j) { return P.vk ? std::int64_t(j) * K + i : std::int64_t(i) * V + j; };
  std::vector<double> S(tile), E(tile), q(K), k(K), uu(V), du(V), kvv(V);
  Report rep;
  const double dn = P.l2norm ? (K + 6) * u : 0.0;  // elementwise rel. error of normalized q, k
  for (int n = 0; n < P.N; ++n) {
    const int slot = in.idx[n];
    if (slot < 0) continue;
    const int acc = in.acc ? in.acc[n] : T;
    for (int h = 0; h < P.HV; ++h) {
      const int kh = P.grouped ? h / (P.HV / P.HK) : h % P.HK;
      const std::int64_t base = (std::int64_t(slot) * P.HV + h) * tile;
      for (std::int64_t e = 0; e < tile; ++e) S[e] = in.state0[base + e], E[e] = 0;
      auto check_state = [&](Metric& m, const float* arr, std::int64_t off) {
        for (std::int64_t e = 0; e < tile; ++e)
          m.add(arr[off + e], S[e], 1.01 * (E[e] + P.u_state * std::fabs(S[e])), off + e, neg);
      };
      if (acc == 0) check_state(rep.state, got.state, base);
      for (int t = 0; t < T; ++t) {
        const std::int64_t nt = std::int64_t(n) * T + t;
        double sq = 0, sk = 0;
        for (int i = 0; i < K; ++i) {
          q[i] = in.q[(nt * P.HK + kh) * K + i];
          k[i] = in.k[(nt * P.HK + kh) * K + i];
          sq += q[i] * q[i], sk += k[i] * k[i];
        }
        if (P.l2norm) {
          const double rq = 1 / std::sqrt(sq + 1e-6), rk = 1 / std::sqrt(sk + 1e-6);
          for (int i = 0; i < K; ++i) q[i] *= rq, k[i] *= rk;
        }
        double g, da = 3 * u;
        if (P.fused_gate) {
          const double x = double(in.a[nt * P.HV + h]) + in.dt_bias[h];
          g = -std::exp(double(in.A_log[h])) * (x > 20 ? x : std::log1p(std::exp(x)));
          da += (8 + std::fabs(x)) * u * std::fabs(g);
        } else {
          g = in.g[nt * P.HV + h];
        }
        const double a = std::exp(g);
        double beta = in.beta[nt * P.HV + h];
        const double db = P.beta_sigmoid ? 5 * u : 0.0;
        if (P.beta_sigmoid) beta = 1 / (1 + std::exp(-beta));
        double kq = 0, akq = 0;
        for (int i = 0; i < K; ++i) kq += k[i] * q[i], akq += std::fabs(k[i] * q[i]);
        const double cdot = gamma(K + 4) + 2 * dn + da;
        for (int j = 0; j < V; ++j) {
          double kv = 0, skv = 0, ekv = 0, asq = 0;
          for (int i = 0; i < K; ++i) {
            const double s = S[at(i, j)], ee = E[at(i, j)];
            kv += s * k[i], skv += std::fabs(s * k[i]), ekv += ee * std::fabs(k[i]);
            asq += std::fabs(s * q[i]);
          }
          const double vj = in.v[(nt * P.HV + h) * V + j];
          uu[j] = beta * (vj - a * kv);
          const double e_kv = a * ekv * (1 + dn) + (gamma(K + 3) + dn + da) * a * skv;
          du[j] = beta * e_kv + (3 * u + db) * beta * (std::fabs(vj) + a * std::fabs(kv));
          kvv[j] = asq;  // a-free sum |S_ij q_i| of the old state, for the o bound
        }
        for (int i = 0; i < K; ++i)
          for (int j = 0; j < V; ++j) {
            double& s = S[at(i, j)];
            double& ee = E[at(i, j)];
            ee = a * ee + (3 * u + da) * a * std::fabs(s) + std::fabs(k[i]) * du[j] +
                 (3 * u + dn) * std::fabs(k[i] * uu[j]);
            s = a * s + k[i] * uu[j];
          }
        for (int j = 0; j < V; ++j) {
          double o = 0, eo = 0;
          for (int i = 0; i < K; ++i) o += S[at(i, j)] * q[i], eo += E[at(i, j)] * std::fabs(q[i]);
          o *= P.scale;
          const double bound = P.scale * (eo + cdot * (a * kvv[j] + std::fabs(uu[j]) * akq)) +
                               P.u_o * std::fabs(o);
          const std::int64_t oi = (nt * P.HV + h) * V + j;
          rep.o.add(got.o[oi], o, 1.01 * bound, oi, neg);
        }
        if (t + 1 == acc) check_state(rep.state, got.state, base);
        if (got.cache) check_state(rep.cache, got.cache, (nt * P.HV + h) * tile);
      }
    }
  }
  return rep;
}

}  // namespace gdn::decode_ref

// ---- random fixtures shared by the CPU/GPU tests and the benchmark ----
#include <cstring>
#include <random>

#include "gdn/decode.hpp"

namespace gdn::decode_ref {

inline float bf16_bits_to_f32(std::uint16_t b) {
  std::uint32_t w = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
inline std::uint16_t f32_to_bf16_bits(float f) {  // round to nearest even (finite inputs)
  std::uint32_t w;
  std::memcpy(&w, &f, 4);
  w += 0x7fffu + ((w >> 16) & 1u);
  return std::uint16_t(w >> 16);
}
inline float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t s = (h >> 15) & 1u, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f = e == 0 ? std::ldexp(float(m), -24)
                   : (e == 31 ? (m ? NAN : INFINITY) : std::ldexp(float(m | 0x400u), int(e) - 25));
  return s ? -f : f;
}
// Storage of n elements in dtype d, with the decoded float values alongside.
struct Buf {
  DType dt = DType::f32;
  std::vector<unsigned char> raw;
  std::vector<float> val;
  void resize(DType d, std::size_t n) {
    dt = d;
    raw.assign(n * dtype_size(d), 0);
    val.assign(n, 0.f);
  }
  void set(std::size_t i, float x) {  // rounds x to the dtype; val holds what is stored
    if (dt == DType::f32) {
      std::memcpy(&raw[i * 4], &x, 4);
      val[i] = x;
    } else if (dt == DType::bf16) {
      const std::uint16_t b = f32_to_bf16_bits(x);
      std::memcpy(&raw[i * 2], &b, 2);
      val[i] = bf16_bits_to_f32(b);
    } else {  // f16 via round trip through the nearest representable value (|x| < 65504)
      int ex;
      std::frexp(x, &ex);
      const double ulp = std::ldexp(1.0, std::max(ex - 11, -24));
      const float r = float(std::nearbyint(x / ulp) * ulp);
      const std::uint32_t s = std::signbit(r) ? 0x8000u : 0u;
      const float a = std::fabs(r);
      std::uint16_t h;
      if (a < 0x1p-14f) h = std::uint16_t(s | std::uint32_t(std::ldexp(a, 24)));
      else {
        int e2;
        const float fr = std::frexp(a, &e2);
        h = std::uint16_t(s | std::uint32_t(e2 - 1 + 15) << 10 |
                          (std::uint32_t(std::ldexp(fr, 11)) & 0x3ffu));
      }
      std::memcpy(&raw[i * 2], &h, 2);
      val[i] = f16_bits_to_f32(h);
    }
  }
  // Re-decode val from raw (after an implementation wrote raw).
  void decode() {
    for (std::size_t i = 0; i < val.size(); ++i) {
      if (dt == DType::f32) std::memcpy(&val[i], &raw[i * 4], 4);
      else {
        std::uint16_t b;
        std::memcpy(&b, &raw[i * 2], 2);
        val[i] = dt == DType::bf16 ? bf16_bits_to_f32(b) : f16_bits_to_f32(b);
      }
    }
  }
  void* data() { return raw.data(); }
};

struct FixtureSpec {
  int N = 5, T = 1, HK = 2, HV = 6, K = 64, V = 64;
  std::int64_t S = 9;
  bool verify = false;  // rank-4 views ([N, T, ...]) even for T = 1
  HeadMap head_map = HeadMap::grouped;
  bool l2norm = true, fused_gate = false, beta_sigmoid = false, vk = false, cache = false;
  DType io = DType::bf16, o = DType::f32, state = DType::f32, beta = DType::f32, a = DType::f32;
  std::vector<std::int32_t> idx;  // [N]; empty: n -> (2n + 1) % S
  std::vector<std::int32_t> acc;  // [N] verify commit counts; empty: null (all T)
  std::uint64_t seed = 1;
};

struct Fixture {
  FixtureSpec spec;
  Problem prob;
  Buf q, k, v, o, g, A_log, a, dt_bias, beta, state, cache;
  std::vector<float> state0;  // pool before the call (decoded)

  explicit Fixture(const FixtureSpec& s) : spec(s) {
    prob = Problem::make(s.HK, s.HV, s.K, s.V);
    prob.head_map = s.head_map;
    prob.qk_l2norm = s.l2norm;
    prob.state_layout = s.vk ? StateLayout::vk : StateLayout::kv;
    if (spec.idx.empty())
      for (int n = 0; n < s.N; ++n) spec.idx.push_back(std::int32_t((2 * n + 1) % s.S));
    std::mt19937_64 rng(s.seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> ud(0.f, 1.f);
    const std::size_t NT = std::size_t(s.N) * s.T;
    q.resize(s.io, NT * s.HK * s.K);
    k.resize(s.io, NT * s.HK * s.K);
    for (std::size_t r = 0; r < NT * s.HK; ++r) {  // unit rows unless the kernel normalizes
      std::vector<float> x(s.K), y(s.K);
      double nx = 0, ny = 0;
      for (int i = 0; i < s.K; ++i) x[i] = nd(rng), y[i] = nd(rng), nx += x[i] * x[i], ny += y[i] * y[i];
      const float fx = s.l2norm ? 1.7f : float(1 / std::sqrt(nx));
      const float fy = s.l2norm ? 0.6f : float(1 / std::sqrt(ny));
      for (int i = 0; i < s.K; ++i) q.set(r * s.K + i, x[i] * fx), k.set(r * s.K + i, y[i] * fy);
    }
    v.resize(s.io, NT * s.HV * s.V);
    for (std::size_t i = 0; i < v.val.size(); ++i) v.set(i, nd(rng));
    o.resize(s.o, NT * s.HV * s.V);
    for (std::size_t i = 0; i < o.val.size(); ++i) o.set(i, -77.f);  // sentinel: "untouched"
    if (s.fused_gate) {
      A_log.resize(DType::f32, s.HV);
      dt_bias.resize(DType::f32, s.HV);
      a.resize(s.a, NT * s.HV);
      for (int h = 0; h < s.HV; ++h) A_log.set(h, 2 * ud(rng) - 1.5f), dt_bias.set(h, 2 * ud(rng) - 1);
      for (std::size_t i = 0; i < a.val.size(); ++i) a.set(i, 2.5f * nd(rng));
    } else {
      g.resize(DType::f32, NT * s.HV);
      for (std::size_t i = 0; i < g.val.size(); ++i)  // slow to fast decay
        g.set(i, -std::exp(4 * ud(rng) - 4.5f));
    }
    beta.resize(s.beta, NT * s.HV);
    for (std::size_t i = 0; i < beta.val.size(); ++i)
      beta.set(i, s.beta_sigmoid ? 2.f * nd(rng) : ud(rng));
    state.resize(s.state, std::size_t(s.S) * s.HV * s.K * s.V);
    for (std::size_t i = 0; i < state.val.size(); ++i) state.set(i, 0.3f * nd(rng));
    state0 = state.val;
    if (s.cache) {
      cache.resize(s.state, NT * s.HV * s.K * s.V);
      for (std::size_t i = 0; i < cache.val.size(); ++i) cache.set(i, -55.f);
    }
  }

  // Pointers where the implementation reads/writes: host storage, or device copies.
  struct Ptrs {
    void *q, *k, *v, *o, *g, *A_log, *a, *dt_bias, *beta, *state, *cache;
    const std::int32_t *idx, *acc;
  };
  Ptrs host_ptrs() {
    return {q.data(), k.data(), v.data(), o.data(), g.raw.empty() ? nullptr : g.data(),
            A_log.raw.empty() ? nullptr : A_log.data(), a.raw.empty() ? nullptr : a.data(),
            dt_bias.raw.empty() ? nullptr : dt_bias.data(), beta.data(), state.data(),
            cache.raw.empty() ? nullptr : cache.data(), spec.idx.data(),
            spec.acc.empty() ? nullptr : spec.acc.data()};
  }
  DecodeArgs args(const Ptrs& p) const {
    const auto& s = spec;
    DecodeArgs d;
    auto tok = [&](const void* ptr, DType dt, std::int64_t H, std::int64_t D) {
      if (!ptr) return TensorView{};
      if (s.verify) return TensorView::contiguous(ptr, dt, {s.N, s.T, H, D});
      return TensorView::contiguous(ptr, dt, {s.N, H, D});
    };
    auto tok2 = [&](const void* ptr, DType dt) {
      if (!ptr) return TensorView{};
      if (s.verify) return TensorView::contiguous(ptr, dt, {s.N, s.T, s.HV});
      return TensorView::contiguous(ptr, dt, {s.N, s.HV});
    };
    d.q = tok(p.q, s.io, s.HK, s.K);
    d.k = tok(p.k, s.io, s.HK, s.K);
    d.v = tok(p.v, s.io, s.HV, s.V);
    d.o = tok(p.o, s.o, s.HV, s.V);
    d.g = tok2(p.g, DType::f32);
    d.a = tok2(p.a, s.a);
    if (p.A_log) d.A_log = TensorView::contiguous(p.A_log, DType::f32, {s.HV});
    if (p.dt_bias) d.dt_bias = TensorView::contiguous(p.dt_bias, DType::f32, {s.HV});
    d.beta = tok2(p.beta, s.beta);
    d.beta_sigmoid = s.beta_sigmoid;
    d.state = s.vk ? TensorView::contiguous(p.state, s.state, {s.S, s.HV, s.V, s.K})
                   : TensorView::contiguous(p.state, s.state, {s.S, s.HV, s.K, s.V});
    d.state_indices = p.idx;
    d.num_accepted = p.acc;
    d.state_cache = p.cache;
    return d;
  }
  RefProblem ref_problem() const {
    RefProblem r;
    const auto& s = spec;
    r.N = s.N, r.T = s.T, r.HK = s.HK, r.HV = s.HV, r.K = s.K, r.V = s.V, r.S = s.S;
    r.grouped = s.head_map == HeadMap::grouped, r.l2norm = s.l2norm, r.vk = s.vk;
    r.fused_gate = s.fused_gate, r.beta_sigmoid = s.beta_sigmoid, r.scale = prob.scale;
    r.u_o = s.o == DType::f32 ? 0x1p-24 : (s.o == DType::f16 ? 0x1p-11 : 0x1p-8);
    r.u_state = s.state == DType::bf16 ? 0x1p-8 : 0.0;
    return r;
  }
  // Decodes o, state, cache (after the implementation wrote raw) and compares with the oracle.
  Report check(bool neg = false) {
    o.decode();
    state.decode();
    if (!cache.raw.empty()) cache.decode();
    RefInputs in;
    in.q = q.val.data(), in.k = k.val.data(), in.v = v.val.data();
    in.g = g.val.empty() ? nullptr : g.val.data();
    in.A_log = A_log.val.empty() ? nullptr : A_log.val.data();
    in.a = a.val.empty() ? nullptr : a.val.data();
    in.dt_bias = dt_bias.val.empty() ? nullptr : dt_bias.val.data();
    in.beta = beta.val.data(), in.state0 = state0.data();
    in.idx = spec.idx.data(), in.acc = spec.acc.empty() ? nullptr : spec.acc.data();
    RefGot got{o.val.data(), state.val.data(), cache.val.empty() ? nullptr : cache.val.data()};
    return compare(ref_problem(), in, got, neg);
  }
};

}  // namespace gdn::decode_ref
