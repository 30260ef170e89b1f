"""Select ladders: a chain of WHEREs that picks one of n values by an index's value, folded into one value.

tinygrad concatenates with STACK, so `Tensor.cat` of n slices of one tensor becomes, in a kernel,
`WHERE(p < 1, v0, WHERE(p < 2, v1, ... v(n-1)))` with `p = j // width`: every output element loads all n
slices and keeps one (16 slices of 32 columns: 16 loads and 15 selects per element, 2.5x slower than
tinygrad on the CPU). Where the ladder's values are one template whose leaves vary linearly with the
rung k, the ladder is that template at k = p - p0:
- index and integer values with linear forms `v0 + d*k` (atoms equal, coefficients linear in k);
- float constants `c0 + d*k`, where computing `c0 + d*k` in their dtype gives each constant exactly;
- LOADs of one buffer, none gated, whose addresses are such a ladder: one LOAD at the folded address
  (every rung's address was read unconditionally, so the folded one is one of them and in bounds);
- the same op (same dtype and arg) at every rung, each operand folded the same way;
- one value at every rung: itself.

The ladder must cover p's whole range: thresholds t0, t0 + 1, ..., t0 + n - 2 on one index p, with
p's min_max within [t0 - 1, t0 + n - 2], so that rung k is taken exactly when p = t0 - 1 + k. Anything
else is left as it was (no gather is made: a ladder that does not fold keeps its loads).
"""
from __future__ import annotations

import math

import numpy as np

from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.rewrite import Pat, Rules
from uopc.uop import UOp

MAX_RUNGS = 64  # ladders longer than this are left alone (the walk is linear in the rungs at every WHERE)


def _rungs(u: UOp) -> tuple[UOp, int, list[UOp]] | None:
  """(p, t0, [v0, ..., v(n-1)]) of the ladder rooted at u, or None."""
  p, t0, values, x = None, None, [], u
  while x.op is Ops.WHERE and x.src[0].op is Ops.CMPLT and x.src[0].src[1].op is Ops.CONST and len(values) < MAX_RUNGS:
    q, t = x.src[0].src[0], x.src[0].src[1].arg
    if p is None: p, t0 = q, t
    if q is not p or t != t0 + len(values) or not p.dtype.is_int(): break
    values.append(x.src[1])
    x = x.src[2]
  if p is None or len(values) < 2: return None
  values.append(x)
  lo, hi = p.min_max
  if not (isinstance(lo, int) and isinstance(hi, int) and t0 - 1 <= lo and hi <= t0 + len(values) - 2): return None
  return p, t0, values


def _linear_ints(values: list[UOp], k: UOp) -> UOp | None:
  from uopc.symbolic import linear_form
  forms = [linear_form(v) for v in values]
  atoms = set().union(*forms)
  out = []
  for a in atoms:
    cs = [f.get(a, 0) for f in forms]
    d = cs[1] - cs[0]
    if any(c != cs[0] + d * i for i, c in enumerate(cs)): return None
    out.append((a, cs[0], d))
  dt = values[0].dtype
  kk = k if k.dtype == dt else UOp(Ops.CAST, dt, (k,))
  acc = None
  for a, c0, d in sorted(out, key=lambda t: (t[0] is None, str(t[0]))):
    base = UOp.const(dt, c0) if a is None else (a if c0 == 1 else a.alu(Ops.MUL, UOp.const(dt, c0)) if c0 else None)
    step = None if d == 0 else (kk if d == 1 else kk.alu(Ops.MUL, UOp.const(dt, d)))
    if a is not None and d: step = step.alu(Ops.MUL, a)
    for term in (base, step):
      if term is not None: acc = term if acc is None else acc.alu(Ops.ADD, term)
  return acc if acc is not None else UOp.const(dt, 0)


def _linear_floats(values: list[UOp], k: UOp) -> UOp | None:
  dt = values[0].dtype
  cs = [float(v.arg) for v in values]
  np_dt = {dtypes.float32: np.float32, dtypes.float64: np.float64}.get(dt)
  d = cs[1] - cs[0]
  if np_dt is None or not all(math.isfinite(c) for c in cs): return None
  if any(np_dt(np_dt(cs[0]) + np_dt(d) * np_dt(i)) != np_dt(c) for i, c in enumerate(cs)): return None
  return UOp.const(dt, cs[0]).alu(Ops.ADD, UOp(Ops.CAST, dt, (k,)).alu(Ops.MUL, UOp.const(dt, d)))


def _fold(values: list[UOp], k: UOp) -> UOp | None:
  """The value that is values[k] for every rung k, built from k; None where none is found."""
  v0 = values[0]
  if all(v is v0 for v in values): return v0
  if any(v.dtype != v0.dtype for v in values) or v0.dtype.count != 1: return None
  if v0.dtype.is_int() and all(v.op in (Ops.CONST, Ops.ADD, Ops.MUL) or v.op is v0.op for v in values):
    if (out := _linear_ints(values, k)) is not None: return out
  if v0.dtype.is_float() and all(v.op is Ops.CONST for v in values): return _linear_floats(values, k)
  if v0.op is Ops.LOAD:
    if any(v.op is not Ops.LOAD or len(v.src) != 1 or v.src[0].op is not Ops.INDEX or v.src[0].src[0] is not v0.src[0].src[0]
           for v in values): return None
    address = _fold([v.src[0].src[1] for v in values], k)
    return None if address is None else v0.replace(src=(v0.src[0].replace(src=(v0.src[0].src[0], address)),))
  values = _identities(values)
  v0 = values[0]
  if v0.op in (Ops.INDEX, Ops.STORE, Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR, Ops.PARAM, Ops.BUFFER, Ops.CONST): return None
  if any(v.op is not v0.op or v.arg != v0.arg or len(v.src) != len(v0.src) for v in values): return None
  srcs = [_fold([v.src[i] for v in values], k) for i in range(len(v0.src))]
  return None if any(s is None for s in srcs) else v0.replace(src=tuple(srcs))


def _identities(values: list[UOp]) -> list[UOp]:
  """Rungs that are x where the others are x * c (or x + c): x * 1 (x + 0), as symbolic simplified the rung whose
  factor is 1 (the last slice of a cat whose slices are scaled by 16, 15, ..., 1)."""
  ops = [v.op for v in values if v.op in (Ops.MUL, Ops.ADD) and v.src[1].op is Ops.CONST]
  if not ops or any(o is not ops[0] for o in ops): return values
  one = 1 if ops[0] is Ops.MUL else 0
  return [v if v.op is ops[0] else v.alu(ops[0], UOp.const(v.dtype, one)) for v in values]


def _ladder(u: UOp) -> UOp | None:
  if (found := _rungs(u)) is None: return None
  p, t0, values = found
  k = p if t0 == 1 else p.alu(Ops.ADD, UOp.const(p.dtype, 1 - t0))
  return _fold(values, k)


ladder_rules = Rules([(Pat(Ops.WHERE, name="u"), _ladder)])
