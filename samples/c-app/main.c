/* Calls the saxpy entry that uopc built into libsaxpy.so and checks every result.
   Exits 0 when all results match, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include "saxpy.h"

enum { N = 1000 };

static void print_signature(void) {
  const uopc_entry_info* info = saxpy_entry_info(saxpy_find_entry("saxpy"));
  printf("entry %s(", info->name);
  for (int i = 0; i < info->num_args; i++) {
    const uopc_arg_info* a = &info->args[i];
    printf("%s%s %s%s", i ? ", " : "", a->dtype_name, a->name, a->kind == UOPC_ARG_BUFFER ? (a->written ? "[] (written)" : "[]") : "");
    if (a->kind == UOPC_ARG_VAR) printf(" in [%lld, %lld]", (long long)a->min, (long long)a->max);
  }
  printf(")\n");
}

int main(void) {
  float* x = malloc(N * sizeof *x);
  float* y = malloc(N * sizeof *y);
  float* out = malloc(N * sizeof *out);
  if (!x || !y || !out) return 1;
  for (int i = 0; i < N; i++) { x[i] = 0.25f * (float)i; y[i] = 1.0f - (float)i; }
  print_signature();

  int rc = saxpy_saxpy(out, x, y, 0);  /* n = 0 is outside [1, 1048576]: refused */
  printf("saxpy(n=0) -> %d (%s)\n", rc, saxpy_strerror(rc));
  if (rc != UOPC_ERR_VAR_RANGE) return 1;

  rc = saxpy_saxpy(out, x, y, N);
  if (rc != UOPC_OK) { printf("saxpy failed: %s\n", saxpy_strerror(rc)); return 1; }
  int bad = 0;
  for (int i = 0; i < N; i++) {
    double want = 2.5 * (0.25 * i) + (1.0 - i);  /* exact in float for these inputs */
    if (out[i] != (float)want) { if (bad++ < 5) printf("out[%d] = %g, want %g\n", i, out[i], want); }
  }
  printf("out[0..3] = %g %g %g %g, out[%d] = %g\n", out[0], out[1], out[2], out[3], N - 1, out[N - 1]);
  printf("%s: %d of %d results wrong\n", bad ? "FAIL" : "ok", bad, N);
  free(x); free(y); free(out);
  return bad != 0;
}
