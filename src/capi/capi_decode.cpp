// The decode / verify C ABI (include/gdn/gdn_decode.h): converts the plain struct to
// gdn::DecodeArgs and calls the C++ API; errors go through the shared last-error of capi.cpp, and
// no exception crosses the boundary.
#include <cstring>
#include <exception>
#include <string>

#include "capi/capi_internal.hpp"
#include "gdn/decode.hpp"
#include "gdn/gdn_decode.h"

static_assert(GDN_DECODE_ERR_STATE_INDEX == gdn::kErrStateIndex &&
              GDN_DECODE_ERR_NUM_ACCEPTED == gdn::kErrNumAccepted);

namespace {

gdn::Status convert(const gdn_problem* p, const gdn_decode_args* a, gdn::Problem* pp,
                    gdn::DecodeArgs* aa) {
  gdn::Status st = gdn::capi::to_problem(p, pp);
  if (!st.ok()) return st;
  if (!a) return gdn::Status::Invalid("args is NULL");
  const std::pair<const char*, std::pair<const gdn_tensor*, gdn::TensorView*>> views[] = {
      {"q", {&a->q, &aa->q}},
      {"k", {&a->k, &aa->k}},
      {"v", {&a->v, &aa->v}},
      {"g", {&a->g, &aa->g}},
      {"A_log", {&a->A_log, &aa->A_log}},
      {"a", {&a->a, &aa->a}},
      {"dt_bias", {&a->dt_bias, &aa->dt_bias}},
      {"beta", {&a->beta, &aa->beta}},
      {"o", {&a->o, &aa->o}},
      {"state", {&a->state, &aa->state}}};
  for (const auto& [name, tv] : views) {
    // An absent tensor stays undefined whatever its other fields hold (as in C++).
    if (!tv.first->data) continue;
    if (!(st = gdn::capi::to_view(name, *tv.first, tv.second)).ok()) return st;
  }
  aa->beta_sigmoid = a->beta_sigmoid != 0;
  aa->state_indices = a->state_indices;
  aa->state_indices_host = a->state_indices_host;
  aa->num_accepted = a->num_accepted;
  aa->num_accepted_host = a->num_accepted_host;
  aa->state_cache = a->state_cache;
  aa->error_flag = a->error_flag;
  aa->on_device = a->on_device != 0;
  aa->stream = a->stream;
  return gdn::Status::Ok();
}

// 0: decode, 1: verify, 2: validate as decode, 3: validate as verify.
int call(int what, const gdn_problem* p, const gdn_decode_args* a, char* msg, size_t msg_size) {
  try {
    gdn::Problem pp;
    gdn::DecodeArgs aa;
    gdn::Status st = convert(p, a, &pp, &aa);
    if (st.ok()) {
      switch (what) {
        case 0: st = gdn::decode(pp, aa); break;
        case 1: st = gdn::verify(pp, aa); break;
        default: st = gdn::validate_decode(pp, aa, what == 3);
      }
    }
    return gdn::capi::finish(st.code(), st.message(), msg, msg_size);
  } catch (const std::exception& e) {
    return gdn::capi::finish(gdn::Code::internal, std::string("internal error: ") + e.what(), msg,
                             msg_size);
  } catch (...) {
    return gdn::capi::finish(gdn::Code::internal, "internal error: unknown exception", msg,
                             msg_size);
  }
}

}  // namespace

extern "C" {

void gdn_decode_args_init(gdn_decode_args* a) {
  if (!a) return;
  std::memset(a, 0, sizeof *a);
}

int gdn_decode(const gdn_problem* p, const gdn_decode_args* a, char* msg, size_t msg_size) {
  return call(0, p, a, msg, msg_size);
}

int gdn_verify(const gdn_problem* p, const gdn_decode_args* a, char* msg, size_t msg_size) {
  return call(1, p, a, msg, msg_size);
}

int gdn_validate_decode(const gdn_problem* p, const gdn_decode_args* a, int32_t verify, char* msg,
                        size_t msg_size) {
  return call(verify ? 3 : 2, p, a, msg, msg_size);
}

double gdn_decode_state_bytes(const gdn_problem* p, int32_t state_dtype, int64_t live_seqs,
                              int32_t T, int32_t with_cache) {
  gdn::Problem pp;
  if (!gdn::capi::to_problem(p, &pp).ok() || state_dtype < GDN_F32 || state_dtype > GDN_BF16)
    return -1.0;
  return gdn::decode_state_bytes(pp, static_cast<gdn::DType>(state_dtype), live_seqs, T,
                                 with_cache != 0);
}

}  // extern "C"
