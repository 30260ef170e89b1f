"""Vector dtypes on `-t llvm`: the C target's per-op table (tests/test_c_ops.py: the same inputs and
numpy / ml_dtypes / hand-computed expectations) with every kernel rewritten to work on vectors of 2 to
8 lanes (vector loads, every ALU op, CAST and BITCAST between every dtype pair, vector stores), as
Expand makes them for UPCAST axes; and gated vector loads, whose lanes take `alt` when the gate is false."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from test_c_ops import CASES, NP, mismatches
from test_llvm_ops import seed_comparisons
from uopc.dtype import dtypes
from uopc.launcher import EntryKernels, c_identifier, kernel_name
from uopc.ops import AxisType, Ops
from uopc.stages.linearize import linearize
from uopc.targets.llvm.host import build_artifacts
from uopc.targets.llvm.render import render_kernel
from uopc.uop import UOp

LIB = "llvmvec"


def lanes_for(n: int, i: int) -> int:
  """Case i's vector width: one of the widths that divide its length n, taken in turn; n itself when
  none does (odd widths of 3, 5, 7)."""
  widths = [w for w in (4, 8, 2, 3) if n % w == 0 and w < n] or [n]
  return widths[i % len(widths)]


def vectorized(sink: UOp, lanes: int) -> UOp:
  """The elementwise kernel `out[i] = f(in0[i], ...)` as `out[4j:4j+4] = f(in0[4j:4j+4], ...)` for
  `lanes` = 4: its RANGE shortened, its loads, ops and store made `lanes` wide."""
  end = sink.src[0]
  store, r = end.src
  r2 = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, r.src[0].arg // lanes),), (0, AxisType.LOOP))
  base = r2.alu(Ops.MUL, UOp.const(dtypes.index, lanes))
  memo: dict[UOp, UOp] = {}

  def widen(u: UOp) -> UOp:
    if u in memo: return memo[u]
    if u.op is Ops.PARAM: out = u
    elif u.op is Ops.INDEX: out = UOp(Ops.INDEX, u.dtype, (u.src[0], base))
    elif u.op is Ops.STORE: out = UOp(Ops.STORE, dtypes.void, tuple(widen(s) for s in u.src))
    else: out = UOp(u.op, u.dtype.vec(lanes), tuple(widen(s) for s in u.src), u.arg)
    memo[u] = out
    return out
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (widen(store), r2)),))


VECTOR_CASES = {name: (c, lanes_for(len(c.inputs[0]), i)) for i, (name, c) in enumerate(CASES.items())}


def build_library(out: Path, kernels: dict[str, UOp], lib: str) -> ctypes.CDLL:
  entries = [EntryKernels(name, (render_kernel(linearize(sink), kernel_name(c_identifier(lib), name, 0)),))
             for name, sink in kernels.items()]
  return ctypes.CDLL(str(build_artifacts(out, lib, entries)["so"]))


@pytest.fixture(scope="module")
def library(tmp_path_factory):
  return build_library(tmp_path_factory.mktemp("vectors"), {name: vectorized(c.sink, lanes) for name, (c, lanes) in VECTOR_CASES.items()}, LIB)


def call(lib, lib_name: str, name: str, out: np.ndarray, *inputs: np.ndarray) -> None:
  args = [out, *(np.ascontiguousarray(x).copy() for x in inputs)]
  fn = getattr(lib, f"{lib_name}_{name}")
  fn.argtypes = [ctypes.c_void_p] * len(args)
  assert fn(*(a.ctypes.data for a in args)) == 0


def test_the_cases_use_every_width_from_2_to_8():
  assert {lanes for _, lanes in VECTOR_CASES.values()} == {2, 3, 4, 5, 7, 8}
  casts = {lanes for c, lanes in VECTOR_CASES.values() if c.name.startswith("k_cast_")}
  assert {2, 3, 4, 8} <= casts


def test_every_vector_op_and_dtype_matches_numpy(library):
  failures = []
  for case, lanes in VECTOR_CASES.values():
    case = seed_comparisons(case)
    got = np.zeros(len(case.expected), case.expected.dtype)
    call(library, LIB, case.name, got, *case.inputs)
    if bad := mismatches(case, got):
      i = bad[0]
      failures.append(f"{case.name} x{lanes}: {len(bad)} wrong, e.g. inputs {[x[i] for x in case.inputs]} -> {got[i]!r}, "
                      f"expected {case.expected[i]!r}")
  assert not failures, "\n".join(failures)


def gated_vector_load(dt, lanes: int, n: int, alt) -> UOp:
  """out[l*j : l*j+l] = in[l*j : l*j+l] when j is even, else `alt` in every lane: a gated LOAD of a vector."""
  idx = dtypes.index
  out, x = UOp(Ops.PARAM, dt.ptr(), (), (0, "out")), UOp(Ops.PARAM, dt.ptr(), (), (1, "in0"))
  r = UOp(Ops.RANGE, idx, (UOp.const(idx, n // lanes),), (0, AxisType.LOOP))
  base = r.alu(Ops.MUL, UOp.const(idx, lanes))
  even = r.alu(Ops.MOD, UOp.const(idx, 2)).alu(Ops.CMPNE, UOp.const(idx, 1))
  val = UOp(Ops.LOAD, dt.vec(lanes), (UOp(Ops.INDEX, x.dtype, (x, base)), UOp.const(dt.vec(lanes), alt), even))
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, base)), val))
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, r)),))


GATED = [(dtypes.float32, 4, -1.5), (dtypes.float16, 8, 2.5), (dtypes.bfloat16, 2, -3.0), (dtypes.bool, 4, True),
         (dtypes.int8, 3, -7), (dtypes.uint64, 2, 2**63 + 5), (dtypes.float64, 4, 0.25)]


def test_gated_vector_loads_take_alt_in_every_lane_where_the_gate_is_false(tmp_path):
  n = 24
  lib = build_library(tmp_path, {f"g{i}": gated_vector_load(dt, lanes, n, alt) for i, (dt, lanes, alt) in enumerate(GATED)}, "gated")
  for i, (dt, lanes, alt) in enumerate(GATED):
    x = (np.arange(n) % 5 + 1).astype(NP[dt])
    want = x.copy().reshape(-1, lanes)
    want[1::2] = NP[dt](alt)
    got = np.zeros(n, NP[dt])
    call(lib, "gated", f"g{i}", got, x)
    np.testing.assert_array_equal(got, want.reshape(-1), err_msg=f"{dt} x{lanes}")
