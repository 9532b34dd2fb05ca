// Decode/verify kernel variants, selectable at run time for measurement (issue #7):
//   GDN_DECODE_VARIANT = v2 | v3 | v3w | v3s | v4 | v4w   (unset or unknown: the default, v3)
//   (v1, the first non-persistent kernel, was removed after it measured slower than v3 in every
//   case: bench/results/2026-12-03-h200-r2-9b06ffe-decode-sweep.jsonl; it is in git at 3fa1f89)
//   v2   persistent blocks, cp.async ring of 32-column slices                 decode.cu
//   v3   non-persistent, one block per (n, h, full-width row slice), every
//        token's inputs staged during the state load, one barrier per token  decode_v3.cu
//        (v3w / v3s force its wide / small-grid configuration: tests)
//   v4   persistent, one block per SM, TMA bulk copies of whole (n, h) state
//        tiles into a 2-4 stage shared ring, inputs staged while it lands    decode_v3.cu
//        (v4w forces the persistent kernel at any size on 3 blocks: tests)
// Every variant is bitwise deterministic run to run and checked against the same fp64 oracle
// bound; they differ from each other in the order of the K reduction (not bitwise equal).
// The variable is read on every call (host only: legal under CUDA-graph capture; a captured
// graph keeps the kernel it captured).
#pragma once

#include "cuda/decode/decode_launch.hpp"

namespace gdn::detail {

enum class DecodeVariant { v2, v3, v3w, v3s, v4, v4w };
DecodeVariant decode_variant();  // from GDN_DECODE_VARIANT

Status cuda_decode_v2(const DecodeLaunch& L);
// force: 0 auto, 1 wide, 2 small configuration.
Status cuda_decode_v3(const DecodeLaunch& L, int force);
Status cuda_decode_v4(const DecodeLaunch& L, bool force);

}  // namespace gdn::detail
