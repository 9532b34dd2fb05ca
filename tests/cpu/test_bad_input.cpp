// Bad input (issue #2 item 7): each case gets a clear error naming the problem, and the caller's
// output buffers are byte-identical to their pre-call contents. T = 0 and zero-length sequences
// are legal no-ops that still write hT.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "check/check.hpp"

namespace gdn::check {
namespace {

// A small valid call with sentinel-filled outputs.
struct Call {
  Case c;
  std::vector<std::uint16_t> o;
  std::vector<float> hT;
  PrefillArgs a;
  explicit Call(std::vector<int> lens = {20, 10}) {
    CaseSpec s;
    s.seq_lens = std::move(lens);
    s.HK = 2;
    s.HV = 4;
    s.K = s.V = 64;
    c = make_case(s, 7);
    o.assign(c.T * s.HV * s.V, 0xABCD);
    hT.assign(c.h0.size(), 1234.5f);
    a = c.host_args(o.data(), hT.data());
  }
  // Runs the call, expects an error mentioning every word in `words`, and untouched outputs.
  void expect_error(std::initializer_list<const char*> words) {
    const auto o_before = o;
    const auto h_before = hT;
    const Status st = prefill(c.prob, a, Arm::cpu);
    ASSERT_FALSE(st.ok()) << "accepted bad input";
    for (const char* w : words)
      EXPECT_NE(st.message().find(w), std::string::npos)
          << "message '" << st.message() << "' does not mention '" << w << "'";
    EXPECT_EQ(0, std::memcmp(o.data(), o_before.data(), o.size() * 2)) << "o was written";
    EXPECT_EQ(0, std::memcmp(hT.data(), h_before.data(), hT.size() * 4)) << "hT was written";
  }
};

TEST(BadInput, HVNotMultipleOfHK_HK2_HV5) {
  Call t;
  t.c.prob.HV = 5;
  t.expect_error({"HV=5", "multiple", "HK=2"});
}
TEST(BadInput, UnsupportedHeadSize_K300) {
  Call t;
  t.c.prob.K = 300;
  t.expect_error({"K=300"});
}
TEST(BadInput, UnsupportedHeadSize_V0) {
  Call t;
  t.c.prob.V = 0;
  t.expect_error({"V=0"});
}
TEST(BadInput, CuSeqlensNotMonotone_0_25_10_30) {
  Call t;
  std::vector<std::int32_t> cu = {0, 25, 10, 30};
  t.a.cu_seqlens = cu.data();
  t.a.num_seqs = 3;
  t.a.h0 = t.a.hT = TensorView{};
  t.expect_error({"cu_seqlens", "monotone"});
}
TEST(BadInput, CuSeqlensNotEndingAtT_0_20_29) {
  Call t;
  std::vector<std::int32_t> cu = {0, 20, 29};
  t.a.cu_seqlens = cu.data();
  t.expect_error({"cu_seqlens", "T = 30"});
}
TEST(BadInput, CuSeqlensFirstNotZero_3_20_30) {
  Call t;
  std::vector<std::int32_t> cu = {3, 20, 30};
  t.a.cu_seqlens = cu.data();
  t.expect_error({"cu_seqlens[0]"});
}
TEST(BadInput, NullPointer_q_k_v_g_beta_o) {
  for (const char* name : {"q", "k", "v", "g", "beta", "o"}) {
    SCOPED_TRACE(name);
    Call t;
    TensorView* v = std::string(name) == "q"   ? &t.a.q
                    : std::string(name) == "k" ? &t.a.k
                    : std::string(name) == "v" ? &t.a.v
                    : std::string(name) == "g" ? &t.a.g
                    : std::string(name) == "o" ? &t.a.o
                                               : &t.a.beta;
    v->data = nullptr;
    t.expect_error({name, "null"});
  }
}
TEST(BadInput, DtypeMismatch_k_f16_with_q_bf16) {
  Call t;
  t.a.k.dtype = DType::f16;
  t.expect_error({"k", "dtype f16"});
}
TEST(BadInput, DtypeMismatch_o_f16_with_q_bf16) {
  Call t;
  t.a.o.dtype = DType::f16;
  t.expect_error({"o", "dtype"});
}
TEST(BadInput, ScaleNaN) {
  Call t;
  t.c.prob.scale = std::numeric_limits<float>::quiet_NaN();
  t.expect_error({"scale"});
}
TEST(BadInput, ScaleZero) {
  Call t;
  t.c.prob.scale = 0.f;
  t.expect_error({"scale", "> 0"});
}
TEST(BadInput, ScaleNegative) {
  Call t;
  t.c.prob.scale = -0.125f;
  t.expect_error({"scale", "> 0"});
}
TEST(BadInput, H0WrongShape_N1_for_2_seqs) {
  Call t;
  t.a.h0.shape[0] = 1;
  t.expect_error({"h0", "shape"});
}
TEST(BadInput, H0WrongLayout_VK_shape_for_KV_state_K64V128) {
  CaseSpec s;
  s.seq_lens = {10};
  s.HK = 1;
  s.HV = 1;
  s.K = 64;
  s.V = 128;
  Case c = make_case(s, 3);
  std::vector<float> o(10 * 128, 5.f), hT(c.h0.size(), 6.f);
  s.out_dtype = DType::f32;
  PrefillArgs a = c.host_args(nullptr, hT.data());
  a.o = TensorView::contiguous(o.data(), DType::f32, {10, 1, 128});
  a.h0 = TensorView::contiguous(c.h0.data(), DType::f32, {1, 1, 128, 64});  // [V, K]
  const Status st = prefill(c.prob, a, Arm::cpu);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("h0"), std::string::npos) << st.message();
  for (float x : o) ASSERT_EQ(x, 5.f);
  for (float x : hT) ASSERT_EQ(x, 6.f);
}
TEST(BadInput, NaNInV_check_values) {
  Call t;
  std::vector<std::uint16_t> v(t.c.v16);
  v[100] = 0x7fc0;  // bf16 NaN
  t.a.v.data = v.data();
  t.expect_error({"v", "NaN"});
}
TEST(BadInput, NaNInH0_check_values) {
  Call t;
  std::vector<float> h0(t.c.h0);
  h0[5] = NAN;
  t.a.h0.data = h0.data();
  t.expect_error({"h0", "NaN"});
}
TEST(BadInput, GPositive_check_values) {
  Call t;
  std::vector<float> g(t.c.g);
  g[3] = 0.5f;
  t.a.g.data = g.data();
  t.expect_error({"g", "<= 0"});
}
TEST(BadInput, BetaAboveOne_check_values) {
  Call t;
  std::vector<float> b(t.c.beta32);
  b[7] = 1.5f;
  t.a.beta.data = b.data();
  t.expect_error({"beta", "[0, 1]"});
}
TEST(BadInput, InnermostNotContiguous_q_stride2) {
  Call t;
  std::vector<std::uint16_t> q2(t.c.q16.size() * 2);
  t.a.q = TensorView::strided(q2.data(), DType::bf16, {t.c.T, 2, 64}, {256, 128, 2});
  t.expect_error({"q", "innermost", "stride"});
}

// Strided (non-contiguous outer dims) inputs are legal: same result as contiguous.
TEST(BadInput, StridedOuterDimsAccepted_q_padded_rows) {
  Call t;
  std::vector<std::uint16_t> o_ref(t.o.size());
  std::vector<float> h_ref(t.hT.size());
  ASSERT_TRUE(prefill(t.c.prob, t.c.host_args(o_ref.data(), h_ref.data()), Arm::cpu).ok());
  std::vector<std::uint16_t> q2(t.c.T * 2 * 80, 0);  // rows padded 64 -> 80 elements
  for (std::int64_t r = 0; r < t.c.T * 2; ++r)
    std::memcpy(&q2[r * 80], &t.c.q16[r * 64], 128);
  t.a.q = TensorView::strided(q2.data(), DType::bf16, {t.c.T, 2, 64}, {160, 80, 1});
  const Status st = prefill(t.c.prob, t.a, Arm::cpu);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(0, std::memcmp(o_ref.data(), t.o.data(), t.o.size() * 2));
  EXPECT_EQ(0, std::memcmp(h_ref.data(), t.hT.data(), t.hT.size() * 4));
}

// T = 0: a legal no-op that still writes hT = h0 (or zeros without h0).
TEST(BadInput, EmptyT0_IsNoop_hT_equals_h0) {
  Call t({0});
  ASSERT_EQ(t.c.T, 0);
  const Status st = prefill(t.c.prob, t.a, Arm::cpu);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(0, std::memcmp(t.hT.data(), t.c.h0.data(), t.hT.size() * 4));
  t.a.h0 = TensorView{};
  std::fill(t.hT.begin(), t.hT.end(), 7.f);
  ASSERT_TRUE(prefill(t.c.prob, t.a, Arm::cpu).ok());
  for (float x : t.hT) ASSERT_EQ(x, 0.f);
}
TEST(BadInput, AllZeroLengthSeqs_L0x0_hT_equals_h0) {
  Call t({0, 0});
  const Status st = prefill(t.c.prob, t.a, Arm::cpu);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(0, std::memcmp(t.hT.data(), t.c.h0.data(), t.hT.size() * 4));
}

}  // namespace
}  // namespace gdn::check
