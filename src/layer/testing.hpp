// Test hooks of the GPU layer (not part of the public API; tests/gpu/test_layer.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "gdn/layer.hpp"

namespace gdn::layer {

// Copies the conv output qkv ([T, conv_dim] bf16 bits) of the last prefill on `wsp` to the host
// (synchronises the device).
Status debug_read_conv_output(const Workspace& wsp, std::int64_t T, std::vector<std::uint16_t>* out);

}  // namespace gdn::layer
