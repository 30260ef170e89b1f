"""Warpgroup MMAs (sm_90a's `wgmma.mma_async`): a part of tc_staging on builds whose every arch has them.

TC's warpgroup tile (uopc.stages.opts.WARPGROUP_TILE) gives a workgroup of 4 warps (one warpgroup, 128
threads) whose rows interleave: warp w holds rows 16 w + g and + 8 (g = lane // 4) of every 64-row block
i of the workgroup's tile, all of its N columns. Once tc_staging has put the operands in LOCAL tiles, the
WMMAs of one block i and one k step s over the N / 8 column tiles j, taken over the 4 warps, are exactly
one m64nNk16 product whose accumulators each thread holds as it held the N / 8 m16n8 C fragments (lane
and register order alike: wgmma's D layout is mma.sync's, tile after tile). `warpgroup_mmas` replaces
them by one warpgroup WMMA that reads A and B from the LOCAL tiles itself:

  WMMA(INDEX(A's tile, its element (block i, step s)), INDEX(B's tile, its element (step s, column 0)),
       acc: N / 2 floats, arg=WarpgroupMMA.arg)

The arg names the shape and, per operand, how wgmma's matrix descriptor reads the tile: its major-ness
(K-major: the tile's rows run along M or N and its 16-byte chunks along K; MN-major the other way), the
swizzle (rows of 32, 64 or 128 bytes whose chunks tc_staging's _Layout swizzles exactly as wgmma's 32-,
64- and 128-byte modes do when every 8 rows start at a multiple of 8 times the row's bytes), the leading
byte offset (MN-major: from one 128-byte panel to the next) and the stride byte offset (from 8 rows to
the next 8). The renderer builds the descriptors from the INDEXes' addresses (uopc/targets/cuda/
ptx_wgmma.py).

Invariant: the rewrite happens only when, for every thread of the workgroup and every element of every
fragment, the element it read is where wgmma reads it (checked by evaluating the fragments' row and column
forms); any other kernel keeps its WMMAs, which are correct on sm_90a too.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.stages.tensor_cores import WARP_SIZE, by_arg
from uopc.symbolic import simplify
from uopc.uop import UOp

WARPGROUP = 4 * WARP_SIZE
WGMMA = "wgmma"
_SWIZZLES = (32, 64, 128)  # bytes of a swizzled row (or panel row) that wgmma's modes read


@dataclass(frozen=True)
class Operand:
  """How a warpgroup MMA's descriptor reads one operand's LOCAL tile (module docstring)."""
  mn_major: bool
  swizzle: int       # bytes: 32, 64 or 128
  leading: int       # leading byte offset
  stride: int        # stride byte offset


@dataclass(frozen=True)
class WarpgroupMMA:
  n: int
  input: str
  acc: str
  a: Operand
  b: Operand

  @property
  def shape(self) -> str: return f"m64n{self.n}k16"

  @property
  def arg(self) -> tuple:
    return (WGMMA, self.shape, self.input, self.acc, tuple(vars(self.a).values()), tuple(vars(self.b).values()))


def warpgroup_arg(arg) -> WarpgroupMMA | None:
  """The WarpgroupMMA a WMMA's arg names, or None for a warp's tensor core."""
  if not (isinstance(arg, tuple) and len(arg) == 6 and arg[0] == WGMMA): return None
  n = int(arg[1][len("m64n"):-len("k16")])
  return WarpgroupMMA(n, arg[2], arg[3], Operand(*arg[4]), Operand(*arg[5]))


def _value(u: UOp, env: dict) -> int:
  from uopc.stages.tc_staging import _value as value
  return value(u, env)


class _Threads:
  """Every thread of the workgroup: its ranges' values, warp and lane (32 consecutive threads a warp)."""

  def __init__(self, threads: list[UOp]):
    self.envs = [dict(zip(threads, vals)) for vals in itertools.product(*(range(r.src[0].arg) for r in threads))]
    self.warp = [t // WARP_SIZE for t in range(len(self.envs))]
    self.lane = [t % WARP_SIZE for t in range(len(self.envs))]
    self.memo: dict[UOp, list[int]] = {}

  def form(self, form: dict) -> list[int]:
    out = [0] * len(self.envs)
    for a, c in form.items():
      if a is None: vals = [1] * len(self.envs)
      elif (vals := self.memo.get(a)) is None: vals = self.memo[a] = [_value(a, env) for env in self.envs]
      out = [o + c * v for o, v in zip(out, vals)]
    return out


def _positions(frag: UOp, where: dict, th: _Threads) -> tuple | None:
  """(tile, layout, stage base, [[(row, col) of element e] per thread]) of a fragment read from one stage
  of one LOCAL tile, or None."""
  ws = [where.get(ld) for ld in frag.src] if frag.op is Ops.STACK else [None]
  if None in ws or any(w[0] is not ws[0][0] or w[5] is not ws[0][5] for w in ws): return None
  cells = [list(zip(th.form(w[2]), th.form(w[3]))) for w in ws]
  return ws[0][0], ws[0][1], ws[0][5], [[cells[e][t] for e in range(len(ws))] for t in range(len(th.envs))]


def _origin(cells: list, table, along_rows: bool, th: _Threads, warps: bool) -> tuple[int, int] | None:
  """The fragment's (M or N origin, K origin) where each thread's element e sits at (m + 16 w + g + table[e][0],
  k + 2 t + table[e][1]) of the operand (w only where `warps`), the tile's rows along M/N (`along_rows`) or K."""
  def expect(t: int, e: int, mn: int, k: int) -> tuple[int, int]:
    lane = th.lane[t]
    x = mn + (16 * th.warp[t] if warps else 0) + lane // 4 + table[e][0]
    y = k + 2 * (lane % 4) + table[e][1]
    return (x, y) if along_rows else (y, x)
  r0, c0 = cells[0][0]
  mn, k = (r0 - table[0][0], c0 - table[0][1]) if along_rows else (c0 - table[0][0], r0 - table[0][1])
  ok = all(cells[t][e] == expect(t, e, mn, k) for t in range(len(cells)) for e in range(len(table)))
  return (mn, k) if ok else None


def _operand(layout, mn_major: bool, extent: int) -> Operand | None:
  """The descriptor of a tile read `extent` elements along M/N per instruction, if wgmma can read it."""
  row = layout.width * layout.itemsize
  if not layout.swizzled or row not in _SWIZZLES or (layout.size * layout.itemsize) % 1024: return None
  if mn_major and extent > layout.width and (not layout.panels or extent % layout.width): return None
  leading = layout.rows * row if mn_major else 16
  return Operand(mn_major, row, leading, 8 * row)


def warpgroup_mmas(body: UOp, where: dict, threads: list[UOp]) -> UOp | None:
  """`body` (the reduction loop's GROUP of accumulator STOREs, each of a chain of WMMAs over the k steps)
  with each block's WMMAs of a k step as one warpgroup WMMA (module docstring), or None where they are not."""
  if body.op is not Ops.GROUP or not all(isinstance(r.src[0].arg, int) for r in threads): return None
  th = _Threads(threads)
  if len(th.envs) != WARPGROUP: return None
  blocks: dict[int, dict[int, tuple]] = {}  # block i -> {column tile j: (store, load, [(a, b) per k step])}
  for st in body.src:
    chain, x = [], st.src[1] if st.op is Ops.STORE else None
    while x is not None and x.op is Ops.WMMA: chain, x = [x] + chain, x.src[2]
    if not chain or x is None or x.op is not Ops.LOAD or st.src[0].src[1].op is not Ops.CONST: return None
    tcs = {by_arg(w.arg) for w in chain}
    tc = next(iter(tcs))
    if len(tcs) != 1 or tc is None or tc.dims != (16, 8, 16) or tc.c != ((0, 0), (0, 1), (8, 0), (8, 1)): return None
    steps, ij = [], set()
    for w in chain:
      a, b = _positions(w.src[0], where, th), _positions(w.src[1], where, th)
      if a is None or b is None: return None
      a_rows = _origin(a[3], tc.a, True, th, True)
      a_cols = None if a_rows else _origin(a[3], tc.a, False, th, True)
      b_tab = tuple((dn, dk) for dk, dn in tc.b)  # B's table as (N offset, K offset)
      b_rows = _origin(b[3], b_tab, True, th, False)
      b_cols = None if b_rows else _origin(b[3], b_tab, False, th, False)
      (m, ka), (n, kb) = a_rows or a_cols or (None, None), b_rows or b_cols or (None, None)
      if m is None or n is None or ka != kb or m % 64 or ka % 16: return None
      steps.append((a, a_rows is None, b, b_rows is None, m, n, ka))
      ij.add((m // 64, n))
    if len(ij) != 1: return None
    (i, n), = ij
    blocks.setdefault(i, {})[n] = (st, x, steps)
  return _rewrite(blocks)


def _rewrite(blocks: dict) -> UOp | None:
  first = next(iter(next(iter(blocks.values())).values()))
  _, _, steps0 = first
  tc_in = steps0[0][0][0].dtype.base.scalar
  stores = []
  for i, tiles in sorted(blocks.items()):
    cols = sorted(tiles)
    n0, n = cols[0], 8 * len(cols)
    if cols != list(range(n0, n0 + n, 8)) or not 8 <= n <= 256: return None
    offs = [int(tiles[c][0].src[0].src[1].arg) for c in cols]
    if offs != list(range(offs[0], offs[0] + 4 * len(cols), 4)): return None
    ks = [[s[6] for s in tiles[c][2]] for c in cols]
    if any(k != ks[0] for k in ks): return None
    st, load, steps = tiles[n0]
    acc_dt = load.dtype.scalar
    x = UOp(Ops.LOAD, acc_dt.vec(n // 2), (load.src[0],))
    for a, a_mn, b, b_mn, m, _, k in steps:
      (ta, la, base_a, _), (tb, lb, base_b, _) = a, b
      da, db = _operand(la, a_mn, 64), _operand(lb, b_mn, n)
      if da is None or db is None: return None
      spec = WarpgroupMMA(n, tc_in.name, acc_dt.name, da, db)
      at_a = la.at(*(_i(m), _i(k)) if not a_mn else (_i(k), _i(m)))
      at_b = lb.at(*(_i(k), _i(n0)) if b_mn else (_i(n0), _i(k)))
      ia = UOp(Ops.INDEX, ta.dtype, (ta, simplify(at_a).alu(Ops.ADD, base_a)))
      ib = UOp(Ops.INDEX, tb.dtype, (tb, simplify(at_b).alu(Ops.ADD, base_b)))
      x = UOp(Ops.WMMA, x.dtype, (ia, ib, x), spec.arg)
    stores.append(UOp(Ops.STORE, dtypes.void, (st.src[0], x)))
  return UOp(Ops.GROUP, dtypes.void, tuple(stores))


def _i(v: int) -> UOp: return UOp.const(dtypes.index, v)
