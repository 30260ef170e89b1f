"""The declared PARAMs are an entry's ABI: an input the program does not read keeps its slot in the
signature, the header, the run-time metadata (`PREFIX_entry_info`) and every launcher, on every
target (issue 26: `x` unused at slot 0 vanished, so `dead.h` declared `dead_dead(y, out)` and a caller
with the old header passed its buffers one place off)."""
from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest

from uopc.driver import BuildOptions, build
from uopc.frontend import load_module, print_module
from uopc.run import run_file

DEAD = """func dead {
  %x = PARAM([4]) {(0, "x")} : f32
  %y = PARAM([4]) {(1, "y")} : f32
  %out = PARAM([4]) {(2, "out")} : f32
  %n = DEFINE_VAR {("n", 1, 8)} : index
  STORE(%out, %y)
}
"""

KERNEL = """kernel dead_kernel {
  %a = PARAM {(0, "a")} : ptr<f32>
  %b = PARAM {(1, "b")} : ptr<f32>
  %r = RANGE(4) {(0, AxisType.LOOP)}
  %i = INDEX(%b, %r)
  STORE(%i, 1.0)
}
"""

SIGNATURES = {"c": "int dead_dead(const float* x, const float* y, float* out, int64_t n);",
              "llvm": "int dead_dead(const float* x, const float* y, float* out, int64_t n);",
              "cuda": "int dead_dead(const float* x, const float* y, float* out, int64_t n, CUstream stream);",
              "amd": "int dead_dead(const float* x, const float* y, float* out, int64_t n, hipStream_t stream);",
              "metal": "int dead_dead(void* queue, const void* x, const void* y, void* out, int64_t n);"}


@pytest.mark.parametrize("target", list(SIGNATURES))
def test_every_declared_slot_stays_in_the_signature(tmp_path, target):
  (tmp_path / "dead.uop").write_text(DEAD)
  out = tmp_path / "out"
  build(tmp_path / "dead.uop", BuildOptions(target, out, emit=("header",) if target == "amd" else None, archs=("gfx90a",) if target == "amd" else ()))
  header = (out / "dead.h").read_text()
  assert SIGNATURES[target] in header, re.findall(r"int dead_dead\(.*\);", header)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_the_library_takes_the_buffers_in_declared_order(tmp_path, target):
  (tmp_path / "dead.uop").write_text(DEAD + "\n" + KERNEL)
  build(tmp_path / "dead.uop", BuildOptions(target, tmp_path / "out"))
  lib = ctypes.CDLL(str(tmp_path / "out" / "libdead.so"))
  x, y, out = np.full(4, 7, np.float32), np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
  ptr = ctypes.c_void_p
  assert lib.dead_dead(ptr(x.ctypes.data), ptr(y.ctypes.data), ptr(out.ctypes.data), ctypes.c_int64(2)) == 0
  assert out.tolist() == y.tolist()
  a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
  assert lib.dead_dead_kernel(ptr(a.ctypes.data), ptr(b.ctypes.data)) == 0
  assert b.tolist() == [1.0] * 4 and a.tolist() == [0.0] * 4


def test_entry_info_lists_the_unread_arguments(tmp_path):
  (tmp_path / "dead.uop").write_text(DEAD)
  build(tmp_path / "dead.uop", BuildOptions("c", tmp_path / "out"))
  main = tmp_path / "main.c"
  main.write_text('#include <stdio.h>\n#include "dead.h"\nint main(void) { const uopc_entry_info* e = dead_entry_info(0);\n'
                  '  for (int i = 0; i < e->num_args; i++) printf("%s ", e->args[i].name); return 0; }\n')
  exe = tmp_path / "main"
  subprocess.run(["cc", "-std=c99", str(main), "-I", str(tmp_path / "out"), "-L", str(tmp_path / "out"), "-ldead", "-o", str(exe)], check=True)
  done = subprocess.run([str(exe)], capture_output=True, text=True, check=True, env={"LD_LIBRARY_PATH": str(tmp_path / "out")})
  assert done.stdout.split() == ["x", "y", "out", "n"]


def test_uopc_run_takes_the_unread_input_and_the_printer_keeps_it(tmp_path):
  (tmp_path / "dead.uop").write_text(DEAD)
  y = np.arange(4, dtype=np.float32)
  for target, emulated in (("c", False), ("cuda", True)):
    got = run_file(tmp_path / "dead.uop", target=target, inputs={"x": np.ones(4, np.float32), "y": y}, variables={"n": 3}, emulated=emulated)
    assert got.arrays["out"].tolist() == y.tolist() and [a.name for a in got.args] == ["x", "y", "out", "n"]
  printed = print_module(load_module(str(tmp_path / "dead.uop")))
  assert '%x = PARAM([4]) {(0, "x")} : f32' in printed and 'DEFINE_VAR {("n", 1, 8)}' in printed
