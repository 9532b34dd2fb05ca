// Consumer of an installed gdn (C++ API): a CPU prefill on a few tokens checked value for value
// against an inline fp64 recurrence, and two bad inputs that must be rejected untouched.
// Exit 0 only if everything holds.
#include <gdn/gdn.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {
int fail(const char* what) {
  std::printf("FAIL %s\n", what);
  return 1;
}
}  // namespace

int main() {
  constexpr int T = 7, HK = 1, HV = 2, K = 4, V = 3;
  std::vector<float> q(T * HK * K), k(T * HK * K), v(T * HV * V), g(T * HV), beta(T * HV);
  for (int i = 0; i < T * HK * K; ++i) q[i] = 0.3f * float((i * 7) % 5 - 2), k[i] = 0.2f * float((i * 3) % 7 - 3);
  for (int i = 0; i < T * HV * V; ++i) v[i] = 0.25f * float(i % 5) - 0.4f;
  for (int i = 0; i < T * HV; ++i) g[i] = -0.05f * float(i % 4), beta[i] = 0.2f + 0.1f * float(i % 6);
  std::vector<float> o(T * HV * V, NAN), hT(HV * K * V, NAN);

  if (std::strcmp(gdn::version(), GDN_PACKAGE_VERSION) != 0)
    return fail("gdn::version() differs from the package version");

  gdn::Problem p = gdn::Problem::make(HK, HV, K, V);
  gdn::PrefillArgs a;
  a.q = gdn::TensorView::contiguous(q.data(), gdn::DType::f32, {T, HK, K});
  a.k = gdn::TensorView::contiguous(k.data(), gdn::DType::f32, {T, HK, K});
  a.v = gdn::TensorView::contiguous(v.data(), gdn::DType::f32, {T, HV, V});
  a.g = gdn::TensorView::contiguous(g.data(), gdn::DType::f32, {T, HV});
  a.beta = gdn::TensorView::contiguous(beta.data(), gdn::DType::f32, {T, HV});
  a.o = gdn::TensorView::contiguous(o.data(), gdn::DType::f32, {T, HV, V});
  a.hT = gdn::TensorView::contiguous(hT.data(), gdn::DType::f32, {1, HV, K, V});

  if (!gdn::validate(p, a).ok()) return fail("validate rejected a valid call");
  gdn::RunInfo info;
  gdn::Status st = gdn::prefill(p, a, gdn::Arm::cpu, &info);
  if (!st.ok() || info.ran != gdn::Arm::cpu) {
    std::printf("FAIL valid prefill: %s (arm %s)\n", st.message().c_str(), gdn::to_string(info.ran));
    return 1;
  }

  // fp64 recurrence: S = exp(g) S; u = beta (v - S^T k); S += k u^T; o = scale S^T q.
  double max_err = 0, max_ref = 0;
  for (int h = 0; h < HV; ++h) {
    const int hk = p.kv_head(h);
    std::vector<double> S(K * V, 0.0);
    for (int t = 0; t < T; ++t) {
      const float* kt = &k[(t * HK + hk) * K];
      const float* qt = &q[(t * HK + hk) * K];
      const double decay = std::exp(double(g[t * HV + h])), b = beta[t * HV + h];
      for (double& s : S) s *= decay;
      for (int j = 0; j < V; ++j) {
        double sk = 0;
        for (int i = 0; i < K; ++i) sk += S[i * V + j] * kt[i];
        const double u = b * (v[(t * HV + h) * V + j] - sk);
        for (int i = 0; i < K; ++i) S[i * V + j] += kt[i] * u;
      }
      for (int j = 0; j < V; ++j) {
        double ot = 0;
        for (int i = 0; i < K; ++i) ot += S[i * V + j] * qt[i];
        ot *= p.scale;
        max_err = std::fmax(max_err, std::fabs(ot - o[(t * HV + h) * V + j]));
        max_ref = std::fmax(max_ref, std::fabs(ot));
      }
    }
    for (int i = 0; i < K * V; ++i) {
      max_err = std::fmax(max_err, std::fabs(S[i] - hT[h * K * V + i]));
      max_ref = std::fmax(max_ref, std::fabs(S[i]));
    }
  }
  // NaN-safe: a NaN error fails the comparison.
  if (!(max_err <= 1e-5 * (1 + max_ref)) || !(max_ref > 1e-3)) {
    std::printf("FAIL prefill values: max abs error %.3g (max |ref| %.3g)\n", max_err, max_ref);
    return 1;
  }

  // Bad inputs: HV not a multiple of HK; q with the wrong head dimension. Outputs stay untouched.
  std::vector<float> o_before = o;
  gdn::Problem bad = gdn::Problem::make(2, 3, K, V);
  st = gdn::prefill(bad, a, gdn::Arm::cpu);
  if (st.code() != gdn::Code::invalid_argument || st.message().empty())
    return fail("HV = 3, HK = 2 was not rejected as invalid_argument");
  gdn::PrefillArgs bad_args = a;
  bad_args.q = gdn::TensorView::contiguous(q.data(), gdn::DType::f32, {T, HK, K - 1});
  st = gdn::prefill(p, bad_args, gdn::Arm::cpu);
  if (st.ok()) return fail("q with the wrong head dimension was accepted");
  if (std::memcmp(o.data(), o_before.data(), o.size() * sizeof(float)) != 0)
    return fail("a rejected call wrote the output");

  std::printf("ok: gdn %s, cpu prefill max abs error %.3g, bad inputs rejected ('%s')\n",
              gdn::version(), max_err, st.message().c_str());
  return 0;
}
