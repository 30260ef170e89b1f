"""Stage the inputs of a GPU reduction in LOCAL (shared) memory: the STAGE opt of Optimize (-t cuda).

After a register-tile schedule (uopc.stages.gpu_schedule) each thread reads its inputs straight from
global memory (through L1): in a float32 gemm every a[m, k] a thread loads is loaded again by every
thread of its workgroup along n, every b[k, n] by every thread along m. STAGE instead copies, in each
iteration of the reduction, the tile of such an input that the whole workgroup reads into a LOCAL
buffer with asynchronous copies (cp.async) a few iterations ahead, and the threads read their values
from there; the analysis is uopc.stages.tc_staging's (the tensor cores' staging), run on other ranges:

- staged inputs: global buffers that the kernel only reads, ungated, inside its one REDUCE axis k, at
  addresses that depend on k and miss some LOCAL axis (so several threads read each value);
- the tile: an address is a linear form over atoms (uopc.symbolic.linear_form), split into a block part
  (GLOBAL and REDUCE ranges: one value per workgroup and iteration) and a thread part (LOCAL ranges and
  the UPCAST/UNROLL lanes: Optimize stages before Expand, so an input is still one scalar LOAD inside
  its lanes); the thread part's offsets over every thread and lane must fill a dense R x C box of row
  stride S (tc_staging._plan), which is the tile. An iteration's K depth is the UNROLL of k
  (`SPLIT(k,8,r)`: 8 rows of a gemm's b, 8 columns of its a);
- the layout: a tile is stored by rows (pitch C) when the fastest lane of a thread's reads (the one
  Expand makes consecutive in a vector: the last UPCAST axis) moves along a row, and *transposed*, by
  columns (pitch R + 16 bytes), when it moves down a column, as a gemm's a does: a thread's 8 values
  of a are then two 16-byte LOCAL reads. Tiles by rows are copied in 16-byte chunks (8 or 4 bytes where
  16 are not aligned), transposed ones element by element (cp.async moves 4, 8 or 16 bytes); either
  way consecutive threads copy consecutive global elements (coalesced), each thread the same number of
  copies: where the tile's copies are not a multiple of the threads, the last round's spare threads copy
  its last chunk again, into slack after the tile that nothing reads. There is no swizzle, so that the
  LOCAL address stays affine in the lanes and Expand's vector loads apply; tiles whose rows (by-row
  storage) depend on a LOCAL axis are padded by 16 bytes a row against bank conflicts;
- the pipeline, as in tc_staging: 3 stages (tiles in flight) or 2, the most that fit MAX_LOCAL_BYTES
  (or the pinned number); the first stages - 1 iterations are copied before the loop; iteration k
  waits for its own copies and everyone's (BARRIER (ASYNC, stages - 2)), starts those of iteration
  k + stages - 1 (zeros past the end) into the stage iteration k - 1 read, then reads its own stage.
  One barrier per iteration.

`staged_gemm` is the heuristic that picks this for a large float32 gemm on -t cuda, with a schedule
made for it (STAGED_TILES: 8 x 16 threads, each computing 8 x 16, 8 x 8, 4 x 4 or 2 x 8 outputs as runs of
4 (2 along m in the last), the runs of an axis run x its threads apart, so that a quarter warp's 16-byte
LOCAL reads of b are 128 contiguous bytes: no bank conflict; workgroups of 64 x 256 to 16 x 128 outputs,
the smaller ones for gemms with few rows). An M or N that the workgroup's tile does not divide is padded with overlapping tiles (PADTO's
third argument): the last tile moves back to end at the axis's end, a shift that depends on the workgroup
only, so the loads stay ungated and their addresses affine in the threads and lanes.

Invariants: the staged kernel reads exactly the values the unstaged one read and computes in the same
order (bit for bit the same results); every copy is in bounds (the box is dense and inside what the
loads read); a kernel this cannot stage is returned unchanged (`stage_reduction`) or refused with the
reason (`stage_opt`, an OptError); LOCAL BUFFER slots follow the kernel's existing BUFFER slots.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from uopc.dtype import AddrSpace, PtrDType, dtypes
from uopc.ops import AxisType, Ops
from uopc.rewrite import substitute
from uopc.stages.expand import _lane_order  # the order of a vector's lanes
from uopc.stages.optimize import (Opt, OptError, OptOp, TargetCaps, Trace, axis_size, axis_type, is_axis, kernel_axes, note,
                                  scopes, workgroup_dims)
from uopc.stages.planner import _contiguous_output, _Planner
from uopc.stages.opts import STAGE_AUTO
from uopc.stages.tc_staging import MAX_LOCAL_BYTES, STAGES, Form, _build, _idx, _Operand, _plan, _ranges, _split_on
from uopc.stages.tensor_cores import ASYNC
from uopc.symbolic import simplify
from uopc.uop import UOp

LANES = (AxisType.UPCAST, AxisType.UNROLL)
THREAD_TYPES = (AxisType.LOCAL,) + LANES
COPY_BYTES = (16, 8, 4)             # what one asynchronous copy moves
PAD_BYTES = 16                      # a padded row's extra bytes (one 16-byte chunk: vector reads stay aligned)
MAX_POINTS = 1 << 16                # thread x lane points the analysis enumerates per input at most


class Unstageable(Exception):
  """Why a kernel's inputs cannot be staged (the message completes 'cannot apply STAGE: ...')."""


@dataclass
class _Tile:
  """One staged input: its LOADs, where its tile lies in global memory and how it is stored in LOCAL."""
  buf: UOp
  loads: list[UOp]
  origin: UOp                       # the tile's element (0, 0) in buf: block ranges only
  stride: int                       # S: buf elements from one tile row to the next
  rows: int
  cols: int
  v: int                            # elements one copy moves
  splits: list[tuple[Form, Form]]   # each LOAD's (row, column) in the tile
  transposed: bool                  # stored by columns
  pitch: int                        # LOCAL elements from one stored line to the next
  slack: int = 0                    # LOCAL elements after the tile that the last round's spare copies fill

  @property
  def lines(self) -> int: return (self.cols if self.transposed else self.rows) * self.pitch
  @property
  def size(self) -> int: return self.lines + self.slack  # one stage
  @property
  def copies(self) -> int: return self.rows * self.cols // self.v

  def at(self, row: UOp, col: UOp) -> UOp:
    line, pos = (col, row) if self.transposed else (row, col)
    return line.alu(Ops.MUL, _idx(self.pitch)).alu(Ops.ADD, pos)


def _down_columns(ld: UOp, row: Form, col: Form) -> bool:
  """The load's fastest lane moves down the tile's columns by one row: a transposed tile makes its lanes consecutive."""
  lanes = sorted((r for r in _ranges(ld.src[0].src[1]) if is_axis(r) and axis_type(r) in LANES), key=_lane_order)
  return bool(lanes) and row.get(lanes[-1]) == 1 and lanes[-1] not in col


def _tile(buf: UOp, loads: list[UOp]) -> _Tile | None:
  op = _Operand(buf, loads)
  threads = sorted({r for f in op.forms for a in f if a is not None for r in _ranges(a) if is_axis(r) and axis_type(r) in THREAD_TYPES},
                   key=lambda r: r.arg[0])
  if not all(isinstance(axis_size(r), int) for r in threads) or math.prod(axis_size(r) for r in threads) > MAX_POINTS: return None
  plan = _plan(op, threads, THREAD_TYPES)
  if plan is None: return None
  block, s, rows, cols, v, found = plan
  splits = [(row, col) for row, col, _ in found]
  itemsize = buf.dtype.base.itemsize
  transposed = itemsize in COPY_BYTES and all(_down_columns(ld, row, col) for ld, (row, col) in zip(loads, splits))
  if transposed: v = 1
  if v * itemsize not in COPY_BYTES: return None
  line = 1 if transposed else 0  # the part of (row, column) that picks the stored line
  padded = transposed or any(a is not None and any(axis_type(r) is AxisType.LOCAL for r in _ranges(a)) for sp in splits for a in sp[line])
  pitch = (rows if transposed else cols) + (PAD_BYTES // itemsize if padded else 0)
  return _Tile(buf, loads, _build(block), s, rows, cols, v, splits, transposed, pitch)


def _inputs(sink: UOp, k: UOp, locals_: list[UOp]) -> list[UOp]:
  """The global buffers the kernel only reads, ungated, inside k, at addresses that move with k and miss a LOCAL axis."""
  scope = scopes(sink)
  uses: dict[UOp, list[UOp]] = {}
  for u in sink.toposort():
    if u.op in (Ops.LOAD, Ops.STORE) and u.src and u.src[0].op is Ops.INDEX: uses.setdefault(u.src[0].src[0], []).append(u)
  def staged(buf: UOp, us: list[UOp]) -> bool:
    if buf.op is not Ops.PARAM or not isinstance(buf.dtype, PtrDType) or buf.dtype.addrspace is not AddrSpace.GLOBAL: return False
    if any(u.op is not Ops.LOAD or len(u.src) != 1 or k not in scope[u] or k not in u.src[0].src[1].toposort() for u in us): return False
    return any(r not in u.src[0].src[1].toposort() for u in us for r in locals_ if axis_size(r) > 1)
  return [b for b, us in uses.items() if staged(b, us)]


def _tiles(sink: UOp, k: UOp, locals_: list[UOp], threads: int) -> list[_Tile]:
  bufs = _inputs(sink, k, locals_)
  if not bufs: raise Unstageable("no global input is read inside the REDUCE axis, ungated and read-only, by several threads of a workgroup")
  loads = {b: [u for u in sink.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0] is b] for b in bufs}
  tiles = [t for b in bufs if (t := _tile(b, loads[b])) is not None]
  if not tiles: raise Unstageable("the elements a workgroup reads of its inputs in one iteration do not fill a dense 2-D tile")
  for t in tiles: t.slack = (-t.copies) % threads * t.v  # a last round of fewer copies than threads: the rest copy into slack
  return tiles


def _workgroup(sink: UOp) -> tuple[UOp, list[UOp], UOp, int]:
  """(the REDUCE axis, the LOCAL axes, the thread's index in the workgroup, its thread count), or Unstageable."""
  axes = kernel_axes(sink)
  if any(u.op is Ops.WMMA for u in sink.toposort()): raise Unstageable("TC stages its operands itself (TC's stages argument)")
  if not all(is_axis(r) for r in axes): raise Unstageable("the kernel has untyped RANGEs")
  odd = [r for r in axes if axis_type(r) not in (AxisType.GLOBAL, AxisType.REDUCE) + THREAD_TYPES]
  if odd: raise Unstageable(f"axis {axes.index(odd[0])} is {axis_type(odd[0]).name}: only GLOBAL, LOCAL, REDUCE, UPCAST and UNROLL axes are staged")
  reduces = [r for r in axes if axis_type(r) is AxisType.REDUCE]
  if len(reduces) != 1 or not isinstance(axis_size(reduces[0]), int): raise Unstageable("it needs one REDUCE axis, of a size known at compile time")
  locals_ = [r for r in axes if axis_type(r) is AxisType.LOCAL]
  if not locals_ or not all(isinstance(axis_size(r), int) for r in locals_) or any(len(d) > 1 for d in workgroup_dims(sink)):
    raise Unstageable("it needs LOCAL axes of known sizes, one per workgroup dimension (the threads that share the tiles)")
  tid, count = _idx(0), 1
  for r in locals_: tid, count = tid.alu(Ops.MUL, _idx(axis_size(r))).alu(Ops.ADD, r), count * axis_size(r)  # the last axis is lidx0
  return reduces[0], locals_, simplify(tid), count


def _stage(sink: UOp, stages: int | None) -> UOp:
  k, locals_, tid, count = _workgroup(sink)
  tiles = _tiles(sink, k, locals_, count)
  trips = axis_size(k)
  tile_bytes = sum(t.size * t.buf.dtype.base.itemsize for t in tiles)
  counts = STAGES if stages is None else (stages,)
  fits = [n for n in counts if n * tile_bytes <= MAX_LOCAL_BYTES]
  if not fits: raise Unstageable(f"{min(counts)} stages of its tiles ({tile_bytes} bytes a stage) do not fit {MAX_LOCAL_BYTES} bytes of LOCAL memory")
  n = next((n for n in fits if n - 1 <= trips), 0)
  if not n: raise Unstageable(f"{fits[-1]} stages need {fits[-1] - 1} iterations of the reduction or more; it has {trips}")
  slot = 1 + max((u.arg[0] for u in sink.toposort() if u.op is Ops.BUFFER and isinstance(u.arg, tuple)), default=-1)
  locals_of = {id(t): UOp(Ops.BUFFER, t.buf.dtype.base.ptr(AddrSpace.LOCAL, n * t.size), (), (slot + i, f"tile{slot + i}"))
               for i, t in enumerate(tiles)}

  def copies(at_k: UOp, stage: UOp, into, gate: UOp | None = None) -> list[UOp]:
    """One commit group: every copy this thread makes of iteration at_k's tiles into `stage` (of `into(local)`)."""
    out = [(t, it) for t in tiles for it in range(-(-t.copies // count))]
    return [_copy(t, k, tid, count, it, at_k, stage, into(locals_of[id(t)]), gate, i == len(out) - 1) for i, (t, it) in enumerate(out)]
  prologue = [x for st in range(n - 1) for x in copies(_idx(st), _idx(st), lambda local: local)]
  wait = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(prologue)), k), (ASYNC, n - 2))
  ahead = k.alu(Ops.ADD, _idx(n - 1))
  fetches = copies(ahead, ahead.alu(Ops.MOD, _idx(n)), lambda local: UOp(Ops.AFTER, local.dtype, (local, wait)), ahead.alu(Ops.CMPLT, _idx(trips)))
  started = UOp(Ops.GROUP, dtypes.void, tuple(fetches))
  reads = {}
  for t in tiles:
    local = locals_of[id(t)]
    synced = UOp(Ops.AFTER, local.dtype, (local, wait, started))  # read after the next copies started: they overlap this iteration
    base = k.alu(Ops.MOD, _idx(n)).alu(Ops.MUL, _idx(t.size))
    for ld, (row, col) in zip(t.loads, t.splits):
      reads[ld] = UOp(Ops.LOAD, ld.dtype, (UOp(Ops.INDEX, local.dtype, (synced, simplify(t.at(_build(row), _build(col))).alu(Ops.ADD, base))),))
  end = next(u for u in sink.toposort() if u.op is Ops.END and u.src[1] is k)
  new_end = UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, (substitute(end.src[0], reads), started)),) + end.src[1:])
  return substitute(sink, {end: new_end})


def _copy(t: _Tile, k: UOp, tid: UOp, count: int, it: int, at_k: UOp, stage: UOp, into: UOp, gate: UOp | None, commit: bool) -> UOp:
  """The it-th copy this thread makes of iteration at_k's tile of t into `stage` of `into` (zeros where `gate`
  is false, reading nothing), ending a commit group if `commit`. Consecutive threads copy consecutive
  elements of a tile row."""
  flat = tid.alu(Ops.ADD, _idx(it * count))
  spare = (it + 1) * count > t.copies  # the last round, where threads past the tile's copies copy its last chunk into slack
  valid = flat.alu(Ops.CMPLT, _idx(t.copies)) if spare else None
  chunk = UOp(Ops.WHERE, dtypes.index, (valid, flat, _idx(t.copies - 1))) if spare else flat
  per_row = t.cols // t.v
  r, c = chunk.alu(Ops.IDIV, _idx(per_row)), chunk.alu(Ops.MOD, _idx(per_row)).alu(Ops.MUL, _idx(t.v))
  # the iteration's part apart from the thread's (loop-invariant, computed once): one add per copy
  src = _split_on(substitute(t.origin, {k: at_k}).alu(Ops.ADD, r.alu(Ops.MUL, _idx(t.stride))).alu(Ops.ADD, c), k)
  at = simplify(t.at(r, c))
  if spare: at = UOp(Ops.WHERE, dtypes.index, (valid, at, simplify(flat.alu(Ops.MUL, _idx(t.v)).alu(Ops.ADD, _idx(t.lines - t.copies * t.v)))))
  dst = at.alu(Ops.ADD, simplify(stage.alu(Ops.MUL, _idx(t.size))))
  dt = t.buf.dtype.base
  vdt = dt.vec(t.v) if t.v > 1 else dt
  zero = UOp(Ops.STACK, vdt, (UOp.const(dt, 0),) * t.v) if t.v > 1 else UOp.const(dt, 0)
  value = UOp(Ops.LOAD, vdt, (UOp(Ops.INDEX, t.buf.dtype, (t.buf, src)),) + ((zero, gate) if gate is not None else ()))
  return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, into.dtype, (into, dst)), value), (ASYNC, commit))


def stage_reduction(sink: UOp, trace: Trace | None = None, stages: int | None = None) -> UOp:
  """sink with its re-read inputs staged in LOCAL tiles (module docstring), in `stages` stages (None:
  the most of STAGES that fit); unchanged where it cannot be."""
  try:
    out = _stage(sink, stages)
  except Unstageable:
    return sink
  note(trace, sink, out)
  return out


def stage_opt(sink: UOp, opt: Opt, caps: TargetCaps, trace: Trace | None) -> UOp:
  """STAGE(stages): the kernel staged, or an OptError saying why it cannot be."""
  if not caps.async_copies: raise OptError(f"STAGE needs asynchronous copies into shared memory (-t cuda); target {caps.name} has none")
  try:
    out = _stage(sink, None if opt.arg == STAGE_AUTO else opt.arg)
  except Unstageable as e:
    raise OptError(str(e)) from None
  note(trace, sink, out)
  return out


# ---- the heuristic ------------------------------------------------------------------------------------------

STAGED_THREADS = (8, 16)   # a staged gemm's workgroup: threads along m and along n (n innermost: lidx0), each computing
                           # runs of outputs (a 16-byte vector along n), the runs of an axis run x its threads apart (a
                           # quarter warp's 16-byte LOCAL reads of b are then 128 contiguous bytes: no bank conflict)


@dataclass(frozen=True)
class StagedTile:
  """One workgroup shape of the staged schedule: `run` outputs a run and `runs` runs a thread, along (m, n)."""
  run: tuple[int, int]
  runs: tuple[int, int]
  least: int                # workgroups it must leave at least
  per_sm: int               # workgroups an SM runs at once (their registers)
  speed: float              # relative speed where the GPU is full

  def extent(self, axis: int) -> int: return STAGED_THREADS[axis] * self.run[axis] * self.runs[axis]


STAGED_SMS = 132           # multiprocessors of the GPU these choices were measured on (an H100 SXM)
# H100, float32 gemm 2048: 64 x 256 (233 registers: two workgroups an SM, the 256 in one wave) 0.617-0.625 ms, 64 x 128
# (138 registers, three an SM: 512 in 1.3 waves) 0.652, 32 x 64 0.745, 16 x 128 0.785 (one workgroup a tile's 8 x 16
# threads in each); 4 x 2 runs 0.636-0.645. Gemm 1024: 64 x 128, 128 workgroups 0.099 ms against the unstaged register
# tiles' 0.277 (256 of 64 threads) and 32 x 64's 0.106; 64 x 256, 64 workgroups 0.247. 512 x 1024 x 1024, 64 of 64 x 128:
# 0.101 against unstaged 0.097 (so at least half the SMs' worth); 64 x 768 x 3072: 96 of 32 x 64 0.036, of 16 x 128 0.034,
# unstaged 0.057; 197 x 768 x 3072 (padded rows): 96 of 64 x 128 0.076, 32 x 64 0.062, 16 x 128 0.066
STAGED_TILES = (StagedTile((4, 4), (2, 4), 256, 2, 1.0), StagedTile((4, 4), (2, 2), STAGED_SMS // 2, 3, 0.95),
                StagedTile((4, 4), (1, 1), STAGED_SMS // 2, 6, 0.83), StagedTile((2, 4), (1, 2), STAGED_SMS // 2, 6, 0.79))
# Of the tiles that fit, the heuristic takes the least padded work / (speed x the share of the GPU the workgroups keep
# busy: in one wave, workgroups / (SMs x the most any SM runs), in several, of the last wave's slots). H100: 128 x 768 x
# 50257, 394 workgroups of 64 x 256 (1.5 waves) 0.549 ms, 786 of 64 x 128 (2 waves) 0.401, 3144 of 32 x 64 0.456; 1024 x
# 768 x 1031, 144 of 64 x 128 (12 SMs run two) 0.138, 544 of 32 x 64 0.107; 197 x 768 x 2304, 234 of 16 x 128 0.051, 252
# of 32 x 64 0.048
STAGED_K = 8               # reduction elements an iteration stages (the tiles' depth: 2 + 4 KiB a stage). H100, gemm 2048:
                           # 0.697-0.714 ms at depth 4, 0.649-0.660 at 8 with two roundings a product. With fused multiply-
                           # adds (the default) an H200, one run of 13 staged shapes: 8 beats 4 on every one (gemm 2048 0.446
                           # against 0.460 ms, 64 x 768 x 3072 0.028 against 0.055, 197 x 3072 x 768 0.092 against 0.186)
STAGED_STAGES = 2          # tiles in flight (H100, gemm 2048, one run: 2 stages 0.688 ms, 3 0.712-0.725; --fp-contract=fast
                           # 0.485 against 0.507)


def _gemm_axes(plan: _Planner) -> tuple[int, int, int] | None:
  """(m, n, k) axis indices of a float32 gemm-like kernel (GLOBAL axes, one REDUCE axis k, two ungated
  float32 global loads inside k: a missing the contiguous output axis n, b missing m; an epilogue after k may
  load more, such as a bias), else None."""
  axes = kernel_axes(plan.sink)
  if not all(is_axis(r) and axis_type(r) in (AxisType.GLOBAL, AxisType.REDUCE) and isinstance(axis_size(r), int) for r in axes): return None
  reduces = plan.axes(AxisType.REDUCE)
  n = _contiguous_output(plan)
  if len(reduces) != 1 or n is None: return None
  k = axes[reduces[0]]
  scope = scopes(plan.sink)
  loads = [u for u in plan.sink.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and isinstance(u.src[0].src[0].dtype, PtrDType)
           and u.src[0].src[0].dtype.addrspace is AddrSpace.GLOBAL and k in scope[u]]  # an epilogue's loads (a bias) may be more
  if len(loads) != 2 or any(len(u.src) != 1 or u.dtype is not dtypes.float32 or k not in u.src[0].src[1].toposort() for u in loads): return None
  def reads(u: UOp, i: int) -> bool: return axes[i] in u.src[0].src[1].toposort()
  a = [u for u in loads if not reads(u, n)]
  if len(a) != 1: return None
  b = next(u for u in loads if u is not a[0])
  m = [i for i in plan.axes(AxisType.GLOBAL) if i != n and reads(a[0], i) and not reads(b, i)]
  return (m[0], n, reduces[0]) if len(m) == 1 else None


def staged_gemm(plan: _Planner) -> bool:
  """A large float32 gemm on -t cuda (`_gemm_axes`; K a multiple of STAGED_K, enough workgroups of one of
  STAGED_TILES): the schedule of the module docstring, its tiles of a and b staged; False (nothing applied) where it does not fit or cannot be staged. An M or N that the
  workgroup's tile does not divide is padded with overlapping tiles (`_ragged_pads`)."""
  if not plan.caps.async_copies or plan.opts or (shape := _gemm_axes(plan)) is None: return False
  m, n, k = shape
  if plan.size(k) % STAGED_K or plan.size(k) < 2 * STAGED_K: return False
  others = math.prod(plan.size(i) for i in plan.axes(AxisType.GLOBAL) if i not in (m, n))
  fits = []
  for t in STAGED_TILES:
    tile = {m: t.extent(0), n: t.extent(1)}
    workgroups = others * math.prod(-(-plan.size(i) // e) for i, e in tile.items())
    if (pads := _ragged_pads(plan, tile)) is None or workgroups < t.least: continue
    slots = t.per_sm * STAGED_SMS
    busy = workgroups / (STAGED_SMS * -(-workgroups // STAGED_SMS)) if workgroups <= slots else workgroups / (-(-workgroups // slots) * slots)
    padded = math.prod(-(-plan.size(i) // e) * e / plan.size(i) for i, e in tile.items())
    fits.append((padded / (busy * t.speed), tile, t, pads))
  for _, tile, t, pads in sorted(fits, key=lambda f: f[0]):
    if (trial := _staged(plan, k, STAGED_K, tile, t, pads)) is not None:
      plan.sink, plan.opts = trial.sink, trial.opts
      return True
  return False


STAGED_MAX_PAD = 1 / 3  # an axis the tile does not divide is padded where that adds at most this share of its size


def _ragged_pads(plan: _Planner, tile: dict[int, int]) -> list[Opt] | None:
  """PADTO(axis, t, t) for each axis that its tile t does not divide (the last tile moved back to end at
  the axis's end: no gated loads, so the tiles can still be staged), or None where one would add more
  than STAGED_MAX_PAD of the axis's iterations or the axis is shorter than its tile."""
  pads = []
  for i, t in tile.items():
    size = plan.size(i)
    if size % t == 0: continue
    if size < t or -size % t > size * STAGED_MAX_PAD: return None
    pads.append(Opt(OptOp.PADTO, i, (t, t)))
  return pads


def _staged(plan: _Planner, k: int, depth: int, tile: dict[int, int], t: StagedTile, pads: list[Opt]) -> _Planner | None:
  """A planner with the staged schedule of `t` applied (after `pads`), or None where an opt or the staging fails."""
  m, n = tile
  splits = {k: [(depth, AxisType.UNROLL)]}
  for i, side in ((m, 0), (n, 1)):  # axis -> (outer, runs, threads, run)
    splits[i] = [(f, kind) for f, kind in ((t.run[side], AxisType.UPCAST), (STAGED_THREADS[side], AxisType.LOCAL),
                                           (t.runs[side], AxisType.UPCAST)) if f > 1]
  trial = _Planner(plan.sink, plan.caps)
  if not all(trial.apply(p) for p in pads): return None
  for i in sorted(splits, reverse=True):  # a split renumbers only later axes
    if not all(trial.apply(Opt(OptOp.SPLIT, i, (f, kind, False))) for f, kind in splits[i]): return None
  if not trial.apply(Opt(OptOp.STAGE, None, STAGED_STAGES)) and not trial.apply(Opt(OptOp.STAGE, None, STAGE_AUTO)): return None
  return trial
