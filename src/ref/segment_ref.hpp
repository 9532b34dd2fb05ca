// Segment transitions on the host (DESIGN.md §2), in the exact decomposition the wy-fp32 CUDA arm
// uses, so this file is both the fp64 proof of the segment algebra and, instantiated in fp32, a
// mirror of the kernels' arithmetic (src/cuda/wy/wy_fp32.cu).
//
// A sequence's chunks (C = 64, the last one partial) are split into P contiguous segments. Each
// segment maps its initial state affinely, S_in -> M S_in + B, with
//   M = prod_chunks (exp(G_C) I - Kd^T W)   (K x K, later chunks on the left)
//   B = the segment's final state from S_in = 0   (K x V)
// where Kd = diag(exp(G_C - G)) K and W = (I + A)^-1 diag(beta exp(G)) K (the WY form).
// prefill_segmented computes every (M, B), combines them by a sequential scan
// (S_in[s+1] = M_s S_in[s] + B_s, S_in[0] = h0 or 0) and reruns each segment from its true
// initial state, writing o and the final state.
#pragma once

#include <cstdint>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn::ref {

// Inputs decoded to double (what the kernels see after dtype conversion), packed contiguously:
// q, k [T, HK, K]; v [T, HV, V]; g, beta [T, HV]; h0 [N, HV, K, V] or [N, HV, V, K] by
// p.state_layout, or null. cu_seqlens [N+1].
struct SegmentInputs {
  const double* q = nullptr;
  const double* k = nullptr;
  const double* v = nullptr;
  const double* g = nullptr;
  const double* beta = nullptr;
  const double* h0 = nullptr;
  const std::int32_t* cu_seqlens = nullptr;
  int N = 1;
};

// Outputs in double: o [T, HV, V]; hT [N, HV, K, V] (or [N, HV, V, K]).
struct SegmentOutputs {
  std::vector<double> o, hT;
};

// One segment's affine map for one (sequence, value head): M [K, K], B [K, V], row-major.
struct Affine {
  std::vector<double> M, B;
};

// Runs the recurrence with every sequence split into `segments` chunk-aligned segments
// (segments >= 1; segments beyond a sequence's chunk count are empty: M = I, B = 0).
// Arithmetic in R (double: the oracle-grade version; float: the CUDA arm's mirror).
// `maps`, if non-null, receives the per-segment maps, indexed [(n * HV + h) * segments + s].
template <typename R>
SegmentOutputs prefill_segmented(const Problem& p, const SegmentInputs& in, int segments,
                                 int chunk = 64, std::vector<Affine>* maps = nullptr);

}  // namespace gdn::ref
