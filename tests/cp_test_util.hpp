// Shared by tests/cpu/test_cp.cpp and tests/gpu/test_cp.cpp: runs a fixture through prefill,
// prefill_cp, a no-combine control, or P virtual ranks (cp_rank_maps / cp_rank_finish with the
// all-gather done by hand), in host or device memory (a Mem hook), with NaN-poisoned outputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "gdn/cp.hpp"
#include "gdn/gdn.hpp"

namespace gdn::cptest {

// Where a run's tensors live. Host: owned copies. Device: the GPU test's cudaMalloc'ed copies.
struct Mem {
  virtual ~Mem() = default;
  virtual bool device() const = 0;
  virtual void* upload(const void* host, std::size_t bytes) = 0;  // nullptr on failure
  virtual bool download(void* host, const void* mem, std::size_t bytes) = 0;
};

struct HostMem : Mem {
  std::vector<std::unique_ptr<char[]>> bufs;
  bool device() const override { return false; }
  void* upload(const void* host, std::size_t bytes) override {
    bufs.emplace_back(new char[std::max<std::size_t>(bytes, 4)]);
    if (bytes) std::memcpy(bufs.back().get(), host, bytes);
    return bufs.back().get();
  }
  bool download(void* host, const void* mem, std::size_t bytes) override {
    if (bytes) std::memcpy(host, mem, bytes);
    return true;
  }
};

enum class Mode {
  plain,       // prefill
  cp,          // prefill_cp(P)
  no_combine,  // negative control: P segments as sequences, segment 0 from h0, the rest from 0
  ranks,       // P virtual ranks over uneven token slices (one sequence only)
};

struct Out {
  Status status;
  RunInfo info;
  std::vector<double> o, hT;
};

// Segment boundaries as prefill_cp draws them (chunk-aligned, ceil(chunks / P) per segment).
inline std::vector<std::int32_t> segment_bounds(const std::vector<std::int32_t>& cu, int P) {
  const int N = static_cast<int>(cu.size()) - 1;
  std::vector<std::int32_t> b(std::size_t(N) * P + 1);
  for (int n = 0; n < N; ++n) {
    const std::int64_t len = cu[n + 1] - cu[n], per = ((len + 63) / 64 + P - 1) / P * 64;
    for (int s = 0; s < P; ++s) b[n * P + s] = std::int32_t(cu[n] + std::min(len, s * per));
  }
  b.back() = cu.back();
  return b;
}

inline Out run(const check::Case& c, Mode mode, int P, Arm arm, Mem& mem) {
  Out out;
  const Problem& p = c.prob;
  const std::int64_t no = c.T * p.HV * p.V;
  const int N = static_cast<int>(c.cu_seqlens.size()) - 1;
  const std::int64_t st_item = std::int64_t(p.HV) * p.K * p.V, ns = N * st_item;
  const DType od = c.spec.out_dtype;
  const std::size_t ob = dtype_size(od);
  // Poison: NaN in every output element, so an unwritten one fails.
  std::vector<float> o32(od == DType::f32 ? no : 0, std::numeric_limits<float>::quiet_NaN());
  std::vector<std::uint16_t> o16(od == DType::f32 ? 0 : no, od == DType::bf16 ? 0x7fc0 : 0x7e00);
  std::vector<float> hT(ns, std::numeric_limits<float>::quiet_NaN());
  void* o_host = od == DType::f32 ? static_cast<void*>(o32.data()) : o16.data();
  PrefillArgs a = c.host_args(o_host, hT.data());
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.o, &a.h0, &a.hT}) {
    if (!t->defined()) continue;
    t->data = mem.upload(t->data, t->numel() * dtype_size(t->dtype));
    if (!t->data) {
      out.status = Status::Internal("test: upload failed");
      return out;
    }
  }
  a.on_device = mem.device();
  switch (mode) {
    case Mode::plain:
      out.status = prefill(p, a, arm, &out.info);
      break;
    case Mode::cp:
      out.status = prefill_cp(p, a, P, arm, &out.info);
      break;
    case Mode::no_combine: {
      const std::vector<std::int32_t> b = segment_bounds(c.cu_seqlens, P);
      const int NS = N * P;
      // h0 per segment: segment 0 of sequence n gets h0[n] (same layout), the others 0.
      std::vector<float> h0s(std::size_t(NS) * st_item, 0.f), hTs(h0s.size(), NAN);
      if (c.spec.h0)
        for (int n = 0; n < N; ++n)
          std::copy_n(c.h0.data() + n * st_item, st_item,
                      h0s.data() + std::size_t(n) * P * st_item);
      PrefillArgs s = a;
      s.cu_seqlens = b.data();
      s.num_seqs = NS;
      const bool vk = p.state_layout == StateLayout::vk;
      const std::int64_t s2 = vk ? p.V : p.K, s3 = vk ? p.K : p.V;
      s.h0 = TensorView::contiguous(mem.upload(h0s.data(), h0s.size() * 4), DType::f32,
                                    {NS, p.HV, s2, s3});
      s.hT = TensorView::contiguous(mem.upload(hTs.data(), hTs.size() * 4), DType::f32,
                                    {NS, p.HV, s2, s3});
      out.status = prefill(p, s, arm, &out.info);
      if (out.status.ok() && !mem.download(hTs.data(), s.hT.data, hTs.size() * 4))
        out.status = Status::Internal("test: download failed");
      for (int n = 0; n < N; ++n)  // the last segment's final state stands for the sequence's
        std::copy_n(hTs.data() + (std::size_t(n) * P + P - 1) * st_item, st_item,
                    hT.data() + n * st_item);
      a.hT.data = nullptr;  // already on the host
      break;
    }
    case Mode::ranks: {
      if (N != 1) {
        out.status = Status::Invalid("test: virtual ranks take one sequence");
        return out;
      }
      const std::size_t F = cp_rank_map_floats(p, 1);
      std::vector<float> g(std::size_t(P) * F, NAN);
      float* gathered = static_cast<float*>(mem.upload(g.data(), g.size() * 4));
      // Uneven, not chunk-aligned slices: any split is exact algebra.
      std::vector<std::int64_t> cut(P + 1);
      for (int r = 0; r <= P; ++r) cut[r] = (c.T * r * r) / (std::int64_t(P) * P);
      auto slice_args = [&](int r) {
        PrefillArgs s = a;
        const std::int64_t t0 = cut[r], len = cut[r + 1] - cut[r];
        for (TensorView* t : {&s.q, &s.k, &s.v, &s.g, &s.beta, &s.o}) {
          t->data = static_cast<char*>(t->data) + t0 * t->stride[0] * dtype_size(t->dtype);
          t->shape[0] = len;
        }
        s.cu_seqlens = nullptr;
        s.num_seqs = 0;
        if (r != 0) s.h0 = TensorView{};
        if (r != P - 1) s.hT = TensorView{};
        return s;
      };
      for (int r = 0; r < P && out.status.ok(); ++r)
        out.status = cp_rank_maps(p, slice_args(r), r, P, arm, gathered + r * F, &out.info);
      for (int r = 0; r < P && out.status.ok(); ++r)
        out.status = cp_rank_finish(p, slice_args(r), r, P, arm, gathered, &out.info);
      break;
    }
  }
  if (!mem.download(o_host, a.o.data, no * ob) ||
      (a.hT.data && !mem.download(hT.data(), a.hT.data, ns * 4)))
    out.status = Status::Internal("test: download failed");
  out.o.resize(no);
  for (std::int64_t i = 0; i < no; ++i)
    out.o[i] = od == DType::f32    ? o32[i]
               : od == DType::bf16 ? check::bf16_to_f32(o16[i])
                                   : check::f16_to_f32(o16[i]);
  out.hT.assign(hT.begin(), hT.end());
  return out;
}

inline const char* mode_name(Mode m) {
  switch (m) {
    case Mode::plain:
      return "prefill";
    case Mode::cp:
      return "prefill_cp";
    case Mode::no_combine:
      return "no-combine";
    case Mode::ranks:
      return "virtual-ranks";
  }
  return "?";
}

}  // namespace gdn::cptest
