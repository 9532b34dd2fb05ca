/* gdn — decode (one token per sequence) and speculative verify (T <= 16 draft tokens per
 * sequence) over a pool of recurrent states: the C ABI.
 *
 * Mirrors include/gdn/decode.hpp with the conventions of include/gdn/gdn.h: plain structs,
 * enumerations as int32_t, int status codes (enum gdn_status). Every call validates its inputs
 * first; on an error nothing is written to the caller's buffers, the call returns a non-zero code
 * and the message goes to `msg` (when given) and to gdn_last_error().
 *
 *   gdn_problem p;  gdn_problem_init(&p, 16, 48, 128, 128);  p.qk_l2norm = 1;
 *   gdn_decode_args a;  gdn_decode_args_init(&a);
 *   a.q = gdn_tensor_contiguous(q, GDN_BF16, 3, (int64_t[]){N, 16, 128});   ... k, v, g, beta, o
 *   a.state = gdn_tensor_contiguous(pool, GDN_F32, 4, (int64_t[]){S, 48, 128, 128});
 *   a.state_indices = idx;  a.on_device = 1;  a.stream = stream;
 *   if (gdn_decode(&p, &a, msg, sizeof msg) != GDN_OK) fprintf(stderr, "%s\n", msg);
 *
 * Semantics (padding rows, in-place update, device-side index check, CUDA-graph safety) are those
 * of gdn::decode / gdn::verify, documented in include/gdn/decode.hpp.
 */
#ifndef GDN_GDN_DECODE_H_
#define GDN_GDN_DECODE_H_

#include <stddef.h>
#include <stdint.h>

#include "gdn/gdn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bits the device-side index check ORs into *error_flag (gdn::kErrStateIndex, kErrNumAccepted). */
#define GDN_DECODE_ERR_STATE_INDEX 1  /* a live state index >= S */
#define GDN_DECODE_ERR_NUM_ACCEPTED 2 /* num_accepted[n] outside [0, T] */

/* Inputs and outputs of one decode / verify call (gdn::DecodeArgs). Decode takes rank-3 q/k/v/o
 * ([N, H, D]) and rank-2 g/a/beta ([N, HV]); verify rank 4 and rank 3 ([N, T, ...]). A tensor
 * with data = NULL is absent. */
typedef struct gdn_decode_args {
  gdn_tensor q;                      /* [N, (T,) HK, K] bf16|f16|f32 */
  gdn_tensor k;                      /* [N, (T,) HK, K] q's dtype */
  gdn_tensor v;                      /* [N, (T,) HV, V] q's dtype */
  gdn_tensor g;                      /* [N, (T,) HV] f32 log-decay; absent: fused gate */
  gdn_tensor A_log;                  /* [HV] f32 (fused gate) */
  gdn_tensor a;                      /* [N, (T,) HV] f32|bf16|f16 (fused gate) */
  gdn_tensor dt_bias;                /* [HV] f32 (fused gate) */
  gdn_tensor beta;                   /* [N, (T,) HV] f32|bf16: beta, or its logit */
  int32_t beta_sigmoid;              /* non-zero: beta = sigmoid(beta) inside the call */
  gdn_tensor o;                      /* [N, (T,) HV, V] q's dtype or f32, output */
  gdn_tensor state;                  /* [S, HV, K, V] (or [S, HV, V, K]) f32|bf16, in place */
  const int32_t* state_indices;      /* [N] pool slot per sequence; < 0: padding row */
  const int32_t* state_indices_host; /* [N] optional host copy (device calls: validation) */
  const int32_t* num_accepted;       /* [N] verify only: commit after this many tokens */
  const int32_t* num_accepted_host;  /* [N] optional host copy (device calls: validation) */
  void* state_cache;                 /* optional [N, T, HV, K, V] per-token states, state's dtype */
  int32_t* error_flag;               /* optional device int32 (device calls only) */
  int32_t on_device;                 /* non-zero: every tensor and index array is device memory */
  void* stream;                      /* cudaStream_t; NULL = default stream */
} gdn_decode_args;

/* Zeroes a: no tensors, host memory, commit all tokens. */
void gdn_decode_args_init(gdn_decode_args* a);

/* One token per sequence (gdn::decode). `msg` (optional, msg_size bytes) receives the error
 * message, or "" on success; NUL-terminated when msg_size > 0. Returns an enum gdn_status. */
int gdn_decode(const gdn_problem* p, const gdn_decode_args* a, char* msg, size_t msg_size);
/* T = q.shape[1] (1..16) draft tokens per sequence (gdn::verify). */
int gdn_verify(const gdn_problem* p, const gdn_decode_args* a, char* msg, size_t msg_size);
/* Shape, dtype and option checks (and host index arrays when given) without touching data;
 * `verify` non-zero checks the verify form (gdn::validate_decode). */
int gdn_validate_decode(const gdn_problem* p, const gdn_decode_args* a, int32_t verify, char* msg,
                        size_t msg_size);

/* Bytes of state traffic of one call (gdn::decode_state_bytes): each live tile read and written
 * once, plus T cache tiles when with_cache is non-zero. -1 for a problem or dtype the call would
 * reject (NULL p, unknown dtype value). */
double gdn_decode_state_bytes(const gdn_problem* p, int32_t state_dtype, int64_t live_seqs,
                              int32_t T, int32_t with_cache);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GDN_GDN_DECODE_H_ */
