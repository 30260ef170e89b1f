"""Running one candidate library (uopc.tune.compile) on a device: its outputs, and its median time.

Buffers. A kernel after Rangeify takes bare pointers; each buffer gets as many elements as its
largest index can reach (the INDEX's vmax + 1). Float buffers start as standard normal values, bool
ones random, integer ones zeros (an integer buffer may hold indices: zero is always in bounds), all
from a fixed seed, so every candidate of a kernel starts from the same bytes. Kernels with run-time
sizes (DEFINE_VARs) are not tuned.

A measurement resets every buffer, runs the candidate once and keeps what it wrote (compared with the
heuristic kernel's output by `mismatch`: floats within a tolerance of the dtype, since other opts add
in another order; everything else exactly), then after a warm-up run times `runs` calls (at least
MIN_RUNS, fewer once `max_seconds` are spent) and reports their median. CPU: wall time around each
ctypes call. CUDA: CUDA events around each call on the default stream, through the driver API.
"""
from __future__ import annotations

import ctypes
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from uopc.dtype import DType, dtypes
from uopc.emulator import np_dtype
from uopc.module import Entry
from uopc.ops import Ops
from uopc.run import Arg, entry_arguments, entry_strerror, library_arguments
from uopc.uop import UOp

MIN_RUNS = 3
LIB, ENTRY = "tune", "k"   # the candidate library's NAME and its one entry


class NotTunable(Exception):
  """A kernel the tuner cannot run alone (the message says why)."""


@dataclass
class KernelData:
  """A kernel's arguments (as run.entry_arguments lists them) and the starting contents of its buffers."""
  args: list[Arg]
  inputs: dict[str, np.ndarray]

  def written(self) -> list[Arg]: return [a for a in self.args if a.written]


@dataclass
class Measurement:
  outputs: dict[str, np.ndarray]
  seconds: float   # the median


MAX_INFERRED = 1 << 28  # elements: a bound past this comes from data (a gather's index), not from the kernel


def kernel_data(sink: UOp, seed: int = 0, declared: dict[int, int] | None = None) -> KernelData:
  """Random inputs for the kernel's buffers: of their `declared` sizes (PARAM slot -> elements, the
  entry's shapes), else as large as the kernel's indices into them reach."""
  graph = sink.toposort()
  if any(u.op is Ops.DEFINE_VAR for u in graph): raise NotTunable("it has run-time sizes (DEFINE_VARs)")
  args = entry_arguments(Entry(ENTRY, "kernel", sink))
  declared = declared or {}
  sizes: dict[UOp, int] = {}
  for u in graph:
    if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and u.src[0].arg[0] not in declared:
      lo, hi = u.src[1].vmin, u.src[1].vmax
      if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 0 or hi >= MAX_INFERRED:
        raise NotTunable(f"the size of buffer '{u.src[0].arg[1]}' is not declared and its index depends on data")
      sizes[u.src[0]] = max(sizes.get(u.src[0], 1), hi + 1)
  rng = np.random.default_rng(seed)
  def size(a) -> int: return declared.get(a.node.arg[0], sizes.get(a.node, 1)) if a.node.op is Ops.PARAM else sizes.get(a.node, 1)
  return KernelData(args, {a.name: _fill(rng, a.dtype, size(a)) for a in args})


def _fill(rng: np.random.Generator, dt: DType, n: int) -> np.ndarray:
  if dt.is_float(): return rng.standard_normal(n).astype(np_dtype(dt))
  if dt.is_bool(): return rng.random(n) < 0.5
  return np.zeros(n, np_dtype(dt))


def mismatch(ref: dict[str, np.ndarray], got: dict[str, np.ndarray], data: KernelData, tf32: bool = False) -> str | None:
  """Why `got` is not the heuristic kernel's output `ref` (None when it is); `tf32`: a float32 kernel may
  run on the tf32 tensor cores (the reference or the candidate), so float32 outputs agree to tf32's 2e-3."""
  for a in data.written():
    r, g = ref[a.name], got[a.name]
    if a.dtype.is_float():
      r64, g64 = r.astype(np.float64), g.astype(np.float64)
      finite = np.isfinite(r64)
      scale = float(np.max(np.abs(r64[finite]))) if finite.any() else 1.0
      tol = (2e-3 if tf32 and a.dtype == dtypes.float32 else _RTOL.get(a.dtype, 1e-3)) * (np.abs(r64) + scale)
      bad = ~((np.abs(g64 - r64) <= tol) | (np.isnan(r64) & np.isnan(g64)) | (r64 == g64))
    else: bad = r != g
    if bad.any():
      i = int(np.flatnonzero(bad)[0])
      return f"{a.name}[{i}] is {g[i]!r}, the heuristic kernel wrote {r[i]!r} ({int(bad.sum())} elements differ)"
  return None


_RTOL = {dtypes.float64: 1e-9, dtypes.float32: 1e-4, dtypes.float16: 1e-2, dtypes.bfloat16: 2e-2}


def _median(call, runs: int, max_seconds: float, clock) -> float:
  call()  # warm-up: caches, page faults, the first thread start
  times: list[float] = []
  spent = 0.0
  while len(times) < runs and (len(times) < MIN_RUNS or spent < max_seconds):
    times.append(clock(call))
    spent += times[-1]
  return statistics.median(times)


# ---- the CPU (-t c, -t llvm) ------------------------------------------------------------------------------------
class CpuDevice:
  """Candidate libraries loaded into this process, called through ctypes."""

  def __init__(self):
    self.description = cpu_description()

  def measure(self, so: Path, data: KernelData, runs: int, max_seconds: float) -> Measurement:
    lib = ctypes.CDLL(str(so))
    arrays = {name: a.copy() for name, a in data.inputs.items()}
    order = library_arguments(lib, LIB, ENTRY, data.args)
    ptrs = [ctypes.c_void_p(arrays[a.name].ctypes.data) for a in order]
    fn = getattr(lib, f"{LIB}_{ENTRY}")
    fn.restype = ctypes.c_int
    def call() -> None:
      if (status := fn(*ptrs)) != 0: raise RuntimeError(f"the candidate refused its arguments: {entry_strerror(lib, LIB, status)}")
    call()
    outputs = {a.name: arrays[a.name].copy() for a in data.written()}
    def clock(f) -> float:
      t = time.perf_counter()
      f()
      return time.perf_counter() - t
    return Measurement(outputs, _median(call, runs, max_seconds, clock))


def cpu_description() -> str:
  """The CPU's model name (from /proc/cpuinfo where there is one) and core count."""
  model = platform.processor() or platform.machine()
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        model = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  return f"{model}, {os.cpu_count()} cores"
