// Caller-provided workspace (PrefillArgs::workspace), the checks that need no GPU: the size
// queries return 0 for host calls (the cpu arm takes no device workspace); a workspace with
// on_device = false, a misaligned one, one overlapping a tensor, and workspace_bytes without a
// pointer are rejected by validation before anything runs, the caller's outputs untouched; the C
// API's field, query and errors. The GPU side (exact size, bitwise equal to the pool path, the
// pool left unused, one byte short) is tests/gpu/test_workspace.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "gdn/cp.hpp"
#include "gdn/gdn.h"
#include "gdn/gdn.hpp"

namespace gdn {
namespace {

// A small valid host call (two sequences) with sentinel-filled outputs, and a 256-byte aligned
// host buffer to stand in for a workspace where only its address matters.
struct Call {
  check::Case c;
  std::vector<std::uint16_t> o;
  std::vector<float> hT;
  std::vector<unsigned char> buf = std::vector<unsigned char>(4096);
  PrefillArgs a;
  Call() {
    check::CaseSpec s;
    s.seq_lens = {20, 10};
    s.HK = 2;
    s.HV = 4;
    s.K = s.V = 64;
    c = check::make_case(s, 7);
    o.assign(c.T * s.HV * s.V, 0xABCD);
    hT.assign(c.h0.size(), 1234.5f);
    a = c.host_args(o.data(), hT.data());
  }
  void* aligned(std::size_t off = 0) {
    const auto p = reinterpret_cast<std::uintptr_t>(buf.data());
    return reinterpret_cast<void*>((p + 255) / 256 * 256 + off);
  }
  // prefill (and validate) reject the call with a message naming every word; outputs untouched.
  void expect_error(Arm arm, std::initializer_list<const char*> words) {
    const auto o_before = o;
    const auto h_before = hT;
    for (const Status& st : {validate(c.prob, a), prefill(c.prob, a, arm)}) {
      ASSERT_EQ(st.code(), Code::invalid_argument) << st.message();
      for (const char* w : words)
        EXPECT_NE(st.message().find(w), std::string::npos)
            << "message '" << st.message() << "' does not mention '" << w << "'";
    }
    EXPECT_EQ(0, std::memcmp(o.data(), o_before.data(), o.size() * 2)) << "o was written";
    EXPECT_EQ(0, std::memcmp(hT.data(), h_before.data(), hT.size() * 4)) << "hT was written";
  }
};

TEST(Workspace, HostCallNeedsNone_AllArms) {
  Call t;
  for (Arm arm : {Arm::automatic, Arm::cpu, Arm::serial, Arm::wy_fp32, Arm::wy_tc}) {
    std::uint64_t b = 12345;
    const Status st = prefill_workspace_bytes(t.c.prob, t.a, arm, &b);
    ASSERT_TRUE(st.ok()) << to_string(arm) << ": " << st.message();
    EXPECT_EQ(b, 0u) << to_string(arm) << " resolves to the cpu arm on host tensors";
  }
  std::uint64_t b = 12345;
  ASSERT_TRUE(prefill_cp_workspace_bytes(t.c.prob, t.a, 3, Arm::cpu, &b).ok());
  EXPECT_EQ(b, 0u);
  b = 12345;
  ASSERT_TRUE(prefill_cp_workspace_bytes(t.c.prob, t.a, 1, Arm::cpu, &b).ok());
  EXPECT_EQ(b, 0u);
  t.a.cu_seqlens = nullptr;  // the rank steps take one sequence per rank here
  t.a.num_seqs = 0;
  t.a.h0 = t.a.hT = TensorView{};
  for (int r = 0; r < 3; ++r) {
    b = 12345;
    const Status st = cp_rank_workspace_bytes(t.c.prob, t.a, r, 3, Arm::cpu, &b);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(b, 0u) << "rank " << r;
  }
}

TEST(Workspace, QueryErrors) {
  Call t;
  EXPECT_EQ(prefill_workspace_bytes(t.c.prob, t.a, Arm::cpu, nullptr).code(),
            Code::invalid_argument);
  std::uint64_t b = 12345;
  Problem bad = t.c.prob;
  bad.HV = 5;  // validated as prefill validates: same message
  const Status st = prefill_workspace_bytes(bad, t.a, Arm::cpu, &b);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("not a multiple"), std::string::npos) << st.message();
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(prefill_cp_workspace_bytes(t.c.prob, t.a, 0, Arm::cpu, &b).code(),
            Code::invalid_argument);
  EXPECT_EQ(prefill_cp_workspace_bytes(t.c.prob, t.a, 3, Arm::cpu, nullptr).code(),
            Code::invalid_argument);
  EXPECT_EQ(cp_rank_workspace_bytes(t.c.prob, t.a, 3, 3, Arm::cpu, &b).code(),
            Code::invalid_argument);
}

// The workspace is device memory for the GPU arms: a host call that brings one is an error (not
// silently ignored), for every arm it asks for.
TEST(Workspace, OnDeviceFalseRejected) {
  Call t;
  t.a.workspace = t.aligned();
  t.a.workspace_bytes = 1024;
  for (Arm arm : {Arm::cpu, Arm::automatic, Arm::wy_tc})
    t.expect_error(arm, {"workspace", "on_device=false"});
  EXPECT_EQ(prefill_cp(t.c.prob, t.a, 3, Arm::cpu).code(), Code::invalid_argument);
}

TEST(Workspace, BytesWithoutPointerRejected) {
  Call t;
  t.a.workspace_bytes = 1024;
  t.expect_error(Arm::cpu, {"workspace_bytes = 1024", "without a workspace pointer"});
}

// Alignment and overlap are validation (before the arm is chosen), so they are checked here with
// on_device = true on host buffers: the call is rejected before any pointer is dereferenced.
TEST(Workspace, MisalignedRejected) {
  Call t;
  t.a.on_device = true;
  for (std::size_t off : {1, 4, 16, 128}) {
    t.a.workspace = t.aligned(off);
    t.a.workspace_bytes = 1024;
    t.expect_error(Arm::automatic, {"workspace", "256-byte aligned", std::to_string(off).c_str()});
  }
}

TEST(Workspace, OverlapWithTensorRejected) {
  Call t;
  t.a.on_device = true;
  // A 256-byte aligned address inside o, then inside q's storage.
  auto inside = [](const TensorView& v) {
    const auto p = reinterpret_cast<std::uintptr_t>(v.data);
    return reinterpret_cast<void*>((p + 255) / 256 * 256);
  };
  t.a.workspace = inside(t.a.o);
  t.a.workspace_bytes = 256;
  t.expect_error(Arm::automatic, {"workspace overlaps o"});
  t.a.workspace = inside(t.a.q);
  t.a.workspace_bytes = 256;
  t.expect_error(Arm::automatic, {"workspace overlaps q"});
}

// ---- C API ----

TEST(WorkspaceCapi, InitZeroesFieldsAndHostQueryIsZero) {
  Call t;
  gdn_prefill_args a;
  std::memset(&a, 0x7f, sizeof a);
  gdn_prefill_args_init(&a);
  EXPECT_EQ(a.workspace, nullptr);
  EXPECT_EQ(a.workspace_bytes, 0u);
  EXPECT_EQ(GDN_WORKSPACE_ALIGNMENT, 256);
  EXPECT_GE(GDN_ABI_VERSION, 2);

  gdn_problem p;
  gdn_problem_init(&p, 2, 4, 64, 64);
  const int64_t T = t.c.T, qs[3] = {T, 2, 64}, vs[3] = {T, 4, 64}, gs[2] = {T, 4};
  a.q = gdn_tensor_contiguous(t.c.q16.data(), GDN_BF16, 3, qs);
  a.k = gdn_tensor_contiguous(t.c.k16.data(), GDN_BF16, 3, qs);
  a.v = gdn_tensor_contiguous(t.c.v16.data(), GDN_BF16, 3, vs);
  a.g = gdn_tensor_contiguous(t.c.g.data(), GDN_F32, 2, gs);
  a.beta = gdn_tensor_contiguous(t.c.beta32.data(), GDN_F32, 2, gs);
  a.o = gdn_tensor_contiguous(t.o.data(), GDN_BF16, 3, vs);
  char msg[256];
  uint64_t bytes = 777;
  ASSERT_EQ(gdn_prefill_workspace_bytes(&p, &a, GDN_ARM_AUTO, &bytes, msg, sizeof msg), GDN_OK)
      << msg;
  EXPECT_EQ(bytes, 0u);
  EXPECT_STREQ(msg, "");

  // Errors: NULL out-pointer, unknown arm, bad problem; bytes is 0 after an error.
  EXPECT_EQ(gdn_prefill_workspace_bytes(&p, &a, GDN_ARM_CPU, nullptr, msg, sizeof msg),
            GDN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(msg).find("bytes is NULL"), std::string::npos) << msg;
  bytes = 777;
  EXPECT_EQ(gdn_prefill_workspace_bytes(&p, &a, 9, &bytes, msg, sizeof msg),
            GDN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(msg).find("unknown arm value 9"), std::string::npos) << msg;
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(gdn_prefill_workspace_bytes(nullptr, &a, GDN_ARM_CPU, &bytes, msg, sizeof msg),
            GDN_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(gdn_last_error(), msg);

  // A workspace on a host call: rejected by gdn_validate and gdn_prefill, o untouched.
  const auto o_before = t.o;
  a.workspace = t.aligned();
  a.workspace_bytes = 512;
  EXPECT_EQ(gdn_validate(&p, &a, msg, sizeof msg), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(msg).find("on_device=false"), std::string::npos) << msg;
  int32_t ran = -7;
  EXPECT_EQ(gdn_prefill(&p, &a, GDN_ARM_CPU, &ran, msg, sizeof msg), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(msg).find("on_device=false"), std::string::npos) << msg;
  EXPECT_EQ(ran, -7);
  EXPECT_EQ(t.o, o_before) << "o written on error";
  // Misaligned (on_device set: validation rejects it before any device call).
  a.on_device = 1;
  a.workspace = t.aligned(64);
  EXPECT_EQ(gdn_validate(&p, &a, msg, sizeof msg), GDN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(msg).find("256-byte aligned"), std::string::npos) << msg;
  // The valid call without a workspace still runs (control).
  a.on_device = 0;
  a.workspace = nullptr;
  a.workspace_bytes = 0;
  ASSERT_EQ(gdn_prefill(&p, &a, GDN_ARM_CPU, &ran, msg, sizeof msg), GDN_OK) << msg;
  EXPECT_EQ(ran, GDN_ARM_CPU);
}

}  // namespace
}  // namespace gdn
