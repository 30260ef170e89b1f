"""Reductions in closed form: a reduction over one loop whose body is simple in the loop's index
becomes an expression of the outer indices, with no loop (seed 000's `arange`, as tinygrad writes
it: a sum over a window of ones cut from a padded, tiled row, is the count of the window's ones).

Rangeify asks `collapse(op, value, r)` for each REDUCE it lowers with one loop `r`, `value` being
the body (simplified) at r. It answers, or None where no rule applies:

- a body that does not depend on r: MAX gives the body, ADD gives body * size;
- ADD of WHERE(c, v, z) with v and z independent of r and c a conjunction of comparisons linear in
  r (coefficient +-1, as PAD's validity and tinygrad's windows are): v * n + z * (size - n), n the
  number of r in [0, size) that satisfy c, itself an index expression (clamped at 0 and size).

- ADD of WHERE(f(r) == e, x(r), 0) (a one-hot mask: tinygrad's embedding and `one_hot`), f linear in
  r with coefficient +-1 (through CASTs of the index, as arange is) and e free of r: the gather
  x(r*) of the one r* that matches, with every load of x that depends on r gated by 0 <= r* < size (0
  where none), and every integer division in x that depends on r dividing by 1 where that gate is false
  (not by the loads' fill 0); the rest of x, independent of r, unchanged.

Every answer equals the loop's result exactly: integer sums wrap the same way as the multiplication,
and float sums are collapsed only when every partial sum is an exactly representable integer (a
constant integer body, size * |body| below 2^mantissa), so the order of additions cannot matter.
"""
from __future__ import annotations

from uopc.dtype import DType, dtype_range, dtypes
from uopc.ops import Ops
from uopc.symbolic import INT_DIVISIONS, divide_where, simplify
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


def _int_linear(e: UOp, r: UOp) -> tuple[int, UOp] | None:
  """Like `_linear` for an integer expression in which r appears through CASTs of index values: e =
  k*CAST(r) + rest, with rest an index expression of the other values (those CAST to index)."""
  if e.dtype is dtypes.index: return _linear(e, r)
  if not _depends_on(e, r): return 0, UOp(Ops.CAST, dtypes.index, (e,))
  if e.op is Ops.CAST and e.src[0].dtype in (dtypes.index, dtypes.int32, dtypes.int64): return _int_linear(e.src[0], r)
  if e.op in (Ops.ADD, Ops.SUB):
    a, b = _int_linear(e.src[0], r), _int_linear(e.src[1], r)
    if a is None or b is None: return None
    if e.op is Ops.ADD: return a[0] + b[0], a[1].alu(Ops.ADD, b[1])
    return a[0] - b[0], a[1].alu(Ops.ADD, b[1].alu(Ops.MUL, _i(-1)))
  if e.op is Ops.MUL and e.src[1].op is Ops.CONST:
    a = _int_linear(e.src[0], r)
    return None if a is None else (a[0] * e.src[1].arg, a[1].alu(Ops.MUL, _i(e.src[1].arg)))
  return None


def _no_wrap_range(e: UOp) -> tuple[int, int] | None:
  """The range of an integer expression of ADD, SUB, MUL by constants and CASTs when no step of it can
  wrap (every intermediate range fits its dtype), else None; index-typed parts by their min_max."""
  if e.dtype is dtypes.index or e.op is Ops.CONST: rng = e.min_max
  elif e.op is Ops.CAST and e.src[0].dtype.is_int(): rng = _no_wrap_range(e.src[0])
  elif e.op in (Ops.ADD, Ops.SUB, Ops.MUL):
    a, b = _no_wrap_range(e.src[0]), _no_wrap_range(e.src[1])
    if a is None or b is None: return None
    if e.op is Ops.ADD: rng = (a[0] + b[0], a[1] + b[1])
    elif e.op is Ops.SUB: rng = (a[0] - b[1], a[1] - b[0])
    else: rng = (min(p := [x * y for x in a for y in b]), max(p))
  else: return None
  lo, hi = dtype_range(e.dtype)
  return rng if rng is not None and None not in rng and lo <= rng[0] and rng[1] <= hi else None


def _match(cond: UOp, r: UOp) -> UOp | None:
  """The one r* where cond, an equality f(r) == e (written CMPNE(CMPNE(a, b), True)), holds, as an
  index expression; None when cond is not such an equality or f may wrap (then it need not be
  one-to-one). The caller gates on 0 <= r* < size."""
  if not (cond.op is Ops.CMPNE and cond.src[1].op is Ops.CONST and cond.src[1].arg is True and cond.src[0].op is Ops.CMPNE): return None
  a, b = cond.src[0].src
  if a.dtype.is_float() or _depends_on(a, r) == _depends_on(b, r): return None
  side, other = (a, b) if _depends_on(a, r) else (b, a)
  lin = _int_linear(side, r)
  if lin is None or lin[0] not in (1, -1) or _no_wrap_range(side) is None: return None
  diff = UOp(Ops.CAST, dtypes.index, (other,)).alu(Ops.ADD, lin[1].alu(Ops.MUL, _i(-1)))  # k*r = other - rest
  return diff if lin[0] == 1 else diff.alu(Ops.MUL, _i(-1))


def _picked(x: UOp, r: UOp, at: UOp, gate: UOp) -> UOp:
  """x at r = `at`, with every LOAD that depends on r gated by `gate` too (reading the fill 0 where it is
  false; those in another load's address or gate included: a gather of a gather, whose inner index is a
  load, out of bounds where the outer index is), and every integer division that depends on r dividing
  by 1 where `gate` is false (uopc.symbolic.divide_where: there the gated loads read 0). What does not
  depend on r is left as it is: a reduction in x independent of r (a softmax's sums, gathered) stays
  independent of the gather's index, so it is not drawn into the loop that computes that index (its
  accumulator's initial store, tied to no loop, would then be outside it: summed once per iteration)."""
  def gated(ld: UOp) -> UOp:
    if len(ld.src) == 3: return ld.replace(src=(ld.src[0], ld.src[1], ld.src[2].alu(Ops.AND, gate)))
    return ld.replace(src=(ld.src[0], UOp.const(ld.dtype, 0), gate))
  done: dict[UOp, UOp] = {}
  for u in x.toposort():
    if u is r: done[u] = at; continue  # noqa: E702
    new = u.replace(src=tuple(done[s] for s in u.src)) if u.src else u
    if new is not u and u.op is Ops.LOAD: new = gated(new)  # changed: it depends on r
    elif new is not u and u.op in INT_DIVISIONS: new = divide_where(new, gate)
    done[u] = new
  return done[x]


def _gather(value: UOp, r: UOp, size: int) -> UOp | None:
  """ADD over r of WHERE(f(r) == e, x(r), 0): x(r*) where 0 <= r* < size, else 0 (see the docstring)."""
  cond, x, z = value.src
  if not (z.op is Ops.CONST and z.arg == 0) or (at := _match(cond, r)) is None: return None
  at = simplify(at)
  inside = _i(-1).alu(Ops.CMPLT, at).alu(Ops.AND, at.alu(Ops.CMPLT, _i(size)))
  picked = _picked(x, r, at, inside)
  if x.dtype.is_float(): picked = picked.alu(Ops.ADD, UOp.const(x.dtype, 0.0))  # as the loop: 0.0 + -0.0 is 0.0
  return inside.alu(Ops.WHERE, picked, UOp.const(x.dtype, 0))


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
  if _depends_on(v, r) or _depends_on(z, r): return _gather(value, r, size)
  if (b := _bounds(cond, r)) is None: return None
  n = _count(*b, size)
  taken = _exact_times(v, n, size, dt)
  if taken is None: return None
  if z.op is Ops.CONST and z.arg == 0: return taken
  if not dt.is_int(): return None  # v and z mixed: the float partial sums' bound is not checked
  return taken.alu(Ops.ADD, _exact_times(z, _i(size).alu(Ops.ADD, n.alu(Ops.MUL, _i(-1))), size, dt))
