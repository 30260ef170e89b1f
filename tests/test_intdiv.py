"""IDIV/MOD by constants lowered to multiply-high and shift (targets without an integer divider), through
-t c: exhaustive over every dividend for 8/16-bit types, random and edge dividends for 32/64 bits, over
divisors of every class (+-1, powers of two, small odd/even, 2^k +- 1, the extremes). The expectation is
C's truncating division computed with Python integers; INT_MIN / -1 wraps (SPEC-NOTES)."""
from __future__ import annotations

import numpy as np
import pytest

from isel_harness import C_NO_DIVIDER, NP, Library, ops_in
from uopc.dtype import DType, dtypes, truncate
from uopc.ops import Ops
from uopc.stages.isel import _magic
from uopc.uop import UOp

RNG = np.random.default_rng(7)


def divisor_classes(dt: DType) -> list[int]:
  lo, hi = dt.min, dt.max
  pos = {1, 2, 3, 5, 6, 7, 10, 12, 25, 100, 641, 1000, 2**16 + 1, 2**31 - 1, 2**32 - 5, 2**32 + 3, 0x5555555555555555}
  pos |= {2**k for k in range(dt.bits)} | {2**k + 1 for k in range(1, dt.bits)} | {2**k - 1 for k in range(2, dt.bits + 1)}
  pos |= {hi, hi - 1, hi // 3, hi // 7}
  ds = {d for d in pos if 0 < d <= hi}
  if not dt.is_unsigned(): ds |= {-d for d in ds} | {lo, lo + 1}
  return sorted(ds)


def dividends(dt: DType) -> np.ndarray:
  if dt.bits <= 16: return np.arange(dt.min, dt.max + 1).astype(NP[dt])
  edges = [dt.min, dt.min + 1, dt.max, dt.max - 1, 0, 1, 2, 3, 2**16, 2**31 - 1, 2**31, 2**32 - 1]
  edges = [e for e in edges if dt.min <= e <= dt.max] + [-e for e in edges if dt.min <= -e <= dt.max]
  rand = RNG.integers(0, 2**dt.bits, 20000 if dt.bits <= 32 else 3000, dtype=np.uint64).view(np.int64 if not dt.is_unsigned() else np.uint64)
  return np.concatenate([np.array(edges, dtype=object).astype(NP[dt]), rand.astype(NP[dt])])


def c_div(xs: np.ndarray, d: int, dt: DType) -> tuple[np.ndarray, np.ndarray]:
  """C's (quotient, remainder), wrapped to dt, in exact integers (int64 up to 32 bits, Python ints above)."""
  x = xs.astype(np.int64) if dt.bits <= 32 else np.array([int(v) for v in xs], dtype=object)
  q = abs(x) // abs(d) * np.where((x < 0) == (d < 0), 1, -1)
  r = x - q * d
  wrap = lambda v: np.array([truncate(int(e), dt) for e in v], dtype=object) if dt.bits > 32 else v  # noqa: E731
  return wrap(q).astype(NP[dt]), wrap(r).astype(NP[dt])


def _kernel(op: Ops, d: int, dt: DType):
  return lambda x: UOp(op, dt, (x, UOp.const(dt, d)))


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                dtypes.int64, dtypes.uint64], ids=str)
def test_division_by_constants_is_exact(dt):
  lib, divisors = Library(C_NO_DIVIDER), divisor_classes(dt)
  for d in divisors:
    for op in (Ops.IDIV, Ops.MOD):
      lowered = lib.add(f"{op.name.lower()}_{'m' if d < 0 else ''}{abs(d)}", _kernel(op, d, dt), [dt], dt)
      assert not ops_in(lowered) & {Ops.IDIV, Ops.MOD}
  xs = dividends(dt)
  for d in divisors:
    for op, want in zip((Ops.IDIV, Ops.MOD), c_div(xs, d, dt)):
      got = lib(f"{op.name.lower()}_{'m' if d < 0 else ''}{abs(d)}", xs)
      bad = np.flatnonzero(got != want)
      assert bad.size == 0, f"{op.name} by {d}: x={xs[bad[0]]} got {got[bad[0]]} want {want[bad[0]]}"


def test_known_range_uses_a_narrower_multiplier():
  # a uint32 dividend known to be below 2^16 divides by 7 with a 17-bit multiplier, no add-back step
  m, s = _magic(7, 2**16 - 1, 32)
  assert m < 2**32 and all((x * m) >> s == x // 7 for x in range(2**16))
  lib = Library(C_NO_DIVIDER)
  lib.add("small", lambda x: UOp(Ops.IDIV, dtypes.uint32, (UOp(Ops.CAST, dtypes.uint32, (x,)), UOp.const(dtypes.uint32, 7))),
          [dtypes.uint16], dtypes.uint32)
  xs = np.arange(2**16, dtype=np.uint16)
  assert (lib("small", xs) == xs.astype(np.uint32) // 7).all()


def test_target_with_a_divider_keeps_idiv():
  from isel_harness import elementwise
  from uopc.stages.isel import isel
  from uopc.targets import get_target
  sink = elementwise(_kernel(Ops.IDIV, 7, dtypes.int32), [dtypes.int32], dtypes.int32)
  assert Ops.IDIV in ops_in(isel(sink, get_target("c").ops))
  assert Ops.IDIV not in ops_in(isel(sink, get_target("cuda").ops))
