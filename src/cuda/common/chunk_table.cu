// Capture-safe sequence tables built on the device (see chunk_table.cuh).
#include "cuda/common/chunk_table.cuh"

#include <algorithm>
#include <cstring>

#include "cuda/common/common.cuh"

namespace gdn::cuda {
namespace {

// A slice of host int32 values carried in the kernel parameters (CAP * 4 bytes).
template <int CAP>
struct I32Slice {
  std::int32_t v[CAP];
};
static_assert(sizeof(I32Slice<kCuByValueMax>) + 16 <= 4096, "by-value slice within 4 KB params");

template <int CAP>
__global__ void __launch_bounds__(256) copy_i32_kernel(const I32Slice<CAP> s, int count,
                                                       std::int32_t* __restrict__ dst) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) dst[i] = s.v[i];
}

constexpr int kTableThreads = 1024;

// One block. first[n] by a block-wide exclusive scan of the per-sequence chunk counts (tiles of
// 1024 sequences with a running carry), then tok0/len per chunk by a binary search of first[].
// `first` is written and re-read by this block, so it is a plain (coherent) pointer.
__global__ void __launch_bounds__(kTableThreads)
    chunk_table_kernel(const std::int32_t* __restrict__ cu, int N, int C, std::int64_t nc,
                       std::int32_t* first, std::int32_t* __restrict__ tok0,
                       std::int32_t* __restrict__ len) {
  __shared__ int warp_sum[kTableThreads / 32];
  __shared__ int s_total;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int carry = 0;  // chunks of sequences before this tile (uniform across the block)
  for (int base = 0; base < N; base += kTableThreads) {
    const int n = base + tid;
    int cnt = 0;
    if (n < N) {
      const int L = max(cu[n + 1] - cu[n], 0);
      cnt = L / C + (L % C != 0);
    }
    int x = cnt;  // inclusive warp scan
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    if (lane == 31) warp_sum[warp] = x;
    __syncthreads();
    if (warp == 0) {
      int w = warp_sum[lane];
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, w, off);
        if (lane >= off) w += y;
      }
      warp_sum[lane] = w;
    }
    __syncthreads();
    if (n < N) first[n] = carry + x - cnt + (warp > 0 ? warp_sum[warp - 1] : 0);
    carry += warp_sum[31];
    __syncthreads();  // warp_sum is rewritten by the next tile
  }
  if (tid == 0) {
    first[N] = carry;
    s_total = carry;
  }
  __syncthreads();
  const int total = s_total;
  const int t_end = cu[N];
  for (std::int64_t ci = tid; ci < nc; ci += kTableThreads) {
    if (ci >= total) {  // slack of an upper-bound grid: an empty chunk past the last token
      tok0[ci] = t_end;
      len[ci] = 0;
      continue;
    }
    // Largest n with first[n] <= ci: first[lo] <= ci < first[hi] throughout.
    int lo = 0, hi = N;
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (first[mid] <= ci) lo = mid;
      else hi = mid;
    }
    const std::int64_t t = cu[lo] + (ci - first[lo]) * C;
    tok0[ci] = static_cast<std::int32_t>(t);
    len[ci] = static_cast<std::int32_t>(min(static_cast<std::int64_t>(C), cu[lo + 1] - t));
  }
}

std::size_t round256(std::size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

Offsets offsets_of(const PrefillArgs& a, const detail::Seqs& s) {
  Offsets o;
  o.host = s.cu;
  o.device = a.cu_seqlens_device;
  o.N = s.N;
  o.T = s.T;
  return o;
}

ChunkTablePlan plan_chunk_table(const Offsets& off, int C, bool force_bound) {
  ChunkTablePlan p;
  p.N = off.N;
  p.T = off.T;
  p.C = C;
  p.copy_cu = off.device == nullptr;
  if (C > 0) {
    if (off.host && !force_bound) {
      std::int64_t nc = 0;
      for (int n = 0; n < off.N; ++n) {
        const std::int64_t L = std::max<std::int64_t>(0, off.host[n + 1] - off.host[n]);
        nc += (L + C - 1) / C;
      }
      p.nc = nc;
      p.exact = true;
    } else {
      p.nc = (off.T + static_cast<std::int64_t>(off.N) * (C - 1)) / C;
      p.exact = false;
    }
  }
  const std::size_t words = (p.copy_cu ? off.N + 1 : 0) + (C > 0 ? off.N + 1 + 2 * p.nc : 0);
  p.bytes = round256(words * sizeof(std::int32_t));
  return p;
}

Status copy_i32_by_value(const std::int32_t* host, std::int64_t count, std::int32_t* dst,
                         cudaStream_t stream) {
  for (std::int64_t i = 0; i < count; i += kCuByValueMax) {
    const int m = static_cast<int>(std::min<std::int64_t>(kCuByValueMax, count - i));
    if (m <= 64) {
      I32Slice<64> s{};
      std::memcpy(s.v, host + i, sizeof(std::int32_t) * m);
      copy_i32_kernel<64><<<1, 64, 0, stream>>>(s, m, dst + i);
    } else {
      I32Slice<kCuByValueMax> s{};
      std::memcpy(s.v, host + i, sizeof(std::int32_t) * m);
      copy_i32_kernel<kCuByValueMax><<<1, 256, 0, stream>>>(s, m, dst + i);
    }
    GDN_CUDA_LAUNCH_CHECK("copy_i32_kernel");
  }
  return Status::Ok();
}

Status build_chunk_table(const ChunkTablePlan& plan, const Offsets& off, void* scratch,
                         cudaStream_t stream, ChunkTable* out) {
  if (!off.host && !off.device)
    return Status::Internal("build_chunk_table: neither host nor device offsets");
  std::int32_t* w = static_cast<std::int32_t*>(scratch);
  ChunkTable t;
  if (plan.copy_cu) {
    if (!off.host) return Status::Internal("build_chunk_table: no offsets to copy");
    Status st = copy_i32_by_value(off.host, plan.N + 1, w, stream);
    if (!st.ok()) return st;
    t.cu = w;
    w += plan.N + 1;
  } else {
    t.cu = off.device;
  }
  if (plan.C > 0) {
    std::int32_t* first = w;
    std::int32_t* tok0 = first + plan.N + 1;
    std::int32_t* len = tok0 + plan.nc;
    chunk_table_kernel<<<1, kTableThreads, 0, stream>>>(t.cu, plan.N, plan.C, plan.nc, first,
                                                        tok0, len);
    GDN_CUDA_LAUNCH_CHECK("chunk_table_kernel");
    t.first = first;
    t.tok0 = tok0;
    t.len = len;
    t.nc = plan.nc;
  }
  *out = t;
  return Status::Ok();
}

}  // namespace gdn::cuda
