// Decode/verify: the normalized launch description shared by the API layer (decode_api.cpp), the
// CPU implementation and the CUDA kernels (decode.cu). Plain C++ (no CUDA types): the API layer
// fills it after validation, so the kernels and the CPU path never re-check shapes.
#pragma once

#include <cstdint>

#include "gdn/gdn.hpp"

namespace gdn::detail {

struct DecodeLaunch {
  int N = 0, T = 1, HK = 0, HV = 0, K = 0, V = 0;
  std::int64_t S = 0;  // slots in the state pool
  DType io = DType::f32, o_dtype = DType::f32, state_dtype = DType::f32;
  DType beta_dtype = DType::f32, a_dtype = DType::f32;
  bool grouped = true, l2norm = false, fused_gate = false, beta_sigmoid = false, vk = false;
  float scale = 1.f;
  // Element strides (innermost dimension contiguous). *_st is the token stride (0 for decode).
  const void* q = nullptr;  // [N, T, HK, K]
  const void* k = nullptr;  // [N, T, HK, K]
  const void* v = nullptr;  // [N, T, HV, V]
  void* o = nullptr;        // [N, T, HV, V]
  std::int64_t q_sn = 0, q_st = 0, q_sh = 0, k_sn = 0, k_st = 0, k_sh = 0;
  std::int64_t v_sn = 0, v_st = 0, v_sh = 0, o_sn = 0, o_st = 0, o_sh = 0;
  const float* g = nullptr;  // [N, T, HV]
  std::int64_t g_sn = 0, g_st = 0;
  const float* A_log = nullptr;    // [HV]
  const void* a = nullptr;         // [N, T, HV]
  const float* dt_bias = nullptr;  // [HV]
  std::int64_t a_sn = 0, a_st = 0;
  const void* beta = nullptr;  // [N, T, HV]
  std::int64_t beta_sn = 0, beta_st = 0;
  void* state = nullptr;        // [S, HV, K, V] or [S, HV, V, K], contiguous
  void* cache = nullptr;        // [N, T, HV, K, V] or null
  const std::int32_t* idx = nullptr;  // [N]
  const std::int32_t* acc = nullptr;  // [N] or null (commit all T)
  std::int32_t* err = nullptr;        // device error flag or null
  void* stream = nullptr;
};

// fp32 host implementation (inputs validated, indices checked).
Status cpu_decode(const DecodeLaunch& L);
#ifdef GDN_WITH_CUDA
Status cuda_decode(const DecodeLaunch& L);
bool cuda_decode_supports(const DecodeLaunch& L, std::string* why);
#endif

}  // namespace gdn::detail
