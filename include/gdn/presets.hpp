// Model geometries that matter (DESIGN.md §5): the benchmark presets, shared by the CLI, the
// layer code and the Python package.
//
// Base presets (K = V = 128 everywhere):
//   qwen3.5-27b      HK 16  HV 48   (48 of 64 layers are GDN)
//   qwen3-next-80b   HK 16  HV 32   alias qwen3.5-35b
//   qwen3.5-397b     HK 16  HV 64   alias qwen3.5-122b
// Tensor-parallel slices: append "-tp2" or "-tp4" to any name (HK and HV divided by the degree),
// e.g. "qwen3.5-27b-tp2" is HK 8, HV 24: what one rank of a TP=2 engine sees.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn {

struct Preset {
  std::string name;  // canonical name, with the "-tpN" suffix when sliced
  int HK = 0, HV = 0, K = 0, V = 0;
  int tp = 1;        // tensor-parallel degree of the slice (1 = whole model)
  std::string note;  // e.g. "alias of qwen3-next-80b"
  Problem problem() const { return Problem::make(HK, HV, K, V); }
};

// Every name find_preset accepts: the base presets, their aliases and their -tp2/-tp4 slices.
std::vector<std::string> preset_names();

// Looks up a preset by name (aliases and "-tp2"/"-tp4" suffixes resolved). False if unknown.
bool find_preset(std::string_view name, Preset* out);

}  // namespace gdn
