"""Reductions in closed form: a reduction over one loop whose body is simple in the loop's index
becomes an expression of the outer indices, with no loop (seed 000's `arange`, as tinygrad writes
it: a sum over a window of ones cut from a padded, tiled row, is the count of the window's ones).

Rangeify asks `collapse(op, value, r)` for each REDUCE it lowers with one loop `r`, `value` being
the body (simplified) at r. It answers, or None where no rule applies:

- a body that does not depend on r: MAX gives the body, ADD gives body * size;
- ADD of WHERE(c, v, z) with v and z independent of r and c a conjunction of comparisons linear in
  r (coefficient +-1, as PAD's validity and tinygrad's windows are): v * n + z * (size - n), n the
  number of r in [0, size) that satisfy c, itself an index expression (clamped at 0 and size).

Every answer equals the loop's result exactly: integer sums wrap the same way as the multiplication,
and float sums are collapsed only when every partial sum is an exactly representable integer (a
constant integer body, size * |body| below 2^mantissa), so the order of additions cannot matter.
"""
from __future__ import annotations

from uopc.dtype import DType, dtypes
from uopc.ops import Ops
from uopc.symbolic import simplify
from uopc.uop import UOp

_MANTISSA = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}


def _i(v: int) -> UOp: return UOp.const(dtypes.index, v)


def _depends_on(u: UOp, r: UOp) -> bool: return r in u.toposort()


def _exact_times(v: UOp, n: UOp, size: int, dt: DType) -> UOp | None:
  """v added n times (0 <= n <= size) as one expression, when that is exact."""
  if dt.is_int(): return v.alu(Ops.MUL, UOp(Ops.CAST, dt, (n,)))
  if dt.is_bool() or v.op is not Ops.CONST or v.arg != int(v.arg) or dt not in _MANTISSA: return None
  if abs(v.arg) * size >= 2 ** _MANTISSA[dt]: return None
  return UOp.const(dt, v.arg).alu(Ops.MUL, UOp(Ops.CAST, dt, (n,)))


def _linear(e: UOp, r: UOp) -> tuple[int, UOp] | None:
  """e = k*r + rest with rest free of r and k an integer: (k, rest); None when e is not of that form."""
  if e is r: return 1, _i(0)
  if not _depends_on(e, r): return 0, e
  if e.op is Ops.ADD:
    a, b = _linear(e.src[0], r), _linear(e.src[1], r)
    if a is None or b is None: return None
    return a[0] + b[0], a[1].alu(Ops.ADD, b[1])
  if e.op is Ops.MUL and e.src[1].op is Ops.CONST and not _depends_on(e.src[1], r):
    a = _linear(e.src[0], r)
    return None if a is None else (a[0] * e.src[1].arg, a[1].alu(Ops.MUL, e.src[1]))
  return None


def _bounds(cond: UOp, r: UOp) -> tuple[list[UOp], list[UOp], list[UOp]] | None:
  """cond as (lo_i <= r for all i) and (r < hi_j for all j) and (g_k for all k), the g_k free of r:
  the lists of lower bounds, upper bounds and guards; None when cond is not of that form."""
  if not _depends_on(cond, r): return [], [], [cond]
  if cond.op is Ops.AND and cond.dtype is dtypes.bool:
    a, b = _bounds(cond.src[0], r), _bounds(cond.src[1], r)
    return None if a is None or b is None else (a[0] + b[0], a[1] + b[1], a[2] + b[2])
  if cond.op is not Ops.CMPLT or cond.src[0].dtype is not dtypes.index: return None
  lhs, rhs = _linear(cond.src[0], r), _linear(cond.src[1], r)
  if lhs is None or rhs is None: return None
  k, rest = rhs[0] - lhs[0], rhs[1].alu(Ops.ADD, lhs[1].alu(Ops.MUL, _i(-1)))  # 0 < k*r + rest
  if k == 1: return [_i(1).alu(Ops.ADD, rest.alu(Ops.MUL, _i(-1)))], [], []  # r >= 1 - rest
  if k == -1: return [], [rest], []                                           # r < rest
  return None


def _count(lows: list[UOp], highs: list[UOp], guards: list[UOp], size: int) -> UOp:
  """The number of r in [0, size) with max(lows) <= r < min(highs) where every guard holds, as an
  index expression."""
  lo, hi = _i(0), _i(size)
  for b in lows: lo = lo.alu(Ops.MAX, b)
  for b in highs: hi = _min(hi, b)
  n = hi.alu(Ops.ADD, lo.alu(Ops.MUL, _i(-1))).alu(Ops.MAX, _i(0))
  for g in guards: n = g.alu(Ops.WHERE, n, _i(0))
  return simplify(n)


def _min(a: UOp, b: UOp) -> UOp: return a.alu(Ops.MUL, _i(-1)).alu(Ops.MAX, b.alu(Ops.MUL, _i(-1))).alu(Ops.MUL, _i(-1))


def collapse(op: Ops, value: UOp, r: UOp) -> UOp | None:
  """The reduction by `op` of `value` over r = 0 .. size-1 (r's RANGE has a constant size >= 1) in
  closed form, or None."""
  size = r.src[0].arg if r.src[0].op is Ops.CONST else None
  if not isinstance(size, int) or size < 1: return None
  dt = value.dtype
  if not _depends_on(value, r):
    if op is Ops.MAX: return value
    return _exact_times(value, _i(size), size, dt) if op is Ops.ADD else None
  if op is not Ops.ADD or value.op is not Ops.WHERE: return None
  cond, v, z = value.src
  if _depends_on(v, r) or _depends_on(z, r) or (b := _bounds(cond, r)) is None: return None
  n = _count(*b, size)
  taken = _exact_times(v, n, size, dt)
  if taken is None: return None
  if z.op is Ops.CONST and z.arg == 0: return taken
  if not dt.is_int(): return None  # v and z mixed: the float partial sums' bound is not checked
  return taken.alu(Ops.ADD, _exact_times(z, _i(size).alu(Ops.ADD, n.alu(Ops.MUL, _i(-1))), size, dt))
