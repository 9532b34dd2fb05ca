// Caller-provided workspace (PrefillArgs::workspace: the engine's allocator instead of the
// library's scratch pool) on every GPU arm. A workspace of exactly prefill_workspace_bytes()
// gives o and hT bit for bit equal to the pool path, and the library's pool reserves nothing
// during such a call (gdn::scratch_cached_bytes() stays 0 after release_scratch(); negative
// control: the same call without the workspace makes it non-zero). One byte too small, a
// misaligned pointer, host memory, a workspace overlapping o: an error naming the problem and
// the outputs untouched (sentinel bytes survive). Also: the wy-tc variants with other workspace
// layouts (v2 chunk kernel, the overlapped single-sequence passes), wy-fp32 v3, prefill_cp,
// the virtual-rank cp path, and a call captured into a CUDA graph.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "gdn/cp.hpp"
#include "gdn/gdn.hpp"
#include "gpu_test_util.hpp"

namespace gdn {
namespace {

constexpr std::uint64_t kSeed = 4242;
constexpr unsigned char kSentinel = 0x5A;

// Any value but "device": the library's pool serves calls without a workspace (the negative
// control needs it, whatever the environment says).
constexpr const char* kPoolEnv = "GDN_SCRATCH_POOL";

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(std::size_t bytes) {
    if (cudaMalloc(&p, std::max<std::size_t>(bytes, 1)) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

struct Result {
  Status status;
  Arm ran = Arm::automatic;
  std::vector<unsigned char> o, hT;  // raw bytes
  std::uint64_t pool_after = 0;      // scratch_cached_bytes() after the call, synchronised
};

bool all_sentinel(const std::vector<unsigned char>& v) {
  return std::all_of(v.begin(), v.end(), [](unsigned char x) { return x == kSentinel; });
}
std::int64_t first_difference(const std::vector<unsigned char>& a,
                              const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<std::int64_t>(i);
  return -1;
}

bool release_pool() {
  return release_scratch().ok() && cudaDeviceSynchronize() == cudaSuccess &&
         scratch_cached_bytes() == 0;
}

// One case's inputs on the device, uploaded once; run() calls on sentinel-filled outputs.
class DeviceCase {
 public:
  DeviceCase(const check::Case& c, bool device_offsets) : c_(c) {
    const Problem& p = c.prob;
    const int N = static_cast<int>(c.cu_seqlens.size()) - 1;
    o_bytes_ = static_cast<std::size_t>(c.T) * p.HV * p.V * dtype_size(c.spec.out_dtype);
    hT_bytes_ = static_cast<std::size_t>(N) * p.HV * p.K * p.V * sizeof(float);
    std::vector<unsigned char> o_host(o_bytes_), hT_host(hT_bytes_);
    args_ = c.host_args(o_host.data(), hT_host.data());
    for (TensorView* t :
         {&args_.q, &args_.k, &args_.v, &args_.g, &args_.beta, &args_.o, &args_.h0, &args_.hT})
      if (t->defined()) t->data = upload(t->data, t->numel() * dtype_size(t->dtype));
    if (device_offsets)
      args_.cu_seqlens_device = static_cast<const std::int32_t*>(
          upload(c.cu_seqlens.data(), c.cu_seqlens.size() * sizeof(std::int32_t)));
    args_.on_device = true;
  }
  ~DeviceCase() {
    for (void* p : bufs_) cudaFree(p);
  }
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;

  bool ok() const { return ok_; }
  const Problem& prob() const { return c_.prob; }
  const check::Case& host_case() const { return c_; }
  const PrefillArgs& args() const { return args_; }

  // Fills o and hT with the sentinel, runs call(&info), synchronises, reads them back.
  template <typename F>
  Result run(F&& call) {
    Result r;
    if (cudaMemset(args_.o.data, kSentinel, o_bytes_) != cudaSuccess ||
        cudaMemset(args_.hT.data, kSentinel, hT_bytes_) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      r.status = Status::Internal("test: sentinel fill failed");
      return r;
    }
    RunInfo info;
    r.status = call(&info);
    r.ran = info.ran;
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
      r.status = Status::Cuda(std::string("test: after the call: ") + cudaGetErrorString(e));
      return r;
    }
    r.o.resize(o_bytes_);
    r.hT.resize(hT_bytes_);
    if (cudaMemcpy(r.o.data(), args_.o.data, o_bytes_, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(r.hT.data(), args_.hT.data, hT_bytes_, cudaMemcpyDeviceToHost) != cudaSuccess)
      r.status = Status::Internal("test: download failed");
    r.pool_after = scratch_cached_bytes();
    return r;
  }
  Result prefill_with(const PrefillArgs& a, Arm arm) {
    return run([&](RunInfo* info) { return prefill(c_.prob, a, arm, info); });
  }

 private:
  void* upload(const void* host, std::size_t bytes) {
    void* d = nullptr;
    if (cudaMalloc(&d, std::max<std::size_t>(bytes, 4)) != cudaSuccess) {
      ok_ = false;
      return nullptr;
    }
    bufs_.push_back(d);
    if (bytes && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) ok_ = false;
    return d;
  }

  const check::Case& c_;
  PrefillArgs args_;
  std::vector<void*> bufs_;
  std::size_t o_bytes_ = 0, hT_bytes_ = 0;
  bool ok_ = true;
};

// Rejected: the call's status names `words`, the outputs keep the sentinel, the pool stays empty.
void expect_rejected(const Result& r, std::initializer_list<std::string> words) {
  EXPECT_EQ(r.status.code(), Code::invalid_argument) << r.status.message();
  for (const std::string& w : words)
    EXPECT_NE(r.status.message().find(w), std::string::npos)
        << "message '" << r.status.message() << "' does not mention '" << w << "'";
  EXPECT_TRUE(all_sentinel(r.o)) << "o was written by a rejected call";
  EXPECT_TRUE(all_sentinel(r.hT)) << "hT was written by a rejected call";
  EXPECT_EQ(r.pool_after, 0u) << "a rejected call allocated from the pool";
}

// The whole contract for one (arm, case): pool path (negative control), exact workspace (bitwise
// equal, pool untouched), one byte short, misaligned.
void expect_workspace_contract(DeviceCase& dc, Arm arm, bool check_values) {
  testutil::ScopedEnv pool(kPoolEnv, "library");
  PrefillArgs a = dc.args();
  a.check_values = check_values;
  std::uint64_t need = 0;
  const Status q = prefill_workspace_bytes(dc.prob(), a, arm, &need);
  ASSERT_TRUE(q.ok()) << q.message();
  std::printf("%s %s check_values=%d: workspace %llu bytes\n", to_string(arm),
              dc.host_case().spec.name().c_str(), int(check_values),
              static_cast<unsigned long long>(need));
  if (check_values) EXPECT_GE(need, 4u) << "the value scan's flag is part of the workspace";

  // Pool path (negative control: with anything to allocate, the pool holds it afterwards).
  ASSERT_TRUE(release_pool());
  const Result ref = dc.prefill_with(a, arm);
  ASSERT_TRUE(ref.status.ok()) << ref.status.message();
  ASSERT_EQ(ref.ran, arm);
  if (need > 0) EXPECT_GT(ref.pool_after, 0u) << "negative control: the pool path used no pool";
  ASSERT_TRUE(release_pool());

  // Exact workspace: same bits, no pool.
  DevBuf ws(need + 256);
  ASSERT_NE(ws.p, nullptr);
  PrefillArgs w = a;
  w.workspace = ws.p;
  w.workspace_bytes = need;
  const Result got = dc.prefill_with(w, arm);
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_EQ(got.ran, arm);
  EXPECT_EQ(got.pool_after, 0u) << "the call with a workspace allocated from the library pool";
  EXPECT_EQ(first_difference(got.o, ref.o), -1) << "o differs from the pool path";
  EXPECT_EQ(first_difference(got.hT, ref.hT), -1) << "hT differs from the pool path";

  // The query does not depend on the workspace fields.
  std::uint64_t again = 0;
  ASSERT_TRUE(prefill_workspace_bytes(dc.prob(), w, arm, &again).ok());
  EXPECT_EQ(again, need);

  if (need > 0) {  // one byte short
    PrefillArgs s = w;
    s.workspace_bytes = need - 1;
    expect_rejected(dc.prefill_with(s, arm),
                    {"workspace too small", std::to_string(need), std::to_string(need - 1)});
  }
  PrefillArgs m = w;  // misaligned (still inside the allocation)
  m.workspace = static_cast<char*>(ws.p) + 128;
  expect_rejected(dc.prefill_with(m, arm), {"workspace", "aligned"});
}

struct ArmCase {
  Arm arm;
  std::vector<int> lens;
  bool device_offsets;
  const char* env_name;  // a kernel variant with another workspace layout, or null
  const char* env_value;
  std::string name() const {
    std::string n = std::string(to_string(arm)) + "_L";
    for (std::size_t i = 0; i < lens.size(); ++i) n += (i ? "x" : "") + std::to_string(lens[i]);
    n += device_offsets ? "_dev_offsets" : "_host_offsets";
    if (env_name) n += std::string("_") + env_name + "_" + env_value;
    for (char& ch : n)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
  }
};
void PrintTo(const ArmCase& c, std::ostream* os) { *os << c.name(); }

std::vector<ArmCase> arm_cases() {
  std::vector<ArmCase> v;
  for (Arm arm : {Arm::serial, Arm::wy_fp32, Arm::wy_tc})
    for (const std::vector<int>& lens : {std::vector<int>{300}, std::vector<int>{100, 0, 200, 37}})
      for (bool dev : {false, true}) v.push_back({arm, lens, dev, nullptr, nullptr});
  // Other workspace layouts: wy-tc's generic chunk kernel (Q/K planes hi and lo), wy-fp32 v3.
  v.push_back({Arm::wy_tc, {100, 0, 200, 37}, false, "GDN_WYTC_CHUNK", "v2"});
  v.push_back({Arm::wy_tc, {300}, true, "GDN_WYTC_CHUNK", "v2"});
  v.push_back({Arm::wy_fp32, {100, 0, 200, 37}, false, "GDN_WYFP32_VARIANT", "v3"});
  return v;
}

class WorkspaceArm : public ::testing::TestWithParam<ArmCase> {};

TEST_P(WorkspaceArm, ExactSizeBitwiseEqualsPoolAndPoolUnused) {
  const ArmCase& ac = GetParam();
  std::unique_ptr<testutil::ScopedEnv> env;
  if (ac.env_name) env = std::make_unique<testutil::ScopedEnv>(ac.env_name, ac.env_value);
  const check::Case c = check::make_case(testutil::spec_of(ac.lens, 2, 4, 128, 128), kSeed);
  DeviceCase dc(c, ac.device_offsets);
  ASSERT_TRUE(dc.ok());
  for (bool cv : {true, false}) {
    SCOPED_TRACE(cv ? "check_values on" : "check_values off");
    expect_workspace_contract(dc, ac.arm, cv);
  }
}

INSTANTIATE_TEST_SUITE_P(Arms, WorkspaceArm, ::testing::ValuesIn(arm_cases()),
                         [](const ::testing::TestParamInfo<ArmCase>& i) { return i.param.name(); });

// wy-tc's overlapped passes (one long sequence, segments on a side stream, the state carried
// through a buffer in the workspace), forced on; K = V = 64 for a second head size.
TEST(WorkspaceWyTc, OverlappedSingleSequence_T2560_forced) {
  const check::Case c = check::make_case(testutil::spec_of({2560}, 2, 4, 64, 64), kSeed);
  DeviceCase dc(c, false);
  ASSERT_TRUE(dc.ok());
  std::uint64_t plain = 0, overlap = 0;
  {
    testutil::ScopedEnv off("GDN_WYTC_OVERLAP", "0");
    ASSERT_TRUE(prefill_workspace_bytes(dc.prob(), dc.args(), Arm::wy_tc, &plain).ok());
  }
  testutil::ScopedEnv on("GDN_WYTC_OVERLAP", "1");
  ASSERT_TRUE(prefill_workspace_bytes(dc.prob(), dc.args(), Arm::wy_tc, &overlap).ok());
  const DeviceInfo d = device_info();
  std::printf("wy-tc T=2560: workspace %llu bytes, %llu with the overlapped passes (sm_%d)\n",
              static_cast<unsigned long long>(plain), static_cast<unsigned long long>(overlap),
              d.sm);
  // The overlap runs with the wgmma state pass (sm_90a image, an sm_90 device): then the query
  // counts the carried state, 4 HV K V bytes rounded to 256.
  if (d.sm == 90) EXPECT_EQ(overlap, plain + (4ull * 4 * 64 * 64 + 255) / 256 * 256);
  expect_workspace_contract(dc, Arm::wy_tc, false);
}

// Host memory and a workspace overlapping an output are refused before anything runs.
TEST(WorkspaceErrors, HostMemoryAndOverlapWithOutputRejected) {
  testutil::ScopedEnv pool(kPoolEnv, "library");
  const check::Case c = check::make_case(testutil::spec_of({100, 37}, 2, 4, 128, 128), kSeed);
  DeviceCase dc(c, false);
  ASSERT_TRUE(dc.ok());
  std::uint64_t need = 0;
  ASSERT_TRUE(prefill_workspace_bytes(dc.prob(), dc.args(), Arm::wy_tc, &need).ok());
  ASSERT_TRUE(release_pool());
  void* host = std::aligned_alloc(256, (need + 255) / 256 * 256);
  ASSERT_NE(host, nullptr);
  PrefillArgs h = dc.args();
  h.workspace = host;
  h.workspace_bytes = need;
  expect_rejected(dc.prefill_with(h, Arm::wy_tc), {"workspace", "host memory"});
  std::free(host);
  PrefillArgs o = dc.args();  // o is a cudaMalloc block: 256-byte aligned
  o.workspace = o.o.data;
  o.workspace_bytes = need;
  expect_rejected(dc.prefill_with(o, Arm::wy_tc), {"workspace overlaps o"});
  PrefillArgs z = dc.args();  // bytes without a pointer
  z.workspace_bytes = need;
  expect_rejected(dc.prefill_with(z, Arm::wy_tc), {"without a workspace pointer"});
}

// prefill_cp (3 segments: B pass, M pass, combine, final pass) with its own buffers and its arm
// calls all in one caller workspace.
TEST(WorkspaceCp, PrefillCpP3_L300x70_wy_fp32_wy_tc) {
  testutil::ScopedEnv pool(kPoolEnv, "library");
  check::CaseSpec s = testutil::spec_of({300, 70}, 2, 4, 128, 128);
  const check::Case c = check::make_case(s, kSeed);
  DeviceCase dc(c, false);
  ASSERT_TRUE(dc.ok());
  for (Arm arm : {Arm::wy_fp32, Arm::wy_tc}) {
    SCOPED_TRACE(to_string(arm));
    const PrefillArgs a = dc.args();
    std::uint64_t need = 0;
    const Status q = prefill_cp_workspace_bytes(dc.prob(), a, 3, arm, &need);
    ASSERT_TRUE(q.ok()) << q.message();
    std::printf("prefill_cp P=3 %s: workspace %llu bytes\n", to_string(arm),
                static_cast<unsigned long long>(need));
    ASSERT_TRUE(release_pool());
    const Result ref = dc.run([&](RunInfo* i) { return prefill_cp(dc.prob(), a, 3, arm, i); });
    ASSERT_TRUE(ref.status.ok()) << ref.status.message();
    EXPECT_GT(ref.pool_after, 0u) << "negative control: the pool path used no pool";
    ASSERT_TRUE(release_pool());
    DevBuf ws(need);
    ASSERT_NE(ws.p, nullptr);
    PrefillArgs w = a;
    w.workspace = ws.p;
    w.workspace_bytes = need;
    const Result got = dc.run([&](RunInfo* i) { return prefill_cp(dc.prob(), w, 3, arm, i); });
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_EQ(got.pool_after, 0u) << "prefill_cp with a workspace allocated from the pool";
    EXPECT_EQ(first_difference(got.o, ref.o), -1) << "o differs from the pool path";
    EXPECT_EQ(first_difference(got.hT, ref.hT), -1) << "hT differs from the pool path";
    w.workspace_bytes = need - 1;
    expect_rejected(dc.run([&](RunInfo* i) { return prefill_cp(dc.prob(), w, 3, arm, i); }),
                    {"workspace too small", std::to_string(need)});
  }
}

// Three virtual ranks (cp_rank_maps, then cp_rank_finish, on slices of one sequence) sharing one
// workspace sized by the largest cp_rank_workspace_bytes.
TEST(WorkspaceCp, VirtualRanksP3_T700_wy_fp32) {
  testutil::ScopedEnv pool(kPoolEnv, "library");
  const check::Case c = check::make_case(testutil::spec_of({700}, 2, 4, 128, 128), kSeed);
  DeviceCase dc(c, false);
  ASSERT_TRUE(dc.ok());
  constexpr int P = 3;
  const Arm arm = Arm::wy_fp32;
  const std::int64_t cut[P + 1] = {0, 200, 450, 700};
  auto slice = [&](const PrefillArgs& a, int r) {
    PrefillArgs s = a;
    for (TensorView* t : {&s.q, &s.k, &s.v, &s.g, &s.beta, &s.o}) {
      t->data = static_cast<char*>(t->data) + cut[r] * t->stride[0] * dtype_size(t->dtype);
      t->shape[0] = cut[r + 1] - cut[r];
    }
    s.cu_seqlens = nullptr;
    s.num_seqs = 0;
    if (r != 0) s.h0 = TensorView{};
    if (r != P - 1) s.hT = TensorView{};
    return s;
  };
  std::uint64_t need = 0;
  for (int r = 0; r < P; ++r) {
    std::uint64_t b = 0;
    const Status q = cp_rank_workspace_bytes(dc.prob(), slice(dc.args(), r), r, P, arm, &b);
    ASSERT_TRUE(q.ok()) << q.message();
    need = std::max(need, b);
  }
  const std::size_t F = cp_rank_map_floats(dc.prob(), 1);
  DevBuf gathered(P * F * sizeof(float));
  ASSERT_NE(gathered.p, nullptr);
  auto ranks = [&](const PrefillArgs& a) {
    return [&, a](RunInfo* info) -> Status {
      float* g = static_cast<float*>(gathered.p);
      for (int r = 0; r < P; ++r)
        if (Status st = cp_rank_maps(dc.prob(), slice(a, r), r, P, arm, g + r * F, info); !st.ok())
          return st;
      for (int r = 0; r < P; ++r)
        if (Status st = cp_rank_finish(dc.prob(), slice(a, r), r, P, arm, g, info); !st.ok())
          return st;
      return Status::Ok();
    };
  };
  ASSERT_TRUE(release_pool());
  const Result ref = dc.run(ranks(dc.args()));
  ASSERT_TRUE(ref.status.ok()) << ref.status.message();
  EXPECT_GT(ref.pool_after, 0u) << "negative control: the pool path used no pool";
  ASSERT_TRUE(release_pool());
  DevBuf ws(need);
  ASSERT_NE(ws.p, nullptr);
  PrefillArgs w = dc.args();
  w.workspace = ws.p;
  w.workspace_bytes = need;
  const Result got = dc.run(ranks(w));
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_EQ(got.pool_after, 0u) << "the rank steps with a workspace allocated from the pool";
  EXPECT_EQ(first_difference(got.o, ref.o), -1) << "o differs from the pool path";
  EXPECT_EQ(first_difference(got.hT, ref.hT), -1) << "hT differs from the pool path";
}

// A call with a workspace captured into a CUDA graph (global mode: an allocation or a sync would
// break it) and replayed equals the eager pool path bit for bit, and the pool stays empty.
TEST(WorkspaceCapture, WyTcAndSerialCapturedWithWorkspace_L100x0x200x37) {
  testutil::ScopedEnv pool(kPoolEnv, "library");
  const check::Case c =
      check::make_case(testutil::spec_of({100, 0, 200, 37}, 2, 4, 128, 128), kSeed);
  DeviceCase dc(c, false);  // host offsets: copied into the workspace by value
  ASSERT_TRUE(dc.ok());
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (Arm arm : {Arm::wy_tc, Arm::serial}) {
    SCOPED_TRACE(to_string(arm));
    PrefillArgs a = dc.args();
    a.check_values = false;  // the value scan synchronises (not capturable by design)
    a.stream = s;
    const Result ref = dc.prefill_with(a, arm);
    ASSERT_TRUE(ref.status.ok()) << ref.status.message();
    std::uint64_t need = 0;
    ASSERT_TRUE(prefill_workspace_bytes(dc.prob(), a, arm, &need).ok());
    ASSERT_TRUE(release_pool());
    DevBuf ws(need);
    ASSERT_NE(ws.p, nullptr);
    PrefillArgs w = a;
    w.workspace = ws.p;
    w.workspace_bytes = need;
    const Result got = dc.run([&](RunInfo* info) -> Status {
      if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess)
        return Status::Internal("test: begin capture");
      const Status st = prefill(dc.prob(), w, arm, info);
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(s, &graph);
      if (!st.ok()) return st;
      if (end != cudaSuccess)
        return Status::Cuda(std::string("capture: ") + cudaGetErrorString(end));
      cudaGraphExec_t exec = nullptr;
      cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
      if (e == cudaSuccess) e = cudaGraphLaunch(exec, s);
      if (e == cudaSuccess) e = cudaStreamSynchronize(s);
      if (exec) cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      return e == cudaSuccess ? Status::Ok() : Status::Cuda(cudaGetErrorString(e));
    });
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_EQ(got.pool_after, 0u) << "the captured call allocated from the pool";
    EXPECT_EQ(first_difference(got.o, ref.o), -1) << "o differs from the eager pool path";
    EXPECT_EQ(first_difference(got.hT, ref.hT), -1) << "hT differs from the eager pool path";
  }
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace gdn
