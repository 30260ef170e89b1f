"""Per op x per dtype numeric tests of the C renderer: one kernel per case (loop over N elements: load
the inputs, apply the op, store), all compiled into one library per compiler (gcc under ASan/UBSan,
clang plain), run through ctypes and compared with numpy / ml_dtypes / hand-computed values."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
import pytest

from c_harness import Call, compile_c, have, run_calls
from uopc.dtype import DType, dtypes
from uopc.ops import AxisType, GroupOp, Ops
from uopc.stages.linearize import linearize
from uopc.targets.c.render import C_PRELUDE, render_kernel
from uopc.uop import UOp

NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.int16: np.int16, dtypes.int32: np.int32, dtypes.int64: np.int64,
      dtypes.uint8: np.uint8, dtypes.uint16: np.uint16, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64,
      dtypes.float16: np.float16, dtypes.bfloat16: ml_dtypes.bfloat16, dtypes.float32: np.float32, dtypes.float64: np.float64}
INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
N = 96
RNG = np.random.default_rng(1234)


# ---- kernels ----------------------------------------------------------------------------------------------
def elementwise_sink(build: Callable[..., UOp], in_dts: list[DType], out_dt: DType, n: int) -> UOp:
  """out[i] = build(in0[i], in1[i], ...) for i < n: data0 is the output, data1.. the inputs."""
  idx = dtypes.index
  out = UOp(Ops.PARAM, out_dt.ptr(), (), (0, "out"))
  ins = [UOp(Ops.PARAM, dt.ptr(), (), (k + 1, f"in{k}")) for k, dt in enumerate(in_dts)]
  r = UOp(Ops.RANGE, idx, (UOp.const(idx, n),), (0, AxisType.LOOP))
  loads = [UOp(Ops.LOAD, p.dtype.base, (UOp(Ops.INDEX, p.dtype, (p, r)),)) for p in ins]
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, r)), build(*loads)))
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, r)),))


def alu(op: Ops, out_dt: DType | None = None) -> Callable[..., UOp]:
  def build(*xs: UOp) -> UOp:
    dt = out_dt or (dtypes.bool if op in GroupOp.Comparison else xs[-1].dtype)
    return UOp(op, dt, tuple(xs))
  return build


@dataclass
class Case:
  name: str
  sink: UOp
  inputs: list[np.ndarray]
  expected: np.ndarray
  check: str = "exact"  # exact (bits, NaN payload ignored) | ulp1 | ulp2


CASES: dict[str, Case] = {}


def add_case(op_name: str, dts: str, build, in_dts, out_dt, inputs, expected, check="exact"):
  name = f"k_{op_name}_{dts}".lower()
  assert name not in CASES, name
  expected = np.asarray(expected).astype(NP[out_dt])
  CASES[name] = Case(name, elementwise_sink(build, in_dts, out_dt, len(inputs[0])), inputs, expected, check)


# ---- inputs ---------------------------------------------------------------------------------------------
def ints(dt: DType, n: int = N, lo=None, hi=None) -> np.ndarray:
  info = np.iinfo(NP[dt])
  lo, hi = info.min if lo is None else lo, info.max if hi is None else hi
  edges = [v for v in (info.min, info.min + 1, -1, 0, 1, 2, info.max - 1, info.max) if lo <= v <= hi]
  rand = RNG.integers(lo, hi, size=n - len(edges), dtype=NP[dt], endpoint=True)
  return np.concatenate([np.array(edges, NP[dt]), rand])


SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 3.0, math.inf, -math.inf, math.nan, 1e-3, 65504.0, 1e30, 1e-30]


def floats(dt: DType, n: int = N, scale: float = 100.0) -> np.ndarray:
  rand = (RNG.standard_normal(n - len(SPECIAL_FLOATS)) * scale).tolist()
  return np.array(SPECIAL_FLOATS + rand, np.float64).astype(NP[dt])


def compute_type(dt: DType): return np.float64 if dt is dtypes.float64 else np.float32


# ---- integer ops ------------------------------------------------------------------------------------------
def _int_cases():
  for dt in INTS:
    t, info = NP[dt], np.iinfo(NP[dt])
    a, b = ints(dt), ints(dt)[::-1].copy()
    nz = np.where(b == 0, t(3), b)
    # numpy's floor ops and fmod overflow on MIN / -1; that pair is tested by hand below
    safe = np.where((a == info.min) & (nz == t(-1) if info.min < 0 else False), t(5), nz)
    c = ints(dt)
    sh = RNG.integers(0, dt.itemsize * 8, size=N).astype(t)
    cond = RNG.integers(0, 2, size=N).astype(np.bool_)
    binary = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.AND: np.bitwise_and,
              Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPGT: np.greater,
              Ops.CMPGE: np.greater_equal, Ops.CMPLE: np.less_equal, Ops.CMPEQ: np.equal}
    for op, fn in binary.items(): add_case(op.name, dt.name, alu(op), [dt, dt], dt if fn(a[:1], b[:1]).dtype != np.bool_ else dtypes.bool, [a, b], fn(a, b))
    add_case("NEG", dt.name, alu(Ops.NEG), [dt], dt, [a], np.negative(a))
    add_case("NOT", dt.name, alu(Ops.NOT), [dt], dt, [a], np.invert(a))
    add_case("TRUNC", dt.name, alu(Ops.TRUNC), [dt], dt, [a], a)
    add_case("MULACC", dt.name, alu(Ops.MULACC), [dt, dt, dt], dt, [a, b, c], np.add(np.multiply(a, b), c))
    add_case("SHL", dt.name, alu(Ops.SHL), [dt, dt], dt, [a, sh], np.left_shift(a, sh))
    add_case("SHR", dt.name, alu(Ops.SHR), [dt, dt], dt, [a, sh], np.right_shift(a, sh))
    add_case("IDIV", dt.name, alu(Ops.IDIV), [dt, dt], dt, [a, safe], (a - np.fmod(a, safe)) // safe)
    add_case("MOD", dt.name, alu(Ops.MOD), [dt, dt], dt, [a, safe], np.fmod(a, safe))
    add_case("FLOORDIV", dt.name, alu(Ops.FLOORDIV), [dt, dt], dt, [a, safe], np.floor_divide(a, safe))
    add_case("FLOORMOD", dt.name, alu(Ops.FLOORMOD), [dt, dt], dt, [a, safe], np.remainder(a, safe))
    add_case("WHERE", dt.name, alu(Ops.WHERE), [dtypes.bool, dt, dt], dt, [cond, a, b], np.where(cond, a, b))


def _int_edge_cases():
  """SPEC-NOTES by hand: IDIV truncates, MOD takes the dividend's sign, MIN / -1 wraps, SHR is arithmetic."""
  i32 = np.int32
  a = np.array([7, -7, 7, -7, -2**31, -2**31, 0, -1], i32)
  b = np.array([2, 2, -2, -2, -1, 1, 5, 3], i32)
  add_case("IDIV", "hand_int32", alu(Ops.IDIV), [dtypes.int32] * 2, dtypes.int32, [a, b], [3, -3, -3, 3, -2**31, -2**31, 0, 0])
  add_case("MOD", "hand_int32", alu(Ops.MOD), [dtypes.int32] * 2, dtypes.int32, [a, b], [1, -1, 1, -1, 0, 0, 0, -1])
  add_case("FLOORDIV", "hand_int32", alu(Ops.FLOORDIV), [dtypes.int32] * 2, dtypes.int32, [a, b], [3, -4, -4, 3, -2**31, -2**31, 0, -1])
  add_case("FLOORMOD", "hand_int32", alu(Ops.FLOORMOD), [dtypes.int32] * 2, dtypes.int32, [a, b], [1, 1, -1, -1, 0, 0, 0, 2])
  s = np.array([-128, -1, 64, 127], np.int8)
  add_case("SHR", "hand_int8", alu(Ops.SHR), [dtypes.int8] * 2, dtypes.int8, [s, np.array([1, 7, 1, 6], np.int8)], [-64, -1, 32, 1])
  add_case("SHL", "hand_int8", alu(Ops.SHL), [dtypes.int8] * 2, dtypes.int8, [s, np.array([1, 7, 1, 1], np.int8)], [0, -128, -128, -2])
  big = np.array([2**62, -2**63, 2**63 - 1], np.int64)
  add_case("MUL", "hand_int64", alu(Ops.MUL), [dtypes.int64] * 2, dtypes.int64, [big, np.array([4, -1, 2], np.int64)], [0, -2**63, -2])
  add_case("ADD", "hand_int64", alu(Ops.ADD), [dtypes.int64] * 2, dtypes.int64, [big, np.array([2**62, -1, 1], np.int64)], [-2**63, 2**63 - 1, -2**63])
  u16 = np.array([65535, 65535, 300], np.uint16)
  add_case("MUL", "hand_uint16", alu(Ops.MUL), [dtypes.uint16] * 2, dtypes.uint16, [u16, np.array([65535, 2, 300], np.uint16)], [1, 65534, 24464])


# ---- float ops ----------------------------------------------------------------------------------------------
def _float_cases():
  for dt in FLOATS:
    ct = compute_type(dt)
    a, b, c = floats(dt), floats(dt)[::-1].copy(), floats(dt, scale=3.0)
    A, B, C = a.astype(ct), b.astype(ct), c.astype(ct)
    cond = RNG.integers(0, 2, size=N).astype(np.bool_)
    exact = {Ops.ADD: A + B, Ops.SUB: A - B, Ops.MUL: A * B, Ops.DIV: A / B, Ops.MAX: np.maximum(A, B)}
    for op, ref in exact.items(): add_case(op.name, dt.name, alu(op), [dt, dt], dt, [a, b], ref.astype(NP[dt]))
    # CMPGE/CMPLE by their seed 000 definitions (NOT CMPLT): true when an operand is NaN
    for op, fn in {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPGT: np.greater, Ops.CMPGE: lambda x, y: ~np.less(x, y),
                   Ops.CMPLE: lambda x, y: ~np.less(y, x), Ops.CMPEQ: np.equal}.items():
      add_case(op.name, dt.name, alu(op), [dt, dt], dtypes.bool, [a, a[::-1].copy()], fn(A, A[::-1]))
    add_case("NEG", dt.name, alu(Ops.NEG), [dt], dt, [a], (-A).astype(NP[dt]))
    add_case("RECIP", dt.name, alu(Ops.RECIP), [dt], dt, [a], (ct(1) / A).astype(NP[dt]))
    add_case("TRUNC", dt.name, alu(Ops.TRUNC), [dt], dt, [a], np.trunc(A).astype(NP[dt]))
    add_case("MULACC", dt.name, alu(Ops.MULACC), [dt] * 3, dt, [a, b, c], ((A * B) + C).astype(NP[dt]))
    add_case("WHERE", dt.name, alu(Ops.WHERE), [dtypes.bool, dt, dt], dt, [cond, a, b], np.where(cond, a, b))
    # transcendentals: the reference is float64 libm rounded to dt; 2 ULP (one 16-bit ULP after rounding)
    tol = "ulp1" if dt.itemsize == 2 else "ulp2"
    pos = np.abs(a)
    F = a.astype(np.float64)
    add_case("SQRT", dt.name, alu(Ops.SQRT), [dt], dt, [a], np.sqrt(F).astype(NP[dt]), tol)
    add_case("LOG2", dt.name, alu(Ops.LOG2), [dt], dt, [a], np.log2(F).astype(NP[dt]), tol)
    e = floats(dt, scale=8.0)
    add_case("EXP2", dt.name, alu(Ops.EXP2), [dt], dt, [e], np.exp2(e.astype(np.float64)).astype(NP[dt]), tol)
    s = np.clip(floats(dt, scale=3000.0).astype(np.float64), -1e4, 1e4).astype(NP[dt])
    add_case("SIN", dt.name, alu(Ops.SIN), [dt], dt, [s], np.sin(s.astype(np.float64)).astype(NP[dt]), tol)
    p = floats(dt, scale=2.0)
    add_case("POW", dt.name, alu(Ops.POW), [dt, dt], dt, [pos, p], np.power(pos.astype(np.float64), p.astype(np.float64)).astype(NP[dt]), tol)


def _float_edge_cases():
  """CMPNE is true for NaN and so are CMPGE/CMPLE (NOT CMPLT), MAX is NaN if either side is; -0.0 survives NEG; f16/bf16 ADD rounds to even."""
  f32, nan, inf = np.float32, math.nan, math.inf
  x = np.array([nan, 1.0, nan, 2.0, -inf], f32)
  y = np.array([1.0, nan, nan, 2.0, inf], f32)
  add_case("CMPNE", "hand_f32", alu(Ops.CMPNE), [dtypes.float32] * 2, dtypes.bool, [x, y], [True, True, True, False, True])
  add_case("CMPEQ", "hand_f32", alu(Ops.CMPEQ), [dtypes.float32] * 2, dtypes.bool, [x, y], [False, False, False, True, False])
  add_case("CMPLT", "hand_f32", alu(Ops.CMPLT), [dtypes.float32] * 2, dtypes.bool, [x, y], [False, False, False, False, True])
  add_case("CMPGT", "hand_f32", alu(Ops.CMPGT), [dtypes.float32] * 2, dtypes.bool, [x, y], [False, False, False, False, False])
  add_case("CMPGE", "hand_f32", alu(Ops.CMPGE), [dtypes.float32] * 2, dtypes.bool, [x, y], [True, True, True, True, False])
  add_case("CMPLE", "hand_f32", alu(Ops.CMPLE), [dtypes.float32] * 2, dtypes.bool, [x, y], [True, True, True, True, True])
  add_case("MAX", "hand_f32", alu(Ops.MAX), [dtypes.float32] * 2, dtypes.float32, [x, y], [nan, nan, nan, 2.0, inf])
  add_case("NEG", "hand_f32", alu(Ops.NEG), [dtypes.float32], dtypes.float32, [np.array([0.0, -0.0], f32)], [-0.0, 0.0])
  # 1 + 2^-11 is halfway between float16 1.0 and 1 + 2^-10: ties go to the even 1.0; 1 + 3*2^-11 goes up to 1 + 2^-9
  # 65504 + 16 is halfway to 65536, which ties to infinity; a subnormal sum carries into the smallest normal
  h = np.array([1.0, 1.0, 65504.0, 65504.0, 2.0**-14 - 2.0**-24], np.float16)
  add_case("ADD", "hand_f16", alu(Ops.ADD), [dtypes.float16] * 2, dtypes.float16,
           [h, np.array([2.0**-11, 3 * 2.0**-11, 8.0, 16.0, 2.0**-24], np.float16)], [1.0, 1.0 + 2.0**-9, 65504.0, inf, 2.0**-14])
  # TRUNC by its sign (-0.5 -> -0.0), at the edge of exact integers (2^23 - 0.5, 2^52 - 0.5), beyond int range, NaN/inf
  for dt, big in ((dtypes.float32, 2.0**23), (dtypes.float64, 2.0**52)):
    t = np.array([-0.5, 0.5, -0.0, 0.0, big - 0.5, -(big - 0.5), big, -big, 2 * big, -3.0e9, 1e30, nan, inf, -inf, 2.5, -2.75], NP[dt])
    add_case("TRUNC", f"hand_{dt.name}", alu(Ops.TRUNC), [dt], dt, [t], np.trunc(t))
  bf = np.array([1.0, 1.0, 3.0e38], ml_dtypes.bfloat16)
  add_case("ADD", "hand_bf16", alu(Ops.ADD), [dtypes.bfloat16] * 2, dtypes.bfloat16,
           [bf, np.array([2.0**-8, 3 * 2.0**-8, 3.0e38], ml_dtypes.bfloat16)], np.array([1.0, 1.0 + 2.0**-6, inf], ml_dtypes.bfloat16))


# ---- bool ops ------------------------------------------------------------------------------------------------
def _bool_cases():
  a = np.array([False, False, True, True] * 4)
  b = np.array([False, True, False, True] * 4)
  bt = dtypes.bool
  for op, ref in {Ops.ADD: a | b, Ops.MUL: a & b, Ops.MAX: a | b, Ops.AND: a & b, Ops.OR: a | b, Ops.XOR: a ^ b,
                  Ops.CMPNE: a != b, Ops.CMPLT: a < b, Ops.CMPEQ: a == b}.items():
    add_case(op.name, "bool", alu(op), [bt, bt], bt, [a, b], ref)
  add_case("NOT", "bool", alu(Ops.NOT), [bt], bt, [a], ~a)


# ---- casts and bitcasts ------------------------------------------------------------------------------------------
def cast_inputs(src: DType, dst: DType) -> np.ndarray:
  """Inputs whose cast is defined (float to int only in range) and exactly rounded by the reference."""
  if src is dtypes.bool: return np.array([False, True, True, False])
  if src.is_int():
    if dst.is_float() and dst.itemsize == 2: return ints(src, lo=max(np.iinfo(NP[src]).min, -2**24), hi=min(np.iinfo(NP[src]).max, 2**24))
    return ints(src)
  if dst.is_int():
    info = np.iinfo(NP[dst])
    lo, hi = max(float(info.min), -60000.0), min(float(info.max), 60000.0)
    vals = np.concatenate([RNG.uniform(lo, hi, N - 6), [0.0, -0.0, 0.99, -0.99 if lo < 0 else 0.5, lo, hi]]).astype(NP[src])
    wide = vals.astype(np.float64)
    return np.where((wide >= lo) & (wide <= hi), vals, NP[src](0))  # rounding to src may leave the range
  vals = floats(dtypes.float32 if src is dtypes.float64 else src)  # exactly representable in float32: one rounding
  return vals.astype(NP[src])


def _cast_cases():
  scalars = [dtypes.bool, *INTS, *FLOATS]
  for src in scalars:
    for dst in scalars:
      if src is dst: continue
      x = cast_inputs(src, dst)
      add_case("CAST", f"{src.name}_to_{dst.name}", lambda v, d=dst: UOp(Ops.CAST, d, (v,)), [src], dst, [x], x.astype(NP[dst]))


def _cast_edge_cases():
  f64, f32 = dtypes.float64, dtypes.float32
  # float64 -> float16 rounds once: 1 + 2^-11 + 2^-40 is just above the tie, so it goes up (via float32 it would tie to 1.0)
  x = np.array([1 + 2.0**-11 + 2.0**-40, 65519.0, 65520.0, 2.0**-25, 2.0**-25 + 2.0**-40, -0.0, math.nan])
  add_case("CAST", "hand_f64_to_f16", lambda v: UOp(Ops.CAST, dtypes.float16, (v,)), [f64], dtypes.float16, [x],
           np.array([1 + 2.0**-10, 65504.0, math.inf, 0.0, 2.0**-24, -0.0, math.nan], np.float16))
  y = np.array([-1.9, 1.9, -0.5, 2.5, 127.99], np.float32)
  add_case("CAST", "hand_f32_to_i8", lambda v: UOp(Ops.CAST, dtypes.int8, (v,)), [f32], dtypes.int8, [y], [-1, 1, 0, 2, 127])
  z = np.array([256 + 7, -1, 128, 2**31 - 1], np.int32)
  add_case("CAST", "hand_i32_to_u8", lambda v: UOp(Ops.CAST, dtypes.uint8, (v,)), [dtypes.int32], dtypes.uint8, [z], [7, 255, 128, 255])
  add_case("CAST", "hand_i32_to_bool", lambda v: UOp(Ops.CAST, dtypes.bool, (v,)), [dtypes.int32], dtypes.bool, [z], [True] * 4)
  w = np.array([0.0, -0.0, math.nan, 1e-45], np.float32)
  add_case("CAST", "hand_f32_to_bool", lambda v: UOp(Ops.CAST, dtypes.bool, (v,)), [f32], dtypes.bool, [w], [False, False, True, True])
  # bfloat16 rounding to nearest even at the float32 -> bfloat16 boundary, and NaN stays NaN
  b = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20, math.nan, -math.inf], np.float32)
  add_case("CAST", "hand_f32_to_bf16", lambda v: UOp(Ops.CAST, dtypes.bfloat16, (v,)), [f32], dtypes.bfloat16, [b],
           np.array([1.0, 1 + 2.0**-6, 1 + 2.0**-7, math.nan, -math.inf], ml_dtypes.bfloat16))


def _all_half_bits_cases():
  """Every float16/bfloat16 bit pattern to float32 and back."""
  bits = np.arange(65536, dtype=np.uint16)
  for dt in (dtypes.float16, dtypes.bfloat16):
    h = bits.view(NP[dt])
    add_case("CAST", f"all_{dt.name}_to_f32", lambda v: UOp(Ops.CAST, dtypes.float32, (v,)), [dt], dtypes.float32, [h], h.astype(np.float32))
    f = np.concatenate([h.astype(np.float32), RNG.integers(0, 2**32, 4096, dtype=np.uint32).view(np.float32)])
    add_case("CAST", f"all_f32_to_{dt.name}", lambda v, d=dt: UOp(Ops.CAST, d, (v,)), [dtypes.float32], dt, [f], f.astype(NP[dt]))
    # halfway points between neighbouring 16-bit values: round to even
    mid = ((h[:-1].astype(np.float64) + h[1:].astype(np.float64)) / 2)
    mid = mid[np.isfinite(mid)].astype(np.float32)
    add_case("CAST", f"ties_f32_to_{dt.name}", lambda v, d=dt: UOp(Ops.CAST, d, (v,)), [dtypes.float32], dt, [mid], mid.astype(NP[dt]))


def _bitcast_cases():
  pairs = [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32), (dtypes.float32, dtypes.uint32),
           (dtypes.float16, dtypes.int16), (dtypes.int16, dtypes.float16), (dtypes.bfloat16, dtypes.uint16),
           (dtypes.uint16, dtypes.bfloat16), (dtypes.float64, dtypes.int64), (dtypes.uint64, dtypes.float64),
           (dtypes.int8, dtypes.uint8)]
  for src, dst in pairs:
    x = floats(src) if src.is_float() else ints(src)
    add_case("BITCAST", f"{src.name}_to_{dst.name}", lambda v, d=dst: UOp(Ops.BITCAST, d, (v,)), [src], dst, [x], x.view(NP[dst]))


# ---- threefry ------------------------------------------------------------------------------------------------
def threefry_reference(x: int, key: int) -> int:
  """Threefry-2x32, 20 rounds, written from SPEC-NOTES."""
  m = 0xFFFFFFFF
  def rotl(v, r): return ((v << r) | (v >> (32 - r))) & m
  k0, k1 = key & m, key >> 32
  ks = [k1, k0 ^ k1 ^ 0x1BD11BDA, k0]
  x0, x1 = (x & m) + ks[2] & m, (x >> 32) + ks[0] & m
  for i in range(5):
    for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
      x0 = (x0 + x1) & m
      x1 = rotl(x1, r) ^ x0
    x0, x1 = (x0 + ks[i % 3]) & m, (x1 + ks[(i + 1) % 3] + i + 1) & m
  return (x1 << 32) | x0


def _threefry_cases():
  u64 = np.uint64
  # Random123 known-answer vectors for threefry2x32_20 (ctr0, ctr1, key0, key1 -> out0, out1), words packed low|high
  kat = [((0, 0, 0, 0), (0x6B200159, 0x99BA4EFE)), ((0xFFFFFFFF,) * 4, (0x1CB996FC, 0xBB002BE7)),
         ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]
  xs = [c1 << 32 | c0 for (c0, c1, _, _), _ in kat] + RNG.integers(0, 2**64, 29, dtype=u64, endpoint=False).tolist()
  keys = [k1 << 32 | k0 for (_, _, k0, k1), _ in kat] + RNG.integers(0, 2**64, 29, dtype=u64).tolist()
  expected = [o1 << 32 | o0 for _, (o0, o1) in kat] + [threefry_reference(int(x), int(k)) for x, k in zip(xs[3:], keys[3:])]
  add_case("THREEFRY", "uint64", alu(Ops.THREEFRY), [dtypes.uint64] * 2, dtypes.uint64,
           [np.array(xs, u64), np.array(keys, u64)], np.array(expected, u64))


def test_threefry_reference_matches_known_answers():
  assert threefry_reference(0, 0) == 0x99BA4EFE << 32 | 0x6B200159
  assert threefry_reference(0x85A308D3 << 32 | 0x243F6A88, 0x03707344 << 32 | 0x13198A2E) == 0x483DF7A0 << 32 | 0xC4923A9C


with np.errstate(all="ignore"):  # the references overflow to inf and make NaNs on purpose
  for _make in (_int_cases, _int_edge_cases, _float_cases, _float_edge_cases, _bool_cases, _cast_cases, _cast_edge_cases,
                _all_half_bits_cases, _bitcast_cases, _threefry_cases):
    _make()


# ---- running ---------------------------------------------------------------------------------------------------
def library_source() -> str:
  return C_PRELUDE + "\n".join(render_kernel(linearize(c.sink), c.name).source for c in CASES.values())


def _ordered_ints(x: np.ndarray) -> np.ndarray:
  """Float bits mapped to integers ordered like the floats (sign-magnitude to two's complement): ULP distance
  is then a difference."""
  bits = x.view({2: np.int16, 4: np.int32, 8: np.int64}[x.itemsize]).astype(np.int64)
  return np.where(bits < 0, -(bits & np.int64((1 << (x.itemsize * 8 - 1)) - 1)), bits)


def mismatches(case: Case, got: np.ndarray) -> list[int]:
  exp = case.expected.astype(got.dtype)
  if got.dtype.kind != "f" and got.dtype != ml_dtypes.bfloat16: return np.flatnonzero(got != exp).tolist()
  both_nan = np.isnan(got) & np.isnan(exp)
  if case.check == "exact": bad = got.view(np.uint8).reshape(len(got), -1) != exp.view(np.uint8).reshape(len(exp), -1)
  else:
    limit = 1 if case.check == "ulp1" else 2
    bad = (np.abs(_ordered_ints(got) - _ordered_ints(exp)) > limit)[:, None]
  return np.flatnonzero(bad.any(axis=1) & ~both_nan).tolist()


def run_all(compiler: str, sanitize: bool) -> dict[str, np.ndarray]:
  lib = compile_c(library_source(), compiler, sanitize)
  calls = [Call(c.name, (np.zeros(len(c.expected), c.expected.dtype), *c.inputs)) for c in CASES.values()]
  return {c.name: res[0] for c, res in zip(CASES.values(), run_calls(lib, calls, sanitize))}


CONFIGS = [pytest.param("gcc", True, id="gcc-asan-ubsan"),
           pytest.param("clang", False, id="clang", marks=pytest.mark.skipif(not have("clang"), reason="clang not installed"))]


@pytest.mark.parametrize("compiler,sanitize", CONFIGS)
def test_every_op_and_dtype_matches_numpy(compiler, sanitize):
  results = run_all(compiler, sanitize)
  failures = []
  for case in CASES.values():
    got = results[case.name]
    if bad := mismatches(case, got):
      i = bad[0]
      failures.append(f"{case.name}: {len(bad)} wrong, e.g. inputs {[x[i] for x in case.inputs]} -> {got[i]!r}, expected {case.expected[i]!r}")
  assert not failures, "\n".join(failures)


def test_cases_cover_every_alu_op():
  covered = {c.sink.src[0].src[0].src[1].op for c in CASES.values()}
  assert GroupOp.ALU - covered == set()


def _where_of_compare_cases():
  """WHERE selecting by a comparison (on vectors the renderer keeps such a comparison as a mask), NaN included."""
  fns = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPGT: np.greater, Ops.CMPGE: lambda a, b: ~np.less(a, b),
         Ops.CMPLE: lambda a, b: ~np.less(b, a), Ops.CMPEQ: np.equal}
  for dt in (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint16):
    a = floats(dt) if dt.is_float() else ints(dt)
    b = np.concatenate([a[:8], (floats(dt) if dt.is_float() else ints(dt))[8:]])  # equal pairs too
    for op, fn in fns.items():
      build = lambda x, y, op=op: UOp(Ops.WHERE, x.dtype, (UOp(op, dtypes.bool, (x, y)), x, y))
      add_case(f"WHERE_{op.name}", dt.name, build, [dt, dt], dt, [a, b], np.where(fn(a, b), a, b))


with np.errstate(invalid="ignore"):
  _where_of_compare_cases()


# ---- the same cases on vectors ---------------------------------------------------------------------------------
def vectorize(sink: UOp, lanes: int) -> UOp:
  """The case's kernel on `lanes`-wide vectors: its loop runs n/lanes times, each LOAD, op and STORE takes
  `lanes` consecutive elements (the renderer's whole-vector forms, where it has one, instead of lane by lane)."""
  idx, memo = dtypes.index, {}
  for u in sink.toposort():
    src = tuple(memo[s] for s in u.src)
    if u.op is Ops.RANGE: new = UOp(Ops.RANGE, u.dtype, (UOp.const(idx, u.src[0].arg // lanes),), u.arg)
    elif u.op is Ops.INDEX: new = UOp(Ops.INDEX, u.dtype, (src[0], UOp(Ops.MUL, idx, (src[1], UOp.const(idx, lanes)))))
    elif u.op is Ops.CONST and u.dtype is not idx: new = UOp(Ops.CONST, u.dtype.vec(lanes), (), u.arg)
    elif u.op is Ops.LOAD or u.op is Ops.CAST or u.op is Ops.BITCAST or u.op in GroupOp.ALU: new = UOp(u.op, u.dtype.vec(lanes), src, u.arg)
    else: new = u if src == u.src else u.replace(src=src)
    memo[u] = new
  return memo[sink]


VECTOR_CONFIGS = [pytest.param("gcc", True, (), id="gcc-asan-ubsan"),
                  pytest.param("gcc", False, ("-march=native",), id="gcc-native"),
                  pytest.param("clang", False, ("-march=native",), id="clang-native",
                               marks=pytest.mark.skipif(not have("clang"), reason="clang not installed"))]


@pytest.mark.parametrize("lanes", [16, 3])
@pytest.mark.parametrize("compiler,sanitize,extra", VECTOR_CONFIGS)
def test_every_op_and_dtype_matches_numpy_on_vectors(compiler, sanitize, extra, lanes):
  cases = [c for c in CASES.values() if len(c.expected) % lanes == 0 and "threefry" not in c.name]
  source = C_PRELUDE + "\n".join(render_kernel(linearize(vectorize(c.sink, lanes)), c.name).source for c in cases)
  lib = compile_c(source, compiler, sanitize, extra=extra)
  calls = [Call(c.name, (np.zeros(len(c.expected), c.expected.dtype), *c.inputs)) for c in cases]
  failures = []
  for case, res in zip(cases, run_calls(lib, calls, sanitize)):
    if bad := mismatches(case, res[0]):
      i = bad[0]
      failures.append(f"{case.name}: {len(bad)} wrong, e.g. inputs {[x[i] for x in case.inputs]} -> {res[0][i]!r}, expected {case.expected[i]!r}")
  assert len(cases) > len(CASES) // 2 and not failures, "\n".join(failures)
