"""EXP2, LOG2, SIN, SQRT and POW built from the elementwise primitives (ADD, MUL, CMPLT, CMPNE, WHERE,
TRUNC, CAST, BITCAST, shifts and masks), for targets without an accurate instruction.

float32 and float64 are computed in their own precision, without relying on a fused multiply-add, so
the same code is accurate on every target; float16 and bfloat16 are computed in float32 and rounded
once. Accuracy (float32, checked by tests/test_transcendental.py over >= 10^6 inputs per function):
EXP2, LOG2, SQRT within 1 ULP of the correctly rounded result over the whole finite domain, SIN within
2 ULP over the whole finite domain (measured: at most 2 ULP over 4*10^7 random bit patterns, at most 1
on the floats closest to multiples of pi in every binade), IEEE special values as C's libm gives them.
float64 SIN: at most 2 ULP against mpmath over 10^5 inputs of every magnitude and on near-multiples of
pi up to DBL_MAX. POW follows C's pow for every special case; it is computed as EXP2(b * LOG2(|a|)) in
float64 for float32 inputs (when the target has float64), which makes it accurate to 1 ULP; in float64
itself its relative error grows with |b * log2(a)| (about |b * log2 a| * 2^-53).

The approach follows SLEEF (and tinygrad's decompositions): range reduction by exponent manipulation
or Cody-Waite splitting of pi into pieces whose products with the quadrant are exact, then a
minimax polynomial. SIN of large arguments (|x| >= 12800 in float32, 3 * 2^26 in float64) is reduced
by Payne-Hanek instead: x's integer significand times a window of the bits of 1/(2 pi), in exact
32-bit-word integer arithmetic (uint64 MUL/ADD/SHR/AND), gives x / pi mod 2 to within 2^-71 (float32)
or 2^-138 (float64), far below the closest approach of a float to a multiple of pi.
"""
from __future__ import annotations

import math
from fractions import Fraction

from uopc.dtype import DType, dtypes, truncate
from uopc.ops import Ops
from uopc.uop import UOp

# ---- building blocks (vectors keep their lane count) -------------------------------------------------


def _like(x: UOp, dt: DType) -> DType: return dt.vec(x.dtype.count) if x.dtype.count > 1 else dt
def c(x: UOp, value) -> UOp:
  """A constant like x; integers wrap to x's dtype (-1 is all ones in an unsigned type)."""
  return UOp.const(x.dtype, truncate(value, x.dtype) if x.dtype.is_int() else value)
def add(a: UOp, b: UOp) -> UOp: return a.alu(Ops.ADD, b)
def mul(a: UOp, b: UOp) -> UOp: return a.alu(Ops.MUL, b)
def sub(a: UOp, b: UOp) -> UOp: return add(a, mul(b, c(b, -1)))  # exact: a + (-b) is a - b
def lt(a: UOp, b: UOp) -> UOp: return a.alu(Ops.CMPLT, b)
def ne(a: UOp, b: UOp) -> UOp: return a.alu(Ops.CMPNE, b)
def eq(a: UOp, b: UOp) -> UOp: return ne(ne(a, b), UOp.const(_like(a, dtypes.bool), True))
def where(cond: UOp, a: UOp, b: UOp) -> UOp: return cond.alu(Ops.WHERE, a, b)
def both(a: UOp, b: UOp) -> UOp: return a.alu(Ops.AND, b)
def either(a: UOp, b: UOp) -> UOp: return a.alu(Ops.OR, b)
def cast(x: UOp, dt: DType) -> UOp: return UOp(Ops.CAST, _like(x, dt), (x,))
def bitcast(x: UOp, dt: DType) -> UOp: return UOp(Ops.BITCAST, _like(x, dt), (x,))
def shl(x: UOp, n: int) -> UOp: return x.alu(Ops.SHL, c(x, n))
def shr(x: UOp, n: int) -> UOp: return x.alu(Ops.SHR, c(x, n))
def trunc(x: UOp) -> UOp: return UOp(Ops.TRUNC, x.dtype, (x,))
def is_nan(x: UOp) -> UOp: return ne(x, x)
def absf(x: UOp) -> UOp: return where(lt(x, c(x, 0.0)), mul(x, c(x, -1.0)), x)


def horner(x: UOp, coeffs: list[float]) -> UOp:
  """coeffs[0]*x^(n-1) + ... + coeffs[-1], by Horner's rule."""
  acc = c(x, coeffs[0])
  for k in coeffs[1:]: acc = add(mul(acc, x), c(x, k))
  return acc


_SPLITTER = {dtypes.float32: 2.0 ** 12 + 1, dtypes.float64: 2.0 ** 27 + 1}  # Veltkamp: halves of the mantissa


class _Format:
  """The bit layout of float32 or float64 and the integer type that holds its bits."""
  def __init__(self, dt: DType):
    self.dt, self.mant = dt, {dtypes.float32: 23, dtypes.float64: 52}[dt]
    self.ebits = dt.bits - 1 - self.mant
    self.bias = (1 << (self.ebits - 1)) - 1
    self.int = {dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}[dt]

  def pow2(self, k: UOp) -> UOp:
    """2^k as a float, for an integer k (of self.int) in the normal exponent range."""
    return bitcast(shl(add(k, c(k, self.bias)), self.mant), self.dt)

  def exponent(self, x: UOp) -> UOp:
    """The unbiased exponent of a positive normal float x, as self.int."""
    return sub(both(shr(bitcast(x, self.int), self.mant), c(bitcast(x, self.int), (1 << self.ebits) - 1)),
               UOp.const(_like(x, self.int), self.bias))

  def scale(self, x: UOp, k: UOp) -> UOp:
    """x * 2^k by adding k to the exponent field: x normal and the result normal."""
    return bitcast(add(bitcast(x, self.int), shl(k, self.mant)), self.dt)

  @property
  def min_normal(self) -> float: return 2.0 ** (1 - self.bias)


def _split_halves(a: UOp) -> tuple[UOp, UOp]:
  """a = hi + lo with hi and lo of half the mantissa each (Veltkamp), so their products are exact."""
  t = mul(a, c(a, _SPLITTER[a.dtype.scalar]))
  hi = sub(t, sub(t, a))
  return hi, sub(a, hi)


def _product_error(a: UOp, b: UOp, p: UOp) -> UOp:
  """a*b - p for p = fl(a*b), exactly (Dekker's product, no fused multiply-add needed)."""
  (ah, al), (bh, bl) = _split_halves(a), _split_halves(b)
  return add(add(add(sub(mul(ah, bh), p), mul(ah, bl)), mul(al, bh)), mul(al, bl))


def round_to_int(x: UOp, fmt: _Format) -> UOp:
  """x rounded to the nearest integer (ties away from zero), as fmt.int; |x| below 2^(bits-2)."""
  half = where(lt(x, c(x, 0.0)), c(x, -0.5), c(x, 0.5))
  return cast(add(x, half), fmt.int)


def _in_f32(x: UOp, build) -> UOp:
  """float16/bfloat16: compute in float32, round once."""
  return cast(build(cast(x, dtypes.float32)), x.dtype.scalar)


# ---- EXP2 ----------------------------------------------------------------------------------------------
# 2^s on [-0.5, 0.5] (SLEEF's coefficients, as tinygrad uses them)
_EXP2_POLY = {
  dtypes.float32: [0.1535920892e-3, 0.1339262701e-2, 0.9618384764e-2, 0.5550347269e-1, 0.2402264476e+0, 0.6931471825e+0],
  dtypes.float64: [0.4434359082926529454e-9, 0.7073164598085707425e-8, 0.1017819260921760451e-6, 0.1321543872511327615e-5,
                   0.1525273353517584730e-4, 0.1540353045101147808e-3, 0.1333355814670499073e-2, 0.9618129107597600536e-2,
                   0.5550410866482046596e-1, 0.2402265069591012214e+0, 0.6931471805599452862e+0],
}


def round_even(x: UOp, fmt: _Format, bias: int = 0) -> tuple[UOp, UOp]:
  """x rounded to the nearest integer (ties to even) as a float, and that integer plus `bias` as fmt.int,
  for |x| <= 2^(mant-1): x + 1.5 * 2^mant has the integer in its low significand bits, subtracting the
  constant again gives it as a float, exactly (NaN gives NaN and an unspecified integer). Three
  operations where a conversion to an integer and back takes four or more, and no float-to-int cast
  whose result is undefined for NaN."""
  magic = 1.5 * 2.0 ** fmt.mant
  t = add(x, c(x, magic))
  magic_bits = (fmt.mant + fmt.bias) << fmt.mant | 1 << (fmt.mant - 1)  # exponent mant, significand 1.5
  return add(t, c(t, -magic)), add(bitcast(t, fmt.int), UOp.const(_like(x, fmt.int), bias - magic_bits))


def exp2(x: UOp) -> UOp:
  """2^x = u * 2^q, q = x rounded, u = 2^(x - q) by the polynomial. x is first clamped to top (2^top
  overflows: inf comes out of the arithmetic) and an x below bottom (2^bottom is half the least
  subnormal: 0) is computed as 0 and its result replaced by 0, so that no product underflows to zero
  (such a product cost a microcode assist per vector: GPT-2's causal attention, half of whose scores
  are -inf, ran 5% slower with a clamp to bottom - 1); NaN, which the clamps keep, propagates. u * 2^q
  is two multiplications by 2^a and 2^b, a + b = q, both normal over that range, the second rounding
  once where the result is subnormal; their biased exponents come from q + 2 * bias (added with the
  rounding's constant) split in halves."""
  dt = x.dtype.scalar
  if dt in (dtypes.float16, dtypes.bfloat16): return _in_f32(x, exp2)
  fmt = _Format(dt)
  top, bottom = float(fmt.bias + 1), float(-(fmt.bias + fmt.mant))
  v = where(lt(c(x, top), x), c(x, top), x)
  under = lt(v, c(v, bottom))
  v = where(under, c(v, 0.0), v)  # computed as 2^0 and replaced by 0: no underflowing product (a softmax's masked -inf)
  q, biased = round_even(v, fmt, 2 * fmt.bias)
  s = sub(v, q)  # exact, in [-0.5, 0.5]
  u = add(c(s, 1.0), mul(s, horner(s, _EXP2_POLY[dt])))
  half = shr(biased, 1)
  def pow2(e: UOp) -> UOp: return bitcast(shl(e, fmt.mant), dt)
  return where(under, c(x, 0.0), mul(mul(u, pow2(half)), pow2(sub(biased, half))))


# ---- LOG2 ----------------------------------------------------------------------------------------------
# log2(m) = t * (2/ln 2) + t^3 * P(t^2), t = (m - 1) / (m + 1); 2/ln 2 split in a head and a tail
_LOG2_POLY = {
  dtypes.float32: [0.4374550283e+0, 0.5764790177e+0, 0.9618012905120],
  dtypes.float64: [0.2211941750456081490e+0, 0.2200768693152277689e+0, 0.2623708057488514656e+0, 0.3205977477944495502e+0,
                   0.4121985945485324709e+0, 0.5770780162997058982e+0, 0.96179669392608091449],
}
_TWO_OVER_LN2 = Fraction("2.885390081777926814719849362003784274853291908305971868270")


def _head_tail(value: Fraction, dt: DType) -> tuple[float, float]:
  """value as head + tail, the head rounded to dt (a tail constant is rounded to dt when it is made)."""
  head = float(truncate(float(value), dt))
  return head, float(value - Fraction(head))


def log2(x: UOp) -> UOp:
  dt = x.dtype.scalar
  if dt in (dtypes.float16, dtypes.bfloat16): return _in_f32(x, log2)
  fmt = _Format(dt)
  subnormal = lt(x, c(x, fmt.min_normal))
  lift = fmt.mant + 1 if fmt.mant % 2 else fmt.mant + 2  # an exponent that makes any subnormal normal
  a = where(subnormal, mul(x, c(x, 2.0 ** lift)), x)
  e = fmt.exponent(mul(a, c(a, 1.0 / 0.75)))  # m = a / 2^e in [0.75, 1.5)
  m = fmt.scale(a, mul(e, c(e, -1)))
  e = cast(where(subnormal, sub(e, c(e, lift)), e), dt)
  # t = (m - 1) / (m + 1) as t + t_lo: m - 1 is exact, m + 1 = den + den_err (Knuth's TwoSum), and
  # the division's remainder is exact through Dekker's product
  num, den = add(m, c(m, -1.0)), add(m, c(m, 1.0))
  den_err = add(sub(m, sub(den, sub(den, m))), sub(c(m, 1.0), sub(den, m)))
  t = num.alu(Ops.DIV, den)
  p = mul(t, den)
  t_lo = sub(sub(sub(num, p), _product_error(t, den, p)), mul(t, den_err)).alu(Ops.DIV, den)
  t2 = mul(t, t)
  hi, lo = _head_tail(_TWO_OVER_LN2, dt)
  # e + t*hi as a head and an exact tail (Fast2Sum: |e| >= 1 > |t*hi| unless e is 0), so that
  # cancellation between e and log2(m) does not cost precision
  p = mul(t, c(t, hi))
  head = add(e, p)
  small = add(mul(t_lo, c(t, hi)), add(mul(t, c(t, lo)), mul(horner(t2, _LOG2_POLY[dt]), mul(t, t2))))
  tail = add(add(sub(e, head), p), add(_product_error(t, c(t, hi), p), small))
  r = add(head, tail)
  r = where(eq(x, c(x, math.inf)), x, r)
  r = where(eq(x, c(x, 0.0)), c(x, -math.inf), r)  # both zeros
  return where(either(lt(x, c(x, 0.0)), is_nan(x)), c(x, math.nan), r)


# ---- SIN -----------------------------------------------------------------------------------------------
def _pi_scaled(bits: int) -> int:
  """floor(pi * 2^bits) (to within a unit), by Machin's formula pi = 16 atan(1/5) - 4 atan(1/239) in
  integers; 64 guard bits absorb the truncation of every series term."""
  one = 1 << (bits + 64)
  def atan_inv(n: int) -> int:  # atan(1/n) * one
    total, power, k = 0, one // n, 0
    while power:
      total += (-1) ** k * (power // (2 * k + 1))
      power, k = power // (n * n), k + 1
    return total
  return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 64


_PI = Fraction(_pi_scaled(1400), 1 << 1400)  # the Payne-Hanek table below needs about 1250 bits of 1/pi


def _split(value: Fraction, pieces: int, bits: int, last_bits: int) -> list[float]:
  """value as a sum of floats: `pieces` heads of `bits` significant bits each, then a tail of `last_bits`."""
  out = []
  for i in range(pieces + 1):
    nbits = bits if i < pieces else last_bits
    exp = math.floor(math.log2(abs(value))) - nbits + 1
    head = Fraction(math.floor(value / Fraction(2) ** exp)) * Fraction(2) ** exp if i < pieces else value
    out.append(float(head))
    value -= head
  return out


# Pi in pieces whose products with the quadrant q = rint(|x| / pi) are exact without a fused
# multiply-add: q < 2^12 for float32 below _SIN_LIMIT, q < 2^26 for float64.
_PI_PIECES = {dtypes.float32: _split(_PI, 4, 12, 24), dtypes.float64: _split(_PI, 4, 27, 53)}
_SIN_LIMIT = {dtypes.float32: 12800.0, dtypes.float64: 2.0 ** 26 * 3.0}
# sin(r) = r + r^3 * P(r^2) on [-pi/2, pi/2]
_SIN_POLY = {
  dtypes.float32: [2.6083159809786593541503e-06, -0.0001981069071916863322258, 0.00833307858556509017944336, -0.166666597127914428710938],
  dtypes.float64: [-7.97255955009037868891952e-18, 2.81009972710863200091251e-15, -7.64712219118158833288484e-13,
                   1.60590430605664501629054e-10, -2.50521083763502045810755e-08, 2.75573192239198747630416e-06,
                   -0.000198412698412696162806809, 0.00833333333333332974823815, -0.166666666666666657414808],
}


# ---- SIN: Payne-Hanek reduction for |x| beyond the Cody-Waite range ------------------------------------
# x = M * 2^E (M the integer significand) is reduced with the bits of 1/(2 pi) from bit E+1 on (the bits
# before give whole turns): an n-word window of them, times M, modulo 2^(32n), is x / (2 pi) mod 1 to
# within M units of 2^-32n, all in exact integer arithmetic. The window is n + 1 table words picked by
# WHERE on E's word index and shifted by E mod 32. n is chosen so that the truncation stays far below
# the closest approach of a float to a multiple of pi: x / pi is 2^-29.9 from an integer at worst in
# float32 (16367173 * 2^73, by exhaustive search), no closer than about 2^-63 in float64 (from the worst
# case of reduction by pi/2, Muller's Elementary Functions).
_WORD = 32
_MASK = (1 << _WORD) - 1
_PH_WORDS = {dtypes.float32: 3, dtypes.float64: 6}
_PH_LEAD = _WORD  # the table starts with 32 zero bits, so that E >= -32 (every |x| past _SIN_LIMIT) indexes it
_PH_PIECE = {dtypes.float32: 16, dtypes.float64: 32}  # integer pieces converted to the float exactly


def _inv_2pi_words(fmt: _Format) -> list[int]:
  """The 32-bit words of 2^-_PH_LEAD / (2 pi): enough for the largest exponent (inf's) and the window."""
  top = (1 << fmt.ebits) - 1 - fmt.bias - fmt.mant + _PH_LEAD
  count = top // _WORD + _PH_WORDS[fmt.dt] + 1
  scaled = math.floor(Fraction(1 << (_WORD * count - _PH_LEAD)) / (2 * _PI))
  return [(scaled >> (_WORD * (count - 1 - k))) & _MASK for k in range(count)]


def _pick(index: UOp, table: list[int]) -> UOp:
  """table[index] by a chain of WHEREs (the last entry for an index past the table)."""
  out = c(index, table[-1])
  for i in reversed(range(len(table) - 1)): out = where(ne(index, c(index, i)), out, c(index, table[i]))
  return out


def _mul_low(a: list[UOp], b: list[UOp], n: int) -> list[UOp]:
  """The n low 32-bit words of the product of a and b (words little-endian, each a uint64 below 2^32):
  each partial product splits into its halves, so no column sum can overflow 64 bits."""
  columns: list[list[UOp]] = [[] for _ in range(n)]
  for i, ai in enumerate(a):
    for j, bj in enumerate(b):
      if i + j >= n: continue
      p = mul(ai, bj)
      columns[i + j].append(both(p, c(p, _MASK)))
      if i + j + 1 < n: columns[i + j + 1].append(shr(p, _WORD))
  out, carry = [], None
  for terms in columns:
    acc = terms[0]
    for t in terms[1:] + ([carry] if carry is not None else []): acc = add(acc, t)
    out.append(both(acc, c(acc, _MASK)))
    carry = shr(acc, _WORD)
  return out


def _fixed_to_float(words: list[UOp], scale: int, dt: DType) -> tuple[UOp, UOp]:
  """The value of the non-negative integer in `words` (little-endian) times 2^scale as hi + lo floats:
  exact pieces summed from the top with Fast2Sum (the running sum is at least each next piece, or 0)."""
  width = _PH_PIECE[dt]
  pieces = [(shr(w, k) if k else w, _WORD * i + k) for i, w in enumerate(words) for k in range(0, _WORD, width)]
  hi = lo = None
  for piece, shift in reversed(pieces):
    t = mul(cast(both(piece, c(piece, (1 << width) - 1)), dt), UOp.const(_like(piece, dt), 2.0 ** (shift + scale)))
    if hi is None: hi, lo = t, c(t, 0.0)
    else: hi, lo = add(hi, t), add(lo, sub(t, sub(add(hi, t), hi)))
  return hi, lo


def _payne_hanek(ax: UOp, fmt: _Format) -> tuple[UOp, UOp]:
  """(r, odd): ax = k * pi + r with |r| <= pi/2 (r rounded once) and odd whether k is odd, for a finite
  ax = M * 2^E with E >= -_PH_LEAD (every ax >= _SIN_LIMIT); any other ax gives some value, computed
  without undefined behaviour."""
  dt, n = fmt.dt, _PH_WORDS[fmt.dt]
  bits = cast(bitcast(ax, fmt.int), dtypes.uint64)
  m = either(both(bits, c(bits, (1 << fmt.mant) - 1)), c(bits, 1 << fmt.mant))
  e = add(shr(bits, fmt.mant), c(bits, _PH_LEAD - fmt.bias - fmt.mant))  # x = m * 2^(e - _PH_LEAD); wraps below
  index, shift = shr(e, 5), both(e, c(e, _WORD - 1))
  table = _inv_2pi_words(fmt)
  picked = [_pick(index, table[i:len(table) - n + i]) for i in range(n + 1)]
  window = [both(either(shl(hi, _WORD), lo).alu(Ops.SHR, sub(c(shift, _WORD), shift)), c(lo, _MASK))
            for hi, lo in zip(picked, picked[1:])]
  m_words = [m] if fmt.mant < _WORD else [both(m, c(m, _MASK)), shr(m, _WORD)]
  z = _mul_low(m_words, window[::-1], n)  # x / (2 pi) mod 1, times 2^(32n)
  # y = 2 z in [0, 2): k = round(y); adding a quarter turn makes bit 31 of the top word k's parity and
  # bit 30 the sign of y - k; a negative remainder's magnitude is its bits flipped (less one unit)
  top = both(add(z[-1], c(z[-1], 1 << (_WORD - 2))), c(z[-1], _MASK))
  odd = ne(both(shr(top, _WORD - 1), c(top, 1)), c(top, 0))
  negative = eq(both(shr(top, _WORD - 2), c(top, 1)), c(top, 0))
  flip = where(negative, c(top, _MASK), c(top, 0))
  low = (1 << (_WORD - 2)) - 1
  words = [w.alu(Ops.XOR, flip) for w in z[:-1]] + [both(top, c(top, low)).alu(Ops.XOR, both(flip, c(flip, low)))]
  hi, lo = _fixed_to_float(words, 1 - _WORD * n, dt)
  # r = (hi + lo) * pi with the head product's error exact (Dekker), rounded once
  pi_hi, pi_lo = _head_tail(_PI, dt)
  p = mul(hi, c(hi, pi_hi))
  r = add(p, add(_product_error(hi, c(hi, pi_hi), p), add(mul(hi, c(hi, pi_lo)), mul(lo, c(lo, pi_hi)))))
  return where(negative, mul(r, c(r, -1.0)), r), odd


def sin(x: UOp) -> UOp:
  """Cody-Waite reduction by pi below _SIN_LIMIT, Payne-Hanek above, then the odd polynomial; NaN for
  inf and NaN."""
  dt = x.dtype.scalar
  if dt in (dtypes.float16, dtypes.bfloat16): return _in_f32(x, sin)
  fmt = _Format(dt)
  ax = absf(x)
  small = lt(ax, c(x, _SIN_LIMIT[dt]))
  q = round_to_int(mul(where(small, ax, c(x, 0.0)), c(ax, float(1 / _PI))), fmt)
  qf = cast(q, dt)
  r = where(small, ax, c(x, 0.0))
  for piece in _PI_PIECES[dt]: r = sub(r, mul(qf, c(qf, piece)))
  big_r, big_odd = _payne_hanek(ax, fmt)
  r = where(small, r, big_r)
  r2 = mul(r, r)
  s = add(r, mul(mul(r, r2), horner(r2, _SIN_POLY[dt])))
  s = where(where(small, ne(both(q, c(q, 1)), c(q, 0)), big_odd), mul(s, c(s, -1.0)), s)
  s = where(lt(x, c(x, 0.0)), mul(s, c(s, -1.0)), s)
  s = where(eq(x, c(x, 0.0)), x, s)  # keeps -0.0
  return where(lt(ax, c(x, math.inf)), s, c(x, math.nan))  # false for inf and NaN


# ---- SQRT ----------------------------------------------------------------------------------------------
_RSQRT_MAGIC = {dtypes.float32: (0x5F3759DF, 3), dtypes.float64: (0x5FE6EB50C7B537A9, 4)}  # seed, Newton steps




def sqrt(x: UOp) -> UOp:
  """Scale x to m in [1, 4) by an even power of two, Newton's iteration for 1/sqrt(m) from the bit-trick
  seed, then one correction of s = m / sqrt(m) with the exact residual m - s*s."""
  dt = x.dtype.scalar
  if dt in (dtypes.float16, dtypes.bfloat16): return _in_f32(x, sqrt)
  fmt = _Format(dt)
  subnormal = lt(x, c(x, fmt.min_normal))
  lift = fmt.mant + 1 if fmt.mant % 2 else fmt.mant + 2  # even
  a = where(subnormal, mul(x, c(x, 2.0 ** lift)), x)
  a = where(both(lt(c(x, 0.0), x), lt(x, c(x, math.inf))), a, c(x, 1.0))  # specials are chosen below
  half_e = shr(fmt.exponent(a), 1)
  m = fmt.scale(a, mul(half_e, c(half_e, -2)))
  magic, steps = _RSQRT_MAGIC[dt]
  y = bitcast(sub(UOp.const(_like(x, fmt.int), magic), shr(bitcast(m, fmt.int), 1)), dt)
  for _ in range(steps): y = mul(y, sub(c(y, 1.5), mul(mul(c(m, 0.5), m), mul(y, y))))
  s = mul(m, y)
  p = mul(s, s)
  residual = sub(sub(m, p), _product_error(s, s, p))
  s = add(s, mul(residual, mul(c(y, 0.5), y)))
  root = mul(s, fmt.pow2(where(subnormal, sub(half_e, c(half_e, lift // 2)), half_e)))
  root = where(either(eq(x, c(x, 0.0)), eq(x, c(x, math.inf))), x, root)  # +-0 and inf are their own roots
  return where(either(lt(x, c(x, 0.0)), is_nan(x)), c(x, math.nan), root)


# ---- POW -----------------------------------------------------------------------------------------------
def _is_odd_integer(y: UOp) -> UOp:
  half = mul(y, c(y, 0.5))
  return both(eq(trunc(y), y), ne(trunc(half), half))


def pow_(a: UOp, b: UOp, has_float64: bool) -> UOp:
  """C's pow: EXP2(b * LOG2(|a|)) with the sign of a negative base for odd integer b, NaN for a negative
  base and a non-integer b, pow(x, +-0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1. float32 (and the 16-bit
  floats) are computed in float64 when the target has it."""
  dt = a.dtype.scalar
  work = dtypes.float64 if has_float64 else dtypes.float32
  if dt is not dtypes.float64 and dt is not work: return cast(pow_(cast(a, work), cast(b, work), has_float64), dt)
  mag = exp2(mul(b, log2(absf(a))))
  sign_set = either(lt(a, c(a, 0.0)), lt(a.alu(Ops.RECIP), c(a, 0.0)))  # -0.0 too
  r = where(both(sign_set, _is_odd_integer(b)), mul(mag, c(mag, -1.0)), mag)
  finite_negative = both(lt(a, c(a, 0.0)), lt(c(a, -math.inf), a))
  r = where(both(finite_negative, ne(trunc(b), b)), c(a, math.nan), r)
  one = either(either(eq(b, c(b, 0.0)), eq(a, c(a, 1.0))), both(eq(a, c(a, -1.0)), eq(absf(b), c(b, math.inf))))
  return where(one, c(a, 1.0), r)
