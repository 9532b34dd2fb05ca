// Internal contract between the API layer (validation, arm resolution) and the arms.
// Every arm entry point receives inputs that `gdn::validate` already accepted, so arms never
// re-check shapes; they may return Unsupported for a geometry they do not implement.
#pragma once

#include <cstdint>
#include <string>

#include "gdn/gdn.hpp"

namespace gdn::detail {

// Sequence boundaries on the host. `cu` points to N+1 offsets (the caller's, or `own`).
struct Seqs {
  int N = 1;
  std::int64_t T = 0;
  const std::int32_t* cu = nullptr;
  std::int32_t own[2] = {0, 0};
  std::int64_t max_len = 0;
  std::int64_t seq_len(int n) const { return cu[n + 1] - cu[n]; }
};
Seqs make_seqs(const PrefillArgs& a);

// Checks the head geometry and options every entry point shares (prefill, decode, verify).
Status validate_problem(const Problem& p);

// Element address helpers for views (strides in elements).
inline std::int64_t offset3(const TensorView& t, std::int64_t i, std::int64_t j, std::int64_t l) {
  return i * t.stride[0] + j * t.stride[1] + l * t.stride[2];
}
inline std::int64_t offset2(const TensorView& t, std::int64_t i, std::int64_t j) {
  return i * t.stride[0] + j * t.stride[1];
}

// ---- arms (inputs validated; outputs written only on success of the whole call) ----
Status cpu_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s);
bool cpu_supports(const Problem& p, std::string* why);
Status cpu_check_values(const Problem& p, const PrefillArgs& a, const Seqs& s);

#ifdef GDN_WITH_CUDA
// Device-side value scan (NaN/Inf, g > 0, beta outside [0, 1]); synchronizes the stream.
Status cuda_check_values(const Problem& p, const PrefillArgs& a, const Seqs& s);
// Classify a pointer: 1 = device/managed, 0 = host, -1 = unknown (no CUDA device).
int cuda_pointer_kind(const void* ptr);

Status cuda_serial_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s);
bool cuda_serial_supports(const Problem& p, std::string* why);
Status cuda_wy_fp32_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s);
bool cuda_wy_fp32_supports(const Problem& p, std::string* why);
Status cuda_wy_tc_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s);
bool cuda_wy_tc_supports(const Problem& p, std::string* why);
// gdn::release_scratch (src/cuda/common/scratch_pool.cu).
Status cuda_release_scratch();
std::uint64_t cuda_scratch_reserved();  // gdn::scratch_cached_bytes
#endif

// `auto` on a GPU: the arm measured fastest for this device and geometry (src/core/auto.cpp).
Arm auto_gpu_arm(const DeviceInfo& d, const Problem& p, const Seqs& s);

}  // namespace gdn::detail
