// The two fp64 oracles (serial recurrence, chunked WY with C = 64) agree on every fixture:
// proof of the chunk algebra independent of any kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "check/check.hpp"
#include "ref/ref.hpp"

namespace gdn::check {
namespace {

constexpr std::uint64_t kSeed = 20261202;

class RefAgree : public ::testing::TestWithParam<int> {};

TEST_P(RefAgree, SerialVsChunked) {
  const auto specs = fixture_set();
  const CaseSpec& spec = specs[GetParam()];
  const Case c = make_case(spec, kSeed + GetParam());
  const Oracle s = ref_serial(c), w = ref_chunked(c, 64);
  const Metrics mo = compare(s.o, w.o), ms = compare(s.hT, w.hT);
  EXPECT_EQ(mo.nan_count, 0);
  EXPECT_EQ(ms.nan_count, 0);
  EXPECT_LE(mo.rel_rms, 1e-12) << spec.name() << " o max_abs " << mo.max_abs;
  EXPECT_LE(ms.rel_rms, 1e-12) << spec.name() << " state max_abs " << ms.max_abs;
  // A zero reference would make the relative check vacuous.
  if (c.T > 0) {
    double n = 0;
    for (double x : s.o) n += x * x;
    EXPECT_GT(n, 0.0) << spec.name() << ": oracle output is identically zero";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RefAgree, ::testing::Range(0, (int)fixture_set().size()),
                         [](const auto& info) { return fixture_set()[info.param].name(); });

// The same chunk algebra with chunk sizes that do not divide the sequence (and C = 1).
TEST(RefAgree, ChunkSizes_T200_HK2_HV4_K64_C1_C7_C64_C256) {
  CaseSpec spec;
  spec.seq_lens = {200};
  spec.K = spec.V = 64;
  spec.decay = Decay::fast;
  const Case c = make_case(spec, kSeed);
  const Oracle s = ref_serial(c);
  for (int C : {1, 7, 64, 256}) {
    const Oracle w = ref_chunked(c, C);
    EXPECT_LE(compare(s.o, w.o).rel_rms, 1e-12) << "C=" << C;
    EXPECT_LE(compare(s.hT, w.hT).rel_rms, 1e-12) << "C=" << C;
  }
}

// Negative control for the oracle comparison: a one-ulp-scale change in one gate must show up.
TEST(RefAgree, NegativeControl_PerturbedGate_T65) {
  CaseSpec spec;
  spec.seq_lens = {65};
  Case c = make_case(spec, kSeed);
  const Oracle s = ref_serial(c);
  c.g[10] *= 1.001f;
  const Oracle w = ref_chunked(c, 64);
  EXPECT_GT(compare(s.hT, w.hT).rel_rms, 1e-9);
}

// A zero-length sequence leaves its state untouched: hT = h0 exactly, in both oracles.
TEST(RefAgree, ZeroLengthSequence_L5x0x3_hT_equals_h0) {
  CaseSpec spec;
  spec.seq_lens = {5, 0, 3};
  spec.K = spec.V = 64;
  const Case c = make_case(spec, kSeed);
  const std::int64_t kv = 64 * 64 * spec.HV;
  for (const Oracle& r : {ref_serial(c), ref_chunked(c)})
    for (std::int64_t i = 0; i < kv; ++i) ASSERT_EQ(r.hT[kv + i], (double)c.h0[kv + i]) << i;
}

}  // namespace
}  // namespace gdn::check
