// API layer: names, views, validation, arm resolution and dispatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "core/internal.hpp"
#include "gdn/gdn.hpp"

#ifndef GDN_VERSION_STRING
#define GDN_VERSION_STRING "0.1.0"
#endif

namespace gdn {

const char* version() { return GDN_VERSION_STRING; }

Status release_scratch() {
#ifdef GDN_WITH_CUDA
  return detail::cuda_release_scratch();
#else
  return Status::Ok();
#endif
}

std::uint64_t scratch_cached_bytes() {
#ifdef GDN_WITH_CUDA
  return detail::cuda_scratch_reserved();
#else
  return 0;
#endif
}

const char* to_string(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}
const char* to_string(HeadMap m) { return m == HeadMap::grouped ? "grouped" : "tiled"; }
const char* to_string(Arm a) {
  switch (a) {
    case Arm::automatic: return "auto";
    case Arm::cpu: return "cpu";
    case Arm::serial: return "serial";
    case Arm::wy_fp32: return "wy-fp32";
    case Arm::wy_tc: return "wy-tc";
  }
  return "?";
}
bool parse_arm(std::string_view s, Arm* out) {
  static const std::pair<std::string_view, Arm> names[] = {
      {"auto", Arm::automatic}, {"cpu", Arm::cpu},       {"serial", Arm::serial},
      {"wy-fp32", Arm::wy_fp32}, {"wy_fp32", Arm::wy_fp32}, {"wy-tc", Arm::wy_tc},
      {"wy_tc", Arm::wy_tc}};
  for (auto& [n, a] : names)
    if (s == n) { *out = a; return true; }
  return false;
}
bool parse_dtype(std::string_view s, DType* out) {
  if (s == "f32" || s == "fp32" || s == "float32") { *out = DType::f32; return true; }
  if (s == "f16" || s == "fp16" || s == "float16") { *out = DType::f16; return true; }
  if (s == "bf16" || s == "bfloat16") { *out = DType::bf16; return true; }
  return false;
}
bool parse_head_map(std::string_view s, HeadMap* out) {
  if (s == "grouped") { *out = HeadMap::grouped; return true; }
  if (s == "tiled") { *out = HeadMap::tiled; return true; }
  return false;
}
std::size_t dtype_size(DType d) { return d == DType::f32 ? 4 : 2; }

Problem Problem::make(int HK, int HV, int K, int V) {
  Problem p;
  p.HK = HK;
  p.HV = HV;
  p.K = K;
  p.V = V;
  p.scale = K > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(K))) : 0.f;
  return p;
}

TensorView TensorView::contiguous(const void* data, DType dtype,
                                  std::initializer_list<std::int64_t> shape) {
  TensorView t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (auto s : shape) t.shape[i++] = s;
  std::int64_t st = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = st;
    st *= t.shape[d];
  }
  return t;
}
TensorView TensorView::strided(const void* data, DType dtype,
                               std::initializer_list<std::int64_t> shape,
                               std::initializer_list<std::int64_t> stride) {
  TensorView t = contiguous(data, dtype, shape);
  int i = 0;
  for (auto s : stride) {
    if (i < 4) t.stride[i] = s;
    ++i;
  }
  if (i != t.rank) t.rank = -1;  // rejected by validate()
  return t;
}
std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}
bool TensorView::is_contiguous() const {
  std::int64_t st = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != st) return false;
    st *= shape[d];
  }
  return true;
}

namespace detail {
Seqs make_seqs(const PrefillArgs& a) {
  Seqs s;
  s.T = a.q.rank >= 1 ? a.q.shape[0] : 0;
  if (a.cu_seqlens) {
    s.N = a.num_seqs;
    s.cu = a.cu_seqlens;
  } else {
    s.N = 1;
    s.own[0] = 0;
    s.own[1] = static_cast<std::int32_t>(s.T);
    s.cu = s.own;
  }
  s.max_len = 0;
  for (int n = 0; n < s.N; ++n) s.max_len = std::max<std::int64_t>(s.max_len, s.seq_len(n));
  return s;
}
}  // namespace detail

namespace {

std::string shape_str(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) {
    if (d) s += ", ";
    s += std::to_string(t.shape[d]);
  }
  return s + "]";
}

// Checks rank, shape, dtype set and a contiguous innermost dimension.
Status check_view(const char* name, const TensorView& t, std::initializer_list<std::int64_t> shape,
                  std::initializer_list<DType> dtypes, bool need_contiguous) {
  const std::string n(name);
  if (t.rank != static_cast<int>(shape.size()))
    return Status::Invalid(n + ": expected rank " + std::to_string(shape.size()) + ", got " +
                           std::to_string(t.rank));
  int d = 0;
  std::string want = "[";
  bool match = true;
  for (auto s : shape) {
    if (d) want += ", ";
    want += std::to_string(s);
    if (t.shape[d] != s) match = false;
    ++d;
  }
  want += "]";
  if (!match) return Status::Invalid(n + ": expected shape " + want + ", got " + shape_str(t));
  bool dt_ok = false;
  std::string dts;
  for (auto dt : dtypes) {
    dt_ok |= dt == t.dtype;
    dts += dts.empty() ? "" : "|";
    dts += to_string(dt);
  }
  if (!dt_ok)
    return Status::Invalid(n + ": dtype " + to_string(t.dtype) + " not accepted (want " + dts + ")");
  for (int i = 0; i < t.rank; ++i)
    if (t.stride[i] < 0) return Status::Invalid(n + ": negative strides are not supported");
  if (t.rank > 0 && t.shape[t.rank - 1] > 1 && t.stride[t.rank - 1] != 1)
    return Status::Invalid(n + ": innermost dimension must be contiguous (stride 1), got stride " +
                           std::to_string(t.stride[t.rank - 1]));
  if (need_contiguous && !t.is_contiguous()) return Status::Invalid(n + ": must be contiguous");
  return Status::Ok();
}

// Byte range [lo, hi) a view can touch.
std::pair<std::uintptr_t, std::uintptr_t> byte_range(const TensorView& t) {
  auto lo = reinterpret_cast<std::uintptr_t>(t.data);
  std::int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return {lo, lo};
    last += (t.shape[d] - 1) * t.stride[d];
  }
  return {lo, lo + static_cast<std::uintptr_t>((last + 1) * dtype_size(t.dtype))};
}
bool overlaps(const TensorView& a, const TensorView& b) {
  if (!a.defined() || !b.defined()) return false;
  auto [a0, a1] = byte_range(a);
  auto [b0, b1] = byte_range(b);
  return a0 < b1 && b0 < a1 && a0 != a1 && b0 != b1;
}

}  // namespace

namespace detail {
Status validate_problem(const Problem& p) {
  if (p.HK <= 0 || p.HV <= 0)
    return Status::Invalid("head counts must be positive (HK=" + std::to_string(p.HK) +
                           ", HV=" + std::to_string(p.HV) + ")");
  if (p.HV % p.HK != 0)
    return Status::Invalid("HV=" + std::to_string(p.HV) + " is not a multiple of HK=" +
                           std::to_string(p.HK));
  if (p.K <= 0 || p.K > 256 || p.V <= 0 || p.V > 256)
    return Status::Invalid("unsupported head size K=" + std::to_string(p.K) +
                           ", V=" + std::to_string(p.V) + " (1..256)");
  if (!std::isfinite(p.scale) || !(p.scale > 0.f))
    return Status::Invalid("scale must be finite and > 0, got " + std::to_string(p.scale));
  if (p.head_map != HeadMap::grouped && p.head_map != HeadMap::tiled)
    return Status::Invalid("unknown head map");
  if (p.state_layout != StateLayout::kv && p.state_layout != StateLayout::vk)
    return Status::Invalid("unknown state layout");
  return Status::Ok();
}
}  // namespace detail

Status validate(const Problem& p, const PrefillArgs& a) {
  if (Status st = detail::validate_problem(p); !st.ok()) return st;
  if (a.q.rank != 3) return Status::Invalid("q: expected rank 3 [T, HK, K], got rank " +
                                            std::to_string(a.q.rank));
  const std::int64_t T = a.q.shape[0];
  if (T < 0) return Status::Invalid("q: negative token count");
  if (T > INT32_MAX) return Status::Invalid("q: more than 2^31-1 tokens");
  const DType io = a.q.dtype;
  Status st;
  if (!(st = check_view("q", a.q, {T, p.HK, p.K}, {DType::bf16, DType::f16, DType::f32}, false)).ok())
    return st;
  if (!(st = check_view("k", a.k, {T, p.HK, p.K}, {io}, false)).ok()) return st;
  if (!(st = check_view("v", a.v, {T, p.HV, p.V}, {io}, false)).ok()) return st;
  if (!(st = check_view("g", a.g, {T, p.HV}, {DType::f32}, false)).ok()) return st;
  if (!(st = check_view("beta", a.beta, {T, p.HV}, {DType::f32, DType::bf16}, false)).ok())
    return st;
  if (!(st = check_view("o", a.o, {T, p.HV, p.V}, {io, DType::f32}, false)).ok()) return st;
  if (T > 0) {
    const std::pair<const char*, const TensorView*> req[] = {
        {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"g", &a.g}, {"beta", &a.beta}, {"o", &a.o}};
    for (auto& [n, t] : req)
      if (!t->defined()) return Status::Invalid(std::string(n) + ": null data pointer");
  }

  int N = 1;
  if (a.cu_seqlens) {
    N = a.num_seqs;
    if (N < 1) return Status::Invalid("cu_seqlens given with num_seqs=" + std::to_string(N) +
                                      " (need >= 1)");
    if (a.cu_seqlens[0] != 0)
      return Status::Invalid("cu_seqlens[0] must be 0, got " + std::to_string(a.cu_seqlens[0]));
    for (int n = 0; n < N; ++n)
      if (a.cu_seqlens[n + 1] < a.cu_seqlens[n])
        return Status::Invalid("cu_seqlens not monotone at index " + std::to_string(n + 1) + " (" +
                               std::to_string(a.cu_seqlens[n]) + " > " +
                               std::to_string(a.cu_seqlens[n + 1]) + ")");
    if (a.cu_seqlens[N] != T)
      return Status::Invalid("cu_seqlens[N] = " + std::to_string(a.cu_seqlens[N]) +
                             " does not equal the token count T = " + std::to_string(T));
  } else if (a.num_seqs > 1) {
    return Status::Invalid("num_seqs=" + std::to_string(a.num_seqs) + " without cu_seqlens");
  }

  const bool vk = p.state_layout == StateLayout::vk;
  const std::int64_t s2 = vk ? p.V : p.K, s3 = vk ? p.K : p.V;
  const char* layout = vk ? "[N, HV, V, K]" : "[N, HV, K, V]";
  for (auto [n, t] : {std::pair<const char*, const TensorView*>{"h0", &a.h0}, {"hT", &a.hT}}) {
    if (!t->defined()) continue;
    st = check_view(n, *t, {N, p.HV, s2, s3}, {DType::f32}, true);
    if (!st.ok()) return Status::Invalid(st.message() + " (state layout " + layout + ")");
  }

  // Outputs must not overlap inputs (hT may alias h0 exactly: in-place state update).
  for (auto [n, t] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"k", &a.k},
                      {"v", &a.v}, {"g", &a.g}, {"beta", &a.beta}, {"h0", &a.h0}}) {
    if (overlaps(a.o, *t)) return Status::Invalid(std::string("o overlaps input ") + n);
    if (t != &a.h0 || a.hT.data != a.h0.data)
      if (overlaps(a.hT, *t)) return Status::Invalid(std::string("hT overlaps input ") + n);
  }
  if (overlaps(a.o, a.hT)) return Status::Invalid("o overlaps hT");

  // The caller's workspace; its size is checked by prefill, which knows the arm.
  if (!a.workspace && a.workspace_bytes > 0)
    return Status::Invalid("workspace_bytes = " + std::to_string(a.workspace_bytes) +
                           " given without a workspace pointer");
  if (a.workspace) {
    if (!a.on_device)
      return Status::Invalid("a workspace is given with on_device=false: the workspace is device "
                             "memory for the GPU arms (host calls take none)");
    const auto w0 = reinterpret_cast<std::uintptr_t>(a.workspace);
    if (w0 % kWorkspaceAlignment != 0)
      return Status::Invalid("workspace must be " + std::to_string(kWorkspaceAlignment) +
                             "-byte aligned; its address is " +
                             std::to_string(w0 % kWorkspaceAlignment) + " bytes past a boundary");
    const std::uintptr_t w1 = w0 + static_cast<std::uintptr_t>(a.workspace_bytes);
    for (auto [n, t] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"k", &a.k},
                        {"v", &a.v}, {"g", &a.g}, {"beta", &a.beta}, {"o", &a.o}, {"h0", &a.h0},
                        {"hT", &a.hT}}) {
      if (!t->defined()) continue;
      auto [t0, t1] = byte_range(*t);
      if (t0 < w1 && w0 < t1 && t0 != t1 && w0 != w1)
        return Status::Invalid(std::string("workspace overlaps ") + n);
    }
  }
  return Status::Ok();
}

namespace {

bool gpu_arm(Arm a) { return a == Arm::serial || a == Arm::wy_fp32 || a == Arm::wy_tc; }

bool arm_supports(Arm a, const Problem& p, std::string* why) {
  switch (a) {
    case Arm::cpu: return detail::cpu_supports(p, why);
#ifdef GDN_WITH_CUDA
    case Arm::serial: return detail::cuda_serial_supports(p, why);
    case Arm::wy_fp32: return detail::cuda_wy_fp32_supports(p, why);
    case Arm::wy_tc: return detail::cuda_wy_tc_supports(p, why);
#endif
    default: return false;
  }
}

void print_once(const std::string& line) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

bool arm_available(Arm a, const DeviceInfo& d, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return false;
  };
  if (a == Arm::cpu || a == Arm::automatic) return true;
  if (!d.cuda_built) return say(std::string(to_string(a)) + " needs a CUDA build");
  if (d.device_count == 0) return say(std::string(to_string(a)) + " needs a CUDA device");
  if (d.sm < 80)
    return say(std::string(to_string(a)) + " needs sm_80+, device is sm_" + std::to_string(d.sm));
  return true;
}

Arm resolve_arm(Arm requested, const Problem& p, const PrefillArgs& a, std::string* why) {
  std::string note;
  Arm want = requested;
  if (want == Arm::automatic) {
    if (const char* env = std::getenv("GDN_ARM"); env && *env) {
      Arm e;
      if (parse_arm(env, &e)) want = e;
      else note = std::string("GDN_ARM=") + env + " is not an arm; ignored";
    } else if (const char* wy = std::getenv("STRATA_GDN_WY"); wy && std::string(wy) == "1") {
      want = Arm::wy_tc;  // the original engine's opt-in switch: the chunked (WY) arm
    }
  }
  const DeviceInfo d = device_info();
  const detail::Seqs s = detail::make_seqs(a);
  auto fallback = [&](Arm to, const std::string& reason) {
    if (!note.empty()) note += "; ";
    note += reason;
    return to;
  };
  Arm ran = want;
  if (want == Arm::automatic) {
    ran = a.on_device ? detail::auto_gpu_arm(d, p, s) : Arm::cpu;
  } else if (a.on_device && want == Arm::cpu) {
    ran = fallback(detail::auto_gpu_arm(d, p, s), "cpu needs host tensors, the inputs are on the GPU");
  } else if (!a.on_device && gpu_arm(want)) {
    ran = fallback(Arm::cpu, std::string(to_string(want)) + " needs device tensors, the inputs are on the host");
  } else if (gpu_arm(want)) {
    std::string w;
    if (!arm_available(want, d, &w)) ran = fallback(Arm::cpu, w);
  }
  // Geometry the chosen GPU arm does not implement: try the others in order of generality.
  if (gpu_arm(ran)) {
    std::string w;
    if (!arm_supports(ran, p, &w)) {
      Arm alt = Arm::cpu;
      for (Arm c : {Arm::wy_fp32, Arm::serial})
        if (c != ran && arm_supports(c, p, nullptr)) { alt = c; break; }
      ran = fallback(alt, w);
    }
  }
  if (why) *why = note;
  return ran;
}

namespace detail {
namespace {
thread_local bool t_wide_values = false;
}  // namespace
bool wide_values() { return t_wide_values; }
WideValuesScope::WideValuesScope(bool wide) : prev_(t_wide_values) {
  t_wide_values = prev_ || wide;
}
WideValuesScope::~WideValuesScope() { t_wide_values = prev_; }

Status arm_workspace_bytes(const Problem& p, const PrefillArgs& a, Arm ran, std::uint64_t* bytes) {
  *bytes = 0;
  if (ran == Arm::cpu) return Status::Ok();
#ifdef GDN_WITH_CUDA
  const Seqs s = make_seqs(a);
  std::uint64_t b = 0;
  Status st;
  switch (ran) {  // each arm's launch code in its dry run (size_only): no work queued
    case Arm::serial: st = cuda_serial_prefill(p, a, s, &b); break;
    case Arm::wy_fp32: st = cuda_wy_fp32_prefill(p, a, s, &b); break;
    case Arm::wy_tc: st = cuda_wy_tc_prefill(p, a, s, &b); break;
    default:
      return Status::Internal(std::string("arm ") + to_string(ran) + " has no workspace size");
  }
  if (!st.ok()) return st;
  if (a.check_values) b = std::max(b, kCheckValuesWorkspaceBytes);  // the scan's flag, first
  *bytes = b;
  return Status::Ok();
#else
  (void)p, (void)a;
  return Status::Internal(std::string("arm ") + to_string(ran) + " is not built");
#endif
}
}  // namespace detail

Status prefill_workspace_bytes(const Problem& p, const PrefillArgs& a, Arm arm,
                               std::uint64_t* bytes) {
  if (!bytes) return Status::Invalid("prefill_workspace_bytes: bytes is null");
  *bytes = 0;
  Status st = validate(p, a);
  if (!st.ok()) return st;
  const Arm ran = resolve_arm(arm, p, a, nullptr);
  if (a.on_device && ran == Arm::cpu)
    return Status::Unsupported("no arm can run on device tensors in this build");
  return detail::arm_workspace_bytes(p, a, ran, bytes);
}

Status prefill(const Problem& p, const PrefillArgs& a, Arm arm, RunInfo* info) {
  Status st = validate(p, a);
  if (!st.ok()) return st;
  std::string note;
  const Arm ran = resolve_arm(arm, p, a, &note);
  if (info) {
    info->requested = arm;
    info->ran = ran;
    info->note = note;
  }
  if (!note.empty()) print_once(std::string("gdn arm = ") + to_string(ran) + " (" + note + ")");
  const detail::Seqs s = detail::make_seqs(a);
  if (ran == Arm::cpu) {
    if (a.on_device) return Status::Unsupported("no arm can run on device tensors in this build");
#ifdef GDN_WITH_CUDA
    for (const TensorView* t : {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.o, &a.h0, &a.hT})
      if (t->defined() && detail::cuda_pointer_kind(t->data) == 1)
        return Status::Invalid("on_device=false but a tensor is in device memory");
#endif
    std::string w;
    if (!detail::cpu_supports(p, &w)) return Status::Unsupported(w);
    if (a.check_values && !(st = detail::cpu_check_values(p, a, s)).ok()) return st;
    return detail::cpu_prefill(p, a, s);
  }
#ifdef GDN_WITH_CUDA
  for (const TensorView* t : {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.o, &a.h0, &a.hT})
    if (t->defined() && detail::cuda_pointer_kind(t->data) == 0)
      return Status::Invalid("on_device=true but a tensor is in host memory");
  if (a.workspace) {  // the caller's workspace serves the scan and the arm: big enough for both
    if (detail::cuda_pointer_kind(a.workspace) == 0)
      return Status::Invalid("on_device=true but the workspace is in host memory");
    std::uint64_t need = 0;
    if (!(st = detail::arm_workspace_bytes(p, a, ran, &need)).ok()) return st;
    if (a.workspace_bytes < need)
      return Status::Invalid("workspace too small: this call (arm " + std::string(to_string(ran)) +
                             ") needs " + std::to_string(need) + " bytes, workspace_bytes = " +
                             std::to_string(a.workspace_bytes) +
                             " (gdn::prefill_workspace_bytes)");
  }
  bool wide = false;
  if (a.check_values && !(st = detail::cuda_check_values(p, a, s, &wide)).ok()) return st;
  const detail::WideValuesScope wide_scope(wide);
  switch (ran) {
    case Arm::serial: return detail::cuda_serial_prefill(p, a, s);
    case Arm::wy_fp32: return detail::cuda_wy_fp32_prefill(p, a, s);
    case Arm::wy_tc: return detail::cuda_wy_tc_prefill(p, a, s);
    default: break;
  }
#endif
  return Status::Internal(std::string("arm ") + to_string(ran) + " is not built");
}

}  // namespace gdn
