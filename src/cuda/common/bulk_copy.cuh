// mbarrier and bulk-copy (TMA, cp.async.bulk) helpers for shared memory, sm_90+ (a trap below:
// callers launch the kernels that use them only on such devices). Used by decode v4 and the wy-tc
// wgmma state pass.
#pragma once

#include <cstdint>

namespace gdn::cuda {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(std::uint64_t* b, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
#else
  __trap();  // sm_90+ only: callers dispatch on the device
#endif
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(smem_u32(b))
               : "memory");
#else
  __trap();  // sm_90+ only: callers dispatch on the device
#endif
}
__device__ __forceinline__ void mbar_arrive_tx(std::uint64_t* b, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}" ::"r"(
                   smem_u32(b)),
               "r"(bytes)
               : "memory");
#else
  __trap();  // sm_90+ only: callers dispatch on the device
#endif
}
__device__ __forceinline__ void mbar_wait(std::uint64_t* b, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
#else
  __trap();  // sm_90+ only: callers dispatch on the device
#endif
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, unsigned bytes, std::uint64_t* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(b))
      : "memory");
#else
  __trap();  // sm_90+ only: callers dispatch on the device
#endif
}
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  __trap();  // sm_90+ only: callers dispatch on the device
#endif
}

// Ready words between two concurrently running kernels (wy-tc's flag pipeline): producer blocks
// publish their global stores with ready_add (after every thread's stores, a
// fence_proxy_async_global and a block barrier: a release reduction, so several producers may
// count into one word); a consumer thread reads the word with ready_peek (relaxed: the load can be
// issued well before its value is looked at), and once the word says ready it issues
// fence_acquire_gpu (with the relaxed load before it, the acquire pattern that synchronises with
// every release reduction the load observed) and, before reading the data with bulk copies
// (async proxy), fence_proxy_async_global.
__device__ __forceinline__ void ready_add(unsigned long long* w, unsigned long long v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(w), "l"(v) : "memory");
#else
  __threadfence();
  atomicAdd(w, v);
#endif
}
__device__ __forceinline__ unsigned long long ready_peek(const unsigned long long* w) {
  unsigned long long v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(w) : "memory");
#else
  v = *reinterpret_cast<const volatile unsigned long long*>(w);
#endif
  return v;
}
__device__ __forceinline__ void fence_acquire_gpu() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.acquire.gpu;" ::: "memory");
#else
  __threadfence();
#endif
}
// Orders this thread's generic-proxy global accesses before its later async-proxy ones (and the
// reverse); a no-op below sm_90, where no bulk copy reads the data.
__device__ __forceinline__ void fence_proxy_async_global() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}
__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace gdn::cuda
