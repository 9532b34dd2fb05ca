// GDN layer on the host: config parsing, safetensors checkpoints of both HF naming schemes
// (written by the test), loader error cases, and the fp64 layer oracle's state carry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gdn/layer.hpp"
#include "layer/safetensors.hpp"
#include "ref/layer_ref.hpp"

namespace gl = gdn::layer;
namespace fs = std::filesystem;

namespace {

// A temp directory removed at scope exit.
struct TempDir {
  fs::path p;
  explicit TempDir(const std::string& tag) {
    p = fs::temp_directory_path() /
        ("gdn_layer_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(rand()));
    fs::create_directories(p);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
};

struct StEntry {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};
StEntry bf16_entry(const std::string& name, std::vector<std::int64_t> shape,
                   const std::vector<std::uint16_t>& v) {
  StEntry e{name, "BF16", std::move(shape), std::vector<std::uint8_t>(v.size() * 2)};
  std::memcpy(e.bytes.data(), v.data(), e.bytes.size());
  return e;
}
StEntry f32_entry(const std::string& name, std::vector<std::int64_t> shape,
                  const std::vector<float>& v) {
  StEntry e{name, "F32", std::move(shape), std::vector<std::uint8_t>(v.size() * 4)};
  std::memcpy(e.bytes.data(), v.data(), e.bytes.size());
  return e;
}
std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = gl::f32_to_bf16(v[i]);
  return r;
}

// Writes a safetensors file: u64 LE header length, JSON header, raw data. `header_override`
// replaces the JSON (corruption tests); `truncate_by` drops bytes from the end.
void write_safetensors(const fs::path& path, const std::vector<StEntry>& es,
                       const std::string& header_override = "", std::size_t truncate_by = 0) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::size_t off = 0;
  for (auto& e : es) {
    h += ",\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < e.shape.size(); ++i) h += (i ? "," : "") + std::to_string(e.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + e.bytes.size()) + "]}";
    off += e.bytes.size();
  }
  h += "}";
  if (!header_override.empty()) h = header_override;
  std::string out(8, '\0');
  std::uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += h;
  for (auto& e : es) out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  out.resize(out.size() - std::min(truncate_by, out.size()));
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
}

// HF tensors of one layer in Qwen3.5's naming (separate projections).
std::vector<StEntry> qwen35_tensors(const gl::Config& c, const gl::Weights& w,
                                    const std::string& prefix) {
  const std::int64_t H = c.hidden;
  return {bf16_entry(prefix + "in_proj_qkv.weight", {c.conv_dim(), H}, w.w_qkv),
          bf16_entry(prefix + "in_proj_z.weight", {c.value_dim(), H}, w.w_z),
          bf16_entry(prefix + "in_proj_b.weight", {c.HV, H}, w.w_b),
          bf16_entry(prefix + "in_proj_a.weight", {c.HV, H}, w.w_a),
          bf16_entry(prefix + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, to_bf16(w.conv_w)),
          f32_entry(prefix + "A_log", {c.HV}, w.A_log),
          bf16_entry(prefix + "dt_bias", {c.HV}, to_bf16(w.dt_bias)),
          bf16_entry(prefix + "norm.weight", {c.V}, to_bf16(w.norm_w)),
          bf16_entry(prefix + "out_proj.weight", {H, c.value_dim()}, w.w_out)};
}

// HF tensors in Qwen3-Next's naming. The packing follows HF's fix_query_key_value_ordering read
// backwards: in_proj_qkvz output viewed as [HK, 2K + 2(HV/HK)V] and split [K, K, rV, rV] per key
// head; in_proj_ba viewed as [HK, 2r] split [r, r]; v/z/b/a reshaped to value heads in order.
std::vector<StEntry> qwen3next_tensors(const gl::Config& c, const gl::Weights& w,
                                       const std::string& prefix) {
  const std::int64_t H = c.hidden, K = c.K, V = c.V, HK = c.HK, r = c.HV / c.HK;
  std::vector<std::uint16_t> qkvz, ba;
  auto rows = [&](std::vector<std::uint16_t>& dst, const std::vector<std::uint16_t>& src,
                  std::int64_t first, std::int64_t n) {
    dst.insert(dst.end(), src.begin() + first * H, src.begin() + (first + n) * H);
  };
  for (std::int64_t kh = 0; kh < HK; ++kh) {
    rows(qkvz, w.w_qkv, kh * K, K);                        // q of key head kh
    rows(qkvz, w.w_qkv, HK * K + kh * K, K);               // k
    rows(qkvz, w.w_qkv, 2 * HK * K + kh * r * V, r * V);   // v of value heads kh*r .. kh*r+r-1
    rows(qkvz, w.w_z, kh * r * V, r * V);                  // z
    rows(ba, w.w_b, kh * r, r);
    rows(ba, w.w_a, kh * r, r);
  }
  return {bf16_entry(prefix + "in_proj_qkvz.weight", {HK * (2 * K + 2 * r * V), H}, qkvz),
          bf16_entry(prefix + "in_proj_ba.weight", {HK * 2 * r, H}, ba),
          bf16_entry(prefix + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, to_bf16(w.conv_w)),
          bf16_entry(prefix + "A_log", {c.HV}, to_bf16(w.A_log)),
          bf16_entry(prefix + "dt_bias", {c.HV}, to_bf16(w.dt_bias)),
          bf16_entry(prefix + "norm.weight", {c.V}, to_bf16(w.norm_w)),
          bf16_entry(prefix + "out_proj.weight", {H, c.value_dim()}, w.w_out)};
}

// A small geometry with GVA ratio 3 so the per-key-head grouping is exercised.
gl::Config small_config(gl::Family fam) {
  gl::Config c;
  c.name = "small";
  c.family = fam;
  c.hidden = 24, c.HK = 2, c.HV = 6, c.K = 8, c.V = 6, c.conv_kernel = 4, c.num_layers = 2;
  c.gdn_layers = {0, 1};
  return c;
}

void expect_same_weights(const gl::Weights& a, const gl::Weights& b) {
  EXPECT_EQ(a.w_qkv, b.w_qkv);
  EXPECT_EQ(a.w_z, b.w_z);
  EXPECT_EQ(a.w_b, b.w_b);
  EXPECT_EQ(a.w_a, b.w_a);
  EXPECT_EQ(a.conv_w, b.conv_w);
  EXPECT_EQ(a.A_log, b.A_log);
  EXPECT_EQ(a.dt_bias, b.dt_bias);
  EXPECT_EQ(a.norm_w, b.norm_w);
  EXPECT_EQ(a.w_out, b.w_out);
}

std::vector<double> random_x(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> x(n);
  for (auto& v : x) v = gl::bf16_to_f32(gl::f32_to_bf16(static_cast<float>(nd(rng))));
  return x;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::isnan(a[i] - b[i]) ? INFINITY : std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST(layer_config, presets) {
  gl::Config c;
  ASSERT_TRUE(gl::preset("qwen3.5-27b", &c));
  EXPECT_EQ(c.gdn_layers.size(), 48u);
  EXPECT_EQ(c.num_layers, 64);
  EXPECT_EQ(c.gdn_layers.back(), 62);  // layer 63 is full attention
  EXPECT_EQ(c.conv_dim(), 2 * 16 * 128 + 48 * 128);
  // The input projection's columns q | k | v | z | b | a, z 16-byte aligned (the gated norm's
  // 16-B path reads z rows).
  EXPECT_EQ(c.z_col(), c.conv_dim());
  EXPECT_EQ(c.b_col(), c.z_col() + c.value_dim());
  EXPECT_EQ(c.a_col(), c.b_col() + c.HV);
  EXPECT_EQ(c.a_col() + c.HV, c.proj_dim());
  EXPECT_EQ(c.z_col() % 8, 0);
  ASSERT_TRUE(gl::preset("qwen3-next-80b", &c));
  EXPECT_EQ(c.a_col() + c.HV, c.proj_dim());
  EXPECT_EQ(c.z_col() % 8, 0);
  EXPECT_EQ(c.gdn_layers.size(), 36u);
  EXPECT_EQ(c.family, gl::Family::qwen3_next);
  EXPECT_FALSE(gl::preset("qwen9", &c));
}

TEST(layer_config, hf_config_json_both_families) {
  TempDir d("cfg");
  {
    std::ofstream f(d.p / "q35.json");
    f << R"({"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text",
      "hidden_size": 24, "linear_num_key_heads": 2, "linear_num_value_heads": 6,
      "linear_key_head_dim": 8, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 4,
      "num_hidden_layers": 4, "rms_norm_eps": 1e-5,
      "layer_types": ["linear_attention", "full_attention", "linear_attention", "linear_attention"]}})";
  }
  gl::Config c;
  gdn::Status st = gl::load_config((d.p / "q35.json").string(), &c);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(c.family, gl::Family::qwen3_5);
  EXPECT_EQ(c.hidden, 24);
  EXPECT_EQ(c.HV, 6);
  EXPECT_DOUBLE_EQ(c.eps, 1e-5);
  EXPECT_EQ(c.gdn_layers, (std::vector<int>{0, 2, 3}));
  {
    std::ofstream f(d.p / "next.json");
    f << R"({"model_type": "qwen3_next", "hidden_size": 2048, "linear_num_key_heads": 16,
      "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
      "num_hidden_layers": 8, "full_attention_interval": 4})";
  }
  st = gl::load_config((d.p / "next.json").string(), &c);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(c.family, gl::Family::qwen3_next);
  EXPECT_EQ(c.conv_kernel, 4);
  EXPECT_EQ(c.gdn_layers, (std::vector<int>{0, 1, 2, 4, 5, 6}));
  {
    std::ofstream f(d.p / "bad.json");
    f << R"({"model_type": "qwen3_next", "hidden_size": 2048, "linear_num_key_heads": 16})";
  }
  st = gl::load_config((d.p / "bad.json").string(), &c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("linear_num_value_heads"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("bad.json"), std::string::npos) << st.message();
  {
    std::ofstream f(d.p / "llama.json");
    f << R"({"model_type": "llama", "hidden_size": 64})";
  }
  EXPECT_FALSE(gl::load_config((d.p / "llama.json").string(), &c).ok());
}

TEST(layer_checkpoint, qwen35_naming_roundtrip_language_model_prefix) {
  const gl::Config c = small_config(gl::Family::qwen3_5);
  const gl::Weights w = gl::synthesize(c, 11);
  TempDir d("q35");
  write_safetensors(d.p / "model-00001-of-00001.safetensors",
                    qwen35_tensors(c, w, "model.language_model.layers.1.linear_attn."));
  std::unique_ptr<gl::Checkpoint> ck;
  gdn::Status st = gl::Checkpoint::open(d.p.string(), &ck);
  ASSERT_TRUE(st.ok()) << st.message();
  gl::Weights got;
  st = ck->load_layer(c, 1, &got);
  ASSERT_TRUE(st.ok()) << st.message();
  expect_same_weights(got, w);
  // Layer 0 is not in the file: the error names the tensor.
  st = ck->load_layer(c, 0, &got);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.layers.0.linear_attn.out_proj.weight"), std::string::npos)
      << st.message();
}

TEST(layer_checkpoint, qwen3next_packed_naming_unpacks_to_canonical) {
  const gl::Config c = small_config(gl::Family::qwen3_next);
  gl::Weights w = gl::synthesize(c, 12);
  TempDir d("next");
  write_safetensors(d.p / "model.safetensors", qwen3next_tensors(c, w, "model.layers.0.linear_attn."));
  std::unique_ptr<gl::Checkpoint> ck;
  gdn::Status st = gl::Checkpoint::open(d.p.string(), &ck);
  ASSERT_TRUE(st.ok()) << st.message();
  gl::Weights got;
  st = ck->load_layer(c, 0, &got);
  ASSERT_TRUE(st.ok()) << st.message();
  expect_same_weights(got, w);
  // Negative control: the same file read as if the value heads were tiled across key heads
  // (a plausible wrong un-packing) must differ, i.e. the grouping is observable in this geometry.
  std::vector<std::uint16_t> tiled = got.w_b;
  const int r = c.HV / c.HK;
  for (int h = 0; h < c.HV; ++h)
    std::copy_n(got.w_b.begin() + static_cast<std::ptrdiff_t>((h % r) * c.HK + h / r) * c.hidden,
                c.hidden, tiled.begin() + static_cast<std::ptrdiff_t>(h) * c.hidden);
  EXPECT_NE(tiled, w.w_b);
}

TEST(layer_checkpoint, errors_name_file_and_tensor) {
  const gl::Config c = small_config(gl::Family::qwen3_5);
  const gl::Weights w = gl::synthesize(c, 13);
  const std::string pre = "model.layers.0.linear_attn.";
  TempDir d("err");
  auto open_load = [&](const std::string& file) -> gdn::Status {
    std::unique_ptr<gl::Checkpoint> ck;
    gdn::Status st = gl::Checkpoint::open((d.p / file).string(), &ck);
    if (!st.ok()) return st;
    gl::Weights got;
    return ck->load_layer(c, 0, &got);
  };
  auto expect_err = [&](const std::string& file, const std::string& needle) {
    gdn::Status st = open_load(file);
    ASSERT_FALSE(st.ok()) << file;
    EXPECT_NE(st.message().find(file), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  auto ts = qwen35_tensors(c, w, pre);
  write_safetensors(d.p / "ok.safetensors", ts);
  ASSERT_TRUE(open_load("ok.safetensors").ok());  // control: the untouched file loads

  write_safetensors(d.p / "trunc.safetensors", ts, "", 100);
  expect_err("trunc.safetensors", "truncated");
  write_safetensors(d.p / "tiny.safetensors", {}, "", 1000);  // less than the 8-byte length
  expect_err("tiny.safetensors", "truncated");
  write_safetensors(d.p / "json.safetensors", ts, "{\"a\": [1, 2");
  expect_err("json.safetensors", "corrupt header");
  {  // header length far beyond the file
    std::ofstream f(d.p / "hlen.safetensors", std::ios::binary);
    const char b[16] = {'\xff', '\xff', '\xff', '\x7f', 0, 0, 0, 0, '{', '}'};
    f.write(b, 16);
  }
  expect_err("hlen.safetensors", "header length");

  auto missing = ts;
  missing.erase(missing.begin() + 2);  // in_proj_b
  write_safetensors(d.p / "missing.safetensors", missing);
  expect_err("missing.safetensors", pre + "in_proj_b.weight");

  auto shape = ts;
  shape[1] = bf16_entry(pre + "in_proj_z.weight", {c.value_dim() - 1, c.hidden},
                        std::vector<std::uint16_t>((c.value_dim() - 1) * c.hidden));
  write_safetensors(d.p / "shape.safetensors", shape);
  expect_err("shape.safetensors", pre + "in_proj_z.weight");

  auto dtype = ts;
  dtype[6] = StEntry{pre + "dt_bias", "I32", {c.HV}, std::vector<std::uint8_t>(4 * c.HV)};
  write_safetensors(d.p / "dtype.safetensors", dtype);
  expect_err("dtype.safetensors", pre + "dt_bias");

  auto span = ts;  // header claims a dtype whose size disagrees with the byte span
  span[5].dtype = "BF16";
  write_safetensors(d.p / "span.safetensors", span);
  expect_err("span.safetensors", pre + "A_log");

  gdn::Status st = open_load("does_not_exist.safetensors");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("does_not_exist.safetensors"), std::string::npos);
}

// The oracle's state carry: prefill of T0 tokens then decode steps equals one prefill of the
// whole sequence; two packed sequences equal the same sequences run alone.
TEST(layer_oracle, prefill_then_decode_equals_longer_prefill_T29_plus_5) {
  gl::Config c = small_config(gl::Family::qwen3_5);
  const gl::Weights w = gl::synthesize(c, 21);
  const int T0 = 29, steps = 5, T = T0 + steps;
  const auto x = random_x(static_cast<std::int64_t>(T) * c.hidden, 22);

  auto full_state = gdn::ref::LayerState::zeros(c, 1);
  const auto y_full = gdn::ref::layer_forward(c, w, x, {0, T}, &full_state);

  auto st = gdn::ref::LayerState::zeros(c, 1);
  std::vector<double> x0(x.begin(), x.begin() + T0 * c.hidden);
  auto y = gdn::ref::layer_forward(c, w, x0, {0, T0}, &st);
  for (int s = 0; s < steps; ++s) {
    std::vector<double> xs(x.begin() + (T0 + s) * c.hidden, x.begin() + (T0 + s + 1) * c.hidden);
    auto ys = gdn::ref::layer_forward(c, w, xs, {0, 1}, &st);
    y.insert(y.end(), ys.begin(), ys.end());
  }
  double ymax = 0;
  for (double v : y_full) ymax = std::max(ymax, std::fabs(v));
  ASSERT_GT(ymax, 1e-3);  // the layer output is not trivially zero
  EXPECT_LT(max_abs_diff(y, y_full), 1e-12 * ymax);
  EXPECT_LT(max_abs_diff(st.conv, full_state.conv), 1e-12);
  EXPECT_LT(max_abs_diff(st.ssm, full_state.ssm), 1e-12);

  // Negative control: decode steps that lose the conv state (zeroed) must not match.
  auto lost = gdn::ref::LayerState::zeros(c, 1);
  auto y2 = gdn::ref::layer_forward(c, w, x0, {0, T0}, &lost);
  std::fill(lost.conv.begin(), lost.conv.end(), 0.0);
  std::vector<double> xs(x.begin() + T0 * c.hidden, x.begin() + (T0 + 1) * c.hidden);
  auto ys = gdn::ref::layer_forward(c, w, xs, {0, 1}, &lost);
  std::vector<double> ref_step(y_full.begin() + T0 * c.hidden, y_full.begin() + (T0 + 1) * c.hidden);
  EXPECT_GT(max_abs_diff(ys, ref_step), 1e-6 * ymax);
}

TEST(layer_oracle, varlen_packed_equals_separate_17_0_9) {
  gl::Config c = small_config(gl::Family::qwen3_5);
  const gl::Weights w = gl::synthesize(c, 31);
  const std::vector<std::int32_t> cu = {0, 17, 17, 26};
  const auto x = random_x(26LL * c.hidden, 32);
  auto st = gdn::ref::LayerState::zeros(c, 3);
  const auto y = gdn::ref::layer_forward(c, w, x, cu, &st);
  for (int n = 0; n < 3; ++n) {
    const int L = cu[n + 1] - cu[n];
    std::vector<double> xn(x.begin() + cu[n] * c.hidden, x.begin() + cu[n + 1] * c.hidden);
    auto sn = gdn::ref::LayerState::zeros(c, 1);
    auto yn = gdn::ref::layer_forward(c, w, xn, {0, L}, &sn);
    std::vector<double> ypart(y.begin() + cu[n] * c.hidden, y.begin() + cu[n + 1] * c.hidden);
    EXPECT_LT(max_abs_diff(yn, ypart), 1e-12) << "sequence " << n;
    const std::size_t ssz = sn.ssm.size(), csz = sn.conv.size();
    EXPECT_LT(max_abs_diff(sn.ssm, std::vector<double>(st.ssm.begin() + n * ssz,
                                                        st.ssm.begin() + (n + 1) * ssz)), 1e-12);
    EXPECT_LT(max_abs_diff(sn.conv, std::vector<double>(st.conv.begin() + n * csz,
                                                         st.conv.begin() + (n + 1) * csz)), 1e-12);
  }
}

// One token from zero state has a closed form: conv sees only the current token
// (tap kernel-1), S = beta k v^T, o = scale beta (k.q) v with unit q, k.
TEST(layer_oracle, single_token_closed_form) {
  gl::Config c = small_config(gl::Family::qwen3_5);
  c.HK = 1, c.HV = 1, c.K = 4, c.V = 3, c.hidden = 8;
  const gl::Weights w = gl::synthesize(c, 41);
  const auto x = random_x(c.hidden, 42);
  auto st = gdn::ref::LayerState::zeros(c, 1);
  const auto y = gdn::ref::layer_forward(c, w, x, {0, 1}, &st);

  auto dot_row = [&](const std::vector<std::uint16_t>& W, int r, const std::vector<double>& v) {
    double s = 0;
    for (std::size_t i = 0; i < v.size(); ++i) s += gl::bf16_to_f32(W[r * v.size() + i]) * v[i];
    return s;
  };
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  std::vector<double> qkv(c.conv_dim());
  for (int ch = 0; ch < c.conv_dim(); ++ch)
    qkv[ch] = silu(w.conv_w[ch * c.conv_kernel + c.conv_kernel - 1] * dot_row(w.w_qkv, ch, x));
  double qq = 0, kk = 0, qk = 0;
  for (int i = 0; i < c.K; ++i) qq += qkv[i] * qkv[i], kk += qkv[c.K + i] * qkv[c.K + i],
                                qk += qkv[i] * qkv[c.K + i];
  const double beta = 1 / (1 + std::exp(-dot_row(w.w_b, 0, x)));
  const double coef = beta * qk / std::sqrt((qq + 1e-6) * (kk + 1e-6)) / std::sqrt(double(c.K));
  std::vector<double> o(c.V);
  double ss = 0;
  for (int j = 0; j < c.V; ++j) o[j] = coef * qkv[2 * c.K + j], ss += o[j] * o[j];
  const double inv = 1 / std::sqrt(ss / c.V + c.eps);
  for (int j = 0; j < c.V; ++j) o[j] *= inv * w.norm_w[j] * silu(dot_row(w.w_z, j, x));
  std::vector<double> y_ref(c.hidden);
  for (int i = 0; i < c.hidden; ++i) y_ref[i] = dot_row(w.w_out, i, o);
  EXPECT_LT(max_abs_diff(y, y_ref), 1e-12);
  // The carried conv state holds the token's conv input in its last row.
  EXPECT_NEAR(st.conv[(c.conv_kernel - 2) * c.conv_dim()], dot_row(w.w_qkv, 0, x), 1e-12);
}
