// Context-parallel prefill, internal pieces shared by the host orchestration (src/cp/cp.cpp), the
// NCCL driver (src/cp/nccl_cp.cpp) and the CUDA kernels (src/cuda/cp/cp.cu). Every op exists on the
// host (std::vector workspace, plain loops) and on the device (cuda::Scratch workspace, kernels on
// the call's stream); `on_device` picks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn::cp {

// The call's workspace: one allocation (stream-ordered cuda::Scratch on the GPU, a std::vector
// on the host), carved by the caller. On the GPU, `borrowed` (the caller's
// PrefillArgs::workspace, `capacity` bytes) serves it instead when non-null: no allocation.
class Workspace {
 public:
  Workspace(bool on_device, void* stream, void* borrowed = nullptr, std::uint64_t capacity = 0)
      : dev_(on_device), stream_(stream), borrowed_(borrowed), capacity_(capacity) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Status alloc(std::size_t bytes);
  char* data() const;

 private:
  bool dev_;
  void* stream_;
  void* borrowed_;
  std::uint64_t capacity_;
  std::vector<float> host_;
  void* scratch_ = nullptr;  // cuda::Scratch* on the device
};

// Copies N items of HV states between layouts: dst item n at dst + n * dst_item, src item n at
// src + n * src_item (element strides); each item holds HV contiguous [K, V] or [V, K] states.
struct StateCopy {
  float* dst = nullptr;
  std::int64_t dst_item = 0;
  bool dst_vk = false;
  const float* src = nullptr;
  std::int64_t src_item = 0;
  bool src_vk = false;
  int N = 0, HV = 0, K = 0, V = 0;
};

// The combine, per (n, h) of N x HV, sequential over `steps`:
//   X_0 = x0 (or 0 when x0 is null);  X_{j+1} = M_j X_j + B_j;  out_j = X_j for j = 0..steps.
// M_j [K, K] at m + j * m_step + n * m_n + h * m_h; B_j, X, out [K, V] likewise; row-major fp32.
// out_j at out + j * o_step + ...; o_step = 0 keeps only the last.
struct Combine {
  const float* m = nullptr;
  std::int64_t m_step = 0, m_n = 0, m_h = 0;
  const float* b = nullptr;
  std::int64_t b_step = 0, b_n = 0, b_h = 0;
  const float* x0 = nullptr;
  std::int64_t x_n = 0, x_h = 0;
  float* out = nullptr;
  std::int64_t o_step = 0, o_n = 0, o_h = 0;
  int N = 0, HV = 0, K = 0, V = 0, steps = 0;
};

Status zero(bool on_device, void* stream, float* p, std::size_t count);
// count K x K identity matrices, back to back.
Status fill_identity(bool on_device, void* stream, float* p, std::int64_t count, int K);
Status copy_states(bool on_device, void* stream, const StateCopy& c);
Status combine(bool on_device, void* stream, const Combine& c);

#ifdef GDN_WITH_CUDA
// A cuda::Scratch of `bytes` on `stream`: borrowed from `borrowed` (capacity bytes) when it is
// non-null, else from the pool.
void* device_workspace_new(void* stream, std::size_t bytes, void* borrowed, std::uint64_t capacity,
                           Status* st);
void device_workspace_delete(void* ws);
char* device_workspace_data(void* ws);
Status device_zero(void* stream, float* p, std::size_t count);
Status device_fill_identity(void* stream, float* p, std::int64_t count, int K);
Status device_copy_states(void* stream, const StateCopy& c);
Status device_combine(void* stream, const Combine& c);
#endif

}  // namespace gdn::cp
