// GPU tests of the wy-fp32 arm (src/cuda/wy/wy_fp32.cu): every fixture against the fp64 oracle
// with the arm's derived bound (utilisation printed, negative control must fail), bitwise
// reproducibility, hT aliasing h0, varlen with zero-length sequences. Outputs are NaN-poisoned
// before every run (check::run_arm; by hand below), so an unwritten element fails.
// Every test runs once per kernel variant (GDN_WYFP32_VARIANT = v3, v4, v5; set inside the test
// and restored after), and v4, v5 are checked against v3 value for value (same operation order).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "gpu_test_util.hpp"
#include "gdn/gdn.hpp"

namespace gdn {
namespace {

using testutil::describe;
using testutil::first_bit_difference;
using testutil::spec_of;

constexpr std::uint64_t kSeed = 4404;

// Runs f once per wy-fp32 kernel variant (GDN_WYFP32_VARIANT set for the call, restored after).
constexpr const char* kVariants[] = {"v3", "v4", "v5"};
template <typename F>
void each_variant(F&& f) {
  testutil::for_each_env("GDN_WYFP32_VARIANT", kVariants, std::forward<F>(f));
}

// Runs the arm with one variant.
check::ArmOutput run_variant(const char* variant, const check::Case& c) {
  testutil::ScopedEnv env("GDN_WYFP32_VARIANT", variant);
  return check::run_arm(Arm::wy_fp32, c, true);
}

// First index where a and b differ as values (-0 == +0; NaN never equal), -1 if none.
std::int64_t first_value_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return static_cast<std::int64_t>(i);
  return -1;
}

void expect_parity_one(const check::CaseSpec& spec) {
  const check::Case c = check::make_case(spec, kSeed);
  const check::Oracle ref = check::ref_serial(c);
  const check::Row r = check::evaluate(Arm::wy_fp32, c, ref, /*on_device=*/true);
  std::printf("%s", check::format_table({r}).c_str());
  ASSERT_TRUE(r.error.empty()) << "wy-fp32 returned an error on " << r.fixture << "\n"
                               << describe(r);
  EXPECT_EQ(r.arm, "wy-fp32") << "fell back to another arm on " << r.fixture;
  EXPECT_TRUE(r.pass) << "wy-fp32 outside its bound on " << r.fixture << ": o util " << r.util_o
                      << " (NaN count " << r.o.nan_count << "), state util " << r.util_state
                      << " (NaN count " << r.state.nan_count << ")\n"
                      << describe(r);
  EXPECT_TRUE(r.negative_control_failed)
      << "negative control passed (the check cannot fail) on " << r.fixture << "\n"
      << describe(r);
}

void expect_parity(const check::CaseSpec& spec) {
  each_variant([&](const char*) { expect_parity_one(spec); });
}

class WyFp32Parity : public ::testing::TestWithParam<check::CaseSpec> {};

TEST_P(WyFp32Parity, MatchesOracle) { expect_parity(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Fixtures, WyFp32Parity, ::testing::ValuesIn(check::fixture_set()),
                         [](const ::testing::TestParamInfo<check::CaseSpec>& info) {
                           return info.param.name();
                         });

TEST(WyFp32, Varlen_L0x130x0x64x1x0_HK2_HV4_K128_bf16_h0_grouped) {
  expect_parity(spec_of({0, 130, 0, 64, 1, 0}, 2, 4, 128, 128));
}

TEST(WyFp32, Varlen_L70x0x4099_HK1_HV3_K64_V128_f32out_l2norm_vk_tiled) {
  check::CaseSpec s = spec_of({70, 0, 4099}, 1, 3, 64, 128);
  s.out_dtype = DType::f32;
  s.l2norm_in_kernel = true;
  s.state_layout = StateLayout::vk;
  s.head_map = HeadMap::tiled;
  expect_parity(s);
}

TEST(WyFp32, AllZeroLength_L0x0_HK1_HV2_K64_bf16_h0) { expect_parity(spec_of({0, 0}, 1, 2, 64, 64)); }

TEST(WyFp32, BitwiseReproducible_L300x0x1029_HK2_HV6_K128_bf16_h0_tiled) {
  check::CaseSpec s = spec_of({300, 0, 1029}, 2, 6, 128, 128);
  s.head_map = HeadMap::tiled;
  const check::Case c = check::make_case(s, kSeed);
  each_variant([&](const char* v) {
    const check::ArmOutput a = run_variant(v, c);
    const check::ArmOutput b = run_variant(v, c);
    ASSERT_TRUE(a.status.ok()) << a.status.message();
    ASSERT_TRUE(b.status.ok()) << b.status.message();
    EXPECT_EQ(first_bit_difference(a.o, b.o), -1) << "o differs between two runs at that index";
    EXPECT_EQ(first_bit_difference(a.hT, b.hT), -1) << "hT differs between two runs at that index";
    std::vector<double> o2 = b.o;  // negative control: the comparison sees a one-ulp change
    o2[o2.size() / 2] = std::nextafter(o2[o2.size() / 2], INFINITY);
    EXPECT_EQ(first_bit_difference(a.o, o2), static_cast<std::int64_t>(o2.size() / 2));
  });
}

// v4 and v5 stream the same workspace values (plus Q and Kd formed by the same operations as
// v3's loaders) through the same per-element operation order: o and hT equal v3's value for
// value. A difference here with parity still passing means an operand reached the kernel altered
// (a race or a wrong tile), which the bound could hide on small fixtures.
void expect_variants_equal_v3(const check::CaseSpec& s) {
  const check::Case c = check::make_case(s, kSeed);
  const check::ArmOutput a = run_variant("v3", c);
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  for (const char* v : {"v4", "v5"}) {
    SCOPED_TRACE(std::string("GDN_WYFP32_VARIANT=") + v);
    const check::ArmOutput b = run_variant(v, c);
    ASSERT_TRUE(b.status.ok()) << b.status.message();
    const std::int64_t io = first_value_difference(a.o, b.o);
    const std::int64_t ih = first_value_difference(a.hT, b.hT);
    EXPECT_EQ(io, -1) << v << " o differs from v3 at that index: "
                      << (io >= 0 ? a.o[io] : 0.0) << " vs " << (io >= 0 ? b.o[io] : 0.0);
    EXPECT_EQ(ih, -1) << v << " hT differs from v3 at that index: "
                      << (ih >= 0 ? a.hT[ih] : 0.0) << " vs " << (ih >= 0 ? b.hT[ih] : 0.0);
    std::vector<double> o2 = b.o;  // negative control
    o2[o2.size() / 3] = std::nextafter(o2[o2.size() / 3], INFINITY);
    EXPECT_EQ(first_value_difference(a.o, o2), static_cast<std::int64_t>(o2.size() / 3));
  }
}

TEST(WyFp32, VariantsEqualV3_L300x0x1029x17_HK2_HV6_K128_bf16_h0_tiled) {
  check::CaseSpec s = spec_of({300, 0, 1029, 17}, 2, 6, 128, 128);
  s.head_map = HeadMap::tiled;
  expect_variants_equal_v3(s);
}

TEST(WyFp32, VariantsEqualV3_L70x33x200_HK1_HV3_K64_V128_f32out_l2norm_vk) {
  check::CaseSpec s = spec_of({70, 33, 200}, 1, 3, 64, 128);
  s.out_dtype = DType::f32;
  s.l2norm_in_kernel = true;
  s.state_layout = StateLayout::vk;
  expect_variants_equal_v3(s);
}

TEST(WyFp32, VariantsEqualV3_L129x64_HK2_HV2_K128_V64_bf16_h0_l2norm) {
  check::CaseSpec s = spec_of({129, 64}, 2, 2, 128, 64);
  s.l2norm_in_kernel = true;
  expect_variants_equal_v3(s);
}

// Device buffer freed at scope exit.
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

// Copies a host view's storage to the device (contiguous views only) and points `dev` at it.
bool to_device(const TensorView& host, DevBuf* buf, TensorView* dev) {
  *dev = host;
  if (!host.defined()) return true;
  const std::size_t bytes = host.numel() * dtype_size(host.dtype);
  if (cudaMalloc(&buf->p, bytes ? bytes : 4) != cudaSuccess) return false;
  if (cudaMemcpy(buf->p, host.data, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return false;
  dev->data = buf->p;
  return true;
}

// hT written in place over h0 must equal hT written to a separate buffer (bitwise), o too.
void ht_aliases_h0_one() {
  const check::Case c = check::make_case(spec_of({37, 0, 130}, 2, 4, 128, 128), kSeed);
  const std::size_t o_bytes = c.T * c.prob.HV * c.prob.V * dtype_size(c.spec.out_dtype);
  const std::size_t s_bytes = c.h0.size() * sizeof(float);
  std::vector<unsigned char> o_host(o_bytes);
  std::vector<float> hT_host(c.h0.size());
  PrefillArgs h = c.host_args(o_host.data(), hT_host.data());
  DevBuf q, k, v, g, beta, h0, o1, o2, hT1, cu;
  PrefillArgs d = h;
  ASSERT_TRUE(to_device(h.q, &q, &d.q) && to_device(h.k, &k, &d.k) && to_device(h.v, &v, &d.v) &&
              to_device(h.g, &g, &d.g) && to_device(h.beta, &beta, &d.beta) &&
              to_device(h.h0, &h0, &d.h0) && to_device(h.o, &o1, &d.o) &&
              to_device(h.hT, &hT1, &d.hT));
  ASSERT_EQ(cudaMalloc(&o2.p, o_bytes), cudaSuccess);
  d.on_device = true;
  // Run 1: separate hT.
  ASSERT_EQ(cudaMemset(d.o.data, 0xff, o_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.hT.data, 0xff, s_bytes), cudaSuccess);
  Status st = prefill(c.prob, d, Arm::wy_fp32);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<unsigned char> o_sep(o_bytes), o_alias(o_bytes);
  std::vector<float> hT_sep(c.h0.size()), hT_alias(c.h0.size());
  ASSERT_EQ(cudaMemcpy(o_sep.data(), d.o.data, o_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hT_sep.data(), d.hT.data, s_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  // Run 2: hT = h0 (in place), into a fresh poisoned o.
  PrefillArgs d2 = d;
  d2.o.data = o2.p;
  d2.hT.data = d2.h0.data;
  ASSERT_EQ(cudaMemset(o2.p, 0xff, o_bytes), cudaSuccess);
  st = prefill(c.prob, d2, Arm::wy_fp32);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaMemcpy(o_alias.data(), o2.p, o_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hT_alias.data(), d2.h0.data, s_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(o_sep.data(), o_alias.data(), o_bytes), 0)
      << "o with hT aliasing h0 differs from o with separate buffers";
  std::int64_t bad = -1;
  for (std::size_t i = 0; i < hT_sep.size() && bad < 0; ++i)
    if (std::memcmp(&hT_sep[i], &hT_alias[i], sizeof(float)) != 0) bad = static_cast<std::int64_t>(i);
  EXPECT_EQ(bad, -1) << "in-place hT differs from separate hT at that index";
  // Negative control: the in-place result differs from the unchanged h0 (the state moved).
  EXPECT_NE(std::memcmp(hT_alias.data(), c.h0.data(), s_bytes), 0)
      << "in-place hT equals h0: the kernel did not write the state";
}

TEST(WyFp32, HtAliasesH0_L37x0x130_HK2_HV4_K128_bf16_h0_grouped) {
  each_variant([&](const char*) { ht_aliases_h0_one(); });
}

}  // namespace
}  // namespace gdn
