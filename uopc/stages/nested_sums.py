"""Sums of sums: a REDUCE whose source is another REDUCE of the same op, lowered as one reduction.

tinygrad's backward pass of a convolution sums, for each input element, a window of taps each of which
is itself a sum over output channels: REDUCE(ADD, taps) of a PAD/RESHAPE view of REDUCE(ADD, channels).
Lowered as written, each tap runs its own channel loop with its own accumulator, and the tap's gate
selects its sum afterwards. Rangeify asks `nested_reduce(program, u)` for each REDUCE it lowers with loops:
the inner REDUCE it may lower as more loops of u's reduction instead (one accumulator; the inner loops
inside the outer ones, as the program nests them), where
- u's source is the inner REDUCE through movement ops that read each element once (RESHAPE, PERMUTE,
  SHRINK, PAD, FLIP; no EXPAND) and markers, none of them realized;
- both reduce with the same op and dtype, and the inner one is not realized, not fused elsewhere, and
  runs no other reduction of its own (merged, a row's statistics inside it would move with the loops:
  a mean of row sums over a log-softmax recomputed each row's logarithms per column);
- on a GPU, the inner reduction is short (under NESTED_MIN elements): a long one is realized so that its
  rows run side by side on the grid (a mean of 64 row sums of 1000 would be one workgroup's 64000).

Exact for MAX, MUL of integers and integer sums; a float sum's additions in another order, as the
accuracy bar allows. A PAD between gates each term, and its fill (0) is what the unmerged form selects too.
"""
from __future__ import annotations

from math import prod

from uopc.ops import GroupOp, Ops
from uopc.stages.buffer_versions import data_srcs
from uopc.stages.fusion_checks import NESTED_MIN
from uopc.uop import UOp, is_data_view

ONE_TO_ONE = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.PAD, Ops.FLIP}) | GroupOp.Markers


def _constant(u: UOp) -> bool: return u.op is Ops.BINARY or is_data_view(u)


def nested_reduce(program, u: UOp) -> UOp | None:
  """The REDUCE that `u` (a REDUCE) may lower as more loops of its own (module docstring), else None.
  `program`: Rangeify's (its `buffer_of`, `fusing` and `realize_nested`)."""
  v = u.src[0]
  while v.op in ONE_TO_ONE and v not in program.buffer_of and not _constant(v): v = v.src[0]
  if v.op is not Ops.REDUCE or v.arg[0] is not u.arg[0] or v.dtype != u.dtype or v in program.buffer_of: return None
  if v in program.fusing or _constant(v) or _reduces_inside(program, v.src[0]): return None
  if program.realize_nested and prod(v.src[0].shape[a] for a in v.arg[1]) >= NESTED_MIN: return None
  return v


def _reduces_inside(program, u: UOp) -> bool:
  """Does computing u run a reduction that is not realized?"""
  stack, seen = [u], set()
  while stack:
    n = stack.pop()
    if n in seen or n in program.buffer_of or _constant(n): continue
    seen.add(n)
    if n.op is Ops.REDUCE: return True
    stack.extend(data_srcs(n))
  return False
