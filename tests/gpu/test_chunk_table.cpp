// GPU tests of the capture-safe sequence tables (src/cuda/common/chunk_table.cuh) and of the
// prefill arms under CUDA stream capture:
//  - the device-built chunk table equals a host-built one for host offsets (by value, including
//    N above the by-value capacity: several copy launches), device offsets, and the upper-bound
//    grid (slack entries tok0 = T, len = 0);
//  - building the table is legal during global-mode stream capture, and the captured graph
//    replays the offsets it was captured with (the host array is overwritten after capture);
//  - each GPU arm, given host cu_seqlens only (no device copy), can be captured into a graph whose
//    replay is bitwise equal to an eager call.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "cuda/common/chunk_table.cuh"
#include "gdn/gdn.hpp"
#include "gpu_test_util.hpp"

namespace gdn {
namespace {

using testutil::spec_of;

struct DevMem {
  void* p = nullptr;
  explicit DevMem(std::size_t bytes) { cudaMalloc(&p, bytes ? bytes : 4); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() {
    if (p) cudaFree(p);
  }
};

std::vector<std::int32_t> offsets_of_lens(const std::vector<int>& lens) {
  std::vector<std::int32_t> cu{0};
  for (int l : lens) cu.push_back(cu.back() + l);
  return cu;
}

struct HostTable {
  std::vector<std::int32_t> first, tok0, len;
};
HostTable host_table(const std::vector<std::int32_t>& cu, int C) {
  HostTable t;
  const int N = static_cast<int>(cu.size()) - 1;
  for (int n = 0; n < N; ++n) {
    t.first.push_back(static_cast<std::int32_t>(t.tok0.size()));
    for (std::int32_t s = cu[n]; s < cu[n + 1]; s += C) {
      t.tok0.push_back(s);
      t.len.push_back(std::min(C, cu[n + 1] - s));
    }
  }
  t.first.push_back(static_cast<std::int32_t>(t.tok0.size()));
  return t;
}

std::vector<std::int32_t> download(const std::int32_t* d, std::int64_t n) {
  std::vector<std::int32_t> h(static_cast<std::size_t>(n));
  if (n > 0) cudaMemcpy(h.data(), d, n * sizeof(std::int32_t), cudaMemcpyDeviceToHost);
  return h;
}

// Builds the table with the given sources and checks it against the host build.
void expect_table(const std::vector<std::int32_t>& cu, int C, bool use_device, bool use_host,
                  bool force_bound) {
  const int N = static_cast<int>(cu.size()) - 1;
  SCOPED_TRACE("N=" + std::to_string(N) + " T=" + std::to_string(cu.back()) + " C=" +
               std::to_string(C) + " device=" + std::to_string(use_device) + " host=" +
               std::to_string(use_host) + " bound=" + std::to_string(force_bound));
  DevMem dcu(cu.size() * 4);
  ASSERT_EQ(cudaMemcpy(dcu.p, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::Offsets off;
  off.host = use_host ? cu.data() : nullptr;
  off.device = use_device ? static_cast<const std::int32_t*>(dcu.p) : nullptr;
  off.N = N;
  off.T = cu.back();
  const cuda::ChunkTablePlan plan = cuda::plan_chunk_table(off, C, force_bound);
  const HostTable want = host_table(cu, C);
  const auto nc_exact = static_cast<std::int64_t>(want.tok0.size());
  if (plan.exact) EXPECT_EQ(plan.nc, nc_exact);
  EXPECT_GE(plan.nc, nc_exact);
  EXPECT_LE(plan.nc, (cu.back() + C - 1) / C + N) << "bound looser than ceil(T/C) + N";
  DevMem scratch(plan.bytes);
  cuda::ChunkTable t;
  Status st = cuda::build_chunk_table(plan, off, scratch.p, nullptr, &t);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(download(t.cu, N + 1), cu);
  EXPECT_EQ(download(t.first, N + 1), want.first);
  std::vector<std::int32_t> tok0 = download(t.tok0, plan.nc), len = download(t.len, plan.nc);
  for (std::int64_t i = nc_exact; i < plan.nc; ++i) {
    EXPECT_EQ(tok0[i], cu.back()) << "slack entry " << i;
    EXPECT_EQ(len[i], 0) << "slack entry " << i;
  }
  tok0.resize(nc_exact);
  len.resize(nc_exact);
  EXPECT_EQ(tok0, want.tok0);
  EXPECT_EQ(len, want.len);
}

TEST(ChunkTable, MatchesHostBuild) {
  std::vector<std::vector<int>> cases = {{0}, {1}, {64}, {65}, {130}, {0, 130, 0, 64, 1, 0},
                                         {32768}, {4099, 37, 200, 63}};
  std::vector<int> many;  // N = 2500 > the by-value capacity: three copy launches
  for (int n = 0; n < 2500; ++n) many.push_back((n * 37) % 150);
  cases.push_back(many);
  std::vector<int> manyones(3000, 1);  // many one-token sequences (decode-like)
  cases.push_back(manyones);
  for (const auto& lens : cases) {
    const std::vector<std::int32_t> cu = offsets_of_lens(lens);
    for (int C : {64, 16}) {
      expect_table(cu, C, false, true, false);  // host by value, exact
      expect_table(cu, C, true, true, false);   // device offsets, exact
      expect_table(cu, C, true, false, false);  // device only: upper bound
      expect_table(cu, C, false, true, true);   // host by value, upper-bound grid
    }
  }
}

TEST(ChunkTable, BuildIsCapturableAndSnapshotsHostOffsets) {
  std::vector<std::int32_t> cu = offsets_of_lens({40, 0, 90, 200});
  const std::vector<std::int32_t> captured = cu;
  cuda::Offsets off;
  off.host = cu.data();
  off.N = 4;
  off.T = cu.back();
  const cuda::ChunkTablePlan plan = cuda::plan_chunk_table(off, 64);
  DevMem scratch(plan.bytes);
  ASSERT_EQ(cudaMemset(scratch.p, 0xff, plan.bytes), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cuda::ChunkTable t;
  Status st = cuda::build_chunk_table(plan, off, scratch.p, s, &t);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  for (auto& x : cu) x = 12345;  // the graph must not read the host array
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const HostTable want = host_table(captured, 64);
  EXPECT_EQ(download(t.cu, 5), captured);
  EXPECT_EQ(download(t.first, 5), want.first);
  EXPECT_EQ(download(t.tok0, plan.nc), want.tok0);
  EXPECT_EQ(download(t.len, plan.nc), want.len);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// ---- each arm under stream capture, host cu_seqlens only ----

// One eager call and one call captured into a CUDA graph and replayed, on the same device
// buffers (host cu_seqlens only). `graph_env` (optional "NAME=value") is set for the captured
// call only (negative controls).
struct EagerAndGraph {
  std::vector<unsigned char> o_eager, o_graph;
  std::vector<float> hT_eager, hT_graph;
  Arm ran_eager = Arm::automatic, ran_graph = Arm::automatic;
};
void eager_and_graph(Arm arm, const check::Case& c, EagerAndGraph* r,
                     const char* graph_env_name = nullptr, const char* graph_env_value = nullptr) {
  const std::size_t o_bytes = c.T * c.prob.HV * c.prob.V * dtype_size(c.spec.out_dtype);
  const std::size_t s_bytes = c.h0.size() * sizeof(float);
  std::vector<unsigned char> o_host(o_bytes);
  std::vector<float> hT_host(c.h0.size());
  const PrefillArgs h = c.host_args(o_host.data(), hT_host.data());
  std::vector<std::unique_ptr<DevMem>> bufs;
  PrefillArgs d = h;
  bool ok = true;
  auto up = [&](const TensorView& hv, TensorView* dv) {
    if (!hv.defined()) return;
    const std::size_t b = hv.numel() * dtype_size(hv.dtype);
    bufs.push_back(std::make_unique<DevMem>(b));
    dv->data = bufs.back()->p;
    ok &= cudaMemcpy(dv->data, hv.data, b, cudaMemcpyHostToDevice) == cudaSuccess;
  };
  up(h.q, &d.q), up(h.k, &d.k), up(h.v, &d.v), up(h.g, &d.g), up(h.beta, &d.beta);
  up(h.h0, &d.h0), up(h.o, &d.o), up(h.hT, &d.hT);
  ASSERT_TRUE(ok);
  d.on_device = true;
  d.check_values = false;  // the value scan synchronizes (not capturable by design)
  d.cu_seqlens_device = nullptr;  // host offsets only: the arm must not upload them pageably
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  d.stream = s;
  // Eager reference.
  RunInfo info;
  Status st = prefill(c.prob, d, arm, &info);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  r->o_eager.resize(o_bytes), r->o_graph.resize(o_bytes);
  r->hT_eager.resize(c.h0.size()), r->hT_graph.resize(c.h0.size());
  ASSERT_EQ(cudaMemcpy(r->o_eager.data(), d.o.data, o_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(r->hT_eager.data(), d.hT.data, s_bytes, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(d.o.data, 0xff, o_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.hT.data, 0xff, s_bytes), cudaSuccess);
  // Captured (global mode: any unsafe call, a pageable copy or a sync, invalidates the capture).
  RunInfo info2;
  cudaGraph_t graph = nullptr;
  cudaError_t end = cudaSuccess;
  {
    std::unique_ptr<testutil::ScopedEnv> env;
    if (graph_env_name) env = std::make_unique<testutil::ScopedEnv>(graph_env_name, graph_env_value);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    st = prefill(c.prob, d, arm, &info2);
    end = cudaStreamEndCapture(s, &graph);
  }
  cudaGetLastError();
  ASSERT_TRUE(st.ok()) << to_string(info2.ran) << " under capture: " << st.message();
  ASSERT_EQ(end, cudaSuccess) << to_string(info2.ran) << " capture: " << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(r->o_graph.data(), d.o.data, o_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(r->hT_graph.data(), d.hT.data, s_bytes, cudaMemcpyDeviceToHost),
            cudaSuccess);
  r->ran_eager = info.ran, r->ran_graph = info2.ran;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

bool same_bytes(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}
bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ArmCapture : public ::testing::TestWithParam<Arm> {};

TEST_P(ArmCapture, GraphReplayEqualsEager_L40x0x130x65_HK2_HV4_K128_bf16_h0) {
  const Arm arm = GetParam();
  const check::Case c = check::make_case(spec_of({40, 0, 130, 65}, 2, 4, 128, 128), 7);
  EagerAndGraph r;
  eager_and_graph(arm, c, &r);
  if (HasFatalFailure()) return;
  EXPECT_EQ(r.ran_eager, r.ran_graph);
  EXPECT_TRUE(same_bytes(r.o_eager, r.o_graph))
      << to_string(r.ran_graph) << ": graph replay o differs from eager";
  EXPECT_TRUE(same_bytes(r.hT_eager, r.hT_graph))
      << to_string(r.ran_graph) << ": graph replay final state differs from eager";
}

// wy-tc's overlapped passes (one sequence; segments' state passes on a side stream ordered by
// events) under capture: the events fork the side stream into the capture and join it back. The
// eager call runs first (it creates the side stream and its events outside the capture, as an
// engine's warm-up call does). Negative control: the captured call with the segment carry dropped
// (GDN_WYTC_OVERLAP=negctl) must differ, which shows that the overlapped path is what was captured.
TEST(ArmCaptureWyTc, OverlappedPassesGraphReplayEqualsEager_L2500_HK2_HV4_K128_bf16_h0) {
  const check::Case c = check::make_case(spec_of({2500}, 2, 4, 128, 128), 8);
  testutil::ScopedEnv env("GDN_WYTC_OVERLAP", "1");  // 40 chunks: 3 segments
  EagerAndGraph r;
  eager_and_graph(Arm::wy_tc, c, &r);
  if (HasFatalFailure()) return;
  ASSERT_EQ(r.ran_graph, Arm::wy_tc);
  EXPECT_TRUE(same_bytes(r.o_eager, r.o_graph)) << "overlapped wy-tc: graph replay o differs";
  EXPECT_TRUE(same_bytes(r.hT_eager, r.hT_graph)) << "overlapped wy-tc: graph replay hT differs";
  EagerAndGraph neg;
  eager_and_graph(Arm::wy_tc, c, &neg, "GDN_WYTC_OVERLAP", "negctl");
  if (HasFatalFailure()) return;
  EXPECT_TRUE(same_bytes(neg.o_eager, r.o_eager)) << "eager runs differ";
  EXPECT_FALSE(same_bytes(neg.o_eager, neg.o_graph))
      << "negative control: the captured call without the carry gave the eager result";
}

// wy-tc's flag pipeline (GDN_WYTC_FLAGS=1: one chunk launch and one state launch at the same
// time, the state blocks waiting on ready flags in a buffer zeroed by a memset in the stream)
// under capture: a replay must equal the eager call (the memset is replayed with the kernels).
// Negative control: the captured call with the state pass before the chunk kernel and the flags
// preset (GDN_WYTC_FLAGS=negctl) must differ. On a device without the sm_90a state pass the
// variable changes nothing, so the test is skipped there.
TEST(ArmCaptureWyTc, FlagPipelineGraphReplayEqualsEager_L2500_HK2_HV4_K128_bf16_h0) {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0) GTEST_SKIP() << "the flag pipeline runs on compute capability 9.0";
  const check::Case c = check::make_case(spec_of({2500}, 2, 4, 128, 128), 9);
  testutil::ScopedEnv env("GDN_WYTC_FLAGS", "1");
  EagerAndGraph r;
  eager_and_graph(Arm::wy_tc, c, &r);
  if (HasFatalFailure()) return;
  ASSERT_EQ(r.ran_graph, Arm::wy_tc);
  EXPECT_TRUE(same_bytes(r.o_eager, r.o_graph)) << "flag pipeline: graph replay o differs";
  EXPECT_TRUE(same_bytes(r.hT_eager, r.hT_graph)) << "flag pipeline: graph replay hT differs";
  EagerAndGraph neg;
  eager_and_graph(Arm::wy_tc, c, &neg, "GDN_WYTC_FLAGS", "negctl");
  if (HasFatalFailure()) return;
  EXPECT_TRUE(same_bytes(neg.o_eager, r.o_eager)) << "eager runs differ";
  EXPECT_FALSE(same_bytes(neg.o_eager, neg.o_graph))
      << "negative control: the captured call with the state pass first gave the eager result";
}

INSTANTIATE_TEST_SUITE_P(Arms, ArmCapture,
                         ::testing::Values(Arm::serial, Arm::wy_fp32, Arm::wy_tc, Arm::automatic),
                         [](const ::testing::TestParamInfo<Arm>& i) {
                           std::string n = to_string(i.param);
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace gdn
