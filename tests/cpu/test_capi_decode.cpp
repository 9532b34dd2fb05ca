// The decode / verify C ABI (include/gdn/gdn_decode.h) on host tensors: bitwise equal to the C++
// API on the same inputs (with a negative control that a changed option is seen), bad inputs give
// the documented code and message (also via gdn_last_error()) and leave every buffer untouched.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/decode/decode_ref.hpp"
#include "gdn/decode.hpp"
#include "gdn/gdn_decode.h"

namespace {

using gdn::decode_ref::Fixture;
using gdn::decode_ref::FixtureSpec;

gdn_tensor to_c(const gdn::TensorView& t) {
  gdn_tensor c{};
  if (!t.defined()) return c;  // absent: data = NULL
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.rank = t.rank;
  for (int d = 0; d < t.rank; ++d) c.shape[d] = t.shape[d], c.stride[d] = t.stride[d];
  return c;
}

gdn_problem to_c(const gdn::Problem& p) {
  gdn_problem c;
  gdn_problem_init(&c, p.HK, p.HV, p.K, p.V);
  c.head_map = static_cast<int32_t>(p.head_map);
  c.scale = p.scale;
  c.qk_l2norm = p.qk_l2norm ? 1 : 0;
  c.state_layout = static_cast<int32_t>(p.state_layout);
  return c;
}

// The C struct for the fixture's host buffers, built field by field from the C++ arguments.
gdn_decode_args to_c(const gdn::DecodeArgs& a) {
  gdn_decode_args c;
  gdn_decode_args_init(&c);
  c.q = to_c(a.q), c.k = to_c(a.k), c.v = to_c(a.v), c.g = to_c(a.g);
  c.A_log = to_c(a.A_log), c.a = to_c(a.a), c.dt_bias = to_c(a.dt_bias);
  c.beta = to_c(a.beta), c.beta_sigmoid = a.beta_sigmoid ? 1 : 0;
  c.o = to_c(a.o), c.state = to_c(a.state);
  c.state_indices = a.state_indices, c.num_accepted = a.num_accepted;
  c.state_cache = a.state_cache;
  return c;
}

// Runs the C++ API on one fixture and the C API on an identical one; results must be bitwise
// equal. Returns the C fixture for further checks.
void expect_c_equals_cpp(const FixtureSpec& s, const char* what) {
  Fixture fc(s), fcpp(s);
  const gdn::DecodeArgs acpp = fcpp.args(fcpp.host_ptrs());
  const gdn::Status st = s.verify ? gdn::verify(fcpp.prob, acpp) : gdn::decode(fcpp.prob, acpp);
  ASSERT_TRUE(st.ok()) << what << ": C++ call failed: " << st.message();

  const gdn_problem p = to_c(fc.prob);
  const gdn_decode_args a = to_c(fc.args(fc.host_ptrs()));
  char msg[256] = "sentinel";
  const int rc = s.verify ? gdn_verify(&p, &a, msg, sizeof msg) : gdn_decode(&p, &a, msg, sizeof msg);
  ASSERT_EQ(rc, GDN_OK) << what << ": " << msg;
  EXPECT_STREQ(msg, "") << what << ": success must clear the message";
  EXPECT_STREQ(gdn_last_error(), "") << what;
  EXPECT_TRUE(fc.o.raw == fcpp.o.raw) << what << ": o differs between the C and C++ API";
  EXPECT_TRUE(fc.state.raw == fcpp.state.raw) << what << ": state differs between C and C++";
  EXPECT_TRUE(fc.cache.raw == fcpp.cache.raw) << what << ": state_cache differs";
  // The outputs were written at all (the comparison is not between two untouched buffers).
  EXPECT_FALSE(fc.state.raw == Fixture(s).state.raw) << what << ": state unchanged";

  // Negative control: the same C call with a different scale must give different o.
  Fixture fneg(s);
  gdn_problem pn = to_c(fneg.prob);
  pn.scale *= 2.f;
  const gdn_decode_args an = to_c(fneg.args(fneg.host_ptrs()));
  ASSERT_EQ(s.verify ? gdn_verify(&pn, &an, nullptr, 0) : gdn_decode(&pn, &an, nullptr, 0), GDN_OK);
  EXPECT_FALSE(fneg.o.raw == fcpp.o.raw) << what << ": negative control (scale x2) matched";
}

TEST(CapiDecode, DecodeEqualsCpp_bf16_grouped_l2norm_pad) {
  FixtureSpec s;
  s.idx = {3, -1, 0, 7, -1};
  expect_c_equals_cpp(s, "decode");
}

TEST(CapiDecode, VerifyEqualsCpp_fusedGate_sigmoid_cache_accepted) {
  FixtureSpec s;
  s.verify = true, s.T = 3, s.N = 4, s.S = 6, s.cache = true, s.fused_gate = true;
  s.beta_sigmoid = true, s.a = gdn::DType::bf16, s.head_map = gdn::HeadMap::tiled;
  s.state = gdn::DType::bf16, s.io = gdn::DType::f16, s.o = gdn::DType::f16;
  s.idx = {5, -1, 0, 2}, s.acc = {3, 0, 1, 2};
  expect_c_equals_cpp(s, "verify");
}

TEST(CapiDecode, ValidateAndStateBytes) {
  FixtureSpec s;
  Fixture f(s);
  const auto raw_o = f.o.raw, raw_state = f.state.raw;
  const gdn_problem p = to_c(f.prob);
  const gdn_decode_args a = to_c(f.args(f.host_ptrs()));
  char msg[128];
  EXPECT_EQ(gdn_validate_decode(&p, &a, 0, msg, sizeof msg), GDN_OK) << msg;
  EXPECT_EQ(gdn_validate_decode(&p, &a, 1, msg, sizeof msg), GDN_ERR_INVALID_ARGUMENT)
      << "rank-3 tensors validated as verify";
  EXPECT_NE(std::string(msg).find("q: expected rank 4"), std::string::npos) << msg;
  EXPECT_TRUE(f.o.raw == raw_o && f.state.raw == raw_state) << "validate touched data";
  EXPECT_EQ(gdn_decode_state_bytes(&p, GDN_F32, 3, 1, 0),
            gdn::decode_state_bytes(f.prob, gdn::DType::f32, 3, 1, false));
  EXPECT_EQ(gdn_decode_state_bytes(&p, GDN_BF16, 3, 4, 1),
            gdn::decode_state_bytes(f.prob, gdn::DType::bf16, 3, 4, true));
  EXPECT_EQ(gdn_decode_state_bytes(&p, 7, 3, 1, 0), -1.0);
  EXPECT_EQ(gdn_decode_state_bytes(nullptr, GDN_F32, 3, 1, 0), -1.0);
}

// Each bad input: code, message fragment, msg == gdn_last_error(), o and state untouched.
TEST(CapiDecode, BadInputsRejectedBuffersUntouched) {
  struct Case {
    const char* name;
    int code;
    const char* fragment;
    void (*mutate)(gdn_problem*, gdn_decode_args*, FixtureSpec*);
  };
  const Case cases[] = {
      {"duplicate live index", GDN_ERR_INVALID_ARGUMENT, "both name live slot",
       [](gdn_problem*, gdn_decode_args*, FixtureSpec* s) { s->idx = {3, -1, 0, 3, 2}; }},
      {"index out of range", GDN_ERR_INVALID_ARGUMENT, "state_indices[1] = 9",
       [](gdn_problem*, gdn_decode_args*, FixtureSpec* s) { s->idx = {3, 9, 0, 1, 2}; }},
      {"unknown dtype value", GDN_ERR_INVALID_ARGUMENT, "v: unknown dtype value 9",
       [](gdn_problem*, gdn_decode_args* a, FixtureSpec*) { a->v.dtype = 9; }},
      {"unknown head_map", GDN_ERR_INVALID_ARGUMENT, "unknown head_map value 5",
       [](gdn_problem* p, gdn_decode_args*, FixtureSpec*) { p->head_map = 5; }},
      {"HV not a multiple of HK", GDN_ERR_INVALID_ARGUMENT, "not a multiple of HK",
       [](gdn_problem* p, gdn_decode_args*, FixtureSpec*) { p->HV = 5; }},
      {"g and fused gate", GDN_ERR_INVALID_ARGUMENT, "not both",
       [](gdn_problem*, gdn_decode_args* a, FixtureSpec*) { a->A_log = a->g; }},
      {"missing state", GDN_ERR_INVALID_ARGUMENT, "state: expected rank 4",
       [](gdn_problem*, gdn_decode_args* a, FixtureSpec*) { a->state = gdn_tensor{}; }},
      {"error_flag on a host call", GDN_ERR_INVALID_ARGUMENT, "device calls only",
       [](gdn_problem*, gdn_decode_args* a, FixtureSpec*) {
         static int32_t flag;
         a->error_flag = &flag;
       }},
      {"rank out of range", GDN_ERR_INVALID_ARGUMENT, "o: rank 7 outside 0..4",
       [](gdn_problem*, gdn_decode_args* a, FixtureSpec*) { a->o.rank = 7; }},
  };
  for (const Case& c : cases) {
    FixtureSpec s;
    gdn_problem p0{};
    gdn_decode_args a0{};
    c.mutate(&p0, &a0, &s);  // spec mutations (indices) must come before the fixture exists
    Fixture f(s);
    const auto raw_o = f.o.raw, raw_state = f.state.raw;
    gdn_problem p = to_c(f.prob);
    gdn_decode_args a = to_c(f.args(f.host_ptrs()));
    FixtureSpec unused;
    c.mutate(&p, &a, &unused);
    char msg[256] = "sentinel";
    const int rc = gdn_decode(&p, &a, msg, sizeof msg);
    EXPECT_EQ(rc, c.code) << c.name << ": " << msg;
    EXPECT_NE(std::string(msg).find(c.fragment), std::string::npos)
        << c.name << ": message '" << msg << "' lacks '" << c.fragment << "'";
    EXPECT_STREQ(msg, gdn_last_error()) << c.name;
    EXPECT_TRUE(f.o.raw == raw_o) << c.name << ": o written on error";
    EXPECT_TRUE(f.state.raw == raw_state) << c.name << ": state written on error";
  }
  // Negative control of the rejection: the unmutated call passes and writes o.
  FixtureSpec s;
  Fixture f(s);
  const auto raw_o = f.o.raw;
  const gdn_problem p = to_c(f.prob);
  const gdn_decode_args a = to_c(f.args(f.host_ptrs()));
  EXPECT_EQ(gdn_decode(&p, &a, nullptr, 0), GDN_OK) << gdn_last_error();
  EXPECT_FALSE(f.o.raw == raw_o);
}

TEST(CapiDecode, NullsAndTruncatedMessage) {
  FixtureSpec s;
  Fixture f(s);
  const gdn_problem p = to_c(f.prob);
  const gdn_decode_args a = to_c(f.args(f.host_ptrs()));
  char msg[8];
  EXPECT_EQ(gdn_decode(nullptr, &a, msg, sizeof msg), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(msg, "problem");  // truncated to 7 characters + NUL
  EXPECT_STREQ(gdn_last_error(), "problem is NULL");
  EXPECT_EQ(gdn_verify(&p, nullptr, nullptr, 0), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(gdn_last_error(), "args is NULL");
  gdn_decode_args_init(nullptr);  // tolerated
  gdn_decode_args z;
  gdn_decode_args_init(&z);
  EXPECT_EQ(gdn_decode(&p, &z, nullptr, 0), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gdn_last_error()).find("q:"), std::string::npos) << gdn_last_error();
}

}  // namespace
