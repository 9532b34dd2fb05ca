// Helpers shared by the GPU test files (one copy, not one per arm).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "check/check.hpp"
#include "gdn/gdn.hpp"

namespace gdn::testutil {

// A failing row in full: the table line, the arm's error if any, and the bound's formula.
inline std::string describe(const check::Row& r) {
  return check::format_table({r}) + (r.error.empty() ? "" : "error: " + r.error + "\n") +
         "bound: " + r.bound.formula + "\n";
}

// First index where two outputs differ in bits (NaNs with the same payload compare equal), or -1.
inline std::int64_t first_bit_difference(const std::vector<double>& a,
                                         const std::vector<double>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) return static_cast<std::int64_t>(i);
  return -1;
}

// A fixture with the given sequence lengths and head geometry, other fields at their defaults.
inline check::CaseSpec spec_of(std::vector<int> lens, int HK, int HV, int K, int V) {
  check::CaseSpec s;
  s.seq_lens = std::move(lens);
  s.HK = HK;
  s.HV = HV;
  s.K = K;
  s.V = V;
  return s;
}


// Sets environment variable `name` to `value` (nullptr: unsets it) for this object's lifetime
// (the run-time kernel variant switches, GDN_*_VARIANT), then restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* prev = std::getenv(name);
    had_ = prev != nullptr;
    if (had_) saved_ = prev;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, saved_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

// Device copy of a host view's whole byte span (the case's storage is dense), freed with the
// object; make() points the view at the copy. pad: bytes left before the copy in its allocation
// (an odd number of elements puts the view's rows off 16-byte alignment).
struct DeviceCopy {
  void* ptr = nullptr;
  DeviceCopy() = default;
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() {
    if (ptr) cudaFree(ptr);
  }
  bool make(gdn::TensorView* t, std::size_t pad = 0) {
    if (!t->defined()) return true;
    std::int64_t last = 0;
    for (int d = 0; d < t->rank; ++d) last += (t->shape[d] - 1) * t->stride[d];
    // An empty view (a zero extent) copies nothing but still gets a live device address.
    const std::size_t bytes =
        t->numel() > 0 ? static_cast<std::size_t>(last + 1) * gdn::dtype_size(t->dtype) : 0;
    if (cudaMalloc(&ptr, std::max<std::size_t>(bytes + pad, 4)) != cudaSuccess) return false;
    char* at = static_cast<char*>(ptr) + pad;
    if (cudaMemcpy(at, t->data, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return false;
    t->data = at;
    return true;
  }
};

// Runs f(v) once per value v of environment variable `name` (e.g. every kernel variant).
template <std::size_t N, typename F>
void for_each_env(const char* name, const char* const (&values)[N], F&& f) {
  for (const char* v : values) {
    ScopedEnv env(name, v);
    SCOPED_TRACE(std::string(name) + "=" + v);
    f(v);
  }
}

}  // namespace gdn::testutil
