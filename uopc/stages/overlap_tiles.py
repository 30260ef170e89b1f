"""Overlapping tiles: PADTO's third argument (Optimize, uopc.stages.optimize).

`PADTO(axis, m, t)` runs an axis of size n to a multiple of m in tiles of t (t divides the padded size), and
moves a tile that would run past the end back to end at it: iteration w reads index w - max(0, (w // t) * t
+ t - n). Nothing is masked, so loads stay ungated (vectorisable, and stageable: once the SPLITs have made w =
g * t + lanes the shift depends on the block g only). The moved tile repeats iterations of the one before it,
which store the same values again.

Invariants: every index is in [0, n) and every one of them is some iteration's (the tiles cover the axis);
the opt is legal only where repeating an iteration changes nothing: a GLOBAL axis (independent iterations,
whose REG and LOCAL buffers are their own) of a kernel that reads no global buffer it stores to and adds
nothing atomically; elsewhere it is refused with the reason.
"""
from __future__ import annotations

import math
from typing import Any

from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.optimize import OptError, Trace, _is_global, _memory_ops, axis_size, axis_type, note, root_buffer
from uopc.symbolic import simplify
from uopc.uop import UOp


def overlapped(sink: UOp, r: UOp, size: int, tile: Any, wide: UOp) -> UOp:
  """The index that replaces axis r (of `size`) when it becomes `wide`, padded in tiles of `tile` (module
  docstring); an OptError where the kernel or the tile does not allow it."""
  padded = axis_size(wide)
  if not isinstance(tile, int) or not 1 <= tile <= size or padded % tile:
    raise OptError(f"the overlap tile must be at most the axis's size {size} and divide its padded size {padded}, got {tile}")
  if axis_type(r) is not AxisType.GLOBAL: raise OptError(f"only a GLOBAL axis's tiles overlap, not {axis_type(r).name}")
  mem = _memory_ops(sink)
  stored = {b for u in mem if u.op is Ops.STORE and _is_global(b := root_buffer(u.src[0]))}
  if any(u.op is Ops.ATOMICADD for u in sink.toposort()) or any(u.op is Ops.LOAD and root_buffer(u.src[0]) in stored for u in mem):
    raise OptError("overlapping tiles repeat iterations: the kernel must not read a global buffer it stores to, nor add atomically")
  idx = lambda v: UOp.const(dtypes.index, v)  # noqa: E731
  g = math.gcd(tile, size - tile)  # the shift in units of g: a staged tile's copies see its alignment
  start = wide.alu(Ops.IDIV, idx(tile)).alu(Ops.MUL, idx(tile // g))
  shift = start.alu(Ops.ADD, idx((tile - size) // g)).alu(Ops.MAX, idx(0))
  return simplify(wide.alu(Ops.ADD, shift.alu(Ops.MUL, idx(-g))))


def simplified_addresses(sink: UOp, trace: Trace | None) -> UOp:
  """Every INDEX's address, load or store gate and WHERE condition simplified: an overlapping PADTO's shift
  max(0, (w // t) * t + t - n) becomes one of the block's ranges only once the SPLITs have made w = g * t +
  lanes ((g * t + lanes) // t -> g), and a SPLIT does not simplify the expressions around the range it
  replaces (a padded pooling window's gates would divide every lane's index by t)."""
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo[x] for x in u.src)
    if u.op is Ops.INDEX and len(src) > 1: src = (src[0], simplify(src[1])) + src[2:]
    if u.op in (Ops.LOAD, Ops.STORE) and len(src) == 3: src = src[:2] + (simplify(src[2]),)
    if u.op is Ops.WHERE and src[0].dtype == dtypes.bool: src = (simplify(src[0]),) + src[1:]
    memo[u] = u if src == u.src else u.replace(src=src)
    note(trace, u, memo[u])
  return memo[sink]
