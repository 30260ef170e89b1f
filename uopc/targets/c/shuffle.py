"""Shuffles in the C renderer: a STACK whose lanes are all lanes of one or two vectors of its own C type
(Expand's windowed loads of strided taps, see uopc.stages.expand.window_loads) is one UOPC_SHUFFLE
(the prelude's macro: __builtin_shuffle for GCC, __builtin_shufflevector for clang), one permute
instruction where the target has it (vpermt2ps), where GCC would make a vector built lane by lane
from loaded vectors into scalar loads again. The scalar GEPs only such STACKs use are not variables
of their own (the renderer names them inline), so the source stays free of unused variables.

Invariant: the shuffle's value is the STACK's, lane for lane (mask lanes past the STACK's count pick
lane 0 of the first vector; the C type's padding lanes are never read).
"""
from __future__ import annotations

from typing import Mapping

from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.targets.c.prelude import VECTOR_LANES, vector_type_name
from uopc.uop import UOp

_MASK_INTS = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}  # masks: integers as wide as the lanes


def _lanes(count: int) -> int: return next(n for n in VECTOR_LANES if n >= count)


def shuffle_sources(u: UOp, masks) -> list[UOp] | None:
  """The one or two vectors a STACK takes all its lanes from, when they have its C type (and are no
  comparison masks, whose C type differs); else None."""
  if u.op is not Ops.STACK or u.dtype.count < 2 or u.dtype.scalar is dtypes.bool or u.dtype.count > VECTOR_LANES[-1]: return None
  if not all(s.op is Ops.GEP and s.dtype.count == 1 for s in u.src): return None
  sources = list(dict.fromkeys(s.src[0] for s in u.src))
  width = _lanes(u.dtype.count)
  if len(sources) > 2 or any(v.dtype.count < 2 or v.dtype.count > VECTOR_LANES[-1] or _lanes(v.dtype.count) != width or v in masks
                             for v in sources): return None
  return sources


def shuffle(u: UOp, names: Mapping[UOp, str], width: int) -> str:
  """The UOPC_SHUFFLE expression of a STACK that shuffle_sources accepts (`width`: its C lane count)."""
  sources = list(dict.fromkeys(s.src[0] for s in u.src))
  a, b = sources[0], sources[-1]
  lanes = [(0 if s.src[0] is a else width) + (s.arg[0] if isinstance(s.arg, tuple) else s.arg) for s in u.src]
  mask = vector_type_name(_MASK_INTS[u.dtype.scalar.itemsize], width)
  return f"UOPC_SHUFFLE({mask}, {names[a]}, {names[b]}, {', '.join(map(str, lanes + [0] * (width - len(lanes))))})"
