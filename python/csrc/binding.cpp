// gdn_torch._C: the thin binding layer between torch tensors and libgdn's C++ API.
//
// Registers the custom op
//   gdn::chunk_gated_delta_rule(q, k, v, g, beta, scale?, initial_state?, output_final_state,
//                               cu_seqlens?, cu_seqlens_cpu?, use_qk_l2norm, head_map,
//                               state_v_first, arm, workspace?) -> (o, final_state)
// for the CPU and (in a CUDA build) CUDA dispatch keys; its fake kernel lives in Python
// (gdn_torch/_ops.py). The op is functional: it allocates o and the final state and mutates
// nothing but the optional `workspace` (a caller's uint8 CUDA scratch tensor, declared (a!), used
// instead of the library's memory pool), so torch.compile can trace it and CUDA graphs can
// capture it (no host sync on the fixed-length path, the current stream is used, check_values
// is off on CUDA). prefill_workspace_bytes (pybind) sizes that workspace for the same arguments.
// Also gdn::decode_step and gdn::verify_step (step_impl below), which update a state pool in
// place and declare it in their schemas (TORCH_LIBRARY at the end of this file).
//
// Errors: gdn::Status invalid_argument -> ValueError, unsupported -> NotImplementedError,
// anything else -> RuntimeError; the message is the library's.
#include <ATen/ATen.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gdn/decode.hpp"
#include "gdn/gdn.hpp"
#include "gdn/layer.hpp"

#ifdef GDN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

using at::Tensor;

// The arm that ran in this thread's last call (for benchmarks and tests).
thread_local std::string g_last_arm = "";
thread_local std::string g_last_note = "";

void throw_status(const gdn::Status& st) {
  const std::string msg = "gdn: " + st.message();
  TORCH_CHECK_VALUE(st.code() != gdn::Code::invalid_argument, msg);
  TORCH_CHECK_NOT_IMPLEMENTED(st.code() != gdn::Code::unsupported, msg);
  TORCH_CHECK(false, msg);
}

// The problem descriptor every op builds from its tensors' sizes and options.
gdn::Problem make_problem(int64_t HK, int64_t HV, int64_t K, int64_t V, const std::string& head_map,
                          std::optional<double> scale, bool use_qk_l2norm, bool state_v_first) {
  gdn::Problem p = gdn::Problem::make(static_cast<int>(HK), static_cast<int>(HV),
                                      static_cast<int>(K), static_cast<int>(V));
  TORCH_CHECK_VALUE(gdn::parse_head_map(head_map, &p.head_map), "gdn: unknown head_map '",
                    head_map, "' (grouped, tiled)");
  if (scale.has_value()) p.scale = static_cast<float>(*scale);
  p.qk_l2norm = use_qk_l2norm;
  p.state_layout = state_v_first ? gdn::StateLayout::vk : gdn::StateLayout::kv;
  return p;
}

gdn::DType to_gdn_dtype(const Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return gdn::DType::f32;
    case at::kHalf: return gdn::DType::f16;
    case at::kBFloat16: return gdn::DType::bf16;
    default:
      break;
  }
  TORCH_CHECK_VALUE(false, "gdn: ", name, ": dtype ", t.scalar_type(),
                    " not supported (bfloat16, float16 or float32)");
  return gdn::DType::f32;
}

// View of a tensor's storage as a gdn::TensorView (same sizes and element strides).
gdn::TensorView view_of(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() <= 4, "gdn: ", name, ": rank ", t.dim(), " > 4");
  gdn::TensorView v;
  v.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  v.dtype = to_gdn_dtype(t, name);
  v.rank = static_cast<int>(t.dim());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = t.size(d);
    v.stride[d] = t.stride(d);
  }
  return v;
}

// [B, T, X, Y] -> [B*T, X, Y] (or [B, T, X] -> [B*T, X]) with a unit innermost stride, as the
// library wants. A view when the strides allow it, a copy otherwise.
Tensor flatten_tokens(const Tensor& t) {
  std::vector<int64_t> shape{t.size(0) * t.size(1)};
  for (int64_t d = 2; d < t.dim(); ++d) shape.push_back(t.size(d));
  Tensor f = t.reshape(shape);
  if (f.size(-1) > 1 && f.stride(-1) != 1) f = f.contiguous();
  return f;
}

void check_rank(const Tensor& t, int64_t rank, const char* name, const char* shape) {
  TORCH_CHECK_VALUE(t.dim() == rank, "gdn: ", name, " must have shape ", shape, ", got rank ",
                    t.dim(), " ", t.sizes());
}

// One prefill call as the library takes it: the problem, the arguments and the tensors they view
// (the flattened inputs, o, the final state, the offsets), built by prepare_prefill for the op
// and for its workspace query alike (same arguments, hence the same size).
struct PrefillCall {
  gdn::Problem p;
  gdn::PrefillArgs a;
  gdn::Arm arm = gdn::Arm::automatic;
  Tensor q_f, k_f, v_f, g_f, b_f, h0, o, hT, cu_dev;
  std::vector<int32_t> cu_host;
  int64_t B = 0, T = 0, HV = 0, V = 0;
#ifdef GDN_WITH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard;
#endif
};

void prepare_prefill(
    PrefillCall& call,
    const Tensor& q,      // [B, T, HK, K]
    const Tensor& k,      // [B, T, HK, K]
    const Tensor& v,      // [B, T, HV, V]
    const Tensor& g,      // [B, T, HV]
    const Tensor& beta,   // [B, T, HV]
    std::optional<double> scale,
    const std::optional<Tensor>& initial_state,   // [N, HV, K, V] ([N, HV, V, K] state_v_first)
    bool output_final_state,
    const std::optional<Tensor>& cu_seqlens,      // [N+1] int32|int64, any device
    const std::optional<Tensor>& cu_seqlens_cpu,  // [N+1] host copy (avoids a device sync)
    bool use_qk_l2norm, const std::string& head_map, bool state_v_first,
    const std::string& arm) {
  check_rank(q, 4, "q", "[B, T, H, K]");
  check_rank(k, 4, "k", "[B, T, H, K]");
  check_rank(v, 4, "v", "[B, T, HV, V]");
  check_rank(g, 3, "g", "[B, T, HV]");
  check_rank(beta, 3, "beta", "[B, T, HV]");
  const int64_t B = q.size(0), T = q.size(1), HK = q.size(2), K = q.size(3);
  const int64_t HV = v.size(2), V = v.size(3);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}, {"g", &g},
                         {"beta", &beta}})
    TORCH_CHECK_VALUE(t->size(0) == B && t->size(1) == T, "gdn: ", name,
                      " must share q's leading [B, T] = [", B, ", ", T, "], got ", t->sizes());
  const bool on_device = q.is_cuda();
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}, {"g", &g},
                         {"beta", &beta}})
    TORCH_CHECK_VALUE(t->device() == q.device(), "gdn: ", name, " is on ", t->device(),
                      " but q is on ", q.device());
  TORCH_CHECK_VALUE(on_device || q.is_cpu(), "gdn: tensors must be on CPU or CUDA, got ",
                    q.device());

  gdn::Arm& arm_e = call.arm;
  TORCH_CHECK_VALUE(gdn::parse_arm(arm, &arm_e), "gdn: unknown arm '", arm,
                    "' (auto, cpu, serial, wy-fp32, wy-tc)");
  call.p = make_problem(HK, HV, K, V, head_map, scale, use_qk_l2norm, state_v_first);

#ifdef GDN_WITH_CUDA
  if (on_device) call.guard.emplace(q.device());
#else
  TORCH_CHECK(!on_device,
              "gdn: this gdn_torch build has no CUDA arms (built without nvcc or with "
              "GDN_FORCE_CPU=1); pass CPU tensors or rebuild");
#endif

  // Sequences: explicit cu_seqlens (B must be 1), else B sequences of T tokens each.
  std::vector<int32_t>& cu_host = call.cu_host;
  Tensor& cu_dev = call.cu_dev;  // int32 on q's device (GPU arms), alive for the call
  int64_t N = B;
  if (cu_seqlens.has_value()) {
    const Tensor& cu = *cu_seqlens;
    TORCH_CHECK_VALUE(B == 1, "gdn: with cu_seqlens the batch size must be 1 (packed tokens), got B=",
                      B);
    TORCH_CHECK_VALUE(cu.dim() == 1 && cu.numel() >= 2,
                      "gdn: cu_seqlens must be 1-D with N+1 >= 2 entries, got shape ", cu.sizes());
    TORCH_CHECK_VALUE(cu.scalar_type() == at::kInt || cu.scalar_type() == at::kLong,
                      "gdn: cu_seqlens must be int32 or int64, got ", cu.scalar_type());
    N = cu.numel() - 1;
    Tensor host;
    if (cu_seqlens_cpu.has_value()) {
      host = *cu_seqlens_cpu;
      TORCH_CHECK_VALUE(host.is_cpu() && host.dim() == 1 && host.numel() == cu.numel(),
                        "gdn: cu_seqlens_cpu must be a CPU tensor shaped like cu_seqlens ",
                        cu.sizes(), ", got ", host.sizes(), " on ", host.device());
    } else {
#ifdef GDN_WITH_CUDA
      // Reading device offsets back is a device sync, which stream capture forbids.
      TORCH_CHECK_VALUE(!cu.is_cuda() || c10::cuda::currentStreamCaptureStatusMayInitCtx() ==
                                             c10::cuda::CaptureStatus::None,
                        "gdn: cu_seqlens is a CUDA tensor and no cu_seqlens_cpu was given: reading "
                        "the offsets back would synchronize, which CUDA graph capture forbids; pass "
                        "cu_seqlens_cpu (a host copy) as well");
#endif
      host = cu.to(at::kCPU);  // a device sync when cu_seqlens is on the GPU
    }
    host = host.to(at::kLong).contiguous();
    const int64_t* h = host.data_ptr<int64_t>();
    cu_host.resize(static_cast<size_t>(N + 1));
    for (int64_t i = 0; i <= N; ++i) {
      TORCH_CHECK_VALUE(h[i] >= 0 && h[i] <= INT32_MAX, "gdn: cu_seqlens[", i, "] = ", h[i],
                        " is outside [0, 2^31-1]");
      cu_host[static_cast<size_t>(i)] = static_cast<int32_t>(h[i]);
    }
    // Device offsets only when the caller's are on the GPU (a cast there is a kernel). Host
    // offsets are not uploaded here: a copy from a pageable CPU tensor is refused under stream
    // capture; the library copies them by value in kernel parameters instead.
    if (on_device && cu.is_cuda()) cu_dev = cu.to(at::kInt).contiguous();
  } else if (B > 1) {
    TORCH_CHECK_VALUE(B * T <= INT32_MAX, "gdn: B*T = ", B * T, " tokens exceed 2^31-1");
    cu_host.resize(static_cast<size_t>(B + 1));
    for (int64_t i = 0; i <= B; ++i) cu_host[static_cast<size_t>(i)] = static_cast<int32_t>(i * T);
    if (on_device)  // built on the device so the fixed-length path never copies from the host
      cu_dev = at::arange(0, (B + 1) * T, T, q.options().dtype(at::kInt));
  }

  Tensor &q_f = call.q_f, &k_f = call.k_f, &v_f = call.v_f, &g_f = call.g_f, &b_f = call.b_f;
  q_f = flatten_tokens(q), k_f = flatten_tokens(k), v_f = flatten_tokens(v);
  // g in fp32 (fla accepts bf16 gates); beta in fp32 or bf16 (as the library takes it).
  g_f = flatten_tokens(g.scalar_type() == at::kFloat ? g : g.to(at::kFloat));
  b_f = flatten_tokens(
      beta.scalar_type() == at::kFloat || beta.scalar_type() == at::kBFloat16 ? beta
                                                                               : beta.to(at::kFloat));
  Tensor& h0 = call.h0;
  if (initial_state.has_value()) {
    // fla takes the initial state in any float dtype and reads it as fp32; so do we (a copy
    // only when it is not already contiguous fp32).
    TORCH_CHECK_VALUE(initial_state->device() == q.device(), "gdn: initial_state is on ",
                      initial_state->device(), " but q is on ", q.device());
    h0 = initial_state->to(at::kFloat).contiguous();
  }

  Tensor& o = call.o;
  Tensor& hT = call.hT;
  o = at::empty({B * T, HV, V}, q.options());
  hT = output_final_state ? at::empty(state_v_first ? std::vector<int64_t>{N, HV, V, K}
                                                    : std::vector<int64_t>{N, HV, K, V},
                                      q.options().dtype(at::kFloat))
                          : at::empty({0}, q.options().dtype(at::kFloat));
  call.B = B, call.T = T, call.HV = HV, call.V = V;

  gdn::PrefillArgs& a = call.a;
  a.q = view_of(q_f, "q");
  a.k = view_of(k_f, "k");
  a.v = view_of(v_f, "v");
  a.g = view_of(g_f, "g");
  a.beta = view_of(b_f, "beta");
  a.o = view_of(o, "o");
  if (h0.defined()) {
    a.h0 = view_of(h0, "initial_state");
  }
  if (output_final_state) a.hT = view_of(hT, "final_state");
  if (!cu_host.empty()) {
    a.cu_seqlens = cu_host.data();
    a.num_seqs = static_cast<int>(N);
  }
  if (cu_dev.defined()) a.cu_seqlens_device = cu_dev.data_ptr<int32_t>();
  a.on_device = on_device;
  // The device-side value scan synchronizes the stream (it reads a flag back), which would break
  // CUDA-graph capture and costs a round trip; on CUDA the op trusts its inputs. The CPU arm scans.
  a.check_values = !on_device;
#ifdef GDN_WITH_CUDA
  if (on_device) a.stream = at::cuda::getCurrentCUDAStream(q.device().index()).stream();
#endif
}

std::tuple<Tensor, Tensor> chunk_gated_delta_rule(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
    std::optional<double> scale, const std::optional<Tensor>& initial_state,
    bool output_final_state, const std::optional<Tensor>& cu_seqlens,
    const std::optional<Tensor>& cu_seqlens_cpu, bool use_qk_l2norm, const std::string& head_map,
    bool state_v_first, const std::string& arm,
    const std::optional<Tensor>& workspace) {  // uint8 on q's CUDA device, mutated (scratch)
  PrefillCall call;
  prepare_prefill(call, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                  cu_seqlens_cpu, use_qk_l2norm, head_map, state_v_first, arm);
  if (workspace.has_value()) {
    // The library checks the rest (on_device, 256-byte alignment, size against this call's need,
    // device memory) and raises ValueError through throw_status before anything runs.
    const Tensor& w = *workspace;
    TORCH_CHECK_VALUE(w.scalar_type() == at::kByte, "gdn: workspace must be a uint8 tensor, got ",
                      w.scalar_type());
    TORCH_CHECK_VALUE(w.device() == q.device(), "gdn: workspace is on ", w.device(),
                      " but q is on ", q.device());
    TORCH_CHECK_VALUE(w.is_contiguous(), "gdn: workspace must be contiguous");
    if (w.numel() > 0) {
      call.a.workspace = w.data_ptr();
      call.a.workspace_bytes = static_cast<std::uint64_t>(w.numel());
    } else {  // an empty tensor has no pointer to pass: fine only where nothing is needed
      std::uint64_t need = 0;
      const gdn::Status qs = gdn::prefill_workspace_bytes(call.p, call.a, call.arm, &need);
      if (!qs.ok()) throw_status(qs);
      TORCH_CHECK_VALUE(need == 0, "gdn: workspace too small: this call needs ", need,
                        " bytes, the workspace tensor is empty");
    }
  }
  gdn::RunInfo info;
  const gdn::Status st = gdn::prefill(call.p, call.a, call.arm, &info);
  if (!st.ok()) throw_status(st);
  g_last_arm = gdn::to_string(info.ran);
  g_last_note = info.note;
  return {call.o.view({call.B, call.T, call.HV, call.V}), call.hT};
}

// The workspace bytes chunk_gated_delta_rule needs for the same arguments (0 on CPU tensors):
// gdn::prefill_workspace_bytes over the arguments the op would pass (this allocates o and the
// final state like the op does, through the caching allocator, and runs no kernel).
int64_t prefill_workspace_bytes(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
    std::optional<double> scale, const std::optional<Tensor>& initial_state,
    bool output_final_state, const std::optional<Tensor>& cu_seqlens,
    const std::optional<Tensor>& cu_seqlens_cpu, bool use_qk_l2norm, const std::string& head_map,
    bool state_v_first, const std::string& arm) {
  PrefillCall call;
  prepare_prefill(call, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                  cu_seqlens_cpu, use_qk_l2norm, head_map, state_v_first, arm);
  std::uint64_t bytes = 0;
  const gdn::Status st = gdn::prefill_workspace_bytes(call.p, call.a, call.arm, &bytes);
  if (!st.ok()) throw_status(st);
  return static_cast<int64_t>(bytes);
}

// Decode (one token per sequence) and speculative verify (T = 1..16 draft tokens per sequence)
// over a pool of recurrent states, updated in place (include/gdn/decode.hpp). Shapes, with
// verify's token axis in parentheses: q, k [N, (T,) HK, K]; v [N, (T,) HV, V]; g, beta, a
// [N, (T,) HV]; A_log, dt_bias [HV]; state [S, HV, K, V] ([S, HV, V, K] with state_v_first), f32
// or bf16, contiguous, mutated; state_indices [N] (a negative index is a padding row: its state
// and state_cache rows are not touched and its o rows are zero). Verify only: num_accepted [N]
// (commit the state after that many tokens; all T when absent) and state_cache [N, T, HV, K, V]
// (state's layout and dtype, contiguous, written in place). Gate: g, or the fused form
// g = -exp(A_log) * softplus(a + dt_bias); beta_sigmoid: beta is a logit. Returns o
// [N, (T,) HV, V] in q's dtype. On CUDA: no host sync and no host-to-device copy
// (graph-capturable); index arrays must then be CUDA tensors, and their host copies
// (state_indices_cpu, num_accepted_cpu) enable the range and duplicate checks before anything is
// written (without them the kernel skips a bad row and flags nothing visible, see decode.hpp).
struct StepGate {
  const std::optional<Tensor>& g;
  const std::optional<Tensor>& A_log;
  const std::optional<Tensor>& a;
  const std::optional<Tensor>& dt_bias;
  bool beta_sigmoid;
};

// An optional int32/int64 [N] index tensor on `dev`, as int32 contiguous (a kernel on CUDA, no
// sync); its optional host copy, checked for shape (and used on CUDA only: host calls always
// validate their indices themselves).
void index_arrays(const char* name, const Tensor& t, const std::optional<Tensor>& host,
                  int64_t N, const at::Device& dev, bool on_device, Tensor* out,
                  Tensor* out_host) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == N, "gdn: ", name, " must have shape [N] = [", N,
                    "], got ", t.sizes());
  TORCH_CHECK_VALUE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, "gdn: ", name,
                    " must be int32 or int64, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == dev, "gdn: ", name, " is on ", t.device(), " but q is on ", dev);
  *out = t.to(at::kInt).contiguous();
  if (host.has_value()) {
    TORCH_CHECK_VALUE(host->is_cpu() && host->dim() == 1 && host->size(0) == N, "gdn: ", name,
                      "_cpu must be a CPU tensor of shape [N] = [", N, "], got ", host->sizes(),
                      " on ", host->device());
    TORCH_CHECK_VALUE(host->scalar_type() == at::kInt || host->scalar_type() == at::kLong,
                      "gdn: ", name, "_cpu must be int32 or int64, got ", host->scalar_type());
    if (on_device) *out_host = host->to(at::kInt).contiguous();
  }
}

Tensor step_impl(bool verify, const Tensor& q, const Tensor& k, const Tensor& v,
                 const StepGate& gate, const Tensor& beta, const Tensor& state,
                 const Tensor& state_indices, const std::optional<Tensor>& state_indices_cpu,
                 const std::optional<Tensor>& num_accepted,
                 const std::optional<Tensor>& num_accepted_cpu,
                 const std::optional<Tensor>& state_cache, std::optional<double> scale,
                 bool use_qk_l2norm, const std::string& head_map, bool state_v_first) {
  const int r = verify ? 4 : 3;  // rank of q/k/v/o; g/beta/a have rank r - 1
  check_rank(q, r, "q", verify ? "[N, T, H, K]" : "[N, H, K]");
  check_rank(k, r, "k", verify ? "[N, T, H, K]" : "[N, H, K]");
  check_rank(v, r, "v", verify ? "[N, T, HV, V]" : "[N, HV, V]");
  check_rank(beta, r - 1, "beta", verify ? "[N, T, HV]" : "[N, HV]");
  check_rank(state, 4, "state", "[S, HV, K, V]");
  const int64_t N = q.size(0), T = verify ? q.size(1) : 1, HK = q.size(r - 2), K = q.size(r - 1);
  const int64_t HV = v.size(r - 2), V = v.size(r - 1);
  const bool on_device = q.is_cuda();
  const bool fused = !gate.g.has_value();
  if (fused) {
    TORCH_CHECK_VALUE(gate.A_log.has_value() && gate.a.has_value() && gate.dt_bias.has_value(),
                      "gdn: gate: give g, or all of A_log, a and dt_bias (fused gate)");
    check_rank(*gate.a, r - 1, "a", verify ? "[N, T, HV]" : "[N, HV]");
    check_rank(*gate.A_log, 1, "A_log", "[HV]");
    check_rank(*gate.dt_bias, 1, "dt_bias", "[HV]");
  } else {
    TORCH_CHECK_VALUE(!gate.A_log.has_value() && !gate.a.has_value() && !gate.dt_bias.has_value(),
                      "gdn: gate: give either g or the fused gate (A_log, a, dt_bias), not both");
    check_rank(*gate.g, r - 1, "g", verify ? "[N, T, HV]" : "[N, HV]");
  }
  std::vector<std::pair<const char*, const Tensor*>> all{
      {"k", &k}, {"v", &v}, {"beta", &beta}, {"state", &state}};
  if (fused) {
    all.insert(all.end(), {{"A_log", &*gate.A_log}, {"a", &*gate.a}, {"dt_bias", &*gate.dt_bias}});
  } else {
    all.push_back({"g", &*gate.g});
  }
  if (state_cache.has_value()) all.push_back({"state_cache", &*state_cache});
  for (auto [name, t] : all)
    TORCH_CHECK_VALUE(t->device() == q.device(), "gdn: ", name, " is on ", t->device(),
                      " but q is on ", q.device());
  TORCH_CHECK_VALUE(on_device || q.is_cpu(), "gdn: tensors must be on CPU or CUDA, got ",
                    q.device());
  TORCH_CHECK_VALUE(state.scalar_type() == at::kFloat || state.scalar_type() == at::kBFloat16,
                    "gdn: state must be float32 or bfloat16 (it is updated in place), got ",
                    state.scalar_type());
  TORCH_CHECK_VALUE(state.is_contiguous(), "gdn: state must be contiguous (updated in place)");
  if (state_cache.has_value()) {
    const Tensor& c = *state_cache;
    const std::vector<int64_t> want = state_v_first ? std::vector<int64_t>{N, T, HV, V, K}
                                                    : std::vector<int64_t>{N, T, HV, K, V};
    TORCH_CHECK_VALUE(c.sizes() == at::IntArrayRef(want), "gdn: state_cache must have shape ",
                      at::IntArrayRef(want), state_v_first ? " [N, T, HV, V, K]" : " [N, T, HV, K, V]",
                      ", got ", c.sizes());
    TORCH_CHECK_VALUE(c.scalar_type() == state.scalar_type(), "gdn: state_cache must have the "
                      "state's dtype ", state.scalar_type(), ", got ", c.scalar_type());
    TORCH_CHECK_VALUE(c.is_contiguous(), "gdn: state_cache must be contiguous (written in place)");
  }

  const gdn::Problem p =
      make_problem(HK, HV, K, V, head_map, scale, use_qk_l2norm, state_v_first);

#ifdef GDN_WITH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard;
  if (on_device) guard.emplace(q.device());
#else
  TORCH_CHECK(!on_device,
              "gdn: this gdn_torch build has no CUDA arms (built without nvcc or with "
              "GDN_FORCE_CPU=1); pass CPU tensors or rebuild");
#endif

  const auto inner = [](const Tensor& t) {  // unit innermost stride, as the library wants
    return t.size(-1) > 1 && t.stride(-1) != 1 ? t.contiguous() : t;
  };
  const auto f32 = [&](const Tensor& t) {
    return inner(t.scalar_type() == at::kFloat ? t : t.to(at::kFloat));
  };
  const auto f32_or_half = [&](const Tensor& t, bool half_ok) {  // f32|bf16 (|f16) as is
    const auto s = t.scalar_type();
    return s == at::kFloat || s == at::kBFloat16 || (half_ok && s == at::kHalf) ? inner(t) : f32(t);
  };
  const Tensor q_c = inner(q), k_c = inner(k), v_c = inner(v);
  const Tensor b_f = f32_or_half(beta, false);
  Tensor g_f, A_f, a_f, dt_f;
  if (fused) {
    A_f = f32(*gate.A_log);
    dt_f = f32(*gate.dt_bias);
    a_f = f32_or_half(*gate.a, true);
  } else {
    g_f = f32(*gate.g);
  }
  Tensor idx, idx_host, acc, acc_host;
  index_arrays("state_indices", state_indices, state_indices_cpu, N, q.device(), on_device, &idx,
               &idx_host);
  TORCH_CHECK_VALUE(verify || (!num_accepted.has_value() && !num_accepted_cpu.has_value()),
                    "gdn: num_accepted is a verify argument");
  TORCH_CHECK_VALUE(num_accepted.has_value() || !num_accepted_cpu.has_value(),
                    "gdn: num_accepted_cpu given without num_accepted");
  if (num_accepted.has_value())
    index_arrays("num_accepted", *num_accepted, num_accepted_cpu, N, q.device(), on_device, &acc,
                 &acc_host);
  // Padding rows are skipped by the kernel (o untouched): zero them so the op returns no
  // uninitialized memory (one memset, capture-legal).
  Tensor o = at::zeros(verify ? std::vector<int64_t>{N, T, HV, V} : std::vector<int64_t>{N, HV, V},
                       q.options());
  if (N == 0) return o;

  gdn::DecodeArgs d;
  d.q = view_of(q_c, "q");
  d.k = view_of(k_c, "k");
  d.v = view_of(v_c, "v");
  if (fused) {
    d.A_log = view_of(A_f, "A_log");
    d.a = view_of(a_f, "a");
    d.dt_bias = view_of(dt_f, "dt_bias");
  } else {
    d.g = view_of(g_f, "g");
  }
  d.beta = view_of(b_f, "beta");
  d.beta_sigmoid = gate.beta_sigmoid;
  d.o = view_of(o, "o");
  d.state = view_of(state, "state");
  d.state_indices = idx.data_ptr<int32_t>();
  if (idx_host.defined()) d.state_indices_host = idx_host.data_ptr<int32_t>();
  if (acc.defined()) d.num_accepted = acc.data_ptr<int32_t>();
  if (acc_host.defined()) d.num_accepted_host = acc_host.data_ptr<int32_t>();
  if (state_cache.has_value() && state_cache->numel() > 0) d.state_cache = state_cache->data_ptr();
  d.on_device = on_device;
#ifdef GDN_WITH_CUDA
  if (on_device) d.stream = at::cuda::getCurrentCUDAStream(q.device().index()).stream();
#endif
  const gdn::Status st = verify ? gdn::verify(p, d) : gdn::decode(p, d);
  if (!st.ok()) throw_status(st);
  return o;
}

Tensor decode_step(const Tensor& q, const Tensor& k, const Tensor& v,
                   const std::optional<Tensor>& g, const Tensor& beta, const Tensor& state,
                   const Tensor& state_indices, const std::optional<Tensor>& state_indices_cpu,
                   std::optional<double> scale, bool use_qk_l2norm, const std::string& head_map,
                   bool state_v_first, const std::optional<Tensor>& A_log,
                   const std::optional<Tensor>& a, const std::optional<Tensor>& dt_bias,
                   bool beta_sigmoid) {
  return step_impl(false, q, k, v, StepGate{g, A_log, a, dt_bias, beta_sigmoid}, beta, state,
                   state_indices, state_indices_cpu, std::nullopt, std::nullopt, std::nullopt,
                   scale, use_qk_l2norm, head_map, state_v_first);
}

Tensor verify_step(const Tensor& q, const Tensor& k, const Tensor& v,
                   const std::optional<Tensor>& g, const Tensor& beta, const Tensor& state,
                   const Tensor& state_indices, const std::optional<Tensor>& state_indices_cpu,
                   const std::optional<Tensor>& num_accepted,
                   const std::optional<Tensor>& num_accepted_cpu,
                   const std::optional<Tensor>& state_cache, std::optional<double> scale,
                   bool use_qk_l2norm, const std::string& head_map, bool state_v_first,
                   const std::optional<Tensor>& A_log, const std::optional<Tensor>& a,
                   const std::optional<Tensor>& dt_bias, bool beta_sigmoid) {
  return step_impl(true, q, k, v, StepGate{g, A_log, a, dt_bias, beta_sigmoid}, beta, state,
                   state_indices, state_indices_cpu, num_accepted, num_accepted_cpu, state_cache,
                   scale, use_qk_l2norm, head_map, state_v_first);
}

// ---- the GDN layer (include/gdn/layer.hpp) ----
namespace gl = gdn::layer;

gl::Config layer_config(const std::string& name) {
  gl::Config c;
  if (gl::preset(name, &c)) return c;
  const gdn::Status st = gl::load_config(name, &c);
  if (!st.ok()) {
    std::string names;
    for (const auto& n : gl::preset_names()) names += (names.empty() ? "" : ", ") + n;
    TORCH_CHECK_VALUE(false, "gdn: layer config '", name, "' is neither a preset (", names,
                      ") nor a readable config.json: ", st.message());
  }
  return c;
}

pybind11::dict config_dict(const gl::Config& c) {
  pybind11::dict d;
  d["name"] = c.name;
  d["family"] = std::string(gl::to_string(c.family));
  d["hidden"] = c.hidden;
  d["HK"] = c.HK;
  d["HV"] = c.HV;
  d["K"] = c.K;
  d["V"] = c.V;
  d["conv_kernel"] = c.conv_kernel;
  d["eps"] = c.eps;
  d["conv_dim"] = c.conv_dim();
  d["value_dim"] = c.value_dim();
  return d;
}

// Weight names and shapes of gl::Weights (bf16 matrices, fp32 vectors).
struct WeightSpec {
  const char* name;
  std::vector<int64_t> shape;
  bool bf16;
};
std::vector<WeightSpec> weight_specs(const gl::Config& c) {
  const int64_t H = c.hidden, CD = c.conv_dim(), VD = c.value_dim();
  return {{"w_qkv", {CD, H}, true},  {"w_z", {VD, H}, true},        {"w_b", {c.HV, H}, true},
          {"w_a", {c.HV, H}, true},  {"conv_w", {CD, c.conv_kernel}, false},
          {"A_log", {c.HV}, false},  {"dt_bias", {c.HV}, false},     {"norm_w", {c.V}, false},
          {"w_out", {H, VD}, true}};
}
std::vector<std::uint16_t>* u16_field(gl::Weights& w, const std::string& n) {
  if (n == "w_qkv") return &w.w_qkv;
  if (n == "w_z") return &w.w_z;
  if (n == "w_b") return &w.w_b;
  if (n == "w_a") return &w.w_a;
  return &w.w_out;
}
std::vector<float>* f32_field(gl::Weights& w, const std::string& n) {
  if (n == "conv_w") return &w.conv_w;
  if (n == "A_log") return &w.A_log;
  if (n == "dt_bias") return &w.dt_bias;
  return &w.norm_w;
}

// Synthetic weights (gl::synthesize) as CPU tensors: bf16 matrices, fp32 vectors.
pybind11::dict layer_weights(const std::string& config, int64_t seed) {
  const gl::Config c = layer_config(config);
  gl::Weights w = gl::synthesize(c, static_cast<std::uint64_t>(seed));
  pybind11::dict d;
  for (const WeightSpec& ws : weight_specs(c)) {
    Tensor t = at::empty(ws.shape, ws.bf16 ? at::kBFloat16 : at::kFloat);
    if (ws.bf16) std::memcpy(t.data_ptr(), u16_field(w, ws.name)->data(), t.numel() * 2);
    else std::memcpy(t.data_ptr(), f32_field(w, ws.name)->data(), t.numel() * 4);
    d[ws.name] = t;
  }
  return d;
}

#ifdef GDN_WITH_CUDA
gl::Weights weights_from_dict(const gl::Config& c, const pybind11::dict& d) {
  gl::Weights w;
  for (const WeightSpec& ws : weight_specs(c)) {
    TORCH_CHECK_VALUE(d.contains(ws.name), "gdn: layer weights: '", ws.name, "' missing");
    const Tensor t = pybind11::cast<Tensor>(d[ws.name]);
    TORCH_CHECK_VALUE(t.sizes() == at::IntArrayRef(ws.shape), "gdn: layer weights: '", ws.name,
                      "' must have shape ", at::IntArrayRef(ws.shape), ", got ", t.sizes());
    TORCH_CHECK_VALUE(t.is_floating_point(), "gdn: layer weights: '", ws.name,
                      "' must be floating-point, got ", t.scalar_type());
    const Tensor h =
        t.detach().to(at::kCPU).to(ws.bf16 ? at::kBFloat16 : at::kFloat).contiguous();
    if (ws.bf16) {
      auto* f = u16_field(w, ws.name);
      f->resize(h.numel());
      std::memcpy(f->data(), h.data_ptr(), h.numel() * 2);
    } else {
      auto* f = f32_field(w, ws.name);
      f->resize(h.numel());
      std::memcpy(f->data(), h.data_ptr(), h.numel() * 4);
    }
  }
  return w;
}

std::vector<int32_t> int_list(const std::vector<int64_t>& v, const char* name) {
  std::vector<int32_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    TORCH_CHECK_VALUE(v[i] >= INT32_MIN && v[i] <= INT32_MAX, "gdn: ", name, "[", i, "] = ", v[i],
                      " does not fit int32");
    r[i] = static_cast<int32_t>(v[i]);
  }
  return r;
}

// One GDN layer on a GPU: its weights and a pool of `slots` sequence states (conv + recurrent).
class Layer {
 public:
  Layer(const std::string& config, const std::optional<pybind11::dict>& weights, int64_t seed,
        int64_t slots, int64_t device)
      : c_(layer_config(config)), device_(static_cast<int>(device)) {
    TORCH_CHECK_VALUE(slots >= 1 && slots <= INT32_MAX, "gdn: Layer slots must be >= 1, got ",
                      slots);
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    const gl::Weights w = weights.has_value() ? weights_from_dict(c_, *weights)
                                              : gl::synthesize(c_, static_cast<std::uint64_t>(seed));
    check(gl::GpuLayer::create(c_, w, static_cast<int>(slots), &L_));
    slots_ = static_cast<int>(slots);
  }

  // x [T, hidden] bf16 on the layer's device; cu_seqlens [N+1] and slots [N] host ints.
  Tensor prefill(const Tensor& x, const std::vector<int64_t>& cu_seqlens,
                 const std::vector<int64_t>& slots, const std::string& arm) {
    check_x(x, "x", "[T, hidden]");
    gdn::Arm a;
    TORCH_CHECK_VALUE(gdn::parse_arm(arm, &a), "gdn: unknown arm '", arm, "'");
    const std::vector<int32_t> cu = int_list(cu_seqlens, "cu_seqlens"),
                               sl = int_list(slots, "slots");
    TORCH_CHECK_VALUE(cu.size() >= 2 && sl.size() == cu.size() - 1,
                      "gdn: Layer.prefill needs cu_seqlens of N+1 >= 2 entries and N slots, got ",
                      cu.size(), " and ", sl.size());
    TORCH_CHECK_VALUE(cu.back() == x.size(0), "gdn: cu_seqlens[N] = ", cu.back(),
                      " but x has ", x.size(0), " tokens");
    c10::cuda::CUDAGuard guard(x.device());
    const int N = static_cast<int>(sl.size());
    ensure_workspace(std::max<int64_t>(x.size(0), 1), N);
    Tensor y = at::empty_like(x);
    if (x.size(0) == 0) return y;  // zero tokens: no state changes
    gdn::RunInfo info;
    check(L_->prefill(x.data_ptr(), y.data_ptr(), cu.data(), N, sl.data(), *ws_, stream(x), a,
                      nullptr, &info));
    g_last_arm = gdn::to_string(info.ran);
    g_last_note = info.note;
    return y;
  }

  // One token for each of N sequences: x [N, hidden] bf16; slots [N] host ints.
  Tensor decode(const Tensor& x, const std::vector<int64_t>& slots) {
    check_x(x, "x", "[N, hidden]");
    const std::vector<int32_t> sl = int_list(slots, "slots");
    TORCH_CHECK_VALUE(static_cast<int64_t>(sl.size()) == x.size(0) && !sl.empty(),
                      "gdn: Layer.decode needs one slot per row of x (", x.size(0), "), got ",
                      sl.size());
    c10::cuda::CUDAGuard guard(x.device());
    const int N = static_cast<int>(sl.size());
    ensure_workspace(N, N);
    Tensor y = at::empty_like(x);
    check(L_->decode(x.data_ptr(), y.data_ptr(), N, sl.data(), *ws_, stream(x)));
    return y;
  }

  void zero_slots() {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    check(L_->zero_slots(at::cuda::getCurrentCUDAStream(device_).stream()));
  }
  // (conv [conv_kernel-1, conv_dim], ssm [HV, K, V]) of a slot, fp32 CPU tensors (synchronizes).
  std::tuple<Tensor, Tensor> get_state(int64_t slot) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    std::vector<float> conv, ssm;
    check(L_->get_state(static_cast<int>(slot), &conv, &ssm));
    Tensor ct = at::empty({c_.conv_kernel - 1, c_.conv_dim()}, at::kFloat);
    Tensor st = at::empty({c_.HV, c_.K, c_.V}, at::kFloat);
    TORCH_CHECK(static_cast<int64_t>(conv.size()) == ct.numel() &&
                    static_cast<int64_t>(ssm.size()) == st.numel(),
                "gdn: Layer.get_state: unexpected state sizes");
    std::memcpy(ct.data_ptr(), conv.data(), conv.size() * 4);
    std::memcpy(st.data_ptr(), ssm.data(), ssm.size() * 4);
    return {ct, st};
  }
  void set_state(int64_t slot, const Tensor& conv, const Tensor& ssm) {
    TORCH_CHECK_VALUE(conv.sizes() == at::IntArrayRef({c_.conv_kernel - 1, c_.conv_dim()}),
                      "gdn: conv state must have shape [", c_.conv_kernel - 1, ", ",
                      c_.conv_dim(), "], got ", conv.sizes());
    TORCH_CHECK_VALUE(ssm.sizes() == at::IntArrayRef({c_.HV, c_.K, c_.V}),
                      "gdn: recurrent state must have shape [", c_.HV, ", ", c_.K, ", ", c_.V,
                      "], got ", ssm.sizes());
    const Tensor ch = conv.detach().to(at::kCPU).to(at::kFloat).contiguous();
    const Tensor sh = ssm.detach().to(at::kCPU).to(at::kFloat).contiguous();
    std::vector<float> cv(ch.data_ptr<float>(), ch.data_ptr<float>() + ch.numel());
    std::vector<float> sv(sh.data_ptr<float>(), sh.data_ptr<float>() + sh.numel());
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    check(L_->set_state(static_cast<int>(slot), cv, sv));
  }
  pybind11::dict config() const { return config_dict(c_); }
  int64_t slots() const { return slots_; }

 private:
  static void check(const gdn::Status& st) {
    if (!st.ok()) throw_status(st);
  }
  void check_x(const Tensor& x, const char* name, const char* shape) const {
    TORCH_CHECK_VALUE(x.dim() == 2 && x.size(1) == c_.hidden, "gdn: ", name, " must have shape ",
                      shape, " with hidden = ", c_.hidden, ", got ", x.sizes());
    TORCH_CHECK_VALUE(x.is_cuda() && x.device().index() == device_, "gdn: ", name,
                      " must be on cuda:", device_, ", got ", x.device());
    TORCH_CHECK_VALUE(x.scalar_type() == at::kBFloat16, "gdn: ", name, " must be bfloat16, got ",
                      x.scalar_type());
    TORCH_CHECK_VALUE(x.is_contiguous(), "gdn: ", name, " must be contiguous");
  }
  static void* stream(const Tensor& x) {
    return at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  }
  // Grows the workspace (eager only: it allocates; warm up before capturing a larger size).
  void ensure_workspace(int64_t T, int N) {
    if (ws_ && T <= ws_T_ && N <= ws_N_) return;
    const int64_t t = std::max(T, ws_T_);
    const int n = std::max(N, ws_N_);
    ws_.reset();
    check(gl::Workspace::create(c_, t, n, &ws_));
    ws_T_ = t;
    ws_N_ = n;
  }

  gl::Config c_;
  int device_ = 0;
  int slots_ = 0;
  std::unique_ptr<gl::GpuLayer> L_;
  std::unique_ptr<gl::Workspace> ws_;
  int64_t ws_T_ = 0;
  int ws_N_ = 0;
};
#endif

pybind11::dict device_info() {
  const gdn::DeviceInfo d = gdn::device_info();
  pybind11::dict r;
  r["cuda_built"] = d.cuda_built;
  r["device_count"] = d.device_count;
  r["device"] = d.device;
  r["sm"] = d.sm;
  r["multiprocessors"] = d.multiprocessors;
  r["name"] = d.name;
  r["cuda_runtime"] = d.cuda_runtime;
  return r;
}

// Whether `arm` can run on this build and machine, and why not.
std::tuple<bool, std::string> arm_available(const std::string& arm) {
  gdn::Arm a;
  TORCH_CHECK_VALUE(gdn::parse_arm(arm, &a), "gdn: unknown arm '", arm, "'");
  std::string why;
  const bool ok = gdn::arm_available(a, gdn::device_info(), &why);
  return {ok, why};
}

}  // namespace

TORCH_LIBRARY(gdn, m) {
  m.def(
      "chunk_gated_delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, float? scale, "
      "Tensor? initial_state, bool output_final_state, Tensor? cu_seqlens, Tensor? cu_seqlens_cpu, "
      "bool use_qk_l2norm, str head_map, bool state_v_first, str arm, "
      "Tensor(a!)? workspace=None) -> (Tensor, Tensor)");
  // state is mutated in place (declared with (a!) so functionalization and CUDA graphs see it).
  // The fused-gate arguments come last, with defaults, so calls written before they existed
  // still bind (g is optional: absent means the fused gate).
  m.def(
      "decode_step(Tensor q, Tensor k, Tensor v, Tensor? g, Tensor beta, Tensor(a!) state, "
      "Tensor state_indices, Tensor? state_indices_cpu, float? scale, bool use_qk_l2norm, "
      "str head_map, bool state_v_first, Tensor? A_log=None, Tensor? a=None, "
      "Tensor? dt_bias=None, bool beta_sigmoid=False) -> Tensor");
  // state (always) and state_cache (when given) are mutated in place.
  m.def(
      "verify_step(Tensor q, Tensor k, Tensor v, Tensor? g, Tensor beta, Tensor(a!) state, "
      "Tensor state_indices, Tensor? state_indices_cpu, Tensor? num_accepted, "
      "Tensor? num_accepted_cpu, Tensor(b!)? state_cache, float? scale, bool use_qk_l2norm, "
      "str head_map, bool state_v_first, Tensor? A_log, Tensor? a, Tensor? dt_bias, "
      "bool beta_sigmoid) -> Tensor");
}
TORCH_LIBRARY_IMPL(gdn, CPU, m) {
  m.impl("chunk_gated_delta_rule", &chunk_gated_delta_rule);
  m.impl("decode_step", &decode_step);
  m.impl("verify_step", &verify_step);
}
#ifdef GDN_WITH_CUDA
TORCH_LIBRARY_IMPL(gdn, CUDA, m) {
  m.impl("chunk_gated_delta_rule", &chunk_gated_delta_rule);
  m.impl("decode_step", &decode_step);
  m.impl("verify_step", &verify_step);
}
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gdn: gated delta rule prefill (libgdn binding)";
  m.def("version", [] { return std::string(gdn::version()); });
  m.def("cuda_built", [] {
#ifdef GDN_WITH_CUDA
    return true;
#else
    return false;
#endif
  });
  m.def("device_info", &device_info);
  m.def("layer_weights", &layer_weights, pybind11::arg("config"), pybind11::arg("seed") = 0,
        "Synthetic weights of a layer config (preset name or config.json path) as CPU tensors.");
  m.def("layer_config", [](const std::string& config) { return config_dict(layer_config(config)); },
        pybind11::arg("config"));
#ifdef GDN_WITH_CUDA
  pybind11::class_<Layer>(m, "Layer")
      .def(pybind11::init<const std::string&, const std::optional<pybind11::dict>&, int64_t,
                          int64_t, int64_t>(),
           pybind11::arg("config"), pybind11::arg("weights") = pybind11::none(),
           pybind11::arg("seed") = 0, pybind11::arg("slots") = 1, pybind11::arg("device") = 0)
      .def("prefill", &Layer::prefill, pybind11::arg("x"), pybind11::arg("cu_seqlens"),
           pybind11::arg("slots"), pybind11::arg("arm") = "auto")
      .def("decode", &Layer::decode, pybind11::arg("x"), pybind11::arg("slots"))
      .def("zero_slots", &Layer::zero_slots)
      .def("get_state", &Layer::get_state, pybind11::arg("slot"))
      .def("set_state", &Layer::set_state, pybind11::arg("slot"), pybind11::arg("conv"),
           pybind11::arg("ssm"))
      .def_property_readonly("config", &Layer::config)
      .def_property_readonly("slots", &Layer::slots);
#endif
  m.def("prefill_workspace_bytes", &prefill_workspace_bytes, pybind11::arg("q"),
        pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("g"), pybind11::arg("beta"),
        pybind11::arg("scale"), pybind11::arg("initial_state"),
        pybind11::arg("output_final_state"), pybind11::arg("cu_seqlens"),
        pybind11::arg("cu_seqlens_cpu"), pybind11::arg("use_qk_l2norm"),
        pybind11::arg("head_map"), pybind11::arg("state_v_first"), pybind11::arg("arm"),
        "Device workspace bytes chunk_gated_delta_rule needs for these arguments (0 on CPU).");
  m.def("arm_available", &arm_available, pybind11::arg("arm"));
  m.def("last_arm", [] { return g_last_arm; },
        "The arm that ran in this thread's last chunk_gated_delta_rule call ('' before any).");
  m.def("last_note", [] { return g_last_note; },
        "Why the last call's arm differs from the one requested ('' if it does not).");
}
