// GPU tests of the wy-fp32 arm (src/cuda/wy/wy_fp32.cu): every fixture against the fp64 oracle
// with the arm's derived bound (utilisation printed, negative control must fail), bitwise
// reproducibility, hT aliasing h0, varlen with zero-length sequences. Outputs are NaN-poisoned
// before every run (check::run_arm; by hand below), so an unwritten element fails.
// Every test runs once per kernel variant (GDN_WYFP32_VARIANT = v3, v4, v5, v6; set inside the
// test and restored after), and v4, v5 are checked against v3 value for value (same operation
// order; v6 sums W S and Q S in another fixed order, so it is held to the bound, not to v3).
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
constexpr const char* kVariants[] = {"v3", "v4", "v5", "v6"};
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

// hT written in place over h0 must equal hT written to a separate buffer (bitwise), o too.
void ht_aliases_h0_one() {
  const check::Case c = check::make_case(spec_of({37, 0, 130}, 2, 4, 128, 128), kSeed);
  const std::size_t o_bytes = c.T * c.prob.HV * c.prob.V * dtype_size(c.spec.out_dtype);
  const std::size_t s_bytes = c.h0.size() * sizeof(float);
  std::vector<unsigned char> o_host(o_bytes);
  std::vector<float> hT_host(c.h0.size());
  PrefillArgs h = c.host_args(o_host.data(), hT_host.data());
  testutil::DeviceCopy q, k, v, g, beta, h0, o1, o2, hT1;
  PrefillArgs d = h;
  ASSERT_TRUE(q.make(&d.q) && k.make(&d.k) && v.make(&d.v) && g.make(&d.g) && beta.make(&d.beta) &&
              h0.make(&d.h0) && o1.make(&d.o) && hT1.make(&d.hT));
  ASSERT_EQ(cudaMalloc(&o2.ptr, o_bytes), cudaSuccess);
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
  d2.o.data = o2.ptr;
  d2.hT.data = d2.h0.data;
  ASSERT_EQ(cudaMemset(o2.ptr, 0xff, o_bytes), cudaSuccess);
  st = prefill(c.prob, d2, Arm::wy_fp32);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaMemcpy(o_alias.data(), o2.ptr, o_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
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

// ---------------------------------------------------------------------------------------------
// Grouped chunk kernel (GDN_WYFP32_CHUNK=g, src/cuda/wy/wy_fp32_chunk_grouped.cuh): one block per
// (chunk, key head) writes the workspace of all the key head's value heads, bit for bit what
// wy_chunk_kernel (GDN_WYFP32_CHUNK=v1) writes, so o and hT must be bitwise equal.

// Runs the arm with the v4 state kernel (the chunk kernel's X = true workspace) and the given
// chunk kernel.
check::ArmOutput run_chunk(const char* chunk, const check::Case& c) {
  testutil::ScopedEnv variant("GDN_WYFP32_VARIANT", "v4");
  testutil::ScopedEnv env("GDN_WYFP32_CHUNK", chunk);
  return check::run_arm(Arm::wy_fp32, c, true);
}

void expect_grouped_chunk_bitwise_v1(const check::CaseSpec& s) {
  const check::Case c = check::make_case(s, kSeed);
  const check::ArmOutput a = run_chunk("v1", c);
  const check::ArmOutput b = run_chunk("g", c);
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  ASSERT_TRUE(b.status.ok()) << b.status.message();
  ASSERT_FALSE(a.o.empty());
  const std::int64_t io = first_bit_difference(a.o, b.o);
  const std::int64_t ih = first_bit_difference(a.hT, b.hT);
  EXPECT_EQ(io, -1) << "grouped chunk kernel: o differs from v1 at that index: "
                    << (io >= 0 ? a.o[io] : 0.0) << " vs " << (io >= 0 ? b.o[io] : 0.0);
  EXPECT_EQ(ih, -1) << "grouped chunk kernel: hT differs from v1 at that index: "
                    << (ih >= 0 ? a.hT[ih] : 0.0) << " vs " << (ih >= 0 ? b.hT[ih] : 0.0);
  // Negative controls: a one-ulp change of one o or hT value is seen.
  std::vector<double> o2 = b.o;
  o2[o2.size() / 3] = std::nextafter(o2[o2.size() / 3], INFINITY);
  EXPECT_EQ(first_bit_difference(a.o, o2), static_cast<std::int64_t>(o2.size() / 3));
  if (!b.hT.empty()) {
    std::vector<double> h2 = b.hT;
    h2[h2.size() - 1] = std::nextafter(h2[h2.size() - 1], -INFINITY);
    EXPECT_EQ(first_bit_difference(a.hT, h2), static_cast<std::int64_t>(h2.size() - 1));
  }
}

// HV/HK = 3 (qwen3.5-27b's ratio), both head maps; varlen with a zero-length sequence and a
// partial last chunk (17 tokens); two value heads of the part in flight through both staging
// buffers.
TEST(WyFp32GroupedChunk, BitwiseV1_L300x0x1029x17_HK2_HV6_K128_bf16_h0_grouped) {
  expect_grouped_chunk_bitwise_v1(spec_of({300, 0, 1029, 17}, 2, 6, 128, 128));
}

TEST(WyFp32GroupedChunk, BitwiseV1_L300x0x1029x17_HK2_HV6_K128_bf16_h0_tiled) {
  check::CaseSpec s = spec_of({300, 0, 1029, 17}, 2, 6, 128, 128);
  s.head_map = HeadMap::tiled;
  expect_grouped_chunk_bitwise_v1(s);
}

// HV/HK = 2 (qwen3-next's ratio), K = 128 / V = 64, in-kernel l2norm, bf16 beta, fast decay.
TEST(WyFp32GroupedChunk, BitwiseV1_L129x64x5_HK2_HV4_K128_V64_l2norm_bf16beta) {
  check::CaseSpec s = spec_of({129, 64, 5}, 2, 4, 128, 64);
  s.l2norm_in_kernel = true;
  s.beta_dtype = DType::bf16;
  s.decay = check::Decay::fast;
  expect_grouped_chunk_bitwise_v1(s);
}

// HV/HK = 1 (a group of one), K = 64 / V = 128, f32 output, in-kernel l2norm, [V, K] state.
TEST(WyFp32GroupedChunk, BitwiseV1_L70x33x200_HK2_HV2_K64_V128_f32out_l2norm_vk) {
  check::CaseSpec s = spec_of({70, 33, 200}, 2, 2, 64, 128);
  s.out_dtype = DType::f32;
  s.l2norm_in_kernel = true;
  s.state_layout = StateLayout::vk;
  expect_grouped_chunk_bitwise_v1(s);
}

// fp32 inputs at K = V = 128: the one geometry with a single staging buffer (two do not fit in
// 113 KiB), tiled, HV/HK = 3.
TEST(WyFp32GroupedChunk, BitwiseV1_L200x0x65_HK1_HV3_K128_f32io_tiled) {
  check::CaseSpec s = spec_of({200, 0, 65}, 1, 3, 128, 128);
  s.io_dtype = DType::f32;
  s.out_dtype = DType::f32;
  s.head_map = HeadMap::tiled;
  expect_grouped_chunk_bitwise_v1(s);
}

// f16 inputs, extreme decay (exp underflows), K = V = 64.
TEST(WyFp32GroupedChunk, BitwiseV1_L64x100_HK2_HV4_K64_f16_extreme) {
  check::CaseSpec s = spec_of({64, 100}, 2, 4, 64, 64);
  s.io_dtype = DType::f16;
  s.out_dtype = DType::f16;
  s.decay = check::Decay::extreme;
  expect_grouped_chunk_bitwise_v1(s);
}

// HV/HK = 10 > GMAX = 4: a key head's value heads split over three blocks (3 + 3 + 4), both maps.
TEST(WyFp32GroupedChunk, BitwiseV1_L90x7_HK1_HV10_K64_bf16_grouped_and_tiled) {
  for (HeadMap m : {HeadMap::grouped, HeadMap::tiled}) {
    SCOPED_TRACE(m == HeadMap::grouped ? "grouped" : "tiled");
    check::CaseSpec s = spec_of({90, 7}, 1, 10, 64, 64);
    s.head_map = m;
    expect_grouped_chunk_bitwise_v1(s);
  }
}

// The parity fixture set once more through the grouped chunk kernel (v4 state kernel), against
// the fp64 oracle with the arm's bound and its negative control.
class WyFp32ParityGroupedChunk : public ::testing::TestWithParam<check::CaseSpec> {};

TEST_P(WyFp32ParityGroupedChunk, MatchesOracle) {
  testutil::ScopedEnv variant("GDN_WYFP32_VARIANT", "v4");
  testutil::ScopedEnv env("GDN_WYFP32_CHUNK", "g");
  expect_parity_one(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WyFp32ParityGroupedChunk,
                         ::testing::ValuesIn(check::fixture_set()),
                         [](const ::testing::TestParamInfo<check::CaseSpec>& info) {
                           return info.param.name();
                         });

}  // namespace
}  // namespace gdn
