// Decode / verify API layer: validation, normalization into a DecodeLaunch, dispatch to the CUDA
// kernel (device tensors) or the fp32 host implementation (host tensors, also the CI path).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/internal.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "gdn/decode.hpp"

namespace gdn {
namespace {

std::string shape_str(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

// Rank, shape, dtype and innermost-contiguous check (the prefill API's rules).
Status check_view(const std::string& n, const TensorView& t, std::vector<std::int64_t> shape,
                  std::initializer_list<DType> dtypes, bool need_contiguous) {
  if (!t.defined()) return Status::Invalid(n + ": null data pointer");
  if (t.rank != static_cast<int>(shape.size()))
    return Status::Invalid(n + ": expected rank " + std::to_string(shape.size()) + ", got " +
                           std::to_string(t.rank));
  std::string want = "[";
  bool match = true;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    want += (d ? ", " : "") + std::to_string(shape[d]);
    match &= t.shape[d] == shape[d];
  }
  if (!match) return Status::Invalid(n + ": expected shape " + want + "], got " + shape_str(t));
  bool ok = false;
  std::string dts;
  for (DType d : dtypes) {
    ok |= d == t.dtype;
    if (!dts.empty()) dts += '|';
    dts += to_string(d);
  }
  if (!ok) return Status::Invalid(n + ": dtype " + to_string(t.dtype) + " not accepted (want " + dts + ")");
  for (int i = 0; i < t.rank; ++i)
    if (t.stride[i] < 0) return Status::Invalid(n + ": negative strides are not supported");
  if (t.rank > 0 && t.shape[t.rank - 1] > 1 && t.stride[t.rank - 1] != 1)
    return Status::Invalid(n + ": innermost dimension must be contiguous (stride 1)");
  if (need_contiguous && !t.is_contiguous()) return Status::Invalid(n + ": must be contiguous");
  return Status::Ok();
}

// Host-side index checks: live slots in [0, S), distinct; accepted counts in [0, T]. Either
// array may be null (not checked).
Status check_indices(const std::int32_t* idx, const std::int32_t* acc, int N, std::int64_t S,
                     int T) {
  std::vector<std::pair<std::int32_t, int>> live;
  live.reserve(idx ? N : 0);
  for (int n = 0; idx && n < N; ++n) {
    if (idx[n] < 0) continue;
    if (idx[n] >= S)
      return Status::Invalid("state_indices[" + std::to_string(n) + "] = " +
                             std::to_string(idx[n]) + " is out of range (state pool has " +
                             std::to_string(S) + " slots)");
    live.emplace_back(idx[n], n);
  }
  std::sort(live.begin(), live.end());
  for (std::size_t i = 1; i < live.size(); ++i)
    if (live[i].first == live[i - 1].first)
      return Status::Invalid("state_indices[" + std::to_string(live[i - 1].second) + "] and [" +
                             std::to_string(live[i].second) + "] both name live slot " +
                             std::to_string(live[i].first) + " (duplicates would race)");
  if (acc)
    for (int n = 0; n < N; ++n)
      if (acc[n] < 0 || acc[n] > T)
        return Status::Invalid("num_accepted[" + std::to_string(n) + "] = " +
                               std::to_string(acc[n]) + " is outside [0, T=" + std::to_string(T) +
                               "]");
  return Status::Ok();
}

Status validate_impl(const Problem& p, const DecodeArgs& a, bool verify, detail::DecodeLaunch* L) {
  if (Status st = detail::validate_problem(p); !st.ok()) return st;

  const int rq = verify ? 4 : 3;  // rank of q/k/v/o
  if (a.q.rank != rq)
    return Status::Invalid(std::string("q: expected rank ") + std::to_string(rq) +
                           (verify ? " [N, T, HK, K]" : " [N, HK, K]") + ", got rank " +
                           std::to_string(a.q.rank));
  const std::int64_t N = a.q.shape[0];
  const std::int64_t T = verify ? a.q.shape[1] : 1;
  if (N < 0 || N > INT32_MAX) return Status::Invalid("q: bad sequence count " + std::to_string(N));
  if (verify && (T < 1 || T > 16))
    return Status::Invalid("verify: T = " + std::to_string(T) + " draft tokens (need 1..16)");
  auto tok = [&](std::initializer_list<std::int64_t> tail) {
    std::vector<std::int64_t> s{N};
    if (verify) s.push_back(T);
    s.insert(s.end(), tail);
    return s;
  };
  const DType io = a.q.dtype;
  Status st;
  if (!(st = check_view("q", a.q, tok({p.HK, p.K}), {DType::bf16, DType::f16, DType::f32}, false)).ok())
    return st;
  if (!(st = check_view("k", a.k, tok({p.HK, p.K}), {io}, false)).ok()) return st;
  if (!(st = check_view("v", a.v, tok({p.HV, p.V}), {io}, false)).ok()) return st;
  if (!(st = check_view("o", a.o, tok({p.HV, p.V}), {io, DType::f32}, false)).ok()) return st;
  const bool fused = !a.g.defined();
  if (fused) {
    if (!a.A_log.defined() || !a.a.defined() || !a.dt_bias.defined())
      return Status::Invalid("gate: give g, or all of A_log, a and dt_bias (fused gate)");
    if (!(st = check_view("A_log", a.A_log, {p.HV}, {DType::f32}, false)).ok()) return st;
    if (!(st = check_view("dt_bias", a.dt_bias, {p.HV}, {DType::f32}, false)).ok()) return st;
    if (!(st = check_view("a", a.a, tok({p.HV}), {DType::f32, DType::bf16, DType::f16}, false)).ok())
      return st;
  } else {
    if (a.A_log.defined() || a.a.defined() || a.dt_bias.defined())
      return Status::Invalid("gate: give either g or the fused gate (A_log, a, dt_bias), not both");
    if (!(st = check_view("g", a.g, tok({p.HV}), {DType::f32}, false)).ok()) return st;
  }
  if (!(st = check_view("beta", a.beta, tok({p.HV}), {DType::f32, DType::bf16}, false)).ok())
    return st;
  const bool vk = p.state_layout == StateLayout::vk;
  if (a.state.rank != 4) return Status::Invalid("state: expected rank 4 [S, HV, K, V]");
  const std::int64_t S = a.state.shape[0];
  st = check_view("state", a.state, {S, p.HV, vk ? p.V : p.K, vk ? p.K : p.V},
                  {DType::f32, DType::bf16}, true);
  if (!st.ok())
    return Status::Invalid(st.message() + (vk ? " (layout [S, HV, V, K])" : " (layout [S, HV, K, V])"));
  if (N > 0 && !a.state_indices) return Status::Invalid("state_indices: null pointer");
  if (!verify && (a.num_accepted || a.num_accepted_host))
    return Status::Invalid("num_accepted is a verify() argument; decode() commits its one token");
  if (!a.on_device && (a.error_flag || a.state_indices_host || a.num_accepted_host))
    return Status::Invalid("error_flag / *_host index copies are for device calls only (host "
                           "indices are always validated)");
  if (a.on_device && a.num_accepted_host && !a.num_accepted)
    return Status::Invalid("num_accepted_host given without the device num_accepted");

  // Outputs (o, state cache) must not overlap inputs or the state pool.
  auto range = [](const void* p, std::size_t bytes) {
    auto lo = reinterpret_cast<std::uintptr_t>(p);
    return std::pair{lo, lo + bytes};
  };
  auto view_range = [&](const TensorView& t) {
    std::int64_t last = 0;
    for (int d = 0; d < t.rank; ++d) {
      if (t.shape[d] == 0) return range(t.data, 0);
      last += (t.shape[d] - 1) * t.stride[d];
    }
    return range(t.data, static_cast<std::size_t>(last + 1) * dtype_size(t.dtype));
  };
  auto hit = [](std::pair<std::uintptr_t, std::uintptr_t> x, std::pair<std::uintptr_t, std::uintptr_t> y) {
    return x.first < y.second && y.first < x.second && x.first != x.second && y.first != y.second;
  };
  const auto o_r = view_range(a.o);
  const std::size_t cache_bytes = static_cast<std::size_t>(N) * T * p.HV * p.K * p.V *
                                  dtype_size(a.state.dtype);
  const auto c_r = range(a.state_cache, a.state_cache ? cache_bytes : 0);
  for (auto [n, t] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v},
                      {"g", &a.g}, {"a", &a.a}, {"beta", &a.beta}, {"state", &a.state}}) {
    if (!t->defined()) continue;
    if (hit(o_r, view_range(*t))) return Status::Invalid(std::string("o overlaps ") + n);
    if (hit(c_r, view_range(*t))) return Status::Invalid(std::string("state_cache overlaps ") + n);
  }
  if (hit(o_r, c_r)) return Status::Invalid("o overlaps state_cache");

  if (!a.on_device) {
    if (N > 0 && !(st = check_indices(a.state_indices, a.num_accepted, int(N), S, int(T))).ok())
      return st;
  } else if (a.state_indices_host || a.num_accepted_host) {
    // The host copies stand in for the device arrays (a null one is checked on the device).
    st = check_indices(a.state_indices_host, a.num_accepted_host, int(N), S, int(T));
    if (!st.ok()) return st;
  }

  if (L) {
    auto& l = *L;
    l.N = static_cast<int>(N);
    l.T = static_cast<int>(T);
    l.HK = p.HK, l.HV = p.HV, l.K = p.K, l.V = p.V, l.S = S;
    l.io = io, l.o_dtype = a.o.dtype, l.state_dtype = a.state.dtype;
    l.beta_dtype = a.beta.dtype, l.a_dtype = fused ? a.a.dtype : DType::f32;
    l.grouped = p.head_map == HeadMap::grouped, l.l2norm = p.qk_l2norm;
    l.fused_gate = fused, l.beta_sigmoid = a.beta_sigmoid, l.vk = vk, l.scale = p.scale;
    const int o3 = verify ? 1 : 0;  // index of the head dimension minus one
    auto tstride = [&](const TensorView& t) { return verify ? t.stride[1] : std::int64_t{0}; };
    l.q = a.q.data, l.q_sn = a.q.stride[0], l.q_st = tstride(a.q), l.q_sh = a.q.stride[1 + o3];
    l.k = a.k.data, l.k_sn = a.k.stride[0], l.k_st = tstride(a.k), l.k_sh = a.k.stride[1 + o3];
    l.v = a.v.data, l.v_sn = a.v.stride[0], l.v_st = tstride(a.v), l.v_sh = a.v.stride[1 + o3];
    l.o = a.o.data, l.o_sn = a.o.stride[0], l.o_st = tstride(a.o), l.o_sh = a.o.stride[1 + o3];
    if (fused) {
      l.A_log = static_cast<const float*>(a.A_log.data);
      l.dt_bias = static_cast<const float*>(a.dt_bias.data);
      l.a = a.a.data, l.a_sn = a.a.stride[0], l.a_st = tstride(a.a);
    } else {
      l.g = static_cast<const float*>(a.g.data), l.g_sn = a.g.stride[0], l.g_st = tstride(a.g);
    }
    l.beta = a.beta.data, l.beta_sn = a.beta.stride[0], l.beta_st = tstride(a.beta);
    l.state = a.state.data, l.cache = a.state_cache;
    l.idx = a.state_indices, l.acc = a.num_accepted, l.err = a.error_flag, l.stream = a.stream;
  }
  return Status::Ok();
}

Status run(const Problem& p, const DecodeArgs& a, bool verify) {
  detail::DecodeLaunch L;
  Status st = validate_impl(p, a, verify, &L);
  if (!st.ok()) return st;
#ifdef GDN_WITH_CUDA
  const void* ptrs[] = {a.q.data, a.k.data, a.v.data, a.o.data, a.g.data, a.a.data,
                        a.A_log.data, a.dt_bias.data, a.beta.data, a.state.data,
                        a.state_cache, a.state_indices, a.num_accepted, a.error_flag};
  for (const void* ptr : ptrs) {
    if (!ptr) continue;
    const int kind = detail::cuda_pointer_kind(ptr);
    if (a.on_device && kind == 0)
      return Status::Invalid("on_device=true but a tensor or index array is in host memory");
    if (!a.on_device && kind == 1)
      return Status::Invalid("on_device=false but a tensor or index array is in device memory");
  }
  if (a.on_device) {
    std::string why;
    if (!detail::cuda_decode_supports(L, &why)) return Status::Unsupported(why);
    return detail::cuda_decode(L);
  }
#else
  if (a.on_device) return Status::Unsupported("decode on device tensors needs a CUDA build");
#endif
  return detail::cpu_decode(L);
}

}  // namespace

Status validate_decode(const Problem& p, const DecodeArgs& a, bool verify) {
  return validate_impl(p, a, verify, nullptr);
}
Status decode(const Problem& p, const DecodeArgs& a) { return run(p, a, false); }
Status verify(const Problem& p, const DecodeArgs& a) { return run(p, a, true); }

double decode_state_bytes(const Problem& p, DType state_dtype, std::int64_t live_seqs, int T,
                          bool with_cache) {
  const double tile = double(p.HV) * p.K * p.V * dtype_size(state_dtype);
  return double(live_seqs) * tile * (2.0 + (with_cache ? T : 0));
}

// ---- fp32 host implementation: the direct form of DESIGN.md §1, one (n, h) at a time ----
namespace detail {
namespace {

float bf16_to_f32(std::uint16_t b) {
  std::uint32_t w = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
std::uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  std::uint32_t w;
  std::memcpy(&w, &f, 4);
  if ((w & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((w >> 16) | 0x40);
  w += 0x7fffu + ((w >> 16) & 1u);
  return std::uint16_t(w >> 16);
}
float f16_to_f32(std::uint16_t h) {
  const std::uint32_t s = (h >> 15) & 1u, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) f = std::ldexp(float(m), -24);
  else if (e == 31) f = m ? NAN : INFINITY;
  else f = std::ldexp(float(m | 0x400u), int(e) - 25);
  return s ? -f : f;
}
std::uint16_t f32_to_f16(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.f) return sign | 0x7c00;
  if (a < std::ldexp(1.f, -14)) {  // subnormal: units of 2^-24, round to nearest even
    return sign | std::uint16_t(std::nearbyint(std::ldexp(a, 24)));
  }
  int ex;
  float fr = std::frexp(a, &ex);  // a = fr * 2^ex, fr in [0.5, 1)
  float mant = std::nearbyint(std::ldexp(fr, 11));  // 11 significant bits
  if (mant >= 2048.f) mant /= 2.f, ++ex;
  const int e = ex - 1 + 15;
  return sign | std::uint16_t(e << 10) | std::uint16_t(std::uint32_t(mant) & 0x3ffu);
}
float load(const void* p, DType d, std::int64_t i) {
  switch (d) {
    case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
void store(void* p, DType d, std::int64_t i, float x) {
  switch (d) {
    case DType::bf16: static_cast<std::uint16_t*>(p)[i] = f32_to_bf16(x); break;
    case DType::f16: static_cast<std::uint16_t*>(p)[i] = f32_to_f16(x); break;
    default: static_cast<float*>(p)[i] = x;
  }
}

}  // namespace

Status cpu_decode(const DecodeLaunch& L) {
  const int K = L.K, V = L.V;
  std::vector<float> S(std::size_t(K) * V), q(K), k(K), u(V);
  const std::int64_t tile = std::int64_t(K) * V;
  auto at = [&](int i, int j) { return L.vk ? std::int64_t(j) * K + i : std::int64_t(i) * V + j; };
  for (int n = 0; n < L.N; ++n) {
    const int slot = L.idx[n];
    if (slot < 0) continue;
    const int acc = L.acc ? L.acc[n] : L.T;
    for (int h = 0; h < L.HV; ++h) {
      const int kh = L.grouped ? h / (L.HV / L.HK) : h % L.HK;
      const std::int64_t base = (std::int64_t(slot) * L.HV + h) * tile;
      for (std::int64_t e = 0; e < tile; ++e) S[e] = load(L.state, L.state_dtype, base + e);
      for (int t = 0; t < L.T; ++t) {
        float sq = 0.f, sk = 0.f;
        for (int i = 0; i < K; ++i) {
          q[i] = load(L.q, L.io, n * L.q_sn + t * L.q_st + kh * L.q_sh + i);
          k[i] = load(L.k, L.io, n * L.k_sn + t * L.k_st + kh * L.k_sh + i);
          sq += q[i] * q[i], sk += k[i] * k[i];
        }
        if (L.l2norm) {
          const float rq = 1.f / std::sqrt(sq + 1e-6f), rk = 1.f / std::sqrt(sk + 1e-6f);
          for (int i = 0; i < K; ++i) q[i] *= rq, k[i] *= rk;
        }
        float g;
        if (L.fused_gate) {
          const float x = load(L.a, L.a_dtype, n * L.a_sn + t * L.a_st + h) + L.dt_bias[h];
          g = -std::exp(L.A_log[h]) * (x > 20.f ? x : std::log1p(std::exp(x)));
        } else {
          g = L.g[n * L.g_sn + t * L.g_st + h];
        }
        const float decay = std::exp(g);
        float beta = load(L.beta, L.beta_dtype, n * L.beta_sn + t * L.beta_st + h);
        if (L.beta_sigmoid) beta = 1.f / (1.f + std::exp(-beta));
        for (int j = 0; j < V; ++j) {
          float acc_kv = 0.f;
          for (int i = 0; i < K; ++i) {
            S[at(i, j)] *= decay;
            acc_kv += S[at(i, j)] * k[i];
          }
          u[j] = beta * (load(L.v, L.io, n * L.v_sn + t * L.v_st + h * L.v_sh + j) - acc_kv);
          float o = 0.f;
          for (int i = 0; i < K; ++i) {
            S[at(i, j)] += k[i] * u[j];
            o += S[at(i, j)] * q[i];
          }
          store(L.o, L.o_dtype, n * L.o_sn + t * L.o_st + h * L.o_sh + j, L.scale * o);
        }
        if (t + 1 == acc)
          for (std::int64_t e = 0; e < tile; ++e) store(L.state, L.state_dtype, base + e, S[e]);
        if (L.cache) {
          const std::int64_t cb = ((std::int64_t(n) * L.T + t) * L.HV + h) * tile;
          for (std::int64_t e = 0; e < tile; ++e) store(L.cache, L.state_dtype, cb + e, S[e]);
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace detail
}  // namespace gdn
