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

// Per-fold unit roundoffs of an arm (the ONE table, in bounds.cpp; an arm author changes their
// row with a justification there). 0 = that rounding does not happen in this arm.
struct FoldPrecision {
  Arm arm;
  int C;           // chunk length (1 = token-serial)
  double u_acc;    // accumulation precision of every fold (fp32 = 2^-24)
  double u_kk;     // operand rounding of K K^T and Q K^T
  double u_wu;     // operand rounding of W, U (the WY products)
  double u_attn;   // operand rounding of the intra-chunk attention (Q K^T .* Gam) Vn
  double u_state;  // operand rounding of the state in W S, Q S and of K, Vn in K^T Vn
  double u_solve;  // precision of the (I + A)^-1 triangular solve
  const char* why;
};
const FoldPrecision& fold_precision(Arm arm);
constexpr double kLambda = 4.0;  // probabilistic rounding constant, fixed before any tuning
// Worst per-step error growth prod_t max(1, |1 - beta_t |k_t|^2|) over heads (1 inside the
// bound's domain beta |k|^2 <= 2; larger for un-normalized keys).
double growth_factor(const Case& c);

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
