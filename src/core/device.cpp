// What this build and machine can run: CUDA presence, device, compute capability.
#include <string>

#include "core/internal.hpp"
#include "gdn/gdn.hpp"

#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gdn {

DeviceInfo device_info() {
  DeviceInfo d;
#ifdef GDN_WITH_CUDA
  d.cuda_built = true;
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess)
    d.cuda_runtime = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    n = 0;
  }
  d.device_count = n;
  if (n > 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
      d.device = dev;
      d.sm = prop.major * 10 + prop.minor;
      d.multiprocessors = prop.multiProcessorCount;
      d.name = prop.name;
    }
  }
#endif
  return d;
}

#ifdef GDN_WITH_CUDA
namespace detail {
int cuda_pointer_kind(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) ? 1 : 0;
}
}  // namespace detail
#endif

}  // namespace gdn
