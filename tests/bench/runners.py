"""The three columns of the CPU benchmark. Each `prepare(workload, inputs)` returns a `Prepared`: a
`call` that runs the computation once (to completion) and a `result` that reads the output of the
last call back as a numpy array. Preparation (building, copying inputs in) is never timed.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from workloads import Workload

NP_DTYPES = {"f32": np.float32, "i32": np.int32}


class Unavailable(Exception):
  """A column cannot run on this machine (the message says why, once)."""


@dataclass
class Prepared:
  call: Callable[[], None]
  result: Callable[[], np.ndarray]
  warmups: int = 1        # calls before timing starts; the first one's result is checked
  build_s: float | None = None


# ---- uopc ------------------------------------------------------------------------------------------------
def uopc_command() -> list[str]:
  """The installed `uopc` next to this Python (the venv's), else the package through -m."""
  exe = Path(sys.executable).with_name("uopc")
  return [str(exe)] if exe.exists() else [sys.executable, "-m", "uopc"]


class Uopc:
  """`uopc build -t c` of the workload's program into `workdir`, then its entry through ctypes."""
  name = "uopc"

  def __init__(self, workdir: Path, build_args: tuple[str, ...] = (), env: dict[str, str] | None = None):
    self.workdir, self.build_args, self.env = workdir, build_args, env

  def prepare(self, w: Workload, inputs: list[np.ndarray]) -> Prepared:
    f = w.program
    out_dir = self.workdir / re.sub(r"[^A-Za-z0-9]+", "_", w.name)
    out_dir.mkdir(parents=True)
    src = out_dir / f"{f.name}.uop"
    src.write_text(f.text())
    cmd = [*uopc_command(), "build", str(src), "-t", "c", "-o", str(out_dir), *self.build_args]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
    build_s = time.perf_counter() - start
    if done.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr}")
    lib = ctypes.CDLL(str(out_dir / f"lib{f.name}.so"))
    it = iter(np.ascontiguousarray(x) for x in inputs)
    if w.in_place: buffers = [next(it) for _ in f.args]
    else: buffers = [np.zeros(a[1], NP_DTYPES[a[2]]) if a[3] else next(it) for a in f.args]
    out = buffers[0] if w.in_place else next(b for b, a in zip(buffers, f.args) if a[3])
    entry, args = self._entry(lib, f.name, f.name), [b.ctypes.data_as(ctypes.c_void_p) for b in buffers]
    workspace = self._workspace(lib, f.name, f.name)
    if workspace is not None: entry, args = workspace[0], [*args, workspace[1].ctypes.data_as(ctypes.c_void_p)]

    def call() -> None:
      if (code := entry(*args)) != 0:
        strerror = getattr(lib, f"{f.name}_strerror")
        strerror.restype = ctypes.c_char_p
        raise RuntimeError(f"{f.name}_{f.name} returned {code}: {strerror(code).decode()}")
    return Prepared(call, lambda: out, build_s=build_s)

  @staticmethod
  def _entry(lib, prefix: str, entry: str):
    fn = getattr(lib, f"{prefix}_{entry}")
    fn.restype = ctypes.c_int
    return fn

  @staticmethod
  def _workspace(lib, prefix: str, entry: str):
    """A multi-kernel entry's `_with_workspace` variant and a workspace allocated once, so that the
    timing measures the kernels and not malloc; None for an entry without intermediates."""
    try:
      size_fn, fn = getattr(lib, f"{prefix}_{entry}_workspace_size"), getattr(lib, f"{prefix}_{entry}_with_workspace")
    except AttributeError:
      return None
    size_fn.restype, fn.restype = ctypes.c_size_t, ctypes.c_int
    return fn, np.zeros(max(1, size_fn()), np.uint8)


# ---- numpy -----------------------------------------------------------------------------------------------
class Numpy:
  name = "numpy"

  def prepare(self, w: Workload, inputs: list[np.ndarray]) -> Prepared:
    last: list[np.ndarray] = []

    def call() -> None: last[:] = [w.numpy(*inputs)]
    return Prepared(call, lambda: last[0])


# ---- tinygrad --------------------------------------------------------------------------------------------
TINYGRAD_DEVICE = "CPU"


def tinygrad_problem() -> str | None:
  """Why the tinygrad column cannot run here, or None."""
  try:
    import tinygrad  # noqa: F401
  except ImportError:
    return "tinygrad is not installed in this Python (make bench installs it: pip install -e '.[bench]')"
  if shutil.which("clang") is None:
    return "clang is not on PATH (tinygrad's CPU backend compiles its kernels with it): apt-get install clang"
  return None


class Tinygrad:
  """tinygrad's CPU device (its clang backend) through TinyJit: after two capturing calls a call
  replays the compiled kernels, so the timing holds no scheduling or compiling."""
  name = "tinygrad"

  def __init__(self):
    if (problem := tinygrad_problem()) is not None: raise Unavailable(problem)
    os.environ["CC"] = "clang"  # tinygrad compiles with $CC and clang-only flags; uopc builds get the caller's env
    from tinygrad import Device, Tensor, TinyJit
    self.Device, self.Tensor, self.TinyJit = Device, Tensor, TinyJit

  def prepare(self, w: Workload, inputs: list[np.ndarray]) -> Prepared:
    tensors = [self.Tensor(np.ascontiguousarray(x), device=TINYGRAD_DEVICE).realize() for x in inputs]
    jitted = self.TinyJit(lambda *ts: w.tinygrad(*ts).contiguous().realize())  # a view realizes as no kernel: tinygrad too must write the output
    device = self.Device[TINYGRAD_DEVICE]
    last: list = []

    def call() -> None:
      last[:] = [jitted(*tensors)]
      device.synchronize()
    return Prepared(call, lambda: last[0].numpy(), warmups=3)

  @staticmethod
  def version() -> str:
    from importlib.metadata import version
    return version("tinygrad")

  @staticmethod
  def threads() -> int:
    from tinygrad.helpers import NUM_CPU_THREADS
    return NUM_CPU_THREADS.value
