// gdn — decode (one token per sequence) and speculative verify (T <= 16 draft tokens per
// sequence) over a pool of recurrent states, updated in place. Public C++ API.
//
// Per sequence n with live slot s = state_indices[n] and value head h (DESIGN.md §1):
//   S = state[s, h];  for t < T:  S = exp(g_t) S;  u_t = beta_t (v_t - S^T k_t);
//                                 S += k_t u_t^T;   o_t = scale S^T q_t
//   state[s, h] = S after the first num_accepted[n] tokens (all T when num_accepted is null).
//
// Padding: state_indices[n] < 0 marks a padding row; it is skipped entirely — its state is not
// read or written and its o rows are left untouched (not zeroed).
//
// CUDA-graph safety (on_device = true): the call performs no host synchronisation and no
// allocation; it only enqueues one kernel on `stream`. Index validation:
//   * state_indices_host given (host copy of the device indices): every live index must lie in
//     [0, S) and live indices must be distinct; otherwise the call returns invalid_argument
//     naming the first bad entry, and nothing is enqueued (buffers untouched). Same for
//     num_accepted_host (values in [0, T]).
//   * only device indices given: the kernel checks each index itself. A live index >= S or a
//     num_accepted outside [0, T] makes that sequence's block write nothing (state and o rows
//     untouched) and sets a bit in *error_flag (if given): kErrStateIndex, kErrNumAccepted.
//     Duplicate live indices are NOT detected on the device; the result for the duplicated slot
//     is then one of the racing updates (undefined which). Pass a host copy to have them rejected.
// Host tensors (on_device = false) run the fp32 CPU implementation; indices are host pointers and
// are always fully validated before anything is written.
#pragma once

#include <cstdint>

#include "gdn/gdn.hpp"

namespace gdn {

// Bits the device-side index check ORs into DecodeArgs::error_flag.
inline constexpr std::int32_t kErrStateIndex = 1;   // a live state index >= S
inline constexpr std::int32_t kErrNumAccepted = 2;  // num_accepted[n] outside [0, T]

struct DecodeArgs {
  // Per-token inputs: decode() takes rank-3 views [N, ...]; verify() takes rank-4 [N, T, ...]
  // (g, beta, a: rank 2 [N, HV] for decode, rank 3 [N, T, HV] for verify).
  TensorView q;  // [N, (T,) HK, K]  bf16|f16|f32; innermost contiguous, other strides free
  TensorView k;  // [N, (T,) HK, K]  q's dtype
  TensorView v;  // [N, (T,) HV, V]  q's dtype
  // Gate: either g (precomputed log-decay, <= 0) or the fused form
  //   g = -exp(A_log[h]) * softplus(a[n, t, h] + dt_bias[h]),  softplus(x) = log1p(exp(x))
  //   (x itself for x > 20, as torch.nn.functional.softplus).
  TensorView g;        // [N, (T,) HV] f32; leave undefined to use the fused gate
  TensorView A_log;    // [HV] f32 (fused gate)
  TensorView a;        // [N, (T,) HV] f32|bf16|f16 (fused gate)
  TensorView dt_bias;  // [HV] f32 (fused gate)
  // beta in [0, 1], or the raw logit b with beta = sigmoid(b) when beta_sigmoid is set.
  TensorView beta;  // [N, (T,) HV] f32|bf16
  bool beta_sigmoid = false;
  TensorView o;  // [N, (T,) HV, V]  q's dtype or f32; outputs for every token
  // State pool, updated in place. [S, HV, K, V] (StateLayout::kv) or [S, HV, V, K] (vk),
  // f32 or bf16, contiguous. bf16 states are widened to fp32 for the step and rounded on store.
  TensorView state;
  const std::int32_t* state_indices = nullptr;       // [N] (device memory when on_device)
  const std::int32_t* state_indices_host = nullptr;  // [N] optional host copy (validation)
  // Verify only: commit the state after the first num_accepted[n] tokens (0 = state unchanged).
  // Null: commit after all T tokens. Device memory when on_device.
  const std::int32_t* num_accepted = nullptr;       // [N]
  const std::int32_t* num_accepted_host = nullptr;  // [N] optional host copy (validation)
  // Optional per-token state cache: the state after each token t (independent of num_accepted),
  // so the engine can roll back to any accepted prefix. Layout [N, T, HV, K, V] (or [.., V, K]),
  // contiguous, state's dtype. Rows of padding sequences are untouched.
  void* state_cache = nullptr;
  std::int32_t* error_flag = nullptr;  // optional device int32, see above (on_device only)
  bool on_device = false;              // true: every tensor and index array is device memory
  void* stream = nullptr;              // cudaStream_t; null = default stream
};

// One token per sequence: q/k/v/o rank 3, g/beta/a rank 2. num_accepted must be null.
Status decode(const Problem& p, const DecodeArgs& a);
// T = q.shape[1] (1..16) draft tokens per sequence.
Status verify(const Problem& p, const DecodeArgs& a);
// Shape/dtype/option checks only (and host index arrays when given); touches no data.
Status validate_decode(const Problem& p, const DecodeArgs& a, bool verify);

// Effective state traffic of one call in bytes (state read + written for every live sequence),
// the figure the benchmark divides by time. Intermediate-cache writes are counted when present.
double decode_state_bytes(const Problem& p, DType state_dtype, std::int64_t live_seqs, int T,
                          bool with_cache);

}  // namespace gdn
