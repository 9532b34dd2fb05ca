/* Consumer of an installed gdn from C (C99, -pedantic): include/gdn/gdn.h through gdn::gdn, one
 * valid validate and one rejected prefill. Exit 0 only if both behave. */
#include <stdio.h>
#include <string.h>

#include <gdn/gdn.h>

enum { T = 3, HK = 1, HV = 2, K = 4, V = 4 };

int main(void) {
  float q[T * HK * K] = {0}, k[T * HK * K] = {0}, v[T * HV * V] = {0}, g[T * HV] = {0};
  float beta[T * HV] = {0}, o[T * HV * V] = {0};
  const int64_t qs[3] = {T, HK, K}, vs[3] = {T, HV, V}, gs[2] = {T, HV};
  gdn_problem p;
  gdn_prefill_args a;
  char msg[256];
  int rc;
  gdn_problem_init(&p, HK, HV, K, V);
  gdn_prefill_args_init(&a);
  a.q = gdn_tensor_contiguous(q, GDN_F32, 3, qs);
  a.k = gdn_tensor_contiguous(k, GDN_F32, 3, qs);
  a.v = gdn_tensor_contiguous(v, GDN_F32, 3, vs);
  a.g = gdn_tensor_contiguous(g, GDN_F32, 2, gs);
  a.beta = gdn_tensor_contiguous(beta, GDN_F32, 2, gs);
  a.o = gdn_tensor_contiguous(o, GDN_F32, 3, vs);
  rc = gdn_validate(&p, &a, msg, sizeof msg);
  if (rc != GDN_OK) {
    printf("FAIL C validate of a valid call: rc %d '%s'\n", rc, msg);
    return 1;
  }
  a.v = gdn_tensor_contiguous(v, GDN_F32, 3, qs); /* v with HK heads instead of HV */
  rc = gdn_prefill(&p, &a, GDN_ARM_CPU, NULL, msg, sizeof msg);
  if (rc != GDN_ERR_INVALID_ARGUMENT || msg[0] == '\0' || strcmp(msg, gdn_last_error()) != 0) {
    printf("FAIL C bad call: rc %d '%s'\n", rc, msg);
    return 1;
  }
  printf("ok: C ABI of gdn %s, bad call rejected ('%s')\n", gdn_version(), msg);
  return 0;
}
