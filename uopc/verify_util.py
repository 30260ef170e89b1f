"""Small predicates and formatting the verifier's rule modules share (uopc/verify.py, verify_kernel.py)."""
from __future__ import annotations

from typing import Any

from uopc.dtype import DType, PtrDType, dtypes

EFFECTS = "a side effect (STORE, END, GROUP or BARRIER)"


def _is_int(x: Any) -> bool: return isinstance(x, int) and not isinstance(x, bool)
def _is_value(dt: DType) -> bool: return not dt.is_ptr() and dt is not dtypes.void
def _is_int_scalar(dt: DType) -> bool: return dt.count == 1 and not dt.is_ptr() and dt.is_int()
def _known(shape) -> bool: return shape is not None and all(_is_int(d) for d in shape)
def _element(dt: DType) -> DType: return dt.base if isinstance(dt, PtrDType) else dt


def _dim(d) -> str:
  if _is_int(d): return str(d)
  if isinstance(d, UOp) and d.op is Ops.DEFINE_VAR and isinstance(d.arg, tuple) and d.arg: return str(d.arg[0])
  return "?"


def _fmt(shape) -> str: return "(" + ", ".join(_dim(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _is_device(d: Any) -> bool:
  return d is None or isinstance(d, str) or isinstance(d, tuple) and len(d) > 0 and all(isinstance(x, str) for x in d)


def _src_count_ok(n: int, lo: int, hi: int | None) -> bool: return lo <= n and (hi is None or n <= hi)


def _count_text(lo: int, hi: int | None) -> str:
  if hi == lo: return f"{lo} source{'s' if lo != 1 else ''}"
  return f"at least {lo} sources" if hi is None else f"{lo} to {hi} sources"
