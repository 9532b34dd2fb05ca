// Error bounds per arm, derived before any tuning (derivation: docs/bounds.md).
//
// Model: an n-term fp sum in precision u has relative error <= lam sqrt(n) u (probabilistic,
// lam = 4); one operand rounding costs u. With |k_t| <= 1 and beta_t in [0, 1] every step's
// error map a_t (I - beta_t k_t k_t^T) has spectral norm <= 1 and ||(I + A)^-1 diag(beta)|| <=
// kappa = 2, so per-chunk state errors add as a random walk instead of compounding:
//
//   e_chunk^2 = kappa^2 (u_kk^2 + u_wu^2 + C u_solve^2 + (K + C) u_acc^2)      W, U
//             + u_state^2 + (K + C) u_acc^2 + u_l2^2                          W S, K^T Vn
//   state:  lam * rho * sqrt(n_c) * e_chunk,       n_c = ceil(max_len / C)
//   o:      u_out + state + lam * kappa * sqrt(u_kk^2 + u_attn^2 + u_state^2 + (K + C) u_acc^2)
//
// u_l2 = sqrt(K) u_acc when q, k are normalized in the kernel; u_out the output dtype's unit
// roundoff; rho = growth_factor() (1 inside the domain). Relative errors do not depend on scale.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "check/check.hpp"

namespace gdn::check {
namespace {

constexpr double kF32 = 0x1.0p-24, kBF16 = 0x1.0p-8, kF16 = 0x1.0p-11, kSplit = 0x1.0p-16;

// THE per-arm fold-precision table.
const FoldPrecision kTable[] = {
    {Arm::cpu, 64, kF32, 0, 0, 0, 0, kF32, "fp32 FMA folds and solve; operands are the stored inputs"},
    {Arm::serial, 1, kF32, 0, 0, 0, 0, 0, "fp32 recurrence, one step per token, no solve"},
    {Arm::wy_fp32, 64, kF32, 0, 0, 0, 0, kF32, "fp32 FMA folds, fp32 solve"},
    // wy-tc v1 (src/cuda/wy_tc/wy_tc.cu header): every mma operand that is not exactly a bf16
    // number is split x = bf16 hi + bf16 lo (|x - hi - lo| <= 2^-18 |x|) and multiplied as
    // hi*hi + hi*lo + lo*hi (dropped lo*lo <= 2^-18 |a||b|), so each fold's operand rounding is
    // <= 2^-17 < kSplit; bf16 q/k in K K^T, Q K^T are exact (0 <= kSplit); f16 q/k/v split
    // exactly; f32 io is carried to 16 significant bits (2^-17). Solve and accumulation fp32.
    {Arm::wy_tc, 64, kF32, kSplit, kSplit, kSplit, kSplit, kF32,
     "split hi+lo bf16 operands (~2^-16) in every mma fold incl. the state; fp32 accumulate and "
     "solve"},
};

double unit_roundoff(DType d) {
  switch (d) {
    case DType::bf16: return kBF16;
    case DType::f16: return kF16;
    default: return kF32;
  }
}

}  // namespace

const FoldPrecision& fold_precision(Arm arm) {
  for (const auto& f : kTable)
    if (f.arm == arm) return f;
  return kTable[0];  // auto on the host runs cpu
}

double growth_factor(const Case& c) {
  const int HK = c.prob.HK, HV = c.prob.HV, K = c.prob.K;
  const int N = static_cast<int>(c.cu_seqlens.size()) - 1;
  double worst = 1;
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < HV; ++h) {
      const int kh = c.prob.kv_head(h);
      double log_g = 0;
      for (std::int64_t t = c.cu_seqlens[n]; t < c.cu_seqlens[n + 1]; ++t) {
        double k2 = 0;
        for (int d = 0; d < K; ++d) {
          const double x = c.k32[(t * HK + kh) * K + d];
          k2 += x * x;
        }
        if (c.prob.qk_l2norm) k2 /= k2 + 1e-6;
        log_g += std::log(std::max(1.0, std::abs(1.0 - c.beta32[t * HV + h] * k2)));
      }
      worst = std::max(worst, std::exp(std::min(log_g, 700.0)));
    }
  return worst;
}

Bound derive_bound(Arm arm, const Case& c) {
  const FoldPrecision& f = fold_precision(arm);
  const double K = c.prob.K, C = f.C, kappa = f.C > 1 ? 2.0 : 1.0;
  std::int64_t max_len = 0;
  for (std::size_t i = 0; i + 1 < c.cu_seqlens.size(); ++i)
    max_len = std::max<std::int64_t>(max_len, c.cu_seqlens[i + 1] - c.cu_seqlens[i]);
  const double n_c = std::max<double>(1.0, std::ceil(static_cast<double>(max_len) / C));
  const double u_l2 = c.prob.qk_l2norm ? std::sqrt(K) * f.u_acc : 0.0;
  const double acc2 = (K + C) * f.u_acc * f.u_acc;
  const double e_chunk = std::sqrt(
      kappa * kappa * (f.u_kk * f.u_kk + f.u_wu * f.u_wu + C * f.u_solve * f.u_solve + acc2) +
      f.u_state * f.u_state + acc2 + u_l2 * u_l2);
  const double rho = growth_factor(c);
  const double u_out = unit_roundoff(c.spec.out_dtype);
  Bound b;
  b.state = kLambda * rho * std::sqrt(n_c) * e_chunk;
  b.o = u_out + b.state +
        kLambda * kappa *
            std::sqrt(f.u_kk * f.u_kk + f.u_attn * f.u_attn + f.u_state * f.u_state + acc2);
  b.formula = fmt::format(
      "state = lam*rho*sqrt(n_c)*e_chunk = {}*{:.3g}*sqrt({})*{:.3g}; o = u_out({:.3g}) + state + "
      "intra-chunk",
      kLambda, rho, n_c, e_chunk, u_out);
  if (rho > 1.0 + 1e-9)
    b.formula += fmt::format(" [outside the domain beta|k|^2 <= 2: growth {:.3g}]", rho);
  return b;
}

}  // namespace gdn::check
