// The C ABI (include/gdn/gdn.h): same results as the C++ API bit for bit on the cpu arm, and the
// bad-input codes and messages, with the caller's outputs untouched on error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "gdn/gdn.h"
#include "gdn/gdn.hpp"

namespace {

using gdn::check::CaseSpec;

// C views over a check::Case's storage, built through the C helpers (not from the C++ views).
struct CArgs {
  gdn_problem p;
  gdn_prefill_args a;
};
CArgs c_args(const gdn::check::Case& c, void* o, void* hT) {
  CArgs r;
  const auto& s = c.spec;
  gdn_problem_init(&r.p, s.HK, s.HV, s.K, s.V);
  r.p.scale = c.prob.scale;
  r.p.head_map = s.head_map == gdn::HeadMap::tiled ? GDN_HEAD_MAP_TILED : GDN_HEAD_MAP_GROUPED;
  gdn_prefill_args_init(&r.a);
  const bool h16 = s.io_dtype != gdn::DType::f32;
  const int32_t io = static_cast<int32_t>(s.io_dtype);
  const int64_t T = c.T, N = static_cast<int64_t>(c.cu_seqlens.size()) - 1;
  const int64_t qs[] = {T, s.HK, s.K}, vs[] = {T, s.HV, s.V}, gs[] = {T, s.HV},
                hs[] = {N, s.HV, s.K, s.V};
  r.a.q = gdn_tensor_contiguous(h16 ? (const void*)c.q16.data() : c.q32.data(), io, 3, qs);
  r.a.k = gdn_tensor_contiguous(h16 ? (const void*)c.k16.data() : c.k32.data(), io, 3, qs);
  r.a.v = gdn_tensor_contiguous(h16 ? (const void*)c.v16.data() : c.v32.data(), io, 3, vs);
  r.a.g = gdn_tensor_contiguous(c.g.data(), GDN_F32, 2, gs);
  r.a.beta = gdn_tensor_contiguous(c.beta32.data(), GDN_F32, 2, gs);
  r.a.o = gdn_tensor_contiguous(o, static_cast<int32_t>(s.out_dtype), 3, vs);
  if (s.h0) r.a.h0 = gdn_tensor_contiguous(c.h0.data(), GDN_F32, 4, hs);
  r.a.hT = gdn_tensor_contiguous(hT, GDN_F32, 4, hs);
  r.a.cu_seqlens = c.cu_seqlens.data();
  r.a.num_seqs = static_cast<int32_t>(N);
  return r;
}

CaseSpec spec_varlen() {
  CaseSpec s;
  s.seq_lens = {70, 0, 33};
  s.HK = 2, s.HV = 4, s.K = 64, s.V = 32;
  s.head_map = gdn::HeadMap::tiled;
  return s;
}

std::size_t o_bytes(const gdn::check::Case& c) {
  return c.T * c.spec.HV * c.spec.V * gdn::dtype_size(c.spec.out_dtype);
}
std::size_t s_bytes(const gdn::check::Case& c) {
  return (c.cu_seqlens.size() - 1) * c.spec.HV * c.spec.K * c.spec.V * sizeof(float);
}

TEST(capi, cpu_T70_0_33_HK2_HV4_K64_V32_bf16_h0_tiled_bitwise_equals_cpp) {
  const auto c = gdn::check::make_case(spec_varlen(), 7);
  // Different poison bytes on the two sides: an element neither call writes cannot compare equal.
  std::vector<std::uint8_t> o_cpp(o_bytes(c), 0xFF), o_c(o_bytes(c), 0xFE);
  std::vector<std::uint8_t> h_cpp(s_bytes(c), 0xFF), h_c(s_bytes(c), 0xFE);
  gdn::RunInfo info;
  const gdn::Status st =
      gdn::prefill(c.prob, c.host_args(o_cpp.data(), h_cpp.data()), gdn::Arm::cpu, &info);
  ASSERT_TRUE(st.ok()) << "C++ API on the cpu arm: " << st.message();

  CArgs ca = c_args(c, o_c.data(), h_c.data());
  char msg[256] = "not touched";
  int32_t ran = -1;
  const int rc = gdn_prefill(&ca.p, &ca.a, GDN_ARM_CPU, &ran, msg, sizeof msg);
  ASSERT_EQ(rc, GDN_OK) << msg;
  EXPECT_STREQ(msg, "");
  EXPECT_STREQ(gdn_last_error(), "");
  EXPECT_EQ(ran, GDN_ARM_CPU);
  EXPECT_EQ(std::memcmp(o_cpp.data(), o_c.data(), o_c.size()), 0) << "o differs C vs C++";
  EXPECT_EQ(std::memcmp(h_cpp.data(), h_c.data(), h_c.size()), 0) << "hT differs C vs C++";

  // Negative control: a different scale through the C API must change o (the comparison can fail).
  ca.p.scale *= 2;
  ASSERT_EQ(gdn_prefill(&ca.p, &ca.a, GDN_ARM_CPU, &ran, msg, sizeof msg), GDN_OK) << msg;
  EXPECT_NE(std::memcmp(o_cpp.data(), o_c.data(), o_c.size()), 0) << "control: scale ignored";
}

// One bad-input case: the call fails with `code`, the message names the problem, and o/hT keep
// their poison bytes.
void expect_rejected(const gdn_problem* p, const gdn_prefill_args* a, int code,
                     const std::string& needle, const std::vector<std::uint8_t>& o,
                     const std::vector<std::uint8_t>& h, int32_t arm = GDN_ARM_CPU) {
  char msg[256] = "";
  int32_t ran = -7;
  const int rc = gdn_prefill(p, a, arm, &ran, msg, sizeof msg);
  EXPECT_EQ(rc, code) << "message: " << msg;
  EXPECT_NE(std::string(msg).find(needle), std::string::npos)
      << "message '" << msg << "' does not mention '" << needle << "'";
  EXPECT_STREQ(gdn_last_error(), msg);
  EXPECT_EQ(ran, -7) << "arm_ran written on error";
  for (std::size_t i = 0; i < o.size(); ++i)
    ASSERT_EQ(o[i], 0xAB) << "o byte " << i << " written on error";
  for (std::size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(h[i], 0xAB) << "hT byte " << i << " written on error";
}

class capi_bad : public ::testing::Test {
 protected:
  void SetUp() override {
    c = gdn::check::make_case(spec_varlen(), 11);
    o.assign(o_bytes(c), 0xAB);
    h.assign(s_bytes(c), 0xAB);
    ca = c_args(c, o.data(), h.data());
    // Control: the unmodified arguments are accepted.
    char msg[256];
    ASSERT_EQ(gdn_validate(&ca.p, &ca.a, msg, sizeof msg), GDN_OK) << msg;
  }
  gdn::check::Case c;
  std::vector<std::uint8_t> o, h;
  CArgs ca;
};

TEST_F(capi_bad, hv_not_multiple_of_hk) {
  ca.p.HV = 3;
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "not a multiple", o, h);
}
TEST_F(capi_bad, null_q) {
  ca.a.q.data = nullptr;
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "q: null data pointer", o, h);
}
TEST_F(capi_bad, cu_seqlens_not_ending_at_T) {
  std::vector<int32_t> cu = c.cu_seqlens;
  cu.back() -= 1;
  ca.a.cu_seqlens = cu.data();
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "does not equal the token count", o, h);
}
TEST_F(capi_bad, unknown_dtype_value) {
  ca.a.v.dtype = 7;
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "v: unknown dtype value 7", o, h);
}
TEST_F(capi_bad, rank_above_4) {
  const int64_t shape[5] = {1, 1, 1, 1, 1};
  EXPECT_EQ(gdn_tensor_contiguous(nullptr, GDN_F32, 5, shape).rank, -1);
  ca.a.k.rank = 5;
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "k: rank 5 outside 0..4", o, h);
}
TEST_F(capi_bad, unknown_arm_value) {
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "unknown arm value 9", o, h, 9);
}
TEST_F(capi_bad, unknown_head_map_value) {
  ca.p.head_map = 5;
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "unknown head_map value 5", o, h);
}
TEST_F(capi_bad, nan_scale) {
  ca.p.scale = std::nanf("");
  expect_rejected(&ca.p, &ca.a, GDN_ERR_INVALID_ARGUMENT, "scale must be finite", o, h);
}
TEST_F(capi_bad, null_problem_and_args) {
  expect_rejected(nullptr, &ca.a, GDN_ERR_INVALID_ARGUMENT, "problem is NULL", o, h);
  expect_rejected(&ca.p, nullptr, GDN_ERR_INVALID_ARGUMENT, "args is NULL", o, h);
}
TEST_F(capi_bad, message_truncated_and_terminated) {
  ca.p.HV = 3;
  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(gdn_prefill(&ca.p, &ca.a, GDN_ARM_CPU, nullptr, small, sizeof small),
            GDN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::strlen(small), 7u);
  EXPECT_EQ(std::string(gdn_last_error()).substr(0, 7), std::string(small));
  // No buffer at all: the code and the thread-local message still report the error.
  EXPECT_EQ(gdn_prefill(&ca.p, &ca.a, GDN_ARM_CPU, nullptr, nullptr, 0), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gdn_last_error()).find("not a multiple"), std::string::npos);
}

TEST(capi, arm_names_parse_and_version) {
  const std::pair<const char*, int32_t> arms[] = {{"auto", GDN_ARM_AUTO},
                                                  {"cpu", GDN_ARM_CPU},
                                                  {"serial", GDN_ARM_SERIAL},
                                                  {"wy-fp32", GDN_ARM_WY_FP32},
                                                  {"wy-tc", GDN_ARM_WY_TC}};
  for (auto [name, value] : arms) {
    int32_t got = -1;
    EXPECT_EQ(gdn_arm_parse(name, &got), GDN_OK) << name;
    EXPECT_EQ(got, value) << name;
    EXPECT_STREQ(gdn_arm_name(value), name);
  }
  int32_t got = 123;
  EXPECT_EQ(gdn_arm_parse("wy", &got), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(got, 123);
  EXPECT_NE(std::string(gdn_last_error()).find("unknown arm 'wy'"), std::string::npos);
  EXPECT_EQ(gdn_arm_parse(nullptr, &got), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(gdn_arm_name(42), "?");
  EXPECT_STREQ(gdn_version(), gdn::version());
}

TEST(capi, problem_init_defaults) {
  gdn_problem p;
  std::memset(&p, 0x5A, sizeof p);
  gdn_problem_init(&p, 16, 48, 128, 64);
  EXPECT_EQ(p.HK, 16);
  EXPECT_EQ(p.HV, 48);
  EXPECT_EQ(p.K, 128);
  EXPECT_EQ(p.V, 64);
  EXPECT_EQ(p.head_map, GDN_HEAD_MAP_GROUPED);
  EXPECT_EQ(p.state_layout, GDN_STATE_KV);
  EXPECT_EQ(p.qk_l2norm, 0);
  EXPECT_FLOAT_EQ(p.scale, 1.0f / std::sqrt(128.0f));
  gdn_prefill_args a;
  std::memset(&a, 0x5A, sizeof a);
  gdn_prefill_args_init(&a);
  EXPECT_EQ(a.q.data, nullptr);
  EXPECT_EQ(a.cu_seqlens, nullptr);
  EXPECT_EQ(a.on_device, 0);
  EXPECT_EQ(a.check_values, 1);
}

}  // namespace
