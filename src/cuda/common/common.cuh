// Shared CUDA helpers for every GPU arm: error handling, typed loads/stores, scratch memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/internal.hpp"
#include "cuda/common/chunk_table.cuh"
#include "gdn/gdn.hpp"

namespace gdn::cuda {

inline Status from_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Cuda(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                      cudaGetErrorString(e) + ")");
}
#define GDN_CUDA_TRY(expr)                                      \
  do {                                                          \
    ::gdn::Status gdn_st_ = ::gdn::cuda::from_cuda((expr), #expr); \
    if (!gdn_st_.ok()) return gdn_st_;                          \
  } while (0)
// After a launch: the launch error, without synchronizing.
#define GDN_CUDA_LAUNCH_CHECK(name) GDN_CUDA_TRY(cudaGetLastError())

inline cudaStream_t stream_of(const PrefillArgs& a) { return static_cast<cudaStream_t>(a.stream); }

// Run-time kernel switches (GDN_*; read at every call so that tests and A/B runs can change them
// in one process): true when environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::string(e) == value;
}

// Element loads/stores converting to and from fp32.
template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// The library's scratch pool of the current device (scratch_pool.cu): freed memory stays cached
// across synchronisations. Null where GDN_SCRATCH_POOL=device or pools are unsupported (then the
// device's current pool serves, as cudaMallocAsync does).
cudaMemPool_t scratch_pool();
// Returns the cached memory of every device's scratch pool to the driver.
Status release_scratch_all();
// Reserved bytes of the current device's scratch pool (0 if it has none).
std::uint64_t scratch_reserved();

// Stream-ordered scratch memory for the duration of one call. Owned: allocated from the pool
// (stream-ordered) by alloc() and freed stream-ordered when this object goes. Borrowed: the
// caller's workspace (PrefillArgs::workspace) serves alloc() with no allocation and is never
// freed; a request beyond its capacity is an error (prefill() checks the size before any arm runs,
// so this only guards the arms' arithmetic). Either way no host synchronisation: capture-legal.
class Scratch {
 public:
  explicit Scratch(cudaStream_t s) : stream_(s) {}
  // Borrows `workspace` (capacity bytes) when it is non-null; owned as above when it is null.
  Scratch(cudaStream_t s, void* workspace, std::uint64_t capacity)
      : stream_(s), borrowed_(workspace), capacity_(capacity) {}
  // The call's scratch: its workspace when the caller gave one, else the pool.
  explicit Scratch(const PrefillArgs& a) : Scratch(stream_of(a), a.workspace, a.workspace_bytes) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (ptr_ && !borrowed_) cudaFreeAsync(ptr_, stream_);
  }
  Status alloc(std::size_t bytes) {
    if (bytes == 0) return Status::Ok();
    if (borrowed_) {
      if (bytes > capacity_)
        return Status::Invalid("workspace too small: " + std::to_string(bytes) +
                               " bytes needed, " + std::to_string(capacity_) + " given");
      ptr_ = borrowed_;
      return Status::Ok();
    }
    if (cudaMemPool_t pool = scratch_pool())
      return from_cuda(cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream_),
                       "cudaMallocFromPoolAsync(scratch)");
    return from_cuda(cudaMallocAsync(&ptr_, bytes, stream_), "cudaMallocAsync(scratch)");
  }
  template <typename T> T* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
  }
  bool borrowed() const { return borrowed_ != nullptr; }

 private:
  cudaStream_t stream_;
  void* borrowed_ = nullptr;
  std::uint64_t capacity_ = 0;
  void* ptr_ = nullptr;
};

// cu_seqlens on the device: the caller's device copy if given, else copied into `scratch` at
// `byte_offset` (needs (N+1) * 4 bytes there) by value, in kernel parameters (chunk_table.cuh):
// no pageable cudaMemcpyAsync, so the call stays legal under CUDA stream capture.
inline Status device_cu_seqlens(const PrefillArgs& a, const detail::Seqs& s, const Scratch& scratch,
                                std::size_t byte_offset, const std::int32_t** out) {
  if (a.cu_seqlens_device) {
    *out = a.cu_seqlens_device;
    return Status::Ok();
  }
  std::int32_t* d = scratch.as<std::int32_t>(byte_offset);
  Status st = copy_i32_by_value(s.cu, s.N + 1, d, stream_of(a));
  if (!st.ok()) return st;
  *out = d;
  return Status::Ok();
}

// Calls f with the C++ element type for a DType (float, __half, __nv_bfloat16).
template <typename F> auto dispatch_dtype(DType d, F&& f) {
  switch (d) {
    case DType::f16: return f(__half{});
    case DType::bf16: return f(__nv_bfloat16{});
    default: return f(float{});
  }
}

}  // namespace gdn::cuda
