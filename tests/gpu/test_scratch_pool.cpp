// The GPU arms' scratch pool (src/cuda/common/scratch_pool.cu): the workspace of a call stays
// cached across a synchronisation (the next call does not map it again), gdn::release_scratch()
// returns it to the driver, and GDN_SCRATCH_POOL=device (the device's default pool, which trims
// at every synchronisation) is the negative control: that pool serves the call and keeps nothing.
// Measured with the pools' own counters (per process), not the device's free memory, which other
// processes change (ctest runs the GPU tests in parallel: r20 failed the free-memory version).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "check/check.hpp"
#include "gdn/gdn.hpp"
#include "gpu_test_util.hpp"

namespace {

std::uint64_t device_pool_attr(cudaMemPoolAttr a) {
  int dev = 0;
  cudaMemPool_t pool = nullptr;
  std::uint64_t v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, a, &v) != cudaSuccess)
    return ~std::uint64_t{0};
  return v;
}
bool reset_device_pool_high() {
  int dev = 0;
  cudaMemPool_t pool = nullptr;
  std::uint64_t zero = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess &&
         cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero) == cudaSuccess;
}

TEST(ScratchPool, CachedAcrossSynchronisationReleasedOnRequest) {
  using namespace gdn;
  constexpr std::uint64_t MiB = 1 << 20;
  // wy-tc's workspace here: 128 chunks x 12 value heads x ~90 KiB, ~140 MB.
  check::CaseSpec s = testutil::spec_of({8192}, 2, 12, 128, 128);
  const check::Case c = check::make_case(s, 41);
  ASSERT_TRUE(release_scratch().ok());
  const check::ArmOutput a = check::run_arm(Arm::wy_tc, c, true);  // synchronises
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  ASSERT_EQ(a.ran, Arm::wy_tc);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::uint64_t kept = scratch_cached_bytes();
  ASSERT_TRUE(release_scratch().ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::uint64_t after_release = scratch_cached_bytes();

  // Negative control: the device's default pool serves the call (its high-water mark rises by
  // the workspace) and keeps nothing past the synchronisation; the library's pool is not used.
  ASSERT_TRUE(reset_device_pool_high());
  const std::uint64_t dev_before = device_pool_attr(cudaMemPoolAttrReservedMemCurrent);
  {
    testutil::ScopedEnv env("GDN_SCRATCH_POOL", "device");
    const check::ArmOutput b = check::run_arm(Arm::wy_tc, c, true);
    ASSERT_TRUE(b.status.ok()) << b.status.message();
    ASSERT_EQ(testutil::first_bit_difference(a.o, b.o), -1) << "the pool changed the result";
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::uint64_t dev_high = device_pool_attr(cudaMemPoolAttrReservedMemHigh);
  const std::uint64_t dev_after = device_pool_attr(cudaMemPoolAttrReservedMemCurrent);
  const std::uint64_t lib_after_control = scratch_cached_bytes();
  std::printf("scratch pool: kept after sync %llu MiB, after release %llu MiB; device pool: "
              "peak %llu MiB, kept %llu MiB (before %llu); library pool during it %llu MiB\n",
              static_cast<unsigned long long>(kept / MiB),
              static_cast<unsigned long long>(after_release / MiB),
              static_cast<unsigned long long>(dev_high / MiB),
              static_cast<unsigned long long>(dev_after / MiB),
              static_cast<unsigned long long>(dev_before / MiB),
              static_cast<unsigned long long>(lib_after_control / MiB));
  EXPECT_GE(kept, 64 * MiB) << "the workspace was not kept across the synchronisation";
  EXPECT_EQ(after_release, 0u) << "release_scratch() did not return the cached workspace";
  EXPECT_GE(dev_high, 64 * MiB) << "negative control: the device pool did not serve the call";
  EXPECT_LE(dev_after, dev_before + 16 * MiB) << "the device pool kept the workspace";
  EXPECT_EQ(lib_after_control, 0u) << "GDN_SCRATCH_POOL=device still used the library pool";
}

}  // namespace
