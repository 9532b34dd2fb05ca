// wy-tc state pass variants: the sm_90a wgmma pass (v9, or v6 with GDN_WYTC_STATE=v6,
// wy_tc_state_wgmma.cuh, the default on a compute capability 9.0 device) against the mma.sync pass (v5, GDN_WYTC_STATE=v5) and the fp64
// oracle, over the head sizes, output dtypes, state layouts and sequence sets the kernel templates
// cover. The negative control of the wgmma path itself: with GDN_WYTC_WG_NEGCTL=1 its W^T fold
// reads the Qs tiles and parity must fail, which also proves that the v6 kernel is the one that
// ran (v5 ignores the variable). The v5 pass alone on the whole fixture set (any device).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "gdn/gdn.hpp"
#include "gpu_test_util.hpp"

namespace {

using gdn::Arm;
namespace check = gdn::check;
namespace testutil = gdn::testutil;

bool is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

struct StateCase {
  const char* name;
  check::CaseSpec spec;
};

std::vector<StateCase> cases() {
  std::vector<StateCase> v;
  {
    check::CaseSpec s = testutil::spec_of({300, 0, 1029, 17}, 2, 6, 128, 128);
    s.h0 = true;
    s.decay = check::Decay::slow;
    v.push_back({"L300x0x1029x17_HK2_HV6_K128_V128_bf16_h0", s});
  }
  {
    check::CaseSpec s = testutil::spec_of({200, 65}, 1, 2, 64, 64);
    s.out_dtype = gdn::DType::f32;
    s.h0 = true;
    v.push_back({"L200x65_HK1_HV2_K64_V64_f32out_h0", s});
  }
  {
    check::CaseSpec s = testutil::spec_of({129, 64}, 1, 3, 64, 128);
    s.state_layout = gdn::StateLayout::vk;
    s.l2norm_in_kernel = true;
    s.h0 = true;
    v.push_back({"L129x64_HK1_HV3_K64_V128_vk_l2norm_h0", s});
  }
  {
    check::CaseSpec s = testutil::spec_of({70, 333}, 2, 2, 128, 64);
    s.head_map = gdn::HeadMap::tiled;
    v.push_back({"L70x333_HK2_HV2_K128_V64_tiled", s});
  }
  return v;
}

// x (a variant that must be bit-identical to the single pass `one`) and bad (its negative
// control, which must differ): counts the differing o and state elements, prints them under
// `what`, and expects none for x and some for bad.
void expect_same_bits(const char* what, const char* name, const check::ArmOutput& x,
                      const check::ArmOutput& one, const check::ArmOutput& bad,
                      const char* neg_msg) {
  ASSERT_TRUE(x.status.ok() && one.status.ok() && bad.status.ok())
      << x.status.message() << one.status.message() << bad.status.message();
  ASSERT_EQ(x.o.size(), one.o.size());
  ASSERT_EQ(x.hT.size(), one.hT.size());
  ASSERT_EQ(bad.o.size(), one.o.size());
  ASSERT_EQ(bad.hT.size(), one.hT.size());
  std::size_t diff_o = 0, diff_s = 0, bad_o = 0, bad_s = 0;
  for (std::size_t i = 0; i < x.o.size(); ++i) {
    diff_o += !(x.o[i] == one.o[i]);
    bad_o += !(bad.o[i] == one.o[i]);
  }
  for (std::size_t i = 0; i < x.hT.size(); ++i) {
    diff_s += !(x.hT[i] == one.hT[i]);
    bad_s += !(bad.hT[i] == one.hT[i]);
  }
  std::printf("wy-tc %s vs single pass %s: %zu of %zu o, %zu of %zu state differ; "
              "negative control: %zu o, %zu state differ\n",
              what, name, diff_o, x.o.size(), diff_s, x.hT.size(), bad_o, bad_s);
  EXPECT_EQ(diff_o, 0u);
  EXPECT_EQ(diff_s, 0u);
  EXPECT_GT(bad_o, 0u) << neg_msg;
  EXPECT_GT(bad_s, 0u);
}

// wy-tc on case c with the environment variable var set to value for that one call.
check::ArmOutput run_with(const char* var, const char* value, const check::Case& c) {
  testutil::ScopedEnv env(var, value);
  return check::run_arm(Arm::wy_tc, c, true);
}

// A run-time variant of the wy-tc pass selected by the environment variable var: with var=on the
// arm passes the oracle and its own negative control on c, and its o and final state equal
// var=0's bit for bit; var=negctl (the variant's own negative control) must differ (neg_msg).
void expect_variant_equals(const char* var, const char* on, const std::string& what,
                           const char* name, const check::Case& c, const check::Oracle& ref,
                           const char* neg_msg) {
  check::ArmOutput x;
  {
    testutil::ScopedEnv force(var, on);
    const check::Row r = check::evaluate(Arm::wy_tc, c, ref, true);
    std::printf("wy-tc %s %s: o %.3e state %.3e (util %.3f / %.3f)\n", what.c_str(), name,
                r.o.rel_rms, r.state.rel_rms, r.util_o, r.util_state);
    EXPECT_TRUE(r.error.empty()) << testutil::describe(r);
    EXPECT_TRUE(r.pass) << testutil::describe(r);
    EXPECT_TRUE(r.negative_control_failed) << testutil::describe(r);
    x = check::run_arm(Arm::wy_tc, c, true);
  }
  const check::ArmOutput one = run_with(var, "0", c);
  const check::ArmOutput bad = run_with(var, "negctl", c);
  expect_same_bits(what.c_str(), name, x, one, bad, neg_msg);
}

TEST(WyTcState, WgmmaMatchesMmaSyncAndOracle) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma state pass runs on compute capability 9.0 only";
  // The split scheme (v5 has no half variant): the same products on both passes.
  testutil::ScopedEnv split("GDN_WYTC_PRECISION", "split");
  int seed = 40;
  for (const StateCase& sc : cases()) {
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::Oracle ref = check::ref_serial(c);
    // Default path (v6 on this device): parity with its derived bound and negative control.
    const check::Row r = check::evaluate(Arm::wy_tc, c, ref, true);
    std::printf("wy-tc v6 %s: o %.3e state %.3e (util %.3f / %.3f)\n", sc.name, r.o.rel_rms,
                r.state.rel_rms, r.util_o, r.util_state);
    EXPECT_TRUE(r.error.empty()) << testutil::describe(r);
    EXPECT_TRUE(r.pass) << testutil::describe(r);
    EXPECT_TRUE(r.negative_control_failed) << testutil::describe(r);
    const check::ArmOutput v6 = check::run_arm(Arm::wy_tc, c, true);
    check::ArmOutput v5;
    {
      testutil::ScopedEnv env("GDN_WYTC_STATE", "v5");
      v5 = check::run_arm(Arm::wy_tc, c, true);
    }
    ASSERT_TRUE(v6.status.ok() && v5.status.ok()) << v6.status.message() << v5.status.message();
    // Same operands, same split products; only the tensor cores' summation order within a k16
    // step differs: o within a few output roundings, the state within fp32 accumulation.
    const check::Metrics dO = check::compare(v5.o, v6.o), dS = check::compare(v5.hT, v6.hT);
    std::printf("wy-tc v6 vs v5 %s: o %.3e state %.3e\n", sc.name, dO.rel_rms, dS.rel_rms);
    EXPECT_LE(dO.rel_rms, 1e-3);
    EXPECT_EQ(dO.nan_count, 0);
    if (!v5.hT.empty()) {
      EXPECT_LE(dS.rel_rms, 1e-5);
      EXPECT_EQ(dS.nan_count, 0);
    }
  }
}

// FNV-1a over the bits of a decoded output: equal hashes = bit-equal outputs (for A/B runs of
// two builds of the same pass).
std::uint64_t bits_hash(const std::vector<double>& x) {
  std::uint64_t h = 1469598103934665603ull;
  for (double d : x) {
    std::uint64_t b;
    std::memcpy(&b, &d, sizeof b);
    for (int i = 0; i < 8; ++i) h = (h ^ ((b >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
  return h;
}

// The mma.sync pass (v5; the default off cc 9.0, forced here by GDN_WYTC_STATE=v5 so that it
// runs on the H200 too) on the whole fixture set (partial and single-token chunks, varlen with a
// zero-length sequence, K / V 64 and 128, f16 / f32 io, l2norm, tiled heads) and the cases
// above: parity with the derived bound, its negative control, and two runs bit for bit equal
// (the contiguous tile copies and ldmatrix reads race-free). The printed hashes identify the
// outputs bit for bit across builds.
TEST(WyTcState, MmaSyncPassParityFixtureSetAndCases) {
  testutil::ScopedEnv env("GDN_WYTC_STATE", "v5");
  std::vector<StateCase> all;
  const std::vector<check::CaseSpec> fixtures = check::fixture_set();
  std::vector<std::string> names;
  names.reserve(fixtures.size());
  for (const check::CaseSpec& s : fixtures) names.push_back(s.name());
  for (std::size_t i = 0; i < fixtures.size(); ++i) all.push_back({names[i].c_str(), fixtures[i]});
  for (const StateCase& sc : cases()) all.push_back(sc);
  int seed = 60;
  for (const StateCase& sc : all) {
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::Oracle ref = check::ref_serial(c);
    const check::Row r = check::evaluate(Arm::wy_tc, c, ref, true);
    EXPECT_TRUE(r.error.empty()) << testutil::describe(r);
    EXPECT_TRUE(r.pass) << testutil::describe(r);
    EXPECT_TRUE(r.negative_control_failed) << testutil::describe(r);
    const check::ArmOutput a = check::run_arm(Arm::wy_tc, c, true);
    const check::ArmOutput b = check::run_arm(Arm::wy_tc, c, true);
    ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status.message() << b.status.message();
    EXPECT_EQ(bits_hash(a.o), bits_hash(b.o)) << "o differs between two runs";
    EXPECT_EQ(bits_hash(a.hT), bits_hash(b.hT)) << "hT differs between two runs";
    std::printf("wy-tc v5 state %s: o %.3e state %.3e (util %.3f / %.3f) hash o %016llx hT %016llx\n",
                sc.name, r.o.rel_rms, r.state.rel_rms, r.util_o, r.util_state,
                static_cast<unsigned long long>(bits_hash(a.o)),
                static_cast<unsigned long long>(bits_hash(a.hT)));
  }
}

// v9 (the default with the exact workspace, wy_tc_state_wg9.cuh) reorders only when each wgmma
// group is issued and waited for, and how descriptors, O staging and o stores are formed, not what
// it computes: o and hT equal v6's (GDN_WYTC_STATE=v6) bit for bit, on every case (partial chunks,
// an empty sequence, K/V 64 and 128, f32 out, vk state, tiled heads). The negative control: v9
// with its W^T fold on the wrong tiles (GDN_WYTC_WG_NEGCTL=1) differs from v6, which also shows
// that v9 is the kernel that ran. (r19 checked v9 against v8, the schedule without v9's
// bookkeeping, the same way before v8 was removed: bit for bit equal on these cases.)
// (Both in the split operand scheme: v6 has no half variant.)
TEST(WyTcState, V9EqualsV6BitForBit) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma state pass runs on compute capability 9.0 only";
  testutil::ScopedEnv split("GDN_WYTC_PRECISION", "split");
  int seed = 140;
  for (const StateCase& sc : cases()) {
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::ArmOutput v9 = check::run_arm(Arm::wy_tc, c, true);
    check::ArmOutput v6, bad;
    {
      testutil::ScopedEnv env("GDN_WYTC_STATE", "v6");
      v6 = check::run_arm(Arm::wy_tc, c, true);
    }
    {
      testutil::ScopedEnv neg("GDN_WYTC_WG_NEGCTL", "1");
      bad = check::run_arm(Arm::wy_tc, c, true);
    }
    ASSERT_TRUE(v9.status.ok() && v6.status.ok() && bad.status.ok())
        << v9.status.message() << v6.status.message() << bad.status.message();
    ASSERT_EQ(v9.o.size(), v6.o.size());
    ASSERT_EQ(bad.o.size(), v6.o.size());
    std::size_t diff_o = 0, diff_s = 0, diff_bad = 0;
    for (std::size_t i = 0; i < v9.o.size(); ++i) {
      diff_o += !(v9.o[i] == v6.o[i]);
      diff_bad += !(bad.o[i] == v6.o[i]);
    }
    ASSERT_EQ(v9.hT.size(), v6.hT.size());
    for (std::size_t i = 0; i < v9.hT.size(); ++i) diff_s += !(v9.hT[i] == v6.hT[i]);
    std::printf("wy-tc v9 vs v6 %s: %zu of %zu o, %zu of %zu state differ; negative control: "
                "%zu o differ\n",
                sc.name, diff_o, v9.o.size(), diff_s, v9.hT.size(), diff_bad);
    EXPECT_EQ(diff_o, 0u);
    EXPECT_EQ(diff_s, 0u);
    EXPECT_GT(diff_bad, v9.o.size() / 4) << "the negative control did not change o";
  }
}

// Overlapped passes (one sequence whose state blocks fill at most half of the SMs, >= 2 segments
// of >= 16 chunks; forced here with GDN_WYTC_OVERLAP=1, the default starts at 256 chunks): the
// chunk kernels of segment i + 1 run beside the state pass of segment i,
// which continues from segment i - 1's state through an fp32 carry buffer. The results equal the
// single pass (GDN_WYTC_OVERLAP=0) bit for bit and pass the oracle; the negative control
// (GDN_WYTC_OVERLAP=negctl drops the carry) must differ, which also shows that the segmented
// path is the one that ran.
TEST(WyTcState, OverlappedSegmentsEqualSinglePass) {
  if (!is_sm90()) GTEST_SKIP() << "the v9 state pass runs on compute capability 9.0 only";
  std::vector<StateCase> cs;
  {
    check::CaseSpec s = testutil::spec_of({4099}, 2, 6, 128, 128);  // 65 chunks: 5 segments
    s.h0 = true;
    s.decay = check::Decay::slow;
    cs.push_back({"L4099_HK2_HV6_K128_V128_bf16_h0", s});
  }
  {
    check::CaseSpec s = testutil::spec_of({2100}, 1, 2, 64, 64);  // 33 chunks: 3 segments
    s.out_dtype = gdn::DType::f32;
    s.state_layout = gdn::StateLayout::vk;
    s.l2norm_in_kernel = true;
    s.h0 = false;
    cs.push_back({"L2100_HK1_HV2_K64_V64_f32out_vk_l2norm", s});
  }
  int seed = 300;
  for (const StateCase& sc : cs) {
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::Oracle ref = check::ref_serial(c);
    // GDN_WYTC_OVERLAP=1: the default starts at 256 chunks
    expect_variant_equals("GDN_WYTC_OVERLAP", "1", "overlapped", sc.name, c, ref,
                          "dropping the carry changed nothing: the segmented path did not run");
  }
}

// The flag pipeline (GDN_WYTC_FLAGS=1, opt-in; paired slices unless GDN_WYTC_PAIR=0; sessions
// 28-29): one chunk launch over all chunks, chunk by
// chunk, and one state launch at the same time on the side stream; each state block copies chunk
// c's tiles only after the chunk blocks of c (its value head's, and its key head's writer's for Q
// and K^T) have counted into its ready word. Only the schedule changes, so o and the final state equal
// the single pass (GDN_WYTC_FLAGS=0, which at these sizes runs no overlap) bit for bit, and pass
// the oracle, with paired slices and with one slice per block (GDN_WYTC_PAIR=0). Cases: grouped heads (the key-head writer is another value head), the tiled map
// with the in-kernel l2norm, one chunk, and a partial last chunk. Negative control
// (GDN_WYTC_FLAGS=negctl: the state pass runs before the chunk kernel with every flag preset and
// the workspace poisoned) must differ: a state pass that does not wait for its tiles is caught,
// and the flag kernels are the ones that ran.
TEST(WyTcState, FlagPipelineEqualsSinglePass) {
  if (!is_sm90()) GTEST_SKIP() << "the v9 state pass runs on compute capability 9.0 only";
  std::vector<StateCase> cs;
  {
    check::CaseSpec s = testutil::spec_of({4099}, 2, 6, 128, 128);  // 65 chunks
    s.h0 = true;
    s.decay = check::Decay::slow;
    cs.push_back({"L4099_HK2_HV6_K128_V128_bf16_h0", s});
  }
  {
    check::CaseSpec s = testutil::spec_of({2100}, 2, 2, 128, 128);  // 33 chunks
    s.head_map = gdn::HeadMap::tiled;
    s.l2norm_in_kernel = true;
    s.h0 = true;
    cs.push_back({"L2100_HK2_HV2_K128_V128_tiled_l2norm_h0", s});
  }
  {
    check::CaseSpec s = testutil::spec_of({50}, 1, 4, 128, 128);  // one partial chunk
    cs.push_back({"L50_HK1_HV4_K128_V128", s});
  }
  {
    check::CaseSpec s = testutil::spec_of({1000}, 4, 8, 128, 128);  // 16 chunks, last partial
    s.h0 = true;
    cs.push_back({"L1000_HK4_HV8_K128_V128_h0", s});
  }
  int seed = 900;
  for (const StateCase& sc : cs) {
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::Oracle ref = check::ref_serial(c);
    // Paired slices (the default with the flags) and one slice per block (GDN_WYTC_PAIR=0).
    for (const char* pair : {"1", "0"}) {
      SCOPED_TRACE(std::string("GDN_WYTC_PAIR=") + pair);
      testutil::ScopedEnv pe("GDN_WYTC_PAIR", pair);
      expect_variant_equals("GDN_WYTC_FLAGS", "1",
                            std::string("flag pipeline, PAIR=") + pair, sc.name, c, ref,
                            "a state pass run before its chunk kernel changed nothing: the flag "
                            "pipeline did not run");
      // The state pass really waits: with the workspace poisoned and the chunk kernel held back
      // ~20 ms (GDN_WYTC_FLAGS=delay), any tile copied before its flag is poison, so only a
      // waiting state pass still equals the single pass. (Session 28's first paired run
      // dispatched a non-waiting kernel and the checks above did not notice.)
      const check::ArmOutput one = run_with("GDN_WYTC_FLAGS", "0", c);
      const check::ArmOutput late = run_with("GDN_WYTC_FLAGS", "delay", c);
      ASSERT_TRUE(one.status.ok() && late.status.ok()) << late.status.message();
      std::size_t diff = 0;
      for (std::size_t i = 0; i < one.o.size(); ++i) diff += !(late.o[i] == one.o[i]);
      for (std::size_t i = 0; i < one.hT.size(); ++i) diff += !(late.hT[i] == one.hT[i]);
      std::printf("wy-tc flag pipeline, PAIR=%s, chunk kernel held back, %s: %zu elements differ\n",
                  pair, sc.name, diff);
      EXPECT_EQ(diff, 0u) << "the state pass read tiles before their flags were set";
    }
  }
}

// The flag pipeline's delay check has teeth, and the state-first launch order (experiment) gives
// the same bits. Kept apart from FlagPipeline* (the sanitizer filter), because both need the two
// streams to run at once, which compute-sanitizer's serialised launches prevent (the state-first
// order would wait there until its 20 s trap).
// - GDN_WYTC_FLAGS=delay-negctl: the delay check (workspace poisoned, chunk kernel held back
//   ~20 ms) with the ordinary state kernel, which does not wait: it reads poison, so o and the
//   final state must differ from the single pass (the check above fails a non-waiting kernel).
// - GDN_WYTC_FLAGS_ORDER=state: the state kernel launched before the chunk kernel: o and the
//   final state equal the single pass bit for bit.
TEST(WyTcState, FlagDelayCheckCatchesANonWaitingStatePass) {
  if (!is_sm90()) GTEST_SKIP() << "the v9 state pass runs on compute capability 9.0 only";
  check::CaseSpec spec = testutil::spec_of({4099}, 2, 6, 128, 128);  // 65 chunks
  spec.h0 = true;
  const check::Case c = check::make_case(spec, 950);
  for (const char* pair : {"1", "0"}) {
    SCOPED_TRACE(std::string("GDN_WYTC_PAIR=") + pair);
    testutil::ScopedEnv pe("GDN_WYTC_PAIR", pair);
    const check::ArmOutput one = run_with("GDN_WYTC_FLAGS", "0", c);
    const check::ArmOutput bad = run_with("GDN_WYTC_FLAGS", "delay-negctl", c);
    check::ArmOutput first;
    {
      testutil::ScopedEnv order("GDN_WYTC_FLAGS_ORDER", "state");
      first = run_with("GDN_WYTC_FLAGS", "1", c);
    }
    ASSERT_TRUE(one.status.ok() && bad.status.ok() && first.status.ok())
        << bad.status.message() << " / " << first.status.message();
    std::size_t d_bad = 0, d_first = 0;
    for (std::size_t i = 0; i < one.o.size(); ++i)
      d_bad += !(bad.o[i] == one.o[i]), d_first += !(first.o[i] == one.o[i]);
    for (std::size_t i = 0; i < one.hT.size(); ++i)
      d_bad += !(bad.hT[i] == one.hT[i]), d_first += !(first.hT[i] == one.hT[i]);
    std::printf("wy-tc flag pipeline, PAIR=%s: delay check on a non-waiting state pass %zu, "
                "state kernel first %zu of %zu elements differ\n",
                pair, d_bad, d_first, one.o.size() + one.hT.size());
    EXPECT_GT(d_bad, 0u) << "the delay check passed a state pass that does not wait";
    EXPECT_EQ(d_first, 0u) << "the state-first order changed the result";
  }
}

// Paired slices in the v9 state pass (GDN_WYTC_PAIR=1 forces them; by default multi-wave state
// passes and long overlaps at 27b-like grids; one block of two warpgroups per sequence
// and value head, V = 128, half scheme with fp16 U, 2-byte o): each warpgroup runs the one-slice
// pass on its slice, so o and the final state equal GDN_WYTC_PAIR=0 bit for bit, overlapped and
// not, varlen with empty and short sequences, K = 64 and 128; the sets pass the oracle. Negative
// control (GDN_WYTC_PAIR=negctl: both warpgroups read slice 0's U) must differ, which also shows
// that the paired kernel is the one that ran.
TEST(WyTcState, PairedSlicesEqualOneSlicePerBlock) {
  if (!is_sm90()) GTEST_SKIP() << "the v9 state pass runs on compute capability 9.0 only";
  struct PairCase {
    StateCase sc;
    const char* overlap;
  };
  std::vector<PairCase> cs;
  {
    check::CaseSpec s = testutil::spec_of({4099}, 2, 6, 128, 128);  // 65 chunks
    s.h0 = true;
    cs.push_back({{"L4099_HK2_HV6_K128_V128_bf16_h0_overlapped", s}, "1"});
    cs.push_back({{"L4099_HK2_HV6_K128_V128_bf16_h0_single", s}, "0"});
  }
  {
    check::CaseSpec s = testutil::spec_of({300, 0, 1029, 17, 64}, 1, 3, 64, 128);
    s.state_layout = gdn::StateLayout::vk;
    s.h0 = true;
    cs.push_back({{"L300x0x1029x17x64_HK1_HV3_K64_V128_vk_h0", s}, "0"});
  }
  {
    check::CaseSpec s = testutil::spec_of({2100}, 2, 2, 128, 128);  // 33 chunks: 3 segments
    s.head_map = gdn::HeadMap::tiled;
    s.l2norm_in_kernel = true;
    s.h0 = true;
    cs.push_back({{"L2100_HK2_HV2_K128_V128_tiled_l2norm_h0_overlapped", s}, "1"});
  }
  int seed = 600;
  for (const PairCase& pc : cs) {
    const StateCase& sc = pc.sc;
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::Oracle ref = check::ref_serial(c);
    testutil::ScopedEnv ov("GDN_WYTC_OVERLAP", pc.overlap);
    expect_variant_equals("GDN_WYTC_PAIR", "1", "paired slices", sc.name, c, ref,
                          "reading slice 0's U in both warpgroups changed nothing: the paired "
                          "kernel did not run");
  }
}

// Varlen groups (several sequences, the v9 pass): the chunk kernels of group i + 1 run beside
// the state pass of group i (GDN_WYTC_VGROUPS=n forces n groups; by default since session 26
// under the half scheme from 256 chunks, a size these small cases do not reach).
// The results equal the single pass (GDN_WYTC_VGROUPS=0) bit for bit and pass the oracle;
// the negative control (GDN_WYTC_VGROUPS=negctl: 2 groups, the second group's h0 dropped)
// must differ, which also shows that the grouped path is the one that ran. The sets
// hold empty and short sequences, and more groups asked for than fit.
TEST(WyTcState, VarlenGroupsEqualSinglePass) {
  if (!is_sm90()) GTEST_SKIP() << "the v9 state pass runs on compute capability 9.0 only";
  struct GroupCase {
    StateCase sc;
    const char* groups;
  };
  std::vector<GroupCase> cs;
  {
    check::CaseSpec s = testutil::spec_of({300, 0, 1029, 17, 700, 64, 0}, 2, 6, 128, 128);
    s.h0 = true;
    s.decay = check::Decay::slow;
    cs.push_back({{"L300x0x1029x17x700x64x0_HK2_HV6_K128_V128_bf16_h0", s}, "3"});
  }
  {
    check::CaseSpec s = testutil::spec_of({129, 65, 200}, 1, 2, 64, 64);
    s.out_dtype = gdn::DType::f32;
    s.state_layout = gdn::StateLayout::vk;
    s.l2norm_in_kernel = true;
    s.h0 = true;
    cs.push_back({{"L129x65x200_HK1_HV2_K64_V64_f32out_vk_l2norm_h0", s}, "8"});
  }
  int seed = 400;
  for (const GroupCase& gc : cs) {
    const StateCase& sc = gc.sc;
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::Oracle ref = check::ref_serial(c);
    expect_variant_equals("GDN_WYTC_VGROUPS", gc.groups,
                          std::string("varlen groups (") + gc.groups + ")", sc.name, c, ref,
                          "dropping a group's h0 changed nothing: the grouped path did not run");
  }
}

std::size_t count_differ(const std::vector<double>& a, const std::vector<double>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) n += !(a[i] == b[i]);
  return n + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}
std::size_t count_nonfinite(const std::vector<double>& a) {
  std::size_t n = 0;
  for (double x : a) n += !std::isfinite(x);
  return n;
}

// The half operand scheme (v10: the v9 pass on the half workspace format, fp16 W, P, Q, S^T and
// OP's Vn^T, one product per fold except ST) passes the fp64 oracle within its own derived bound
// on every state case (forced with GDN_WYTC_PRECISION=half, so the fp32-out instantiation runs
// too), as the split scheme (GDN_WYTC_PRECISION=split) does within its bound, and the two give
// different bits (the switch took effect). The default (auto) equals half bit for bit on the
// bf16-out cases inside the domain and split on the fp32-out case (auto keeps fp32 o on split).
TEST(WyTcState, HalfSchemePassesOracleAndDiffersFromSplit) {
  if (!is_sm90()) GTEST_SKIP() << "the half scheme runs in the wgmma state pass (cc 9.0) only";
  int seed = 300;
  for (const StateCase& sc : cases()) {
    SCOPED_TRACE(sc.name);
    const check::Case c = check::make_case(sc.spec, ++seed);
    const check::Oracle ref = check::ref_serial(c);
    const check::ArmOutput dflt = check::run_arm(Arm::wy_tc, c, true);
    const bool auto_half = check::wy_tc_half_scheme(c);
    EXPECT_EQ(auto_half, c.spec.out_dtype != gdn::DType::f32) << "fixture outside the domain?";
    check::Row half, split;
    check::ArmOutput ho, so;
    {
      testutil::ScopedEnv env("GDN_WYTC_PRECISION", "half");
      half = check::evaluate(Arm::wy_tc, c, ref, true);
      ho = check::run_arm(Arm::wy_tc, c, true);
    }
    {
      testutil::ScopedEnv env("GDN_WYTC_PRECISION", "split");
      split = check::evaluate(Arm::wy_tc, c, ref, true);
      so = check::run_arm(Arm::wy_tc, c, true);
    }
    ASSERT_TRUE(dflt.status.ok() && ho.status.ok() && so.status.ok())
        << dflt.status.message() << ho.status.message() << so.status.message();
    const std::size_t d_o = count_differ(ho.o, so.o), d_s = count_differ(ho.hT, so.hT);
    std::printf("wy-tc %s: half o %.3e (bound %.3e) state %.3e (bound %.3e); split o %.3e "
                "(bound %.3e) state %.3e (bound %.3e); half vs split: %zu of %zu o, %zu of %zu "
                "state differ; default = %s\n",
                sc.name, half.o.rel_rms, half.bound.o, half.state.rel_rms, half.bound.state,
                split.o.rel_rms, split.bound.o, split.state.rel_rms, split.bound.state, d_o,
                ho.o.size(), d_s, ho.hT.size(), auto_half ? "half" : "split");
    EXPECT_TRUE(half.pass) << half.error << " " << half.bound.formula;
    EXPECT_TRUE(half.negative_control_failed);
    EXPECT_TRUE(split.pass) << split.error << " " << split.bound.formula;
    EXPECT_GT(d_s, ho.hT.size() / 4) << "half and split gave the same state: the scheme switch "
                                        "did not take effect";
    const check::ArmOutput& same = auto_half ? ho : so;
    EXPECT_EQ(count_differ(dflt.o, same.o) + count_differ(dflt.hT, same.hT), 0u)
        << "the default did not run the " << (auto_half ? "half" : "split") << " scheme";
  }
}

// Inputs outside the half scheme's domain (|h0| up to ~4e5 > kWyTcHalfMaxV, beyond fp16's 65504):
// with check_values on (run_arm's default) the value scan sees them and the arm runs the split
// scheme, which passes the oracle. Negative control: the half scheme forced on the same inputs
// (GDN_WYTC_PRECISION=half) overflows fp16 and returns non-finite values, so the scan's choice is
// what keeps the result correct.
TEST(WyTcState, WideValuesTakeTheSplitScheme) {
  if (!is_sm90()) GTEST_SKIP() << "the half scheme runs in the wgmma state pass (cc 9.0) only";
  check::Case c = check::make_case(cases()[0].spec, 404);
  ASSERT_FALSE(c.h0.empty());
  for (float& x : c.h0) x *= 1e5f;
  ASSERT_FALSE(check::wy_tc_half_scheme(c));
  const check::Oracle ref = check::ref_serial(c);
  const check::Row r = check::evaluate(Arm::wy_tc, c, ref, true);
  check::ArmOutput forced;
  {
    testutil::ScopedEnv env("GDN_WYTC_PRECISION", "half");
    forced = check::run_arm(Arm::wy_tc, c, true);
  }
  ASSERT_TRUE(forced.status.ok()) << forced.status.message();
  const std::size_t bad = count_nonfinite(forced.o) + count_nonfinite(forced.hT);
  std::printf("wy-tc wide h0: auto (scan -> split) o %.3e state %.3e (bounds %.3e %.3e); half "
              "forced: %zu non-finite of %zu\n",
              r.o.rel_rms, r.state.rel_rms, r.bound.o, r.bound.state, bad,
              forced.o.size() + forced.hT.size());
  EXPECT_TRUE(r.pass) << r.error << " " << r.bound.formula;
  EXPECT_GT(bad, 0u) << "the half scheme did not overflow on inputs beyond fp16's range: the "
                        "control cannot show that the range check matters";
}

TEST(WyTcState, NegativeControlFails) {
  if (!is_sm90()) GTEST_SKIP() << "the wgmma state pass runs on compute capability 9.0 only";
  const StateCase sc = cases()[0];
  const check::Case c = check::make_case(sc.spec, 77);
  const check::Oracle ref = check::ref_serial(c);
  testutil::ScopedEnv env("GDN_WYTC_WG_NEGCTL", "1");
  const check::Row r = check::evaluate(Arm::wy_tc, c, ref, true);
  std::printf("wy-tc v6 negative control (W^T fold on the Qs tiles): o %.3e state %.3e\n", r.o.rel_rms,
              r.state.rel_rms);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_FALSE(r.pass) << "parity passed with the wrong operand: the wgmma pass did not run, or "
                          "the check cannot see it";
}

// o at an address that is not 16-byte aligned (a view one element into a larger buffer): the
// state pass cannot store whole 16-byte pieces and must take its element path; results equal the
// aligned run bit for bit. Run with one V slice per block (GDN_WYTC_PAIR=0) and with paired
// slices (=1, the two-warpgroup kernel's element path); the paired run's negative control
// (=negctl: both warpgroups read slice 0's U) must differ, which shows that the paired kernel's
// unaligned path is the one that ran and that the comparison can fail.
TEST(WyTcState, UnalignedOutputEqualsAligned) {
  check::CaseSpec s = testutil::spec_of({100, 37}, 2, 4, 128, 128);
  s.h0 = true;
  const check::Case c = check::make_case(s, 91);
  const check::ArmOutput ref = check::run_arm(Arm::wy_tc, c, true);
  ASSERT_TRUE(ref.status.ok()) << ref.status.message();

  // o (bf16 bits) of one run with o one element into its buffer, GDN_WYTC_PAIR=pair.
  auto run_unaligned = [&](const char* pair, std::vector<std::uint16_t>& o_host) {
    testutil::ScopedEnv env("GDN_WYTC_PAIR", pair);
    const std::int64_t n_o = c.T * c.prob.HV * c.prob.V;
    o_host.assign(static_cast<std::size_t>(n_o), 0);
    std::vector<float> state_host(c.h0.size());
    gdn::PrefillArgs a = c.host_args(o_host.data(), state_host.data());
    ASSERT_EQ(a.o.dtype, gdn::DType::bf16);
    testutil::DeviceCopy dq, dk, dv, dg, db, dh, dhT, dout;
    for (auto [t, d] : {std::pair{&a.q, &dq}, {&a.k, &dk}, {&a.v, &dv}, {&a.g, &dg},
                        {&a.beta, &db}, {&a.h0, &dh}, {&a.hT, &dhT}})
      ASSERT_TRUE(d->make(t)) << "device copy failed";
    // one bf16 element in: rows no longer 16-byte aligned
    ASSERT_TRUE(dout.make(&a.o, 2)) << "device copy failed";
    a.on_device = true;
    gdn::RunInfo info;
    const gdn::Status st = gdn::prefill(c.prob, a, Arm::wy_tc, &info);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(info.ran, Arm::wy_tc) << info.note;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(o_host.data(), a.o.data, o_host.size() * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
  };
  // Elements of o_host (bf16 bits) that differ from the aligned reference.
  auto count_diff = [&](const std::vector<std::uint16_t>& o_host) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < o_host.size(); ++i) {
      const std::uint32_t bits = static_cast<std::uint32_t>(o_host[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      n += !(static_cast<double>(f) == ref.o[i]);
    }
    return n;
  };
  for (const char* pair : {"0", "1"}) {
    SCOPED_TRACE(std::string("GDN_WYTC_PAIR=") + pair);
    std::vector<std::uint16_t> o_host;
    run_unaligned(pair, o_host);
    if (HasFatalFailure()) return;
    ASSERT_EQ(ref.o.size(), o_host.size());
    const std::size_t diff = count_diff(o_host);
    std::printf("wy-tc unaligned o, GDN_WYTC_PAIR=%s: %zu of %zu o differ from the aligned run\n",
                pair, diff, o_host.size());
    EXPECT_EQ(diff, 0u) << "unaligned o differs from the aligned run";
  }
  if (!is_sm90()) return;  // the paired kernel (and its negative control) is a cc 9.0 pass
  std::vector<std::uint16_t> bad;
  run_unaligned("negctl", bad);
  if (HasFatalFailure()) return;
  const std::size_t bad_diff = count_diff(bad);
  std::printf("wy-tc unaligned o, GDN_WYTC_PAIR=negctl: %zu of %zu o differ\n", bad_diff,
              bad.size());
  EXPECT_GT(bad_diff, 0u) << "the paired negative control changed nothing: the paired kernel's "
                             "unaligned path did not run, or the comparison cannot fail";
}

}  // namespace
