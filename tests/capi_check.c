/* Compiled as C (C99, -pedantic): proves include/gdn/gdn.h and include/gdn/gdn_decode.h are C
 * headers, and calls the library from C: one valid prefill on the cpu arm, one rejected prefill and
 * one rejected decode (no tensors). Exit 0 on success. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gdn/gdn.h"
#include "gdn/gdn_decode.h"

enum { T = 5, HK = 1, HV = 2, K = 4, V = 4 };

int main(void) {
  float q[T * HK * K], k[T * HK * K], v[T * HV * V], g[T * HV], beta[T * HV], o[T * HV * V];
  const int64_t qs[3] = {T, HK, K}, vs[3] = {T, HV, V}, gs[2] = {T, HV};
  gdn_problem p;
  gdn_prefill_args a;
  gdn_decode_args da;
  char msg[256];
  int32_t ran = -1;
  int i, rc, bad = 0;
  for (i = 0; i < T * HK * K; ++i) q[i] = k[i] = 0.5f * (float)((i % 3) - 1);
  for (i = 0; i < T * HV * V; ++i) v[i] = 0.25f * (float)(i % 5);
  for (i = 0; i < T * HV; ++i) g[i] = -0.1f, beta[i] = 0.5f;
  for (i = 0; i < T * HV * V; ++i) o[i] = NAN;

  gdn_problem_init(&p, HK, HV, K, V);
  gdn_prefill_args_init(&a);
  a.q = gdn_tensor_contiguous(q, GDN_F32, 3, qs);
  a.k = gdn_tensor_contiguous(k, GDN_F32, 3, qs);
  a.v = gdn_tensor_contiguous(v, GDN_F32, 3, vs);
  a.g = gdn_tensor_contiguous(g, GDN_F32, 2, gs);
  a.beta = gdn_tensor_contiguous(beta, GDN_F32, 2, gs);
  a.o = gdn_tensor_contiguous(o, GDN_F32, 3, vs);

  rc = gdn_prefill(&p, &a, GDN_ARM_CPU, &ran, msg, sizeof msg);
  if (rc != GDN_OK || ran != GDN_ARM_CPU) {
    printf("FAIL valid call: rc %d, arm %d, message '%s'\n", rc, (int)ran, msg);
    return 1;
  }
  for (i = 0; i < T * HV * V; ++i)
    if (!isfinite(o[i])) bad = 1;
  if (bad) {
    printf("FAIL valid call left non-finite outputs\n");
    return 1;
  }

  for (i = 0; i < T * HV * V; ++i) o[i] = NAN;
  p.HV = 3; /* not a multiple of HK = 2 below */
  p.HK = 2;
  rc = gdn_prefill(&p, &a, GDN_ARM_CPU, NULL, msg, sizeof msg);
  if (rc != GDN_ERR_INVALID_ARGUMENT || strstr(msg, "not a multiple") == NULL ||
      strcmp(msg, gdn_last_error()) != 0) {
    printf("FAIL bad call: rc %d, message '%s'\n", rc, msg);
    return 1;
  }
  for (i = 0; i < T * HV * V; ++i)
    if (!isnan(o[i])) bad = 1;
  if (bad) {
    printf("FAIL bad call wrote the output\n");
    return 1;
  }
  gdn_problem_init(&p, HK, HV, K, V);
  gdn_decode_args_init(&da);
  rc = gdn_decode(&p, &da, msg, sizeof msg);
  if (rc != GDN_ERR_INVALID_ARGUMENT || strstr(msg, "q:") == NULL) {
    printf("FAIL empty decode call: rc %d, message '%s'\n", rc, msg);
    return 1;
  }
  rc = gdn_release_scratch();
  if (rc != GDN_OK) {
    printf("FAIL gdn_release_scratch: rc %d, '%s'\n", rc, gdn_last_error());
    return 1;
  }
  printf("ok: gdn %s C ABI v%d, valid call on %s, bad call rejected: %s\n", gdn_version(),
         GDN_ABI_VERSION, gdn_arm_name(ran), msg);
  return 0;
}
