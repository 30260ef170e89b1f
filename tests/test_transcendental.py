"""Accuracy of the transcendental decompositions through -t c with libm's functions taken away (the
C_DECOMPOSED capability table), so the polynomial code runs here. float32: >= 10^6 inputs per function
spread over the domain (random bit patterns: every binade, subnormals included) plus the special values,
against float64 numpy rounded to float32 (correctly rounded except in rare double-rounding ties, which
an mpmath check on a subsample bounds); the bar is SPEC-NOTES's 2 ULP. SIN is checked over the whole
finite range too (Payne-Hanek beyond the Cody-Waite range), on values near multiples of pi/2 and on the
floats closest to multiples of pi in every binade (found by continued fractions, checked against mpmath).
float16/bfloat16: every bit pattern. float64: sampled, against mpmath."""
from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest

from c_harness import Call, compile_c, run_calls
from isel_harness import C_DECOMPOSED, NP, Library, elementwise, ops_in
from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.stages.isel import isel
from uopc.stages.linearize import linearize
from uopc.targets.c.render import C_PRELUDE, render_kernel
from uopc.uop import UOp

RNG = np.random.default_rng(2024)
SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 2.0, 0.5, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38,
            3.4028235e38, -3.4028235e38, 128.0, 127.99999, -149.0, -150.0, -150.00002, math.pi, 1e4, -1e4]
UNARY = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt}
MPMATH = {Ops.EXP2: lambda x: mpmath.power(2, x), Ops.LOG2: lambda x: mpmath.log(x, 2), Ops.SIN: mpmath.sin,
          Ops.SQRT: mpmath.sqrt}
FLOAT_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


@pytest.fixture(scope="module")
def lib() -> Library:
  lib = Library(C_DECOMPOSED)
  for op in UNARY:
    for dt in FLOAT_DTYPES:
      lowered = lib.add(f"{op.name.lower()}_{dt.name}", lambda x, op=op: UOp(op, x.dtype, (x,)), [dt], dt)
      assert op not in ops_in(lowered)
  for dt in FLOAT_DTYPES:
    lib.add(f"pow_{dt.name}", lambda a, b: UOp(Ops.POW, a.dtype, (a, b)), [dt, dt], dt)
  return lib


def ordered(x: np.ndarray) -> np.ndarray:
  """Float bits as integers ordered like the floats: the ULP distance of two floats is a difference."""
  bits = x.view({2: np.int16, 4: np.int32, 8: np.int64}[x.itemsize]).astype(np.int64)
  return np.where(bits < 0, -(bits & np.int64((1 << (x.itemsize * 8 - 1)) - 1)), bits)


def ulp_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
  """ULPs between got and want; 0 where both are NaN, huge where only one is."""
  err = np.abs(ordered(got) - ordered(want))
  nan_got, nan_want = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
  return np.where(nan_got & nan_want, 0, np.where(nan_got != nan_want, 2**40, err))


def hard_significands(e: int, bits: int) -> list[int]:
  """Significands M (2^(bits-1) <= M < 2^bits) that bring M * 2^e closest to a multiple of pi, best first:
  M * 2^e / pi is near an integer when M is a continued fraction denominator of frac(2^e / pi) (a
  convergent or one of the semiconvergents before it) or a small multiple of one."""
  with mpmath.workprec(2 * bits + abs(e) + 64): man, exp = (mpmath.mpf(2) ** e / mpmath.pi).man_exp
  alpha = Fraction(man) * Fraction(2) ** exp
  alpha -= math.floor(alpha)
  lo, hi = 1 << (bits - 1), 1 << bits
  dens, (q0, q1), a = set(), (1, 0), alpha
  while a and q1 < hi:
    step = math.floor(a)
    dens |= {q0 + i * q1 for i in range(max(1, step - 8), step + 1)}
    q0, q1, a = q1, step * q1 + q0, (1 / (a - step) if a != step else 0)
  found = {j * q for q in dens for j in range(-(-lo // q), -(-lo // q) + 4) if j * q < hi}
  return sorted(found, key=lambda m: abs(m * alpha - round(m * alpha)))


def near_pi_multiples(bits: int, exponents, per_binade: int, dt) -> np.ndarray:
  """The hardest inputs for the reduction by pi in each binade, with their neighbours, both signs."""
  x = np.array([m * 2.0 ** e for e in exponents for m in hard_significands(e, bits)[:per_binade]], dt)
  x = np.concatenate([x, np.nextafter(x, dt(np.inf)), np.nextafter(x, dt(0))])
  return np.concatenate([x, -x])


def float32_sin_inputs(bits: np.ndarray) -> np.ndarray:
  """Every binade (bit patterns), the Cody-Waite range densely, the top binade, values near multiples of
  pi/2 (rounded, then 1 and 2 ULP either side) across the range and the hardest cases of each binade."""
  half_pis = (np.round(2.0 ** RNG.uniform(0, 127, 40_000)) * (math.pi / 2)).astype(np.float32)
  up, down = (np.nextafter(half_pis, np.float32(s * np.inf)) for s in (1, -1))
  near = [half_pis, up, down, np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))]
  top = RNG.integers(0x7F000000, 0x7F800000, 20_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
  return np.concatenate([bits[:500_000], RNG.uniform(-1e4, 1e4, 300_000).astype(np.float32),
                         RNG.uniform(-4, 4, 100_000).astype(np.float32), *near, top, -top,
                         near_pi_multiples(24, range(-22, 105), 3, np.float32)])


def float32_inputs(op: Ops) -> np.ndarray:
  bits = RNG.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
  if op is Ops.SIN: x = float32_sin_inputs(bits)
  elif op is Ops.EXP2: x = np.concatenate([RNG.uniform(-151, 129, 900_000).astype(np.float32), bits[:100_000]])
  else: x = bits
  return np.concatenate([x, np.array(SPECIALS, np.float32)])


def reference(op: Ops, x: np.ndarray, dt) -> np.ndarray:
  with np.errstate(all="ignore"): return UNARY[op](x.astype(np.float64)).astype(NP[dt])


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
def test_float32_within_two_ulp(lib, op):
  x = float32_inputs(op)
  got = lib(f"{op.name.lower()}_float32", x)
  err = ulp_errors(got, reference(op, x, dtypes.float32))
  worst = int(np.argmax(err))
  assert err.max() <= 2, f"{op.name}({x[worst]!r}) = {got[worst]!r}: {err.max()} ULP"


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
def test_float32_against_mpmath_subsample(lib, op):
  x = float32_inputs(op)[::997]
  x = x[np.isfinite(x) & ((x > 0) | (op in (Ops.EXP2, Ops.SIN)))]
  got = lib(f"{op.name.lower()}_float32", x)
  with mpmath.workdps(40): want = np.array([float(MPMATH[op](mpmath.mpf(float(v)))) for v in x]).astype(np.float32)
  assert ulp_errors(got, want).max() <= 2


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
def test_half_types_every_bit_pattern(lib, op, dt):
  x = np.arange(2**16, dtype=np.uint16).view(NP[dt])
  got = lib(f"{op.name.lower()}_{dt.name}", x)
  assert ulp_errors(got, reference(op, x.astype(np.float32), dt)).max() <= 1  # computed in float32, rounded once


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
def test_float64_sampled(lib, op):
  bits = RNG.integers(0, 2**63, 3000, dtype=np.uint64) | (RNG.integers(0, 2, 3000, dtype=np.uint64) << np.uint64(63))
  x = bits.view(np.float64)
  if op is Ops.SIN: x = np.concatenate([RNG.uniform(-1e4, 1e4, 1500), x[:1500]])
  if op is Ops.EXP2: x = RNG.uniform(-1080, 1030, 3000)
  x = np.concatenate([x, np.array(SPECIALS, np.float64)])
  got = lib(f"{op.name.lower()}_float64", x)
  def ref(v: float) -> float:
    if not math.isfinite(v) or (op in (Ops.LOG2, Ops.SQRT) and v <= 0):
      with np.errstate(all="ignore"): return float(UNARY[op](np.float64(v)))
    with mpmath.workdps(40): return float(MPMATH[op](mpmath.mpf(v)))
  assert ulp_errors(got, np.array([ref(v) for v in x])).max() <= 2


def test_special_values(lib):
  x = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, -1.0, 1e-45], np.float32)
  sqrt, log2, exp2, sin = (lib(f"{n}_float32", x) for n in ("sqrt", "log2", "exp2", "sin"))
  assert np.signbit(sqrt[1]) and sqrt[1] == 0 and sqrt[2] == math.inf and np.isnan(sqrt[[3, 4, 5]]).all()
  assert log2[0] == log2[1] == -math.inf and log2[2] == math.inf and np.isnan(log2[[3, 4, 5]]).all() and log2[6] == -149
  assert exp2[0] == exp2[1] == 1 and exp2[2] == math.inf and exp2[3] == 0 and np.isnan(exp2[4])
  assert np.signbit(sin[1]) and sin[1] == 0 and np.isnan(sin[[2, 3, 4]]).all() and sin[6] == np.float32(1e-45)


def test_exp2_every_float32_at_the_overflow_and_underflow_edges(lib):
  """Every float32 in [127, 129] and [-152, -148] (inputs above 128 are clamped to it, those below -150
  replaced by 0 and their results by 0, and the scale by 2^q is split in two around these edges),
  with NaN and +inf coming out of the arithmetic: within 1 ULP, inf from 128 up, 0 from -150 down."""
  edges = [np.arange(np.float32(a).view(np.uint32), np.float32(b).view(np.uint32), dtype=np.uint32).view(np.float32)
           for a, b in ((127.0, 129.0), (-148.0, -152.0))]
  x = np.concatenate(edges + [np.array([math.nan, -math.nan, math.inf, -math.inf, 3.4028235e38, -3.4028235e38], np.float32)])
  got = lib("exp2_float32", x)
  assert ulp_errors(got, reference(Ops.EXP2, x, dtypes.float32)).max() <= 1
  assert np.isnan(got[-6:-4]).all() and (got[x >= 128] == math.inf).all() and (got[x <= -150] == 0).all()
  for dt in (dtypes.float32, dtypes.float64):  # the rounding adds a constant: no float-to-int CAST, undefined for NaN
    lowered = isel(UOp(Ops.SINK, dtypes.void, (UOp(Ops.EXP2, dt, (UOp(Ops.DEFINE_VAR, dt, (), ("x", -1.0, 1.0)),)),)), C_DECOMPOSED)
    assert not [u for u in lowered.toposort() if u.op is Ops.CAST and u.dtype.is_int()]


def test_pow_follows_c(lib):
  vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, math.inf, -math.inf, math.nan, 1e-3, 1e30, 7.0]
  a, b = (g.ravel() for g in np.meshgrid(np.array(vals), np.array(vals)))
  for dt in (dtypes.float32, dtypes.float64):
    got = lib(f"pow_{dt.name}", a.astype(NP[dt]), b.astype(NP[dt]))
    with np.errstate(all="ignore"): want = np.power(a.astype(NP[dt]), b.astype(NP[dt]))
    # float64 has no wider type: its error grows with |b * log2(a)| (documented in transcendental.py)
    with np.errstate(all="ignore"): growth = np.nan_to_num(np.abs(b * np.log2(np.abs(a))), posinf=0, nan=0)
    allowed = 2 + (4 * growth if dt is dtypes.float64 else 0)
    bad = np.flatnonzero(ulp_errors(got, want) > allowed)
    assert bad.size == 0, [(a[i], b[i], got[i], want[i]) for i in bad[:5]]
  x, y = RNG.uniform(0, 50, 20000).astype(np.float32), RNG.uniform(-20, 20, 20000).astype(np.float32)
  got = lib("pow_float32", x, y)
  with np.errstate(all="ignore"): want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
  assert ulp_errors(got, want).max() <= 1


def mpmath_sin(x: np.ndarray) -> np.ndarray:
  with mpmath.workdps(40): return np.array([float(mpmath.sin(mpmath.mpf(float(v)))) for v in x]).astype(x.dtype)


def test_sin_closest_to_multiples_of_pi(lib):
  """The floats nearest to multiples of pi, where the reduction cancels most: float32 in every binade from
  2 to FLT_MAX (x / pi comes within 2^-29.9 of an integer, at 16367173 * 2^73), float64 in every
  eighth binade up to DBL_MAX; the reduced argument is their whole result."""
  x32 = near_pi_multiples(24, range(-22, 105), 2, np.float32)
  assert np.float32(16367173 * 2.0 ** 73) in x32
  assert ulp_errors(lib("sin_float32", x32), mpmath_sin(x32)).max() <= 2
  x64 = near_pi_multiples(53, range(-51, 972, 8), 1, np.float64)
  assert np.abs(mpmath_sin(x64)).min() < 2.0 ** -55  # truly hard: far closer than a float64 ULP of x
  assert ulp_errors(lib("sin_float64", x64), mpmath_sin(x64)).max() <= 2


def test_sin_reduction_table_is_one_over_two_pi():
  from uopc.stages.transcendental import _PH_LEAD, _Format, _inv_2pi_words
  for dt in (dtypes.float32, dtypes.float64):
    words = _inv_2pi_words(_Format(dt))
    with mpmath.workprec(32 * len(words) + 64): want = int(mpmath.floor(mpmath.mpf(2) ** (32 * len(words) - _PH_LEAD) / (2 * mpmath.pi)))
    assert sum(w << (32 * (len(words) - 1 - i)) for i, w in enumerate(words)) == want


def test_sin_every_lane_free_of_undefined_behaviour():
  """Both reductions run on every lane and WHERE picks one, so the unused one must be harmless for any
  input: built with AddressSanitizer and UBSan, which stop at the first report."""
  kernels = [(f"sin_{dt.name}", isel(elementwise(lambda x: UOp(Ops.SIN, x.dtype, (x,)), [dt], dt), C_DECOMPOSED))
             for dt in (dtypes.float32, dtypes.float64)]
  path = compile_c(C_PRELUDE + "\n".join(render_kernel(linearize(k), name).source for name, k in kernels), sanitize=True)
  with np.errstate(over="ignore"):
    calls = [Call(name, (np.zeros(len(x), x.dtype), x, len(x))) for name, x in
             (("sin_float32", np.array(SPECIALS + [1e-30, 12800.0, 1e30], np.float32)),
              ("sin_float64", np.array(SPECIALS + [5e-324, 1e20, 1e300, -1.7976931348623157e308], np.float64)))]
  for (out, x, _), ref in zip((args for args in run_calls(path, calls, sanitize=True)), (np.float32, np.float64)):
    assert ulp_errors(out, mpmath_sin(np.where(np.isfinite(x), x, 0)).astype(ref))[np.isfinite(x)].max() <= 2
