"""Instruction Selection: the capability tables decide what is lowered, and each seed 000 decomposition
computes what the C target's native rendering of the op computes (SPEC-NOTES semantics), through -t c."""
from __future__ import annotations

import numpy as np
import pytest

from isel_harness import C_DECOMPOSED, NP, Library, elementwise, ops_in
from uopc.dtype import dtypes
from uopc.ops import GroupOp, Ops
from uopc.stages.isel import Capabilities, isel
from uopc.targets import get_target
from uopc.uop import UOp

RNG = np.random.default_rng(99)
SIMPLE = [Ops.NEG, Ops.SUB, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.MULACC, Ops.FLOORDIV, Ops.FLOORMOD]
NOTHING = Capabilities({})


def _unary(op):
  return lambda x: UOp(op, x.dtype, (x,))


def test_c_keeps_every_op_and_cuda_decomposes_pow():
  sink = elementwise(lambda a, b: UOp(Ops.POW, a.dtype, (a, b)), [dtypes.float32] * 2, dtypes.float32)
  assert Ops.POW in ops_in(isel(sink, get_target("c").ops))
  assert Ops.POW not in ops_in(isel(sink, get_target("cuda").ops))


def test_fast_math_allows_approximate_instructions():
  sink = elementwise(_unary(Ops.LOG2), [dtypes.float32], dtypes.float32)
  assert Ops.LOG2 not in ops_in(isel(sink, get_target("cuda").ops))
  assert Ops.LOG2 in ops_in(isel(sink, get_target("cuda").ops, fast_math=True))


def test_cuda_keeps_exp2_up_to_float32_and_decomposes_float64():
  for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
    assert Ops.EXP2 in ops_in(isel(elementwise(_unary(Ops.EXP2), [dt], dt), get_target("cuda").ops))
  assert Ops.EXP2 not in ops_in(isel(elementwise(_unary(Ops.EXP2), [dtypes.float64], dtypes.float64), get_target("cuda").ops))


def test_nothing_decomposed_leaves_only_primitives():
  sink = elementwise(lambda a, b: UOp(Ops.POW, a.dtype, (a, b)), [dtypes.float32] * 2, dtypes.float32)
  assert not ops_in(isel(sink, NOTHING)) & GroupOp.Decomposed


def _build(op, dt):
  if op in GroupOp.Comparison: return lambda a, b: UOp(op, dtypes.bool, (a, b))
  if op is Ops.MULACC: return lambda a, b: UOp(op, dt, (a, b, a))
  return lambda a, b: UOp(op, dt, (a, b))


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.uint16, dtypes.int64, dtypes.float32, dtypes.float64], ids=str)
def test_decompositions_match_native(dt):
  native, lowered = Library(get_target("c").ops), Library(NOTHING)
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


def test_division_by_a_power_of_two_of_a_non_negative_value_is_a_shift_where_the_target_divides():
  """-t c keeps IDIV/MOD by other constants (the compiler's), but a power of two into a value min_max proves
  non-negative becomes SHR/AND: a C vector's division went lane by lane (bilinear upsampling's index math)."""
  lib, dt = Library(get_target("c").ops), dtypes.int32
  zero, k, m = UOp.const(dt, 0), UOp.const(dt, 256), UOp.const(dt, 7)
  def clamped(a): return UOp(Ops.MAX, dt, (a, zero))
  ops = {
    "div": ops_in(lib.add("pow2_div", lambda a: UOp(Ops.IDIV, dt, (clamped(a), k)), [dt], dt)),
    "mod": ops_in(lib.add("pow2_mod", lambda a: UOp(Ops.MOD, dt, (clamped(a), k)), [dt], dt)),
    "signed": ops_in(lib.add("any_sign", lambda a: UOp(Ops.IDIV, dt, (a, k)), [dt], dt)),
    "seven": ops_in(lib.add("mod_seven", lambda a: UOp(Ops.MOD, dt, (clamped(a), m)), [dt], dt)),
  }
  assert Ops.SHR in ops["div"] and Ops.IDIV not in ops["div"] and Ops.AND in ops["mod"] and Ops.MOD not in ops["mod"]
  assert Ops.IDIV in ops["signed"] and Ops.MOD in ops["seven"]  # a negative dividend, another divisor: as they were
  a = RNG.integers(-2**31, 2**31, 4096, dtype=np.int64).astype(np.int32)
  pos = np.maximum(a, 0)
  np.testing.assert_array_equal(lib("pow2_div", a), pos // 256)
  np.testing.assert_array_equal(lib("pow2_mod", a), pos % 256)
  np.testing.assert_array_equal(lib("any_sign", a), np.fix(a / 256).astype(np.int32))
  np.testing.assert_array_equal(lib("mod_seven", a), pos % 7)


@pytest.mark.parametrize("target", ["c", "cuda", "amd", "metal"])
def test_a_vector_divided_by_a_broadcast_power_of_two_is_a_vector_shift(target):
  """On every target: those without a divider (GPUs) went lane by lane (a 64-bit rem per lane in max pooling's
  backward on CUDA)."""
  dt, n = dtypes.int32, 8
  x = UOp(Ops.DEFINE_VAR, dt, (), ("x", 0, 1000))
  vec = UOp(Ops.STACK, dt.vec(n), (x,) * n)
  k = UOp(Ops.STACK, dt.vec(n), (UOp.const(dt, 16),) * n)
  out = isel(UOp(Ops.SINK, dtypes.void, (UOp(Ops.IDIV, dt.vec(n), (vec, k)),)), get_target(target).ops)
  assert Ops.IDIV not in ops_in(out) and any(u.op is Ops.SHR and u.dtype == dt.vec(n) and u.src[1].op is Ops.STACK for u in out.toposort())
