"""Test helper: elementwise kernels lowered by Instruction Selection with a chosen capability table,
rendered by the C target, compiled by gcc and called through ctypes on numpy arrays."""
from __future__ import annotations

from typing import Callable, Sequence

import ml_dtypes
import numpy as np

from c_harness import Call, compile_c, run_calls
from uopc.dtype import DType, dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.isel import Capabilities, isel
from uopc.targets import get_target
from uopc.stages.linearize import linearize
from uopc.targets.c.render import C_PRELUDE, render_kernel
from uopc.uop import UOp

NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.int16: np.int16, dtypes.int32: np.int32, dtypes.int64: np.int64,
      dtypes.uint8: np.uint8, dtypes.uint16: np.uint16, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64,
      dtypes.float16: np.float16, dtypes.bfloat16: ml_dtypes.bfloat16, dtypes.float32: np.float32, dtypes.float64: np.float64}

# the C target with no transcendental, THREEFRY, floor division or hardware integer division of its own,
# so that every decomposition of isel runs on this machine
C_DECOMPOSED = get_target("c").ops.without(Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.THREEFRY, Ops.FLOORDIV,
                                         Ops.FLOORMOD)
C_NO_DIVIDER = Capabilities(C_DECOMPOSED.native, C_DECOMPOSED.approximate, int_division=False)


def elementwise(build: Callable[..., UOp], in_dts: Sequence[DType], out_dt: DType) -> UOp:
  """out[i] = build(in0[i], ...) for i < n (a DEFINE_VAR): data0 is the output, data1.. the inputs."""
  idx = dtypes.index
  out = UOp(Ops.PARAM, out_dt.ptr(), (), (0, "out"))
  ins = [UOp(Ops.PARAM, dt.ptr(), (), (k + 1, f"in{k}")) for k, dt in enumerate(in_dts)]
  r = UOp(Ops.RANGE, idx, (UOp(Ops.DEFINE_VAR, idx, (), ("n", 0, 2**40)),), (0, AxisType.LOOP))
  loads = [UOp(Ops.LOAD, p.dtype.base, (UOp(Ops.INDEX, p.dtype, (p, r)),)) for p in ins]
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, r)), build(*loads)))
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, r)),))


def ops_in(sink: UOp) -> set[Ops]: return {u.op for u in sink.toposort()}


class Library:
  """Kernels added by name, compiled once, then called on numpy inputs."""
  def __init__(self, caps: Capabilities, fast_math: bool = False):
    self.caps, self.fast_math = caps, fast_math
    self.kernels: dict[str, tuple[UOp, DType]] = {}
    self.path = None

  def add(self, name: str, build: Callable[..., UOp], in_dts: Sequence[DType], out_dt: DType) -> UOp:
    """Adds kernel `name`; returns its graph after isel (for checks on which ops remain)."""
    lowered = isel(elementwise(build, in_dts, out_dt), self.caps, self.fast_math)
    self.kernels[name] = (lowered, out_dt)
    return lowered

  def __call__(self, name: str, *inputs: np.ndarray) -> np.ndarray:
    if self.path is None:
      self.path = compile_c(C_PRELUDE + "\n".join(render_kernel(linearize(k), n).source for n, (k, _) in self.kernels.items()))
    out = np.zeros(len(inputs[0]), NP[self.kernels[name][1]])
    return run_calls(self.path, [Call(name, (out, *inputs, len(out)))])[0][0]
