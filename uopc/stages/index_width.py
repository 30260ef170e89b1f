"""Index arithmetic in 32 bits where it fits: the last step of Instruction Selection on GPU targets.

`index` is 64 bits wide in the IR and in every renderer; on a GPU a 64-bit add or compare is two
instructions and a 64-bit multiply several, where the 32-bit ones are one, and a kernel's address
arithmetic (a gated window read, a prefix sum's triangular mask) can cost more than its math.
`narrow_index` recomputes every index-typed node whose values all fit in int32 as an int32 node:

- value ranges are interval arithmetic over the lanes of each node (`_range`): a leaf's own min_max
  (RANGE, SPECIAL, DEFINE_VAR, CONST), then ADD, SUB, MUL, NEG, MAX, MULACC, WHERE, IDIV/MOD of a
  non-negative dividend by a positive constant, AND with a non-negative operand, SHR/SHL by a constant,
  and STACK/GEP (the union of the lanes); anything else has no range and is never narrowed;
- a node is narrowed when its range fits in [-2**31, 2**31) and every index source is narrowed or a
  fitting leaf (a RANGE, SPECIAL or DEFINE_VAR stays as it is, read through a CAST to int32 - so the
  loops, their ENDs and the launch geometry are untouched); its 32-bit result then equals the
  64-bit one exactly, as no intermediate value leaves the range (integer ops wrap only outside it);
- a consumer keeps what it needs: INDEX takes the int32 offset (the renderer widens it in its
  multiply-add, PTX `mad.wide.s32`), a comparison of two narrowed operands compares in 32 bits, any other user of a
  narrowed value gets it back as `index` through a CAST (sign extension: the same value).

Measured on the H100 (tests/bench/RESULTS.md): cumsum 0.021 -> 0.017 ms, GPT-2 attention 0.103 -> 0.092,
the batched convolution 0.596 -> 0.578; the ResNet block (224 workgroups of 112 threads: one per SM, so
latency-bound) 0.024 -> 0.030, as ptxas keeps fewer loads in flight in the leaner code (40 registers
instead of 64-72; long-scoreboard stalls per issue 3.5 -> 7.2).

Invariants: the kernel computes the same values (every narrowed node's range fits int32, and a DEFINE_VAR's
declared range is checked by the launcher); nodes that are not index-typed are unchanged but for their
sources; the blocks (RANGEs, SPECIALs, IFs) and the launch geometry are the same.
"""
from __future__ import annotations

from uopc.dtype import DType, dtypes
from uopc.ops import Ops
from uopc.uop import UOp

_LO, _HI = -(2 ** 31), 2 ** 31 - 1
_LEAVES = (Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR)
_ARITH = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.MULACC, Ops.WHERE, Ops.IDIV, Ops.MOD, Ops.AND, Ops.SHR,
          Ops.SHL, Ops.STACK, Ops.GEP, Ops.CONST)
_COMPARE = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)

Range = tuple[int, int] | None


def _is_index(u: UOp) -> bool: return u.dtype.scalar is dtypes.index


def _fits(r: Range) -> bool: return r is not None and _LO <= r[0] and r[1] <= _HI


def _span(*vals: int) -> tuple[int, int]: return (min(vals), max(vals))


def _const_of(r: Range) -> int | None: return r[0] if r is not None and r[0] == r[1] else None


def _range(u: UOp, rs: list[Range]) -> Range:
  """The range of every lane of index node `u` from its sources' ranges `rs` (None: unknown)."""
  op = u.op
  if op in _LEAVES or op is Ops.CONST: return _own_range(u)
  if op is Ops.WHERE: rs = rs[1:]  # the condition is not an index
  if any(r is None for r in rs): return None
  if op in (Ops.STACK, Ops.GEP, Ops.WHERE): return _span(*(x for r in rs for x in r))
  if op is Ops.NEG: return (-rs[0][1], -rs[0][0])
  (a, A), (b, B) = rs[0], rs[1] if len(rs) > 1 else (0, 0)
  if op is Ops.ADD: return (a + b, A + B)
  if op is Ops.SUB: return (a - B, A - b)
  if op is Ops.MAX: return (max(a, b), max(A, B))
  if op in (Ops.MUL, Ops.MULACC):
    lo, hi = _span(a * b, a * B, A * b, A * B)
    return (lo + rs[2][0], hi + rs[2][1]) if op is Ops.MULACC else (lo, hi)
  d = _const_of(rs[1])
  if op in (Ops.IDIV, Ops.MOD) and a >= 0 and d is not None and d > 0:
    return (a // d, A // d) if op is Ops.IDIV else (0, min(A, d - 1))
  if op is Ops.AND and (a >= 0 or b >= 0): return (0, A if a >= 0 and (b < 0 or A <= B) else B)
  if op is Ops.SHR and a >= 0 and d is not None and 0 <= d < 64: return (a >> d, A >> d)
  if op is Ops.SHL and d is not None and 0 <= d < 32: return (a << d, A << d)
  return None


def _own_range(u: UOp) -> Range:
  """A node's derived min_max where it is an integer range (a leaf, or a source that is not an index)."""
  lo, hi = u.min_max
  return (lo, hi) if isinstance(lo, int) and isinstance(hi, int) and not isinstance(lo, bool) else None


def _int32(dt: DType) -> DType: return dtypes.int32.vec(dt.count) if dt.count > 1 else dtypes.int32


def narrow_index(sink: UOp) -> UOp:
  """`sink` with its index arithmetic in int32 wherever every value fits (see the module docstring)."""
  ranges: dict[UOp, Range] = {}
  narrow: dict[UOp, UOp] = {}    # index node -> its int32 equivalent
  done: dict[UOp, UOp] = {}      # node -> its rewritten self (index-typed where it was)

  for u in sink.toposort():
    if _is_index(u) and (u.op in _ARITH or u.op in _LEAVES):
      ranges[u] = _range(u, [ranges.get(s) if _is_index(s) else _own_range(s) for s in u.src])
      if _fits(ranges[u]) and all(s in narrow for s in u.src if _is_index(s)):
        if u.op in _LEAVES:
          done[u] = _rebuild(u, narrow, done)
          narrow[u] = UOp(Ops.CAST, _int32(u.dtype), (done[u],))
        elif u.op is Ops.CONST: narrow[u], done[u] = u.replace(dtype=_int32(u.dtype)), u
        else:
          narrow[u] = UOp(u.op, _int32(u.dtype), tuple(narrow[s] if _is_index(s) else done[s] for s in u.src), u.arg)
          done[u] = UOp(Ops.CAST, u.dtype, (narrow[u],))
        continue
    done[u] = _rebuild(u, narrow, done)
  return done[sink]


def _rebuild(u: UOp, narrow: dict[UOp, UOp], done: dict[UOp, UOp]) -> UOp:
  """A node that stays as it is, on its rewritten sources: 32-bit ones where it takes them (INDEX's
  offset, a comparison of two narrowed values), else each source as `index` (`done`)."""
  if not u.src: return u
  if u.op is Ops.INDEX and len(u.src) >= 2 and u.src[1] in narrow and u.src[1].op not in (Ops.CONST, *_LEAVES):
    return u.replace(src=(done[u.src[0]], narrow[u.src[1]], *(done[s] for s in u.src[2:])))
  if u.op in _COMPARE and all(s in narrow for s in u.src):
    return u.replace(src=tuple(narrow[s] for s in u.src))
  return u.replace(src=tuple(done[s] for s in u.src))

