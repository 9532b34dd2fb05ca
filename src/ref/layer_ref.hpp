// fp64 host oracle of the whole Gated DeltaNet layer (include/gdn/layer.hpp), at small shapes.
// Every intermediate stays in fp64 (no bf16 rounding between stages): the GPU layer's deviation
// from it is the sum of its storage roundings, which is what the parity tests bound.
#pragma once

#include <cstdint>
#include <vector>

#include "gdn/layer.hpp"

namespace gdn::ref {

// Per-sequence layer state in fp64. conv: [N, kernel-1, conv_dim]; ssm: [N, HV, K, V].
struct LayerState {
  std::vector<double> conv, ssm;
  static LayerState zeros(const layer::Config& c, int N);
};

// x: [T, hidden] (the values the layer sees, e.g. decoded bf16); cu: [N+1] sequence offsets.
// Reads and updates `state` (one entry per sequence). Returns y: [T, hidden].
// A decode step is the same call with one token per sequence.
std::vector<double> layer_forward(const layer::Config& c, const layer::Weights& w,
                                  const std::vector<double>& x, const std::vector<std::int32_t>& cu,
                                  LayerState* state);

}  // namespace gdn::ref
