// Context-parallel prefill on one GPU (src/cp/cp.cpp + src/cuda/cp/cp.cu): prefill_cp with
// P = 1, 2, 3, 7 segments, and P virtual ranks (cp_rank_maps / cp_rank_finish: the multi-GPU path
// minus NCCL, the all-gather being one shared device buffer), on the wy-fp32 and serial arms,
// against the fp64 oracle within the arm's derived bound and against plain prefill of the same
// arm. Negative controls: 2.5x-bound perturbations fail; segments run without the combine fail
// where the carried state matters. Every failure names arm, mode, P, fixture, errors and bound.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../cp_test_util.hpp"

namespace gdn {
namespace {

constexpr std::uint64_t kSeed = 9009;

struct DevMem : cptest::Mem {
  std::vector<void*> bufs;
  ~DevMem() override {
    for (void* p : bufs) cudaFree(p);
  }
  bool device() const override { return true; }
  void* upload(const void* host, std::size_t bytes) override {
    void* d = nullptr;
    if (cudaMalloc(&d, std::max<std::size_t>(bytes, 4)) != cudaSuccess) return nullptr;
    bufs.push_back(d);
    if (bytes && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
    return d;
  }
  bool download(void* host, const void* mem, std::size_t bytes) override {
    if (cudaDeviceSynchronize() != cudaSuccess) return false;
    return !bytes || cudaMemcpy(host, mem, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
};

check::CaseSpec spec_of(std::vector<int> lens, check::Decay decay, bool h0, int K = 128,
                        int V = 128) {
  check::CaseSpec s;
  s.seq_lens = std::move(lens);
  s.HK = 2;
  s.HV = 4;
  s.K = K;
  s.V = V;
  s.decay = decay;
  s.h0 = h0;
  return s;
}

bool carried_state_matters(const check::CaseSpec& s, int P) {
  bool split = false;
  for (int len : s.seq_lens) split |= P > 1 && len > 64;
  return split && (s.decay == check::Decay::none || s.decay == check::Decay::slow);
}

void expect_cp(Arm arm, const check::CaseSpec& spec, int P, cptest::Mode mode = cptest::Mode::cp) {
  const check::Case c = check::make_case(spec, kSeed);
  const check::Oracle ref = check::ref_serial(c);
  const check::Bound b = check::derive_bound(arm, c);
  DevMem mem;
  const cptest::Out got = cptest::run(c, mode, P, arm, mem);
  const std::string what = std::string(cptest::mode_name(mode)) + " P=" + std::to_string(P) +
                           " arm " + to_string(arm) + " " + spec.name();
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.message();
  EXPECT_EQ(got.info.ran, arm) << what << ": ran " << to_string(got.info.ran) << " ("
                               << got.info.note << ")";
  const check::Metrics mo = check::compare(ref.o, got.o), ms = check::compare(ref.hT, got.hT);
  std::printf("%-14s P=%d %-8s %-52s o %.2e / %.2e (util %.3f)  state %.2e / %.2e (util %.3f)\n",
              cptest::mode_name(mode), P, to_string(arm), spec.name().c_str(), mo.rel_rms, b.o,
              mo.rel_rms / b.o, ms.rel_rms, b.state, ms.rel_rms / b.state);
  EXPECT_TRUE(check::within(mo, b.o))
      << what << ": o rel_rms " << mo.rel_rms << " > bound " << b.o << " (NaN/unwritten "
      << mo.nan_count << ", max_abs " << mo.max_abs << ")\nbound: " << b.formula;
  EXPECT_TRUE(check::within(ms, b.state))
      << what << ": state rel_rms " << ms.rel_rms << " > bound " << b.state << " (NaN/unwritten "
      << ms.nan_count << ", max_abs " << ms.max_abs << ")\nbound: " << b.formula;
  const cptest::Out plain = cptest::run(c, cptest::Mode::plain, 1, arm, mem);
  ASSERT_TRUE(plain.status.ok()) << what << ": plain prefill: " << plain.status.message();
  const check::Metrics po = check::compare(plain.o, got.o), ps = check::compare(plain.hT, got.hT);
  EXPECT_TRUE(check::within(po, b.o))
      << what << " vs prefill: o rel " << po.rel_rms << " NaN " << po.nan_count << " bound " << b.o;
  EXPECT_TRUE(check::within(ps, b.state)) << what << " vs prefill: hT rel " << ps.rel_rms << " NaN "
                                          << ps.nan_count << " bound " << b.state;
  if (!ref.o.empty())
    EXPECT_FALSE(check::within(check::compare(ref.o, check::perturb(ref.o, got.o, 2.5 * b.o)), b.o))
        << what << ": negative control: a 2.5x-bound perturbed o passed";
  EXPECT_FALSE(
      check::within(check::compare(ref.hT, check::perturb(ref.hT, got.hT, 2.5 * b.state)), b.state))
      << what << ": negative control: a 2.5x-bound perturbed hT passed";
  if (mode == cptest::Mode::cp && carried_state_matters(spec, P)) {
    const cptest::Out nc = cptest::run(c, cptest::Mode::no_combine, P, arm, mem);
    ASSERT_TRUE(nc.status.ok()) << what << ": no-combine run: " << nc.status.message();
    const check::Metrics no = check::compare(ref.o, nc.o);
    std::printf("  no-combine control: o %.2e (bound %.2e)\n", no.rel_rms, b.o);
    EXPECT_FALSE(check::within(no, b.o))
        << what << ": negative control: segments without the combine passed the check";
  }
}

class CpGpu : public ::testing::TestWithParam<Arm> {};

TEST_P(CpGpu, T4099_slow_h0_K128_bf16_P1_P2_P3_P7) {
  for (int P : {1, 2, 3, 7}) expect_cp(GetParam(), spec_of({4099}, check::Decay::slow, true), P);
}
TEST_P(CpGpu, T1000_none_noh0_K64_V128_f32io_P2_P3_P7) {
  check::CaseSpec s = spec_of({1000}, check::Decay::none, false, 64, 128);
  s.io_dtype = s.out_dtype = DType::f32;
  for (int P : {2, 3, 7}) expect_cp(GetParam(), s, P);
}
TEST_P(CpGpu, T200_fast_noh0_f16_P3_P7) {
  check::CaseSpec s = spec_of({200}, check::Decay::fast, false);
  s.io_dtype = s.out_dtype = DType::f16;
  for (int P : {3, 7}) expect_cp(GetParam(), s, P);
}
TEST_P(CpGpu, T65_extreme_h0_P2_P3) {
  for (int P : {2, 3}) expect_cp(GetParam(), spec_of({65}, check::Decay::extreme, true), P);
}
TEST_P(CpGpu, Varlen_L130x0x1x257_slow_h0_HV6_tiled_vk_l2norm_P1_P2_P3_P7) {
  check::CaseSpec s = spec_of({130, 0, 1, 257}, check::Decay::slow, true, 64, 64);
  s.HV = 6;
  s.head_map = HeadMap::tiled;
  s.state_layout = StateLayout::vk;
  s.l2norm_in_kernel = true;
  for (int P : {1, 2, 3, 7}) expect_cp(GetParam(), s, P);
}
TEST_P(CpGpu, Varlen_L0x1300x64_none_h0_f32out_P3) {
  check::CaseSpec s = spec_of({0, 1300, 64}, check::Decay::none, true);
  s.out_dtype = DType::f32;
  expect_cp(GetParam(), s, 3);
}
TEST_P(CpGpu, VirtualRanks_T2000_slow_h0_P1_P2_P3_P7) {
  for (int P : {1, 2, 3, 7})
    expect_cp(GetParam(), spec_of({2000}, check::Decay::slow, true), P, cptest::Mode::ranks);
}
TEST_P(CpGpu, VirtualRanks_T777_none_h0_vk_l2norm_tiled_P3) {
  check::CaseSpec s = spec_of({777}, check::Decay::none, true);
  s.state_layout = StateLayout::vk;
  s.l2norm_in_kernel = true;
  s.head_map = HeadMap::tiled;
  expect_cp(GetParam(), s, 3, cptest::Mode::ranks);
}

INSTANTIATE_TEST_SUITE_P(Arms, CpGpu, ::testing::Values(Arm::wy_fp32, Arm::serial),
                         [](const ::testing::TestParamInfo<Arm>& info) {
                           return info.param == Arm::serial ? std::string("serial")
                                                            : std::string("wy_fp32");
                         });

// The same machinery on the tensor-core arm (arm-agnostic by construction); kept separate so a
// failure here points at wy-tc, not at the cp code.
TEST(CpGpuWyTc, T4099_slow_h0_K128_bf16_P3) {
  expect_cp(Arm::wy_tc, spec_of({4099}, check::Decay::slow, true), 3);
}

// hT aliasing h0 (in-place state update) works through prefill_cp.
TEST(CpGpuAlias, HTAliasesH0_L300x70_wy_fp32_P3) {
  const check::Case c = check::make_case(spec_of({300, 70}, check::Decay::none, true), kSeed);
  DevMem mem;
  const cptest::Out sep = cptest::run(c, cptest::Mode::cp, 3, Arm::wy_fp32, mem);
  ASSERT_TRUE(sep.status.ok()) << sep.status.message();
  std::vector<std::uint16_t> o(c.T * c.prob.HV * c.prob.V);
  PrefillArgs a = c.host_args(o.data(), nullptr);
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.o, &a.h0})
    t->data = mem.upload(t->data, t->numel() * dtype_size(t->dtype));
  a.hT = a.h0;
  a.on_device = true;
  ASSERT_TRUE(prefill_cp(c.prob, a, 3, Arm::wy_fp32).ok());
  std::vector<float> hT(c.h0.size());
  ASSERT_TRUE(mem.download(hT.data(), a.hT.data, hT.size() * 4));
  for (std::size_t i = 0; i < hT.size(); ++i)
    ASSERT_EQ(double(hT[i]), sep.hT[i]) << "in-place hT differs from separate buffers at " << i;
}

}  // namespace
}  // namespace gdn
