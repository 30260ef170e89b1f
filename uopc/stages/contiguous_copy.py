"""Which copy kernels move one contiguous range: those a launcher may run as a memory copy instead.

A copy kernel (Rangeify's kernel for a LOAD to another device) writes its whole output buffer in
row-major order, at the flat index `i` of its output loops. When it loads element `i + c` of one source
buffer for every `i`, it moves the source's elements [c, c + count) as they are: `contiguous_copy`
returns that as a `ContiguousCopy` of kernel slots.

The source index is integer arithmetic on the loop variables (the movement ops a copy reads through:
a RESHAPE gives `//` and `%`, a SHRINK an added constant), which the simplifier does not always fold
back to `i + c`. It is checked by evaluation, which proves it: with non-negative constants and positive
divisors, an expression of ADD, MUL by a constant, IDIV and MOD by constants of one loop variable `i`
is quasi-affine, with a period P (the product of the divisors) such that e(i + P) = e(i) + k for
every i, so e(i) - i is the constant c for all i once it is c for i in [0, P]. Several loops are checked
at every point when there are at most EXHAUSTIVE of them. Anything else (a permuted or strided view, a
gate, a computation, a symbolic size) gives None and the kernel stays a kernel: None is never wrong.
"""
from __future__ import annotations

from math import lcm, prod

import numpy as np

from uopc.ops import Ops
from uopc.stages.kernel_program import ContiguousCopy
from uopc.uop import UOp

EXHAUSTIVE = 1 << 16  # points checked one by one
_ARITH = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.IDIV: np.floor_divide, Ops.MOD: np.mod}


def _period(e: UOp) -> int | None:
  """P with e(i + P) = e(i) + k (see the module docstring), None outside the quasi-affine forms."""
  if e.op in (Ops.CONST, Ops.RANGE): return 1 if e.op is Ops.RANGE or isinstance(e.arg, int) and e.arg >= 0 else None
  if e.op not in _ARITH or len(e.src) != 2: return None
  a, b = e.src
  if e.op in (Ops.IDIV, Ops.MOD):
    if b.op is not Ops.CONST or not isinstance(b.arg, int) or b.arg <= 0 or (p := _period(a)) is None: return None
    return p * b.arg
  if e.op is Ops.MUL and a.op is not Ops.CONST and b.op is not Ops.CONST: return None
  pa, pb = _period(a), _period(b)
  return None if pa is None or pb is None else lcm(pa, pb)


def _evaluate(e: UOp, points: dict[UOp, np.ndarray], memo: dict[UOp, np.ndarray]) -> np.ndarray:
  if e not in memo:
    if e.op is Ops.CONST: memo[e] = np.int64(e.arg)
    elif e.op is Ops.RANGE: memo[e] = points[e]
    else: memo[e] = _ARITH[e.op](_evaluate(e.src[0], points, memo), _evaluate(e.src[1], points, memo))
  return memo[e]


def _offset(src_index: UOp, dst_index: UOp, ranges: list[UOp], bounds: list[int]) -> int | None:
  """c when `src_index` is `dst_index + c` at every point of the loops, else None."""
  if any(_period(e) is None for e in (src_index, dst_index)): return None
  if len(ranges) == 1:
    n = min(bounds[0], _period(src_index) * _period(dst_index) + 1)
  elif prod(bounds) <= EXHAUSTIVE: n = None
  else: return None
  if n is not None: points = {ranges[0]: np.arange(n, dtype=np.int64)}
  else:
    grid = np.meshgrid(*[np.arange(b, dtype=np.int64) for b in bounds], indexing="ij")
    points = {r: g.reshape(-1) for r, g in zip(ranges, grid)}
  memo: dict[UOp, np.ndarray] = {}
  diff = np.atleast_1d(_evaluate(src_index, points, memo) - _evaluate(dst_index, points, memo))
  return int(diff[0]) if diff.size and (diff == diff[0]).all() else None


def _pointer_index(u: UOp) -> tuple[int, UOp] | None:
  """(slot, index) of an ungated INDEX into a pointer PARAM."""
  if u.op is not Ops.INDEX or len(u.src) != 2 or u.src[0].op is not Ops.PARAM: return None
  return u.src[0].arg[0], u.src[1]


def contiguous_copy(sink: UOp) -> ContiguousCopy | None:
  """The range a copy kernel `sink` (a Rangeify kernel: SINK of a STORE inside its output loops) moves."""
  if sink.op is not Ops.SINK or len(sink.src) != 1: return None
  body, ranges = sink.src[0], []
  while body.op is Ops.END and len(body.src) == 2:
    ranges.append(body.src[1])
    body = body.src[0]
  if body.op is not Ops.STORE or len(body.src) != 2 or body.src[1].op is not Ops.LOAD or len(body.src[1].src) != 1: return None
  dst, src = _pointer_index(body.src[0]), _pointer_index(body.src[1].src[0])
  if dst is None or src is None or dst[0] == src[0]: return None
  bounds = [r.src[0].arg if r.op is Ops.RANGE and r.src[0].op is Ops.CONST else None for r in ranges]
  if any(not isinstance(b, int) or b <= 0 for b in bounds): return None
  used = {u for e in (dst[1], src[1]) for u in e.toposort() if u.op is Ops.RANGE}
  if not used <= set(ranges): return None
  # the output is written whole from 0 in row-major order: its index at the loops' first point is 0
  if _offset(dst[1], UOp.const(dst[1].dtype, 0), ranges, [1] * len(ranges)) != 0: return None
  offset = _offset(src[1], dst[1], ranges, bounds)
  if offset is None or offset < 0: return None
  return ContiguousCopy(dst[0], src[0], offset, prod(bounds))
