// The C ABI (include/gdn/gdn.h): converts plain structs to the C++ API, validates the enum
// values a C caller can get wrong, and never lets an exception cross the boundary.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "capi/capi_internal.hpp"
#include "gdn/gdn.h"
#include "gdn/gdn.hpp"

// The C enumerations are the C++ ones, value for value.
static_assert(GDN_F32 == int(gdn::DType::f32) && GDN_F16 == int(gdn::DType::f16) &&
              GDN_BF16 == int(gdn::DType::bf16));
static_assert(GDN_HEAD_MAP_GROUPED == int(gdn::HeadMap::grouped) &&
              GDN_HEAD_MAP_TILED == int(gdn::HeadMap::tiled));
static_assert(GDN_STATE_KV == int(gdn::StateLayout::kv) &&
              GDN_STATE_VK == int(gdn::StateLayout::vk));
static_assert(GDN_ARM_AUTO == int(gdn::Arm::automatic) && GDN_ARM_CPU == int(gdn::Arm::cpu) &&
              GDN_ARM_SERIAL == int(gdn::Arm::serial) &&
              GDN_ARM_WY_FP32 == int(gdn::Arm::wy_fp32) && GDN_ARM_WY_TC == int(gdn::Arm::wy_tc));
static_assert(GDN_WORKSPACE_ALIGNMENT == gdn::kWorkspaceAlignment);
static_assert(GDN_OK == int(gdn::Code::ok) &&
              GDN_ERR_INVALID_ARGUMENT == int(gdn::Code::invalid_argument) &&
              GDN_ERR_UNSUPPORTED == int(gdn::Code::unsupported) &&
              GDN_ERR_CUDA == int(gdn::Code::cuda_error) &&
              GDN_ERR_INTERNAL == int(gdn::Code::internal));

namespace gdn::capi {

thread_local std::string g_last_error;

int finish(gdn::Code code, const std::string& message, char* msg, size_t msg_size) {
  g_last_error = code == gdn::Code::ok ? std::string() : message;
  if (msg && msg_size > 0) std::snprintf(msg, msg_size, "%s", g_last_error.c_str());
  return static_cast<int>(code);
}

bool to_dtype(int32_t v, gdn::DType* out) {
  if (v < GDN_F32 || v > GDN_BF16) return false;
  *out = static_cast<gdn::DType>(v);
  return true;
}

// Converts a C tensor; an undefined one (data == NULL) keeps rank and shape so validate() can
// report shape errors on it the same way as in C++.
gdn::Status to_view(const char* name, const gdn_tensor& t, gdn::TensorView* out) {
  if (t.rank < 0 || t.rank > 4)
    return gdn::Status::Invalid(std::string(name) + ": rank " + std::to_string(t.rank) +
                                " outside 0..4");
  if (!to_dtype(t.dtype, &out->dtype))
    return gdn::Status::Invalid(std::string(name) + ": unknown dtype value " +
                                std::to_string(t.dtype));
  out->data = t.data;
  out->rank = t.rank;
  for (int d = 0; d < 4; ++d) {
    out->shape[d] = d < t.rank ? t.shape[d] : 0;
    out->stride[d] = d < t.rank ? t.stride[d] : 0;
  }
  return gdn::Status::Ok();
}

gdn::Status to_problem(const gdn_problem* p, gdn::Problem* pp) {
  if (!p) return gdn::Status::Invalid("problem is NULL");
  if (p->head_map != GDN_HEAD_MAP_GROUPED && p->head_map != GDN_HEAD_MAP_TILED)
    return gdn::Status::Invalid("unknown head_map value " + std::to_string(p->head_map));
  if (p->state_layout != GDN_STATE_KV && p->state_layout != GDN_STATE_VK)
    return gdn::Status::Invalid("unknown state_layout value " + std::to_string(p->state_layout));
  pp->HK = p->HK;
  pp->HV = p->HV;
  pp->K = p->K;
  pp->V = p->V;
  pp->head_map = static_cast<gdn::HeadMap>(p->head_map);
  pp->scale = p->scale;
  pp->qk_l2norm = p->qk_l2norm != 0;
  pp->state_layout = static_cast<gdn::StateLayout>(p->state_layout);
  return gdn::Status::Ok();
}

}  // namespace gdn::capi

namespace {

using gdn::capi::finish;
using gdn::capi::g_last_error;

gdn::Status convert(const gdn_problem* p, const gdn_prefill_args* a, gdn::Problem* pp,
                    gdn::PrefillArgs* aa) {
  gdn::Status pst = gdn::capi::to_problem(p, pp);
  if (!pst.ok()) return pst;
  if (!a) return gdn::Status::Invalid("args is NULL");
  const std::pair<const char*, std::pair<const gdn_tensor*, gdn::TensorView*>> views[] = {
      {"q", {&a->q, &aa->q}},    {"k", {&a->k, &aa->k}},          {"v", {&a->v, &aa->v}},
      {"g", {&a->g, &aa->g}},    {"beta", {&a->beta, &aa->beta}}, {"o", {&a->o, &aa->o}},
      {"h0", {&a->h0, &aa->h0}}, {"hT", {&a->hT, &aa->hT}}};
  for (const auto& [name, tv] : views) {
    gdn::Status st = gdn::capi::to_view(name, *tv.first, tv.second);
    if (!st.ok()) return st;
  }
  aa->cu_seqlens = a->cu_seqlens;
  aa->num_seqs = a->num_seqs;
  aa->cu_seqlens_device = a->cu_seqlens_device;
  aa->on_device = a->on_device != 0;
  aa->check_values = a->check_values != 0;
  aa->stream = a->stream;
  aa->workspace = a->workspace;
  aa->workspace_bytes = a->workspace_bytes;
  return gdn::Status::Ok();
}

}  // namespace

extern "C" {

void gdn_problem_init(gdn_problem* p, int32_t HK, int32_t HV, int32_t K, int32_t V) {
  if (!p) return;
  const gdn::Problem q = gdn::Problem::make(HK, HV, K, V);
  std::memset(p, 0, sizeof *p);
  p->HK = q.HK;
  p->HV = q.HV;
  p->K = q.K;
  p->V = q.V;
  p->head_map = GDN_HEAD_MAP_GROUPED;
  p->scale = q.scale;
  p->qk_l2norm = 0;
  p->state_layout = GDN_STATE_KV;
}

void gdn_prefill_args_init(gdn_prefill_args* a) {
  if (!a) return;
  std::memset(a, 0, sizeof *a);
  a->check_values = 1;
}

gdn_tensor gdn_tensor_contiguous(const void* data, int32_t dtype, int32_t rank,
                                 const int64_t* shape) {
  gdn_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  if (rank < 0 || rank > 4 || (rank > 0 && !shape)) {
    t.rank = -1;
    return t;
  }
  t.rank = rank;
  int64_t st = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.stride[d] = st;
    st *= shape[d];
  }
  return t;
}

int gdn_prefill(const gdn_problem* p, const gdn_prefill_args* a, int32_t arm, int32_t* arm_ran,
                char* msg, size_t msg_size) {
  try {
    if (arm < GDN_ARM_AUTO || arm > GDN_ARM_WY_TC)
      return finish(gdn::Code::invalid_argument, "unknown arm value " + std::to_string(arm), msg,
                    msg_size);
    gdn::Problem pp;
    gdn::PrefillArgs aa;
    gdn::Status st = convert(p, a, &pp, &aa);
    if (!st.ok()) return finish(st.code(), st.message(), msg, msg_size);
    gdn::RunInfo info;
    st = gdn::prefill(pp, aa, static_cast<gdn::Arm>(arm), &info);
    if (st.ok() && arm_ran) *arm_ran = static_cast<int32_t>(info.ran);
    return finish(st.code(), st.message(), msg, msg_size);
  } catch (const std::exception& e) {
    return finish(gdn::Code::internal, std::string("internal error: ") + e.what(), msg, msg_size);
  } catch (...) {
    return finish(gdn::Code::internal, "internal error: unknown exception", msg, msg_size);
  }
}

int gdn_validate(const gdn_problem* p, const gdn_prefill_args* a, char* msg, size_t msg_size) {
  try {
    gdn::Problem pp;
    gdn::PrefillArgs aa;
    gdn::Status st = convert(p, a, &pp, &aa);
    if (st.ok()) st = gdn::validate(pp, aa);
    return finish(st.code(), st.message(), msg, msg_size);
  } catch (const std::exception& e) {
    return finish(gdn::Code::internal, std::string("internal error: ") + e.what(), msg, msg_size);
  }
}

int gdn_prefill_workspace_bytes(const gdn_problem* p, const gdn_prefill_args* a, int32_t arm,
                                uint64_t* bytes, char* msg, size_t msg_size) {
  try {
    if (bytes) *bytes = 0;
    if (!bytes) return finish(gdn::Code::invalid_argument, "bytes is NULL", msg, msg_size);
    if (arm < GDN_ARM_AUTO || arm > GDN_ARM_WY_TC)
      return finish(gdn::Code::invalid_argument, "unknown arm value " + std::to_string(arm), msg,
                    msg_size);
    gdn::Problem pp;
    gdn::PrefillArgs aa;
    gdn::Status st = convert(p, a, &pp, &aa);
    std::uint64_t b = 0;
    if (st.ok()) st = gdn::prefill_workspace_bytes(pp, aa, static_cast<gdn::Arm>(arm), &b);
    if (st.ok()) *bytes = b;
    return finish(st.code(), st.message(), msg, msg_size);
  } catch (const std::exception& e) {
    return finish(gdn::Code::internal, std::string("internal error: ") + e.what(), msg, msg_size);
  }
}

const char* gdn_last_error(void) { return g_last_error.c_str(); }

int gdn_arm_parse(const char* name, int32_t* out) {
  gdn::Arm a;
  if (!name || !out || !gdn::parse_arm(name, &a)) {
    g_last_error = std::string("unknown arm '") + (name ? name : "(null)") +
                   "' (auto|cpu|serial|wy-fp32|wy-tc)";
    return GDN_ERR_INVALID_ARGUMENT;
  }
  *out = static_cast<int32_t>(a);
  g_last_error.clear();
  return GDN_OK;
}

const char* gdn_arm_name(int32_t arm) {
  if (arm < GDN_ARM_AUTO || arm > GDN_ARM_WY_TC) return "?";
  return gdn::to_string(static_cast<gdn::Arm>(arm));
}

const char* gdn_version(void) { return gdn::version(); }

int gdn_release_scratch(void) {
  try {
    const gdn::Status st = gdn::release_scratch();
    return finish(st.code(), st.message(), nullptr, 0);
  } catch (const std::exception& e) {
    return finish(gdn::Code::internal, std::string("internal error: ") + e.what(), nullptr, 0);
  }
}

}  // extern "C"
