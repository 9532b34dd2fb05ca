// Layer configuration: presets, HF config.json parsing, deterministic synthetic weights.
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "gdn/layer.hpp"

namespace gdn::layer {

const char* to_string(Family f) { return f == Family::qwen3_5 ? "qwen3.5" : "qwen3-next"; }

std::uint16_t f32_to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
float bf16_to_f32(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

Status Config::validate() const {
  auto bad = [&](const std::string& what) {
    return Status::Invalid("layer config '" + name + "': " + what);
  };
  if (hidden <= 0) return bad("hidden_size must be > 0");
  if (HK <= 0 || HV <= 0 || HV % HK != 0)
    return bad("linear_num_value_heads (" + std::to_string(HV) +
               ") must be a positive multiple of linear_num_key_heads (" + std::to_string(HK) + ")");
  if (K <= 0 || K > 256 || V <= 0 || V > 256) return bad("head dims must be in 1..256");
  if (conv_kernel < 1 || conv_kernel > 8) return bad("linear_conv_kernel_dim must be in 1..8");
  if (hidden % 2 || conv_dim() % 2 || value_dim() % 2)
    return bad("hidden size and projection widths must be even (bf16 pairs)");
  if (!(eps > 0) || !std::isfinite(eps)) return bad("rms_norm_eps must be finite and > 0");
  return Status::Ok();
}

namespace {
// Every `interval`-th layer (1-based) is full attention, as HF's full_attention_interval.
std::vector<int> gdn_layers_by_interval(int num_layers, int interval) {
  std::vector<int> v;
  for (int i = 0; i < num_layers; ++i)
    if (interval <= 0 || (i + 1) % interval != 0) v.push_back(i);
  return v;
}
}  // namespace

bool preset(std::string_view name, Config* out) {
  Config c;
  c.name = std::string(name);
  if (name == "qwen3.5-27b") {  // Qwen/Qwen3.5-27B text_config
    c.family = Family::qwen3_5;
    c.hidden = 5120, c.HK = 16, c.HV = 48, c.K = 128, c.V = 128, c.num_layers = 64;
  } else if (name == "qwen3-next-80b") {  // Qwen/Qwen3-Next-80B-A3B-Instruct
    c.family = Family::qwen3_next;
    c.hidden = 2048, c.HK = 16, c.HV = 32, c.K = 128, c.V = 128, c.num_layers = 48;
  } else if (name == "tiny") {
    c.family = Family::qwen3_5;
    c.hidden = 96, c.HK = 2, c.HV = 4, c.K = 64, c.V = 64, c.num_layers = 4;
  } else {
    return false;
  }
  c.gdn_layers = gdn_layers_by_interval(c.num_layers, 4);
  *out = c;
  return true;
}
std::vector<std::string> preset_names() { return {"qwen3.5-27b", "qwen3-next-80b", "tiny"}; }

Status load_config(const std::string& path, Config* out) {
  std::ifstream f(path);
  if (!f) return Status::Invalid(path + ": cannot open config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    return Status::Invalid(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) return Status::Invalid(path + ": top level is not a JSON object");
  std::string model_type = j.value("model_type", std::string());
  const nlohmann::json* t = &j;
  if (j.contains("text_config") && j["text_config"].is_object()) {
    t = &j["text_config"];
    if (t->contains("model_type") && (*t)["model_type"].is_string())
      model_type = (*t)["model_type"].get<std::string>();
  }
  Config c;
  c.name = path;
  if (model_type.rfind("qwen3_5", 0) == 0) c.family = Family::qwen3_5;
  else if (model_type.rfind("qwen3_next", 0) == 0) c.family = Family::qwen3_next;
  else return Status::Invalid(path + ": model_type '" + model_type +
                              "' is not a GDN model (want qwen3_5* or qwen3_next*)");
  auto get_int = [&](const char* key, int* dst, bool required, int dflt) -> Status {
    auto it = t->find(key);
    if (it == t->end() || it->is_null()) {
      if (required) return Status::Invalid(path + ": missing field '" + key + "'");
      *dst = dflt;
      return Status::Ok();
    }
    if (!it->is_number_integer()) return Status::Invalid(path + ": field '" + key + "' is not an integer");
    *dst = it->get<int>();
    return Status::Ok();
  };
  Status st;
  if (!(st = get_int("hidden_size", &c.hidden, true, 0)).ok()) return st;
  if (!(st = get_int("linear_num_key_heads", &c.HK, true, 0)).ok()) return st;
  if (!(st = get_int("linear_num_value_heads", &c.HV, true, 0)).ok()) return st;
  if (!(st = get_int("linear_key_head_dim", &c.K, true, 0)).ok()) return st;
  if (!(st = get_int("linear_value_head_dim", &c.V, true, 0)).ok()) return st;
  if (!(st = get_int("linear_conv_kernel_dim", &c.conv_kernel, false, 4)).ok()) return st;
  if (!(st = get_int("num_hidden_layers", &c.num_layers, true, 0)).ok()) return st;
  if (auto it = t->find("rms_norm_eps"); it != t->end() && it->is_number()) c.eps = it->get<double>();
  if (auto it = t->find("layer_types"); it != t->end() && it->is_array()) {
    if (static_cast<int>(it->size()) != c.num_layers)
      return Status::Invalid(path + ": layer_types has " + std::to_string(it->size()) +
                             " entries, num_hidden_layers is " + std::to_string(c.num_layers));
    for (int i = 0; i < c.num_layers; ++i)
      if ((*it)[i].is_string() && (*it)[i].get<std::string>() == "linear_attention")
        c.gdn_layers.push_back(i);
  } else {
    int interval = 4;
    if (!(st = get_int("full_attention_interval", &interval, false, 4)).ok()) return st;
    c.gdn_layers = gdn_layers_by_interval(c.num_layers, interval);
  }
  if (!(st = c.validate()).ok()) return st;
  *out = c;
  return Status::Ok();
}

Weights synthesize(const Config& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  auto mat = [&](std::size_t rows, std::size_t cols, float std) {
    std::vector<std::uint16_t> m(rows * cols);
    for (auto& x : m) x = f32_to_bf16(nd(rng) * std);
    return m;
  };
  // Values as stored in bf16 checkpoints (conv weights, biases) are bf16-representable too.
  auto vec = [&](std::size_t n, auto gen) {
    std::vector<float> v(n);
    for (auto& x : v) x = bf16_to_f32(f32_to_bf16(gen()));
    return v;
  };
  const float sh = 1.f / std::sqrt(static_cast<float>(c.hidden));
  Weights w;
  w.w_qkv = mat(c.conv_dim(), c.hidden, sh);
  w.w_z = mat(c.value_dim(), c.hidden, sh);
  w.w_b = mat(c.HV, c.hidden, sh);
  w.w_a = mat(c.HV, c.hidden, sh);
  const float sc = 1.f / std::sqrt(static_cast<float>(c.conv_kernel));
  w.conv_w = vec(static_cast<std::size_t>(c.conv_dim()) * c.conv_kernel, [&] { return nd(rng) * sc; });
  // HF init: A ~ U(0, 16), dt_bias = 1; keep A in [0.5, 8] so decays stay in a useful range.
  w.A_log = vec(c.HV, [&] { return std::log(0.5f + 7.5f * ud(rng)); });
  w.dt_bias = vec(c.HV, [&] { return 0.5f + ud(rng); });
  w.norm_w = vec(c.V, [&] { return 0.8f + 0.4f * ud(rng); });
  w.w_out = mat(c.hidden, c.value_dim(), 1.f / std::sqrt(static_cast<float>(c.value_dim())));
  return w;
}

}  // namespace gdn::layer
