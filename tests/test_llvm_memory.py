"""`-t llvm` memory semantics that numbers alone do not show: a gated LOAD never touches memory when its
gate is false (the input ends at a page the process may not read, so a read past it would crash),
a gated STORE writes only where its gate holds, and a run-time size bounds the loop."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from uopc.driver import BuildOptions, build

SHIFT = """
kernel shift {
  %out = PARAM {(0, "out")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %n = DEFINE_VAR {("n", 1, 1000000)}
  %r = RANGE(%n) {(0, AxisType.LOOP)}
  %next = ADD(%r, 1)
  %ok = CMPLT(%next, %n)
  %px = INDEX(%x, %next)
  %v = LOAD(%px, -1.0, %ok) : f32
  %po = INDEX(%out, %r)
  STORE(%po, %v)
}
"""

EVENS = """
kernel evens {
  %out = PARAM {(0, "out")} : ptr<i32>
  %n = DEFINE_VAR {("n", 0, 1000000)}
  %r = RANGE(%n) {(0, AxisType.LOOP)}
  %half = MOD(%r, 2)
  %even = CMPNE(%half, 1)
  %c = CAST(%r) : i32
  %po = INDEX(%out, %r)
  STORE(%po, %c, %even)
}
"""

# Runs in a child process: a wrong read crashes it, not the test run. The input's last element is the
# last float of a readable page; the next page is made unreadable with mprotect.
GUARD_PAGE_CHILD = textwrap.dedent("""
  import ctypes, mmap, sys
  import numpy as np
  lib = ctypes.CDLL(sys.argv[1])
  libc = ctypes.CDLL(None)
  page = mmap.PAGESIZE
  region = mmap.mmap(-1, 2 * page)
  base = ctypes.addressof(ctypes.c_char.from_buffer(region))
  libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
  assert libc.mprotect(base + page, page, 0) == 0  # PROT_NONE
  n = 64
  x = np.frombuffer(region, np.float32, count=n, offset=page - 4 * n)
  x[:] = np.arange(n, dtype=np.float32)
  out = np.zeros(n, np.float32)
  fn = lib.shift_shift
  fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
  assert fn(out.ctypes.data, x.ctypes.data, n) == 0
  print(" ".join(str(v) for v in out[-3:]))
""")


def built(tmp_path, name: str, text: str):
  src = tmp_path / f"{name}.uop"
  src.write_text(text)
  build(src, BuildOptions(target="llvm", out_dir=tmp_path))
  return tmp_path / f"lib{name}.so"


def test_gated_load_does_not_read_past_the_end(tmp_path):
  lib = built(tmp_path, "shift", SHIFT)
  done = subprocess.run([sys.executable, "-c", GUARD_PAGE_CHILD, str(lib)], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["62.0", "63.0", "-1.0"]  # x[i + 1], and the alt where i + 1 == n


def test_gated_store_writes_only_where_the_gate_holds(tmp_path):
  import ctypes
  lib = ctypes.CDLL(str(built(tmp_path, "evens", EVENS)))
  out = np.full(10, -7, np.int32)
  fn = lib.evens_evens
  fn.argtypes = [ctypes.c_void_p, ctypes.c_int64]
  assert fn(out.ctypes.data, 9) == 0  # n = 9: out[9] is outside the loop
  assert out.tolist() == [0, -7, 2, -7, 4, -7, 6, -7, 8, -7]
