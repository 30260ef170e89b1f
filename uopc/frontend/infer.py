"""The dtype a statement gets when it writes no `: dtype` (seed 000's dtype column).

The parser uses it to fill in missing dtypes and the printer to leave out the ones it would
derive, so `parse(print(m))` rebuilds the very same UOps.
"""
from __future__ import annotations

from typing import Any

from uopc.dtype import DType, dtypes
from uopc.ops import GroupOp, Ops
from uopc.uop import UOp

# ops whose dtype cannot be derived: the text must say it
NEEDS_DTYPE = frozenset({Ops.PARAM, Ops.BUFFER, Ops.CAST, Ops.BITCAST})
_INDEX_VALUED = frozenset({Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR})


def const_dtype(value: Any) -> DType | None:
  """bool -> bool, int -> i32, float -> f32 (checked in that order: True is an int in Python)."""
  if isinstance(value, bool): return dtypes.bool
  if isinstance(value, int): return dtypes.int32
  if isinstance(value, float): return dtypes.float32
  return None


def derive_dtype(op: Ops, src: tuple[UOp, ...], arg: Any) -> DType | None:
  """The derived dtype of `op(src) {arg}`, or None when it must be written."""
  if op is Ops.CONST: return const_dtype(arg)
  if op in GroupOp.Void: return dtypes.void
  if op in _INDEX_VALUED: return dtypes.index
  if op is Ops.BINARY: return dtypes.uint8
  if op in NEEDS_DTYPE or not src: return None
  if op in GroupOp.Comparison: return dtypes.bool.vec(src[0].dtype.count)
  if op is Ops.WHERE: return src[1].dtype if len(src) > 1 else None
  if op is Ops.LOAD: return src[0].dtype.base if src[0].dtype.is_ptr() else src[0].dtype
  if op is Ops.GEP: return _gep_dtype(src[0].dtype, arg)
  if op is Ops.GETTUPLE: return _tuple_element_dtype(src[0], arg)
  return src[0].dtype


def _gep_dtype(vec: DType, arg: Any) -> DType | None:
  if isinstance(arg, int) and not isinstance(arg, bool): return vec.scalar
  if isinstance(arg, tuple) and arg: return vec.scalar.vec(len(arg))
  return None


def _tuple_element_dtype(of: UOp, idx: Any) -> DType | None:
  tup = of.src[0] if of.op in (Ops.FUNCTION, Ops.CALL) and of.src else of
  if tup.op is Ops.TUPLE and isinstance(idx, int) and 0 <= idx < len(tup.src): return tup.src[idx].dtype
  return None
