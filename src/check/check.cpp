// Parity harness: fixtures, oracles over a Case, NaN-aware metrics, arm runs on poisoned
// outputs, evaluation with negative controls, the table. Bounds live in bounds.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "check/check.hpp"
#include "check/rng.hpp"
#include "ref/ref.hpp"

#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gdn::check {

// ---- dtype rounding (round to nearest even), shared with tests via check.hpp ----
std::uint16_t f32_to_bf16(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>(b >> 16);
}
float bf16_to_f32(std::uint16_t h) {
  const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
std::uint16_t f32_to_f16(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float f16_to_f32(std::uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
float round_to(DType d, float x) {
  switch (d) {
    case DType::bf16: return bf16_to_f32(f32_to_bf16(x));
    case DType::f16: return f16_to_f32(f32_to_f16(x));
    default: return x;
  }
}

namespace {

// splitmix64: portable, so fixtures are identical on every platform and standard library.
using Rng = SplitMix64;

const char* decay_name(Decay d) {
  switch (d) {
    case Decay::none: return "gnone";
    case Decay::slow: return "gslow";
    case Decay::fast: return "gfast";
    case Decay::extreme: return "gext";
  }
  return "g?";
}
const char* beta_name(BetaKind b) {
  switch (b) {
    case BetaKind::zero: return "b0";
    case BetaKind::one: return "b1";
    case BetaKind::random: return "brand";
  }
  return "b?";
}

ref::Geometry geometry(const Case& c) {
  ref::Geometry geo;
  geo.N = static_cast<int>(c.cu_seqlens.size()) - 1;
  geo.cu = c.cu_seqlens.data();
  geo.HK = c.prob.HK;
  geo.HV = c.prob.HV;
  geo.K = c.prob.K;
  geo.V = c.prob.V;
  geo.tiled = c.prob.head_map == HeadMap::tiled;
  geo.scale = c.prob.scale;
  geo.l2norm = c.prob.qk_l2norm;
  geo.state_vk = c.prob.state_layout == StateLayout::vk;
  return geo;
}

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::int64_t state_numel(const Case& c) {
  return static_cast<std::int64_t>(c.cu_seqlens.size() - 1) * c.prob.HV * c.prob.K * c.prob.V;
}

}  // namespace

std::string CaseSpec::name() const {
  std::string s;
  if (seq_lens.size() == 1) {
    s = fmt::format("T{}", seq_lens[0]);
  } else {
    s = "L";
    for (std::size_t i = 0; i < seq_lens.size(); ++i)
      s += fmt::format("{}{}", i ? "x" : "", seq_lens[i]);
  }
  s += fmt::format("_HK{}_HV{}_", HK, HV);
  s += K == V ? fmt::format("K{}", K) : fmt::format("K{}V{}", K, V);
  s += fmt::format("_{}", to_string(io_dtype));
  if (out_dtype != io_dtype) s += fmt::format("_o{}", to_string(out_dtype));
  if (beta_dtype != DType::f32) s += fmt::format("_beta{}", to_string(beta_dtype));
  s += fmt::format("_{}_{}_{}_{}", decay_name(decay), beta_name(beta), h0 ? "h0" : "noh0",
                   to_string(head_map));
  if (l2norm_in_kernel) s += "_l2n";
  if (state_layout == StateLayout::vk) s += "_vk";
  return s;
}

PrefillArgs Case::host_args(void* o, void* hT) const {
  PrefillArgs a;
  const DType io = spec.io_dtype;
  const bool h16 = io != DType::f32;
  const int HK = prob.HK, HV = prob.HV, K = prob.K, V = prob.V;
  a.q = TensorView::contiguous(h16 ? (const void*)q16.data() : q32.data(), io, {T, HK, K});
  a.k = TensorView::contiguous(h16 ? (const void*)k16.data() : k32.data(), io, {T, HK, K});
  a.v = TensorView::contiguous(h16 ? (const void*)v16.data() : v32.data(), io, {T, HV, V});
  a.g = TensorView::contiguous(g.data(), DType::f32, {T, HV});
  a.beta = TensorView::contiguous(
      spec.beta_dtype == DType::bf16 ? (const void*)beta16.data() : beta32.data(),
      spec.beta_dtype, {T, HV});
  a.o = TensorView::contiguous(o, spec.out_dtype, {T, HV, V});
  const int N = static_cast<int>(cu_seqlens.size()) - 1;
  const bool vk = prob.state_layout == StateLayout::vk;
  const std::int64_t s2 = vk ? V : K, s3 = vk ? K : V;
  if (spec.h0) a.h0 = TensorView::contiguous(h0.data(), DType::f32, {N, HV, s2, s3});
  if (hT) a.hT = TensorView::contiguous(hT, DType::f32, {N, HV, s2, s3});
  a.cu_seqlens = cu_seqlens.data();
  a.num_seqs = N;
  return a;
}

double Case::q_at(std::int64_t i) const { return q32[i]; }

Case make_case(const CaseSpec& spec, std::uint64_t seed) {
  Case c;
  c.spec = spec;
  c.prob = Problem::make(spec.HK, spec.HV, spec.K, spec.V);
  c.prob.head_map = spec.head_map;
  c.prob.qk_l2norm = spec.l2norm_in_kernel;
  c.prob.state_layout = spec.state_layout;
  c.cu_seqlens.push_back(0);
  for (int L : spec.seq_lens) c.cu_seqlens.push_back(c.cu_seqlens.back() + L);
  c.T = c.cu_seqlens.back();
  // Data depend on the seed and the shapes only (not on head map or dtype), so two specs that
  // differ in those options see the same underlying values.
  Rng rng{seed * 0x2545f4914f6cdd1dull + 0x1234567ull};
  const int HK = spec.HK, HV = spec.HV, K = spec.K, V = spec.V;
  const DType io = spec.io_dtype;
  auto fill_qk = [&](std::vector<float>& x32, std::vector<std::uint16_t>& x16) {
    x32.resize(c.T * HK * K);
    std::vector<double> row(K);
    for (std::int64_t r = 0; r < c.T * HK; ++r) {
      double ss = 0;
      for (int d = 0; d < K; ++d) ss += (row[d] = rng.normal()) * row[d];
      const double inv = spec.l2norm_in_kernel ? 1.0 : 1.0 / std::sqrt(ss);
      for (int d = 0; d < K; ++d) x32[r * K + d] = round_to(io, static_cast<float>(row[d] * inv));
    }
    if (io == DType::bf16)
      for (float x : x32) x16.push_back(f32_to_bf16(x));
    else if (io == DType::f16)
      for (float x : x32) x16.push_back(f32_to_f16(x));
  };
  fill_qk(c.q32, c.q16);
  fill_qk(c.k32, c.k16);
  c.v32.resize(c.T * HV * V);
  for (auto& x : c.v32) x = round_to(io, static_cast<float>(rng.normal()));
  if (io == DType::bf16)
    for (float x : c.v32) c.v16.push_back(f32_to_bf16(x));
  else if (io == DType::f16)
    for (float x : c.v32) c.v16.push_back(f32_to_f16(x));
  c.g.resize(c.T * HV);
  for (auto& x : c.g) {
    switch (spec.decay) {
      case Decay::none: x = 0.f; break;
      case Decay::slow: x = static_cast<float>(-rng.uniform(0.01, 0.05)); break;
      case Decay::fast: x = static_cast<float>(-rng.uniform(0.5, 2.0)); break;
      case Decay::extreme: x = -20.f; break;
    }
  }
  c.beta32.resize(c.T * HV);
  for (auto& x : c.beta32) {
    const double b = spec.beta == BetaKind::zero ? 0.0 : spec.beta == BetaKind::one ? 1.0
                                                                                   : rng.uniform();
    x = round_to(spec.beta_dtype, static_cast<float>(b));
    if (spec.beta_dtype == DType::bf16) c.beta16.push_back(f32_to_bf16(x));
  }
  if (spec.h0) {
    c.h0.resize(state_numel(c));
    for (auto& x : c.h0) x = static_cast<float>(rng.normal());
  }
  return c;
}

std::vector<CaseSpec> fixture_set(bool quick) {
  std::vector<CaseSpec> f;
  auto add = [&](auto mod) {
    CaseSpec s;
    mod(s);
    f.push_back(s);
  };
  using D = DType;
  // T = 1: a single step, through a chunk of one.
  add([](CaseSpec& s) { s.seq_lens = {1}; });
  // T = 37, fast decay, no h0, tiled map with HV/HK = 3.
  add([](CaseSpec& s) {
    s.seq_lens = {37}; s.HK = 2; s.HV = 6; s.decay = Decay::fast; s.h0 = false;
    s.head_map = HeadMap::tiled;
  });
  // T = 63 (one short of a chunk), no decay, beta = 1, fp32 io.
  add([](CaseSpec& s) {
    s.seq_lens = {63}; s.decay = Decay::none; s.beta = BetaKind::one; s.io_dtype = D::f32;
    s.out_dtype = D::f32;
  });
  // T = 64 (exactly one chunk), extreme decay (exp underflows), f16 io, tiled.
  add([](CaseSpec& s) {
    s.seq_lens = {64}; s.decay = Decay::extreme; s.io_dtype = D::f16; s.out_dtype = D::f16;
    s.head_map = HeadMap::tiled;
  });
  // T = 65 (a chunk plus one), beta = 0 (state only decays), K = V = 64, HK = 1.
  add([](CaseSpec& s) {
    s.seq_lens = {65}; s.beta = BetaKind::zero; s.K = 64; s.V = 64; s.HK = 1; s.HV = 3;
  });
  // T = 200, K != V, f32 output from bf16 inputs, bf16 beta, tiled.
  add([](CaseSpec& s) {
    s.seq_lens = {200}; s.K = 64; s.V = 128; s.out_dtype = D::f32; s.beta_dtype = D::bf16;
    s.head_map = HeadMap::tiled;
  });
  // T = 129, no decay, beta = 1, no h0: the least damped state.
  add([](CaseSpec& s) {
    s.seq_lens = {129}; s.decay = Decay::none; s.beta = BetaKind::one; s.h0 = false;
  });
  // Varlen with a zero-length sequence (its hT must equal its h0), fast decay, tiled.
  add([](CaseSpec& s) {
    s.seq_lens = {37, 0, 130, 64}; s.decay = Decay::fast; s.head_map = HeadMap::tiled;
  });
  // q/k normalized inside the kernel (generator leaves them raw).
  add([](CaseSpec& s) { s.seq_lens = {100}; s.l2norm_in_kernel = true; });
  // [V, K] state layout with K != V.
  add([](CaseSpec& s) {
    s.seq_lens = {150}; s.HK = 1; s.HV = 2; s.K = 64; s.V = 128; s.decay = Decay::fast;
    s.state_layout = StateLayout::vk;
  });
  if (!quick) {
    // Long: 65 chunks, slow decay (long memory), grouped.
    add([](CaseSpec& s) { s.seq_lens = {4099}; s.HK = 1; s.HV = 2; });
  }
  return f;
}

Oracle ref_serial(const Case& c) {
  Oracle r;
  const auto geo = geometry(c);
  r.o.assign(c.T * c.prob.HV * c.prob.V, 0.0);
  r.hT.assign(state_numel(c), 0.0);
  const auto q = to_double(c.q32), k = to_double(c.k32), v = to_double(c.v32),
             g = to_double(c.g), b = to_double(c.beta32), h0 = to_double(c.h0);
  ref::serial(geo, q.data(), k.data(), v.data(), g.data(), b.data(),
              c.spec.h0 ? h0.data() : nullptr, r.o.data(), r.hT.data());
  return r;
}

Oracle ref_chunked(const Case& c, int chunk) {
  Oracle r;
  const auto geo = geometry(c);
  r.o.assign(c.T * c.prob.HV * c.prob.V, 0.0);
  r.hT.assign(state_numel(c), 0.0);
  const auto q = to_double(c.q32), k = to_double(c.k32), v = to_double(c.v32),
             g = to_double(c.g), b = to_double(c.beta32), h0 = to_double(c.h0);
  ref::chunked(geo, q.data(), k.data(), v.data(), g.data(), b.data(),
               c.spec.h0 ? h0.data() : nullptr, r.o.data(), r.hT.data(), chunk);
  return r;
}

Metrics compare(const std::vector<double>& ref, const std::vector<double>& got) {
  Metrics m;
  m.n = static_cast<std::int64_t>(ref.size());
  const double inf = std::numeric_limits<double>::infinity();
  if (got.size() != ref.size()) {
    m.rel_rms = m.max_abs = inf;
    m.nan_count = m.n;
    return m;
  }
  double d2 = 0, r2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) {
      // A non-finite value on either side is a mismatch unless both are the same non-finite.
      if (!(std::isnan(got[i]) && std::isnan(ref[i])) && got[i] != ref[i]) ++m.nan_count;
      continue;
    }
    const double d = got[i] - ref[i];
    d2 += d * d;
    r2 += ref[i] * ref[i];
    m.max_abs = std::max(m.max_abs, std::abs(d));
  }
  if (m.nan_count > 0) {
    m.rel_rms = m.max_abs = inf;
  } else if (r2 > 0) {
    m.rel_rms = std::sqrt(d2 / r2);
  } else {
    m.rel_rms = d2 > 0 ? inf : 0.0;  // zero reference: only an exact zero passes
  }
  return m;
}

ArmOutput run_arm(Arm arm, const Case& c, bool on_device) {
  ArmOutput out;
  const std::int64_t no = c.T * c.prob.HV * c.prob.V, ns = state_numel(c);
  const DType od = c.spec.out_dtype;
  // Poison: every output element starts as NaN, so an unwritten element fails the check.
  std::vector<float> o32(od == DType::f32 ? no : 0, std::numeric_limits<float>::quiet_NaN());
  std::vector<std::uint16_t> o16(od == DType::f32 ? 0 : no, od == DType::bf16 ? 0x7fc0 : 0x7e00);
  std::vector<float> hT(ns, std::numeric_limits<float>::quiet_NaN());
  void* o_host = od == DType::f32 ? static_cast<void*>(o32.data()) : o16.data();
  PrefillArgs a = c.host_args(o_host, hT.data());
  RunInfo info;
  if (!on_device) {
    out.status = prefill(c.prob, a, arm, &info);
  } else {
#ifdef GDN_WITH_CUDA
    std::vector<void*> allocs;
    auto fail = [&](cudaError_t e, const char* what) {
      out.status = Status::Cuda(fmt::format("{}: {}", what, cudaGetErrorString(e)));
      for (void* p : allocs) cudaFree(p);
      return out;
    };
    auto up = [&](TensorView& t) -> cudaError_t {
      if (!t.defined()) return cudaSuccess;
      const std::size_t bytes = t.numel() * dtype_size(t.dtype);
      void* d = nullptr;
      if (auto e = cudaMalloc(&d, std::max<std::size_t>(bytes, 4)); e != cudaSuccess) return e;
      allocs.push_back(d);
      if (auto e = cudaMemcpy(d, t.data, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) return e;
      t.data = d;
      return cudaSuccess;
    };
    PrefillArgs d = a;
    for (TensorView* t : {&d.q, &d.k, &d.v, &d.g, &d.beta, &d.o, &d.h0, &d.hT})
      if (auto e = up(*t); e != cudaSuccess) return fail(e, "cudaMalloc/cudaMemcpy (inputs)");
    std::int32_t* dcu = nullptr;
    const std::size_t cub = c.cu_seqlens.size() * sizeof(std::int32_t);
    if (auto e = cudaMalloc(&dcu, cub); e != cudaSuccess) return fail(e, "cudaMalloc(cu_seqlens)");
    allocs.push_back(dcu);
    if (auto e = cudaMemcpy(dcu, c.cu_seqlens.data(), cub, cudaMemcpyHostToDevice);
        e != cudaSuccess)
      return fail(e, "cudaMemcpy(cu_seqlens)");
    d.cu_seqlens_device = dcu;
    d.on_device = true;
    out.status = prefill(c.prob, d, arm, &info);
    if (auto e = cudaDeviceSynchronize(); e != cudaSuccess && out.status.ok())
      out.status = Status::Cuda(fmt::format("after prefill: {}", cudaGetErrorString(e)));
    if (d.o.defined() && no > 0)
      if (auto e = cudaMemcpy(o_host, d.o.data, no * dtype_size(od), cudaMemcpyDeviceToHost);
          e != cudaSuccess)
        return fail(e, "cudaMemcpy(o)");
    if (ns > 0)
      if (auto e = cudaMemcpy(hT.data(), d.hT.data, ns * 4, cudaMemcpyDeviceToHost);
          e != cudaSuccess)
        return fail(e, "cudaMemcpy(hT)");
    for (void* p : allocs) cudaFree(p);
#else
    out.status = Status::Unsupported("device run requested but this build has no CUDA");
    return out;
#endif
  }
  out.ran = info.ran;
  out.o.resize(no);
  for (std::int64_t i = 0; i < no; ++i)
    out.o[i] = od == DType::f32 ? o32[i] : od == DType::bf16 ? bf16_to_f32(o16[i])
                                                             : f16_to_f32(o16[i]);
  out.hT.assign(hT.begin(), hT.end());
  return out;
}

std::vector<double> perturb(const std::vector<double>& ref, const std::vector<double>& got,
                            double rel) {
  double r2 = 0;
  for (double x : ref)
    if (std::isfinite(x)) r2 += x * x;
  const double n = static_cast<double>(std::max<std::size_t>(ref.size(), 1));
  // Step of rel-RMS size `rel` along a deterministic +-1 pattern; an absolute 1 for a zero ref.
  const double step = r2 > 0 ? rel * std::sqrt(r2 / n) : 1.0;
  std::vector<double> p(got);
  Rng rng{0x5eedull};
  for (auto& x : p) x += (rng.next() & 1) ? step : -step;
  return p;
}

bool within(const Metrics& m, double bound) { return m.nan_count == 0 && m.rel_rms <= bound; }

Row evaluate(Arm arm, const Case& c, const Oracle& ref, bool on_device) {
  Row r;
  r.arm = to_string(arm);
  r.fixture = c.spec.name();
  const ArmOutput out = run_arm(arm, c, on_device);
  Arm ran = arm;
  if (!out.status.ok()) {
    r.error = out.status.message();
  } else {
    ran = out.ran;
    if (ran != arm) r.arm = fmt::format("{}->{}", to_string(arm), to_string(ran));
  }
  r.bound = derive_bound(ran == Arm::automatic ? Arm::cpu : ran, c);
  // Without an arm output the negative control runs on the oracle itself.
  const std::vector<double>& go = out.status.ok() ? out.o : ref.o;
  const std::vector<double>& gs = out.status.ok() ? out.hT : ref.hT;
  r.o = compare(ref.o, go);
  r.state = compare(ref.hT, gs);
  r.util_o = r.bound.o > 0 ? r.o.rel_rms / r.bound.o : INFINITY;
  r.util_state = r.bound.state > 0 ? r.state.rel_rms / r.bound.state : INFINITY;
  r.pass = out.status.ok() && within(r.o, r.bound.o) && within(r.state, r.bound.state);
  const bool o_ctrl = !within(compare(ref.o, perturb(ref.o, go, 2.5 * r.bound.o)), r.bound.o);
  const bool s_ctrl =
      !within(compare(ref.hT, perturb(ref.hT, gs, 2.5 * r.bound.state)), r.bound.state);
  // An empty tensor (T = 0) has nothing to perturb; its control is vacuous by construction.
  r.negative_control_failed = (o_ctrl || ref.o.empty()) && (s_ctrl || ref.hT.empty());
  return r;
}

std::string format_table(const std::vector<Row>& rows) {
  std::string s = fmt::format("{:<16} {:<62} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>5} {:>4}  {}\n",
                              "arm", "fixture", "o_err", "o_bound", "o_util", "st_err",
                              "st_bound", "s_util", "nctl", "pass", "note");
  for (const Row& r : rows) {
    std::string note = r.error;
    if (r.o.nan_count || r.state.nan_count)
      note += fmt::format("{}non-finite: o {} state {}", note.empty() ? "" : "; ", r.o.nan_count,
                          r.state.nan_count);
    s += fmt::format("{:<16} {:<62} {:>9.2e} {:>9.2e} {:>6.3f} {:>9.2e} {:>9.2e} {:>6.3f} {:>5} {:>4}  {}\n",
                     r.arm, r.fixture, r.o.rel_rms, r.bound.o, r.util_o, r.state.rel_rms,
                     r.bound.state, r.util_state, r.negative_control_failed ? "ok" : "BAD",
                     r.pass ? "ok" : "FAIL", note);
  }
  return s;
}

}  // namespace gdn::check
