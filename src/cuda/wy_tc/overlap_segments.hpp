// Chunk boundaries of the wy-tc arm's overlapped passes (host only; tests/cpu/test_overlap_segments.cpp).
// In the overlap, the state pass of segment i runs beside the chunk kernels of segment i + 1, so
// the segments' sizes set how long each side waits for the other (docs/NOTES_wy_tc.md, session 17).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace gdn::detail {

// Boundaries b[0] = 0 < b[1] < ... < b[n] = nc of n segments of nc chunks.
// ratio == 1: equal segments of max(min_seg, ceil(nc / want)) chunks (the last one shorter).
// Otherwise sizes in geometric progression, s(i + 1) ~ ratio * s(i): the most segments (at most
// max_segs) whose smallest has min_seg + 1 chunks before rounding (so >= min_seg after);
// boundaries rounded to whole chunks (each size within 1 of the exact progression). One segment
// where two do not fit. nc <= 0 gives {0, 0}.
inline std::vector<std::int64_t> overlap_segment_bounds(std::int64_t nc, std::int64_t want,
                                                        double ratio, int min_seg = 16,
                                                        int max_segs = 16) {
  std::vector<std::int64_t> b{0};
  if (nc <= 0) return {0, 0};
  if (std::fabs(ratio - 1.0) < 1e-9 || !(ratio > 0.0)) {
    const std::int64_t seg =
        std::max<std::int64_t>(min_seg, (nc + std::max<std::int64_t>(1, want) - 1) /
                                            std::max<std::int64_t>(1, want));
    for (std::int64_t c = seg; c < nc; c += seg) b.push_back(c);
    b.push_back(nc);
    return b;
  }
  // Fraction of nc before segment i of n: (1 - r^i) / (1 - r^n).
  auto frac = [ratio](int i, int n) { return (1.0 - std::pow(ratio, i)) / (1.0 - std::pow(ratio, n)); };
  int n = 1;
  for (int m = std::max(1, max_segs); m >= 2; --m) {
    const double smallest = static_cast<double>(nc) *
                            (ratio < 1.0 ? frac(m, m) - frac(m - 1, m) : frac(1, m));
    if (smallest >= min_seg + 1) {
      n = m;
      break;
    }
  }
  for (int i = 1; i < n; ++i) {
    const auto c = static_cast<std::int64_t>(std::llround(static_cast<double>(nc) * frac(i, n)));
    if (c > b.back() && c < nc) b.push_back(c);
  }
  b.push_back(nc);
  return b;
}

}  // namespace gdn::detail
