// gdn — gated delta rule (Gated DeltaNet) prefill: the public C++ API.
//
// The recurrence (DESIGN.md §1), per sequence and value head h, state S[K, V] in fp32:
//   S = exp(g_t) S;  u_t = beta_t (v_t - S^T k_t);  S += k_t u_t^T;  o_t = scale S^T q_t
//
// Tensors are passed as non-owning views (data pointer, dtype, shape, strides in elements).
// Tokens of all sequences are packed along the first axis; `cu_seqlens[N+1]` marks sequence
// boundaries (FlashAttention convention). Everything is validated before anything is written:
// on a non-ok Status the caller's output buffers are untouched.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace gdn {

enum class DType : int { f32 = 0, f16 = 1, bf16 = 2 };
enum class HeadMap : int { grouped = 0, tiled = 1 };     // grouped: h / (HV/HK); tiled: h % HK
enum class StateLayout : int { kv = 0, vk = 1 };          // [K, V] (default) or [V, K]
enum class Arm : int { automatic = 0, cpu = 1, serial = 2, wy_fp32 = 3, wy_tc = 4 };

const char* to_string(DType d);
const char* to_string(HeadMap m);
const char* to_string(Arm a);  // "auto", "cpu", "serial", "wy-fp32", "wy-tc"
bool parse_arm(std::string_view s, Arm* out);
bool parse_dtype(std::string_view s, DType* out);  // "f32"|"fp32", "f16"|"fp16", "bf16"
bool parse_head_map(std::string_view s, HeadMap* out);
std::size_t dtype_size(DType d);

enum class Code : int { ok = 0, invalid_argument = 1, unsupported = 2, cuda_error = 3, internal = 4 };

class Status {
 public:
  Status() = default;
  Status(Code c, std::string msg) : code_(c), msg_(std::move(msg)) {}
  static Status Ok() { return {}; }
  static Status Invalid(std::string msg) { return {Code::invalid_argument, std::move(msg)}; }
  static Status Unsupported(std::string msg) { return {Code::unsupported, std::move(msg)}; }
  static Status Cuda(std::string msg) { return {Code::cuda_error, std::move(msg)}; }
  static Status Internal(std::string msg) { return {Code::internal, std::move(msg)}; }
  bool ok() const { return code_ == Code::ok; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }

 private:
  Code code_ = Code::ok;
  std::string msg_;
};

// Head geometry and options shared by every arm.
struct Problem {
  int HK = 0;  // key/query heads
  int HV = 0;  // value heads; a multiple of HK (GVA)
  int K = 0;   // key head dim; supported: 64, 128 (CPU arm: any 1..256)
  int V = 0;   // value head dim; supported: 64, 128 (CPU arm: any 1..256)
  HeadMap head_map = HeadMap::grouped;
  float scale = 0.f;       // must be finite and > 0; make() sets K^-1/2
  bool qk_l2norm = false;  // normalize q, k per head as x * rsqrt(sum(x^2) + 1e-6)
  StateLayout state_layout = StateLayout::kv;

  static Problem make(int HK, int HV, int K, int V);
  // Key/query head read by value head h.
  int kv_head(int h) const { return head_map == HeadMap::grouped ? h / (HV / HK) : h % HK; }
};

// Non-owning view: rank <= 4, strides in elements (not bytes).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t stride[4] = {0, 0, 0, 0};

  static TensorView contiguous(const void* data, DType dtype, std::initializer_list<std::int64_t> shape);
  static TensorView strided(const void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                            std::initializer_list<std::int64_t> stride);
  bool defined() const { return data != nullptr; }
  std::int64_t numel() const;
  bool is_contiguous() const;
};

// Inputs and outputs of one prefill call. Shapes use T = total tokens, N = sequences.
struct PrefillArgs {
  TensorView q;     // [T, HK, K]  bf16|f16|f32; innermost dim contiguous, other strides free
  TensorView k;     // [T, HK, K]  q's dtype; innermost dim contiguous
  TensorView v;     // [T, HV, V]  q's dtype; innermost dim contiguous
  TensorView g;     // [T, HV]     f32 log-decay, <= 0; innermost dim contiguous
  TensorView beta;  // [T, HV]     f32 or bf16, in [0, 1]; innermost dim contiguous
  TensorView o;     // [T, HV, V]  output, q's dtype or f32; innermost dim contiguous
  TensorView h0;    // [N, HV, K, V] f32 contiguous ([N, HV, V, K] for StateLayout::vk); optional
  TensorView hT;    // same shape as h0; optional output; may alias h0 (in-place update)
  const std::int32_t* cu_seqlens = nullptr;         // host [N+1]; null => one sequence of T tokens
  int num_seqs = 0;                                 // N, read only when cu_seqlens is set
  const std::int32_t* cu_seqlens_device = nullptr;  // optional device copy for the GPU arms
  bool on_device = false;    // true: every tensor is CUDA device memory (GPU arms)
  bool check_values = true;  // scan inputs for NaN/Inf, g > 0 and beta outside [0, 1] first
  void* stream = nullptr;    // cudaStream_t for the GPU arms; null = default stream
  // Caller-provided device workspace for the GPU arms (as cuBLASLt / FlashInfer take one): when
  // set, the call takes all of its device scratch from it and allocates nothing (null: the
  // library's scratch pool, see release_scratch). At least prefill_workspace_bytes() bytes of
  // device memory, kWorkspaceAlignment-aligned, on_device = true; it must stay valid until the
  // work queued on `stream` has completed, and two calls that may run concurrently (other
  // streams, other threads) must not share one. Its contents before and after are unspecified.
  void* workspace = nullptr;
  std::uint64_t workspace_bytes = 0;  // size of `workspace`; 0 when it is null
};

// Alignment PrefillArgs::workspace must have (bytes).
inline constexpr std::uint64_t kWorkspaceAlignment = 256;

// The wy-tc arm's fp16 operand scheme ("half", docs/bounds.md; the default where it runs: sm_90a,
// bf16 q/k/v, a bf16 or f16 o) keeps the recurrent state and its operands in fp16's range while every |v|, |h0|
// <= kWyTcHalfMaxV and every stored |q|, |k| <= kWyTcHalfMaxQK. With check_values on, the input
// scan checks this and the arm runs its split-bf16 scheme (any range) where it does not hold; with
// check_values off the caller promises it (inputs outside may give Inf/NaN). GDN_WYTC_PRECISION=
// split|half|auto (default auto) overrides the choice.
inline constexpr float kWyTcHalfMaxV = 2048.f;
inline constexpr float kWyTcHalfMaxQK = 16384.f;

struct RunInfo {
  Arm requested = Arm::automatic;
  Arm ran = Arm::automatic;
  std::string note;  // why the arm that ran differs from the one requested, if it does
};

// Runs the recurrence over all sequences. `arm == automatic` consults GDN_ARM (and the legacy
// STRATA_GDN_WY=1), then picks by device and geometry. An arm that cannot run here falls back and
// says why in `info->note` (and once on stderr).
Status prefill(const Problem& p, const PrefillArgs& a, Arm arm = Arm::automatic,
               RunInfo* info = nullptr);

// Checks shapes, dtypes, strides, cu_seqlens and options without touching any data (for the
// workspace: null with workspace_bytes > 0, set with on_device = false, misaligned, overlapping a
// tensor; its size is checked by prefill, which knows the arm).
Status validate(const Problem& p, const PrefillArgs& a);

// The device workspace `prefill(p, a, arm)` needs, in bytes: the arm it would run resolved the
// same way (GDN_ARM, fallbacks, the geometry; same device current), the same function that sizes
// that arm's launch, alignment padding included; at least 4 with check_values on (the value
// scan's flag, at the workspace's start, used before the arm runs). 0 for the cpu arm. Depends on
// everything prefill's arm choice and kernel variants depend on: shapes, dtypes, sequence offsets
// (host cu_seqlens, or cu_seqlens_device), check_values, the 16-byte alignment of q/k/v rows, the
// GDN_* variant switches; so pass the arguments of the call (validated as prefill validates them;
// no data is read). The workspace fields of `a` are not used for the size. Host only, no CUDA
// work queued; legal during stream capture.
Status prefill_workspace_bytes(const Problem& p, const PrefillArgs& a, Arm arm,
                               std::uint64_t* bytes);

// What this build and machine can run.
struct DeviceInfo {
  bool cuda_built = false;  // compiled with CUDA
  int device_count = 0;
  int device = -1;  // current device
  int sm = 0;       // compute capability * 10 (90 for H100/H200)
  int multiprocessors = 0;
  std::string name;
  std::string cuda_runtime;  // e.g. "13.0"
};
DeviceInfo device_info();
bool arm_available(Arm a, const DeviceInfo& d, std::string* why = nullptr);

// The arm `prefill` would run for this request on this machine, with the reason in `why`.
Arm resolve_arm(Arm requested, const Problem& p, const PrefillArgs& a, std::string* why);

const char* version();

// Without PrefillArgs::workspace, the GPU arms take their per-call workspace (wy-tc: ~3.5 GB at
// 32768 tokens x 48 heads) from a memory pool of this library, one per device, that keeps freed
// memory cached across synchronisations so that the next call does not map it again. This
// returns the cached memory of every device to the driver (memory of calls still in flight is not
// affected). Calls made with GDN_SCRATCH_POOL=device in the environment allocate from the
// device's current pool instead (its release policy applies). Calls with a workspace use no pool.
// Without CUDA in the build: Ok, nothing to do.
Status release_scratch();
// Bytes of device memory the scratch pool of the current device holds (workspace of calls in
// flight plus what it keeps cached); 0 before the first GPU call, without CUDA, or where
// GDN_SCRATCH_POOL=device made the calls use the device's pool.
std::uint64_t scratch_cached_bytes();

}  // namespace gdn
