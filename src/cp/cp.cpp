// Context-parallel prefill (include/gdn/cp.hpp, docs/cp.md): host orchestration of the segment
// maps through ordinary prefill calls of any arm, the combine, and the final pass. Host ops here;
// device ops in src/cuda/cp/cp.cu.
//
// prefill_cp, per sequence split into P segments (global segment index j = n * P + s):
//   phase A  one varlen call over all N * P segments: segment 0 from the true h0 (so its o is
//            final and its hT is S_in(1)), the others from 0 (hT = B_j). o goes to the caller's o.
//   phase M  (P >= 3) one varlen call over segments 1 .. NS-2 (a contiguous token range) with
//            V' = K value columns, v = 0 (a stride-0 view of K zeros), h0 = hT = I: hT = M_j.
//   combine  S_in(s+1) = M_s S_in(s) + B_s for s = 1 .. P-2, per (n, h), fp32.
//   phase C  one varlen call over all segments from their true initial states: o and, from the
//            last segment of each sequence, hT.
#include "gdn/cp.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/internal.hpp"
#include "cp/cp_internal.hpp"
#include "gdn/gdn.hpp"

namespace gdn {
namespace cp {

Workspace::~Workspace() {
#ifdef GDN_WITH_CUDA
  if (scratch_) device_workspace_delete(scratch_);
#endif
}

Status Workspace::alloc(std::size_t bytes) {
  if (!dev_) {
    host_.assign((bytes + sizeof(float) - 1) / sizeof(float), 0.f);
    return Status::Ok();
  }
#ifdef GDN_WITH_CUDA
  Status st;
  scratch_ = device_workspace_new(stream_, bytes, borrowed_, capacity_, &st);
  return st;
#else
  return Status::Unsupported("device workspace needs a CUDA build");
#endif
}

char* Workspace::data() const {
#ifdef GDN_WITH_CUDA
  if (dev_) return device_workspace_data(scratch_);
#endif
  return reinterpret_cast<char*>(const_cast<float*>(host_.data()));
}

Status zero(bool on_device, void* stream, float* p, std::size_t count) {
#ifdef GDN_WITH_CUDA
  if (on_device) return device_zero(stream, p, count);
#endif
  (void)stream;
  if (on_device) return Status::Unsupported("device op in a build without CUDA");
  std::fill(p, p + count, 0.f);
  return Status::Ok();
}

Status fill_identity(bool on_device, void* stream, float* p, std::int64_t count, int K) {
#ifdef GDN_WITH_CUDA
  if (on_device) return device_fill_identity(stream, p, count, K);
#endif
  (void)stream;
  if (on_device) return Status::Unsupported("device op in a build without CUDA");
  const std::int64_t KK = std::int64_t(K) * K;
  std::fill(p, p + count * KK, 0.f);
  for (std::int64_t i = 0; i < count; ++i)
    for (int d = 0; d < K; ++d) p[i * KK + std::int64_t(d) * K + d] = 1.f;
  return Status::Ok();
}

Status copy_states(bool on_device, void* stream, const StateCopy& c) {
#ifdef GDN_WITH_CUDA
  if (on_device) return device_copy_states(stream, c);
#endif
  (void)stream;
  if (on_device) return Status::Unsupported("device op in a build without CUDA");
  const std::int64_t KV = std::int64_t(c.K) * c.V;
  for (int n = 0; n < c.N; ++n)
    for (int h = 0; h < c.HV; ++h) {
      float* dst = c.dst + n * c.dst_item + h * KV;
      const float* src = c.src + n * c.src_item + h * KV;
      for (int d = 0; d < c.K; ++d)
        for (int col = 0; col < c.V; ++col)
          dst[c.dst_vk ? col * c.K + d : d * c.V + col] =
              src[c.src_vk ? col * c.K + d : d * c.V + col];
    }
  return Status::Ok();
}

Status combine(bool on_device, void* stream, const Combine& c) {
#ifdef GDN_WITH_CUDA
  if (on_device) return device_combine(stream, c);
#endif
  (void)stream;
  if (on_device) return Status::Unsupported("device op in a build without CUDA");
  const int K = c.K, V = c.V;
  std::vector<float> X(std::size_t(K) * V), Y(X.size());
  for (int n = 0; n < c.N; ++n)
    for (int h = 0; h < c.HV; ++h) {
      if (c.x0)
        std::copy_n(c.x0 + n * c.x_n + h * c.x_h, X.size(), X.begin());
      else
        std::fill(X.begin(), X.end(), 0.f);
      float* out = c.out + n * c.o_n + h * c.o_h;
      std::copy(X.begin(), X.end(), out);
      for (int j = 0; j < c.steps; ++j) {
        const float* M = c.m + j * c.m_step + n * c.m_n + h * c.m_h;  // [K, K]
        const float* B = c.b + j * c.b_step + n * c.b_n + h * c.b_h;  // [K, V]
        std::copy_n(B, Y.size(), Y.begin());
        for (int a = 0; a < K; ++a)
          for (int b = 0; b < K; ++b) {
            const float mab = M[a * K + b];
            for (int col = 0; col < V; ++col) Y[a * V + col] += mab * X[b * V + col];
          }
        X.swap(Y);
        std::copy(X.begin(), X.end(), out + (j + 1) * c.o_step);
      }
    }
  return Status::Ok();
}

}  // namespace cp

namespace {

constexpr int kMaxSegments = 1024;
constexpr int kChunk = 64;  // segment boundaries on the WY arms' chunk grid

// A view shifted by `t0` tokens along its first axis, with `T` tokens.
TensorView token_slice(const TensorView& t, std::int64_t t0, std::int64_t T) {
  TensorView s = t;
  if (t.defined()) s.data = static_cast<char*>(t.data) + t0 * t.stride[0] * dtype_size(t.dtype);
  s.shape[0] = T;
  return s;
}

TensorView f32_state(float* p, std::int64_t n, int HV, int K, int V) {
  return TensorView::contiguous(p, DType::f32, {n, HV, K, V});
}

// Carves aligned pieces out of one allocation: a sizing pass, then a placing pass.
struct Carver {
  std::size_t used = 0;
  char* base = nullptr;
  template <typename T>
  T* take(std::size_t count) {
    used = (used + 255) / 256 * 256;
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += count * sizeof(T);
    return p;
  }
};

// Tensors (and the caller's workspace) in the memory the call says (the same check prefill
// makes, done before any of this file's own copies touch them).
Status check_memory(const PrefillArgs& a) {
#ifdef GDN_WITH_CUDA
  for (const TensorView* t : {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.o, &a.h0, &a.hT}) {
    if (!t->defined()) continue;
    const int kind = detail::cuda_pointer_kind(t->data);
    if (!a.on_device && kind == 1)
      return Status::Invalid("on_device=false but a tensor is in device memory");
    if (a.on_device && kind == 0)
      return Status::Invalid("on_device=true but a tensor is in host memory");
  }
  if (a.workspace && detail::cuda_pointer_kind(a.workspace) == 0)
    return Status::Invalid("on_device=true but the workspace is in host memory");
#else
  if (a.on_device) return Status::Unsupported("device tensors need a CUDA build");
#endif
  return Status::Ok();
}

// Validation, arm choice and the value scan, once for the whole call (`sizing`: no scan).
// `wide` (optional): the scan found values outside wy-tc's half-scheme domain (the caller holds a
// detail::WideValuesScope over its arm calls).
Status prepare(const Problem& p, const PrefillArgs& a, Arm arm, Arm* ran, RunInfo* info,
               bool sizing, bool* wide = nullptr) {
  if (wide) *wide = false;
  Status st = validate(p, a);
  if (!st.ok()) return st;
  if (!(st = check_memory(a)).ok()) return st;
  std::string note;
  *ran = resolve_arm(arm, p, a, &note);
  if (info) {
    info->requested = arm;
    info->ran = *ran;
    info->note = note;
  }
  if (a.on_device && *ran == Arm::cpu)
    return Status::Unsupported("no arm can run on device tensors in this build");
  const detail::Seqs s = detail::make_seqs(a);
  if (a.check_values && !sizing) {
    if (!a.on_device) {
      std::string w;
      if (!detail::cpu_supports(p, &w)) return Status::Unsupported(w);
      st = detail::cpu_check_values(p, a, s);
    }
#ifdef GDN_WITH_CUDA
    else {
      st = detail::cuda_check_values(p, a, s, wide);
    }
#endif
  }
  return st;
}

// One internal arm call; inputs were validated and scanned by prepare().
Status run_arm(const Problem& p, PrefillArgs a, Arm arm, RunInfo* info) {
  a.check_values = false;
  RunInfo ri;
  Status st = prefill(p, a, arm, &ri);
  if (st.ok() && info && ri.ran != arm && info->note.empty())
    info->note = std::string("a pass ran on ") + to_string(ri.ran) + ": " + ri.note;
  return st;
}

Problem kv_problem(const Problem& p) {
  Problem q = p;
  q.state_layout = StateLayout::kv;
  return q;
}

// One pass of a cp entry point through its host logic, in one of two modes:
//   sizing   (the workspace query, and the size check before a call that brings a workspace):
//            validation and arm choice, no value scan, no op, no arm call; records the device
//            workspace this call's own pieces and its arm calls need (need());
//   running  the call: its own pieces from the caller's workspace (borrowed) or the pool (a host
//            vector on the host), its arm calls through prefill() with the rest of the caller's
//            workspace (they run one after another in stream order, so they share it).
// The query and the call go through the same code, so they cannot disagree. A caller's workspace
// holds [own pieces, 256-aligned | the arm calls' workspace]; the value scan's flag (prepare)
// takes its first bytes before anything else is queued. The entry points below skip every op
// (and the pointer arithmetic on pieces, null when sizing) with `if (!ps.sizing())`.
class Pass {
 public:
  Pass(const PrefillArgs& a, bool sizing)
      : a_(a), sizing_(sizing), ws_(a.on_device, a.stream, a.workspace, a.workspace_bytes) {}
  bool sizing() const { return sizing_; }

  // This call's own pieces: carve(Carver&) sizes them, then places them (null when sizing).
  template <typename F>
  Status take(F&& carve) {
    Carver size;
    carve(size);
    own_used_ = size.used;
    own_ = (size.used + 255) / 256 * 256;
    Carver place;
    if (!sizing_) {
      Status st = ws_.alloc(size.used);
      if (!st.ok()) return st;
      place.base = ws_.data();
    }
    carve(place);
    return Status::Ok();
  }

  // One arm call over x with problem q (take() first).
  Status run(const Problem& q, PrefillArgs x, Arm arm, RunInfo* info) {
    x.check_values = false;  // scanned once by prepare()
    x.workspace = nullptr;
    x.workspace_bytes = 0;
    if (sizing_) {
      std::uint64_t b = 0;
      Status st = detail::arm_workspace_bytes(q, x, resolve_arm(arm, q, x, nullptr), &b);
      arm_need_ = std::max(arm_need_, b);
      return st;
    }
    if (a_.workspace) {  // never the pool once the caller gave a workspace
      x.workspace = static_cast<char*>(a_.workspace) + own_;
      x.workspace_bytes = a_.workspace_bytes - std::min<std::uint64_t>(own_, a_.workspace_bytes);
    }
    return run_arm(q, x, arm, info);
  }

  // Device workspace bytes of the whole pass (sizing); 0 for host calls.
  std::uint64_t need() const {
    if (!a_.on_device) return 0;
    std::uint64_t n = arm_need_ > 0 ? own_ + arm_need_ : own_used_;
    if (a_.check_values) n = std::max(n, detail::kCheckValuesWorkspaceBytes);
    return n;
  }

 private:
  const PrefillArgs& a_;
  bool sizing_;
  cp::Workspace ws_;
  std::uint64_t own_used_ = 0, own_ = 0, arm_need_ = 0;
};

// A caller's workspace against its sizing pass (size(&need) -> Status), before anything runs: a
// too-small one must fail before an output is written.
template <typename F>
Status check_size(const PrefillArgs& a, F&& size, const char* what) {
  std::uint64_t need = 0;
  const Status sized = size(&need);
  if (!sized.ok()) return sized;
  if (a.workspace_bytes < need)
    return Status::Invalid(std::string("workspace too small: ") + what + " needs " +
                           std::to_string(need) + " bytes, workspace_bytes = " +
                           std::to_string(a.workspace_bytes) + " (gdn::" + what +
                           "_workspace_bytes)");
  return Status::Ok();
}

Status check_segments(int segments) {
  if (segments < 1 || segments > kMaxSegments)
    return Status::Invalid("segments must be in 1.." + std::to_string(kMaxSegments) + ", got " +
                           std::to_string(segments));
  return Status::Ok();
}

// prefill_cp for segments >= 2; sizing when size_only is set (stores the need there).
Status prefill_cp_impl(const Problem& p, const PrefillArgs& a, int segments, Arm arm,
                       RunInfo* info, std::uint64_t* size_only) {
  Pass ps(a, size_only != nullptr);
  Arm ran;
  bool wide = false;
  Status st = prepare(p, a, arm, &ran, info, ps.sizing(), &wide);
  if (!st.ok()) return st;
  const detail::WideValuesScope wide_scope(wide);
  const detail::Seqs s = detail::make_seqs(a);
  const int P = segments, N = s.N, HV = p.HV, K = p.K, V = p.V;
  if (std::int64_t(N) * P > INT32_MAX - 1)
    return Status::Invalid("num_seqs * segments exceeds 2^31-2");
  const int NS = N * P;
  const std::int64_t KV = std::int64_t(K) * V, KK = std::int64_t(K) * K, seg_state = HV * KV;

  // Chunk-aligned boundaries, as src/ref/segment_ref.cpp: ceil(chunks / P) chunks per segment.
  std::vector<std::int32_t> cu(NS + 1);
  for (int n = 0; n < N; ++n) {
    const std::int64_t t0 = s.cu[n], len = s.seq_len(n);
    const std::int64_t per = ((len + kChunk - 1) / kChunk + P - 1) / P * kChunk;
    for (int j = 0; j < P; ++j) cu[n * P + j] = std::int32_t(t0 + std::min(len, j * per));
  }
  cu[NS] = std::int32_t(s.T);
  const bool need_m = P >= 3;
  const std::int64_t ta = cu[1], tb = cu[NS - 1], TM = need_m ? tb - ta : 0;
  const DType io = a.q.dtype;

  float *H0, *HB, *MM, *zrow;
  char* o_m;
  st = ps.take([&](Carver& cv) {
    H0 = cv.take<float>(std::size_t(NS) * seg_state);  // [NS, HV, K, V] initial states
    HB = cv.take<float>(std::size_t(NS) * seg_state);  // [NS, HV, K, V] phase A, then C finals
    MM = cv.take<float>(need_m ? std::size_t(NS - 2) * HV * KK : 0);  // [NS-2, HV, K, K]
    zrow = cv.take<float>(std::size_t(K));                            // [K] zeros: v' rows
    o_m = cv.take<char>(std::size_t(TM) * HV * K * dtype_size(io));   // [TM, HV, K] discarded
  });
  if (!st.ok()) return st;

  const bool dev = a.on_device;
  const bool vk = p.state_layout == StateLayout::vk;
  const Problem pk = kv_problem(p);
  if (!ps.sizing()) {
    if (!(st = cp::zero(dev, a.stream, H0, std::size_t(NS) * seg_state)).ok()) return st;
    if (a.h0.defined()) {
      cp::StateCopy c{H0,        P * seg_state, false, static_cast<const float*>(a.h0.data),
                      seg_state, vk,            N,     HV,
                      K,         V};
      if (!(st = cp::copy_states(dev, a.stream, c)).ok()) return st;
    }
  }

  // Phase A: segment 0 from h0, the rest from 0.
  PrefillArgs A = a;
  A.cu_seqlens = cu.data();
  A.num_seqs = NS;
  A.cu_seqlens_device = nullptr;
  A.h0 = f32_state(H0, NS, HV, K, V);
  A.hT = f32_state(HB, NS, HV, K, V);
  if (!(st = ps.run(pk, A, ran, info)).ok()) return st;

  // Phase M: maps of segments 1 .. NS-2.
  if (need_m) {
    std::vector<std::int32_t> cum(NS - 1);
    for (int j = 0; j + 1 < NS; ++j) cum[j] = cu[j + 1] - std::int32_t(ta);
    Problem pm = pk;
    pm.V = K;
    PrefillArgs Mx = a;
    Mx.q = token_slice(a.q, ta, TM);
    Mx.k = token_slice(a.k, ta, TM);
    Mx.g = token_slice(a.g, ta, TM);
    Mx.beta = token_slice(a.beta, ta, TM);
    Mx.v = TensorView::strided(zrow, io, {TM, HV, K}, {0, 0, 1});
    Mx.o = TensorView::contiguous(o_m, io, {TM, HV, K});
    Mx.h0 = Mx.hT = TensorView::contiguous(MM, DType::f32, {NS - 2, HV, K, K});
    Mx.cu_seqlens = cum.data();
    Mx.num_seqs = NS - 2;
    Mx.cu_seqlens_device = nullptr;
    if (!ps.sizing()) {
      if (!(st = cp::zero(dev, a.stream, zrow, K)).ok()) return st;
      if (!(st = cp::fill_identity(dev, a.stream, MM, std::int64_t(NS - 2) * HV, K)).ok())
        return st;
    }
    if (!(st = ps.run(pm, Mx, ran, info)).ok()) return st;
  }

  // Combine: H0[nP+1] = HB[nP]; H0[nP+s+1] = M_{nP+s} H0[nP+s] + HB[nP+s], s = 1 .. P-2.
  if (!ps.sizing()) {
    cp::Combine c;
    c.m = MM;  // step j uses segment nP + 1 + j, stored at MM index nP + j
    c.m_step = HV * KK, c.m_n = P * HV * KK, c.m_h = KK;
    c.b = HB + seg_state, c.b_step = seg_state, c.b_n = P * seg_state, c.b_h = KV;
    c.x0 = HB, c.x_n = P * seg_state, c.x_h = KV;
    c.out = H0 + seg_state, c.o_step = seg_state, c.o_n = P * seg_state, c.o_h = KV;
    c.N = N, c.HV = HV, c.K = K, c.V = V, c.steps = P - 2;
    if (!(st = cp::combine(dev, a.stream, c)).ok()) return st;
  }

  // Phase C: every segment from its true initial state.
  PrefillArgs Cx = A;
  Cx.h0 = f32_state(H0, NS, HV, K, V);
  Cx.hT = f32_state(HB, NS, HV, K, V);
  if (!(st = ps.run(pk, Cx, ran, info)).ok()) return st;
  if (!ps.sizing() && a.hT.defined()) {
    cp::StateCopy h{static_cast<float*>(a.hT.data),
                    seg_state,
                    vk,
                    HB + (P - 1) * seg_state,
                    P * seg_state,
                    false,
                    N,
                    HV,
                    K,
                    V};
    if (!(st = cp::copy_states(dev, a.stream, h)).ok()) return st;
  }
  if (size_only) *size_only = ps.need();
  return Status::Ok();
}

}  // namespace

Status prefill_cp(const Problem& p, const PrefillArgs& a, int segments, Arm arm, RunInfo* info) {
  Status st = check_segments(segments);
  if (!st.ok()) return st;
  if (segments == 1) return prefill(p, a, arm, info);
  if (a.workspace) {
    st = check_size(
        a, [&](std::uint64_t* n) { return prefill_cp_impl(p, a, segments, arm, nullptr, n); },
        "prefill_cp");
    if (!st.ok()) return st;
  }
  return prefill_cp_impl(p, a, segments, arm, info, nullptr);
}

Status prefill_cp_workspace_bytes(const Problem& p, const PrefillArgs& a, int segments, Arm arm,
                                  std::uint64_t* bytes) {
  if (!bytes) return Status::Invalid("prefill_cp_workspace_bytes: bytes is null");
  *bytes = 0;
  Status st = check_segments(segments);
  if (!st.ok()) return st;
  if (segments == 1) return prefill_workspace_bytes(p, a, arm, bytes);
  std::uint64_t need = 0;
  if ((st = prefill_cp_impl(p, a, segments, arm, nullptr, &need)).ok()) *bytes = need;
  return st;
}

std::size_t cp_rank_map_floats(const Problem& p, int num_seqs) {
  return std::size_t(num_seqs) * p.HV * p.K * (std::size_t(p.K) + p.V);
}

namespace {
// `maps` may be null when sizing (the workspace query has no map buffer).
Status check_rank(int rank, int ranks, const void* maps, bool sizing) {
  if (ranks < 1 || ranks > kMaxSegments)
    return Status::Invalid("ranks must be in 1.." + std::to_string(kMaxSegments) + ", got " +
                           std::to_string(ranks));
  if (rank < 0 || rank >= ranks)
    return Status::Invalid("rank " + std::to_string(rank) + " outside 0.." +
                           std::to_string(ranks - 1));
  if (!maps && !sizing) return Status::Invalid("null map buffer");
  return Status::Ok();
}

Status cp_rank_maps_impl(const Problem& p, const PrefillArgs& a, int rank, int ranks, Arm arm,
                         float* maps_r, RunInfo* info, std::uint64_t* size_only) {
  Pass ps(a, size_only != nullptr);
  Status st = check_rank(rank, ranks, maps_r, ps.sizing());
  if (!st.ok()) return st;
  Arm ran;
  bool wide = false;
  if (!(st = prepare(p, a, arm, &ran, info, ps.sizing(), &wide)).ok()) return st;
  const detail::WideValuesScope wide_scope(wide);
  const detail::Seqs s = detail::make_seqs(a);
  const int N = s.N, HV = p.HV, K = p.K, V = p.V;
  const std::int64_t seg_state = HV * std::int64_t(K) * V;
  const bool dev = a.on_device, vk = p.state_layout == StateLayout::vk;
  const DType io = a.q.dtype;
  float* Mr = maps_r;                                           // [N, HV, K, K]
  float* Br = maps_r ? maps_r + std::size_t(N) * HV * K * K : nullptr;  // [N, HV, K, V]
  const bool need_m = rank > 0 && rank < ranks - 1;

  const std::size_t h0_floats = rank == 0 && vk && a.h0.defined() ? std::size_t(N) * seg_state : 0;
  const std::size_t om_bytes = need_m ? std::size_t(s.T) * HV * K * dtype_size(io) : 0;
  float *H0, *zrow;
  char* o_m;
  st = ps.take([&](Carver& cv) {
    H0 = cv.take<float>(h0_floats);  // [N, HV, K, V] rank 0's h0 in [K, V]
    zrow = cv.take<float>(K);        // [K] zeros
    o_m = cv.take<char>(om_bytes);   // [T, HV, K] discarded M-pass output
  });
  if (!st.ok()) return st;

  const Problem pk = kv_problem(p);
  PrefillArgs A = a;
  A.h0 = TensorView{};
  A.hT = f32_state(Br, N, HV, K, V);
  if (rank == 0 && a.h0.defined()) {
    if (vk) {
      if (!ps.sizing()) {
        cp::StateCopy c{H0, seg_state, false, static_cast<const float*>(a.h0.data),
                        seg_state, true, N, HV, K, V};
        if (!(st = cp::copy_states(dev, a.stream, c)).ok()) return st;
      }
      A.h0 = f32_state(H0, N, HV, K, V);
    } else {
      A.h0 = a.h0;
    }
  }
  if (!(st = ps.run(pk, A, ran, info)).ok()) return st;
  if (!need_m) {
    if (size_only) *size_only = ps.need();
    return ps.sizing() ? Status::Ok() : cp::zero(dev, a.stream, Mr, std::size_t(N) * HV * K * K);
  }

  Problem pm = pk;
  pm.V = K;
  PrefillArgs Mx = a;
  if (!ps.sizing() && !(st = cp::zero(dev, a.stream, zrow, K)).ok()) return st;
  Mx.v = TensorView::strided(zrow, io, {s.T, HV, K}, {0, 0, 1});
  Mx.o = TensorView::contiguous(o_m, io, {s.T, HV, K});
  Mx.h0 = Mx.hT = TensorView::contiguous(Mr, DType::f32, {N, HV, K, K});
  if (!ps.sizing() &&
      !(st = cp::fill_identity(dev, a.stream, Mr, std::int64_t(N) * HV, K)).ok())
    return st;
  if (!(st = ps.run(pm, Mx, ran, info)).ok()) return st;
  if (size_only) *size_only = ps.need();
  return Status::Ok();
}

Status cp_rank_finish_impl(const Problem& p, const PrefillArgs& a, int rank, int ranks, Arm arm,
                           const float* gathered, RunInfo* info, std::uint64_t* size_only) {
  Status st = check_rank(rank, ranks, gathered, size_only != nullptr);
  if (!st.ok()) return st;
  Arm ran;
  PrefillArgs a2 = a;
  a2.check_values = false;  // scanned by cp_rank_maps
  Pass ps(a2, size_only != nullptr);
  // a2 is not scanned here (cp_rank_maps scanned the inputs)
  if (!(st = prepare(p, a2, arm, &ran, info, ps.sizing())).ok()) return st;
  // The scan's range finding is not carried over from cp_rank_maps: where the caller asked for
  // the checks, this pass's arm calls take wy-tc's split scheme (any range); without them the
  // caller promised the half scheme's domain (gdn::kWyTcHalfMaxV).
  const detail::WideValuesScope wide_scope(a.check_values);
  const detail::Seqs s = detail::make_seqs(a);
  const int N = s.N, HV = p.HV, K = p.K, V = p.V;
  const std::int64_t KV = std::int64_t(K) * V, KK = std::int64_t(K) * K, seg_state = HV * KV;
  const std::int64_t F = static_cast<std::int64_t>(cp_rank_map_floats(p, N));
  const bool dev = a.on_device, vk = p.state_layout == StateLayout::vk;
  const bool last = rank == ranks - 1;
  auto write_hT = [&](const float* src) {
    cp::StateCopy h{
        static_cast<float*>(a.hT.data), seg_state, vk, src, seg_state, false, N, HV, K, V};
    return cp::copy_states(dev, a.stream, h);
  };
  if (rank == 0) {  // o is final since cp_rank_maps; B_0 is the final state when alone
    if (size_only) *size_only = ps.need();
    if (!ps.sizing() && last && a.hT.defined())
      return write_hT(gathered + std::size_t(N) * HV * KK);
    return Status::Ok();
  }
  float *X, *HT;
  st = ps.take([&](Carver& cv) {
    X = cv.take<float>(std::size_t(N) * seg_state);   // [N, HV, K, V] this rank's initial state
    HT = cv.take<float>(std::size_t(N) * seg_state);  // [N, HV, K, V] its final state
  });
  if (!st.ok()) return st;
  if (!ps.sizing()) {
    cp::Combine c;
    c.m = gathered, c.m_step = F, c.m_n = HV * KK, c.m_h = KK;
    c.b = gathered + std::size_t(N) * HV * KK, c.b_step = F, c.b_n = seg_state, c.b_h = KV;
    c.out = X, c.o_step = 0, c.o_n = seg_state, c.o_h = KV;
    c.N = N, c.HV = HV, c.K = K, c.V = V, c.steps = rank;
    if (!(st = cp::combine(dev, a.stream, c)).ok()) return st;
  }
  PrefillArgs Cx = a2;
  Cx.h0 = f32_state(X, N, HV, K, V);
  Cx.hT = last && a.hT.defined() ? f32_state(HT, N, HV, K, V) : TensorView{};
  if (!(st = ps.run(kv_problem(p), Cx, ran, info)).ok()) return st;
  if (size_only) *size_only = ps.need();
  if (!ps.sizing() && last && a.hT.defined()) return write_hT(HT);
  return Status::Ok();
}

}  // namespace

Status cp_rank_workspace_bytes(const Problem& p, const PrefillArgs& a, int rank, int ranks,
                               Arm arm, std::uint64_t* bytes) {
  if (!bytes) return Status::Invalid("cp_rank_workspace_bytes: bytes is null");
  *bytes = 0;
  std::uint64_t maps = 0, finish = 0;
  Status st = cp_rank_maps_impl(p, a, rank, ranks, arm, nullptr, nullptr, &maps);
  if (!st.ok()) return st;
  st = cp_rank_finish_impl(p, a, rank, ranks, arm, nullptr, nullptr, &finish);
  if (!st.ok()) return st;
  *bytes = std::max(maps, finish);
  return Status::Ok();
}

Status cp_rank_maps(const Problem& p, const PrefillArgs& a, int rank, int ranks, Arm arm,
                    float* maps_r, RunInfo* info) {
  if (a.workspace) {
    Status st = check_size(
        a, [&](std::uint64_t* n) { return cp_rank_workspace_bytes(p, a, rank, ranks, arm, n); },
        "cp_rank");
    if (!st.ok()) return st;
  }
  return cp_rank_maps_impl(p, a, rank, ranks, arm, maps_r, info, nullptr);
}

Status cp_rank_finish(const Problem& p, const PrefillArgs& a, int rank, int ranks, Arm arm,
                      const float* gathered, RunInfo* info) {
  if (a.workspace) {
    Status st = check_size(
        a, [&](std::uint64_t* n) { return cp_rank_workspace_bytes(p, a, rank, ranks, arm, n); },
        "cp_rank");
    if (!st.ok()) return st;
  }
  return cp_rank_finish_impl(p, a, rank, ranks, arm, gathered, info, nullptr);
}

}  // namespace gdn
