// safetensors reader: 8-byte little-endian header length, JSON header, raw tensor data.
// The file is memory-mapped read-only; tensor views point into the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn::layer {

struct StTensor {
  std::string dtype;                // "BF16", "F16", "F32", ...
  std::vector<std::int64_t> shape;  // as in the header
  const std::uint8_t* data = nullptr;
  std::size_t bytes = 0;
};

class SafetensorsFile {
 public:
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  // Maps and validates the whole header: every tensor's offsets lie inside the file and match
  // its dtype and shape. Errors name the file (and the tensor).
  static Status open(const std::string& path, std::unique_ptr<SafetensorsFile>* out);
  const StTensor* find(const std::string& name) const;
  const std::string& path() const { return path_; }
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::string, StTensor> tensors_;
};

// Bytes per element of a safetensors dtype name; 0 if unknown.
std::size_t st_dtype_size(const std::string& dtype);

}  // namespace gdn::layer
