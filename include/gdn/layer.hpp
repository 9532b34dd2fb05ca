// gdn::layer — the whole Gated DeltaNet token mixer of Qwen3.5 and Qwen3-Next (HF transformers'
// Qwen3_5GatedDeltaNet / Qwen3NextGatedDeltaNet), around the recurrence of gdn.hpp:
//
//   proj  = x W_in^T                     one bf16 GEMM: [q | k | v | z | b | a] columns
//   qkv   = silu(causal_depthwise_conv1d(proj[:, q|k|v]))   kernel 4, conv state in/out
//   beta  = sigmoid(b);  g = -exp(A_log) * softplus(a + dt_bias)
//   o     = gated_delta_rule(q, k, v, g, beta; qk_l2norm, grouped head map, scale K^-1/2)
//   y     = (rmsnorm(o) * norm_w * silu(z)) W_out^T   per value head, fp32 math
//
// Weights are held in one canonical form (Qwen3.5's separate projections); Qwen3-Next's packed
// in_proj_qkvz / in_proj_ba (grouped per key head) are un-packed on load.
//
// State per sequence slot: conv state [kernel-1, conv_dim] (the last kernel-1 conv inputs, oldest
// first, time-major so a warp reads consecutive channels) and recurrent state [HV, K, V] fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn::layer {

enum class Family : int { qwen3_5 = 0, qwen3_next = 1 };
const char* to_string(Family f);

struct Config {
  std::string name;  // preset name or "config.json"
  Family family = Family::qwen3_5;
  int hidden = 0;       // hidden_size
  int HK = 0;           // linear_num_key_heads
  int HV = 0;           // linear_num_value_heads
  int K = 0;            // linear_key_head_dim
  int V = 0;            // linear_value_head_dim
  int conv_kernel = 4;  // linear_conv_kernel_dim
  double eps = 1e-6;    // rms_norm_eps (the gated norm's epsilon)
  int num_layers = 0;   // num_hidden_layers (all types)
  std::vector<int> gdn_layers;  // model layer indices of type "linear_attention"

  int key_dim() const { return HK * K; }
  int value_dim() const { return HV * V; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }  // q | k | v channels
  // Columns of the fused input projection: q | k | v | z | b | a.
  int proj_dim() const { return conv_dim() + value_dim() + 2 * HV; }
  int z_col() const { return conv_dim(); }
  int b_col() const { return conv_dim() + value_dim(); }
  int a_col() const { return conv_dim() + value_dim() + HV; }
  Status validate() const;
};

// Presets: "qwen3.5-27b" (48 of 64 layers GDN, HK16 HV48 K=V=128, hidden 5120),
// "qwen3-next-80b" (36 of 48, HK16 HV32, hidden 2048), and "tiny" (hidden 96, HK2 HV4 K=V=64,
// 4 layers, 3 GDN; tests).
bool preset(std::string_view name, Config* out);
std::vector<std::string> preset_names();

// Reads an HF config.json (top level, or its "text_config" for Qwen3.5 multimodal checkpoints).
// model_type decides the family; layer_types (or full_attention_interval) the GDN layers.
Status load_config(const std::string& path, Config* out);

// One layer's weights, canonical layout, on the host. Matrices hold bf16 bit patterns.
struct Weights {
  std::vector<std::uint16_t> w_qkv;  // [conv_dim, hidden]: q heads, k heads, v heads
  std::vector<std::uint16_t> w_z;    // [value_dim, hidden]
  std::vector<std::uint16_t> w_b;    // [HV, hidden]
  std::vector<std::uint16_t> w_a;    // [HV, hidden]
  std::vector<float> conv_w;         // [conv_dim, conv_kernel]; tap conv_kernel-1 is the current token
  std::vector<float> A_log;          // [HV]
  std::vector<float> dt_bias;        // [HV]
  std::vector<float> norm_w;         // [V]
  std::vector<std::uint16_t> w_out;  // [hidden, value_dim]
};

// Deterministic synthetic weights with model-like scales (projections ~ N(0, 1/hidden)).
Weights synthesize(const Config& c, std::uint64_t seed);

// A checkpoint directory: every *.safetensors file in it, memory-mapped.
class Checkpoint {
 public:
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  // `path`: a directory of *.safetensors files, or one .safetensors file.
  static Status open(const std::string& path, std::unique_ptr<Checkpoint>* out);
  bool has(const std::string& tensor) const;
  // Loads model layer `layer` (an index into the model's layers, e.g. 0, 1, 2, 4, ...).
  // Names tried: model.layers.{i}.linear_attn.* and model.language_model.layers.{i}.linear_attn.*.
  Status load_layer(const Config& c, int layer, Weights* out) const;

  struct Impl;

 private:
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

std::uint16_t f32_to_bf16(float x);  // round to nearest even
float bf16_to_f32(std::uint16_t b);

}  // namespace gdn::layer

#ifdef GDN_WITH_CUDA
namespace gdn::layer {

// Device time per stage (CUDA events), accumulated over calls.
struct StageTimes {
  double proj = 0, conv = 0, gates = 0, recur = 0, norm = 0, out = 0;  // ms
  double total() const { return proj + conv + gates + recur + norm + out; }
  double gemm() const { return proj + out; }
};

// Scratch for one layer call, shared by every layer of a stack. Sized for `max_tokens`.
class Workspace {
 public:
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  static Status create(const Config& c, std::int64_t max_tokens, int max_seqs,
                       std::unique_ptr<Workspace>* out);
  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  explicit Workspace(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One GDN layer on the GPU: its weights and its state pool of `slots` sequence slots.
class GpuLayer {
 public:
  ~GpuLayer();
  GpuLayer(const GpuLayer&) = delete;
  GpuLayer& operator=(const GpuLayer&) = delete;
  static Status create(const Config& c, const Weights& w, int slots,
                       std::unique_ptr<GpuLayer>* out);

  // Prefill N packed sequences. x, y: device bf16 [T, hidden] (y must not overlap x);
  // cu_seqlens: host [N+1]; slots: host [N] distinct slot indices. The initial conv and recurrent
  // states are read from the slots and the final ones written back (zero them for new sequences).
  // `times`, if given, accumulates per-stage device time (adds event synchronization).
  // A call rejected by its checks, or whose conv, gates or recurrence fails, leaves y and the
  // slots' states as they were (the new conv states are written after the recurrence); a failure
  // after that (the norm or the output GEMM) leaves the new states written and y not.
  Status prefill(const void* x, void* y, const std::int32_t* cu_seqlens, int N,
                 const std::int32_t* slots, Workspace& ws, void* stream = nullptr,
                 Arm arm = Arm::automatic, StageTimes* times = nullptr, RunInfo* info = nullptr);
  // One token for each of N sequences: x, y device bf16 [N, hidden]; slots host [N].
  Status decode(const void* x, void* y, int N, const std::int32_t* slots, Workspace& ws,
                void* stream = nullptr);
  // Just the layer's two GEMMs over T tokens (the "GEMMs alone" baseline of the benchmark).
  Status gemms_only(const void* x, void* y, std::int64_t T, Workspace& ws, void* stream = nullptr);

  // Slot state, host copies. conv: [kernel-1, conv_dim] as f32; ssm: [HV, K, V].
  Status zero_slots(void* stream = nullptr);
  Status get_state(int slot, std::vector<float>* conv, std::vector<float>* ssm) const;
  Status set_state(int slot, const std::vector<float>& conv, const std::vector<float>& ssm);

  const Config& config() const;
  struct Impl;

 private:
  explicit GpuLayer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gdn::layer
#endif
