"""Instruction Selection: the capability tables decide what is lowered, and each seed 000 decomposition
computes what the C target's native rendering of the op computes (SPEC-NOTES semantics), through -t c."""
from __future__ import annotations

import numpy as np
import pytest

from isel_harness import C_DECOMPOSED, NP, Library, elementwise, ops_in
from uopc.dtype import dtypes
from uopc.ops import GroupOp, Ops
from uopc.stages.isel import Capabilities, capabilities, isel
from uopc.uop import UOp

RNG = np.random.default_rng(99)
SIMPLE = [Ops.NEG, Ops.SUB, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.MULACC, Ops.FLOORDIV, Ops.FLOORMOD]
NOTHING = Capabilities({})


def _unary(op):
  return lambda x: UOp(op, x.dtype, (x,))


def test_c_keeps_every_op_and_cuda_decomposes_pow():
  sink = elementwise(lambda a, b: UOp(Ops.POW, a.dtype, (a, b)), [dtypes.float32] * 2, dtypes.float32)
  assert Ops.POW in ops_in(isel(sink, capabilities("c")))
  assert Ops.POW not in ops_in(isel(sink, capabilities("cuda")))


def test_fast_math_allows_approximate_instructions():
  sink = elementwise(_unary(Ops.LOG2), [dtypes.float32], dtypes.float32)
  assert Ops.LOG2 not in ops_in(isel(sink, capabilities("cuda")))
  assert Ops.LOG2 in ops_in(isel(sink, capabilities("cuda"), fast_math=True))


def test_cuda_keeps_exp2_up_to_float32_and_decomposes_float64():
  for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
    assert Ops.EXP2 in ops_in(isel(elementwise(_unary(Ops.EXP2), [dt], dt), capabilities("cuda")))
  assert Ops.EXP2 not in ops_in(isel(elementwise(_unary(Ops.EXP2), [dtypes.float64], dtypes.float64), capabilities("cuda")))


def test_nothing_decomposed_leaves_only_primitives():
  sink = elementwise(lambda a, b: UOp(Ops.POW, a.dtype, (a, b)), [dtypes.float32] * 2, dtypes.float32)
  assert not ops_in(isel(sink, NOTHING)) & GroupOp.Decomposed


def _build(op, dt):
  if op in GroupOp.Comparison: return lambda a, b: UOp(op, dtypes.bool, (a, b))
  if op is Ops.MULACC: return lambda a, b: UOp(op, dt, (a, b, a))
  return lambda a, b: UOp(op, dt, (a, b))


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.uint16, dtypes.int64, dtypes.float32, dtypes.float64], ids=str)
def test_decompositions_match_native(dt):
  native, lowered = Library(capabilities("c")), Library(NOTHING)
  ops = [op for op in SIMPLE if not (dt.is_float() and op in (Ops.FLOORDIV, Ops.FLOORMOD))]
  for op in ops:
    out = dtypes.bool if op in GroupOp.Comparison else dt
    build, ins = (_unary(op), [dt]) if op is Ops.NEG else (_build(op, dt), [dt, dt])
    native.add(op.name, build, ins, out)
    assert op not in ops_in(lowered.add(op.name, build, ins, out))
  if dt.is_float():
    a = np.concatenate([RNG.normal(0, 100, 500), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0]]).astype(NP[dt])
  else:
    a = RNG.integers(dt.min, dt.max, 506, dtype=np.int64 if dt.bits < 64 else NP[dt], endpoint=True).astype(NP[dt])
  b = np.roll(a, 1)
  if not dt.is_float(): b[b == 0] = 3
  for op in ops:
    args = (a,) if op is Ops.NEG else (a, b)
    want, got = native(op.name, *args), lowered(op.name, *args)
    assert np.array_equal(want.view(np.uint8), got.view(np.uint8)) or (dt.is_float() and np.allclose(want, got, equal_nan=True)), op


def test_not_is_logical_on_bool_and_bitwise_on_ints():
  lib = Library(NOTHING)
  lib.add("bnot", _unary(Ops.NOT), [dtypes.bool], dtypes.bool)
  lib.add("inot", _unary(Ops.NOT), [dtypes.int16], dtypes.int16)
  assert (lib("bnot", np.array([True, False])) == [False, True]).all()
  x = np.array([0, 1, -1, 12345], np.int16)
  assert (lib("inot", x) == ~x).all()
