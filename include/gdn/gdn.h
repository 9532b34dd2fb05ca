/* gdn — gated delta rule (Gated DeltaNet) prefill: the C ABI.
 *
 * Mirrors include/gdn/gdn.hpp for engines written in C or bound from other languages. Plain
 * structs with fixed-width fields; enumerations are passed as int32_t. Every call validates its
 * inputs first: on an error nothing is written to the caller's outputs, the call returns a non-zero
 * gdn_status code, and the message is copied into the caller's buffer (when given) and kept as
 * this thread's last error (gdn_last_error()).
 *
 *   gdn_problem p;  gdn_problem_init(&p, 16, 48, 128, 128);
 *   gdn_prefill_args a;  gdn_prefill_args_init(&a);
 *   a.q = gdn_tensor_contiguous(q, GDN_BF16, 3, (int64_t[]){T, 16, 128});   ... k, v, g, beta, o
 *   char msg[256];
 *   if (gdn_prefill(&p, &a, GDN_ARM_AUTO, NULL, msg, sizeof msg) != GDN_OK) fprintf(stderr, "%s\n",
 * msg);
 */
#ifndef GDN_GDN_H_
#define GDN_GDN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: gdn_prefill_args gained workspace and workspace_bytes at its end (zeroed by
 * gdn_prefill_args_init or = {0}: no workspace, as before). */
#define GDN_ABI_VERSION 2
/* Alignment of gdn_prefill_args.workspace (bytes). */
#define GDN_WORKSPACE_ALIGNMENT 256

enum gdn_dtype { GDN_F32 = 0, GDN_F16 = 1, GDN_BF16 = 2 };
enum gdn_head_map { GDN_HEAD_MAP_GROUPED = 0, GDN_HEAD_MAP_TILED = 1 };
enum gdn_state_layout { GDN_STATE_KV = 0, GDN_STATE_VK = 1 };
enum gdn_arm {
  GDN_ARM_AUTO = 0,
  GDN_ARM_CPU = 1,
  GDN_ARM_SERIAL = 2,
  GDN_ARM_WY_FP32 = 3,
  GDN_ARM_WY_TC = 4
};
enum gdn_status {
  GDN_OK = 0,
  GDN_ERR_INVALID_ARGUMENT = 1,
  GDN_ERR_UNSUPPORTED = 2,
  GDN_ERR_CUDA = 3,
  GDN_ERR_INTERNAL = 4
};

/* Head geometry and options (gdn::Problem). */
typedef struct gdn_problem {
  int32_t HK;           /* key/query heads */
  int32_t HV;           /* value heads, a multiple of HK */
  int32_t K;            /* key head dim */
  int32_t V;            /* value head dim */
  int32_t head_map;     /* enum gdn_head_map */
  float scale;          /* finite and > 0; gdn_problem_init sets K^-1/2 */
  int32_t qk_l2norm;    /* non-zero: normalize q, k per head inside the call */
  int32_t state_layout; /* enum gdn_state_layout */
} gdn_problem;

/* Non-owning view (gdn::TensorView): rank <= 4, strides in elements. */
typedef struct gdn_tensor {
  void* data;
  int32_t dtype; /* enum gdn_dtype */
  int32_t rank;
  int64_t shape[4];
  int64_t stride[4];
} gdn_tensor;

/* Inputs and outputs of one prefill (gdn::PrefillArgs); T = total tokens, N = sequences. */
typedef struct gdn_prefill_args {
  gdn_tensor q;                     /* [T, HK, K] */
  gdn_tensor k;                     /* [T, HK, K] */
  gdn_tensor v;                     /* [T, HV, V] */
  gdn_tensor g;                     /* [T, HV] f32 log-decay */
  gdn_tensor beta;                  /* [T, HV] f32 or bf16 */
  gdn_tensor o;                     /* [T, HV, V] output */
  gdn_tensor h0;                    /* [N, HV, K, V] f32, optional (data = NULL) */
  gdn_tensor hT;                    /* same shape as h0, optional output */
  const int32_t* cu_seqlens;        /* host [N+1]; NULL: one sequence */
  int32_t num_seqs;                 /* N, read only when cu_seqlens is set */
  const int32_t* cu_seqlens_device; /* optional device copy for the GPU arms */
  int32_t on_device;                /* non-zero: all tensors are CUDA device memory */
  int32_t check_values;             /* non-zero: scan inputs for NaN/Inf and ranges first (the
                                        scan also picks wy-tc's split scheme for |v|, |h0| > 2048
                                        or |q|, |k| > 16384; with it off the caller promises
                                        that range to wy-tc's default fp16 scheme: gdn.hpp,
                                        kWyTcHalfMaxV) */
  void* stream;                     /* cudaStream_t; NULL = default stream */
  /* Caller-provided device workspace for the GPU arms (NULL: the library's pool): at least
   * gdn_prefill_workspace_bytes() bytes of device memory, GDN_WORKSPACE_ALIGNMENT-aligned, valid
   * until the work queued on `stream` completes, not shared between concurrent calls. */
  void* workspace;
  uint64_t workspace_bytes; /* size of workspace; 0 when it is NULL */
} gdn_prefill_args;

/* Fills p with the geometry, grouped head map, scale K^-1/2, no l2norm, [K, V] state. */
void gdn_problem_init(gdn_problem* p, int32_t HK, int32_t HV, int32_t K, int32_t V);
/* Zeroes a (no tensors, one sequence, host memory) and sets check_values = 1. */
void gdn_prefill_args_init(gdn_prefill_args* a);
/* A contiguous (row-major) view; rank outside 0..4 gives rank -1, which calls reject. */
gdn_tensor gdn_tensor_contiguous(const void* data, int32_t dtype, int32_t rank,
                                 const int64_t* shape);

/* Runs the recurrence (gdn::prefill). `arm` is an enum gdn_arm; `arm_ran` (optional) receives the
 * arm that ran. `msg` (optional, msg_size bytes) receives the error message, or "" on success;
 * it is always NUL-terminated when msg_size > 0. Returns an enum gdn_status. */
int gdn_prefill(const gdn_problem* p, const gdn_prefill_args* a, int32_t arm, int32_t* arm_ran,
                char* msg, size_t msg_size);
/* Checks shapes, dtypes, strides and cu_seqlens without touching data (gdn::validate). */
int gdn_validate(const gdn_problem* p, const gdn_prefill_args* a, char* msg, size_t msg_size);
/* The device workspace bytes gdn_prefill(p, a, arm, ...) needs (gdn::prefill_workspace_bytes):
 * same arm resolution, same sizing code as the launch, 0 for the cpu arm; pass the arguments of
 * the call (no data is read). `bytes` receives it (0 on an error). Returns an enum gdn_status. */
int gdn_prefill_workspace_bytes(const gdn_problem* p, const gdn_prefill_args* a, int32_t arm,
                                uint64_t* bytes, char* msg, size_t msg_size);

/* The message of this thread's last failed call ("" after a successful one). */
const char* gdn_last_error(void);

/* "auto", "cpu", "serial", "wy-fp32", "wy-tc" -> *out; GDN_OK or GDN_ERR_INVALID_ARGUMENT. */
int gdn_arm_parse(const char* name, int32_t* out);
/* The arm's name, or "?" for a value that is not an arm. */
const char* gdn_arm_name(int32_t arm);
/* Library version, e.g. "0.1.0". */
const char* gdn_version(void);
/* Returns the GPU arms' cached workspace memory to the driver (gdn::release_scratch). Returns an
 * enum gdn_status; the message is in gdn_last_error(). */
int gdn_release_scratch(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GDN_GDN_H_ */
