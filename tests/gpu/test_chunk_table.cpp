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

class ArmCapture : public ::testing::TestWithParam<Arm> {};

TEST_P(ArmCapture, GraphReplayEqualsEager_L40x0x130x65_HK2_HV4_K128_bf16_h0) {
  const Arm arm = GetParam();
  const check::Case c = check::make_case(spec_of({40, 0, 130, 65}, 2, 4, 128, 128), 7);
  const std::size_t o_bytes = c.T * c.prob.HV * c.prob.V * dtype_size(c.spec.out_dtype);
  const std::size_t s_bytes = c.h0.size() * sizeof(float);
  std::vector<unsigned char> o_host(o_bytes);
  std::vector<float> hT_host(c.h0.size());
  const PrefillArgs h = c.host_args(o_host.data(), hT_host.data());
  std::vector<DevMem*> bufs;
  PrefillArgs d = h;
  bool ok = true;
  auto up = [&](const TensorView& hv, TensorView* dv) {
    if (!hv.defined()) return;
    const std::size_t b = hv.numel() * dtype_size(hv.dtype);
    bufs.push_back(new DevMem(b));
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
  std::vector<unsigned char> o_eager(o_bytes), o_graph(o_bytes);
  std::vector<float> hT_eager(c.h0.size()), hT_graph(c.h0.size());
  ASSERT_EQ(cudaMemcpy(o_eager.data(), d.o.data, o_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hT_eager.data(), d.hT.data, s_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.o.data, 0xff, o_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.hT.data, 0xff, s_bytes), cudaSuccess);
  // Captured (global mode: any unsafe call, a pageable copy or a sync, invalidates the capture).
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  RunInfo info2;
  st = prefill(c.prob, d, arm, &info2);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  cudaGetLastError();
  ASSERT_TRUE(st.ok()) << to_string(info2.ran) << " under capture: " << st.message();
  ASSERT_EQ(end, cudaSuccess) << to_string(info2.ran) << " capture: " << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(o_graph.data(), d.o.data, o_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hT_graph.data(), d.hT.data, s_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(info.ran, info2.ran);
  EXPECT_EQ(std::memcmp(o_eager.data(), o_graph.data(), o_bytes), 0)
      << to_string(info2.ran) << ": graph replay o differs from eager";
  EXPECT_EQ(std::memcmp(hT_eager.data(), hT_graph.data(), s_bytes), 0)
      << to_string(info2.ran) << ": graph replay final state differs from eager";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  for (DevMem* b : bufs) delete b;
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
