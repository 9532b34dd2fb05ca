// The GPU arms' per-call scratch (cuda::Scratch, common.cuh) comes from a memory pool the library
// owns, one per device, whose release threshold keeps freed memory cached for the next call.
//
// Why: with the device's default pool (release threshold 0) every synchronisation returns the
// freed scratch to the driver, and the next call maps it again. A caller that synchronises after
// each call (gdn tune, a test, an engine between steps) then pays for mapping the whole workspace
// per call: gdn tune measured wy-tc at 6.75 ms for 32768 tokens (27b) where the pipelined bench
// measured 2.59 (r18, bench/results/2026-12-03-h200-r18-7691663-tune.txt).
// GDN_SCRATCH_POOL=device restores the old behaviour (cudaMallocAsync from the device's current
// pool; A/B measurements); gdn::release_scratch() trims the cached memory of every device.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/common/common.cuh"

namespace gdn::cuda {
namespace {
struct PoolTable {
  std::mutex m;
  std::vector<cudaMemPool_t> pools;  // per device; null = not created yet
  std::vector<bool> failed;          // creation failed: fall back to the current pool
};
PoolTable& pool_table() {
  static PoolTable t;
  return t;
}
bool use_device_pool() {
  const char* v = std::getenv("GDN_SCRATCH_POOL");
  return v && std::strcmp(v, "device") == 0;
}
}  // namespace

cudaMemPool_t scratch_pool() {
  if (use_device_pool()) return nullptr;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return nullptr;
  PoolTable& t = pool_table();
  std::lock_guard<std::mutex> lock(t.m);
  if (static_cast<int>(t.pools.size()) <= dev) {
    t.pools.resize(dev + 1, nullptr);
    t.failed.resize(dev + 1, false);
  }
  if (t.pools[dev] || t.failed[dev]) return t.pools[dev];
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess ||
      !supported) {
    t.failed[dev] = true;
    return nullptr;
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool = nullptr;
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
    (void)cudaGetLastError();
    t.failed[dev] = true;
    return nullptr;
  }
  std::uint64_t keep = UINT64_MAX;  // never trimmed at synchronisation; release_scratch() trims
  (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  t.pools[dev] = pool;
  return pool;
}

std::uint64_t scratch_reserved() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  PoolTable& t = pool_table();
  std::lock_guard<std::mutex> lock(t.m);
  if (static_cast<int>(t.pools.size()) <= dev || !t.pools[dev]) return 0;
  std::uint64_t v = 0;
  if (cudaMemPoolGetAttribute(t.pools[dev], cudaMemPoolAttrReservedMemCurrent, &v) != cudaSuccess)
    return 0;
  return v;
}

Status release_scratch_all() {
  PoolTable& t = pool_table();
  std::lock_guard<std::mutex> lock(t.m);
  for (cudaMemPool_t p : t.pools)
    if (p) GDN_CUDA_TRY(cudaMemPoolTrimTo(p, 0));
  return Status::Ok();
}

}  // namespace gdn::cuda

namespace gdn::detail {
Status cuda_release_scratch() { return cuda::release_scratch_all(); }
std::uint64_t cuda_scratch_reserved() { return cuda::scratch_reserved(); }
}  // namespace gdn::detail
