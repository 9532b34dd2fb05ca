// Device helpers shared by the decode kernels (decode.cu: v2, decode_v3.cu: v3, v4): typed loads
// of token inputs, warp sums, and 16-byte state vectors (bf16 or fp32) to and from fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gdn/gdn.hpp"

namespace gdn::detail::decode_dev {

__device__ __forceinline__ float load_any(const void* p, DType d, std::int64_t i) {
  switch (d) {
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// 16-byte state vector (as staged in shared memory) -> fp32.
template <typename TS, int VEC>
__device__ __forceinline__ void unpack_vec(const uint4 r, float (&x)[VEC]) {
  if constexpr (sizeof(TS) == 4) {
    x[0] = __uint_as_float(r.x), x[1] = __uint_as_float(r.y);
    x[2] = __uint_as_float(r.z), x[3] = __uint_as_float(r.w);
  } else {
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // bf16 -> f32 is a 16-bit shift: no address taken
      x[2 * e] = __uint_as_float(w[e] << 16);
      x[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
    }
  }
}
// fp32 -> 16-byte state vector, streaming store (evict-first): each byte is written once.
template <typename TS, int VEC>
__device__ __forceinline__ void store_vec(TS* p, const float (&x)[VEC]) {
  if constexpr (sizeof(TS) == 4) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(x[0], x[1], x[2], x[3]));
  } else {
    unsigned w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      w[e] = unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(x[2 * e]))) |
             unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(x[2 * e + 1]))) << 16;
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
}

}  // namespace gdn::detail::decode_dev
