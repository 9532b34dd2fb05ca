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

// Device workspace of the check_values scan (one flag word), taken from the start of
// PrefillArgs::workspace when the caller gives one (before the arm uses it), else from the pool.
constexpr std::uint64_t kCheckValuesWorkspaceBytes = 4;

// Device workspace bytes a call of arm `ran` (already resolved; a GPU arm needs a CUDA build)
// takes: the arm's own (the launch code sized in a dry run, below) and the value scan's.
// Geometry the arm rejects gives its error. prefill() checks PrefillArgs::workspace with it and
// gdn::prefill_workspace_bytes returns it; inputs need not be validated beyond what sizing reads
// (shapes, offsets, pointers' alignment), so cp.cpp sizes its internal calls with it.
Status arm_workspace_bytes(const Problem& p, const PrefillArgs& a, Arm ran, std::uint64_t* bytes);

// Set (per host thread) while arms run on inputs that the value scan found outside the domain of
// wy-tc's half operand scheme (gdn::kWyTcHalfMaxV, kWyTcHalfMaxQK): wy-tc then runs its split
// scheme. prefill() and the cp entry points hold a scope around their arm calls; nested scopes
// keep an outer `true`.
bool wide_values();
class WideValuesScope {
 public:
  explicit WideValuesScope(bool wide);
  ~WideValuesScope();
  WideValuesScope(const WideValuesScope&) = delete;
  WideValuesScope& operator=(const WideValuesScope&) = delete;

 private:
  bool prev_;
};

#ifdef GDN_WITH_CUDA
// Device-side value scan (NaN/Inf, g > 0, beta outside [0, 1]); synchronizes the stream. `wide`
// (optional): set to whether any |q|, |k| > kWyTcHalfMaxQK or |v|, |h0| > kWyTcHalfMaxV (not an
// error: wy-tc's split scheme covers any range).
Status cuda_check_values(const Problem& p, const PrefillArgs& a, const Seqs& s,
                         bool* wide = nullptr);
// Classify a pointer: 1 = device/managed, 0 = host, -1 = unknown (no CUDA device).
int cuda_pointer_kind(const void* ptr);

// The GPU arms. With `size_only` set, an arm runs its launch code up to the point where it
// takes its scratch, stores the bytes it would take there and returns: nothing is queued and no
// memory is touched. The query and the launch therefore size the workspace with the same code.
// Without it the arm runs, taking its scratch from PrefillArgs::workspace when set (borrowed; the
// size was checked by prefill()) or from the pool.
Status cuda_serial_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s,
                           std::uint64_t* size_only = nullptr);
bool cuda_serial_supports(const Problem& p, std::string* why);
Status cuda_wy_fp32_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s,
                            std::uint64_t* size_only = nullptr);
bool cuda_wy_fp32_supports(const Problem& p, std::string* why);
Status cuda_wy_tc_prefill(const Problem& p, const PrefillArgs& a, const Seqs& s,
                          std::uint64_t* size_only = nullptr);
bool cuda_wy_tc_supports(const Problem& p, std::string* why);
// gdn::release_scratch (src/cuda/common/scratch_pool.cu).
Status cuda_release_scratch();
std::uint64_t cuda_scratch_reserved();  // gdn::scratch_cached_bytes
#endif

// `auto` on a GPU: the arm measured fastest for this device and geometry (src/core/auto.cpp).
Arm auto_gpu_arm(const DeviceInfo& d, const Problem& p, const Seqs& s);

}  // namespace gdn::detail
