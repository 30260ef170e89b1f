"""Symbolic simplification: constant folding, algebraic identities and range-based index arithmetic.

`symbolic_rules` is a `Rules` that later passes compose with their own (`symbolic_rules + mine`);
`simplify(u)` runs it bottom-up to a fixed point. Every rule is exact over the whole value range
that `min_max` proves for its operands: integer ADD/MUL wrap (two's complement), IDIV truncates and
MOD takes the sign of the dividend (SPEC-NOTES), so rules that divide check that no intermediate
wraps and that truncation agrees with the algebra (operands of one sign). Float rules are limited to
those exact for every value, NaN and -0.0 included; float min_max is never trusted (it ignores NaN).
"""
from __future__ import annotations

import math
from typing import Callable

from uopc.dtype import SCALARS, DType, dtype_range, dtypes, truncate
from uopc.ops import GroupOp, Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.uop import UOp

INT_DTYPES = tuple(d for d in SCALARS if d.is_int())  # signed, unsigned and index
FLOAT_DTYPES = tuple(d for d in SCALARS if d.is_float())


# ---- exact evaluation of ALU ops on constants ------------------------------------------------------
def tdiv(a: int, b: int) -> int:
  """Integer division truncating toward zero (C semantics)."""
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q


def tmod(a: int, b: int) -> int:
  """Remainder with the sign of the dividend (C semantics): a == tdiv(a, b) * b + tmod(a, b)."""
  return a - b * tdiv(a, b)


def _shift_ok(b: int, dt: DType) -> bool: return 0 <= b < dt.bits  # wider shifts are undefined

# Integer and bool ops on Python ints; the result is wrapped to the dtype afterwards. A function
# returning None marks an undefined case (division by zero, oversized shift): it is not folded.
_INT_OPS: dict[Ops, Callable] = {
  Ops.ADD: lambda dt, a, b: a + b, Ops.SUB: lambda dt, a, b: a - b, Ops.MUL: lambda dt, a, b: a * b,
  Ops.NEG: lambda dt, a: -a, Ops.MAX: lambda dt, a, b: max(a, b),
  Ops.IDIV: lambda dt, a, b: tdiv(a, b) if b else None, Ops.MOD: lambda dt, a, b: tmod(a, b) if b else None,
  Ops.FLOORDIV: lambda dt, a, b: a // b if b else None, Ops.FLOORMOD: lambda dt, a, b: a % b if b else None,
  Ops.AND: lambda dt, a, b: a & b, Ops.OR: lambda dt, a, b: a | b, Ops.XOR: lambda dt, a, b: a ^ b,
  Ops.SHL: lambda dt, a, b: a << b if _shift_ok(b, dt) else None,
  Ops.SHR: lambda dt, a, b: a >> b if _shift_ok(b, dt) else None,  # Python's >> is arithmetic, as SHR on signed
  Ops.MULACC: lambda dt, a, b, c: a * b + c, Ops.NOT: lambda dt, a: a != 1,
}


def _fdiv(a: float, b: float) -> float:
  if b != 0: return a / b
  if a == 0 or math.isnan(a): return math.nan
  return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _fmax(a: float, b: float) -> float | None:
  if math.isnan(a) or math.isnan(b): return math.nan  # SPEC-NOTES: NaN wins on every target
  if a == b == 0 and math.copysign(1, a) != math.copysign(1, b): return None  # targets may pick either zero
  return max(a, b)


def _math(fn: Callable[[float], float], domain_error: Callable[[float], float]) -> Callable:
  """A math-module function with IEEE results where Python raises: overflow is inf, domain errors per `domain_error`."""
  def f(dt, a):
    try: return fn(a)
    except OverflowError: return math.inf
    except ValueError: return domain_error(a)
  return f


# Float ops on Python floats (double precision); the result is then rounded once to the dtype, which
# is exact rounding for + - * / sqrt of float32/16 operands (double has more than 2p+2 bits). The
# transcendentals are within an ULP of exact, inside the accuracy bar of SPEC-NOTES.
_FLOAT_OPS: dict[Ops, Callable] = {
  Ops.ADD: lambda dt, a, b: a + b, Ops.SUB: lambda dt, a, b: a - b, Ops.MUL: lambda dt, a, b: a * b,
  Ops.NEG: lambda dt, a: -a, Ops.MAX: lambda dt, a, b: _fmax(a, b), Ops.DIV: lambda dt, a, b: _fdiv(a, b),
  Ops.RECIP: lambda dt, a: _fdiv(1.0, a),
  Ops.TRUNC: lambda dt, a: math.copysign(float(math.trunc(a)), a) if math.isfinite(a) else a,
  Ops.SQRT: _math(math.sqrt, lambda a: math.nan),
  Ops.EXP2: _math(math.exp2, lambda a: math.nan),
  Ops.LOG2: _math(math.log2, lambda a: -math.inf if a == 0 else math.nan),
  Ops.SIN: _math(math.sin, lambda a: math.nan),
  Ops.MULACC: lambda dt, a, b, c: truncate(a * b, dt) + c,  # MUL then ADD: rounded twice
}

# comparisons, for every dtype; the decomposed ones follow their definition in seed 000 (CMPGE is
# NOT(CMPLT), so it is true when an operand is NaN)
_CMP_OPS: dict[Ops, Callable] = {
  Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPGT: lambda a, b: b < a,
  Ops.CMPGE: lambda a, b: not a < b, Ops.CMPLE: lambda a, b: not b < a, Ops.CMPEQ: lambda a, b: not a != b,
}


def exec_alu(op: Ops, dtype: DType, operand_dtype: DType, args: tuple):
  """The value of `op` on constant `args` of `operand_dtype`, as a `dtype` constant; None where the op
  is undefined there (division by zero, ...) or is not folded (POW, THREEFRY, a MAX of +0.0 and -0.0)."""
  if op is Ops.WHERE: return args[1] if args[0] else args[2]
  # a float CONST may hold more precision than its dtype (0.1 in f32): it means the dtype's value
  if operand_dtype.is_float(): ops, args = _FLOAT_OPS, tuple(truncate(float(a), operand_dtype) for a in args)
  else: ops, args = _INT_OPS, tuple(int(a) for a in args)
  if op in _CMP_OPS: return _CMP_OPS[op](*args)
  if op not in ops or (v := ops[op](operand_dtype.scalar, *args)) is None: return None
  return truncate(v, dtype)


def exec_cast(value, src: DType, dst: DType):
  """CAST of a constant; None where C leaves it undefined (float to int out of range, NaN) or where
  a single rounding cannot be guaranteed (an int beyond 2**53 to a float narrower than double)."""
  if src.is_float(): value = truncate(float(value), src)  # as exec_alu: a float CONST means its dtype's value
  if dst.is_bool(): return value != 0
  if dst.is_int():
    if src.is_float():
      if not math.isfinite(value): return None
      value = math.trunc(value)
      lo, hi = dtype_range(dst)
      return value if lo <= value <= hi else None
    return truncate(int(value), dst)
  if dst.is_float():
    if not src.is_float() and abs(int(value)) >= 2 ** 53 and dst is not dtypes.float64: return None
    return truncate(float(value), dst)
  return None


def _fold_alu(u: UOp) -> UOp | None:
  if u.dtype.count != 1: return None
  v = exec_alu(u.op, u.dtype, u.src[-1].dtype, tuple(s.arg for s in u.src))
  return None if v is None else UOp.const(u.dtype, v)


def _fold_cast(u: UOp, c: UOp) -> UOp | None:
  if u.dtype.count != 1: return None
  v = exec_cast(c.arg, c.dtype, u.dtype)
  return None if v is None else UOp.const(u.dtype, v)


# ---- values proved by min_max ------------------------------------------------------------------------
def known_value(u: UOp):
  """The value of an int or bool UOp when min_max pins it to one, else None. A node with a float
  operand is not trusted: float min_max ignores NaN (CMPLT(0.5, MAX(x, 1.0)) is false for x = NaN)."""
  if u.op is Ops.CONST: return u.arg
  if u.dtype.count != 1 or not (u.dtype.is_int() or u.dtype.is_bool()) or any(s.dtype.is_float() for s in u.src): return None
  lo, hi = u.min_max
  return lo if lo == hi else None


def _fold_known(u: UOp) -> UOp | None:
  return None if (v := known_value(u)) is None else UOp.const(u.dtype, v)


# ---- index arithmetic --------------------------------------------------------------------------------
def _fits(rng: tuple[int, int], dt: DType) -> bool:
  lo, hi = dtype_range(dt)
  return lo <= rng[0] and rng[1] <= hi


def _one_sign(*rngs: tuple[int, int]) -> bool:
  """All values of all ranges are >= 0, or all <= 0: there truncating division is floor or ceil throughout."""
  return all(r[0] >= 0 for r in rngs) or all(r[1] <= 0 for r in rngs)


INT_DIVISIONS = frozenset({Ops.IDIV, Ops.MOD, Ops.FLOORDIV, Ops.FLOORMOD})


def divide_where(div: UOp, valid: UOp) -> UOp:
  """An integer division (INT_DIVISIONS) that divides by 1 where `valid` is false: under a gate whose
  loads read 0 there (a masked iteration, an out-of-range gather) the quotient is discarded, but dividing
  by zero is undefined and traps on CPUs (SIGFPE, or a C compiler's ud2 where it proves the divisor 0)."""
  d = div.src[1]
  if d.op is Ops.CONST: return div
  return div.replace(src=(div.src[0], valid.alu(Ops.WHERE, d, UOp.const(d.dtype, 1))))


def linear_form(e: UOp) -> dict[UOp | None, int]:
  """e as sum(coefficient * atom) + constant ({atom: coefficient}, the constant under None): ADDs and MULs
  by constants are opened, anything else is an atom. Exact for integers (no wrap-around assumed away:
  callers use it on index arithmetic, whose values are mathematical integers)."""
  if e.op is Ops.CONST: return {None: int(e.arg)}
  if e.op is Ops.ADD:
    out = dict(linear_form(e.src[0]))
    for a, c in linear_form(e.src[1]).items(): out[a] = out.get(a, 0) + c
    return out
  if e.op is Ops.MUL:
    for x, k in (e.src, e.src[::-1]):
      if k.op is Ops.CONST: return {a: c * int(k.arg) for a, c in linear_form(x).items()}
  return {e: 1}


def _terms(u: UOp) -> list[UOp]:
  """The summands of a chain of ADDs, left to right."""
  out, stack = [], [u]
  while stack:
    t = stack.pop()
    if t.op is Ops.ADD: stack.extend(reversed(t.src))
    else: out.append(t)
  return out


def _coeff(t: UOp) -> tuple[UOp | None, int]:
  """A summand as (y, k) meaning y*k; a constant is (None, k); anything else is (t, 1)."""
  if t.op is Ops.CONST: return None, t.arg
  if t.op is Ops.MUL and t.src[1].op is Ops.CONST: return t.src[0], t.src[1].arg
  return t, 1


def _exact_range(terms: list[UOp]) -> tuple[int, int]:
  """The range of the mathematical (unwrapped) sum of the summands, a y*k summand taken from y's range."""
  lo = hi = 0
  for t in terms:
    y, k = _coeff(t)
    if y is None: a = b = k
    elif y is t: a, b = t.min_max
    else: a, b = sorted((y.vmin * k, y.vmax * k))
    lo, hi = lo + a, hi + b
  return lo, hi


def _scaled(y: UOp | None, k: int, dt: DType) -> UOp:
  if y is None: return UOp.const(dt, k)
  return y if k == 1 else y.alu(Ops.MUL, UOp.const(dt, k))


def _sum(nodes: list[UOp]) -> UOp:
  acc = nodes[0]
  for n in nodes[1:]: acc = acc.alu(Ops.ADD, n)
  return acc


def _split_multiples(x: UOp, c: int, op: Ops) -> UOp | None:
  """(r + q*c) // c -> r // c + q and (r + q*c) % c -> r % c, where q*c collects the summands whose
  coefficient is a multiple of c. Exact when the sum does not wrap and r and the sum have one sign."""
  dt, terms = x.dtype, _terms(x)
  whole = _exact_range(terms)
  if not _fits(whole, dt): return None
  multiples = [(y, k // c) for y, k in map(_coeff, terms) if k % c == 0]
  rest = [t for t in terms if _coeff(t)[1] % c != 0]
  if not multiples: return None
  if rest and not (_fits(_exact_range(rest), dt) and _one_sign(_exact_range(rest), whole)): return None
  quotient = [_scaled(y, k, dt) for y, k in multiples]
  c_node = UOp.const(dt, c)
  if op is Ops.MOD: return _sum(rest).alu(Ops.MOD, c_node) if rest else UOp.const(dt, 0)
  return _sum(([_sum(rest).alu(Ops.IDIV, c_node)] if rest else []) + quotient)


def _divide_common_factor(x: UOp, c: int) -> UOp | None:
  """(sum of k_i*y_i) // c -> (sum of (k_i/g)*y_i) // (c/g), g the gcd of c and every k_i: exact
  division of both sides, valid when the sum does not wrap."""
  dt, terms = x.dtype, _terms(x)
  coeffs = [_coeff(t) for t in terms]
  g = math.gcd(c, *(k for _, k in coeffs))
  if g == 1 or not _fits(_exact_range(terms), dt): return None
  return _sum([_scaled(y, k // g, dt) for y, k in coeffs]).alu(Ops.IDIV, UOp.const(dt, c // g))


def _quotient_on_range(x: UOp, c: int) -> int | None:
  """x // c when it is one value over x's range (truncating division is monotonic in x for c > 0)."""
  q = tdiv(x.vmin, c)
  return q if q == tdiv(x.vmax, c) else None


def _div_const(d: UOp, x: UOp, c: UOp) -> UOp | None:
  if c.arg <= 0: return None
  if (q := _quotient_on_range(x, c.arg)) is not None: return UOp.const(d.dtype, q)
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0 and _fits((0, x.src[1].arg * c.arg), d.dtype):
    # (y//a)//c -> y//(a*c): floor identity, and truncation is odd-symmetric, so it holds for y < 0 too
    return x.src[0].alu(Ops.IDIV, UOp.const(d.dtype, x.src[1].arg * c.arg))
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg > 0 and x.src[1].arg % c.arg == 0:
    # (y%(c*b))//c -> (y//c)%b, likewise odd-symmetric
    return x.src[0].alu(Ops.IDIV, c).alu(Ops.MOD, UOp.const(d.dtype, x.src[1].arg // c.arg))
  return _split_multiples(x, c.arg, Ops.IDIV) or _divide_common_factor(x, c.arg) or _split_opened(x, c.arg, Ops.IDIV) or \
    _drop_remainder(x, c.arg, Ops.IDIV)


def _mod_const(m: UOp, x: UOp, c: UOp) -> UOp | None:
  if c.arg < 0 and _fits((-c.arg, -c.arg), m.dtype): return x.alu(Ops.MOD, UOp.const(m.dtype, -c.arg))  # sign of dividend only
  if c.arg <= 0: return None
  if (q := _quotient_on_range(x, c.arg)) is not None:
    return x if q == 0 else x.alu(Ops.ADD, UOp.const(m.dtype, -q * c.arg))
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
    d = x.src[1].arg
    if d <= c.arg: return x            # |y % d| < d <= c: the outer mod changes nothing
    if d % c.arg == 0: return x.src[0].alu(Ops.MOD, c)  # y%d keeps y's sign and differs by a multiple of c
  return _split_multiples(x, c.arg, Ops.MOD) or _reduce_coefficients(x, c.arg) or _split_opened(x, c.arg, Ops.MOD) or \
    _drop_remainder(x, c.arg, Ops.MOD)


def _split_opened(x: UOp, c: int, op: Ops) -> UOp | None:
  """_split_multiples on an index x whose summands nest sums, ((g*2 + u)*8 + l)*4 + v // 64 -> g, as
  Optimize's SPLITs leave an axis: x opened into its linear form first (index values are mathematical
  integers, so opening is exact). None where nothing nests or the opened sum has no multiple of c."""
  if x.dtype is not dtypes.index or not any((y := _coeff(t)[0]) is not None and y.op is Ops.ADD for t in _terms(x)): return None
  flat = [_scaled(a, k, x.dtype) for a, k in linear_form(x).items() if k]
  return _split_multiples(_sum(flat), c, op) if flat else None


def _drop_remainder(x: UOp, c: int, op: Ops) -> UOp | None:
  """(g*B + s) // c -> B // (c/g) and (g*B + s) % c -> (B % (c/g))*g + s, where g > 1 divides c and every
  coefficient of B's summands and 0 <= s < g: a SPLIT's lane below a block of g, so that UPCAST lanes inside one
  block compute one value ((l*4 + u) // 32 -> l // 8, u in [0, 4)). Exact where B >= 0 (truncation is floor) and
  the sum does not wrap; an index's nested sums are opened first (as _split_opened)."""
  dt, terms = x.dtype, _terms(x)
  if dt is dtypes.index and any((y := _coeff(t)[0]) is not None and y.op is Ops.ADD for t in terms):
    terms = [_scaled(a, k, dt) for a, k in linear_form(x).items() if k]
  if not terms or not _fits(_exact_range(terms), dt): return None
  coeffs = [_coeff(t) for t in terms]
  for g in sorted({math.gcd(c, k) for _, k in coeffs if k and math.gcd(c, k) > 1}, reverse=True):
    big = [(y, k // g) for y, k in coeffs if k % g == 0]
    small = [t for t, (_, k) in zip(terms, coeffs) if k % g]
    if not big or not small: continue
    lo, hi = _exact_range(small)
    if lo < 0 or hi >= g or _exact_range([t for t, (_, k) in zip(terms, coeffs) if k % g == 0])[0] < 0: continue
    block = _sum([_scaled(y, k, dt) for y, k in big])
    if op is Ops.IDIV: return block.alu(Ops.IDIV, UOp.const(dt, c // g))
    return block.alu(Ops.MOD, UOp.const(dt, c // g)).alu(Ops.MUL, UOp.const(dt, g)).alu(Ops.ADD, _sum(small))
  return None


def _reduce_coefficients(x: UOp, c: int) -> UOp | None:
  """(sum of k_i*y_i) % c -> (sum of (k_i mod c)*y_i) % c: both sums differ by a multiple of c, so
  their remainders agree where both are >= 0 and neither wraps (then truncation is floor). Turns
  (r + 10*i) % 9 into (r + i) % 9, which the range of r + i may then drop."""
  dt, terms = x.dtype, _terms(x)
  coeffs = [_coeff(t) for t in terms]
  if all(0 <= k < c for _, k in coeffs): return None
  reduced = [(y, k % c) for y, k in coeffs if k % c]
  if not reduced: return UOp.const(dt, 0)
  new = _sum([_scaled(y, k, dt) for y, k in reduced])
  rng, new_rng = _exact_range(terms), _exact_range(_terms(new))
  if not (_fits(rng, dt) and _fits(new_rng, dt) and rng[0] >= 0 and new_rng[0] >= 0): return None
  return new.alu(Ops.MOD, UOp.const(dt, c))


def _reassociate(outer: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  v = exec_alu(outer.op, outer.dtype, outer.dtype, (c1.arg, c2.arg))
  return x.alu(outer.op, UOp.const(outer.dtype, v))


def _distribute(outer: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp:
  v = exec_alu(Ops.MUL, outer.dtype, outer.dtype, (c1.arg, c2.arg))
  return x.alu(Ops.MUL, c2).alu(Ops.ADD, UOp.const(outer.dtype, v))


# ---- gates and selects -------------------------------------------------------------------------------
def _load_gate(ld: UOp, idx: UOp, alt: UOp, gate: UOp) -> UOp | None:
  g = known_value(gate)
  if g is None: return None
  return ld.replace(src=(idx,)) if g else alt


def _store_gate(st: UOp, idx: UOp, val: UOp, gate: UOp) -> UOp | None:
  return st.replace(src=(idx, val)) if known_value(gate) is True else None


# ---- the rules -------------------------------------------------------------------------------------
def _not_const(u: UOp) -> bool: return u.op is not Ops.CONST

x, y, c = Pat.var("x"), Pat.var("y"), Pat.cvar("c")
xi = Pat.var("x", INT_DTYPES)
ci = Pat.cvar("c", INT_DTYPES)


def _int(value) -> Pat: return Pat.const(INT_DTYPES, value)
def _bool(value) -> Pat: return Pat.const(dtypes.bool, value)
def _zero_like(x: UOp) -> UOp: return UOp.const(x.dtype, False if x.dtype.is_bool() else 0)


symbolic_rules = Rules([
  # constant folding
  (Pat(GroupOp.ALU, src=Pat(Ops.CONST), name="u"), _fold_alu),
  (Pat(Ops.CAST, src=(c,), name="u"), _fold_cast),
  # an int or bool value pinned by min_max (this decides comparisons)
  (Pat(GroupOp.ALU, dtype=INT_DTYPES + (dtypes.bool,), name="u"), _fold_known),
  # identities
  (xi + _int(0), lambda x: x),
  (x * Pat.const(None, 1), lambda x: x),  # exact for floats too, NaN included
  (xi * _int(0), lambda x: _zero_like(x)),
  (xi // _int(1), lambda x: x),
  (xi % _int(1), lambda x: _zero_like(x)),
  (Pat(Ops.SUB, src=(xi, xi)), lambda x: _zero_like(x)),
  (xi + xi * _int(-1), lambda x: _zero_like(x)),
  (Pat(Ops.MAX, src=(x, x)), lambda x: x),
  (Pat(Ops.MAX, src=(xi, Pat.var("y", dtype=INT_DTYPES))), lambda x, y: x if x.vmin >= y.vmax else y if y.vmin >= x.vmax else None),
  (Pat(Ops.CMPLT, src=(x, x), name="u"), lambda u, x: UOp.const(u.dtype, False)),  # false for NaN too
  (Pat(Ops.CMPNE, src=(xi, xi), name="u"), lambda u, x: UOp.const(u.dtype, False)),
  ((x & x), lambda x: x), ((x | x), lambda x: x),
  ((x & _bool(True)), lambda x: x), ((x & _bool(False)), lambda x: _zero_like(x)),
  ((x | _bool(False)), lambda x: x), ((x | _bool(True)), lambda x: UOp.const(dtypes.bool, True)),
  ((xi & _int(0)), lambda x: _zero_like(x)), ((xi | _int(0)), lambda x: x), ((xi ^ _int(0)), lambda x: x),
  (Pat(Ops.WHERE, src=(Pat.var("p"), x, x)), lambda p, x: x),
  (Pat(Ops.WHERE, src=(_bool(True), x, y)), lambda x, y: x),
  (Pat(Ops.WHERE, src=(_bool(False), x, y)), lambda x, y: y),
  (Pat(Ops.WHERE, src=(Pat.var("p", dtype=(dtypes.bool,)), _bool(True), _bool(False))), lambda p: p),  # a padded mask
  # constants to the right of commutative ops, then gathered: (x+c1)+c2, (x*c1)*c2, (x+c1)+y -> (x+y)+c1
  (Pat(GroupOp.Commutative, src=(c, Pat(where=_not_const, name="x")), name="u"), lambda u, c, x: u.replace(src=(x, c))),
  (Pat(Ops.ADD, src=(Pat(Ops.ADD, src=(xi, Pat.cvar("c1"))), Pat.cvar("c2")), name="outer"), _reassociate),
  (Pat(Ops.MUL, src=(Pat(Ops.MUL, src=(xi, Pat.cvar("c1"))), Pat.cvar("c2")), name="outer"), _reassociate),
  ((xi + Pat.cvar("c1")) + Pat(where=_not_const, name="y"), lambda x, c1, y: x.alu(Ops.ADD, y).alu(Ops.ADD, c1)),
  # (x+c1)*c2 -> x*c2 + c1*c2: exact for wrapping integers (tinygrad's interpolate writes ((r-126)*-1+1)*-1+128 = r+1)
  (Pat(Ops.MUL, src=(Pat(Ops.ADD, src=(xi, Pat.cvar("c1"))), Pat.cvar("c2")), name="outer"), _distribute),
  # division and remainder
  ((xi // y) * y + xi % y, lambda x, y: x),
  # a floor division of a non-negative value by a positive constant is the truncating one
  (Pat(Ops.FLOORDIV, src=(xi, ci)), lambda x, c: x.alu(Ops.IDIV, c) if x.vmin >= 0 and c.arg > 0 else None),
  (Pat(Ops.FLOORMOD, src=(xi, ci)), lambda x, c: x.alu(Ops.MOD, c) if x.vmin >= 0 and c.arg > 0 else None),
  (Pat(Ops.IDIV, src=(xi, ci), name="d"), _div_const),
  (Pat(Ops.MOD, src=(xi, ci), name="m"), _mod_const),
  # selects and gates
  (Pat(Ops.WHERE, src=(Pat.var("a"), Pat(Ops.WHERE, src=(Pat.var("b"), x, y)), y)),
   lambda a, b, x, y: a.alu(Ops.AND, b).alu(Ops.WHERE, x, y)),
  (Pat(Ops.WHERE, src=(Pat.var("a"), x, Pat(Ops.WHERE, src=(Pat.var("b"), x, y)))),
   lambda a, b, x, y: a.alu(Ops.OR, b).alu(Ops.WHERE, x, y)),
  (Pat(Ops.LOAD, src=(Pat.var("idx"), Pat.var("alt"), Pat.var("gate")), name="ld"), _load_gate),
  (Pat(Ops.STORE, src=(Pat.var("idx"), Pat.var("val"), Pat.var("gate")), name="st"), _store_gate),
])


from uopc.symbolic_gates import gate_rules  # noqa: E402  (its functions use the names above)
from uopc.select_ladders import ladder_rules  # noqa: E402
symbolic_rules = symbolic_rules + gate_rules + ladder_rules


def simplify(u: UOp) -> UOp:
  """`u` with `symbolic_rules` applied bottom-up until none applies."""
  return graph_rewrite(u, symbolic_rules, bottom_up=True)
