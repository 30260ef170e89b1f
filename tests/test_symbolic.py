"""Symbolic simplification, rule by rule: every rewrite is checked by evaluating the expression before
and after over every combination of its leaves' values (a numpy reference evaluator with C integer
semantics, written here independently of uopc), plus hand-computed constant folds and a hypothesis
test of random index expressions."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from uopc.dtype import PtrDType, dtypes
from uopc.ops import AxisType, Ops
from uopc.symbolic import simplify
from uopc.uop import UOp

I, B, F = dtypes.index, dtypes.bool, dtypes.float32


# ---- the reference evaluator ----------------------------------------------------------------------------
NP_DTYPE = {I: np.int64, dtypes.int64: np.int64, dtypes.int32: np.int32, dtypes.int8: np.int8,
            dtypes.uint8: np.uint8, dtypes.uint32: np.uint32, B: np.bool_}


def leaves(u: UOp) -> list[UOp]:
  return sorted((n for n in u.toposort() if n.op in (Ops.DEFINE_VAR, Ops.RANGE)), key=repr)


def leaf_values(leaf: UOp) -> range:
  if leaf.op is Ops.DEFINE_VAR: return range(leaf.arg[1], leaf.arg[2] + 1)
  return range(leaf.src[0].arg)  # RANGE over a constant bound


def c_div(a, b):
  """Truncating division from numpy's fmod (C remainder): a - fmod(a, b) is an exact multiple of b."""
  return (a - np.fmod(a, b)) // b


def evaluate(u: UOp, env: dict) -> np.ndarray:
  """`u` over arrays of leaf values, in the numpy dtype of each node (integer ops wrap like C)."""
  vals: dict = {}
  for n in u.toposort():
    s = [vals[x] for x in n.src]
    dt = NP_DTYPE.get(n.dtype)
    if n.op in (Ops.DEFINE_VAR, Ops.RANGE): v = env[n]
    elif n.op is Ops.CONST: v = np.array(n.arg, dtype=dt)
    elif n.op is Ops.ADD: v = s[0] + s[1]
    elif n.op is Ops.SUB: v = s[0] - s[1]
    elif n.op is Ops.MUL: v = s[0] * s[1]
    elif n.op is Ops.IDIV: v = c_div(s[0], s[1])
    elif n.op is Ops.MOD: v = np.fmod(s[0], s[1])
    elif n.op is Ops.FLOORDIV: v = np.floor_divide(s[0], s[1])
    elif n.op is Ops.FLOORMOD: v = np.mod(s[0], s[1])
    elif n.op is Ops.MAX: v = np.maximum(s[0], s[1])
    elif n.op is Ops.CMPLT: v = s[0] < s[1]
    elif n.op is Ops.CMPNE: v = s[0] != s[1]
    elif n.op is Ops.AND: v = s[0] & s[1]
    elif n.op is Ops.OR: v = s[0] | s[1]
    elif n.op is Ops.XOR: v = s[0] ^ s[1]
    elif n.op is Ops.WHERE: v = np.where(s[0], s[1], s[2])
    else: raise NotImplementedError(n.op)
    vals[n] = np.asarray(v).astype(dt)
  return vals[u]


def grid(us: list[UOp]) -> dict:
  ls = sorted({leaf for u in us for leaf in leaves(u)}, key=repr)
  mesh = np.meshgrid(*[np.array(leaf_values(leaf), dtype=np.int64) for leaf in ls], indexing="ij") if ls else []
  return {leaf: m.ravel().astype(NP_DTYPE[leaf.dtype]) for leaf, m in zip(ls, mesh)}


def assert_same_values(before: UOp, after: UOp) -> None:
  env = grid([before])
  assert set(leaves(after)) <= set(leaves(before))
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal(np.broadcast_to(evaluate(after, env), evaluate(before, env).shape), evaluate(before, env))


def simplified(before: UOp) -> UOp:
  """simplify(before), checked to keep the value for every leaf assignment."""
  after = simplify(before)
  assert_same_values(before, after)
  return after


# ---- builders ----------------------------------------------------------------------------------------------
def var(name: str, lo: int, hi: int, dt=I) -> UOp: return UOp(Ops.DEFINE_VAR, dt, (), (name, lo, hi))
def rng(n: int, axis: int = 0) -> UOp: return UOp(Ops.RANGE, I, (c(n),), (axis, AxisType.LOOP))
def c(v, dt=I) -> UOp: return UOp.const(dt, v)
def add(a, b): return a.alu(Ops.ADD, b)
def mul(a, b): return a.alu(Ops.MUL, b)
def idiv(a, b): return a.alu(Ops.IDIV, b)
def mod(a, b): return a.alu(Ops.MOD, b)
def lt(a, b): return a.alu(Ops.CMPLT, b)
def where(p, a, b): return p.alu(Ops.WHERE, a, b)


X = var("x", -9, 9)     # spans both signs
N = var("n", 0, 30)     # non-negative
Y = var("y", 0, 7)
R4, R3 = rng(4, 0), rng(3, 1)


# ---- constant folding (expected values by hand or numpy) ------------------------------------------------
def fold(op: Ops, dt, *args, src_dt=None):
  src_dt = src_dt or dt
  return simplify(UOp(op, dt, tuple(c(a, src_dt) for a in args)))


@pytest.mark.parametrize("op,dt,args,expected", [
  (Ops.ADD, dtypes.int32, (2**31 - 1, 1), -2**31),
  (Ops.MUL, dtypes.uint8, (200, 2), 144),
  (Ops.SUB, dtypes.uint8, (1, 2), 255),
  (Ops.NEG, dtypes.int8, (-128,), -128),
  (Ops.IDIV, I, (-7, 2), -3), (Ops.IDIV, I, (7, -2), -3), (Ops.MOD, I, (-7, 2), -1), (Ops.MOD, I, (7, -2), 1),
  (Ops.FLOORDIV, I, (-7, 2), -4), (Ops.FLOORMOD, I, (-7, 2), 1),
  (Ops.SHR, dtypes.int8, (-8, 1), -4), (Ops.SHL, dtypes.int8, (1, 7), -128), (Ops.SHR, dtypes.uint8, (200, 3), 25),
  (Ops.AND, dtypes.int8, (-1, 12), 12), (Ops.OR, dtypes.uint8, (0xF0, 0x0F), 255), (Ops.XOR, I, (5, 3), 6),
  (Ops.MAX, I, (-3, 2), 2), (Ops.MULACC, dtypes.int8, (16, 16, 1), 1),
  (Ops.AND, B, (True, False), False), (Ops.OR, B, (True, False), True), (Ops.XOR, B, (True, True), False),
])
def test_fold_int(op, dt, args, expected):
  out = fold(op, dt, *args)
  assert out.op is Ops.CONST and out.arg == expected and type(out.arg) is type(expected)


@pytest.mark.parametrize("op,args,expected", [
  (Ops.CMPLT, (-1, 0), True), (Ops.CMPNE, (3, 3), False), (Ops.CMPGT, (2, 1), True), (Ops.CMPGE, (1, 1), True),
  (Ops.CMPLE, (2, 1), False), (Ops.CMPEQ, (4, 4), True),
])
def test_fold_int_comparisons(op, args, expected):
  out = fold(op, B, *args, src_dt=I)
  assert out.op is Ops.CONST and out.arg is expected


@pytest.mark.parametrize("op,dt,args", [(Ops.IDIV, I, (1, 0)), (Ops.MOD, I, (1, 0)), (Ops.SHL, dtypes.int8, (1, 8)),
                                        (Ops.SHR, dtypes.int32, (1, -1)), (Ops.POW, F, (2.0, 3.0))])
def test_undefined_or_unfolded_ops_stay(op, dt, args):
  assert fold(op, dt, *args).op is op


f32 = np.float32


@pytest.mark.parametrize("op,dt,args,expected", [
  (Ops.ADD, F, (0.1, 0.2), float(f32(0.1) + f32(0.2))),
  (Ops.MUL, F, (1.1, 1.1), float(f32(1.1) * f32(1.1))),
  (Ops.DIV, F, (1.0, 3.0), float(f32(1.0) / f32(3.0))),
  (Ops.MUL, dtypes.float16, (300.0, 300.0), math.inf),
  (Ops.RECIP, F, (0.0,), math.inf), (Ops.RECIP, F, (-0.0,), -math.inf), (Ops.RECIP, F, (4.0,), 0.25),
  (Ops.LOG2, F, (0.0,), -math.inf), (Ops.LOG2, F, (8.0,), 3.0), (Ops.EXP2, F, (200.0,), math.inf),
  (Ops.EXP2, F, (-3.0,), 0.125), (Ops.SQRT, F, (2.0,), float(np.sqrt(f32(2.0)))), (Ops.SQRT, F, (-0.0,), -0.0),
  (Ops.TRUNC, F, (-0.5,), -0.0), (Ops.TRUNC, F, (2.75,), 2.0), (Ops.NEG, F, (0.0,), -0.0),
  (Ops.MAX, F, (math.nan, 1.0), math.nan), (Ops.MAX, F, (1.0, math.nan), math.nan), (Ops.MAX, F, (-2.0, 1.5), 1.5),
  (Ops.SQRT, F, (-1.0,), math.nan), (Ops.SIN, F, (math.inf,), math.nan), (Ops.LOG2, F, (-1.0,), math.nan),
  (Ops.MULACC, F, (0.1, 0.1, 0.1), float(f32(f32(0.1) * f32(0.1)) + f32(0.1))),
])
def test_fold_float(op, dt, args, expected):
  out = fold(op, dt, *args)
  assert out.op is Ops.CONST
  if math.isnan(expected): assert math.isnan(out.arg)
  else: assert out.arg == expected and math.copysign(1, out.arg) == math.copysign(1, expected)


@pytest.mark.parametrize("op,args,expected", [
  (Ops.CMPLT, (math.nan, 1.0), False), (Ops.CMPNE, (math.nan, math.nan), True),
  (Ops.CMPGE, (math.nan, 1.0), True),  # seed 000: CMPGE is NOT(CMPLT)
  (Ops.CMPLT, (-0.0, 0.0), False),
])
def test_fold_float_comparisons(op, args, expected):
  assert fold(op, B, *args, src_dt=F).arg is expected


def test_max_of_signed_zeros_is_not_folded():
  assert fold(Ops.MAX, F, 0.0, -0.0).op is Ops.MAX


@pytest.mark.parametrize("value,src,dst,expected", [
  (3.7, F, dtypes.int32, 3), (-3.7, F, dtypes.int32, -3), (300, I, dtypes.uint8, 44), (-1, dtypes.int32, dtypes.uint32, 2**32 - 1),
  (16777217, dtypes.int32, F, 16777216.0), (0.5, F, B, True), (0, I, B, False), (True, B, dtypes.int32, 1),
  (1e-46, dtypes.float64, F, 0.0), (65520.0, F, dtypes.float16, math.inf),
])
def test_fold_cast(value, src, dst, expected):
  out = simplify(UOp(Ops.CAST, dst, (c(value, src),)))
  assert out.op is Ops.CONST and out.arg == expected and type(out.arg) is type(expected)


@pytest.mark.parametrize("value,src,dst", [(1e10, F, dtypes.int32), (math.nan, F, I), (-1.0, F, dtypes.uint8),
                                           (2**60 + 1, I, F)])
def test_undefined_or_double_rounded_casts_stay(value, src, dst):
  assert simplify(UOp(Ops.CAST, dst, (c(value, src),))).op is Ops.CAST


# ---- identities ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("before,expected", [
  (add(X, c(0)), X), (add(c(0), X), X), (mul(X, c(1)), X), (mul(c(1), X), X), (mul(X, c(0)), c(0)),
  (idiv(X, c(1)), X), (mod(X, c(1)), c(0)), (X.alu(Ops.SUB, X), c(0)), (add(X, mul(X, c(-1))), c(0)),
  (X.alu(Ops.MAX, X), X), (where(lt(X, Y), X, X), X), (where(c(True, B), X, Y), X), (where(c(False, B), X, Y), Y),
  (lt(X, X), c(False, B)), (X.alu(Ops.CMPNE, X), c(False, B)),
  (X.alu(Ops.AND, c(0)), c(0)), (X.alu(Ops.OR, c(0)), X), (X.alu(Ops.XOR, c(0)), X), (X.alu(Ops.AND, X), X),
])
def test_int_identities(before, expected):
  assert simplified(before) is expected


def test_identities_need_int_where_floats_differ():
  fx = var("f", 0, 1, F)  # stands for any float
  assert simplify(add(fx, c(0.0, F))).op is Ops.ADD      # -0.0 + 0.0 is 0.0
  assert simplify(mul(fx, c(0.0, F))).op is Ops.MUL      # NaN * 0 is NaN
  assert simplify(fx.alu(Ops.CMPNE, fx)).op is Ops.CMPNE  # NaN != NaN
  assert simplify(mul(fx, c(1.0, F))) is fx


def test_bool_and_or_with_constants():
  p = lt(X, Y)
  for before, expected in [(p.alu(Ops.AND, c(True, B)), p), (p.alu(Ops.AND, c(False, B)), c(False, B)),
                           (p.alu(Ops.OR, c(False, B)), p), (p.alu(Ops.OR, c(True, B)), c(True, B)),
                           (c(True, B).alu(Ops.AND, p), p)]:
    assert simplified(before) is expected


def test_a_padded_mask_is_its_condition():
  """WHERE(p, True, False), a padded mask of True (tinygrad's pad with a value), is p; the other way round is not."""
  p = lt(X, Y)
  assert simplified(where(p, c(True, B), c(False, B))) is p
  assert simplified(where(p, c(False, B), c(True, B))).op is Ops.WHERE


# ---- ranges decide values ----------------------------------------------------------------------------------
@pytest.mark.parametrize("before,expected", [
  (lt(Y, c(8)), True), (lt(Y, c(0)), False), (lt(R4, c(4)), True), (lt(c(3), R4), False),
  (Y.alu(Ops.CMPNE, c(-1)), True), (lt(add(R4, mul(R3, c(4))), c(12)), True),
])
def test_comparisons_decided_by_min_max(before, expected):
  assert simplified(before) is c(expected, B)


def test_undecided_comparison_stays():
  assert simplified(lt(Y, c(7))).op is Ops.CMPLT


def test_node_pinned_by_min_max_becomes_const():
  assert simplified(X.alu(Ops.MAX, c(9))) is c(9)
  assert simplified(where(lt(Y, c(100)), Y, X)) is Y


def test_float_comparison_is_not_decided_by_min_max():
  # MAX(f, 1.0) lies in [1, inf] unless f is NaN, which a range cannot say: the comparison stays open
  fx = UOp(Ops.LOAD, F, (UOp(Ops.INDEX, F.ptr(), (UOp(Ops.PARAM, F.ptr(), (), (0, "a")), R4)),))
  cmp = lt(c(0.5, F), fx.alu(Ops.MAX, c(1.0, F)))
  assert cmp.min_max == (False, True) and simplify(cmp) is cmp


# ---- constants gathered -------------------------------------------------------------------------------------
def test_constants_move_right_and_reassociate():
  assert simplified(add(c(3), X)) is add(X, c(3))
  assert simplified(add(add(X, c(3)), c(5))) is add(X, c(8))
  assert simplified(add(add(c(3), X), c(-3))) is X
  assert simplified(mul(mul(X, c(3)), c(5))) is mul(X, c(15))
  assert simplified(add(add(X, c(3)), Y)) is add(add(X, Y), c(3))
  assert simplified(add(add(X, c(2)), add(Y, c(3)))).src[1] is c(5)


def test_reassociation_wraps_like_the_machine():
  w = var("w", -100, 100, dtypes.int8)
  out = simplified(add(add(w, c(100, dtypes.int8)), c(100, dtypes.int8)))
  assert out is add(w, c(-56, dtypes.int8))


def test_constant_products_distribute_over_constant_sums():
  # tinygrad's interpolate indexes ((r - 126) * -1 + 1) * -1 + 128: r + 1
  r = rng(128, 2)
  assert simplified(add(mul(add(mul(add(r, c(-126)), c(-1)), c(1)), c(-1)), c(128))) is add(r, c(1))
  assert simplified(mul(add(X, c(3)), c(5))) is add(mul(X, c(5)), c(15))
  w = var("w", -100, 100, dtypes.int8)  # wraps as the machine does: (w + 100) * 3 = 3w + 44 (mod 256)
  assert simplified(mul(add(w, c(100, dtypes.int8)), c(3, dtypes.int8))) is add(mul(w, c(3, dtypes.int8)), c(44, dtypes.int8))


def test_float_constants_are_not_reassociated():
  fx = var("f", 0, 1, F)
  before = add(add(fx, c(0.1, F)), c(0.2, F))
  assert simplify(before) is before


# ---- division and remainder --------------------------------------------------------------------------------
def test_div_mul_mod_recombine():
  for v in (X, N):
    assert simplified(add(mul(idiv(v, c(4)), c(4)), mod(v, c(4)))) is v
    assert simplified(add(mod(v, c(4)), mul(c(4), idiv(v, c(4))))) is v
  d = var("d", 1, 5)  # a divisor that can be 0 would make `before` undefined
  assert simplified(add(mul(idiv(X, d), d), mod(X, d))) is X


def test_mul_then_div_by_same_const():
  assert simplified(idiv(mul(X, c(6)), c(6))) is X
  assert simplified(mod(mul(X, c(6)), c(6))) is c(0)
  assert simplified(idiv(mul(X, c(12)), c(4))) is mul(X, c(3))
  assert simplified(idiv(mul(X, c(4)), c(12))) is idiv(X, c(3))


def test_mul_div_that_wraps_is_kept():
  big = var("b", 0, 2**40, dtypes.int32)  # b*2**30 wraps in int32
  before = idiv(mul(big, c(2**30, dtypes.int32)), c(2**30, dtypes.int32))
  assert simplify(before) is before


def test_sum_with_multiple_of_divisor():
  assert simplified(idiv(add(Y, mul(N, c(8))), c(8))) is N
  assert simplified(mod(add(Y, mul(N, c(8))), c(8))) is Y
  assert simplified(idiv(add(R4, mul(R3, c(4))), c(4))) is R3
  assert simplified(idiv(add(N, mul(Y, c(4))), c(4))) is add(idiv(N, c(4)), Y)
  assert simplified(mod(add(N, mul(Y, c(4))), c(4))) is mod(N, c(4))
  assert simplified(idiv(add(N, c(8)), c(4))) is add(idiv(N, c(4)), c(2))
  assert simplified(idiv(add(add(N, mul(Y, c(8))), R4), c(4))) is add(idiv(add(N, R4), c(4)), mul(Y, c(2)))


def test_nested_sums_open_for_a_divisor():
  """((g*2 + u)*4 + v) // 8 -> g, as Optimize's SPLITs nest an axis (the overlap shift of PADTO's third argument)."""
  g, u, v = rng(5, 2), rng(2, 3), rng(4, 4)
  nested = add(mul(add(mul(g, c(2)), u), c(4)), v)
  assert simplified(idiv(nested, c(8))) is g
  assert simplified(mod(nested, c(8))) is add(mul(u, c(4)), v)
  kept = idiv(add(mul(add(mul(g, c(2)), u), c(3)), v), c(8))  # no summand a multiple of 8: left as written
  assert simplified(kept) is kept


def test_a_lane_below_a_block_drops_out_of_a_quotient():
  """(l*4 + u) // 32 -> l // 8 and (l*4 + u) % 32 -> (l % 8)*4 + u for u in [0, 4): the lanes of a SPLIT's UPCAST
  inside one block of the quotient then read one value (a window attention's head under its 4 upcast channels)."""
  l, u = rng(24, 2), rng(4, 3)
  e = add(mul(l, c(4)), u)
  assert simplified(idiv(e, c(32))) is idiv(l, c(8))
  assert simplified(mod(e, c(32))) is add(mul(mod(l, c(8)), c(4)), u)
  for j in range(4): assert simplified(idiv(add(mul(l, c(4)), c(j)), c(32))) is idiv(l, c(8))
  assert simplified(idiv(add(mul(add(mul(R3, c(6)), l), c(4)), u), c(32))) is idiv(add(mul(R3, c(6)), l), c(8))  # nested: opened
  crossing = idiv(add(add(mul(l, c(4)), u), c(1)), c(32))  # u + 1 reaches 4: the next block
  assert simplified(crossing) is crossing
  signed = idiv(add(mul(X, c(4)), u), c(32))  # x*4 < 0: truncation is not floor
  assert simplified(signed) is signed


def test_sum_of_mixed_sign_is_kept():
  # x in [-9, 9] and y*4 >= 0: x + y*4 crosses zero while x does, truncation breaks the identity
  before = idiv(add(X, mul(Y, c(4))), c(4))
  assert simplified(before) is before
  before = mod(add(X, mul(Y, c(4))), c(4))
  assert simplified(before) is before
  before = idiv(add(N, c(-8)), c(4))
  assert simplified(before) is before


def test_sum_of_one_negative_sign_splits():
  neg = var("m", -30, 0)
  assert simplified(idiv(add(neg, mul(Y, c(-4))), c(4))) is add(idiv(neg, c(4)), mul(Y, c(-1)))


def test_common_factor_divides_out():
  assert simplified(idiv(add(mul(X, c(4)), mul(Y, c(6))), c(8))) is idiv(add(mul(X, c(2)), mul(Y, c(3))), c(4))


def test_div_and_mod_by_range():
  assert simplified(idiv(Y, c(8))) is c(0)
  assert simplified(idiv(X, c(10))) is c(0)   # -9..9 truncates to 0
  assert simplified(mod(Y, c(8))) is Y
  assert simplified(mod(X, c(10))) is X
  assert simplified(idiv(add(Y, c(16)), c(8))) is c(2)
  assert simplified(mod(add(Y, c(16)), c(8))) is Y
  assert simplified(idiv(Y, c(7))).op is Ops.IDIV
  assert simplified(mod(Y, c(7))).op is Ops.MOD


W = var("w", -100, 100)


def test_nested_division():
  assert simplified(idiv(idiv(W, c(4)), c(3))) is idiv(W, c(12))
  assert simplified(idiv(idiv(N, c(2)), c(5))) is idiv(N, c(10))


def test_mod_then_div():
  assert simplified(idiv(mod(W, c(12)), c(4))) is mod(idiv(W, c(4)), c(3))
  assert simplified(idiv(mod(W, c(4)), c(4))) is c(0)
  assert simplified(idiv(mod(X, c(12)), c(4))) is idiv(X, c(4))  # |x| < 12: the mod goes first


def test_nested_mod():
  assert simplified(mod(mod(X, c(4)), c(8))) is mod(X, c(4))
  assert simplified(mod(mod(X, c(8)), c(4))) is mod(X, c(4))
  assert simplified(mod(mod(X, c(4)), c(4))) is mod(X, c(4))
  before = mod(mod(X, c(8)), c(6))
  assert simplified(before) is before


def test_mod_reduces_coefficients_modulo_the_divisor():
  """(r + 10*i) % 9 is (r + i) % 9, and over r, i < 5 just r + i: tinygrad's arange (a window over a
  tiled row) indexes this way. Not where a sum may be negative (truncation is not floor there)."""
  r, i = rng(5, 1), rng(5, 0)
  assert simplified(mod(add(r, mul(i, c(10))), c(9))) is add(r, i)
  r8, i8 = rng(8, 1), rng(8, 0)
  assert simplified(mod(add(r8, mul(i8, c(20))), c(9))) is mod(add(r8, mul(i8, c(2))), c(9))
  assert simplified(mod(add(mul(i, c(9)), c(12)), c(9))) is c(3)
  a = var("a", -4, 4)
  before = mod(add(r, mul(a, c(10))), c(9))
  assert simplified(before) is before


def test_mod_by_negative_const():
  assert simplified(mod(X, c(-4))) is mod(X, c(4))


# ---- selects and gates ---------------------------------------------------------------------------------------
def test_nested_where_combines():
  a, b = lt(X, c(2)), lt(Y, c(3))
  assert simplified(where(a, where(b, X, Y), Y)) is where(a.alu(Ops.AND, b), X, Y)
  assert simplified(where(a, X, where(b, X, Y))) is where(a.alu(Ops.OR, b), X, Y)


PTR = PtrDType.make(F)
BUF = UOp(Ops.PARAM, PTR, (), (0, "a"))
IDX = UOp(Ops.INDEX, PTR, (BUF, R4))


def test_always_true_gate_is_dropped():
  ld = UOp(Ops.LOAD, F, (IDX, c(0.0, F), lt(R4, c(4))))
  assert simplify(ld) is UOp(Ops.LOAD, F, (IDX,))
  st = UOp(Ops.STORE, dtypes.void, (IDX, c(1.0, F), lt(R4, c(10))))
  assert simplify(st) is UOp(Ops.STORE, dtypes.void, (IDX, c(1.0, F)))


def test_always_false_gate_gives_alt():
  ld = UOp(Ops.LOAD, F, (IDX, c(2.5, F), lt(R4, c(0))))
  assert simplify(ld) is c(2.5, F)


def test_undecided_gate_stays():
  ld = UOp(Ops.LOAD, F, (IDX, c(0.0, F), lt(R4, c(3))))
  st = UOp(Ops.STORE, dtypes.void, (IDX, c(1.0, F), lt(R4, c(2))))
  assert simplify(ld) is ld and simplify(st) is st


def test_end_keeps_its_range():
  body = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, PTR, (BUF, add(rng(1, 5), c(0)))), c(1.0, F)))
  end = UOp(Ops.END, dtypes.void, (body, rng(1, 5)))
  out = simplify(end)
  assert out.src[1] is rng(1, 5) and out.src[0].src[0].src[1] is c(0)


def test_deep_index_chain():
  # far deeper than Python's recursion limit (the engine's own 100k-node tests are in test_rewrite.py)
  u = N
  for _ in range(20_000): u = add(u, c(1))
  assert simplify(u) is add(N, c(20_000))


# ---- random index expressions ---------------------------------------------------------------------------------
LEAVES = [var("a", -4, 4), var("b", 0, 5), rng(3, 0), rng(4, 1), var("s", -6, -1)]


def tree_size(u: UOp) -> int:
  """Nodes counted as written (a shared subexpression once per use): what a rule set that only
  shrinks or reshapes its match can promise, since a shared node stays for its other users."""
  size: dict = {}
  for n in u.toposort(): size[n] = 1 + sum(size[s] for s in n.src)
  return size[u]


def index_exprs():
  leaf = st.sampled_from(LEAVES) | st.integers(-6, 12).map(c)
  pos = st.integers(1, 9).map(c)
  def extend(sub):
    return (st.tuples(sub, sub).map(lambda t: add(*t)) | st.tuples(sub, sub).map(lambda t: mul(*t))
            | st.tuples(sub, st.integers(-3, 6).map(c)).map(lambda t: mul(*t))
            | st.tuples(sub, pos).map(lambda t: idiv(*t)) | st.tuples(sub, pos).map(lambda t: mod(*t))
            | st.tuples(sub, sub).map(lambda t: t[0].alu(Ops.MAX, t[1]))
            | st.tuples(sub, sub, sub, sub).map(lambda t: where(lt(t[0], t[1]), t[2], t[3]))
            | st.tuples(sub, pos).map(lambda t: t[0].alu(Ops.FLOORDIV, t[1])) | st.tuples(sub, pos).map(lambda t: t[0].alu(Ops.FLOORMOD, t[1]))
            # clamps: a WHERE choosing between the two values it compares (either order, either branch)
            | st.tuples(sub, sub, st.integers(0, 3)).map(lambda t: _clamp_like(*t)))
  return st.recursive(leaf, extend, max_leaves=12)


def _clamp_like(x: UOp, y: UOp, k: int) -> UOp:
  cond = lt(x, y) if k < 2 else lt(y, x)
  return where(cond, y, x) if k % 2 == 0 else where(cond, x, y)


@settings(max_examples=300, deadline=None)
@given(index_exprs())
def test_random_index_expressions(expr):
  after = simplified(expr)
  assert tree_size(after) <= tree_size(expr)


@settings(max_examples=400, deadline=None)
@given(index_exprs())
def test_random_index_expressions_stay_in_their_range(expr):
  """min_max is sound: every node's value, at every leaf assignment, lies in [vmin, vmax] (clamps narrowed
  through their WHERE, floor divisions by positive constants included)."""
  env = grid([expr])
  for n in expr.toposort():
    lo, hi = n.min_max
    with np.errstate(all="ignore"):
      v = evaluate(n, env)
    if n.dtype is B or lo is None: continue
    assert lo <= v.min() and v.max() <= hi, (n, lo, hi, v.min(), v.max())


def test_a_clamp_narrows_the_range():
  x = add(var("x", -50, 50), c(0))
  clamped = where(lt(c(10), where(lt(x, c(0)), c(0), x)), c(10), where(lt(x, c(0)), c(0), x))
  assert clamped.min_max == (0, 10)
  assert simplify(clamped.alu(Ops.FLOORDIV, c(4))).op is Ops.IDIV and clamped.alu(Ops.FLOORDIV, c(4)).min_max == (0, 2)
