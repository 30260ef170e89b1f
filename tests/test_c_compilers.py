"""-t c with every C compiler this machine has (`cc`, and each gcc/clang, versioned or not, on PATH):
the library is right whatever compiler the user builds it with.

GCC's loop vectorizer miscompiles an in-order float sum over reversed loads (`x.flip(0).sum()` on 16
elements gave 164 instead of 120 with Debian 12's GCC 12.2 at -O2/-O3 and GCC 11.3 at -O3; clang is
right). The generated C turns that vectorizer off for GCC with a pragma (uopc vectorizes the kernels
itself), so the .c is right under the user's own flags too."""
from __future__ import annotations

import ctypes
import glob
import os
import subprocess

import numpy as np
import pytest

from uopc.driver import BuildOptions, build

REVERSED_SUM = """func rsum {
  %x = PARAM([16]) {(0, "x")} : f32
  %f = FLIP(%x) {(True,)}
  %s = REDUCE(%f) {(ADD, (0,))}
  %out = PARAM([1]) {(1, "out")} : f32
  %st = STORE(%out, %s)
  SINK(%st)
}
"""


def c_compilers() -> list[str]:
  """`cc` and every gcc / clang (gcc-12, clang-19, ...) on PATH, one name per distinct program."""
  seen, out = set(), []
  for d in os.environ.get("PATH", "").split(os.pathsep):
    for pattern in ("cc", "gcc", "gcc-[0-9]*", "clang", "clang-[0-9]*"):
      for path in sorted(glob.glob(os.path.join(d, pattern))):
        real = os.path.realpath(path)
        if os.access(path, os.X_OK) and real not in seen and not path.endswith(("-ar", "-nm", "-ranlib")):
          seen.add(real)
          out.append(os.path.basename(path))
  return out


COMPILERS = c_compilers()


@pytest.mark.parametrize("cflags", ["", "-O2", "-O3 -march=native"])
@pytest.mark.parametrize("cc", COMPILERS)
def test_reversed_sum_is_right_with_every_compiler(tmp_path, cc, cflags):
  (tmp_path / "rsum.uop").write_text(REVERSED_SUM)
  env = dict(os.environ, CC=cc, CFLAGS=cflags)
  build(tmp_path / "rsum.uop", BuildOptions("c", tmp_path / "out", env=env))
  lib = ctypes.CDLL(str(tmp_path / "out" / "librsum.so"))
  x, out = np.arange(16, dtype=np.float32), np.zeros(1, np.float32)
  assert lib.rsum_rsum(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p)) == 0
  assert out.tolist() == [120.0]


@pytest.mark.parametrize("cc", COMPILERS)
def test_the_emitted_source_is_right_under_the_users_own_flags(tmp_path, cc):
  """The .c artifact compiled by hand, plain -O3: the pragma travels with the source."""
  (tmp_path / "rsum.uop").write_text(REVERSED_SUM)
  build(tmp_path / "rsum.uop", BuildOptions("c", tmp_path / "out", emit=("source",)))
  main = tmp_path / "main.c"
  main.write_text('#include <stdio.h>\nvoid rsum__rsum_k0(const float*, float*);\n'
                  'int main(void) { float x[16], out[1]; for (int i = 0; i < 16; i++) x[i] = (float)i; '
                  'rsum__rsum_k0(x, out); printf("%g\\n", out[0]); return 0; }\n')
  exe = tmp_path / "a.out"
  subprocess.run([cc, "-std=c99", "-O3", str(tmp_path / "out" / "rsum.c"), str(main), "-o", str(exe), "-lm", "-pthread"], check=True)
  assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip() == "120"

