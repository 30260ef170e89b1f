"""Test helper: compile generated C to a shared library with gcc or clang and call kernels through
ctypes on numpy arrays.

With sanitize=True the library is built with -fsanitize=address,undefined -fno-sanitize-recover=all
and the calls run in a child Python with the sanitizer runtimes preloaded (an instrumented library
cannot be loaded into a plain interpreter); any report makes the child fail and the test with it.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WARNING_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g")


BUILD_ROOT: list[Path] = []  # conftest puts pytest's session folder here: builds go under it, not /tmp


def have(compiler: str) -> bool: return shutil.which(compiler) is not None


@dataclass(frozen=True)
class Call:
  """One kernel call: numpy arrays for buffer arguments, ints for DEFINE_VAR arguments, in C order."""
  kernel: str
  args: tuple


def compile_c(source: str, compiler: str = "gcc", sanitize: bool = False, shared: bool = True, extra: tuple[str, ...] = ()) -> Path:
  """Compile `source` warning-free (-Wall -Wextra -Werror) to a .so (or an object file), with `extra` flags
  (e.g. -march=native); returns its path. Raises AssertionError with the compiler's output when it does not
  compile cleanly."""
  assert BUILD_ROOT, "compile_c runs under pytest, whose conftest sets BUILD_ROOT"
  out_dir = Path(tempfile.mkdtemp(prefix="c_", dir=BUILD_ROOT[0]))
  src = out_dir / "kernels.c"
  src.write_text(source)
  out = out_dir / ("kernels.so" if shared else "kernels.o")
  cmd = [compiler, *WARNING_FLAGS, "-O1", "-fPIC", *extra, *(SANITIZE_FLAGS if sanitize else ()),
         *(("-shared", "-o", str(out), str(src), "-lm") if shared else ("-c", "-o", str(out), str(src)))]
  res = subprocess.run(cmd, capture_output=True, text=True)
  assert res.returncode == 0 and not res.stderr, f"{' '.join(cmd)} failed:\n{res.stderr}\n--- source ---\n{source}"
  return out


def run_calls(library: Path, calls: list[Call], sanitize: bool = False) -> list[tuple]:
  """Run `calls` in order on fresh copies of their arrays; returns each call's arguments afterwards."""
  if not sanitize: return _run_in_process(library, calls)
  env = dict(os.environ, LD_PRELOAD=" ".join(_sanitizer_runtimes()), ASAN_OPTIONS="detect_leaks=0")
  res = subprocess.run([sys.executable, __file__], input=pickle.dumps((str(library), [(c.kernel, c.args) for c in calls])), capture_output=True, env=env)
  assert res.returncode == 0, f"sanitized run failed:\n{res.stderr.decode(errors='replace')}"
  return pickle.loads(res.stdout)


def _sanitizer_runtimes() -> list[str]:
  return [subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True, check=True).stdout.strip()
          for lib in ("libasan.so", "libubsan.so")]


def _run_in_process(library: Path, calls: list[Call]) -> list[tuple]:
  lib = ctypes.CDLL(str(library))
  results = []
  for call in calls:
    args = tuple(np.ascontiguousarray(a).copy() if isinstance(a, np.ndarray) else a for a in call.args)
    fn = getattr(lib, call.kernel)
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p if isinstance(a, np.ndarray) else ctypes.c_int64 for a in args]
    fn(*(a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args))
    results.append(args)
  return results


if __name__ == "__main__":  # the child of a sanitized run: (library, calls) on stdin, results on stdout
  library, plain_calls = pickle.loads(sys.stdin.buffer.read())
  sys.stdout.buffer.write(pickle.dumps(_run_in_process(Path(library), [Call(k, a) for k, a in plain_calls])))
