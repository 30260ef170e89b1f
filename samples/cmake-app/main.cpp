// Calls the scale entry that uopc_add_library built into libscale.so, from C++, and checks it.
// Prints the results and exits 0 when they are right.
#include <cstdio>
#include <vector>
#include "scale.h"

int main() {
  const int n = 8;
  std::vector<float> x(n), out(n);
  for (int i = 0; i < n; i++) x[i] = static_cast<float>(i);
  int rc = scale_scale(out.data(), x.data(), n);
  if (rc != UOPC_OK) { std::printf("scale failed: %s\n", scale_strerror(rc)); return 1; }
  int bad = 0;
  for (int i = 0; i < n; i++) {
    std::printf("%g%s", out[i], i + 1 < n ? " " : "\n");
    bad += out[i] != 3.0f * x[i] + 1.0f;
  }
  return bad != 0;
}
