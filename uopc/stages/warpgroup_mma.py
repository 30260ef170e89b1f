"""Warpgroup MMAs (sm_90a's `wgmma.mma_async`): a part of tc_staging on builds whose every arch has them.

TC's warpgroup tiles (uopc.stages.opts.WARPGROUP_TILES) split a workgroup into warpgroups (4 consecutive
warps, 128 threads) whose warp w holds rows 16 w + g and + 8 (g = lane // 4) of each 64-row block i of its
warpgroup's rows, all of the tile's N columns (tile 9: one warpgroup, 2 blocks of 128 columns; tile 10:
two warpgroups of one block of 256). Once tc_staging has put the operands in LOCAL tiles, the WMMAs of one
block and one k step s over the N / 8 column tiles j, taken over a warpgroup's 4 warps, are exactly one
m64nNk16 product whose accumulators each thread holds as it held the N / 8 m16n8 C fragments (lane and
register order alike: wgmma's D layout is mma.sync's, tile after tile). `warpgroup_mmas` replaces them by
one warpgroup WMMA that reads A and B from the LOCAL tiles itself:

  WMMA(INDEX(A's tile, its element (block i of the thread's warpgroup, step s)), INDEX(B's tile, its
       element (step s, column 0)), acc: N / 2 floats, arg=WarpgroupMMA.arg)

The arg names the shape and, per operand, how wgmma's matrix descriptor reads the tile: its major-ness
(K-major: the tile's rows run along M or N and its 16-byte chunks along K; MN-major the other way), the
swizzle (rows of 32, 64 or 128 bytes whose chunks tc_staging's _Layout swizzles exactly as wgmma's 32-,
64- and 128-byte modes do when every 8 rows start at a multiple of 8 times the row's bytes), the leading
byte offset (MN-major: from one 128-byte panel to the next) and the stride byte offset (from 8 rows to
the next 8), and `pending`: how many groups of the loop's MMAs may still run when an iteration ends
(1 where tc_staging starts each stage's copies one iteration later, so that the MMAs overlap the next
iteration's barrier and copies). The renderer builds the descriptors from the INDEXes' addresses and
places the fences and waits (uopc/targets/cuda/ptx_wgmma.py).

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
  pending: int = 0  # groups of the reduction loop's MMAs that may still run when an iteration ends

  @property
  def shape(self) -> str: return f"m64n{self.n}k16"

  @property
  def arg(self) -> tuple:
    return (WGMMA, self.shape, self.input, self.acc, tuple(vars(self.a).values()), tuple(vars(self.b).values()), self.pending)


def warpgroup_arg(arg) -> WarpgroupMMA | None:
  """The WarpgroupMMA a WMMA's arg names, or None for a warp's tensor core."""
  if not (isinstance(arg, tuple) and len(arg) == 7 and arg[0] == WGMMA): return None
  n = int(arg[1][len("m64n"):-len("k16")])
  return WarpgroupMMA(n, arg[2], arg[3], Operand(*arg[4]), Operand(*arg[5]), arg[6])


def _value(u: UOp, env: dict) -> int:
  from uopc.stages.tc_staging import _value as value
  return value(u, env)


class _Threads:
  """Every thread of the workgroup: its ranges' values, its warpgroup, its warp in it and its lane (32
  consecutive threads a warp, 4 consecutive warps a warpgroup), and the warpgroup as an expression."""

  def __init__(self, threads: list[UOp]):
    self.envs = [dict(zip(threads, vals)) for vals in itertools.product(*(range(r.src[0].arg) for r in threads))]
    self.group = [t // WARPGROUP for t in range(len(self.envs))]
    self.warp = [t // WARP_SIZE % 4 for t in range(len(self.envs))]
    self.lane = [t % WARP_SIZE for t in range(len(self.envs))]
    self.groups = len(self.envs) // WARPGROUP
    tid = UOp.const(dtypes.index, 0)
    for r in threads: tid = tid.alu(Ops.MUL, UOp.const(dtypes.index, r.src[0].arg)).alu(Ops.ADD, r)
    self.group_index = simplify(tid.alu(Ops.IDIV, UOp.const(dtypes.index, WARPGROUP)))
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


def _origin(cells: list, table, along_rows: bool, th: _Threads, warps: bool) -> tuple[int, int, int] | None:
  """(M or N origin of warpgroup 0, its step from one warpgroup to the next, K origin) of a fragment whose
  element e each thread holds at (mn + 16 w + g + table[e][0], k + 2 t + table[e][1]) of the operand (w, the
  warp in its warpgroup, only where `warps`), the tile's rows along M/N (`along_rows`) or K; or None."""
  def origin(t: int) -> tuple[int, int]:
    r0, c0 = cells[t][0]
    return (r0 - table[0][0], c0 - table[0][1]) if along_rows else (c0 - table[0][0], r0 - table[0][1])
  def expect(t: int, e: int, mn: int, k: int) -> tuple[int, int]:
    lane = th.lane[t]
    x = mn + (16 * th.warp[t] if warps else 0) + lane // 4 + table[e][0]
    y = k + 2 * (lane % 4) + table[e][1]
    return (x, y) if along_rows else (y, x)
  (mn, k), step = origin(0), origin(WARPGROUP)[0] - origin(0)[0] if th.groups > 1 else 0
  ok = all(cells[t][e] == expect(t, e, mn + step * th.group[t], k) for t in range(len(cells)) for e in range(len(table)))
  return (mn, step, k) if ok else None


def _operand(layout, mn_major: bool, extent: int) -> Operand | None:
  """The descriptor of a tile read `extent` elements along M/N per instruction, if wgmma can read it."""
  row = layout.width * layout.itemsize
  if not layout.swizzled or row not in _SWIZZLES or (layout.size * layout.itemsize) % 1024: return None
  if mn_major and extent > layout.width and (not layout.panels or extent % layout.width): return None
  leading = layout.rows * row if mn_major else 16
  return Operand(mn_major, row, leading, 8 * row)


def warpgroup_mmas(body: UOp, where: dict, threads: list[UOp], pending: int = 0) -> UOp | None:
  """`body` (the reduction loop's GROUP of accumulator STOREs, each of a chain of WMMAs over the k steps)
  with each block's WMMAs of a k step as one warpgroup WMMA (module docstring), or None where they are not."""
  if body.op is not Ops.GROUP or not all(isinstance(r.src[0].arg, int) for r in threads): return None
  th = _Threads(threads)
  if not th.envs or len(th.envs) % WARPGROUP: return None
  blocks: dict[int, dict[int, tuple]] = {}  # block i (of warpgroup 0) -> {column tile j: (store, load, [steps])}
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
      if not (a_rows or a_cols) or not (b_rows or b_cols): return None
      (m, m_step, ka), (n, n_step, kb) = a_rows or a_cols, b_rows or b_cols
      if ka != kb or m % 64 or m_step % 64 or ka % 16: return None
      steps.append((a, a_rows is None, b, b_rows is None, (m, m_step), (n, n_step), ka))
      ij.add((m // 64, n))
    if len(ij) != 1: return None
    (i, n), = ij
    blocks.setdefault(i, {})[n] = (st, x, steps)
  return _rewrite(blocks, th.group_index, pending)


def _rewrite(blocks: dict, group: UOp, pending: int) -> UOp | None:
  first = next(iter(next(iter(blocks.values())).values()))
  _, _, steps0 = first
  tc_in = steps0[0][0][0].dtype.base.scalar
  stores = []
  def at(origin: tuple[int, int]) -> UOp: return _i(origin[0]).alu(Ops.ADD, group.alu(Ops.MUL, _i(origin[1])))
  for i, tiles in sorted(blocks.items()):
    cols = sorted(tiles)
    n0, n = cols[0], 8 * len(cols)
    if cols != list(range(n0, n0 + n, 8)) or not 8 <= n <= 256: return None
    offs = [int(tiles[c][0].src[0].src[1].arg) for c in cols]
    if offs != list(range(offs[0], offs[0] + 4 * len(cols), 4)): return None
    ks = [[(s[5][1], s[6]) for s in tiles[c][2]] for c in cols]
    if any(k != ks[0] for k in ks): return None
    st, load, steps = tiles[n0]
    acc_dt = load.dtype.scalar
    x = UOp(Ops.LOAD, acc_dt.vec(n // 2), (load.src[0],))
    for a, a_mn, b, b_mn, m, nb, k in steps:
      (ta, la, base_a, _), (tb, lb, base_b, _) = a, b
      da, db = _operand(la, a_mn, 64), _operand(lb, b_mn, n)
      if da is None or db is None: return None
      spec = WarpgroupMMA(n, tc_in.name, acc_dt.name, da, db, pending)
      at_a = la.at(*(at(m), _i(k)) if not a_mn else (_i(k), at(m)))
      at_b = lb.at(*(_i(k), at(nb)) if b_mn else (at(nb), _i(k)))
      ia = UOp(Ops.INDEX, ta.dtype, (ta, simplify(at_a).alu(Ops.ADD, base_a)))
      ib = UOp(Ops.INDEX, tb.dtype, (tb, simplify(at_b).alu(Ops.ADD, base_b)))
      x = UOp(Ops.WMMA, x.dtype, (ia, ib, x), spec.arg)
    stores.append(UOp(Ops.STORE, dtypes.void, (st.src[0], x)))
  return UOp(Ops.GROUP, dtypes.void, tuple(stores))


def _i(v: int) -> UOp: return UOp.const(dtypes.index, v)
