// Capture-safe sequence tables for the GPU arms: the device copy of cu_seqlens and the chunk
// table (first token, length and first chunk of each sequence) built on the device, in stream
// order, with no pageable host-to-device copy and no host synchronisation.
//
// Why: cudaMemcpyAsync from pageable host memory is refused during CUDA stream capture (and is a
// staged, partly synchronous copy outside it). Host offsets therefore travel BY VALUE, in the
// parameters of a small copy kernel: the launch snapshots them, so the caller's array may be a
// temporary, and a captured graph replays the offsets it was captured with (like any kernel
// argument). Offsets already on the device (`PrefillArgs::cu_seqlens_device`) are read in place.
//
// By-value capacity: kCuByValueMax = 1000 offsets per copy launch (4 KB of parameters with the
// header): the old 4 KB kernel-parameter limit, so this works on every toolkit and on sm_80
// without relying on CUDA 12.1's 32 KB parameters. More offsets are copied by ceil((N+1)/1000)
// launches of the same kernel (each carries its own slice by value), so every size stays
// capturable; no pageable fallback is left.
//
// Chunk table (chunk size C; sequences never share a chunk, a sequence's last chunk may be
// partial, zero-length sequences own no chunk):
//   first[n]  = sum_{m < n} ceil(len_m / C)       [N+1]; first[N] = the real chunk count
//   tok0[ci]  = first token of chunk ci             [nc]
//   len[ci]   = its length, 1..C                    [nc]
// Entries ci in [first[N], nc) hold tok0 = T, len = 0: kernels launched over nc chunks must
// early-exit for ci >= first[N]. nc is the exact count when host offsets are known (the host
// sums them: host memory, no sync) and otherwise the upper bound floor((T + N (C-1)) / C)
// (<= ceil(T / C) + N), so the host never needs device values.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/internal.hpp"
#include "gdn/gdn.hpp"

namespace gdn::cuda {

constexpr int kCuByValueMax = 1000;  // int32 offsets per by-value copy launch (<= 4 KB params)

// Sequence offsets as an arm receives them. At least one of host/device is set.
struct Offsets {
  const std::int32_t* host = nullptr;    // [N+1] host memory (pageable is fine), or null
  const std::int32_t* device = nullptr;  // [N+1] device memory, or null
  int N = 1;
  std::int64_t T = 0;  // total tokens (= offsets[N]); needed for the bound when host is null
};
// From validated PrefillArgs: host = s.cu (the caller's offsets or {0, T}), device =
// a.cu_seqlens_device.
Offsets offsets_of(const PrefillArgs& a, const detail::Seqs& s);

struct ChunkTablePlan {
  int N = 1;
  std::int64_t T = 0;
  int C = 0;               // 0: plan only the device copy of the offsets
  std::int64_t nc = 0;     // chunks to launch over (exact, or the upper bound)
  bool exact = false;      // nc == first[N]
  bool copy_cu = false;    // the offsets are copied into the scratch (no device pointer given)
  std::size_t bytes = 0;   // scratch bytes needed, a multiple of 256
};
// Host only, no CUDA call. force_bound: size nc by the upper bound even when host offsets are
// known (tests of the early-exit path).
ChunkTablePlan plan_chunk_table(const Offsets& off, int C, bool force_bound = false);

struct ChunkTable {
  const std::int32_t* cu = nullptr;     // [N+1] on the device
  const std::int32_t* tok0 = nullptr;   // [nc]  (null when C = 0)
  const std::int32_t* len = nullptr;    // [nc]
  const std::int32_t* first = nullptr;  // [N+1]
  std::int64_t nc = 0;
};
// Enqueues the table's construction on `stream` into `scratch` (plan.bytes, 4-byte aligned,
// e.g. from cudaMallocAsync). Capture-legal: kernel launches only.
Status build_chunk_table(const ChunkTablePlan& plan, const Offsets& off, void* scratch,
                         cudaStream_t stream, ChunkTable* out);

// Copies `count` host int32 values to device `dst` by value (ceil(count / kCuByValueMax)
// kernel launches on `stream`). The host array may be freed as soon as this returns.
Status copy_i32_by_value(const std::int32_t* host, std::int64_t count, std::int32_t* dst,
                         cudaStream_t stream);

}  // namespace gdn::cuda
