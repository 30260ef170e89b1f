"""Instruction Selection: lower every op a target does not render (accurately) itself into ops it does.

Each target has `Capabilities` (`Target.ops`, uopc.targets.capabilities): the decomposed ops (seed 000) it
renders natively within the SPEC-NOTES accuracy bar, per dtype, and those it renders only approximately
(used under --fast-math).
The decompositions are rules on the rewrite engine, each applied only where the target lacks the op:

- NEG, SUB, DIV, CMPGT, CMPGE, CMPLE, CMPEQ, NOT, MULACC: seed 000's definitions (and back: a vector's
  NOT(a != b) is one CMPEQ where the target renders it);
- EXP2, LOG2, SIN, SQRT, POW: the accurate polynomial versions of `uopc.stages.transcendental`; POW by
  a constant integer -4..4 as multiplications (x**-n as RECIP of x**n), by 0.5 as SQRT;
- THREEFRY: Threefry-2x32 (SPEC-NOTES) on uint32 halves;
- FLOORDIV/FLOORMOD: truncating IDIV/MOD and a correction where the signs differ;
- IDIV/MOD by a constant, on targets without a hardware integer divider: multiply-high and shift,
  exact over the dividend's whole min_max range (64-bit through 32x32->64 partial products); on the
  others by a power of two of a dividend min_max proves non-negative: a shift and a mask (a C vector's
  division goes lane by lane, a shift is one instruction).

No current target is 32-bit-only for integers (C, LLVM, PTX, AMDGPU and Metal all have 64-bit
integer ops), so 64-bit integer ops are not split into 32-bit pairs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from uopc.dtype import DType, dtypes
from uopc.ops import FUSED, Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.stages import transcendental as tm
from uopc.stages.address_offsets import split_offsets
from uopc.stages.index_width import narrow_index
from uopc.stages.transcendental import add, c, cast, eq, lt, mul, ne, shl, shr, sub, where
from uopc.targets.capabilities import F16_F32, SIMPLE, TRANSCENDENTAL, Capabilities
from uopc.uop import UOp

# ---- seed 000 decompositions --------------------------------------------------------------------------
def _true(u: UOp) -> UOp: return UOp.const(dtypes.bool.vec(u.dtype.count) if u.dtype.count > 1 else dtypes.bool, True)
def _negate(x: UOp) -> UOp: return mul(x, c(x, -1))
def _not(x: UOp) -> UOp: return ne(x, _true(x)) if x.dtype.scalar is dtypes.bool else x.alu(Ops.XOR, c(x, -1))


def _simple(u: UOp, a: UOp, b: UOp | None = None, d: UOp | None = None) -> UOp:
  op = u.op
  if op is Ops.NEG: return _negate(a)
  if op is Ops.SUB: return add(a, _negate(b))
  if op is Ops.DIV: return mul(a, b.alu(Ops.RECIP))
  if op is Ops.CMPGT: return lt(b, a)
  if op is Ops.CMPGE: return ne(lt(a, b), _true(u))
  if op is Ops.CMPLE: return ne(lt(b, a), _true(u))
  if op is Ops.CMPEQ: return ne(ne(a, b), _true(u))
  if op is Ops.NOT: return _not(a)
  return add(mul(a, b), d)  # MULACC


# ---- THREEFRY ------------------------------------------------------------------------------------------
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(x: UOp, key: UOp) -> UOp:
  """Threefry-2x32, 20 rounds, as SPEC-NOTES defines it, on the 32-bit halves of x and key."""
  lo, hi = (lambda v: cast(v, dtypes.uint32)), (lambda v: cast(shr(v, 32), dtypes.uint32))
  k0, k1 = lo(key), hi(key)
  ks = (k1, k0.alu(Ops.XOR, k1).alu(Ops.XOR, c(k0, 0x1BD11BDA)), k0)
  x0, x1 = add(lo(x), ks[2]), add(hi(x), ks[0])
  for i in range(5):
    for r in _ROTATIONS[i % 2]:
      x0 = add(x0, x1)
      x1 = shl(x1, r).alu(Ops.OR, shr(x1, 32 - r)).alu(Ops.XOR, x0)
    x0, x1 = add(x0, ks[i % 3]), add(add(x1, ks[(i + 1) % 3]), c(x1, i + 1))
  return shl(cast(x1, dtypes.uint64), 32).alu(Ops.OR, cast(x0, dtypes.uint64))


# ---- floor division ------------------------------------------------------------------------------------
def _signs_differ(a: UOp, b: UOp) -> UOp: return ne(lt(a, c(a, 0)), lt(b, c(b, 0)))
def _same_sign(a: UOp, b: UOp) -> bool: return (a.vmin >= 0 and b.vmin > 0) or (a.vmax <= 0 and b.vmax < 0)


def floordiv(a: UOp, b: UOp) -> UOp:
  q = a.alu(Ops.IDIV, b)
  if a.dtype.scalar.is_unsigned() or _same_sign(a, b): return q
  adjust = ne(a.alu(Ops.MOD, b), c(a, 0)).alu(Ops.AND, _signs_differ(a, b))
  return where(adjust, sub(q, c(q, 1)), q)


def floormod(a: UOp, b: UOp) -> UOp:
  r = a.alu(Ops.MOD, b)
  if a.dtype.scalar.is_unsigned() or _same_sign(a, b): return r
  return where(ne(r, c(r, 0)).alu(Ops.AND, _signs_differ(r, b)), add(r, b), r)


# ---- integer division by a constant --------------------------------------------------------------------
_UNSIGNED = {8: dtypes.uint8, 16: dtypes.uint16, 32: dtypes.uint32, 64: dtypes.uint64}


def _magic(d: int, xmax: int, bits: int) -> tuple[int, int]:
  """(m, s) with floor(x * m / 2^s) == x // d for every 0 <= x <= xmax, s >= bits and m < 2^(bits+1):
  m = ceil(2^s / d) is exact when xmax * (m*d - 2^s) < 2^s (the error stays below 1/d)."""
  s = bits
  while True:
    m = -(-(1 << s) // d)
    if xmax * (m * d - (1 << s)) < (1 << s) and m < 1 << (bits + 1): return m, s
    s += 1


def _mulhi(x: UOp, m: int, bits: int) -> UOp:
  """floor(x * m / 2^bits) for unsigned `bits`-wide x and m < 2^bits: in the double-width type up to 32
  bits, from 32-bit partial products for 64 bits."""
  if bits < 64:
    wide = _UNSIGNED[2 * bits if bits >= 16 else 32]
    xw = cast(x, wide)
    return cast(shr(mul(xw, c(xw, m)), bits), x.dtype.scalar)
  mask = 0xFFFFFFFF
  x_lo, x_hi = x.alu(Ops.AND, c(x, mask)), shr(x, 32)
  m_lo, m_hi = c(x, m & mask), c(x, m >> 32)
  lo_lo = mul(x_lo, m_lo)
  mid = add(mul(x_hi, m_lo), shr(lo_lo, 32))
  mid2 = add(mul(x_lo, m_hi), mid.alu(Ops.AND, c(x, mask)))
  return add(add(mul(x_hi, m_hi), shr(mid, 32)), shr(mid2, 32))


def udiv_const(x: UOp, d: int, xmax: int) -> UOp:
  """x // d for unsigned x in [0, xmax] and a constant d > 0, without a divide."""
  if d & (d - 1) == 0: return shr(x, d.bit_length() - 1)
  bits = x.dtype.scalar.bits
  m, s = _magic(d, xmax, bits)
  if m < 1 << bits: return shr(_mulhi(x, m, bits), s - bits)
  t = _mulhi(x, m - (1 << bits), bits)  # x*m = x*2^bits + x*(m - 2^bits): add x back without overflowing
  return shr(add(shr(sub(x, t), 1), t), s - bits - 1)


def idiv_const(x: UOp, d: int) -> UOp:
  """Truncating x / d (SPEC-NOTES IDIV, wrapping INT_MIN / -1) for a constant d != 0."""
  dt = x.dtype.scalar
  if dt.is_unsigned(): return udiv_const(x, d, x.vmax)
  udt = _UNSIGNED[dt.bits]
  if x.vmin >= 0 and d > 0: return cast(udiv_const(cast(x, udt), d, x.vmax), dt)
  negative = lt(x, c(x, 0))
  magnitude = cast(where(negative, _negate(x), x), udt)  # INT_MIN's magnitude 2^(bits-1) fits the unsigned type
  q = cast(udiv_const(magnitude, abs(d), max(abs(x.vmin), abs(x.vmax))), dt)
  return where(negative if d > 0 else ne(negative, _true(negative)), _negate(q), q)


def _div_by_const(u: UOp, x: UOp, d: UOp, ctx) -> UOp | None:
  if not isinstance(d.arg, int) or d.arg == 0 or not isinstance(x.vmin, int) or not isinstance(x.vmax, int): return None
  if ctx.caps.int_division: return _pow2_div(u, x, d.arg)
  q = idiv_const(x, d.arg)
  return q if u.op is Ops.IDIV else sub(x, mul(q, c(q, d.arg)))


def _pow2_div(u: UOp, x: UOp, d: int) -> UOp | None:
  """IDIV/MOD of a value min_max proves non-negative by a power of two: a shift and a mask (scalars on targets
  with a divider, which leave other constants to it; vectors on every target: a vector's division by another
  constant goes lane by lane)."""
  if d < 0 or d & (d - 1) or x.vmin < 0: return None
  n = x.dtype.count
  def k(v: int) -> UOp:  # a constant like x; a vector's is its lanes' STACK, as Expand makes them
    return c(x, v) if n == 1 else UOp(Ops.STACK, x.dtype, (UOp.const(x.dtype.scalar, v),) * n)
  return x.alu(Ops.SHR, k(d.bit_length() - 1)) if u.op is Ops.IDIV else x.alu(Ops.AND, k(d - 1))


def _lane_constant(d: UOp) -> int | None:
  """The integer every lane of a vector divisor holds (a STACK of one CONST, or a vector CONST), else None."""
  k = d.src[0] if d.op is Ops.STACK and d.src else d
  if k.op is not Ops.CONST or not isinstance(k.arg, int) or (d.op is Ops.STACK and any(s is not k for s in d.src)): return None
  return k.arg


def _vector_div(u: UOp, x: UOp, d: UOp, ctx) -> UOp | None:
  """IDIV/MOD of a vector by one constant in every lane: a power of two as a shift and a mask, another (lanes of 32
  bits or fewer) as multiply-high and shift (a C vector's division goes lane by lane through the wrapping helpers:
  `(a.cast(uint32) * 2654435761 ^ ...) + a % 7` over 64 x 4096 int32, 2 cores: 0.30 -> 0.08 ms)."""
  if (k := _lane_constant(d)) is None or k == 0 or not isinstance(x.vmin, int) or not isinstance(x.vmax, int): return None
  if (q := _pow2_div(u, x, k)) is not None or not ctx.caps.int_division or x.dtype.scalar.bits > 32: return q
  q = idiv_const(x, k)  # 64-bit lanes would take four 32-bit partial products each: the helper's scalar divide is cheaper
  return q if u.op is Ops.IDIV else sub(x, mul(q, c(q, k)))


def _vector_floor_div(u: UOp, x: UOp, d: UOp, ctx) -> UOp | None:
  """FLOORDIV/FLOORMOD of a vector by one constant in every lane: the truncating forms and their correction
  (vector ops), whose division `_vector_div` then makes multiplies."""
  if x.dtype.count == 1 or (k := _lane_constant(d)) is None or k == 0: return None
  return floordiv(x, d) if u.op is Ops.FLOORDIV else floormod(x, d)


# ---- the stage -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IselContext:
  caps: Capabilities
  fast_math: bool = False
  contract: bool = False       # --fp-contract=fast: ADD(MUL(a, b), c) of floats becomes MULACC {"fused"}

  def lacks(self, u: UOp, dt: DType | None = None) -> bool:
    return not self.caps.renders(u.op, dt or u.dtype, self.fast_math)


def _operand_dtype(u: UOp) -> DType: return u.src[0].dtype if u.src else u.dtype


def _decompose(u: UOp, ctx: IselContext) -> UOp | None:
  op = u.op
  if not ctx.lacks(u, _operand_dtype(u)): return None
  if op in SIMPLE: return _simple(u, *u.src)
  if op is Ops.EXP2: return tm.exp2(u.src[0])
  if op is Ops.LOG2: return tm.log2(u.src[0])
  if op is Ops.SIN: return tm.sin(u.src[0])
  if op is Ops.SQRT: return tm.sqrt(u.src[0])
  if op is Ops.POW: return tm.pow_(u.src[0], u.src[1], ctx.caps.float64)
  if op is Ops.THREEFRY: return threefry2x32(*u.src)
  if op is Ops.FLOORDIV: return floordiv(*u.src)
  return floormod(*u.src)  # FLOORMOD


def _const_exponent(e: UOp) -> float | None:
  """The exponent's value when it is one constant (a STACK of one constant after Expand too)."""
  if e.op is Ops.CONST and not isinstance(e.arg, tuple): return e.arg
  if e.op is Ops.STACK and all(x is e.src[0] for x in e.src): return _const_exponent(e.src[0])
  return None


def _pow_const(x: UOp, e: UOp, ctx: IselContext) -> UOp | None:
  """POW by a constant integer -4..4 as multiplications, by 0.5 as SQRT. pow's special values come out
  the same (x * x of NaN, inf, -0.0; 1 / x of +-0 is +-inf; pow(x, 0) = 1 even for NaN). x**2 and
  x**-1 are one operation; for the other powers of float32 the product (and its RECIP) is formed in
  float64 where the target has it (x**2 exact there, one more rounding before the float32 one), as
  the general POW is; without float64 (Metal) at most two float32 roundings (x*x*x, (x*x)*(x*x),
  1/(x*x)), and x**-3, x**-4 of float32 stay the general POW. pow(-0.0, 0.5) = +0.0 and pow(-inf, 0.5) = +inf, where SQRT gives -0.0 and NaN."""
  n = _const_exponent(e)
  if n is None or not x.dtype.scalar.is_float(): return None  # even where the target has POW: a libm call per element
  if n == 0.5:
    root = add(UOp(Ops.SQRT, x.dtype, (x,)), c(x, 0.0))
    return where(eq(x, c(x, -math.inf)), c(x, math.inf), root)
  if n != int(n) or not -4 <= n <= 4: return None
  n, dt = int(n), x.dtype.scalar
  one_op = n in (-1, 2) or abs(n) < 2   # a correctly rounded single operation, or none
  work = dtypes.float64 if not one_op and dt is not dtypes.float64 and ctx.caps.float64 else dtypes.float32 if dt in F16_F32 else dt
  if work is dt is dtypes.float32 and n < -2: return None  # three roundings in float32: the general POW
  v = x if work is dt else cast(x, work)
  p = {0: c(v, 1.0), 1: v, 2: mul(v, v), 3: mul(mul(v, v), v), 4: mul(mul(v, v), mul(v, v))}[abs(n)]
  if n < 0: p = UOp(Ops.RECIP, p.dtype, (p,))
  return p if work is dt else cast(p, dt)


def _fuse_mulacc(a: UOp, b: UOp, acc: UOp, ctx: IselContext) -> UOp | None:
  floats = a.dtype.scalar.is_float()
  if a.dtype.scalar.is_bool(): return None  # MUL and ADD of bools are AND and OR, no multiply-add
  if not ctx.caps.fused_mulacc or (floats and not (ctx.fast_math or ctx.contract)): return None
  if ctx.lacks(UOp(Ops.MULACC, a.dtype, (a, b, acc))): return None
  return UOp(Ops.MULACC, a.dtype, (a, b, acc), FUSED if floats else None)


def _fuse_lane(m: UOp, g: UOp, acc: UOp, ctx: IselContext) -> UOp | None:
  """ADD(GEP(MUL(a, b)) {i}, acc): lane i of a vector product (a reduction unrolled along a vector)."""
  if len(g.arg) != 1 or acc.dtype.count != 1 or not acc.dtype.is_float(): return None
  lane = lambda x: UOp(Ops.GEP, x.dtype.scalar, (x,), g.arg)  # noqa: E731
  return _fuse_mulacc(lane(m.src[0]), lane(m.src[1]), acc, ctx)


def _all_true(t: UOp) -> bool:
  return (t.op is Ops.CONST and t.arg is True) or (t.op is Ops.STACK and all(x.op is Ops.CONST and x.arg is True for x in t.src))


def _equal(u: UOp, a: UOp, b: UOp, t: UOp, ctx: IselContext) -> UOp | None:
  """NOT(a != b) of vectors (seed 000's CMPEQ, as tinygrad writes ==) as one CMPEQ where the target renders it: the
  C target keeps a comparison whose users take its lanes as integers or select by it as one mask of the operands'
  width, where the two comparisons made a vector of bools between them (a histogram's (x == bin).sum(): a
  conversion of 16 lanes to bytes and back for each)."""
  if u.dtype.count == 1 or not _all_true(t): return None
  eq = UOp(Ops.CMPEQ, u.dtype, (a, b))
  return None if ctx.lacks(eq, a.dtype) else eq


ISEL_RULES = Rules([
  (Pat(Ops.CMPNE, src=(Pat(Ops.CMPNE, src=(Pat.var("a"), Pat.var("b"))), Pat.var("t")), name="u"), _equal),
  (Pat((Ops.IDIV, Ops.MOD), src=(Pat.var("x"), Pat.cvar("d")), name="u"), _div_by_const),
  (Pat((Ops.IDIV, Ops.MOD), src=(Pat.var("x"), Pat((Ops.STACK, Ops.CONST), name="d")), name="u"),
   lambda u, x, d, ctx: _vector_div(u, x, d, ctx) if x.dtype.count > 1 else None),
  (Pat((Ops.FLOORDIV, Ops.FLOORMOD), src=(Pat.var("x"), Pat((Ops.STACK, Ops.CONST), name="d")), name="u"), _vector_floor_div),
  (Pat(Ops.ADD, src=(Pat(Ops.MUL, src=(Pat.var("a"), Pat.var("b"))), Pat.var("acc")), commutative=True),
   lambda a, b, acc, ctx: _fuse_mulacc(a, b, acc, ctx)),
  (Pat(Ops.ADD, src=(Pat(Ops.GEP, src=(Pat(Ops.MUL, name="m"),), name="g"), Pat.var("acc")), commutative=True),
   lambda m, g, acc, ctx: _fuse_lane(m, g, acc, ctx)),
  (Pat(Ops.POW, src=(Pat.var("x"), Pat.var("e"))), _pow_const),
  (Pat(set(SIMPLE + TRANSCENDENTAL) | {Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD}, name="u"), _decompose),
])


def isel(sink: UOp, caps: Capabilities, fast_math: bool = False, contract: bool = False) -> UOp:
  """`sink` with every op that `caps` lacks lowered into ops it has; with `contract` (or `fast_math`) a
  float ADD(MUL(a, b), c) becomes one fused multiply-add where the target has one."""
  out = graph_rewrite(sink, ISEL_RULES, bottom_up=True, ctx=IselContext(caps, fast_math, contract))
  out = split_offsets(out, every_offset=caps.displacement)
  return narrow_index(out) if caps.index32 else out
