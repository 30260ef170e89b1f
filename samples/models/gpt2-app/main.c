/* Runs the GPT-2 small block that uopc built into libgpt2_block.so on inputs and weights loaded from a
   file, and compares its output with tinygrad's. Usage: app inputs.bin expected.bin
   The entry's metadata (gpt2_block_entry_info) says how many elements each argument has, so the loader
   follows the program's signature rather than hard-coding it. Exits 0 when every output is within
   1e-4 of the output's largest magnitude, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "gpt2_block.h"

static long long numel(const uopc_arg_info* a) {
  long long n = 1;
  for (int d = 0; d < a->ndim; d++) n *= a->shape[d];
  return n;
}

static float* read_floats(FILE* f, long long n, const char* what) {
  float* p = malloc((size_t)n * sizeof *p);
  if (!p || fread(p, sizeof *p, (size_t)n, f) != (size_t)n) { fprintf(stderr, "cannot read %lld floats of %s\n", n, what); exit(1); }
  return p;
}

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s inputs.bin expected.bin\n", argv[0]); return 1; }
  const uopc_entry_info* info = gpt2_block_entry_info(gpt2_block_find_entry("gpt2_block"));
  FILE* in = fopen(argv[1], "rb");
  FILE* ex = fopen(argv[2], "rb");
  if (!info || !in || !ex) { fprintf(stderr, "cannot open the entry or the data files\n"); return 1; }
  float* args[16];
  long long out_n = 0, total = 0;
  for (int i = 0; i < info->num_args; i++) {
    const uopc_arg_info* a = &info->args[i];
    if (a->written) { out_n = numel(a); args[i] = calloc((size_t)out_n, sizeof(float)); continue; }
    args[i] = read_floats(in, numel(a), a->name);
    total += numel(a);
  }
  printf("loaded %d arrays, %lld parameters\n", info->num_args - 1, total);
  int rc = gpt2_block_gpt2_block(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8],
                                 args[9], args[10], args[11], args[12], args[13]);
  if (rc != UOPC_OK) { printf("gpt2_block failed: %s\n", gpt2_block_strerror(rc)); return 1; }
  float* want = read_floats(ex, out_n, "the expected output");
  double scale = 0, worst = 0;
  for (long long i = 0; i < out_n; i++) scale = fmax(scale, fabs(want[i]));
  for (long long i = 0; i < out_n; i++) worst = fmax(worst, fabs(args[13][i] - want[i]));
  printf("out[0..3] = %g %g %g %g; largest |out - tinygrad| = %.3g (%.3g of the largest |out|)\n",
         args[13][0], args[13][1], args[13][2], args[13][3], worst, worst / scale);
  int ok = worst <= 1e-4 * scale;
  printf("%s\n", ok ? "ok: matches tinygrad" : "FAIL: differs from tinygrad");
  for (int i = 0; i < info->num_args; i++) free(args[i]);
  free(want); fclose(in); fclose(ex);
  return !ok;
}
