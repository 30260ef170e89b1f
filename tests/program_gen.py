"""Hypothesis strategies for random, valid tensor programs (`func` entries) with their expected results.

`programs()` draws a `Program`: the `.uop` text of one `func` entry (movement ops, elementwise ops,
reductions, casts, WHERE and gated STOREs, into new outputs or into inputs, over a few small tensors) and, computed alongside with
numpy alone, the inputs and the exact values every output must hold. Nothing here imports the
compiler: the expectations follow SPEC-NOTES (wrapping integers, truncating IDIV, MOD with the
dividend's sign, float16/bfloat16 computed in float32 and rounded once, REDUCE accumulating in the
element dtype in row-major order of the reduced axes).

Some ops write the forms that the compiler folds, as tinygrad writes them, so that the folded forms are
checked against numpy's evaluation of the unfolded ones: `arange` (a window sum of ones cut from a
padded, tiled row: Rangeify's closed form), its prefix sum of any vector (the same windows, not folded),
the one-hot gather (`arange == idx` selecting rows of a table, summed: an indexed load) and POW by a
constant exponent (multiplications, a RECIP, a SQRT in Instruction Selection), the last only where
every target's result is exactly rounded (an exponent 0, 1, 2, -1 or 0.5, or a power that is exact
in float32).

Programs never hit undefined behaviour: the generator knows every intermediate value, so it only
casts floats to integers that fit, and makes divisors nonzero (OR 1) and shift amounts in range
(AND bits-1) where the drawn values would not be.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from math import prod

import numpy as np
from hypothesis import strategies as st
from ml_dtypes import bfloat16, finfo as ml_finfo

NP = {"bool": np.bool_, "i8": np.int8, "u8": np.uint8, "i32": np.int32, "u32": np.uint32, "i64": np.int64,
      "f16": np.float16, "bf16": bfloat16, "f32": np.float32, "f64": np.float64}
LONG = {"bool": "bool", "i8": "int8", "u8": "uint8", "i32": "int32", "u32": "uint32", "i64": "int64",
        "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}
FLOATS = ("f16", "bf16", "f32", "f64")
INTS = ("i8", "u8", "i32", "u32", "i64")
DATA = FLOATS + INTS
MAX_ELEMENTS = 48


def is_float(dt: str) -> bool: return dt in FLOATS


def bits(dt: str) -> int: return np.dtype(NP[dt]).itemsize * 8


# ---- numpy semantics of SPEC-NOTES (independent of uopc) ---------------------------------------------
def round_bf16(x: np.ndarray) -> np.ndarray:
  """float64 -> bfloat16 rounded once to nearest even: scale to 8 significant bits and np.round
  (half to even); ml_dtypes' own cast goes through float32 and can round twice."""
  x = np.asarray(x, np.float64)
  with np.errstate(all="ignore"):
    _, e = np.frexp(x)
    scale = np.ldexp(1.0, np.maximum(e - 8, -133))  # -133: the spacing of bfloat16's subnormals
    r = np.where(np.isfinite(x), np.round(x / scale) * scale, x)
    r = np.where(np.abs(r) > 3.3895313892515355e38, np.copysign(np.inf, x), r)
  return r.astype(np.float32).astype(bfloat16)


def to_float(x: np.ndarray, dt: str) -> np.ndarray:
  """Any values to float dtype `dt` with one rounding (through float64, which holds them exactly
  unless they are 64-bit integers, where C converts through double too)."""
  if dt == "bf16": return round_bf16(x.astype(np.float64))
  if dt in ("f16", "f64"): return x.astype(np.float64).astype(NP[dt])
  return x.astype(np.float32)


def arith(x: np.ndarray, dt: str) -> np.ndarray:
  return x.astype(np.float32) if dt in ("f16", "bf16") else x


def trunc_divmod(a: np.ndarray, b: np.ndarray, dt: str) -> tuple[np.ndarray, np.ndarray]:
  """C's / and % on Python integers (exact), wrapped back into `dt`."""
  q = [abs(int(x)) // abs(int(y)) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a.ravel(), b.ravel())]
  r = [int(x) - qq * int(y) for qq, x, y in zip(q, a.ravel(), b.ravel())]
  def wrap(v): return np.array([((z + 2**63) % 2**64) - 2**63 for z in v], np.int64).astype(NP[dt]).reshape(a.shape)
  return wrap(q), wrap(r)


def binary(op: str, dt: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  with np.errstate(all="ignore"):
    if op == "CMPLT": return arith(a, dt) < arith(b, dt)
    if op == "CMPNE": return arith(a, dt) != arith(b, dt)
    if dt == "bool": return {"ADD": np.logical_or, "MAX": np.logical_or, "OR": np.logical_or, "MUL": np.logical_and,
                             "AND": np.logical_and, "XOR": np.logical_xor}[op](a, b)
    if is_float(dt):
      fn = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "MAX": np.maximum}[op]
      return to_float(fn(arith(a, dt), arith(b, dt)), dt)
    if op in ("IDIV", "MOD"): return trunc_divmod(a, b, dt)[op == "MOD"]
    fn = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "MAX": np.maximum, "AND": np.bitwise_and,
          "OR": np.bitwise_or, "XOR": np.bitwise_xor, "SHL": np.left_shift, "SHR": np.right_shift}[op]
    return fn(a, b.astype(a.dtype)).astype(NP[dt])


def unary(op: str, dt: str, x: np.ndarray) -> np.ndarray:
  with np.errstate(all="ignore"):
    if op == "NEG": return to_float(-arith(x, dt), dt) if is_float(dt) else np.negative(x).astype(NP[dt])
    if op == "RECIP": return to_float(np.float32(1) / arith(x, dt) if dt != "f64" else 1.0 / x, dt)
    return to_float(np.trunc(arith(x, dt)), dt)  # TRUNC


def cast(x: np.ndarray, src: str, dst: str) -> np.ndarray:
  if dst == "bool": return arith(x, src) != 0
  if is_float(dst): return to_float(x.astype(np.float64) if src == "bf16" else x, dst)
  if is_float(src): return np.trunc(x.astype(np.float64)).astype(NP[dst])
  return x.astype(NP[dst])


_MANTISSA = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}


def order_free_products(x: np.ndarray, axes: tuple[int, ...], dt: str) -> bool:
  """Does every order of a float MUL reduction of x over `axes` give the same result? It does where every
  partial product is exact in dt: each group's nonzero factors' full product has a significand that fits
  (a subset's odd part divides the whole's) and the products of its large and of its small factors stay
  in dt's normal range (every subset's magnitude lies between them). A GPU schedule multiplies a group's
  partials in another order than row-major (its reductions are grouped), which is allowed."""
  info = ml_finfo(NP[dt]) if dt == "bf16" else np.finfo(NP[dt])
  groups = np.moveaxis(np.asarray(x, np.float64), axes, tuple(range(-len(axes), 0))).reshape(-1, prod(x.shape[a] for a in axes))
  for g in groups:
    if not np.all(np.isfinite(g)): return False
    f = [Fraction(float(v)) for v in g if v != 0]
    if prod(abs(q) for q in f if abs(q) > 1) > Fraction(float(info.max)): return False
    if prod(abs(q) for q in f if abs(q) < 1) < Fraction(float(info.tiny)): return False
    n = abs(prod(q.numerator for q in f))
    while n and n % 2 == 0: n //= 2
    if n.bit_length() > _MANTISSA[dt]: return False
  return True


def reduce(op: str, dt: str, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
  """Accumulate in `dt`, one element at a time, in row-major order of the reduced axes."""
  keep = [i for i in range(x.ndim) if i not in axes]
  moved = np.transpose(x, keep + list(axes)).reshape([x.shape[i] for i in keep] + [-1])
  init = {"ADD": 0, "MUL": 1}.get(op)
  if init is None: init = -np.inf if is_float(dt) else np.iinfo(NP[dt]).min
  acc = np.full(moved.shape[:-1], init, NP[dt]) if dt != "bf16" else np.full(moved.shape[:-1], init, np.float32).astype(bfloat16)
  for k in range(moved.shape[-1]): acc = binary(op, dt, acc, moved[..., k])
  return acc.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])


def power(x: np.ndarray, dt: str, e) -> np.ndarray:
  """POW by a constant exponent, exactly rounded (see `exact_power` for when that is what every target
  computes): pow's special values, pow(x, 0) = 1 even for NaN, pow(-0.0, 0.5) = +0.0, pow(-inf, 0.5) = +inf."""
  x64 = x.astype(np.float64)
  with np.errstate(all="ignore"):
    if e == 0.5: r = np.where(x64 == -np.inf, np.inf, np.sqrt(x64) + 0.0)
    elif e == 0: r = np.ones_like(x64)
    else:
      p = x64 if abs(e) == 1 else x64 * x64 if abs(e) == 2 else np.power(x64, float(abs(e)))
      r = 1.0 / p if e < 0 else p
  return to_float(r, dt)


def exact_power(x: np.ndarray, dt: str, e) -> bool:
  """Is POW(x, e) exactly rounded on every target? Exponents 0, 1, 2, -1, 0.5 always are (one operation,
  or none); 3, 4, -2 (and -3, -4 of 16-bit floats and float64) when every finite x**|e| is exact in float32
  (then the products are exact in any working precision, and the RECIP is one rounding; float32's
  x**-3 and x**-4 stay the general POW on a target without float64)."""
  if e in (0, 1, 2, -1, 0.5): return True
  if dt == "f32" and e in (-3, -4): return False
  finite = x.astype(np.float64)[np.isfinite(x.astype(np.float64))]
  return all(_exact_in_f32(Fraction(float(v)) ** k) for v in finite for k in range(2, abs(int(e)) + 1))


def _exact_in_f32(q: Fraction) -> bool:
  if abs(q) > 2 ** 128: return False
  with np.errstate(all="ignore"): f = np.float32(float(q))
  return bool(np.isfinite(f)) and Fraction(float(f)) == q


# ---- programs ------------------------------------------------------------------------------------------
@dataclass
class Value:
  name: str
  dt: str
  value: np.ndarray

  @property
  def shape(self) -> tuple[int, ...]: return self.value.shape


@dataclass
class Program:
  name: str
  lines: list[str] = field(default_factory=list)
  inputs: dict[str, np.ndarray] = field(default_factory=dict)    # PARAM name -> its contents
  outputs: dict[str, np.ndarray] = field(default_factory=dict)   # PARAM name (an input's too) -> the expected contents after the run
  out_init: dict[str, np.ndarray] = field(default_factory=dict)  # output PARAM name -> contents before the run

  def text(self) -> str: return f"func {self.name} {{\n" + "".join(f"  {l}\n" for l in self.lines) + "}\n"


def _dims(shape) -> str: return "[" + ", ".join(map(str, shape)) + "]"


LONG_LITERALS = (0.7978845608028654, 1.4426950408889634, 0.6931471805599453, 0.044715, 3.141592653589793, 1.0000001)


def _literal(v, dt: str) -> str:
  return repr(float(v)) if is_float(dt) else str(int(v))


class _Builder:
  def __init__(self, draw, name: str, rng: np.random.Generator):
    self.draw, self.rng, self.prog = draw, rng, Program(name)
    self.values: list[Value] = []
    self.slot = itertools.count()
    self.tmp = itertools.count()
    self.stores = itertools.count(1)

  def emit(self, text: str, dt: str, value: np.ndarray) -> Value:
    v = Value(f"%v{next(self.tmp)}", dt, np.asarray(value))
    self.prog.lines.append(f"{v.name} = {text}")
    self.values.append(v)
    return v

  # ---- leaves ----
  def random_array(self, dt: str, shape) -> np.ndarray:
    if dt == "bool": return np.asarray(self.rng.random(shape) < 0.5)
    if is_float(dt): return np.asarray(to_float(self.rng.integers(-16, 17, shape) / 4, dt))  # quarters: exact in every float dtype
    lo = 0 if dt.startswith("u") else -20
    return np.asarray(self.rng.integers(lo, 21, shape)).astype(NP[dt])

  def param(self, dt: str, shape) -> Value:
    name = f"in{len(self.prog.inputs)}"
    data = self.random_array(dt, shape)
    self.prog.inputs[name] = data
    v = Value(f"%{name}", dt, data)
    self.prog.lines.append(f"%{name} = PARAM({_dims(shape)}) {{({next(self.slot)}, \"{name}\")}} : {dt}")
    self.values.append(v)
    return v

  # ---- drawing helpers ----
  def pick(self, pred=lambda v: True) -> Value | None:
    cands = [v for v in self.values if pred(v)]
    return self.draw(st.sampled_from(cands)) if cands else None

  def partner(self, a: Value) -> Value:
    """A second operand for `a`: another value of its dtype and shape, a cast of one of its shape, or a new input."""
    same = self.pick(lambda v: v.dt == a.dt and v.shape == a.shape)
    choice = self.draw(st.integers(0, 2))
    if choice == 0 and same is not None: return same
    other = self.pick(lambda v: v.shape == a.shape and v.dt != a.dt)
    if choice == 1 and other is not None and self.castable(other, a.dt): return self.cast(other, a.dt)
    return self.param(a.dt, a.shape)

  def castable(self, v: Value, dst: str) -> bool:
    if not is_float(v.dt) or is_float(dst) or dst == "bool": return True
    x = v.value.astype(np.float64)
    info = np.iinfo(NP[dst])
    return bool(np.all(np.isfinite(x)) and np.all(np.trunc(x) >= info.min) and np.all(np.trunc(x) <= info.max))

  # ---- ops ----
  def cast(self, v: Value, dst: str) -> Value:
    return self.emit(f"CAST({v.name}) : {dst}", dst, cast(v.value, v.dt, dst))

  def op_cast(self) -> None:
    v = self.pick()
    dst = self.draw(st.sampled_from(DATA + ("bool",)))
    if dst != v.dt and self.castable(v, dst): self.cast(v, dst)

  def op_unary(self) -> None:
    v = self.pick(lambda v: v.dt != "bool")
    if v is None: return
    op = self.draw(st.sampled_from(("NEG", "RECIP", "TRUNC") if is_float(v.dt) else ("NEG",)))
    self.emit(f"{op}({v.name})", v.dt, unary(op, v.dt, v.value))

  def op_binary(self) -> None:
    a = self.pick()
    if a.dt == "bool": ops = ("AND", "OR", "XOR", "CMPNE")
    elif is_float(a.dt): ops = ("ADD", "SUB", "MUL", "MAX", "CMPLT", "CMPNE")
    else: ops = ("ADD", "SUB", "MUL", "MAX", "CMPLT", "CMPNE", "AND", "OR", "XOR", "IDIV", "MOD", "SHL", "SHR")
    op = self.draw(st.sampled_from(ops))
    if a.dt != "bool" and self.draw(st.booleans()):  # a scalar literal operand
      c = self.draw(st.integers(1, 7) if op in ("IDIV", "MOD", "SHL", "SHR") or a.dt.startswith("u") else st.integers(-4, 4))
      lit = np.array(c, NP[a.dt]) if not is_float(a.dt) else to_float(np.array(c / 2), a.dt)
      b_text = _literal(lit, a.dt)
      if is_float(a.dt) and self.draw(st.booleans()):  # digits past the dtype's precision: the literal means its rounding
        long = self.draw(st.sampled_from(LONG_LITERALS)) * (1 if c >= 0 else -1)
        lit, b_text = to_float(np.array(long), a.dt), repr(long)
      b_val = np.broadcast_to(lit, a.shape)
    else:
      b = self.partner(a)
      if op in ("IDIV", "MOD") and np.any(b.value == 0): b = self.emit(f"OR({b.name}, 1)", b.dt, b.value | NP[b.dt](1))
      if op in ("SHL", "SHR") and np.any((b.value < 0) | (b.value >= bits(b.dt))):
        b = self.emit(f"AND({b.name}, {bits(b.dt) - 1})", b.dt, b.value & NP[b.dt](bits(b.dt) - 1))
      b_text, b_val = b.name, b.value
    out_dt = "bool" if op in ("CMPLT", "CMPNE") else a.dt
    self.emit(f"{op}({a.name}, {b_text})", out_dt, binary(op, a.dt, a.value, b_val))

  def op_where(self) -> None:
    c = self.pick(lambda v: v.dt == "bool")
    if c is None: return
    a = self.pick(lambda v: v.shape == c.shape and v.dt != "bool") or self.param(self.draw(st.sampled_from(DATA)), c.shape)
    b = self.partner(a)
    self.emit(f"WHERE({c.name}, {a.name}, {b.name})", a.dt, np.where(c.value, a.value, b.value))

  def op_movement(self) -> None:
    v = self.pick()
    kind = self.draw(st.sampled_from(("RESHAPE", "PERMUTE", "FLIP", "EXPAND", "PAD", "SHRINK")))
    getattr(self, f"move_{kind.lower()}")(v)

  def move_reshape(self, v: Value) -> None:
    n, dims = v.value.size, []
    while n > 1 and len(dims) < 3:
      d = self.draw(st.sampled_from([f for f in range(1, n + 1) if n % f == 0]))
      dims.append(d)
      n //= d
    shape = tuple(dims + ([n] if n > 1 or not dims else []))
    if self.draw(st.booleans()): shape = shape + (1,)
    self.emit(f"RESHAPE({v.name}, {_dims(shape)})", v.dt, v.value.reshape(shape))

  def move_permute(self, v: Value) -> None:
    if v.value.ndim < 2: return
    order = tuple(self.draw(st.permutations(range(v.value.ndim))))
    self.emit(f"PERMUTE({v.name}) {{({', '.join(map(str, order))})}}", v.dt, np.transpose(v.value, order))

  def move_flip(self, v: Value) -> None:
    if v.value.ndim == 0: return
    flags = tuple(self.draw(st.lists(st.booleans(), min_size=v.value.ndim, max_size=v.value.ndim)))
    axes = tuple(i for i, f in enumerate(flags) if f)
    text = "(" + ", ".join(map(str, flags)) + ("," if len(flags) == 1 else "") + ")"
    self.emit(f"FLIP({v.name}) {{{text}}}", v.dt, np.flip(v.value, axes) if axes else v.value)

  def move_expand(self, v: Value) -> None:
    ones = [i for i, d in enumerate(v.shape) if d == 1]
    if not ones: return
    shape = tuple(self.draw(st.integers(1, 4)) if i in ones else d for i, d in enumerate(v.shape))
    if prod(shape) > MAX_ELEMENTS: return
    self.emit(f"EXPAND({v.name}, {_dims(shape)})", v.dt, np.broadcast_to(v.value, shape).copy())

  def move_pad(self, v: Value) -> None:
    if v.value.ndim == 0: return
    before = [self.draw(st.integers(0, 2)) for _ in v.shape]
    shape = tuple(d + b + self.draw(st.integers(0, 2)) for d, b in zip(v.shape, before))
    if prod(shape) > MAX_ELEMENTS: return
    out = np.zeros(shape, v.value.dtype)
    out[tuple(slice(b, b + d) for b, d in zip(before, v.shape))] = v.value
    self.emit(f"PAD({v.name}, {_dims(before)}, {_dims(shape)})", v.dt, out)

  def move_shrink(self, v: Value) -> None:
    if v.value.ndim == 0: return
    start = [self.draw(st.integers(0, d - 1)) for d in v.shape]
    size = [self.draw(st.integers(1, d - s)) for d, s in zip(v.shape, start)]
    self.emit(f"SHRINK({v.name}, {_dims(start)}, {_dims(size)})", v.dt,
              v.value[tuple(slice(s, s + n) for s, n in zip(start, size))].copy())

  def op_reduce(self) -> None:
    v = self.pick(lambda v: v.value.ndim > 0 and v.dt != "bool")
    if v is None: return
    op = self.draw(st.sampled_from(("ADD", "MAX", "MUL")))
    axes = tuple(sorted(self.draw(st.sets(st.integers(0, v.value.ndim - 1), min_size=1))))
    if op == "MUL" and is_float(v.dt) and not order_free_products(v.value, axes, v.dt): op = "MAX"
    text = "(" + ", ".join(map(str, axes)) + ("," if len(axes) == 1 else "") + ")"
    self.emit(f"REDUCE({v.name}) {{({op}, {text})}}", v.dt, reduce(op, v.dt, v.value, axes))

  # ---- the forms the compiler folds (see the module docstring) ----
  def windows(self, v: Value) -> Value:
    """The prefix sum of 1-D `v` as tinygrad's cumsum writes it: v padded with n-1 zeros in front, tiled
    n+1 times, cut into n rows of 2n (row k holds the window starting at k), shrunk to [n, n], summed over k."""
    n, dt = v.shape[0], v.dt
    padded = np.concatenate([np.zeros(n - 1, v.value.dtype), v.value])
    p = self.emit(f"PAD({v.name}, [{n - 1}], [{2 * n - 1}])", dt, padded)
    row = self.emit(f"RESHAPE({p.name}, [1, {2 * n - 1}])", dt, padded.reshape(1, -1))
    tiled = np.broadcast_to(row.value, (n + 1, 2 * n - 1))
    t = self.emit(f"EXPAND({row.name}, [{n + 1}, {2 * n - 1}])", dt, tiled.copy())
    flat = self.emit(f"RESHAPE({t.name}, [{(n + 1) * (2 * n - 1)}])", dt, tiled.reshape(-1))
    cut = self.emit(f"SHRINK({flat.name}, [0], [{2 * n * n}])", dt, flat.value[:2 * n * n].copy())
    rows = self.emit(f"RESHAPE({cut.name}, [{n}, {2 * n}])", dt, cut.value.reshape(n, 2 * n))
    win = self.emit(f"SHRINK({rows.name}, [0, 0], [{n}, {n}])", dt, rows.value[:, :n].copy())
    one = self.emit(f"RESHAPE({win.name}, [{n}, {n}, 1])", dt, win.value.reshape(n, n, 1))
    sq = self.emit(f"RESHAPE({one.name}, [{n}, {n}])", dt, win.value)
    ok = self.emit(f"PERMUTE({sq.name}) {{(1, 0)}}", dt, win.value.T.copy())
    ko = self.emit(f"PERMUTE({ok.name}) {{(1, 0)}}", dt, win.value)
    total = self.emit(f"REDUCE({ko.name}) {{(ADD, (0,))}}", dt, reduce("ADD", dt, win.value, (0,)))
    return self.emit(f"RESHAPE({total.name}, [{n}])", dt, total.value.reshape(n))

  def arange(self, n: int, dt: str, step) -> Value:
    """step, 2*step, .. n*step: the window sums of a constant (folded to an index expression)."""
    c = self.emit(f"CONST {{{_literal(step, dt)}}} : {dt}", dt, np.array(step, NP[dt]))
    one = self.emit(f"RESHAPE({c.name}, [1])", dt, c.value.reshape(1))
    return self.windows(self.emit(f"EXPAND({one.name}, [{n}])", dt, np.broadcast_to(one.value, (n,)).copy()))

  def op_arange(self) -> None:
    dt = self.draw(st.sampled_from(("i32", "i64", "f32", "f16", "bf16", "i8")))
    step = self.draw(st.sampled_from((1, -1, 2, 3)))
    self.arange(self.draw(st.integers(1, 6)), dt, np.array(step, NP[dt]) if not is_float(dt) else to_float(np.array(step), dt))

  def op_prefix_sum(self) -> None:
    v = self.pick(lambda v: v.value.ndim == 1 and v.dt not in ("bool",) and 1 <= v.shape[0] <= 6)
    if v is not None: self.windows(v)

  def op_one_hot(self) -> None:
    """out[i, j] = table[idx[i], j] where 0 <= idx[i] < k, else 0, as tinygrad's embedding writes it:
    WHERE(arange(k) == idx, table, 0) summed over the k rows (folded to a gated load)."""
    table = self.pick(lambda v: v.value.ndim == 2 and v.dt != "bool" and v.shape[0] <= 6 and v.shape[1] <= 4)
    if table is None: table = self.param(self.draw(st.sampled_from(DATA)), (self.draw(st.integers(1, 5)), self.draw(st.integers(1, 3))))
    (k, d), m = table.shape, self.draw(st.integers(1, 4))
    name = f"in{len(self.prog.inputs)}"
    self.prog.inputs[name] = raw = self.rng.integers(-k - 1, k + 2, m).astype(np.int32)
    self.prog.lines.append(f"%{name} = PARAM([{m}]) {{({next(self.slot)}, \"{name}\")}} : i32")
    idx = Value(f"%{name}", "i32", raw)
    if self.draw(st.booleans()):  # negative indices count from the end, as tinygrad's indexing normalizes them
      neg = self.emit(f"CMPLT({idx.name}, 0)", "bool", raw < 0)
      idx = self.emit(f"WHERE({neg.name}, {self.emit(f'ADD({idx.name}, {k})', 'i32', raw + k).name}, {idx.name})", "i32",
                      np.where(raw < 0, raw + k, raw).astype(np.int32))
    ar = self.arange(k, "i32", np.int32(1))
    at = self.emit(f"ADD({ar.name}, -1)", "i32", ar.value - 1)
    col = self.emit(f"RESHAPE({at.name}, [{k}, 1])", "i32", at.value.reshape(k, 1))
    i3 = self.emit(f"RESHAPE({idx.name}, [1, 1, {m}])", "i32", idx.value.reshape(1, 1, m))
    wide = np.broadcast_to(i3.value, (k, d, m))
    ex = self.emit(f"EXPAND({i3.name}, [{k}, {d}, {m}])", "i32", wide.copy())
    mkd = self.emit(f"PERMUTE({ex.name}) {{(2, 0, 1)}}", "i32", np.transpose(wide, (2, 0, 1)).copy())
    ne = self.emit(f"CMPNE({mkd.name}, {col.name})", "bool", mkd.value != col.value)
    eq = self.emit(f"CMPNE({ne.name}, True)", "bool", ~ne.value)
    t3 = self.emit(f"RESHAPE({table.name}, [1, {k}, {d}])", table.dt, table.value.reshape(1, k, d))
    zero = np.zeros((), table.value.dtype)
    sel = self.emit(f"WHERE({eq.name}, {t3.name}, {_literal(zero, table.dt)})", table.dt, np.where(eq.value, t3.value, zero))
    kmd = self.emit(f"PERMUTE({sel.name}) {{(1, 0, 2)}}", table.dt, np.transpose(sel.value, (1, 0, 2)).copy())
    total = self.emit(f"REDUCE({kmd.name}) {{(ADD, (0,))}}", table.dt, reduce("ADD", table.dt, kmd.value, (0,)))
    self.emit(f"RESHAPE({total.name}, [{m}, {d}])", table.dt, total.value.reshape(m, d))

  def op_pow(self) -> None:
    v = self.pick(lambda v: is_float(v.dt))
    if v is None: return
    e = self.draw(st.sampled_from((0, 1, 2, -1, 0.5, 3, 4, -2, -3, -4)))
    if not exact_power(v.value, v.dt, e): return
    self.emit(f"POW({v.name}, {float(e)!r})", v.dt, power(v.value, v.dt, e))

  # ---- outputs ----
  def store(self, v: Value, gated: bool, in_place: bool) -> str:
    """STORE v into a new output PARAM or (in_place) into an input of its shape and dtype, if there is one:
    the program then reads that input as it was on entry while it overwrites it."""
    target = self.pick(lambda p: p.name[1:] in self.prog.inputs and p.dt == v.dt and p.shape == v.shape) if in_place else None
    if target is None:
      name = f"out{len(self.prog.out_init)}"
      self.prog.lines.append(f"%{name} = PARAM({_dims(v.shape)}) {{({next(self.slot)}, \"{name}\")}} : {v.dt}")
      self.prog.out_init[name] = self.random_array(v.dt, v.shape)
    else: name = target.name[1:]
    before = self.prog.outputs.get(name, self.prog.out_init.get(name, self.prog.inputs.get(name)))
    gate = self.pick(lambda g: g.dt == "bool" and g.shape == v.shape) if gated else None
    after = np.where(gate.value, v.value, before) if gate is not None else v.value
    self.prog.outputs[name] = np.asarray(after, before.dtype)
    st_name = f"%st{next(self.stores)}"
    self.prog.lines.append(f"{st_name} = STORE(%{name}, {v.name}{', ' + gate.name if gate is not None else ''})")
    return st_name


OPS = ("op_binary", "op_binary", "op_unary", "op_cast", "op_where", "op_movement", "op_movement", "op_reduce",
       "op_arange", "op_prefix_sum", "op_one_hot", "op_pow")


@st.composite
def programs(draw, name: str = "p", max_ops: int = 10, ops: tuple[str, ...] = OPS, min_ops: int = 3) -> Program:
  """One random tensor program with its inputs and expected outputs (see the module docstring): min_ops
  to max_ops ops drawn from `ops`."""
  rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
  b = _Builder(draw, name, rng)
  shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
  b.param(draw(st.sampled_from(DATA)), shape)
  for _ in range(draw(st.integers(min_ops, max_ops))): getattr(b, draw(st.sampled_from(ops)))()
  root = b.values[-1] if b.values[-1].name.startswith("%v") else b.cast(b.values[-1], "bool")  # store a computed value
  extra = b.pick(lambda v: v.name.startswith("%v") and v is not root) if draw(st.booleans()) else None
  stores = [b.store(v, draw(st.booleans()), draw(st.booleans())) for v in (root, extra) if v is not None]
  b.prog.lines.append(f"SINK({', '.join(stores)})")
  return b.prog
