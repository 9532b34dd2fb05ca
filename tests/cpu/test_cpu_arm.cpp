// The cpu arm against the fp64 oracle on every fixture (bound and utilisation printed), with
// negative controls, poisoned outputs, hT aliasing h0, run-to-run bitwise reproducibility and
// the head-map test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "check/check.hpp"
#include "small_spec.hpp"

namespace gdn::check {
namespace {

constexpr std::uint64_t kSeed = 20261202;

class CpuArm : public ::testing::TestWithParam<int> {};

TEST_P(CpuArm, VsOracle) {
  const CaseSpec spec = fixture_set()[GetParam()];
  const Case c = make_case(spec, kSeed + GetParam());
  const Oracle ref = ref_serial(c);
  const Row r = evaluate(Arm::cpu, c, ref, false);
  std::printf("cpu %s: o %.3e / %.3e (util %.3f)  state %.3e / %.3e (util %.3f)\n",
              r.fixture.c_str(), r.o.rel_rms, r.bound.o, r.util_o, r.state.rel_rms, r.bound.state,
              r.util_state);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.arm, "cpu");
  EXPECT_EQ(r.o.nan_count, 0);
  EXPECT_EQ(r.state.nan_count, 0);
  EXPECT_TRUE(r.pass) << r.bound.formula;
  EXPECT_TRUE(r.negative_control_failed) << "a perturbed output passed the check";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuArm, ::testing::Range(0, (int)fixture_set().size()),
                         [](const auto& info) { return fixture_set()[info.param].name(); });

using cputest::small_spec;

// The check itself must fail on a wrong output: perturbation at 2.5x the bound, and a single
// unwritten (NaN) element.
TEST(CpuArm, NegativeControls_T70_HK2_HV4_K64) {
  const Case c = make_case(small_spec(), kSeed);
  const Oracle ref = ref_serial(c);
  const ArmOutput out = run_arm(Arm::cpu, c, false);
  ASSERT_TRUE(out.status.ok()) << out.status.message();
  const Bound b = derive_bound(Arm::cpu, c);
  EXPECT_TRUE(within(compare(ref.o, out.o), b.o));
  EXPECT_FALSE(within(compare(ref.o, perturb(ref.o, out.o, 2.5 * b.o)), b.o));
  EXPECT_FALSE(within(compare(ref.hT, perturb(ref.hT, out.hT, 2.5 * b.state)), b.state));
  std::vector<double> hole = out.o;
  hole[hole.size() / 2] = NAN;
  const Metrics m = compare(ref.o, hole);
  EXPECT_EQ(m.nan_count, 1);
  EXPECT_FALSE(within(m, b.o));
}

// Every output element is written: poison with NaN (and, separately, with a finite sentinel)
// and check that none survives.
TEST(CpuArm, PoisonedOutputsAllWritten_L5x0x70_HK2_HV4_K64) {
  CaseSpec s = small_spec();
  s.seq_lens = {5, 0, 70};
  const Case c = make_case(s, kSeed);
  const ArmOutput out = run_arm(Arm::cpu, c, false);  // run_arm poisons with NaN
  ASSERT_TRUE(out.status.ok()) << out.status.message();
  for (std::size_t i = 0; i < out.o.size(); ++i) ASSERT_TRUE(std::isfinite(out.o[i])) << "o " << i;
  for (std::size_t i = 0; i < out.hT.size(); ++i)
    ASSERT_TRUE(std::isfinite(out.hT[i])) << "hT " << i;
  // The zero-length sequence's final state is its initial state, bit for bit.
  const std::size_t kv = 64 * 64 * s.HV;
  for (std::size_t i = 0; i < kv; ++i) ASSERT_EQ(out.hT[kv + i], (double)c.h0[kv + i]) << i;
}

// hT may alias h0 (in-place state update): same result as separate buffers.
TEST(CpuArm, HTAliasesH0_L37x64_HK2_HV4_K64) {
  CaseSpec s = small_spec();
  s.seq_lens = {37, 64};
  const Case c = make_case(s, kSeed);
  std::vector<std::uint16_t> o1(c.T * s.HV * s.V), o2(o1.size());
  std::vector<float> hT(c.h0.size()), inplace(c.h0);
  ASSERT_TRUE(prefill(c.prob, c.host_args(o1.data(), hT.data()), Arm::cpu).ok());
  PrefillArgs a = c.host_args(o2.data(), nullptr);
  a.h0.data = inplace.data();
  a.hT = a.h0;
  const Status st = prefill(c.prob, a, Arm::cpu);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(0, std::memcmp(hT.data(), inplace.data(), hT.size() * 4));
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 2));
}

// Bitwise reproducible run to run, and independent of the thread count.
TEST(CpuArm, BitwiseReproducible_T200_HK2_HV4_K64_threads) {
  CaseSpec s = small_spec();
  s.seq_lens = {200};
  const Case c = make_case(s, kSeed);
  const ArmOutput a = run_arm(Arm::cpu, c, false), b = run_arm(Arm::cpu, c, false);
  setenv("GDN_THREADS", "1", 1);
  const ArmOutput one = run_arm(Arm::cpu, c, false);
  unsetenv("GDN_THREADS");
  ASSERT_TRUE(a.status.ok() && b.status.ok() && one.status.ok());
  EXPECT_EQ(0, std::memcmp(a.o.data(), b.o.data(), a.o.size() * 8));
  EXPECT_EQ(0, std::memcmp(a.hT.data(), b.hT.data(), a.hT.size() * 8));
  EXPECT_EQ(0, std::memcmp(a.o.data(), one.o.data(), a.o.size() * 8));
  EXPECT_EQ(0, std::memcmp(a.hT.data(), one.hT.data(), a.hT.size() * 8));
}

// The two GVA head maps read different key heads: on the same data they must give different
// results (oracle and arm), and the arm must match the oracle of its own map, not the other.
TEST(CpuArm, HeadMapsDiffer_T65_HK2_HV4_K64_grouped_vs_tiled) {
  CaseSpec sg = small_spec(), st = small_spec();
  sg.seq_lens = st.seq_lens = {65};
  sg.head_map = HeadMap::grouped;
  st.head_map = HeadMap::tiled;
  const Case cg = make_case(sg, kSeed), ct = make_case(st, kSeed);
  ASSERT_EQ(cg.k32, ct.k32);  // same data, only the map differs
  const Oracle rg = ref_serial(cg), rt = ref_serial(ct);
  EXPECT_GT(compare(rg.o, rt.o).rel_rms, 0.1);
  const ArmOutput og = run_arm(Arm::cpu, cg, false), ot = run_arm(Arm::cpu, ct, false);
  const Bound b = derive_bound(Arm::cpu, cg);
  EXPECT_TRUE(within(compare(rg.o, og.o), b.o));
  EXPECT_TRUE(within(compare(rt.o, ot.o), b.o));
  EXPECT_FALSE(within(compare(rg.o, ot.o), b.o));  // tiled output vs grouped oracle fails
  EXPECT_FALSE(within(compare(rt.o, og.o), b.o));
}

// Un-normalized keys are outside the bound's domain: the bound says so (growth factor > 1),
// the arm still returns without crashing.
TEST(CpuArm, UnnormalizedKeysOutsideDomain_T64_HK1_HV1_K64) {
  CaseSpec s = small_spec();
  s.seq_lens = {64};
  s.HK = s.HV = 1;
  s.l2norm_in_kernel = true;  // generator leaves keys raw ...
  Case c = make_case(s, kSeed);
  c.prob.qk_l2norm = false;  // ... and the kernel does not normalize them
  EXPECT_GT(growth_factor(c), 1.0);
  EXPECT_NE(derive_bound(Arm::cpu, c).formula.find("outside the domain"), std::string::npos);
  const ArmOutput out = run_arm(Arm::cpu, c, false);
  EXPECT_TRUE(out.status.ok()) << out.status.message();
}

}  // namespace
}  // namespace gdn::check
