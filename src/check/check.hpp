// Parity harness: fixtures, fp64 oracles, NaN-aware metrics, derived bounds, negative controls.
// Used by CTest (tests/), `gdn check` and `gdn bench` (error columns). Links the fp64 oracle
// library (src/ref); the shipped library libgdn never does.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn::check {

enum class Decay { none, slow, fast, extreme };  // g = 0; ~-0.02; ~-1; -20 (exp underflows)
enum class BetaKind { zero, one, random };

// A fixture, described by parameters; the name carries them (e.g. "T65_HK2_HV6_K128_bf16_h0_tiled").
struct CaseSpec {
  std::vector<int> seq_lens = {64};  // one entry per sequence; 0 is legal
  int HK = 2, HV = 4, K = 128, V = 128;
  HeadMap head_map = HeadMap::grouped;
  DType io_dtype = DType::bf16;   // q, k, v
  DType out_dtype = DType::bf16;  // o: io_dtype or f32
  DType beta_dtype = DType::f32;
  Decay decay = Decay::slow;
  BetaKind beta = BetaKind::random;
  bool h0 = true;
  bool l2norm_in_kernel = false;  // false: keys/queries are pre-normalized by the generator
  StateLayout state_layout = StateLayout::kv;
  std::string name() const;
};
// gtest prints parameters with PrintTo: the name, not a byte dump, in test listings and CTest.
inline void PrintTo(const CaseSpec& s, std::ostream* os) { *os << s.name(); }

// A concrete instance: inputs as stored (already rounded to their dtypes), on the host.
struct Case {
  CaseSpec spec;
  Problem prob;
  std::vector<std::int32_t> cu_seqlens;  // [N+1]
  std::int64_t T = 0;
  // Raw storage in the spec's dtypes (bf16/f16 as uint16 bit patterns, f32 as float).
  std::vector<std::uint16_t> q16, k16, v16, beta16;
  std::vector<float> q32, k32, v32, beta32, g, h0;  // *32 hold fp32 storage or decoded values
  // Views over the storage above, for gdn::prefill on the host.
  PrefillArgs host_args(void* o, void* hT) const;
  double q_at(std::int64_t i) const;  // decoded input values as the kernel sees them
};

Case make_case(const CaseSpec& spec, std::uint64_t seed);

// The fixture classes of DESIGN.md §4 (T in {1,37,63,64,65,200,4099}, the decays, betas, h0,
// both head maps, varlen with a zero-length sequence, K=V=128 and another head size).
// `quick` drops the largest cases (for GPU-less CI time budgets the full set still runs).
std::vector<CaseSpec> fixture_set(bool quick = false);

// fp64 oracles over the case's stored inputs. o: [T, HV, V]; hT: [N, HV, K, V] in the case's layout.
struct Oracle {
  std::vector<double> o, hT;
};
Oracle ref_serial(const Case& c);
Oracle ref_chunked(const Case& c, int chunk = 64);

struct Metrics {
  double rel_rms = 0;  // ||x - ref|| / ||ref|| (NaN-aware: NaN where ref is finite => inf)
  double max_abs = 0;
  std::int64_t nan_count = 0;
  std::int64_t n = 0;
};
Metrics compare(const std::vector<double>& ref, const std::vector<double>& got);

// Error bound for an arm on a case, derived from the arm's fold precisions before tuning
// (formulas in docs/bounds.md and next to each function).
struct Bound {
  double o = 0, state = 0;
  std::string formula;
};
Bound derive_bound(Arm arm, const Case& c);

// The wy-tc arm's operand schemes (docs/bounds.md, "Per-scheme fold precisions"): split (every
// fp32-valued mma operand bf16 hi + lo) and half (fp16 W, S, P, Vn in X, OS, OP; split T side and
// ST). The library picks half where it runs (sm_90a, v9/v10 state pass) by the rule of
// wy_tc_half_scheme; elsewhere it runs split, whose bound the half bound dominates.
// half_u16_folded: a bound row derived ahead of a kernel (session 21 plan, docs/bounds.md): the
// library never selects it; the precision emulator's scheme with eq / ed folded into the tiles.
// half_u16_d16: half_u16 with ST as one fp16 product (D fp16 single, K^T fp16; session 22), where
// wy_tc_d16 says.
enum class WyTcScheme { split, half, half_u16, half_u16_folded, half_u16_d16 };
// "split", "half", "half-u16", "half-u16-folded", "half-u16-d16"
const char* scheme_name(WyTcScheme s);
// The library's selection rule on the host: false if env GDN_WYTC_PRECISION is "split" or the io
// dtype is not bf16; else true if it is "half" or every stored |q|, |k| <= gdn::kWyTcHalfMaxQK and
// |v|, |h0| <= gdn::kWyTcHalfMaxV (raw values, before any in-kernel l2norm; NaN is outside).
bool wy_tc_half_scheme(const Case& c);
// The half scheme with U stored in fp16 between the passes: the library's rule (wy_tc.cu), half
// unless GDN_WYTC_U16=0.
bool wy_tc_u16(const Case& c);
// D16 (wy_tc.cu; the default with fp16 U since session 22): wy_tc_u16 unless GDN_WYTC_D16=0.
bool wy_tc_d16(const Case& c);

// Per-fold unit roundoffs of an arm (the ONE table, in bounds.cpp; an arm author changes their
// row with a justification there). 0 = that rounding does not happen in this arm. Each u_<fold>
// is the fold's operand roundings combined (in quadrature, as independent errors), relative to
// the fold's |a| |b|.
struct FoldPrecision {
  Arm arm;
  const char* scheme;  // "" for one-scheme arms; wy-tc: "split" / "half"
  int C;               // chunk length (1 = token-serial)
  double u_acc;        // accumulation precision of every fold (fp32 = 2^-24)
  double u_kk;         // K K^T and Q K^T (the q, k tiles)
  double u_wu;         // W = (T diag(..)) K, U = (T diag(beta)) V (the WY products, T side + tile)
  double u_x;          // X = W S (the state read): W and S
  double u_st;         // ST: S += K^T (Vn diag(ed)): K and Vn diag(ed)
  double u_os;         // OS = Q S (the output's state term): Q and S
  double u_op;         // OP = P Vn (the intra-chunk attention): P and Vn
  double u_solve;      // precision of the (I + A)^-1 triangular solve
  const char* why;
};
const FoldPrecision& fold_precision(Arm arm, WyTcScheme scheme = WyTcScheme::split);
constexpr double kLambda = 4.0;  // probabilistic rounding constant, fixed before any tuning
// Worst per-step error growth prod_t max(1, |1 - beta_t |k_t|^2|) over heads (1 inside the
// bound's domain beta |k|^2 <= 2; larger for un-normalized keys).
double growth_factor(const Case& c);

// Memory of the error map (docs/bounds.md, item 2b). Per chunk of C tokens the mean-square
// contraction of an isotropic error is rho_c^2 = e^{2 G_C} prod_t (1 - beta_t |k_t|^2 (2 -
// beta_t |k_t|^2) / K) (|k_t| after the in-kernel l2norm when enabled; each factor clamped to
// [0, 1]: growth is growth_factor's). Per (sequence, value head) s_j = 1 + rho_{c,j}^2 s_{j-1}
// (s_0 = 0) counts, in mean square, the chunk errors alive in the state after chunk j.
struct ChunkMemory {
  double n_c = 1;     // ceil(max sequence length / C), >= 1
  double rho_c2 = 0;  // the worst (largest) chunk rho_c^2 over all chunks, sequences and heads
  double n_mem = 1;   // max over (sequence, head, chunk j) of s_j: <= min(n_c, 1 / (1 - rho_c2))
};
ChunkMemory chunk_memory(const Case& c, int C);

// What a bound needs from a case; bound_inputs() computes it (C = the arm's chunk length), or
// fill it by hand for a case that is not a Case (tools/precision).
struct BoundInputs {
  int K = 128;
  bool l2norm = false;            // q, k normalized in the kernel
  DType out_dtype = DType::bf16;  // o's dtype (its rounding u_out)
  double n_c = 1, n_mem = 1;      // chunk_memory()
  double rho = 1;                 // growth_factor()
};
BoundInputs bound_inputs(const Case& c, int C);
// The bound of one fold-precision row (derive_bound(Arm, Case) = this with the arm's row, for
// wy-tc the row of the scheme wy_tc_half_scheme picks).
Bound derive_bound(const FoldPrecision& f, const BoundInputs& in);

// Negative-control helpers: `got` moved by a +-1 pattern of relative-RMS size `rel` (w.r.t.
// `ref`), and the pass test used by evaluate().
std::vector<double> perturb(const std::vector<double>& ref, const std::vector<double>& got,
                            double rel);
bool within(const Metrics& m, double bound);

// Round-to-nearest-even conversions used by the fixture generator (and tests).
std::uint16_t f32_to_bf16(float x);
float bf16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float x);
float f16_to_f32(std::uint16_t h);
float round_to(DType d, float x);

// Runs an arm through the public API (host, or device copies for GPU arms) on poisoned outputs.
struct ArmOutput {
  Status status;
  Arm ran = Arm::automatic;
  std::vector<double> o, hT;  // decoded to double
};
ArmOutput run_arm(Arm arm, const Case& c, bool on_device);

struct Row {
  std::string arm, fixture;
  Metrics o, state;
  Bound bound;
  double util_o = 0, util_state = 0;  // error / bound
  bool pass = false;
  bool negative_control_failed = false;  // output perturbed by 2.5x bound must fail the check
  std::string error;                     // non-empty when the arm returned an error
};
Row evaluate(Arm arm, const Case& c, const Oracle& ref, bool on_device);

std::string format_table(const std::vector<Row>& rows);

}  // namespace gdn::check
