// The wy-tc arm's overlap schedule (src/cuda/wy_tc/overlap_segments.hpp): equal segments for
// ratio 1 (the schedule before session 17, reproduced exactly), geometric sizes otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/wy_tc/overlap_segments.hpp"

namespace gdn {
namespace {

using Bounds = std::vector<std::int64_t>;

Bounds sizes(const Bounds& b) {
  Bounds s;
  for (std::size_t i = 0; i + 1 < b.size(); ++i) s.push_back(b[i + 1] - b[i]);
  return s;
}

// The smallest segment, before rounding, of n segments of nc chunks in ratio r.
double smallest_of(std::int64_t nc, double r, int n) {
  const double q = r < 1 ? r : 1 / r;  // the smallest is the last (r < 1) or the first
  return static_cast<double>(nc) * std::pow(q, n - 1) * (1 - q) / (1 - std::pow(q, n));
}

// Why b is not a geometric schedule of nc chunks with ratio r (empty if it is): covers [0, nc]
// in increasing boundaries, <= 16 segments, each >= 16 chunks (when there are >= 2), successive
// sizes in ratio r within rounding (each size within 1 of the exact one, so s(i + 1) - r s(i)
// within 1 + r), and no room for one more segment (its smallest would be < 17 before rounding).
std::string geometric_defect(const Bounds& b, std::int64_t nc, double r) {
  if (b.size() < 2 || b.front() != 0 || b.back() != nc) return "does not cover [0, nc]";
  const Bounds s = sizes(b);
  if (s.size() > 16) return "more than 16 segments";
  for (std::int64_t x : s)
    if (x <= 0) return "empty segment";
  if (s.size() >= 2) {
    for (std::int64_t x : s)
      if (x < 16) return "segment below 16 chunks";
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const double dev = static_cast<double>(s[i + 1]) - r * static_cast<double>(s[i]);
      if (std::fabs(dev) > 1.0 + r + 1e-9)
        return "sizes " + std::to_string(s[i]) + ", " + std::to_string(s[i + 1]) + " not in ratio";
    }
  }
  if (s.size() < 16 && smallest_of(nc, r, static_cast<int>(s.size()) + 1) >= 17)
    return "room for another segment";
  return "";
}

TEST(OverlapSegments, RatioOneIsTheEqualSchedule) {
  for (std::int64_t nc : {1, 15, 16, 31, 32, 100, 256, 257, 512, 1000, 2048, 4095}) {
    for (std::int64_t want : {2, 4, 8, 16}) {
      const Bounds b = detail::overlap_segment_bounds(nc, want, 1.0);
      // The schedule the arm used before: segments of max(16, ceil(nc / want)) chunks.
      const std::int64_t seg = std::max<std::int64_t>(16, (nc + want - 1) / want);
      Bounds ref{0};
      for (std::int64_t c = seg; c < nc; c += seg) ref.push_back(c);
      ref.push_back(nc);
      EXPECT_EQ(b, ref) << "nc " << nc << " want " << want;
    }
  }
  EXPECT_EQ(detail::overlap_segment_bounds(0, 4, 1.0), (Bounds{0, 0}));
  EXPECT_EQ(detail::overlap_segment_bounds(0, 4, 0.62), (Bounds{0, 0}));
}

TEST(OverlapSegments, GeometricSchedules) {
  // qwen3.5-27b, T = 32768 (512 chunks) at the default ratio: the sizes the notes predict from.
  EXPECT_EQ(sizes(detail::overlap_segment_bounds(512, 4, 0.62)),
            (Bounds{206, 128, 79, 50, 30, 19}));
  for (double r : {0.4, 0.5, 0.62, 0.75, 0.9, 1.1, 1.3, 2.0}) {
    for (std::int64_t nc : {1, 20, 31, 32, 33, 64, 100, 256, 512, 1000, 2048, 8192}) {
      const Bounds b = detail::overlap_segment_bounds(nc, 4, r);
      EXPECT_EQ(geometric_defect(b, nc, r), "") << "nc " << nc << " ratio " << r;
    }
  }
}

// Negative controls: the checker rejects the equal schedule as a geometric one, a schedule with
// a short segment, and one with room for another segment.
TEST(OverlapSegments, CheckerRejectsWrongSchedules) {
  EXPECT_NE(geometric_defect(detail::overlap_segment_bounds(512, 4, 1.0), 512, 0.62), "");
  EXPECT_NE(geometric_defect(Bounds{0, 300, 500, 512}, 512, 0.62), "");
  EXPECT_NE(geometric_defect(Bounds{0, 320, 512}, 512, 0.6), "");
  EXPECT_NE(geometric_defect(Bounds{0, 512}, 512, 0.62), "");
}

}  // namespace
}  // namespace gdn
