// The GDN layer on the GPU vs the fp64 layer oracle (src/ref/layer_ref.hpp).
//
// Bound (derived before tuning, relative RMS vs the oracle): the GPU path stores in bf16
// (unit roundoff u = 2^-8, RMS rounding error ~ u/sqrt(12) ~ 1.1e-3 per store) the projection
// output, the conv output, the recurrence output o, the normed o and y: five stores that add in
// quadrature to ~2.5e-3, plus the recurrence arm's own error (<= ~4e-3 for the tensor-core arm on
// bf16 inputs, DESIGN.md §6) and the decay perturbation from the bf16-rounded gate inputs
// (|dg| <= u |a|, compounding over a sequence). Bound = 2e-2 on y and on the final recurrent state
// (~3x the estimate); the conv state holds bf16 projection outputs: bound 2u = 7.8e-3.
// Each check also runs on an output perturbed by 2.5x its bound, which must fail.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gdn/layer.hpp"
#include "layer/testing.hpp"
#include "gpu_test_util.hpp"
#include "ref/layer_ref.hpp"

namespace gl = gdn::layer;

namespace {

constexpr double kBoundY = 2e-2, kBoundSsm = 2e-2, kBoundConv = 7.8e-3;

double rel_rms(const std::vector<double>& ref, const std::vector<double>& got) {
  if (ref.size() != got.size()) return INFINITY;
  double e = 0, r = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = got[i] - ref[i];
    if (std::isnan(d)) return INFINITY;
    e += d * d, r += ref[i] * ref[i];
  }
  return std::sqrt(e / std::max(r, 1e-300));
}

// Check with its negative control: the same output pushed 2.5x the bound away must fail.
void expect_within(const char* what, const std::vector<double>& ref, const std::vector<double>& got,
                   double bound, const std::string& ctx) {
  const double err = rel_rms(ref, got);
  EXPECT_LE(err, bound) << ctx << ": " << what << " rel RMS " << err << " > bound " << bound
                        << " (utilisation " << err / bound << ")";
  double rn = 0;
  for (double v : ref) rn += v * v;
  const double amp = 2.5 * bound * std::sqrt(rn / std::max<std::size_t>(1, ref.size()));
  std::vector<double> bad = got;
  for (std::size_t i = 0; i < bad.size(); ++i) bad[i] += (i % 2 ? amp : -amp);
  EXPECT_GT(rel_rms(ref, bad), bound) << ctx << ": negative control for " << what << " passed";
}

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = gl::f32_to_bf16(nd(rng));
  return v;
}
std::vector<double> decode_bf16(const std::vector<std::uint16_t>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = gl::bf16_to_f32(v[i]);
  return r;
}

struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t bytes) { cudaMalloc(&p, std::max<std::size_t>(bytes, 16)); }
  ~Dev() { cudaFree(p); }
};

// Random conv states (bf16 values) and recurrent states in the given slots, one pair per
// sequence in order; copied into `ref` (when given) for the oracle.
void set_random_states(gl::GpuLayer& L, const gl::Config& c, const std::vector<std::int32_t>& slots,
                       std::uint64_t seed, gdn::ref::LayerState* ref) {
  const std::size_t csz = static_cast<std::size_t>(c.conv_kernel - 1) * c.conv_dim();
  const std::size_t ssz = static_cast<std::size_t>(c.HV) * c.K * c.V;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (std::size_t n = 0; n < slots.size(); ++n) {
    std::vector<float> cs(csz), ss(ssz);
    for (auto& v : cs) v = gl::bf16_to_f32(gl::f32_to_bf16(nd(rng)));
    for (auto& v : ss) v = 0.05f * nd(rng);
    ASSERT_TRUE(L.set_state(slots[n], cs, ss).ok());
    if (ref) {
      std::copy(cs.begin(), cs.end(), ref->conv.begin() + n * csz);
      std::copy(ss.begin(), ss.end(), ref->ssm.begin() + n * ssz);
    }
  }
}

// Runs GPU prefill over packed sequences in shuffled slots with random initial states and
// compares y and every slot's final states with the oracle.
void prefill_vs_oracle(const gl::Config& c, gdn::Arm arm, const std::vector<int>& lens,
                       std::uint64_t seed) {
  ASSERT_TRUE(c.validate().ok()) << c.validate().message();
  const gl::Weights w = gl::synthesize(c, seed);
  const int N = static_cast<int>(lens.size()), pool = N + 1;
  std::vector<std::int32_t> cu = {0}, slots;
  for (int n = 0; n < N; ++n) cu.push_back(cu.back() + lens[n]), slots.push_back(N - n);  // distinct, shuffled (reversed)
  const std::int64_t T = cu.back();
  const std::string ctx = std::string("arm ") + gdn::to_string(arm) + " " + c.name + " HK" +
                          std::to_string(c.HK) + " HV" + std::to_string(c.HV) + " KW" +
                          std::to_string(c.conv_kernel) + " T=" + std::to_string(T);

  std::unique_ptr<gl::GpuLayer> L;
  gdn::Status st = gl::GpuLayer::create(c, w, pool, &L);
  ASSERT_TRUE(st.ok()) << st.message();
  std::unique_ptr<gl::Workspace> ws;
  ASSERT_TRUE((st = gl::Workspace::create(c, std::max<std::int64_t>(T, 1), N, &ws)).ok()) << st.message();

  auto ref_state = gdn::ref::LayerState::zeros(c, N);
  ASSERT_NO_FATAL_FAILURE(set_random_states(*L, c, slots, seed + 1, &ref_state));
  const auto x16 = random_bf16(static_cast<std::size_t>(T) * c.hidden, seed + 2);
  Dev x(x16.size() * 2), y(x16.size() * 2);
  cudaMemcpy(x.p, x16.data(), x16.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(y.p, 0xff, x16.size() * 2);  // poison: NaN in bf16
  gdn::RunInfo info;
  st = L->prefill(x.p, y.p, cu.data(), N, slots.data(), *ws, nullptr, arm, nullptr, &info);
  ASSERT_TRUE(st.ok()) << ctx << ": " << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << ctx;
  std::vector<std::uint16_t> y16(x16.size());
  cudaMemcpy(y16.data(), y.p, y16.size() * 2, cudaMemcpyDeviceToHost);
  const auto y_ref = gdn::ref::layer_forward(c, w, decode_bf16(x16), cu, &ref_state);
  expect_within("y", y_ref, decode_bf16(y16), kBoundY, ctx + " (ran " + gdn::to_string(info.ran) + ")");
  const std::size_t csz = static_cast<std::size_t>(c.conv_kernel - 1) * c.conv_dim();
  const std::size_t ssz = static_cast<std::size_t>(c.HV) * c.K * c.V;
  for (int n = 0; n < N; ++n) {
    std::vector<float> cs, ss;
    ASSERT_TRUE(L->get_state(slots[n], &cs, &ss).ok());
    const std::string cn = ctx + " seq " + std::to_string(n) + " slot " + std::to_string(slots[n]);
    if (csz > 0)  // conv kernel 1 keeps no conv state
      expect_within("conv state", std::vector<double>(ref_state.conv.begin() + n * csz, ref_state.conv.begin() + (n + 1) * csz),
                    std::vector<double>(cs.begin(), cs.end()), kBoundConv, cn);
    expect_within("recurrent state", std::vector<double>(ref_state.ssm.begin() + n * ssz, ref_state.ssm.begin() + (n + 1) * ssz),
                  std::vector<double>(ss.begin(), ss.end()), kBoundSsm, cn);
  }
}

void prefill_vs_oracle(gdn::Arm arm, const std::vector<int>& lens, std::uint64_t seed) {
  gl::Config c;
  ASSERT_TRUE(gl::preset("tiny", &c));
  prefill_vs_oracle(c, arm, lens, seed);
}

// Geometries for the kernels' other paths. "tiny" (P = 776, V = 64) takes the 16-byte conv and
// norm paths; HV = 6 makes P = CD + VD + 12 not a multiple of 8, so the conv runs on bf16 pairs
// and the norm one element per lane.
gl::Config tiny_with(int HK, int HV, int conv_kernel) {
  gl::Config c;
  EXPECT_TRUE(gl::preset("tiny", &c));
  c.HK = HK, c.HV = HV, c.conv_kernel = conv_kernel;
  return c;
}

}  // namespace

TEST(layer_gpu, prefill_tiny_T37_0_70_auto) { prefill_vs_oracle(gdn::Arm::automatic, {37, 0, 70}, 101); }
TEST(layer_gpu, prefill_tiny_T37_0_70_serial) { prefill_vs_oracle(gdn::Arm::serial, {37, 0, 70}, 102); }
TEST(layer_gpu, prefill_tiny_T37_0_70_wy_fp32) { prefill_vs_oracle(gdn::Arm::wy_fp32, {37, 0, 70}, 103); }
TEST(layer_gpu, prefill_tiny_T37_0_70_wy_tc) { prefill_vs_oracle(gdn::Arm::wy_tc, {37, 0, 70}, 104); }
TEST(layer_gpu, prefill_tiny_T200_auto) { prefill_vs_oracle(gdn::Arm::automatic, {200}, 105); }
// Sequence starts inside one 32-token conv run, sequences shorter than the conv window (their
// new conv state mixes the old state and the new tokens), empty ones, runs split by boundaries.
TEST(layer_gpu, prefill_tiny_short_sequences_auto) {
  prefill_vs_oracle(gdn::Arm::automatic, {1, 2, 0, 3, 26, 1, 33, 0, 5, 64, 2}, 106);
}
// Conv kernel widths other than 4 (the conv kernel is instantiated per width).
TEST(layer_gpu, prefill_tiny_conv_kernel_1_2_6_8_auto) {
  for (int kw : {1, 2, 6, 8})
    prefill_vs_oracle(tiny_with(2, 4, kw), gdn::Arm::automatic, {1, 45, 0, 7}, 107 + kw);
}
// P not a multiple of 8: the 4-byte conv path and the one-element norm path.
TEST(layer_gpu, prefill_unaligned_P_fallback_paths_auto) {
  for (int kw : {4, 3})
    prefill_vs_oracle(tiny_with(2, 6, kw), gdn::Arm::automatic, {37, 0, 2, 70}, 117 + kw);
}

namespace {
// Prefill of T0 tokens, then decode steps, equals the oracle's one prefill of T0 + steps tokens
// and the GPU's own one prefill of the whole sequence.
void prefill_then_decode(const gl::Config& c) {
  const gl::Weights w = gl::synthesize(c, 201);
  const int T0 = 45, steps = 6, T = T0 + steps;
  const auto x16 = random_bf16(static_cast<std::size_t>(T) * c.hidden, 202);
  const std::size_t row = c.hidden;
  std::unique_ptr<gl::GpuLayer> L;
  std::unique_ptr<gl::Workspace> ws;
  gdn::Status st = gl::GpuLayer::create(c, w, 3, &L);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE((st = gl::Workspace::create(c, T, 2, &ws)).ok()) << st.message();
  Dev x(x16.size() * 2), y_split(x16.size() * 2), y_full(x16.size() * 2);
  cudaMemcpy(x.p, x16.data(), x16.size() * 2, cudaMemcpyHostToDevice);
  const std::int32_t slot_a = 2, slot_b = 0;
  std::vector<std::int32_t> cu0 = {0, T0}, cuf = {0, T};
  ASSERT_TRUE((st = L->prefill(x.p, y_split.p, cu0.data(), 1, &slot_a, *ws)).ok()) << st.message();
  for (int s = 0; s < steps; ++s) {
    auto* xs = static_cast<std::uint16_t*>(x.p) + (T0 + s) * row;
    auto* ys = static_cast<std::uint16_t*>(y_split.p) + (T0 + s) * row;
    ASSERT_TRUE((st = L->decode(xs, ys, 1, &slot_a, *ws)).ok()) << "step " << s << ": " << st.message();
  }
  ASSERT_TRUE((st = L->prefill(x.p, y_full.p, cuf.data(), 1, &slot_b, *ws)).ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint16_t> ys16(x16.size()), yf16(x16.size());
  cudaMemcpy(ys16.data(), y_split.p, ys16.size() * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(yf16.data(), y_full.p, yf16.size() * 2, cudaMemcpyDeviceToHost);
  auto ref_state = gdn::ref::LayerState::zeros(c, 1);
  const auto y_ref = gdn::ref::layer_forward(c, w, decode_bf16(x16), cuf, &ref_state);
  // The decode tokens alone (the part the decode path produced).
  auto tail = [&](const std::vector<double>& v) {
    return std::vector<double>(v.begin() + T0 * row, v.end());
  };
  expect_within("y (prefill+decode vs oracle)", y_ref, decode_bf16(ys16), kBoundY, "split");
  expect_within("y decode tokens vs oracle", tail(y_ref), tail(decode_bf16(ys16)), kBoundY, "split");
  expect_within("y decode tokens vs GPU prefill T51", tail(decode_bf16(yf16)), tail(decode_bf16(ys16)),
                kBoundY, "split");
  std::vector<float> cs_a, ss_a, cs_b, ss_b;
  ASSERT_TRUE(L->get_state(slot_a, &cs_a, &ss_a).ok());
  ASSERT_TRUE(L->get_state(slot_b, &cs_b, &ss_b).ok());
  expect_within("recurrent state vs oracle", ref_state.ssm, std::vector<double>(ss_a.begin(), ss_a.end()),
                kBoundSsm, "split");
  expect_within("conv state vs oracle", ref_state.conv, std::vector<double>(cs_a.begin(), cs_a.end()),
                kBoundConv, "split");
  expect_within("recurrent state vs GPU prefill T51", std::vector<double>(ss_b.begin(), ss_b.end()),
                std::vector<double>(ss_a.begin(), ss_a.end()), kBoundSsm, "split");
}
}  // namespace

TEST(layer_gpu, prefill_T45_then_6_decode_steps_equals_prefill_T51) {
  gl::Config c;
  ASSERT_TRUE(gl::preset("tiny", &c));
  prefill_then_decode(c);
}
// The same on a geometry with P not a multiple of 8 (the norm's one-element path, in prefill and
// in decode; the conv's 4-B path in prefill).
TEST(layer_gpu, prefill_T45_then_6_decode_steps_unaligned_P) { prefill_then_decode(tiny_with(2, 6, 4)); }

TEST(layer_gpu, bad_calls_are_rejected) {
  gl::Config c;
  ASSERT_TRUE(gl::preset("tiny", &c));
  const gl::Weights w = gl::synthesize(c, 301);
  std::unique_ptr<gl::GpuLayer> L;
  std::unique_ptr<gl::Workspace> ws;
  ASSERT_TRUE(gl::GpuLayer::create(c, w, 2, &L).ok());
  ASSERT_TRUE(gl::Workspace::create(c, 16, 2, &ws).ok());
  Dev x(64 * c.hidden * 2), y(64 * c.hidden * 2);
  std::vector<std::int32_t> cu = {0, 8, 12};
  std::vector<std::int32_t> dup = {1, 1}, oob = {0, 5};
  EXPECT_FALSE(L->prefill(x.p, y.p, cu.data(), 2, dup.data(), *ws).ok());
  EXPECT_FALSE(L->prefill(x.p, y.p, cu.data(), 2, oob.data(), *ws).ok());
  std::vector<std::int32_t> big = {0, 40};
  std::int32_t s0 = 0;
  EXPECT_FALSE(L->prefill(x.p, y.p, big.data(), 1, &s0, *ws).ok());  // exceeds the workspace
  gl::Weights short_w = w;
  short_w.w_out.pop_back();
  std::unique_ptr<gl::GpuLayer> L2;
  EXPECT_FALSE(gl::GpuLayer::create(c, short_w, 2, &L2).ok());
  std::vector<std::int32_t> ok_slots = {0, 1};
  EXPECT_TRUE(L->prefill(x.p, y.p, cu.data(), 2, ok_slots.data(), *ws).ok());  // control
}

// ---- conv_silu v3 against v2, bit for bit (docs/NOTES.md "layer conv kernel v3") ----
//
// The v3 conv kernel (default) must produce the same bits as v2 (GDN_LAYER_CONV=v2): the conv
// output qkv (read through a test hook), the new conv states, and, downstream of them, y and the
// recurrent states (serial arm: no atomics anywhere, so the rest of the layer is deterministic).
// Negative control: GDN_LAYER_CONV=v3negctl sums v3's taps in the reverse order, which must change
// some bits of qkv.


namespace {

struct ConvRun {
  std::vector<std::uint16_t> qkv, y;
  std::vector<std::vector<float>> conv, ssm;  // per sequence, from its slot
};

// Input rows scaled per token so that the conv sums cover SiLU's whole range: exact zeros (a
// window of zero rows sums to 0), tiny, ordinary and large values (v3's fast path covers
// 2^-40 <= |a| <= 32; the rest goes through silu() as in v2).
std::vector<std::uint16_t> wide_range_input(std::size_t T, int hidden, std::uint64_t seed) {
  static constexpr float kScale[] = {0.f, 0.f, 0.f, 0.f, 1e-18f, 1e-7f, 1.f, 4.f, 12.f, 60.f, 1.f, 0.3f};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<std::uint16_t> v(T * hidden);
  for (std::size_t t = 0; t < T; ++t) {
    const float s = kScale[(t / 3) % (sizeof(kScale) / sizeof(float))];
    for (int h = 0; h < hidden; ++h) v[t * hidden + h] = gl::f32_to_bf16(s * nd(rng));
  }
  return v;
}

// One GPU prefill with GDN_LAYER_CONV = conv and GDN_LAYER_NORM = norm (nullptr: unset), random
// initial states in shuffled slots; the same weights, states and inputs for the same seed.
void run_with_conv(const gl::Config& c, const std::vector<int>& lens, std::uint64_t seed, bool wide,
                   const char* conv, ConvRun* out, const char* norm = nullptr) {
  ASSERT_TRUE(c.validate().ok()) << c.validate().message();
  gdn::testutil::ScopedEnv set_conv("GDN_LAYER_CONV", conv), set_norm("GDN_LAYER_NORM", norm);
  const gl::Weights w = gl::synthesize(c, seed);
  const int N = static_cast<int>(lens.size()), pool = N + 2;
  std::vector<std::int32_t> cu = {0}, slots;
  for (int n = 0; n < N; ++n) cu.push_back(cu.back() + lens[n]), slots.push_back(N + 1 - n);  // distinct, reversed, 0 unused
  const std::int64_t T = cu.back();
  std::unique_ptr<gl::GpuLayer> L;
  gdn::Status st = gl::GpuLayer::create(c, w, pool, &L);
  ASSERT_TRUE(st.ok()) << st.message();
  std::unique_ptr<gl::Workspace> ws;
  ASSERT_TRUE((st = gl::Workspace::create(c, std::max<std::int64_t>(T, 1), N, &ws)).ok()) << st.message();
  ASSERT_NO_FATAL_FAILURE(set_random_states(*L, c, slots, seed + 1, nullptr));
  const auto x16 = wide ? wide_range_input(static_cast<std::size_t>(T), c.hidden, seed + 2)
                        : random_bf16(static_cast<std::size_t>(T) * c.hidden, seed + 2);
  Dev x(x16.size() * 2), y(x16.size() * 2);
  cudaMemcpy(x.p, x16.data(), x16.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(y.p, 0xff, x16.size() * 2);
  st = L->prefill(x.p, y.p, cu.data(), N, slots.data(), *ws, nullptr, gdn::Arm::serial);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE((st = gl::debug_read_conv_output(*ws, T, &out->qkv)).ok()) << st.message();
  out->y.resize(x16.size());
  cudaMemcpy(out->y.data(), y.p, out->y.size() * 2, cudaMemcpyDeviceToHost);
  out->conv.resize(N), out->ssm.resize(N);
  for (int n = 0; n < N; ++n) ASSERT_TRUE(L->get_state(slots[n], &out->conv[n], &out->ssm[n]).ok());
}

template <class T> std::int64_t count_bit_differences(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  std::int64_t d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return d;
}

// v3 (default) vs v2 on one shape: every output bitwise equal.
void expect_conv_v3_equals_v2(const gl::Config& c, const std::vector<int>& lens, std::uint64_t seed,
                              bool wide = false) {
  const std::string ctx = c.name + " HK" + std::to_string(c.HK) + " HV" + std::to_string(c.HV) +
                          " KW" + std::to_string(c.conv_kernel) + " P=" + std::to_string(c.proj_dim()) +
                          " seqs=" + std::to_string(lens.size()) + (wide ? " wide-range x" : "");
  ConvRun v3, v2;
  ASSERT_NO_FATAL_FAILURE(run_with_conv(c, lens, seed, wide, nullptr, &v3)) << ctx;
  ASSERT_NO_FATAL_FAILURE(run_with_conv(c, lens, seed, wide, "v2", &v2)) << ctx;
  ASSERT_FALSE(v3.qkv.empty()) << ctx;
  std::int64_t first = -1;
  for (std::size_t i = 0; i < v3.qkv.size() && first < 0; ++i)
    if (v3.qkv[i] != v2.qkv[i]) first = static_cast<std::int64_t>(i);
  EXPECT_EQ(count_bit_differences(v3.qkv, v2.qkv), 0)
      << ctx << ": qkv differs first at token " << (first < 0 ? -1 : first / c.conv_dim()) << " channel "
      << (first < 0 ? -1 : first % c.conv_dim());
  EXPECT_EQ(count_bit_differences(v3.y, v2.y), 0) << ctx << ": y";
  for (std::size_t n = 0; n < lens.size(); ++n) {
    EXPECT_EQ(count_bit_differences(v3.conv[n], v2.conv[n]), 0) << ctx << ": conv state of seq " << n;
    EXPECT_EQ(count_bit_differences(v3.ssm[n], v2.ssm[n]), 0) << ctx << ": recurrent state of seq " << n;
  }
}

gl::Config with_heads(const char* preset_name, int hidden, int HK, int HV, int KW) {
  gl::Config c;
  EXPECT_TRUE(gl::preset(preset_name, &c));
  c.hidden = hidden;  // the GEMMs' inner size only: small keeps the synthesized weights small
  c.HK = HK, c.HV = HV, c.conv_kernel = KW;
  return c;
}

// Varlen: an empty sequence, sequences shorter than the conv window, starts inside a run.
const std::vector<int> kVarlen = {1, 0, 2, 3, 150, 0, 7, 64, 1, 97};

}  // namespace

// qwen3.5-27b conv geometry (CD = 10240, P = 16480, 16-B path), KW 4: one sequence of 301
// tokens (a partial last group) and the varlen set, nonzero conv states in.
TEST(layer_gpu, conv_v3_bitwise_equals_v2_qwen35_27b_channels) {
  const gl::Config c = with_heads("qwen3.5-27b", 128, 16, 48, 4);
  ASSERT_EQ(c.conv_dim(), 10240);
  ASSERT_EQ(c.proj_dim(), 16480);
  expect_conv_v3_equals_v2(c, {301}, 401);
  expect_conv_v3_equals_v2(c, kVarlen, 402);
}
// qwen3-next-80b conv geometry (CD = 8192, P = 12352).
TEST(layer_gpu, conv_v3_bitwise_equals_v2_qwen3_next_channels) {
  const gl::Config c = with_heads("qwen3-next-80b", 128, 16, 32, 4);
  ASSERT_EQ(c.conv_dim(), 8192);
  expect_conv_v3_equals_v2(c, {5, 0, 260, 2}, 403);
}
// Conv sums over SiLU's whole range (zeros, tiny, large: v3's out-of-range branch), 27b channels
// and the 4-B path.
TEST(layer_gpu, conv_v3_bitwise_equals_v2_wide_range_inputs) {
  expect_conv_v3_equals_v2(with_heads("qwen3.5-27b", 128, 16, 48, 4), {2, 0, 250, 45}, 404, true);
  expect_conv_v3_equals_v2(tiny_with(2, 6, 4), {2, 0, 250, 45}, 405, true);
}
// Odd shapes: every conv width 1..8 on the 16-B path (tiny) and on the 4-B path (P not a multiple
// of 8), many short and empty sequences.
TEST(layer_gpu, conv_v3_bitwise_equals_v2_odd_shapes) {
  const std::vector<int> many = {1, 2, 0, 3, 26, 1, 33, 0, 5, 64, 2, 0, 0, 7, 11, 1, 1, 40};
  for (int kw = 1; kw <= 8; ++kw) {
    expect_conv_v3_equals_v2(tiny_with(2, 4, kw), many, 410 + kw);
    expect_conv_v3_equals_v2(tiny_with(2, 6, kw), many, 420 + kw);
  }
}
// Negative control: the comparison above can fail. v3negctl (taps in the reverse order) must
// change some qkv bits on the 27b shape (16-B path, KW 4), while v2 and v3 agree on the same run.
TEST(layer_gpu, conv_v3_negative_control_differs) {
  const gl::Config c = with_heads("qwen3.5-27b", 128, 16, 48, 4);
  ConvRun v2, neg;
  ASSERT_NO_FATAL_FAILURE(run_with_conv(c, kVarlen, 402, false, "v2", &v2));
  ASSERT_NO_FATAL_FAILURE(run_with_conv(c, kVarlen, 402, false, "v3negctl", &neg));
  const std::int64_t d = count_bit_differences(neg.qkv, v2.qkv);
  EXPECT_GT(d, 0) << "v3negctl produced v2's qkv bit for bit: the comparison cannot fail";
  // y is not required to change: r30 saw 2 of 3.3 M qkv elements move by one bf16 step, which
  // left y's bf16 bits unchanged.
  std::printf("v3negctl: %lld of %zu qkv elements, %lld of %zu y elements differ from v2\n",
              static_cast<long long>(d), neg.qkv.size(),
              static_cast<long long>(count_bit_differences(neg.y, v2.y)), neg.y.size());
}

// gated_norm v3 (default: one row per thread) against GDN_LAYER_NORM=v4 (two rows per thread)
// and =v2 (v3 without the branch-free SiLU of z): y bitwise equal, on the 16-B path (27b heads,
// V = 128) and the one-element path (P not a multiple of 8), with ordinary and wide-range inputs
// (z over SiLU's whole range); the row counts leave partial blocks. Negative control
// (GDN_LAYER_NORM=v4negctl: a thread's second row scaled by its first row's 1 / rms) must differ.
TEST(layer_gpu, norm_v4_bitwise_equals_v3_and_v2) {
  struct Case {
    gl::Config c;
    std::vector<int> lens;
    bool wide;
  };
  const std::vector<Case> cases = {{with_heads("qwen3.5-27b", 128, 16, 48, 4), {3, 0, 200}, false},
                                   {with_heads("qwen3.5-27b", 128, 16, 48, 4), {3, 0, 200}, true},
                                   {tiny_with(2, 6, 4), {37, 0, 2, 70}, false},
                                   {tiny_with(2, 6, 4), {37, 0, 2, 70}, true}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    ConvRun v4, v3, v2, neg;
    ASSERT_NO_FATAL_FAILURE(run_with_conv(k.c, k.lens, 430 + i, k.wide, nullptr, &v4, "v4"));
    ASSERT_NO_FATAL_FAILURE(run_with_conv(k.c, k.lens, 430 + i, k.wide, nullptr, &v3, nullptr));
    ASSERT_NO_FATAL_FAILURE(run_with_conv(k.c, k.lens, 430 + i, k.wide, nullptr, &v2, "v2"));
    ASSERT_NO_FATAL_FAILURE(run_with_conv(k.c, k.lens, 430 + i, k.wide, nullptr, &neg, "v4negctl"));
    EXPECT_EQ(count_bit_differences(v4.qkv, v3.qkv), 0) << "case " << i << ": qkv";
    EXPECT_EQ(count_bit_differences(v4.y, v3.y), 0) << "case " << i << ": y, v4 vs v3";
    EXPECT_EQ(count_bit_differences(v4.y, v2.y), 0) << "case " << i << ": y, v4 vs v2";
    const std::int64_t d = count_bit_differences(neg.y, v4.y);
    std::printf("norm case %zu: v4negctl changes %lld of %zu y elements\n", i,
                static_cast<long long>(d), neg.y.size());
    EXPECT_GT(d, 0) << "case " << i << ": v4negctl produced v4's y: the comparison cannot fail";
  }
}

namespace {
// The layer's prefill captured into a CUDA graph (global mode: a sync or a pageable copy would
// invalidate the capture) and replayed, against an eager call on the same buffers and initial
// states: y and every slot's states bitwise equal. The eager call runs first (as an engine's
// warm-up does). Negative control: a second replay without resetting the states starts from the
// first replay's final states, so its y must differ.
void expect_capture_equals_eager(gdn::Arm arm) {
  const gl::Config c = with_heads("qwen3.5-27b", 256, 16, 48, 4);
  const std::vector<int> lens = {3, 0, 200, 77};
  const std::uint64_t seed = 470;
  const std::string ctx = std::string("arm ") + gdn::to_string(arm);
  const gl::Weights w = gl::synthesize(c, seed);
  const int N = static_cast<int>(lens.size()), pool = N + 2;
  std::vector<std::int32_t> cu = {0}, slots;
  for (int n = 0; n < N; ++n) cu.push_back(cu.back() + lens[n]), slots.push_back(N + 1 - n);
  const std::int64_t T = cu.back();
  std::unique_ptr<gl::GpuLayer> L;
  gdn::Status st = gl::GpuLayer::create(c, w, pool, &L);
  ASSERT_TRUE(st.ok()) << st.message();
  std::unique_ptr<gl::Workspace> ws;
  ASSERT_TRUE((st = gl::Workspace::create(c, T, N, &ws)).ok()) << st.message();
  const auto x16 = random_bf16(static_cast<std::size_t>(T) * c.hidden, seed + 2);
  Dev x(x16.size() * 2), y(x16.size() * 2);
  cudaMemcpy(x.p, x16.data(), x16.size() * 2, cudaMemcpyHostToDevice);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto read = [&](std::vector<std::uint16_t>* yv, std::vector<std::vector<float>>* ssm) {
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    yv->resize(x16.size());
    ASSERT_EQ(cudaMemcpy(yv->data(), y.p, yv->size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ssm->resize(N);
    std::vector<float> conv;
    for (int n = 0; n < N; ++n) ASSERT_TRUE(L->get_state(slots[n], &conv, &(*ssm)[n]).ok());
  };
  std::vector<std::uint16_t> y_eager, y_graph, y_again;
  std::vector<std::vector<float>> s_eager, s_graph, s_again;
  ASSERT_NO_FATAL_FAILURE(set_random_states(*L, c, slots, seed + 1, nullptr));
  ASSERT_TRUE((st = L->prefill(x.p, y.p, cu.data(), N, slots.data(), *ws, s, arm)).ok()) << ctx << ": " << st.message();
  ASSERT_NO_FATAL_FAILURE(read(&y_eager, &s_eager));
  ASSERT_NO_FATAL_FAILURE(set_random_states(*L, c, slots, seed + 1, nullptr));
  ASSERT_EQ(cudaMemset(y.p, 0xff, x16.size() * 2), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  st = L->prefill(x.p, y.p, cu.data(), N, slots.data(), *ws, s, arm);
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  cudaGetLastError();
  ASSERT_TRUE(st.ok()) << ctx << ": under capture: " << st.message();
  ASSERT_EQ(end, cudaSuccess) << ctx << ": capture: " << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess) << ctx;
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess) << ctx;
  ASSERT_NO_FATAL_FAILURE(read(&y_graph, &s_graph));
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess) << ctx;  // negative control: states not reset
  ASSERT_NO_FATAL_FAILURE(read(&y_again, &s_again));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  EXPECT_EQ(count_bit_differences(y_graph, y_eager), 0) << ctx << ": y, graph replay vs eager";
  for (int n = 0; n < N; ++n)
    EXPECT_EQ(count_bit_differences(s_graph[n], s_eager[n]), 0) << ctx << ": recurrent state of seq " << n;
  EXPECT_GT(count_bit_differences(y_again, y_eager), 0)
      << ctx << ": a replay from other initial states gave the same y: the comparison cannot fail";
}
}  // namespace

TEST(layer_gpu, prefill_graph_capture_equals_eager) {
  expect_capture_equals_eager(gdn::Arm::wy_tc);
  expect_capture_equals_eager(gdn::Arm::serial);
}

// A prefill whose recurrence fails (injected: GDN_LAYER_TEST_FAIL=recurrence) returns the error
// and leaves every slot's conv and recurrent state and y as they were, with the slots gathered
// (not consecutive) and in place (consecutive). Negative control: the same call without the
// injection succeeds and changes the states and y.
TEST(layer_gpu, failed_recurrence_leaves_slot_states_and_y_untouched) {
  const gl::Config c = tiny_with(2, 4, 4);
  const std::vector<int> lens = {37, 0, 70};
  const gl::Weights w = gl::synthesize(c, 480);
  const int N = static_cast<int>(lens.size());
  std::vector<std::int32_t> cu = {0};
  for (int n = 0; n < N; ++n) cu.push_back(cu.back() + lens[n]);
  const std::int64_t T = cu.back();
  const auto x16 = random_bf16(static_cast<std::size_t>(T) * c.hidden, 481);
  for (const bool gathered : {true, false}) {
    std::vector<std::int32_t> slots;
    for (int n = 0; n < N; ++n) slots.push_back(gathered ? N - n : n + 1);  // 3 2 1 or 1 2 3
    const std::string ctx = gathered ? "gathered slots" : "consecutive slots";
    std::unique_ptr<gl::GpuLayer> L;
    gdn::Status st = gl::GpuLayer::create(c, w, N + 1, &L);
    ASSERT_TRUE(st.ok()) << st.message();
    std::unique_ptr<gl::Workspace> ws;
    ASSERT_TRUE((st = gl::Workspace::create(c, T, N, &ws)).ok()) << st.message();
    ASSERT_NO_FATAL_FAILURE(set_random_states(*L, c, slots, 482, nullptr));
    Dev x(x16.size() * 2), y(x16.size() * 2);
    cudaMemcpy(x.p, x16.data(), x16.size() * 2, cudaMemcpyHostToDevice);
    cudaMemset(y.p, 0x5a, x16.size() * 2);
    auto snapshot = [&](std::vector<std::vector<float>>* conv, std::vector<std::vector<float>>* ssm,
                        std::vector<std::uint16_t>* yv) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      conv->resize(N), ssm->resize(N);
      for (int n = 0; n < N; ++n) ASSERT_TRUE(L->get_state(slots[n], &(*conv)[n], &(*ssm)[n]).ok());
      yv->resize(x16.size());
      ASSERT_EQ(cudaMemcpy(yv->data(), y.p, yv->size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    };
    std::vector<std::vector<float>> conv0, ssm0, conv1, ssm1, conv2, ssm2;
    std::vector<std::uint16_t> y0, y1, y2;
    ASSERT_NO_FATAL_FAILURE(snapshot(&conv0, &ssm0, &y0));
    {
      gdn::testutil::ScopedEnv fail("GDN_LAYER_TEST_FAIL", "recurrence");
      st = L->prefill(x.p, y.p, cu.data(), N, slots.data(), *ws, nullptr, gdn::Arm::automatic);
    }
    EXPECT_FALSE(st.ok()) << ctx;
    EXPECT_NE(st.message().find("injected failure"), std::string::npos) << ctx << ": " << st.message();
    ASSERT_NO_FATAL_FAILURE(snapshot(&conv1, &ssm1, &y1));
    EXPECT_EQ(count_bit_differences(y1, y0), 0) << ctx << ": y written by a failed prefill";
    for (int n = 0; n < N; ++n) {
      EXPECT_EQ(count_bit_differences(conv1[n], conv0[n]), 0) << ctx << ": conv state of seq " << n;
      EXPECT_EQ(count_bit_differences(ssm1[n], ssm0[n]), 0) << ctx << ": recurrent state of seq " << n;
    }
    // Negative control: the same call, not failed, moves y and the states of non-empty sequences.
    st = L->prefill(x.p, y.p, cu.data(), N, slots.data(), *ws, nullptr, gdn::Arm::automatic);
    ASSERT_TRUE(st.ok()) << ctx << ": " << st.message();
    ASSERT_NO_FATAL_FAILURE(snapshot(&conv2, &ssm2, &y2));
    EXPECT_GT(count_bit_differences(y2, y0), 0) << ctx;
    for (int n : {0, 2}) {
      EXPECT_GT(count_bit_differences(conv2[n], conv0[n]), 0) << ctx << ": conv state of seq " << n;
      EXPECT_GT(count_bit_differences(ssm2[n], ssm0[n]), 0) << ctx << ": recurrent state of seq " << n;
    }
  }
}
