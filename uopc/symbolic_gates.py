"""Index arithmetic under a gate: a division that the gate makes exact.

tinygrad writes the backward pass of a pooling window (and so of every convolution's input gradient)
as a PAD, RESHAPE and SHRINK that fold a window back onto its input: an index `X = 30*i + h + 1` read as
`X // 31` (the window tap) and `X % 31` (the position), under a gate `X % 31 < 28`. Over the ranges alone
neither folds: `X = 31*i + y` with `y = h + 1 - i` in [-2, 28], and where y < 0 the remainder is y + 31.
But the gate is false wherever y < 0, so under it `X % 31` is y and `X // 31` is i: the load reads
`w[i]` (one address for a vector of positions, not a gather) and the remainder and quotient vanish.

The rule, for an index-typed (mathematical integer) `X >= 0` and a constant `d > 0`:
- split X's linear form as `d*q + y`, each coefficient k as `d*m + r` with r in (-d/2, d/2];
- where y's range is within [-d, d) and reaches below 0 by at most `MAX_CASES` values, try each
  value y = v < 0: with `X % d` replaced by v + d and `X // d` by q - 1, the gate must fold to false;
- then `gate == (y >= 0) & gate[X % d -> y, X // d -> q]` (both false where y < 0, equal elsewhere), and
  under the gate every `X % d` is y and every `X // d` is q: a gated LOAD's address and a WHERE's
  selected value are rewritten so. Nothing is assumed that the gate does not prove; an index that
  is not split this way, or a gate that does not exclude a case, is left as it was.
"""
from __future__ import annotations

from functools import lru_cache

from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.rewrite import Pat, Rules, substitute
from uopc.uop import UOp

MAX_CASES = 16  # negative values of y tried one by one (a window's taps: small)


def _split(x: UOp, d: int) -> tuple[UOp, UOp] | None:
  """x = d*q + y with the summands' coefficients reduced to (-d/2, d/2] in y; None if q has no term."""
  from uopc.symbolic import linear_form, _scaled, _sum
  q_terms, y_terms = [], []
  for atom, k in linear_form(x).items():
    m, r = divmod(k, d)
    if 2 * r > d: m, r = m + 1, r - d
    if m: q_terms.append(_scaled(atom, m, x.dtype))
    if r: y_terms.append(_scaled(atom, r, x.dtype))
  if all(t.op is Ops.CONST for t in q_terms): return None  # no atom moves to the quotient
  zero = UOp.const(x.dtype, 0)
  return _sum(q_terms), (_sum(y_terms) if y_terms else zero)


def clauses(gate: UOp) -> list[UOp]:
  """The conjuncts of a bool AND tree."""
  out, stack = [], [gate]
  while stack:
    g = stack.pop()
    if g.op is Ops.AND and g.dtype is dtypes.bool: stack.extend(g.src)
    else: out.append(g)
  return out


def _bound(clause: UOp) -> tuple[tuple, int, int] | None:
  """An index comparison `a < b` as bounds on one linear expression: (key, lo, hi) meaning lo <= e <= hi,
  e the sum of the key's (atom, coefficient) pairs, signs normalized so that the first is positive."""
  from uopc.symbolic import linear_form
  if clause.op is not Ops.CMPLT or clause.src[0].dtype is not dtypes.index: return None
  form = dict(linear_form(clause.src[0]))
  for a, k in linear_form(clause.src[1]).items(): form[a] = form.get(a, 0) - k
  c = form.pop(None, 0)
  terms = sorted(((a, k) for a, k in form.items() if k), key=lambda t: id(t[0]))
  if not terms: return None
  big = 1 << 62  # sum(terms) + c < 0: sum(terms) <= -c - 1
  if terms[0][1] < 0: return tuple((a, -k) for a, k in terms), c + 1, big
  return tuple(terms), -big, -c - 1


def gate_false(gate: UOp) -> bool:
  """`gate` folds to false, or two of its clauses bound one linear expression to an empty interval
  (h + 91 < 93 and -1 < h - 2: h <= 1 and h >= 2)."""
  from uopc.symbolic import known_value
  if known_value(gate) is False: return True
  bounds: dict[tuple, tuple[int, int]] = {}
  for cl in clauses(gate):
    if (b := _bound(cl)) is None: continue
    key, lo, hi = b
    old = bounds.get(key, (lo, hi))
    lo, hi = max(lo, old[0]), min(hi, old[1])
    if lo > hi: return True
    bounds[key] = (lo, hi)
  return False


def _excludes(gate: UOp, mod: UOp, div: UOp, q: UOp, lo: int, d: int) -> bool:
  """The gate is false for every y in [lo, 0): X % d = y + d, X // d = q - 1 there."""
  from uopc.symbolic import simplify
  below = q.alu(Ops.ADD, UOp.const(q.dtype, -1))
  return all(gate_false(simplify(substitute(gate, {mod: UOp.const(mod.dtype, v + d), div: below}))) for v in range(lo, 0))


@lru_cache(maxsize=4096)
def gate_facts(gate: UOp) -> tuple[tuple[UOp, UOp], ...]:
  """(node, value) pairs that hold wherever `gate` is true: X % d -> y and X // d -> q (module doc)."""
  out: list[tuple[UOp, UOp]] = []
  seen: set[tuple[UOp, int]] = set()
  for u in gate.toposort():
    if u.op not in (Ops.MOD, Ops.IDIV) or u.dtype is not dtypes.index or u.src[1].op is not Ops.CONST: continue
    x, d = u.src[0], u.src[1].arg
    if d <= 1 or (x, d) in seen or x.vmin < 0: continue
    seen.add((x, d))
    if (parts := _split(x, d)) is None: continue
    q, y = parts
    lo, hi = y.min_max
    if not (-d <= lo < 0 and hi < d and -lo <= MAX_CASES): continue
    c = UOp.const(dtypes.index, d)
    mod, div = x.alu(Ops.MOD, c), x.alu(Ops.IDIV, c)
    if _excludes(gate, mod, div, q, lo, d): out += [(mod, y), (div, q)]
  return tuple(out)


def _rewritten_gate(gate: UOp, facts: tuple[tuple[UOp, UOp], ...]) -> UOp:
  """gate & every split's y >= 0, with the facts substituted (exact: see the module doc)."""
  new = substitute(gate, dict(facts))
  for node, value in facts:
    if node.op is Ops.MOD: new = UOp.const(dtypes.index, -1).alu(Ops.CMPLT, value).alu(Ops.AND, new)
  return new


@lru_cache(maxsize=4096)
def _divisible(gate: UOp) -> tuple[tuple[UOp, UOp], ...]:
  """(z // m) * m -> z and z % m -> 0 for each clause z % m < 1 of the gate with z >= 0 where it holds (a
  window's stride: max pooling's backward reads a position only where it is even)."""
  from uopc.symbolic import linear_form
  bounds, out = gate_bounds(gate), []
  for cl in clauses(gate):
    if cl.op is not Ops.CMPLT or cl.src[1].op is not Ops.CONST or cl.src[1].arg != 1: continue
    md = cl.src[0]
    if md.op is not Ops.MOD or md.dtype is not dtypes.index or md.src[1].op is not Ops.CONST or md.src[1].arg <= 1: continue
    z, m = md.src
    form = dict(linear_form(z))
    if _gated_range({a: k for a, k in form.items() if a is not None}, bounds)[0] + form.get(None, 0) < 0: continue
    out += [(md, UOp.const(dtypes.index, 0)), (z.alu(Ops.IDIV, m).alu(Ops.MUL, m), z)]
  return tuple(out)


def guarded(expr: UOp, gate: UOp, keep_loads: bool = False) -> UOp:
  """`expr` rewritten for where `gate` holds: the split facts, the divisibility facts, and the divisions
  whose dividend the gate's bounds fix (`simplify_given`) or keep non-negative (`_non_negative`). With
  `keep_loads`, the LOADs inside expr keep their addresses and gates: expr is computed where the gate is false
  too (a WHERE's selected value), and a load rewritten for the gate would read elsewhere there, possibly past
  its buffer (an interleaved RoPE's x[(p // 2)*2 + 1] under p % 2 < 1 is x[p + 1]: at the row's odd last p, the
  element after the tensor)."""
  sub = _outside_loads if keep_loads else substitute
  facts = dict(gate_facts(gate)) | dict(_divisible(gate))
  out = sub(expr, facts) if facts else expr
  return _non_negative(_divisions_given(out, _bounds(gate), sub), _bounds(gate), sub)


def _outside_loads(root: UOp, mapping) -> UOp:
  """`substitute` that leaves every LOAD (its address, gate and alternative) as it is."""
  done: dict[UOp, UOp] = {}
  for u in root.toposort():
    done[u] = u if u.op is Ops.LOAD else mapping.get(u) or (u.replace(src=tuple(done[s] for s in u.src)) if u.src else u)
  return done[root]


def _non_negative(expr: UOp, bounds: dict, sub=substitute) -> UOp:
  """Each index division or remainder by a constant whose dividend may be negative over the ranges but not
  where the gate holds divides max(dividend, 0): equal there, and known non-negative, so that Instruction
  Selection makes a power of two a shift or a mask (max pooling's backward: `(w - j) % 2` under `w - j >= 0`
  took a 64-bit rem on the GPU per lane and tap)."""
  if not bounds: return expr
  from uopc.symbolic import linear_form
  mapping = {}
  for u in expr.toposort():
    if u.op not in (Ops.MOD, Ops.IDIV) or u.dtype is not dtypes.index or u.src[1].op is not Ops.CONST or u.src[1].arg <= 1: continue
    x = u.src[0]
    if x.vmin >= 0 or x.op is Ops.MAX: continue
    form = dict(linear_form(x))
    if _gated_range({a: k for a, k in form.items() if a is not None}, bounds)[0] + form.get(None, 0) < 0: continue
    mapping[u] = x.alu(Ops.MAX, UOp.const(x.dtype, 0)).alu(u.op, u.src[1])
  return sub(expr, mapping) if mapping else expr


def _self_guarded(gate: UOp) -> UOp:
  """The gate with its own divisions made non-negative where its other clauses bound their dividends (where
  those clauses are false the gate is false whatever the division gives)."""
  bounds = _bounds(gate)
  return _non_negative(gate, bounds) if bounds else gate


def _load(ld: UOp, idx: UOp, alt: UOp, gate: UOp) -> UOp | None:
  if gate.dtype is not dtypes.bool: return None
  facts = gate_facts(gate)
  return ld.replace(src=(guarded(idx, gate), alt, _rewritten_gate(gate, facts) if facts else _self_guarded(gate)))


def _where(w: UOp, gate: UOp, a: UOp, b: UOp) -> UOp | None:
  if gate.dtype is not dtypes.bool: return None
  facts = gate_facts(gate)
  return w.replace(src=(_rewritten_gate(gate, facts) if facts else _self_guarded(gate), guarded(a, gate, keep_loads=True), b))


gate_rules = Rules([
  (Pat(Ops.LOAD, src=(Pat.var("idx"), Pat.var("alt"), Pat.var("gate")), name="ld"), _load),
  (Pat(Ops.WHERE, src=(Pat.var("gate"), Pat.var("a"), Pat.var("b")), name="w"), _where),
])


# ---- divisions whose dividend the gate bounds ---------------------------------------------------------
def gate_bounds(gate: UOp) -> dict[tuple, tuple[int, int]]:
  """The bounds the gate's clauses put on linear expressions (key: `_bound`'s), intersected."""
  out: dict[tuple, tuple[int, int]] = {}
  for cl in clauses(gate):
    if (b := _bound(cl)) is None: continue
    key, lo, hi = b
    old = out.get(key, (lo, hi))
    out[key] = (max(lo, old[0]), min(hi, old[1]))
  return out


def _gated_range(form: dict, bounds: dict[tuple, tuple[int, int]]) -> tuple[int, int]:
  """The range of a linear form (no constant) where the gate holds: its atoms' ranges, narrowed by any
  gate bound on a part of it (a key whose terms times some integer t are some of its terms)."""
  def natural(terms) -> tuple[int, int]:
    lo = hi = 0
    for a, k in terms:
      a_lo, a_hi = sorted((a.vmin * k, a.vmax * k))
      lo, hi = lo + a_lo, hi + a_hi
    return lo, hi
  lo, hi = natural(form.items())
  for key, (b_lo, b_hi) in bounds.items():
    a0, k0 = key[0]
    if a0 not in form or form[a0] % k0 or any(form.get(a) != k * (form[a0] // k0) for a, k in key): continue
    t = form[a0] // k0
    r_lo, r_hi = natural([(a, k) for a, k in form.items() if a not in dict(key)])
    p_lo, p_hi = sorted((t * b_lo, t * b_hi))
    lo, hi = max(lo, r_lo + p_lo), min(hi, r_hi + p_hi)
  return lo, hi


def _divide_given(x: UOp, d: int, bounds) -> tuple[UOp, UOp] | None:
  """(x // d, x % d) where the gate holds, when x = d*Q + R (floor residues of its coefficients, and the
  constant's share that puts R's least value in [0, d)) with R below d there: then they are Q and R."""
  from uopc.symbolic import linear_form, _scaled, _sum
  form = dict(linear_form(x))
  c = form.pop(None, 0)
  q_terms, r_form = [], {}
  for a, k in form.items():
    m, r = divmod(k, d)
    if m: q_terms.append(_scaled(a, m, x.dtype))
    if r: r_form[a] = r
  lo, hi = _gated_range(r_form, bounds)
  m0 = (c + lo) // d  # the constant's share of the quotient: R's least value lo + r0 in [0, d)
  r0 = c - d * m0
  if hi + r0 >= d: return None
  q = _sum(q_terms + [UOp.const(x.dtype, m0)]) if q_terms else UOp.const(x.dtype, m0)
  rest = [_scaled(a, k, x.dtype) for a, k in r_form.items()] + [UOp.const(x.dtype, r0)]
  return q, _sum(rest)


def _divisions_given(value: UOp, bounds: dict, sub=substitute) -> UOp:
  """`value` with each index division or remainder by a constant that `_divide_given` decides replaced."""
  if not bounds: return value
  from uopc.symbolic import linear_form
  mapping = {}
  for u in value.toposort():
    if u.op not in (Ops.MOD, Ops.IDIV) or u.dtype is not dtypes.index or u.src[1].op is not Ops.CONST or u.src[1].arg <= 1: continue
    form = dict(linear_form(u.src[0]))
    if _gated_range({a: k for a, k in form.items() if a is not None}, bounds)[0] + form.get(None, 0) < 0: continue
    if (qr := _divide_given(u.src[0], u.src[1].arg, bounds)) is not None: mapping[u] = qr[1] if u.op is Ops.MOD else qr[0]
  return sub(value, mapping) if mapping else value


@lru_cache(maxsize=4096)
def _bounds(gate: UOp) -> dict[tuple, tuple[int, int]]: return gate_bounds(gate)


def simplify_given(value: UOp, gate: UOp | None) -> UOp:
  """`value` simplified for where `gate` holds (its value elsewhere is not used): an index division or
  remainder by a constant whose dividend the gate's bounds keep non-negative, with the coefficients'
  residues summing to less than the divisor, is its quotient and residue sums (tinygrad's arange read
  inside a padded convolution's window: `(h + kh - 1 + 112*r) % 111` is `h + kh - 1 + r` where the
  padding's gate holds h + kh - 1 in [0, 55])."""
  from uopc.symbolic import simplify
  value = simplify(value)
  if gate is None: return value
  new = _divisions_given(value, gate_bounds(simplify(gate)))
  return simplify(new) if new is not value else value
