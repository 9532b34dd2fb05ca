// fp64 oracle of the GDN layer: HF Qwen3_5GatedDeltaNet's forward, op by op, in double.
#include "ref/layer_ref.hpp"

#include <cmath>
#include <cstring>

namespace gdn::ref {

LayerState LayerState::zeros(const layer::Config& c, int N) {
  LayerState s;
  s.conv.assign(static_cast<std::size_t>(N) * (c.conv_kernel - 1) * c.conv_dim(), 0.0);
  s.ssm.assign(static_cast<std::size_t>(N) * c.HV * c.K * c.V, 0.0);
  return s;
}

namespace {
// bf16 bit pattern -> value (self-contained: gdn_ref does not link libgdn).
double bf(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
double silu(double x) { return x / (1.0 + std::exp(-x)); }
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// y[T, rows] = x[T, cols] W[rows, cols]^T
std::vector<double> matmul_t(const std::vector<double>& x, std::int64_t T, std::int64_t cols,
                             const std::vector<std::uint16_t>& W, std::int64_t rows) {
  std::vector<double> Wd(W.size());
  for (std::size_t i = 0; i < W.size(); ++i) Wd[i] = bf(W[i]);
  std::vector<double> y(static_cast<std::size_t>(T * rows));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t r = 0; r < rows; ++r) {
      double s = 0;
      const double* xr = &x[t * cols];
      const double* wr = &Wd[r * cols];
      for (std::int64_t i = 0; i < cols; ++i) s += xr[i] * wr[i];
      y[t * rows + r] = s;
    }
  return y;
}
}  // namespace

std::vector<double> layer_forward(const layer::Config& c, const layer::Weights& w,
                                  const std::vector<double>& x, const std::vector<std::int32_t>& cu,
                                  LayerState* state) {
  const int N = static_cast<int>(cu.size()) - 1;
  const std::int64_t T = cu[N], H = c.hidden, CD = c.conv_dim(), VD = c.value_dim();
  const int HK = c.HK, HV = c.HV, K = c.K, V = c.V, KW = c.conv_kernel, r = HV / HK;

  const auto mixed = matmul_t(x, T, H, w.w_qkv, CD);  // [T, CD]
  const auto z = matmul_t(x, T, H, w.w_z, VD);        // [T, VD]
  const auto b = matmul_t(x, T, H, w.w_b, HV);        // [T, HV]
  const auto a = matmul_t(x, T, H, w.w_a, HV);        // [T, HV]

  // Causal depthwise conv over each sequence, preceded by its conv state; then SiLU.
  std::vector<double> qkv(static_cast<std::size_t>(T * CD));
  for (int n = 0; n < N; ++n) {
    const std::int64_t t0 = cu[n], L = cu[n + 1] - cu[n];
    double* cs = &state->conv[static_cast<std::size_t>(n) * (KW - 1) * CD];  // [KW-1, CD]
    auto input = [&](std::int64_t p, std::int64_t ch) {  // conv input at position p (< 0: state)
      return p >= 0 ? mixed[(t0 + p) * CD + ch] : cs[(KW - 1 + p) * CD + ch];
    };
    for (std::int64_t p = 0; p < L; ++p)
      for (std::int64_t ch = 0; ch < CD; ++ch) {
        double s = 0;
        for (int j = 0; j < KW; ++j) s += w.conv_w[ch * KW + j] * input(p - (KW - 1) + j, ch);
        qkv[(t0 + p) * CD + ch] = silu(s);
      }
    std::vector<double> ns(static_cast<std::size_t>((KW - 1) * CD));
    for (int i = 0; i < KW - 1; ++i)
      for (std::int64_t ch = 0; ch < CD; ++ch) ns[i * CD + ch] = input(L - (KW - 1) + i, ch);
    std::copy(ns.begin(), ns.end(), cs);
  }

  // Recurrence (DESIGN.md §1) with q/k L2-normalized, grouped head map, scale K^-1/2.
  std::vector<double> o(static_cast<std::size_t>(T * VD));
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));
  std::vector<double> qn(K), kn(K), u(V);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < HV; ++h) {
      const int kh = h / r;
      double* S = &state->ssm[(static_cast<std::size_t>(n) * HV + h) * K * V];
      for (std::int64_t t = cu[n]; t < cu[n + 1]; ++t) {
        const double* row = &qkv[t * CD];
        double sq = 0, sk = 0;
        for (int i = 0; i < K; ++i) {
          qn[i] = row[kh * K + i];
          kn[i] = row[HK * K + kh * K + i];
          sq += qn[i] * qn[i];
          sk += kn[i] * kn[i];
        }
        const double iq = 1.0 / std::sqrt(sq + 1e-6), ik = 1.0 / std::sqrt(sk + 1e-6);
        for (int i = 0; i < K; ++i) qn[i] *= iq, kn[i] *= ik;
        const double beta = 1.0 / (1.0 + std::exp(-b[t * HV + h]));
        const double g = -std::exp(static_cast<double>(w.A_log[h])) *
                         softplus(a[t * HV + h] + static_cast<double>(w.dt_bias[h]));
        const double decay = std::exp(g);
        const double* vv = &row[2 * HK * K + h * V];
        for (int i = 0; i < K * V; ++i) S[i] *= decay;
        for (int j = 0; j < V; ++j) {
          double s = 0;
          for (int i = 0; i < K; ++i) s += S[i * V + j] * kn[i];
          u[j] = beta * (vv[j] - s);
        }
        for (int i = 0; i < K; ++i)
          for (int j = 0; j < V; ++j) S[i * V + j] += kn[i] * u[j];
        for (int j = 0; j < V; ++j) {
          double s = 0;
          for (int i = 0; i < K; ++i) s += S[i * V + j] * qn[i];
          o[t * VD + h * V + j] = scale * s;
        }
      }
    }

  // Gated RMSNorm per (token, value head): rmsnorm(o) * norm_w * silu(z).
  for (std::int64_t t = 0; t < T; ++t)
    for (int h = 0; h < HV; ++h) {
      double* oh = &o[t * VD + h * V];
      double ss = 0;
      for (int j = 0; j < V; ++j) ss += oh[j] * oh[j];
      const double inv = 1.0 / std::sqrt(ss / V + c.eps);
      for (int j = 0; j < V; ++j)
        oh[j] = oh[j] * inv * static_cast<double>(w.norm_w[j]) * silu(z[t * VD + h * V + j]);
    }
  return matmul_t(o, T, VD, w.w_out, H);
}

}  // namespace gdn::ref
