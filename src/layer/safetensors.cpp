// safetensors reader and checkpoint loader (both HF naming schemes of the GDN layer).
#include "layer/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "gdn/layer.hpp"

namespace gdn::layer {

std::size_t st_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

Status SafetensorsFile::open(const std::string& path, std::unique_ptr<SafetensorsFile>* out) {
  auto bad = [&](const std::string& why) { return Status::Invalid(path + ": " + why); };
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return bad(std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    ::close(fd);
    return bad("cannot stat");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<std::size_t>(sb.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    return bad("truncated: " + std::to_string(f->size_) + " bytes, no 8-byte header length");
  }
  f->map_ = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    return bad("mmap failed");
  }
  const auto* base = static_cast<const std::uint8_t*>(f->map_);
  std::uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | base[i];  // little-endian
  if (hlen > f->size_ - 8)
    return bad("truncated or corrupt: header length " + std::to_string(hlen) + " exceeds the " +
               std::to_string(f->size_ - 8) + " bytes after it");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(base + 8, base + 8 + hlen);
  } catch (const std::exception& e) {
    return bad(std::string("corrupt header (JSON: ") + e.what() + ")");
  }
  if (!h.is_object()) return bad("corrupt header (not a JSON object)");
  const std::uint8_t* data = base + 8 + hlen;
  const std::size_t data_bytes = f->size_ - 8 - hlen;
  for (auto& [name, e] : h.items()) {
    if (name == "__metadata__") continue;
    auto tbad = [&](const std::string& why) { return bad("tensor '" + name + "': " + why); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets"))
      return tbad("header entry lacks dtype/shape/data_offsets");
    StTensor t;
    try {
      t.dtype = e["dtype"].get<std::string>();
      t.shape = e["shape"].get<std::vector<std::int64_t>>();
      auto off = e["data_offsets"].get<std::vector<std::uint64_t>>();
      if (off.size() != 2 || off[0] > off[1]) return tbad("bad data_offsets");
      if (off[1] > data_bytes)
        return tbad("truncated: data ends at byte " + std::to_string(off[1]) + " of the data section, which has " +
                    std::to_string(data_bytes));
      std::uint64_t numel = 1;
      for (auto s : t.shape) {
        if (s < 0) return tbad("negative dimension");
        numel *= static_cast<std::uint64_t>(s);
      }
      const std::size_t es = st_dtype_size(t.dtype);
      if (es == 0) return tbad("unknown dtype '" + t.dtype + "'");
      if (numel * es != off[1] - off[0])
        return tbad("data_offsets span " + std::to_string(off[1] - off[0]) + " bytes, shape and dtype need " +
                    std::to_string(numel * es));
      t.data = data + off[0];
      t.bytes = off[1] - off[0];
    } catch (const std::exception& ex) {
      return tbad(std::string("malformed header entry (") + ex.what() + ")");
    }
    f->tensors_.emplace(name, std::move(t));
  }
  *out = std::move(f);
  return Status::Ok();
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// ---- Checkpoint ----

struct Checkpoint::Impl {
  std::string path;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  const StTensor* find(const std::string& name, const SafetensorsFile** file) const {
    for (auto& f : files)
      if (const StTensor* t = f->find(name)) {
        *file = f.get();
        return t;
      }
    return nullptr;
  }
};

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::~Checkpoint() = default;

Status Checkpoint::open(const std::string& path, std::unique_ptr<Checkpoint>* out) {
  namespace fs = std::filesystem;
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  std::error_code ec;
  std::vector<std::string> names;
  if (fs::is_directory(path, ec)) {
    for (auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".safetensors") names.push_back(e.path().string());
    if (names.empty()) return Status::Invalid(path + ": no *.safetensors files in the directory");
    std::sort(names.begin(), names.end());
  } else if (fs::exists(path, ec)) {
    names.push_back(path);
  } else {
    return Status::Invalid(path + ": no such file or directory");
  }
  for (auto& n : names) {
    std::unique_ptr<SafetensorsFile> f;
    Status st = SafetensorsFile::open(n, &f);
    if (!st.ok()) return st;
    impl->files.push_back(std::move(f));
  }
  out->reset(new Checkpoint(std::move(impl)));
  return Status::Ok();
}

bool Checkpoint::has(const std::string& tensor) const {
  const SafetensorsFile* f;
  return impl_->find(tensor, &f) != nullptr;
}

namespace {

// Decodes a float tensor (BF16/F16/F32) element.
float load_elem(const StTensor& t, std::size_t i) {
  if (t.dtype == "F32") {
    float x;
    std::memcpy(&x, t.data + 4 * i, 4);
    return x;
  }
  std::uint16_t b;
  std::memcpy(&b, t.data + 2 * i, 2);
  if (t.dtype == "BF16") return bf16_to_f32(b);
  // F16 -> f32
  const std::uint32_t s = (b >> 15) & 1, e = (b >> 10) & 0x1f, m = b & 0x3ff;
  float v;
  if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(m | 0x400), static_cast<int>(e) - 25);
  return s ? -v : v;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

Status Checkpoint::load_layer(const Config& c, int layer, Weights* out) const {
  Status st = c.validate();
  if (!st.ok()) return st;
  const std::string stem = ".layers." + std::to_string(layer) + ".linear_attn.";
  std::string prefix;
  for (const char* p : {"model", "model.language_model"}) {
    const std::string cand = std::string(p) + stem;
    if (has(cand + "out_proj.weight")) {
      prefix = cand;
      break;
    }
  }
  if (prefix.empty())
    return Status::Invalid(impl_->path + ": missing tensor 'model.layers." + std::to_string(layer) +
                           ".linear_attn.out_proj.weight' (also tried model.language_model.layers." +
                           std::to_string(layer) + ".*)");

  // Fetches a tensor, checks shape (with size-1 dims dropped) and a float dtype.
  auto get = [&](const std::string& leaf, std::vector<std::int64_t> want,
                 const StTensor** t) -> Status {
    const std::string name = prefix + leaf;
    const SafetensorsFile* f = nullptr;
    *t = impl_->find(name, &f);
    if (!*t) return Status::Invalid(impl_->path + ": missing tensor '" + name + "'");
    if ((*t)->dtype != "BF16" && (*t)->dtype != "F16" && (*t)->dtype != "F32")
      return Status::Invalid(f->path() + ": tensor '" + name + "' has dtype " + (*t)->dtype +
                             " (want BF16, F16 or F32)");
    std::vector<std::int64_t> got;
    for (auto s : (*t)->shape)
      if (s != 1) got.push_back(s);
    std::vector<std::int64_t> w2;
    for (auto s : want)
      if (s != 1) w2.push_back(s);
    if (got != w2)
      return Status::Invalid(f->path() + ": tensor '" + name + "' has shape " +
                             shape_str((*t)->shape) + ", expected " + shape_str(want));
    return Status::Ok();
  };
  const std::int64_t H = c.hidden, HV = c.HV, HK = c.HK, K = c.K, V = c.V, r = HV / HK;
  auto to_bf16 = [](const StTensor& t, std::vector<std::uint16_t>* dst, std::size_t n) {
    dst->resize(n);
    if (t.dtype == "BF16") std::memcpy(dst->data(), t.data, 2 * n);
    else
      for (std::size_t i = 0; i < n; ++i) (*dst)[i] = f32_to_bf16(load_elem(t, i));
  };
  auto to_f32 = [](const StTensor& t, std::vector<float>* dst, std::size_t n) {
    dst->resize(n);
    for (std::size_t i = 0; i < n; ++i) (*dst)[i] = load_elem(t, i);
  };
  Weights w;
  const StTensor *t_conv, *t_A, *t_dt, *t_norm, *t_out;
  if (!(st = get("conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, &t_conv)).ok()) return st;
  if (!(st = get("A_log", {HV}, &t_A)).ok()) return st;
  if (!(st = get("dt_bias", {HV}, &t_dt)).ok()) return st;
  if (!(st = get("norm.weight", {V}, &t_norm)).ok()) return st;
  if (!(st = get("out_proj.weight", {H, c.value_dim()}, &t_out)).ok()) return st;
  const std::size_t row = static_cast<std::size_t>(H);
  if (c.family == Family::qwen3_5) {
    const StTensor *t_qkv, *t_z, *t_b, *t_a;
    if (!(st = get("in_proj_qkv.weight", {c.conv_dim(), H}, &t_qkv)).ok()) return st;
    if (!(st = get("in_proj_z.weight", {c.value_dim(), H}, &t_z)).ok()) return st;
    if (!(st = get("in_proj_b.weight", {HV, H}, &t_b)).ok()) return st;
    if (!(st = get("in_proj_a.weight", {HV, H}, &t_a)).ok()) return st;
    to_bf16(*t_qkv, &w.w_qkv, c.conv_dim() * row);
    to_bf16(*t_z, &w.w_z, c.value_dim() * row);
    to_bf16(*t_b, &w.w_b, HV * row);
    to_bf16(*t_a, &w.w_a, HV * row);
  } else {
    // Qwen3-Next: rows grouped per key head kh: [q (K) | k (K) | v (r*V) | z (r*V)] and
    // [b (r) | a (r)], r = HV/HK; value head of the j-th v/z/b/a row of group kh is kh*r + j.
    const StTensor *t_qkvz, *t_ba;
    const std::int64_t per = 2 * K + 2 * r * V;
    if (!(st = get("in_proj_qkvz.weight", {HK * per, H}, &t_qkvz)).ok()) return st;
    if (!(st = get("in_proj_ba.weight", {HK * 2 * r, H}, &t_ba)).ok()) return st;
    std::vector<std::uint16_t> qkvz, ba;
    to_bf16(*t_qkvz, &qkvz, HK * per * row);
    to_bf16(*t_ba, &ba, HK * 2 * r * row);
    w.w_qkv.resize(c.conv_dim() * row);
    w.w_z.resize(c.value_dim() * row);
    w.w_b.resize(HV * row);
    w.w_a.resize(HV * row);
    auto copy_row = [&](const std::vector<std::uint16_t>& src, std::int64_t s,
                        std::vector<std::uint16_t>& dst, std::int64_t d) {
      std::memcpy(dst.data() + d * row, src.data() + s * row, 2 * row);
    };
    for (std::int64_t kh = 0; kh < HK; ++kh) {
      const std::int64_t g0 = kh * per;
      for (std::int64_t i = 0; i < K; ++i) {
        copy_row(qkvz, g0 + i, w.w_qkv, kh * K + i);                  // q
        copy_row(qkvz, g0 + K + i, w.w_qkv, HK * K + kh * K + i);     // k
      }
      for (std::int64_t i = 0; i < r * V; ++i) {
        copy_row(qkvz, g0 + 2 * K + i, w.w_qkv, 2 * HK * K + kh * r * V + i);  // v
        copy_row(qkvz, g0 + 2 * K + r * V + i, w.w_z, kh * r * V + i);         // z
      }
      for (std::int64_t j = 0; j < r; ++j) {
        copy_row(ba, kh * 2 * r + j, w.w_b, kh * r + j);
        copy_row(ba, kh * 2 * r + r + j, w.w_a, kh * r + j);
      }
    }
  }
  to_f32(*t_conv, &w.conv_w, static_cast<std::size_t>(c.conv_dim()) * c.conv_kernel);
  to_f32(*t_A, &w.A_log, HV);
  to_f32(*t_dt, &w.dt_bias, HV);
  to_f32(*t_norm, &w.norm_w, V);
  to_bf16(*t_out, &w.w_out, H * c.value_dim());
  *out = std::move(w);
  return Status::Ok();
}

}  // namespace gdn::layer
