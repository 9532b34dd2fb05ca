// GPU tests of the serial arm (src/cuda/serial): every fixture against the fp64 oracle with the
// arm's derived bound (utilisation printed, negative control must fail), bitwise reproducibility,
// hT aliasing h0, zero-length sequences, both head maps, strided q/k/v/o, bad pointer kinds.
// Outputs are NaN-poisoned before every run (check::run_arm; by hand below), so an unwritten
// element fails.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
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

constexpr std::uint64_t kSeed = 2024;

// ---- the whole fixture set against the fp64 oracle ----

class SerialParity : public ::testing::TestWithParam<check::CaseSpec> {};

TEST_P(SerialParity, MatchesOracle) {
  const check::Case c = check::make_case(GetParam(), kSeed);
  const check::Oracle ref = check::ref_serial(c);
  const check::Row r = check::evaluate(Arm::serial, c, ref, /*on_device=*/true);
  std::printf("%s", check::format_table({r}).c_str());
  ASSERT_TRUE(r.error.empty()) << "serial arm returned an error on " << r.fixture << "\n"
                               << describe(r);
  EXPECT_EQ(r.arm, "serial") << "fell back to another arm on " << r.fixture;
  EXPECT_TRUE(r.pass) << "serial arm outside its bound on " << r.fixture << ": o util "
                      << r.util_o << " (NaN count " << r.o.nan_count << "), state util "
                      << r.util_state << " (NaN count " << r.state.nan_count << ")\n"
                      << describe(r);
  EXPECT_TRUE(r.negative_control_failed)
      << "negative control passed (the check cannot fail) on " << r.fixture << "\n"
      << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SerialParity, ::testing::ValuesIn(check::fixture_set()),
                         [](const ::testing::TestParamInfo<check::CaseSpec>& info) {
                           return info.param.name();
                         });

// ---- properties of the arm ----

TEST(Serial, BitwiseReproducible_L300x0x1029_HK2_HV6_K128_bf16_h0_tiled) {
  check::CaseSpec s = spec_of({300, 0, 1029}, 2, 6, 128, 128);
  s.head_map = HeadMap::tiled;
  const check::Case c = check::make_case(s, kSeed);
  const check::ArmOutput a = check::run_arm(Arm::serial, c, true);
  const check::ArmOutput b = check::run_arm(Arm::serial, c, true);
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  ASSERT_TRUE(b.status.ok()) << b.status.message();
  EXPECT_EQ(first_bit_difference(a.o, b.o), -1) << "o differs between two runs at that index";
  EXPECT_EQ(first_bit_difference(a.hT, b.hT), -1) << "hT differs between two runs at that index";
  // Negative control: the comparison sees a one-ulp change.
  std::vector<double> o2 = b.o;
  o2[o2.size() / 2] = std::nextafter(o2[o2.size() / 2], INFINITY);
  EXPECT_EQ(first_bit_difference(a.o, o2), static_cast<std::int64_t>(o2.size() / 2));
}

// Device buffers freed at scope exit.
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  cudaError_t alloc(std::size_t bytes) { return cudaMalloc(&p, bytes ? bytes : 4); }
};

// Copies a [rows, H, D] host view into a device buffer with token stride `st` and head stride
// `sh` (elements; innermost contiguous), the padding filled with 0xff bytes (NaN for every dtype).
::testing::AssertionResult upload_strided(const TensorView& host, std::int64_t st, std::int64_t sh,
                                          DevBuf* buf, TensorView* dev) {
  const std::int64_t rows = host.shape[0], H = host.shape[1], D = host.shape[2];
  const std::size_t es = dtype_size(host.dtype);
  const std::size_t bytes = static_cast<std::size_t>(rows > 0 ? (rows - 1) * st + H * sh : 0) * es;
  std::vector<unsigned char> h(bytes, 0xff);
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t j = 0; j < H; ++j)
      std::memcpy(&h[(t * st + j * sh) * es],
                  static_cast<const unsigned char*>(host.data) +
                      (t * host.stride[0] + j * host.stride[1]) * es,
                  D * es);
  if (buf->alloc(bytes) != cudaSuccess) return ::testing::AssertionFailure() << "cudaMalloc";
  if (cudaMemcpy(buf->p, h.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    return ::testing::AssertionFailure() << "cudaMemcpy";
  *dev = TensorView::strided(buf->p, host.dtype, {rows, H, D}, {st, sh, 1});
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult upload(const TensorView& host, DevBuf* buf, TensorView* dev) {
  if (!host.defined()) return ::testing::AssertionSuccess();
  const std::size_t bytes = host.numel() * dtype_size(host.dtype);
  if (buf->alloc(bytes) != cudaSuccess) return ::testing::AssertionFailure() << "cudaMalloc";
  if (cudaMemcpy(buf->p, host.data, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    return ::testing::AssertionFailure() << "cudaMemcpy";
  *dev = host;
  dev->data = buf->p;
  return ::testing::AssertionSuccess();
}

std::vector<double> decode(const std::vector<unsigned char>& bytes, DType d) {
  std::vector<double> x(bytes.size() / dtype_size(d));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (d == DType::f32) {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      x[i] = f;
    } else {
      std::uint16_t b;
      std::memcpy(&b, &bytes[2 * i], 2);
      x[i] = d == DType::bf16 ? check::bf16_to_f32(b) : check::f16_to_f32(b);
    }
  }
  return x;
}

TEST(Serial, HtAliasesH0_L37x0x130_HK2_HV4_K128_bf16_h0_grouped) {
  const check::Case c = check::make_case(spec_of({37, 0, 130}, 2, 4, 128, 128), kSeed);
  const check::ArmOutput separate = check::run_arm(Arm::serial, c, true);
  ASSERT_TRUE(separate.status.ok()) << separate.status.message();

  std::vector<unsigned char> o_host(c.T * c.prob.HV * c.prob.V * dtype_size(c.spec.out_dtype));
  PrefillArgs a = c.host_args(o_host.data(), nullptr);
  DevBuf q, k, v, g, beta, o, h, cu;
  PrefillArgs d = a;
  ASSERT_TRUE(upload(a.q, &q, &d.q) && upload(a.k, &k, &d.k) && upload(a.v, &v, &d.v) &&
              upload(a.g, &g, &d.g) && upload(a.beta, &beta, &d.beta) &&
              upload(a.h0, &h, &d.h0));
  ASSERT_EQ(o.alloc(o_host.size()), cudaSuccess);
  ASSERT_EQ(cudaMemset(o.p, 0xff, o_host.size()), cudaSuccess);
  d.o.data = o.p;
  d.hT = d.h0;  // in place
  d.on_device = true;
  ASSERT_EQ(cu.alloc(c.cu_seqlens.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(cu.p, c.cu_seqlens.data(), c.cu_seqlens.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  d.cu_seqlens_device = static_cast<const std::int32_t*>(cu.p);
  RunInfo info;
  const Status st = prefill(c.prob, d, Arm::serial, &info);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(info.ran, Arm::serial) << info.note;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> state(c.h0.size());
  ASSERT_EQ(cudaMemcpy(state.data(), h.p, state.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(o_host.data(), o.p, o_host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  const std::vector<double> in_place(state.begin(), state.end());
  EXPECT_EQ(first_bit_difference(separate.hT, in_place), -1)
      << "in-place hT differs from the separate-buffer hT at that index";
  EXPECT_EQ(first_bit_difference(separate.o, decode(o_host, c.spec.out_dtype)), -1)
      << "o with hT aliasing h0 differs from o with separate buffers at that index";
  // Negative control: the state really was updated in place (not left as h0).
  const std::vector<double> h0(c.h0.begin(), c.h0.end());
  EXPECT_NE(first_bit_difference(h0, in_place), -1) << "h0 buffer unchanged: hT was not written";
}

TEST(Serial, ZeroLengthSequence_L5x0x7_HK1_HV2_K64_bf16) {
  for (bool with_h0 : {true, false}) {
    check::CaseSpec s = spec_of({5, 0, 7}, 1, 2, 64, 64);
    s.h0 = with_h0;
    const check::Case c = check::make_case(s, kSeed);
    const check::ArmOutput out = check::run_arm(Arm::serial, c, true);
    ASSERT_TRUE(out.status.ok()) << out.status.message();
    const std::int64_t per_seq = static_cast<std::int64_t>(c.prob.HV) * c.prob.K * c.prob.V;
    std::int64_t bad = -1;
    for (std::int64_t i = 0; i < per_seq && bad < 0; ++i) {
      const double want = with_h0 ? c.h0[per_seq + i] : 0.0;
      if (std::memcmp(&out.hT[per_seq + i], &want, sizeof(double)) != 0) bad = i;
    }
    EXPECT_EQ(bad, -1) << "hT of the empty sequence is not exactly "
                       << (with_h0 ? "h0" : "zero") << " at element " << bad;
    // Negative control: the neighbouring (non-empty) sequence's state did change.
    if (with_h0) {
      std::int64_t same = 0;
      for (std::int64_t i = 0; i < per_seq; ++i) same += out.hT[i] == c.h0[i];
      EXPECT_LT(same, per_seq) << "sequence 0's hT equals its h0: nothing was computed";
    }
  }
}

TEST(Serial, HeadMaps_T65_HK2_HV6_K128_bf16_h0_grouped_and_tiled) {
  for (HeadMap m : {HeadMap::grouped, HeadMap::tiled}) {
    check::CaseSpec s = spec_of({65}, 2, 6, 128, 128);
    s.head_map = m;
    check::Case c = check::make_case(s, kSeed);
    const check::Oracle ref = check::ref_serial(c);
    const check::Row r = check::evaluate(Arm::serial, c, ref, true);
    EXPECT_TRUE(r.pass && r.arm == "serial") << to_string(m) << "\n" << describe(r);
    // Negative control: the kernel run with the other map must fail against this oracle.
    c.prob.head_map = m == HeadMap::grouped ? HeadMap::tiled : HeadMap::grouped;
    const check::Row wrong = check::evaluate(Arm::serial, c, ref, true);
    EXPECT_TRUE(wrong.error.empty()) << wrong.error;
    EXPECT_FALSE(wrong.pass) << "the oracle for the " << to_string(m)
                             << " map accepts the other map's output\n"
                             << describe(wrong);
  }
}

TEST(Serial, StridedInputs_L40x0x90_HK2_HV4_K128_bf16_h0_tiled) {
  check::CaseSpec s = spec_of({40, 0, 90}, 2, 4, 128, 128);
  s.head_map = HeadMap::tiled;
  const check::Case c = check::make_case(s, kSeed);
  const check::Oracle ref = check::ref_serial(c);
  const check::ArmOutput dense = check::run_arm(Arm::serial, c, true);
  ASSERT_TRUE(dense.status.ok()) << dense.status.message();

  const int HK = c.prob.HK, HV = c.prob.HV, K = c.prob.K, V = c.prob.V;
  const DType od = c.spec.out_dtype;
  std::vector<unsigned char> o_dense(c.T * HV * V * dtype_size(od));
  PrefillArgs a = c.host_args(o_dense.data(), nullptr);
  // Odd, non-contiguous strides: head padding and extra token padding (as in a fused qkv buffer).
  const std::int64_t qk_sh = K + 8, qk_st = HK * qk_sh + 24, v_sh = V + 16, v_st = HV * v_sh + 8;
  const std::int64_t o_sh = V + 4, o_st = HV * o_sh + 12;
  DevBuf q, k, v, g, beta, o, h0, hT;
  PrefillArgs d = a;
  ASSERT_TRUE(upload_strided(a.q, qk_st, qk_sh, &q, &d.q));
  ASSERT_TRUE(upload_strided(a.k, qk_st, qk_sh, &k, &d.k));
  ASSERT_TRUE(upload_strided(a.v, v_st, v_sh, &v, &d.v));
  ASSERT_TRUE(upload_strided(a.o, o_st, o_sh, &o, &d.o));  // all 0xff: poisoned, padding too
  ASSERT_TRUE(upload(a.g, &g, &d.g) && upload(a.beta, &beta, &d.beta) && upload(a.h0, &h0, &d.h0));
  ASSERT_EQ(hT.alloc(c.h0.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(hT.p, 0xff, c.h0.size() * 4), cudaSuccess);
  d.hT = d.h0;
  d.hT.data = hT.p;
  d.on_device = true;  // cu_seqlens from the host: the arm uploads them itself
  RunInfo info;
  const Status st = prefill(c.prob, d, Arm::serial, &info);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(info.ran, Arm::serial) << info.note;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::size_t es = dtype_size(od);
  std::vector<unsigned char> o_strided(((c.T - 1) * o_st + HV * o_sh) * es);
  ASSERT_EQ(cudaMemcpy(o_strided.data(), o.p, o_strided.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<float> state(c.h0.size());
  ASSERT_EQ(cudaMemcpy(state.data(), hT.p, state.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  // Gather the strided o back to dense; every other byte (padding) must still be poison.
  std::vector<bool> is_data(o_strided.size(), false);
  for (std::int64_t t = 0; t < c.T; ++t)
    for (int j = 0; j < HV; ++j) {
      const std::int64_t at = (t * o_st + j * o_sh) * es;
      std::memcpy(&o_dense[(t * HV + j) * V * es], &o_strided[at], V * es);
      for (std::int64_t e = at; e < at + V * static_cast<std::int64_t>(es); ++e) is_data[e] = true;
    }
  std::int64_t touched_padding = -1;
  for (std::size_t e = 0; e < o_strided.size() && touched_padding < 0; ++e)
    if (!is_data[e] && o_strided[e] != 0xff) touched_padding = static_cast<std::int64_t>(e);
  EXPECT_EQ(touched_padding, -1) << "the arm wrote into o's padding at that byte";
  const std::vector<double> o_got = decode(o_dense, od);
  const std::vector<double> hT_got(state.begin(), state.end());
  EXPECT_EQ(first_bit_difference(dense.o, o_got), -1)
      << "strided o differs from the contiguous run at that index";
  EXPECT_EQ(first_bit_difference(dense.hT, hT_got), -1)
      << "strided hT differs from the contiguous run at that index";
  const check::Bound b = check::derive_bound(Arm::serial, c);
  const check::Metrics mo = check::compare(ref.o, o_got), ms = check::compare(ref.hT, hT_got);
  EXPECT_TRUE(check::within(mo, b.o)) << "o rel " << mo.rel_rms << " > bound " << b.o;
  EXPECT_TRUE(check::within(ms, b.state)) << "state rel " << ms.rel_rms << " > bound " << b.state;
  // Negative control: the strided buffers really are strided (reading them densely is wrong).
  EXPECT_FALSE(d.q.is_contiguous() || d.v.is_contiguous() || d.o.is_contiguous());
}

TEST(Serial, HostPointerWithOnDeviceIsAnError_T16_HK1_HV2_K64_bf16) {
  const check::Case c = check::make_case(spec_of({16}, 1, 2, 64, 64), kSeed);
  std::vector<std::uint16_t> o(c.T * c.prob.HV * c.prob.V, 0x7fc0);
  std::vector<float> hT(c.h0.size(), std::numeric_limits<float>::quiet_NaN());
  PrefillArgs a = c.host_args(o.data(), hT.data());
  a.on_device = true;  // a lie: every pointer is host memory
  const Status st = prefill(c.prob, a, Arm::serial);
  EXPECT_FALSE(st.ok()) << "host pointers accepted with on_device=true";
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.message();
  EXPECT_NE(st.message().find("host memory"), std::string::npos) << st.message();
  // Caller buffers untouched on error.
  for (std::size_t i = 0; i < o.size(); ++i) ASSERT_EQ(o[i], 0x7fc0) << "o written at " << i;
  for (std::size_t i = 0; i < hT.size(); ++i) ASSERT_TRUE(std::isnan(hT[i])) << "hT written at " << i;
  // Control: the same inputs in device memory are accepted.
  const check::ArmOutput ok = check::run_arm(Arm::serial, c, true);
  EXPECT_TRUE(ok.status.ok()) << ok.status.message();
}

}  // namespace
}  // namespace gdn
