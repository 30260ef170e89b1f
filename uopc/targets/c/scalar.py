"""The C spelling of uopc's values, for the C renderer (uopc.targets.c.render): dtypes as C types,
constants as literals, and each scalar ALU op and CAST as one C expression, with SPEC-NOTES' semantics
(integers wrap through unsigned arithmetic, float16/bfloat16 are computed in float and rounded once,
MAX propagates NaN, a MULACC {"fused"} is C's fma).
"""
from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from uopc.diagnostics import CompileError, error
from uopc.dtype import DType, PtrDType, dtypes
from uopc.ops import Ops
from uopc.targets.c.prelude import C_SCALAR, VECTOR_LANES, vector_type_name


def _fail(message: str) -> CompileError: return CompileError([error(None, f"C renderer: {message}")])


# ---- types ---------------------------------------------------------------------------------------------
def _lanes(count: int) -> int:
  for n in VECTOR_LANES:
    if n >= count: return n
  raise _fail(f"vectors of {count} lanes are wider than {VECTOR_LANES[-1]}")


def ctype(dt: DType) -> str:
  """The C type of a value of dtype `dt`."""
  if isinstance(dt, PtrDType): return ctype(dt.base) + "*"
  if dt.scalar not in C_SCALAR: raise _fail(f"dtype {dt} has no C type")
  return C_SCALAR[dt] if dt.count == 1 else vector_type_name(dt.scalar, _lanes(dt.count))


_HALF_NAMES = {dtypes.float16: "half", dtypes.bfloat16: "bfloat16"}  # as the prelude's helpers spell them
_HALF_NUMPY = {dtypes.float16: np.float16, dtypes.bfloat16: ml_dtypes.bfloat16}


def _wide_unsigned(dt: DType) -> str: return "uint64_t" if dt.itemsize == 8 else "uint32_t"
def _is_half(dt: DType) -> bool: return dt in _HALF_NAMES


def _to_compute(x: str, dt: DType) -> str:
  """A float operand in its arithmetic type (float16/bfloat16 bits widen to float)."""
  return f"uopc_{_HALF_NAMES[dt]}_to_float({x})" if _is_half(dt) else x


def _from_compute(x: str, dt: DType) -> str:
  """A float result in dtype `dt` (one round-to-nearest-even to 16 bits for float16/bfloat16)."""
  return f"uopc_double_to_{_HALF_NAMES[dt]}({x})" if _is_half(dt) else x


# ---- constants -----------------------------------------------------------------------------------------
def render_const(value: Any, dt: DType) -> str:
  """A C literal of exactly `value` in scalar dtype `dt` (floats as hex floats, so they round-trip)."""
  if dt is dtypes.bool: return "1" if value else "0"
  if dt.is_int(): return _int_literal(int(value), dt)
  if _is_half(dt):
    with np.errstate(over="ignore"): bits = int(np.array(value, _HALF_NUMPY[dt]).view(np.uint16))
    return f"((uopc_{_HALF_NAMES[dt]})0x{bits:04X})"
  if dt in (dtypes.float32, dtypes.float64):
    suffix, cast = ("f", "") if dt is dtypes.float32 else ("", "(double)")
    value = float(value)
    if math.isnan(value): return f"({cast}NAN)" if cast else "NAN"
    if math.isinf(value): return f"({'-' if value < 0 else ''}{cast}INFINITY)"
    text = value.hex() + suffix
    return f"({text})" if text.startswith("-") else text
  raise _fail(f"cannot render a constant of dtype {dt}")


def _int_literal(v: int, dt: DType) -> str:
  lo, hi = dt.min, dt.max
  if not lo <= v <= hi: raise _fail(f"constant {v} does not fit {dt}")
  if dt.is_unsigned(): return f"{v}u" if dt.itemsize < 8 else f"UINT64_C({v})"
  if v == lo: return f"({_int_literal(v + 1, dt)} - 1)"
  text = f"INT64_C({v})" if dt.itemsize == 8 and not -2**31 <= v < 2**31 else str(v)
  return f"({text})" if v < 0 else text


# ---- scalar ALU ----------------------------------------------------------------------------------------
_FLOAT_OPS = {
  Ops.ADD: "({0}+{1})", Ops.SUB: "({0}-{1})", Ops.MUL: "({0}*{1})", Ops.DIV: "({0}/{1})", Ops.NEG: "(-{0})",
  Ops.RECIP: "(1.0{f}/{0})", Ops.MULACC: "(({0}*{1})+{2})", Ops.MAX: "uopc_max{f}({0}, {1})",
  Ops.TRUNC: "trunc{f}({0})", Ops.SQRT: "sqrt{f}({0})", Ops.EXP2: "exp2{f}({0})", Ops.LOG2: "log2{f}({0})",
  Ops.SIN: "sin{f}({0})", Ops.POW: "pow{f}({0}, {1})",
}
# the decomposed comparisons by their seed 000 definitions: CMPGE is NOT CMPLT(a, b), CMPLE is NOT CMPLT(b, a),
# so both are true when an operand is NaN (C's >= and <= would be false)
_COMPARE_OPS = {Ops.CMPLT: "({0}<{1})", Ops.CMPNE: "({0}!={1})", Ops.CMPGT: "({1}<{0})", Ops.CMPGE: "(!({0}<{1}))",
                Ops.CMPLE: "(!({1}<{0}))", Ops.CMPEQ: "({0}=={1})"}
# {T}: the C type, {W}: the unsigned type wide enough to do the arithmetic without UB
_INT_OPS = {
  Ops.ADD: "({T})(({W}){0}+({W}){1})", Ops.SUB: "({T})(({W}){0}-({W}){1})", Ops.MUL: "({T})(({W}){0}*({W}){1})",
  Ops.NEG: "({T})(({W})0-({W}){0})", Ops.MULACC: "({T})(({W}){0}*({W}){1}+({W}){2})", Ops.SHL: "({T})(({W}){0}<<{1})",
  Ops.SHR: "({T})({0}>>{1})", Ops.AND: "({T})({0}&{1})", Ops.OR: "({T})({0}|{1})", Ops.XOR: "({T})({0}^{1})",
  Ops.NOT: "({T})(~{0})", Ops.MAX: "({0}>{1}?{0}:{1})", Ops.TRUNC: "{0}",
  Ops.IDIV: "uopc_idiv_{N}({0}, {1})", Ops.MOD: "uopc_mod_{N}({0}, {1})",
  Ops.FLOORDIV: "uopc_floordiv_{N}({0}, {1})", Ops.FLOORMOD: "uopc_floormod_{N}({0}, {1})",
}
_BOOL_OPS = {Ops.ADD: "({0}|{1})", Ops.OR: "({0}|{1})", Ops.MAX: "({0}|{1})", Ops.MUL: "({0}&{1})",
             Ops.AND: "({0}&{1})", Ops.XOR: "({0}^{1})", Ops.NOT: "(!{0})"}


def alu_expr(op: Ops, dt: DType, src_dt: DType, xs: list[str], fused: bool = False) -> str:
  """The C expression of scalar ALU op `op` with result dtype `dt` on operands `xs` of dtype `src_dt`
  (for WHERE, `src_dt` is the dtype of the selected values); `fused`: a MULACC {"fused"} (C's fma)."""
  if fused and op is Ops.MULACC and src_dt.is_float():
    f = "" if src_dt is dtypes.float64 else "f"
    return _from_compute(f"fma{f}({', '.join(_to_compute(x, src_dt) for x in xs)})", dt)
  if op is Ops.WHERE: return f"({xs[0]}?{xs[1]}:{xs[2]})"
  if op is Ops.THREEFRY and src_dt is dtypes.uint64: return f"uopc_threefry2x32({xs[0]}, {xs[1]})"
  if op in _COMPARE_OPS:
    return _COMPARE_OPS[op].format(*(_to_compute(x, src_dt) for x in xs) if src_dt.is_float() else xs)
  if src_dt.is_float() and op in _FLOAT_OPS:
    f = "" if src_dt is dtypes.float64 else "f"
    return _from_compute(_FLOAT_OPS[op].format(*(_to_compute(x, src_dt) for x in xs), f=f), dt)
  if src_dt.is_int() and op in _INT_OPS:
    name = "int64" if src_dt is dtypes.index else src_dt.name
    return _INT_OPS[op].format(*xs, T=C_SCALAR[src_dt], W=_wide_unsigned(src_dt), N=name)
  if src_dt is dtypes.bool and op in _BOOL_OPS: return _BOOL_OPS[op].format(*xs)
  raise _fail(f"cannot render {op.name} on {src_dt}")


def cast_expr(x: str, src: DType, dst: DType) -> str:
  """Scalar CAST: to bool is x != 0, float to int truncates, to float16/bfloat16 rounds to nearest even."""
  if src is dst: return x
  if dst is dtypes.bool: return f"({_to_compute(x, src)}!=0)"
  if _is_half(dst): return _from_compute(f"(double){_to_compute(x, src)}", dst)
  return f"({C_SCALAR[dst]}){_to_compute(x, src)}"
