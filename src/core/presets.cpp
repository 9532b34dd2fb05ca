// The preset table (DESIGN.md §5) and name resolution: aliases, -tp2 / -tp4 slices.
#include "gdn/presets.hpp"

#include <string>

namespace gdn {
namespace {

struct Base {
  const char* name;
  const char* alias;  // another name of the same geometry, or nullptr
  int HK, HV;
};
// K = V = 128 for every Qwen GDN layer.
constexpr int kHeadDim = 128;
constexpr Base kBases[] = {
    {"qwen3.5-27b", nullptr, 16, 48},
    {"qwen3-next-80b", "qwen3.5-35b", 16, 32},
    {"qwen3.5-397b", "qwen3.5-122b", 16, 64},
};
constexpr int kTpDegrees[] = {2, 4};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const Base& b : kBases) {
    for (const char* n : {b.name, b.alias}) {
      if (!n) continue;
      out.emplace_back(n);
      for (int tp : kTpDegrees) out.push_back(std::string(n) + "-tp" + std::to_string(tp));
    }
  }
  return out;
}

bool find_preset(std::string_view name, Preset* out) {
  int tp = 1;
  std::string_view base = name;
  for (int d : kTpDegrees) {
    const std::string suffix = "-tp" + std::to_string(d);
    if (base.size() > suffix.size() && base.substr(base.size() - suffix.size()) == suffix) {
      base = base.substr(0, base.size() - suffix.size());
      tp = d;
      break;
    }
  }
  for (const Base& b : kBases) {
    const bool is_alias = b.alias && base == b.alias;
    if (base != b.name && !is_alias) continue;
    if (b.HK % tp != 0 || b.HV % tp != 0) return false;
    Preset p;
    p.name = std::string(b.name) + (tp > 1 ? "-tp" + std::to_string(tp) : "");
    p.HK = b.HK / tp;
    p.HV = b.HV / tp;
    p.K = kHeadDim;
    p.V = kHeadDim;
    p.tp = tp;
    if (is_alias) p.note = std::string(b.alias) + " is an alias of " + b.name;
    if (out) *out = p;
    return true;
  }
  return false;
}

}  // namespace gdn
