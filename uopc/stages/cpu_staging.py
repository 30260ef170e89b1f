"""Stage a CPU reduction's reused input in a LOCAL array: the STAGE opt of Optimize on the c and llvm targets.

A CPU gemm's register tile (uopc.stages.cpu_schedule) reads, for each step k of its reduction, a short
run of a row of b (two vectors of one row) and moves down b's rows: the tile's column block of b is a
strip of K runs, one row stride apart. The loop of row tiles inside the column block reads that strip
again for each tile. Where the row stride is a multiple of 4 KiB (2304 or 3072 floats: GPT-2's layers;
1024, 2048), every run of the strip falls into the same few sets of the L1 and L2 caches, which then hold
a few dozen of them, and each row tile reads the strip from L3 again (`_conflicts` models this). STAGE copies the strip, once per
column block, into a LOCAL array of K rows of the run's length (one per thread: thread-local storage where
it is large, so that the stack of the thread that calls the library need not hold it), and the row tiles
read it from there: contiguous, in every cache set. This is the packing of a BLAS library's
gemm, done per block inside the kernel: b is still read from memory once.

What is staged: each global input that the kernel only reads, through one ungated address, inside a
REDUCE loop (a SwiGLU's two products have one each), whose address does not depend on some loop that
encloses the reduction (the reuse loop: the row tiles) but depends only on loops outside it (the block:
the column block and its THREAD task).
The address is a linear form (uopc.symbolic.linear_form) over RANGEs: the block's loops give the tile's
origin; the reduce range, its UNROLL lanes and the UPCAST lanes give the offsets within the tile, which
must fill a dense box of R rows of C elements, S elements apart (S > C: a tile already contiguous is
not copied), with every offset's row and column each a sum of its own atoms (so the LOCAL address R x C
stays affine in the lanes and Expand's vector loads apply). The copy is a loop over the R rows with C
UPCAST lanes, inside the block's loops and before the reuse loop (the reads wait for it through an
AFTER); at most STAGE_BYTES of LOCAL array.

Invariants: the staged kernel reads exactly the values the unstaged one read, in the same order of
arithmetic (bit for bit the same results); every copied element is one the loads read (the box is the
set of their offsets); a kernel with nothing to stage is refused with the reason (an OptError).
"""
from __future__ import annotations

import math

from uopc.dtype import AddrSpace, PtrDType, dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.optimize import OptError, Trace, axis_size, axis_type, is_axis, kernel_axes, note, scopes
from uopc.stages.opts import STAGE_AUTO
from uopc.symbolic import linear_form, simplify
from uopc.uop import UOp

STAGE_BYTES = 1 << 20     # a staged tile's LOCAL array at most (the L2 of Zen 4 and 5)
L2_SETS, L2_WAYS, LINE = 1024, 16, 64  # the cache `_conflicts` models
MAX_OFFSETS = 1 << 18     # offsets enumerated to check a tile's box
TILE_TYPES = (AxisType.REDUCE, AxisType.UNROLL, AxisType.UPCAST)
LOOP_TYPES = (AxisType.GLOBAL, AxisType.THREAD, AxisType.LOOP)


class Unstageable(Exception):
  """Why a kernel's inputs cannot be staged (completes 'cannot apply STAGE: ...')."""


def stage_opt(sink: UOp, arg: object, trace: Trace | None) -> UOp:
  """STAGE on a CPU target: the kernel with its reused inputs staged, or an OptError saying why not."""
  if arg != STAGE_AUTO: raise OptError("STAGE takes no stage count on a CPU (one copy per block, no pipeline)")
  try:
    out = stage_cpu(sink)
  except Unstageable as e:
    raise OptError(str(e)) from None
  note(trace, sink, out)
  return out


def reuse(sink: UOp) -> tuple[int, bool]:
  """How many times the loops around the reduction read a staged tile (0: nothing to stage), and whether a
  tile's rows conflict in the cache (`_conflicts`)."""
  try:
    tiles, loop = _tiles(sink)
  except Unstageable:
    return 0, False
  nest = _loop_nest(sink)
  return math.prod(s if isinstance(s := axis_size(x), int) else 1 for x in nest[nest.index(loop):]), any(map(_conflicts, tiles))


def _conflicts(t: _Tile) -> bool:
  """The tile's rows, a stride apart in memory, need more lines of some cache sets than a 1 MiB, 16-way L2 of
  64-byte lines has (L2_SETS x L2_WAYS; Zen 4 and 5): a stride of a multiple of 4 KiB maps them all to a few sets."""
  size = t.index.src[0].dtype.base.itemsize
  if (t.s * size) % LINE: return False
  lines = -(-t.c * size // LINE)
  sets = min(L2_SETS, L2_SETS // math.gcd(t.s * size // LINE, L2_SETS) * lines)
  return t.r * lines > sets * L2_WAYS


def _loop_nest(sink: UOp) -> list[UOp]:
  """The loops (GLOBAL, THREAD, LOOP axes) of the chain of ENDs under the SINK, outermost first."""
  out: list[UOp] = []
  u = sink.src[0] if sink.op is Ops.SINK and len(sink.src) == 1 else None
  while u is not None and u.op is Ops.END and len(u.src) == 2:
    if is_axis(u.src[1]) and axis_type(u.src[1]) in LOOP_TYPES: out.append(u.src[1])
    u = u.src[0]
  return out


class _Tile:
  """One staged input: its loads' INDEX, the tile's origin and box, and how an offset splits into row and column."""

  def __init__(self, index: UOp, origin: dict, rows: dict, cols: dict, shape: tuple[int, int, int]):
    self.index, self.origin, self.rows, self.cols = index, origin, rows, cols
    self.r, self.c, self.s = shape


def _tiles(sink: UOp) -> tuple[list[_Tile], UOp]:
  """The inputs to stage and the reuse loop, or Unstageable."""
  axes = [a for a in kernel_axes(sink) if is_axis(a)]
  reduces = [a for a in axes if axis_type(a) is AxisType.REDUCE]
  if not reduces: raise Unstageable("the kernel has no REDUCE axis")
  if any(axis_type(a) not in LOOP_TYPES + TILE_TYPES for a in axes): raise Unstageable("the kernel has workgroup axes")
  nest = _loop_nest(sink)
  inside = scopes(sink)
  nodes = sink.toposort()
  written = {u.src[0].src[0] for u in nodes if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
  by_buffer: dict[UOp, set] = {}
  for u in nodes:
    if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM:
      buf = u.src[0].src[0]
      by_buffer.setdefault(buf, set()).add(u.src[0] if len(u.src) == 1 and any(r in inside[u] for r in reduces) else None)
  tiles, reuse = [], None
  for buf, indexes in by_buffer.items():
    if buf in written or len(indexes) != 1 or None in indexes: continue
    if not isinstance(buf.dtype, PtrDType) or buf.dtype.addrspace is not AddrSpace.GLOBAL: continue
    index = next(iter(indexes))
    if (found := _tile(index, nest)) is None: continue
    tile, loop = found
    if reuse is not None and loop is not reuse: continue
    tiles.append(tile)
    reuse = loop
  if not tiles: raise Unstageable("no input is read again by a loop around the reduction from a tile of rows apart")
  if sum(t.r * t.c * t.index.src[0].dtype.base.itemsize for t in tiles) > STAGE_BYTES:
    raise Unstageable(f"the tiles need more than {STAGE_BYTES} bytes of LOCAL array")
  return tiles, reuse


def _tile(index: UOp, nest: list[UOp]) -> tuple[_Tile, UOp] | None:
  form = linear_form(simplify(index.src[1]))
  tile_atoms = [a for a in form if a is not None and is_axis(a) and axis_type(a) in TILE_TYPES]
  others = [a for a in form if a is not None and a not in tile_atoms]  # the block's loops, or expressions of them only
  ranges = {a: {x for x in a.toposort() if x.op is Ops.RANGE} for a in others}
  deps = set().union(*ranges.values())
  free = [i for i, loop in enumerate(nest) if loop not in deps]
  if not free or not deps <= set(nest[:free[0]]): return None  # the block's loops, then the reuse loop
  if not all(isinstance(axis_size(a), int) for a in tile_atoms) or math.prod(axis_size(a) for a in tile_atoms) > MAX_OFFSETS: return None
  shape = _box({a: form[a] for a in tile_atoms})
  if shape is None: return None
  r, c, s = shape
  rows = {a: form[a] // s for a in tile_atoms if form[a] % s == 0 and form[a] >= s}
  cols = {a: form[a] for a in tile_atoms if a not in rows}
  if sum(form[a] * (axis_size(a) - 1) for a in cols) >= c: return None
  origin = {a: form[a] for a in form if a is None or a in others}
  return _Tile(index, origin, rows, cols, shape), nest[free[0]]


def _box(coeffs: dict[UOp, int]) -> tuple[int, int, int] | None:
  """(R, C, S) where the offsets sum(coefficient * value) fill rows 0..R-1 of C elements S apart, S > C."""
  if any(c < 0 for c in coeffs.values()): return None
  offsets = {0}
  for a, k in coeffs.items(): offsets = {o + k * v for o in offsets for v in range(axis_size(a))}
  c = 0
  while c in offsets: c += 1
  rest = sorted(o for o in offsets if o >= c)
  if not rest: return None  # one contiguous run: nothing to pack
  s = rest[0]
  if s <= c or len(offsets) % c: return None
  r = len(offsets) // c
  if offsets != {row * s + col for row in range(r) for col in range(c)}: return None
  return r, c, s


def _build(form: dict) -> UOp:
  out = UOp.const(dtypes.index, form.get(None, 0))
  for a, k in form.items():
    if a is not None: out = out.alu(Ops.ADD, a if k == 1 else a.alu(Ops.MUL, UOp.const(dtypes.index, k)))
  return simplify(out)


def stage_cpu(sink: UOp) -> UOp:
  """The kernel with each tile of `_tiles` copied to a LOCAL array before the reuse loop and read from there."""
  tiles, _ = _tiles(sink)
  nodes = sink.toposort()
  slot = 1 + max((u.arg[0] for u in nodes if u.op is Ops.BUFFER and isinstance(u.arg, tuple)), default=-1)
  next_axis = 1 + max(a.arg[0] for a in kernel_axes(sink) if is_axis(a))
  subst: dict[UOp, UOp] = {}
  for i, t in enumerate(tiles):
    buf = t.index.src[0]
    local = UOp(Ops.BUFFER, buf.dtype.base.ptr(AddrSpace.LOCAL, t.r * t.c), (), (slot + i, f"tile{slot + i}"))
    row = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, t.r),), (next_axis + 2 * i, AxisType.LOOP))
    col = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, t.c),), (next_axis + 2 * i + 1, AxisType.UPCAST))
    src = _build({**t.origin, row: t.s, col: 1})
    copy = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, local.dtype, (local, _build({row: t.c, col: 1}))),
                                        UOp(Ops.LOAD, buf.dtype.base, (UOp(Ops.INDEX, buf.dtype, (buf, src)),))))
    copied = UOp(Ops.END, dtypes.void, (UOp(Ops.END, dtypes.void, (copy, col)), row))
    at = _build({**{a: k * t.c for a, k in t.rows.items()}, **t.cols})
    subst[t.index] = UOp(Ops.INDEX, local.dtype, (UOp(Ops.AFTER, local.dtype, (local, copied)), at))
  memo: dict[UOp, UOp] = {}
  for u in nodes:
    if u in subst: memo[u] = subst[u]; continue  # noqa: E702
    src = tuple(memo[s] for s in u.src)
    memo[u] = u if src == u.src else u.replace(src=src)
  return memo[sink]
