// Error bounds per arm, derived before any tuning (derivation: docs/bounds.md).
//
// Model: an n-term fp sum in precision u has relative error <= lam sqrt(n) u (probabilistic,
// lam = 4); one operand rounding costs u. With |k_t| <= 1 and beta_t in [0, 1] every step's
// error map a_t (I - beta_t k_t k_t^T) has spectral norm <= 1 and ||(I + A)^-1 diag(beta)|| <=
// kappa = 2, so per-chunk state errors add (as independent errors, in mean square) instead of
// compounding; in mean square the map also contracts an isotropic error by rho_c^2 per chunk, so
// only the last ~n_mem chunks' errors are alive (chunk_memory):
//
//   e_chunk^2 = kappa^2 (u_kk^2 + u_wu^2 + C u_solve^2 + (K + C) u_acc^2)     A, W, U, solve
//             + u_x^2 + u_st^2 + (K + C) u_acc^2 + u_l2^2                     X = W S, ST
//   state:  lam * rho * sqrt(min(n_c, n_mem)) * e_chunk,   n_c = ceil(max_len / C)
//   o:      u_out + state + lam * kappa * sqrt(u_kk^2 + u_os^2 + u_op^2 + (K + C) u_acc^2)
//
// u_l2 = sqrt(K) u_acc when q, k are normalized in the kernel; u_out the output dtype's unit
// roundoff; rho = growth_factor() (1 inside the domain). Relative errors do not depend on scale.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "check/check.hpp"

namespace gdn::check {
namespace {

constexpr double kF32 = 0x1.0p-24, kBF16 = 0x1.0p-8, kF16 = 0x1.0p-11, kSplit = 0x1.0p-16;
constexpr double kSqrt2 = 1.4142135623730951;  // two operands of one fold rounded alike
constexpr double kSqrt3 = 1.7320508075688772;  // three such roundings

// THE per-arm fold-precision table. Columns: arm, scheme, C, u_acc, u_kk, u_wu, u_x, u_st, u_os,
// u_op, u_solve. Each u_<fold> is the fold's operand roundings combined in quadrature.
const FoldPrecision kTable[] = {
    {Arm::cpu, "", 64, kF32, 0, 0, 0, 0, 0, 0, kF32,
     "fp32 FMA folds and solve; operands are the stored inputs"},
    {Arm::serial, "", 1, kF32, 0, 0, 0, 0, 0, 0, 0, "fp32 recurrence, one step per token, no solve"},
    {Arm::wy_fp32, "", 64, kF32, 0, 0, 0, 0, 0, 0, kF32, "fp32 FMA folds, fp32 solve"},
    // wy-tc, split scheme (src/cuda/wy_tc/wy_tc.cu header): every mma operand that is not exactly
    // a bf16 number is split x = bf16 hi + bf16 lo and multiplied as hi*hi + hi*lo + lo*hi. Per
    // split operand |x - hi - lo| <= 2^-17 |x| (lo rounds a residual |x - hi| <= 2^-8 |x| to 8
    // bits); the dropped lo*lo is <= 2^-16 |a| |b| (each |lo| <= 2^-8 |x|). kSplit = 2^-16 per
    // split operand covers its residual and its half of a pair's lo*lo (sqrt(2 (2^-17)^2 +
    // (2^-16)^2) = 1.22 * 2^-16 <= sqrt(2) kSplit). bf16 q/k tiles are exact (K K^T, Q K^T, the
    // K and V tiles of W, U, ST and Q of OS); f16 io splits exactly; f32 io is carried to 2^-17
    // per operand, which the per-fold entries also cover. Solve and accumulation fp32.
    //   u_kk  sqrt2 kSplit  q and k tiles (exact for bf16 / f16 io; both split for f32 io)
    //   u_wu  kSplit        T side split, K / V tile exact (f32 io: split, still <= kSplit)
    //   u_x   sqrt2 kSplit  W split, S split
    //   u_st  kSplit        Vn diag(ed) split, K exact (f32 io: split)
    //   u_os  kSplit        S split, Q exact (f32 io: split)
    //   u_op  sqrt2 kSplit  P split, Vn split
    {Arm::wy_tc, "split", 64, kF32, kSqrt2 * kSplit, kSplit, kSqrt2 * kSplit, kSplit, kSplit,
     kSqrt2 * kSplit, kF32,
     "split hi+lo bf16 operands (2^-16 per operand) in every mma fold incl. the state; fp32 "
     "accumulate and solve"},
    // wy-tc, half scheme (bf16 io only: wy_tc_half_scheme; inside the fp16 domain |q|, |k| <=
    // kWyTcHalfMaxQK, |v|, |h0| <= kWyTcHalfMaxV). Operands single fp16 (u = 2^-11, normal
    // values) where the split was dropped; the chunk pass's T side and ST keep the bf16 split:
    //   u_kk  0             K K^T, Q K^T exact bf16 products (bf16 io)
    //   u_wu  kSplit        T side split bf16 hi + lo, K / V tile exact bf16; W, U in fp32
    //   u_x   sqrt2 2^-11   W rounded once to fp16 (stored), S^T fp16 single
    //   u_st  kSplit        Vn diag(ed) split bf16 hi + lo, K exact bf16 (as split)
    //   u_os  2^-11         S^T fp16 single; Q = the bf16 q converted to fp16 (exact for
    //                       2^-17 <= |q| <= 65504; below 2^-17 an absolute 2^-25, negligible)
    //   u_op  sqrt2 2^-11   P = scale (Q K^T .* Gam) rounded once to fp16, Vn fp16 single
    {Arm::wy_tc, "half", 64, kF32, 0, kSplit, kSqrt2 * kF16, kSplit, kF16, kSqrt2 * kF16, kF32,
     "fp16 single W, S (X), S (OS), P, Vn (OP); split bf16 T side (W, U) and Vn (ST); exact "
     "bf16 K K^T, Q K^T; fp32 accumulate and solve"},
    // wy-tc, half scheme with U stored in fp16 between the passes (the default of the half
    // scheme since session 12, r47; GDN_WYTC_U16=0 turns it off):
    // as half, plus U rounded once to fp16 after its fp32 accumulation. Like W's fp16 rounding
    // it comes after the solve (kappa does not multiply it) and enters through Vn = U - X, so
    // it joins X's operand roundings in quadrature:
    //   u_x   sqrt3 2^-11   W rounded once to fp16, S^T fp16 single, U rounded once to fp16
    {Arm::wy_tc, "half-u16", 64, kF32, 0, kSplit, kSqrt3 * kF16, kSplit, kF16, kSqrt2 * kF16, kF32,
     "half, and U stored in fp16 (joins X's roundings)"},
    // wy-tc, half-u16 with the state pass's per-token scalings folded into its tiles (derived
    // before any kernel existed: docs/NOTES_wy_tc.md, session 21; session 22 built it, r69
    // measured it slower and it was removed: no library path selects it).
    // The chunk pass would store q~ = diag(eq) q and k~ = diag(ed rk) k, each rounded once to
    // fp16; the state pass multiplies them unscaled:
    //   u_st  sqrt2 2^-11   k~ rounded once to fp16, Vn fp16 single (no split any more)
    //   u_os  sqrt2 2^-11   q~ rounded once to fp16, S^T fp16 single
    // Range: the factors are e^G, e^(G_C - G) <= 1 times scale and 1/|q|, 1/|k| (or 1 without
    // the in-kernel norm), so |q~|, |k~| stay within the half domain's limits on q, k, far below
    // 65504; an element below fp16's normal range (2^-14) carries an absolute 2^-25, negligible
    // as for q in the half row. Every other entry as half-u16.
    {Arm::wy_tc, "half-u16-folded", 64, kF32, 0, kSplit, kSqrt3 * kF16, kSqrt2 * kF16,
     kSqrt2 * kF16, kSqrt2 * kF16, kF32,
     "half-u16 with eq folded into an fp16 q tile (OS) and ed into an fp16 k tile (ST, Vn "
     "unsplit); not used by any kernel (r69 measured it slower: per-value-head tiles)"},
    // wy-tc, half-u16 with ST as one fp16 product (D16, session 22; selected by wy_tc_d16: the
    // default where half-u16 runs since r70, GDN_WYTC_D16=0 off): D = Vn diag(ed) rounded once to
    // fp16 (no bf16 hi + lo split), K^T the bf16 k converted to fp16 (exact in the half domain,
    // as Q in the half row):
    //   u_st  2^-11         D fp16 single, K exact
    // Every other entry as half-u16. eq stays an fp32 scaling of O^T, ed of Vn^T, so no tile
    // changes its range; D's range is Vn's (|ed| <= 1 / |k|, 1 without the in-kernel norm).
    {Arm::wy_tc, "half-u16-d16", 64, kF32, 0, kSplit, kSqrt3 * kF16, kF16, kF16, kSqrt2 * kF16,
     kF32, "half-u16 with D = Vn diag(ed) fp16 single and K^T in fp16 in ST"},
};

double unit_roundoff(DType d) {
  switch (d) {
    case DType::bf16: return kBF16;
    case DType::f16: return kF16;
    default: return kF32;
  }
}

// |k_t|^2 of token t for value head h's key head, as the kernel sees it.
double key_norm2(const Case& c, std::int64_t t, int kh) {
  const int HK = c.prob.HK, K = c.prob.K;
  double k2 = 0;
  for (int d = 0; d < K; ++d) {
    const double x = c.k32[(t * HK + kh) * K + d];
    k2 += x * x;
  }
  if (c.prob.qk_l2norm) k2 /= k2 + 1e-6;
  return k2;
}

bool within_abs(const std::vector<float>& x, float limit) {
  for (float v : x)
    if (!(std::fabs(v) <= limit)) return false;  // NaN is outside
  return true;
}

}  // namespace

const char* scheme_name(WyTcScheme s) {
  return s == WyTcScheme::half              ? "half"
         : s == WyTcScheme::half_u16        ? "half-u16"
         : s == WyTcScheme::half_u16_folded ? "half-u16-folded"
         : s == WyTcScheme::half_u16_d16    ? "half-u16-d16"
                                            : "split";
}

bool wy_tc_half_scheme(const Case& c) {
  const char* e = std::getenv("GDN_WYTC_PRECISION");
  const bool env_split = e && std::strcmp(e, "split") == 0;
  const bool env_half = e && std::strcmp(e, "half") == 0;
  if (env_split || c.spec.io_dtype != DType::bf16) return false;
  if (env_half) return true;
  // auto: not for an fp32 o, where the half operands (not the output rounding) would dominate
  // o's error (r34: 2.6e-4 against split's 4e-6).
  if (c.spec.out_dtype == DType::f32) return false;
  return within_abs(c.q32, gdn::kWyTcHalfMaxQK) && within_abs(c.k32, gdn::kWyTcHalfMaxQK) &&
         within_abs(c.v32, gdn::kWyTcHalfMaxV) && within_abs(c.h0, gdn::kWyTcHalfMaxV);
}

bool wy_tc_u16(const Case& c) {
  const char* e = std::getenv("GDN_WYTC_U16");
  return !(e && std::strcmp(e, "0") == 0) && wy_tc_half_scheme(c);
}

bool wy_tc_d16(const Case& c) {
  const char* e = std::getenv("GDN_WYTC_D16");
  return !(e && std::strcmp(e, "0") == 0) && wy_tc_u16(c);
}

const FoldPrecision& fold_precision(Arm arm, WyTcScheme scheme) {
  for (const auto& f : kTable)
    if (f.arm == arm && (arm != Arm::wy_tc || std::strcmp(f.scheme, scheme_name(scheme)) == 0))
      return f;
  return kTable[0];  // auto on the host runs cpu
}

double growth_factor(const Case& c) {
  const int HV = c.prob.HV;
  const int N = static_cast<int>(c.cu_seqlens.size()) - 1;
  double worst = 1;
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < HV; ++h) {
      const int kh = c.prob.kv_head(h);
      double log_g = 0;
      for (std::int64_t t = c.cu_seqlens[n]; t < c.cu_seqlens[n + 1]; ++t)
        log_g += std::log(std::max(1.0, std::abs(1.0 - c.beta32[t * HV + h] * key_norm2(c, t, kh))));
      worst = std::max(worst, std::exp(std::min(log_g, 700.0)));
    }
  return worst;
}

ChunkMemory chunk_memory(const Case& c, int C) {
  const int HV = c.prob.HV, K = c.prob.K;
  const int N = static_cast<int>(c.cu_seqlens.size()) - 1;
  ChunkMemory m;
  std::int64_t max_len = 0;
  for (int n = 0; n < N; ++n) max_len = std::max<std::int64_t>(max_len, c.cu_seqlens[n + 1] - c.cu_seqlens[n]);
  m.n_c = std::max<double>(1.0, std::ceil(static_cast<double>(max_len) / C));
  double n_mem = 1;
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < HV; ++h) {
      const int kh = c.prob.kv_head(h);
      double s = 0;  // s_j = 1 + rho_{c,j}^2 s_{j-1}
      for (std::int64_t t0 = c.cu_seqlens[n]; t0 < c.cu_seqlens[n + 1]; t0 += C) {
        const std::int64_t t1 = std::min<std::int64_t>(t0 + C, c.cu_seqlens[n + 1]);
        double log_r = 0;  // log rho_c^2 (-inf when a factor is 0)
        for (std::int64_t t = t0; t < t1; ++t) {
          const double b = c.beta32[t * HV + h], bk2 = b * key_norm2(c, t, kh);
          // Mean-square factor of a_t (I - beta k k^T) on an isotropic error, clamped to [0, 1]
          // (growth beyond 1 is growth_factor's, outside the domain).
          const double f = std::clamp(1.0 - bk2 * (2.0 - bk2) / K, 0.0, 1.0);
          log_r += 2.0 * static_cast<double>(c.g[t * HV + h]) + std::log(f);
        }
        const double r = std::min(1.0, std::exp(log_r));
        m.rho_c2 = std::max(m.rho_c2, r);
        s = 1.0 + r * s;
        n_mem = std::max(n_mem, s);
      }
    }
  m.n_mem = std::min(n_mem, m.n_c);
  return m;
}

BoundInputs bound_inputs(const Case& c, int C) {
  BoundInputs in;
  in.K = c.prob.K;
  in.l2norm = c.prob.qk_l2norm;
  in.out_dtype = c.spec.out_dtype;
  const ChunkMemory m = chunk_memory(c, C);
  in.n_c = m.n_c;
  in.n_mem = m.n_mem;
  in.rho = growth_factor(c);
  return in;
}

Bound derive_bound(const FoldPrecision& f, const BoundInputs& in) {
  const double K = in.K, C = f.C, kappa = f.C > 1 ? 2.0 : 1.0;
  const double u_l2 = in.l2norm ? std::sqrt(K) * f.u_acc : 0.0;
  const double acc2 = (K + C) * f.u_acc * f.u_acc;
  const double e_chunk = std::sqrt(
      kappa * kappa * (f.u_kk * f.u_kk + f.u_wu * f.u_wu + C * f.u_solve * f.u_solve + acc2) +
      f.u_x * f.u_x + f.u_st * f.u_st + acc2 + u_l2 * u_l2);
  const double n_eff = std::max(1.0, std::min(in.n_c, in.n_mem));
  const double u_out = unit_roundoff(in.out_dtype);
  const double intra =
      kLambda * kappa * std::sqrt(f.u_kk * f.u_kk + f.u_os * f.u_os + f.u_op * f.u_op + acc2);
  Bound b;
  b.state = kLambda * in.rho * std::sqrt(n_eff) * e_chunk;
  b.o = u_out + b.state + intra;
  b.formula = fmt::format(
      "{}{}{}: state = lam*rho*sqrt(min(n_c, n_mem))*e_chunk = {}*{:.3g}*sqrt(min({}, {:.4g}))*"
      "{:.3g}; o = u_out({:.3g}) + state + intra-chunk({:.3g})",
      to_string(f.arm), *f.scheme ? " " : "", f.scheme, kLambda, in.rho, in.n_c, in.n_mem,
      e_chunk, u_out, intra);
  if (in.rho > 1.0 + 1e-9)
    b.formula += fmt::format(" [outside the domain beta|k|^2 <= 2: growth {:.3g}]", in.rho);
  return b;
}

Bound derive_bound(Arm arm, const Case& c) {
  const WyTcScheme scheme = arm != Arm::wy_tc     ? WyTcScheme::split
                            : wy_tc_d16(c)          ? WyTcScheme::half_u16_d16
                            : wy_tc_u16(c)          ? WyTcScheme::half_u16
                            : wy_tc_half_scheme(c)  ? WyTcScheme::half
                                                    : WyTcScheme::split;
  const FoldPrecision& f = fold_precision(arm, scheme);
  return derive_bound(f, bound_inputs(c, f.C));
}

}  // namespace gdn::check
