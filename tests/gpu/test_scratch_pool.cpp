// The GPU arms' scratch pool (src/cuda/common/scratch_pool.cu): the workspace of a call stays
// cached across a synchronisation (the next call does not map it again), gdn::release_scratch()
// returns it to the driver, and GDN_SCRATCH_POOL=device (the device's default pool, which trims
// at every synchronisation) is the negative control: nothing stays cached there.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "check/check.hpp"
#include "gdn/gdn.hpp"
#include "gpu_test_util.hpp"

namespace {

std::int64_t free_bytes() {
  std::size_t f = 0, t = 0;
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess) return -1;
  return static_cast<std::int64_t>(f);
}

TEST(ScratchPool, CachedAcrossSynchronisationReleasedOnRequest) {
  using namespace gdn;
  // wy-tc's workspace here: 128 chunks x 12 value heads x ~90 KiB, ~140 MB (serial's would be
  // too small to see in cudaMemGetInfo's 2 MiB pages).
  check::CaseSpec s = testutil::spec_of({8192}, 2, 12, 128, 128);
  const check::Case c = check::make_case(s, 41);
  const check::ArmOutput warm = check::run_arm(Arm::wy_tc, c, true);  // modules loaded
  ASSERT_TRUE(warm.status.ok()) << warm.status.message();
  ASSERT_EQ(warm.ran, Arm::wy_tc);
  ASSERT_TRUE(release_scratch().ok());
  const std::int64_t f0 = free_bytes();
  ASSERT_GT(f0, 0);

  const check::ArmOutput a = check::run_arm(Arm::wy_tc, c, true);
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  const std::int64_t f1 = free_bytes();
  ASSERT_TRUE(release_scratch().ok());
  const std::int64_t f2 = free_bytes();
  std::int64_t f3 = 0;
  {
    testutil::ScopedEnv env("GDN_SCRATCH_POOL", "device");  // negative control
    const check::ArmOutput b = check::run_arm(Arm::wy_tc, c, true);
    ASSERT_TRUE(b.status.ok()) << b.status.message();
    f3 = free_bytes();
    ASSERT_EQ(testutil::first_bit_difference(a.o, b.o), -1) << "the pool changed the result";
  }
  constexpr std::int64_t MiB = 1 << 20;
  std::printf("scratch pool: cached after sync %lld MiB, after release %lld MiB, "
              "device pool after sync %lld MiB\n",
              static_cast<long long>((f0 - f1) / MiB), static_cast<long long>((f0 - f2) / MiB),
              static_cast<long long>((f0 - f3) / MiB));
  EXPECT_GE(f0 - f1, 64 * MiB) << "the workspace was not kept across the synchronisation";
  EXPECT_LE(f0 - f2, 16 * MiB) << "release_scratch() did not return the cached workspace";
  EXPECT_LE(f0 - f3, 16 * MiB) << "the device pool kept memory past a synchronisation";
}

}  // namespace
