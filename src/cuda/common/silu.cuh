// SiLU on the GPU, shared by the layer's kernels (src/cuda/layer/layer.cu) and the wy-tc state
// pass's fused gated norm (src/cuda/wy_tc/wy_tc_state_wg9.cuh), so that both produce the same bits.
#pragma once

#include <cuda_runtime.h>

namespace gdn::cuda {

// The reference form: x / (1 + __expf(-x)) (IEEE divide).
__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

__device__ __forceinline__ float ex2_ftz(float x) {  // MUFU.EX2; = ex2.approx.f32 for x >= -126
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_ftz(float x) {  // MUFU.RCP; = rcp.approx.f32 for normal x
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// silu(a) = a / (1 + __expf(-a)) without the divide's range check: __expf(-a) is
// ex2.approx(-a * log2(e)) (libdevice __nv_fast_expf) whose non-ftz lowering only differs below
// an argument of -126, and the divide is div.rn's fast path (rcp, one Newton step, quotient, one
// correction). Both equal the reference sequence where `in_range` holds; the caller recomputes the
// others with silu().
__device__ __forceinline__ float silu_fast(float a) {
  const float e = ex2_ftz(__fmul_rn(-a, 0x1.715476p+0f));
  const float d = 1.f + e;
  const float r = rcp_ftz(d);
  const float r2 = __fmaf_rn(r, __fmaf_rn(-d, r, 1.f), r);
  const float q = __fmaf_rn(a, r2, 0.f);
  return __fmaf_rn(r2, __fmaf_rn(-d, q, a), q);
}
__device__ __forceinline__ bool silu_fast_in_range(float a) {
  return (fabsf(a) >= 0x1p-40f) & (fabsf(a) <= 32.f);
}

}  // namespace gdn::cuda
