// Segment transitions (src/ref/segment_ref.cpp) against the plain fp64 oracle: every sequence split
// into P segments, (M, B) per segment, a sequential scan, reruns from the true initial states.
// fp64 must agree with check::ref_serial to ~1e-12; the fp32 instantiation (the wy-fp32 kernels'
// mirror) to 1e-5 relative RMS on well-conditioned fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "check/check.hpp"
#include "ref/segment_ref.hpp"

namespace gdn {
namespace {

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

struct Inputs {
  std::vector<double> q, k, v, g, beta, h0;
  ref::SegmentInputs view;
};
Inputs inputs_of(const check::Case& c) {
  Inputs in{to_double(c.q32), to_double(c.k32), to_double(c.v32), to_double(c.g),
            to_double(c.beta32), to_double(c.h0), {}};
  in.view = {in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
             c.spec.h0 ? in.h0.data() : nullptr, c.cu_seqlens.data(),
             static_cast<int>(c.spec.seq_lens.size())};
  return in;
}

check::CaseSpec spec_of(std::vector<int> lens, check::Decay decay, bool h0) {
  check::CaseSpec s;
  s.seq_lens = std::move(lens);
  s.HK = 1;
  s.HV = 2;
  s.K = 64;
  s.V = 32;
  s.decay = decay;
  s.h0 = h0;
  return s;
}

void expect_segments_match(const check::CaseSpec& spec, int P) {
  const check::Case c = check::make_case(spec, 77);
  const check::Oracle ref = check::ref_serial(c);
  const Inputs in = inputs_of(c);
  const ref::SegmentOutputs r = ref::prefill_segmented<double>(c.prob, in.view, P);
  const check::Metrics mo = check::compare(ref.o, r.o), ms = check::compare(ref.hT, r.hT);
  EXPECT_LE(mo.rel_rms, 1e-12) << spec.name() << " P=" << P << ": fp64 o max_abs " << mo.max_abs;
  EXPECT_LE(ms.rel_rms, 1e-12) << spec.name() << " P=" << P << ": fp64 hT max_abs " << ms.max_abs;
  EXPECT_EQ(mo.nan_count + ms.nan_count, 0);
  const ref::SegmentOutputs f = ref::prefill_segmented<float>(c.prob, in.view, P);
  const check::Metrics fo = check::compare(ref.o, f.o), fs = check::compare(ref.hT, f.hT);
  EXPECT_LE(fo.rel_rms, 1e-5) << spec.name() << " P=" << P << ": fp32 mirror o";
  EXPECT_LE(fs.rel_rms, 1e-5) << spec.name() << " P=" << P << ": fp32 mirror hT";
  // Negative controls: the 1e-12 check catches a 1e-10 perturbation; and, where the state is
  // not forgotten (no decay) and a segment boundary falls inside a sequence, dropping the scan
  // (taking the last segment's B, its final state from zero) is caught.
  EXPECT_GT(check::compare(ref.o, check::perturb(ref.o, r.o, 1e-10)).rel_rms, 1e-12);
  bool split = false;
  for (int len : spec.seq_lens) split |= P > 1 && len > 64;
  if (split && spec.decay == check::Decay::none) {
    std::vector<ref::Affine> maps;
    ref::prefill_segmented<double>(c.prob, in.view, P, 64, &maps);
    std::vector<double> wrong = ref.hT;
    const int K = c.prob.K, V = c.prob.V;
    for (std::size_t nh = 0; nh * P < maps.size(); ++nh)
      for (int e = 0; e < K * V; ++e) wrong[nh * K * V + e] = maps[nh * P + P - 1].B[e];
    EXPECT_GT(check::compare(ref.hT, wrong).rel_rms, 1e-6)
        << "a segment's B alone matches the final state: the scan is not tested";
  }
}

TEST(Segments, T4099_slow_h0_P1_P2_P3_P7) {
  for (int P : {1, 2, 3, 7}) expect_segments_match(spec_of({4099}, check::Decay::slow, true), P);
}
TEST(Segments, T200_none_h0_P3) { expect_segments_match(spec_of({200}, check::Decay::none, true), 3); }
TEST(Segments, T200_fast_noh0_P2_P5) {
  for (int P : {2, 5}) expect_segments_match(spec_of({200}, check::Decay::fast, false), P);
}
TEST(Segments, T65_extreme_h0_P2) { expect_segments_match(spec_of({65}, check::Decay::extreme, true), 2); }
TEST(Segments, Varlen_L130x0x1x257_slow_h0_P3_tiled_vk_l2norm) {
  check::CaseSpec s = spec_of({130, 0, 1, 257}, check::Decay::slow, true);
  s.HK = 2;
  s.HV = 4;
  s.head_map = HeadMap::tiled;
  s.state_layout = StateLayout::vk;
  s.l2norm_in_kernel = true;
  expect_segments_match(s, 3);
}

}  // namespace
}  // namespace gdn
