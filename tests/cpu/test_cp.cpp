// Context-parallel prefill on the cpu arm (src/cp/cp.cpp): prefill_cp with P = 1, 2, 3, 7
// segments and P virtual ranks (cp_rank_maps / cp_rank_finish, the multi-GPU path minus NCCL)
// against the fp64 oracle within the cpu arm's bound, and against plain prefill. Negative controls:
// the check fails on an output perturbed by 2.5x the bound, and running the segments without the
// combine (each from 0) fails where the carried state matters.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../cp_test_util.hpp"

namespace gdn {
namespace {

constexpr std::uint64_t kSeed = 909;

check::CaseSpec spec_of(std::vector<int> lens, check::Decay decay, bool h0) {
  check::CaseSpec s;
  s.seq_lens = std::move(lens);
  s.HK = 2;
  s.HV = 4;
  s.K = 64;
  s.V = 64;
  s.decay = decay;
  s.h0 = h0;
  return s;
}

// Does the state carried into a later segment reach the outputs above the bound? True when some
// sequence is split and the decay keeps the state (none, slow).
bool carried_state_matters(const check::CaseSpec& s, int P) {
  bool split = false;
  for (int len : s.seq_lens) split |= P > 1 && len > 64;
  return split && (s.decay == check::Decay::none || s.decay == check::Decay::slow);
}

void expect_cp(const check::CaseSpec& spec, int P, cptest::Mode mode = cptest::Mode::cp) {
  const check::Case c = check::make_case(spec, kSeed);
  const check::Oracle ref = check::ref_serial(c);
  const check::Bound b = check::derive_bound(Arm::cpu, c);
  cptest::HostMem mem;
  const cptest::Out got = cptest::run(c, mode, P, Arm::cpu, mem);
  const std::string what =
      std::string(cptest::mode_name(mode)) + " P=" + std::to_string(P) + " cpu " + spec.name();
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.message();
  EXPECT_EQ(got.info.ran, Arm::cpu) << what;
  const check::Metrics mo = check::compare(ref.o, got.o), ms = check::compare(ref.hT, got.hT);
  std::printf("%-14s P=%d %-52s o %.2e / %.2e (util %.3f)  state %.2e / %.2e (util %.3f)\n",
              cptest::mode_name(mode), P, spec.name().c_str(), mo.rel_rms, b.o, mo.rel_rms / b.o,
              ms.rel_rms, b.state, ms.rel_rms / b.state);
  EXPECT_TRUE(check::within(mo, b.o))
      << what << ": o rel_rms " << mo.rel_rms << " > bound " << b.o << " (NaN " << mo.nan_count
      << ", max_abs " << mo.max_abs << ")\n"
      << b.formula;
  EXPECT_TRUE(check::within(ms, b.state))
      << what << ": state rel_rms " << ms.rel_rms << " > bound " << b.state << " (NaN "
      << ms.nan_count << ", max_abs " << ms.max_abs << ")\n"
      << b.formula;
  // Against plain prefill of the same arm: the split changes nothing beyond rounding.
  const cptest::Out plain = cptest::run(c, cptest::Mode::plain, 1, Arm::cpu, mem);
  ASSERT_TRUE(plain.status.ok()) << plain.status.message();
  EXPECT_TRUE(check::within(check::compare(plain.o, got.o), b.o)) << what << " vs prefill: o";
  EXPECT_TRUE(check::within(check::compare(plain.hT, got.hT), b.state))
      << what << " vs prefill: hT";
  // Negative controls: the check fails at 2.5x the bound ...
  if (!ref.o.empty())
    EXPECT_FALSE(check::within(check::compare(ref.o, check::perturb(ref.o, got.o, 2.5 * b.o)), b.o))
        << what << ": a perturbed o passed";
  EXPECT_FALSE(
      check::within(check::compare(ref.hT, check::perturb(ref.hT, got.hT, 2.5 * b.state)), b.state))
      << what << ": a perturbed hT passed";
  // ... and the segments run without the combine fail where the carried state matters.
  if (mode == cptest::Mode::cp && carried_state_matters(spec, P)) {
    const cptest::Out nc = cptest::run(c, cptest::Mode::no_combine, P, Arm::cpu, mem);
    ASSERT_TRUE(nc.status.ok()) << nc.status.message();
    const check::Metrics no = check::compare(ref.o, nc.o);
    std::printf("  no-combine control: o %.2e (bound %.2e)\n", no.rel_rms, b.o);
    EXPECT_FALSE(check::within(no, b.o)) << what << ": dropping the combine passed the check";
  }
}

TEST(CpCpu, T4099_slow_h0_P1_P2_P3_P7) {
  for (int P : {1, 2, 3, 7}) expect_cp(spec_of({4099}, check::Decay::slow, true), P);
}
TEST(CpCpu, T1000_none_noh0_K64_V128_f32io_P1_P2_P3_P7) {
  check::CaseSpec s = spec_of({1000}, check::Decay::none, false);
  s.V = 128;
  s.io_dtype = s.out_dtype = DType::f32;
  for (int P : {1, 2, 3, 7}) expect_cp(s, P);
}
TEST(CpCpu, T200_fast_noh0_P2_P3_P7) {
  for (int P : {2, 3, 7}) expect_cp(spec_of({200}, check::Decay::fast, false), P);
}
TEST(CpCpu, T65_extreme_h0_P2_P3) {
  for (int P : {2, 3}) expect_cp(spec_of({65}, check::Decay::extreme, true), P);
}
TEST(CpCpu, T300_slow_h0_beta1_f16_P3) {
  check::CaseSpec s = spec_of({300}, check::Decay::slow, true);
  s.beta = check::BetaKind::one;
  s.io_dtype = s.out_dtype = DType::f16;
  expect_cp(s, 3);
}
TEST(CpCpu, Varlen_L130x0x1x257_slow_h0_tiled_vk_l2norm_P1_P2_P3_P7) {
  check::CaseSpec s = spec_of({130, 0, 1, 257}, check::Decay::slow, true);
  s.HV = 6;
  s.head_map = HeadMap::tiled;
  s.state_layout = StateLayout::vk;
  s.l2norm_in_kernel = true;
  for (int P : {1, 2, 3, 7}) expect_cp(s, P);
}
TEST(CpCpu, Varlen_L0x700x64_none_noh0_K128_grouped_P3) {
  check::CaseSpec s = spec_of({0, 700, 64}, check::Decay::none, false);
  s.K = s.V = 128;
  expect_cp(s, 3);
}
TEST(CpCpu, AllZeroLength_L0x0_h0_P3) { expect_cp(spec_of({0, 0}, check::Decay::slow, true), 3); }

// The multi-GPU path with P virtual ranks in one process (no NCCL: the all-gather is a shared
// buffer), uneven token slices.
TEST(CpCpuRanks, T1000_slow_h0_P1_P2_P3_P7) {
  for (int P : {1, 2, 3, 7})
    expect_cp(spec_of({1000}, check::Decay::slow, true), P, cptest::Mode::ranks);
}
TEST(CpCpuRanks, T777_none_h0_vk_l2norm_tiled_P3) {
  check::CaseSpec s = spec_of({777}, check::Decay::none, true);
  s.state_layout = StateLayout::vk;
  s.l2norm_in_kernel = true;
  s.head_map = HeadMap::tiled;
  expect_cp(s, 3, cptest::Mode::ranks);
}

// Bad input: a clear error, outputs untouched.
TEST(CpCpu, BadSegments_OutputsUntouched) {
  const check::Case c = check::make_case(spec_of({100}, check::Decay::slow, true), kSeed);
  std::vector<std::uint16_t> o(c.T * c.prob.HV * c.prob.V, 0x1234);
  std::vector<float> hT(c.prob.HV * c.prob.K * c.prob.V, 7.f);
  const PrefillArgs a = c.host_args(o.data(), hT.data());
  for (int P : {0, -1, 1025}) {
    const Status st = prefill_cp(c.prob, a, P, Arm::cpu);
    EXPECT_EQ(st.code(), Code::invalid_argument) << "P=" << P;
    EXPECT_NE(st.message().find("segments"), std::string::npos) << st.message();
  }
  PrefillArgs bad = a;
  bad.g.shape[1] = 3;  // wrong HV
  EXPECT_EQ(prefill_cp(c.prob, bad, 3, Arm::cpu).code(), Code::invalid_argument);
  std::vector<float> gpos(c.g);
  gpos[5] = 0.5f;  // g > 0: rejected by the value scan before anything is written
  PrefillArgs badv = a;
  badv.g.data = gpos.data();
  EXPECT_FALSE(prefill_cp(c.prob, badv, 3, Arm::cpu).ok());
  for (auto x : o) ASSERT_EQ(x, 0x1234);
  for (auto x : hT) ASSERT_EQ(x, 7.f);
  EXPECT_EQ(cp_rank_maps(c.prob, a, 3, 3, Arm::cpu, hT.data()).code(), Code::invalid_argument);
  std::string why;
  EXPECT_FALSE(prefill_cp_nccl(nullptr, 0, 1, c.prob, a, Arm::cpu).ok());
}

}  // namespace
}  // namespace gdn
