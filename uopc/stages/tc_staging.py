"""Stage tensor-core operands in LOCAL (shared) memory: a part of Optimize on GPU targets.

After TC and the LOCAL splits, each warp loads its WMMA fragments straight from global memory: every
lane reads a few scattered 2-byte elements, and the warps of a workgroup that share rows of a (or
columns of b) read them again. `stage_operands` instead copies, in each iteration of the reduction,
the tile of each operand that the whole workgroup reads into a LOCAL buffer, cooperatively (every
thread copies 16-byte vectors, consecutive threads consecutive vectors, so global reads coalesce),
then a BARRIER, then the fragments are read from the LOCAL tile, and a BARRIER ends the iteration
before the next one overwrites the tile.

How the tile is found, from the IR alone (no knowledge of how TC built it):
- a fragment LOAD's address is written as a linear form over atoms (RANGEs and the non-linear
  subexpressions of them, such as `lane // 4`), with integer coefficients; each atom depends either
  on the workgroup's *block* ranges only (GLOBAL and REDUCE: equal for all its threads in an
  iteration) or on its *thread* ranges only (LOCAL and WARP); anything else is not staged;
- all fragment LOADs of one buffer share the block part (the tile's origin); their thread parts plus
  constants are evaluated for every thread of the workgroup, which gives the set of offsets the
  workgroup reads in one iteration;
- a row stride S of the buffer is picked among the coefficients so that the offsets fill a dense
  R x C box (rows r < R at r * S, columns c < C); the tile is that box, and each fragment address is
  split term by term into its row and its column (a coefficient that S divides is a row term), the
  split checked against the numeric offsets for every thread;
- the LOCAL tile is R rows of C elements whose 16-byte chunks are swizzled (`_Layout`; rows padded by
  one chunk where they cannot be), so that a warp's reads of 8 consecutive rows hit different banks;
  it has several stages (iterations in flight: by default DEEP_STAGES where they fit half the target's
  `local_bytes`, so that two workgroups share a multiprocessor of the least arch (H100, float16 gemm
  4096 with 128 x 128 tiles, one run: 4 stages 0.372 ms, 3 0.394), else the most of STAGES that fit
  MAX_LOCAL_BYTES, the static shared memory of every GPU; a pinned count, 2 to 4, may fill the target's `local_bytes`,
  which the PTX renderer makes dynamic shared memory past 48 KiB): each iteration starts the
  asynchronous copies of a later one, then waits for its own, and its fragments are warp-wide matrix
  loads (ldmatrix) where their layout allows, else 32-bit or 16-bit reads.

Invariants: the staged kernel reads exactly the values the unstaged one read (the box is dense, so it
holds no element outside what the fragments read, and every copy is in bounds); a kernel this cannot
stage is returned unchanged; LOCAL BUFFER slots follow the kernel's existing BUFFER slots.
"""
from __future__ import annotations

import itertools
import math

from uopc.dtype import AddrSpace, PtrDType, dtypes
from uopc.ops import AxisType, Ops
from uopc.rewrite import substitute
from uopc.stages.tensor_cores import ASYNC, LDMATRIX
from uopc.symbolic import linear_form, simplify
from uopc.uop import UOp

VECTOR_BYTES = 16             # bytes a thread copies at once
MAX_LOCAL_BYTES = 48 * 1024   # static shared memory a workgroup may use (every CUDA arch): what STAGES fill
STAGES = (3, 2)               # tiles in flight when not pinned: the most that fit MAX_LOCAL_BYTES ...
DEEP_STAGES = 4               # ... unless this many fit half the target's local_bytes (two workgroups a multiprocessor)
_BLOCK = (AxisType.GLOBAL, AxisType.REDUCE)
_THREAD = (AxisType.LOCAL, AxisType.WARP)

Form = dict  # atom (UOp, or None for the constant) -> int coefficient


def _idx(v: int) -> UOp: return UOp.const(dtypes.index, v)


def _value(u: UOp, env: dict) -> int:
  if u.op is Ops.RANGE: return env[u]
  if u.op is Ops.CONST: return int(u.arg)
  a, b = (_value(s, env) for s in u.src)
  if u.op is Ops.ADD: return a + b
  if u.op is Ops.MUL: return a * b
  if u.op is Ops.IDIV: return a // b
  if u.op is Ops.MOD: return a % b
  if u.op is Ops.XOR: return a ^ b
  raise ValueError(u.op)


def _ranges(u: UOp) -> set[UOp]: return {x for x in u.toposort() if x.op is Ops.RANGE}


def _evaluable(u: UOp) -> bool:
  return all(x.op in (Ops.RANGE, Ops.CONST, Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD) for x in u.toposort())


class _Operand:
  """The fragment LOADs of one global buffer, and the LOCAL tile that serves them (`plan` fills it)."""

  def __init__(self, buf: UOp, loads: list[UOp]):
    self.buf, self.loads = buf, loads
    self.forms = [linear_form(simplify(ld.src[0].src[1])) for ld in loads]


def _split(form: Form, kinds: dict[UOp, str]) -> tuple[Form, Form]:
  block = {a: c for a, c in form.items() if a is not None and kinds[a] == "block" and c}
  thread = {a: c for a, c in form.items() if a is None or kinds[a] == "thread"}
  return block, thread


def _plan(op: _Operand, threads: list[UOp], thread_types: tuple = _THREAD, prefer=None) -> tuple | None:
  """(block form, S, R, C, V, [(row form, column form) per load]) for op's tile, or None. `threads`: the
  ranges of `thread_types` to enumerate (uopc.stages.local_staging adds the UPCAST/UNROLL lanes); where
  `prefer` accepts some of the tile's possible row strides' splits, only those are taken."""
  kinds: dict[UOp, str] = {}
  for form in op.forms:
    for a, c in form.items():
      if a is None: continue
      rs = _ranges(a)
      if any(not isinstance(r.arg, tuple) for r in rs): return None
      t = {r.arg[1] for r in rs}
      if t <= set(_BLOCK): kinds[a] = "block"
      elif t <= set(thread_types) and _evaluable(a) and c > 0: kinds[a] = "thread"
      else: return None
  parts = [_split(f, kinds) for f in op.forms]
  block = parts[0][0]
  if any(b != block for b, _ in parts): return None
  sizes = [r.src[0].arg for r in threads]
  envs = [dict(zip(threads, vals)) for vals in itertools.product(*map(range, sizes))]
  atoms = list(dict.fromkeys(a for _, t in parts for a in t if a is not None))
  vals = [{a: _value(a, env) for a in atoms} for env in envs]
  def offset(t: Form, v: dict) -> int: return sum(c * (v[a] if a is not None else 1) for a, c in t.items())
  offsets = [[offset(t, v) for v in vals] for _, t in parts]
  base = min(min(o) for o in offsets)
  if base < 0: return None
  seen = {o - base for os in offsets for o in os}
  itemsize = op.buf.dtype.base.itemsize
  candidates = sorted({abs(c) for _, t in parts for c in t.values() if abs(c) > 1} | {max(seen) + 1})
  def box(s: int) -> tuple | None:  # (rows, columns, [(row form, column form)]) with row stride s, if dense and split
    rows, cols = max(o // s for o in seen) + 1, max(o % s for o in seen) + 1
    if rows * cols != len(seen): return None
    splits = []
    for (_, t), os in zip(parts, offsets):
      row: Form = {None: 0}; col: Form = {None: 0}  # noqa: E702
      for a, c in t.items():
        if a is None: row[None], col[None] = (c - base) // s, (c - base) % s
        elif c % s == 0: row[a] = c // s
        else: col[a] = c
      if any(offset(row, vv) * s + offset(col, vv) != o - base or not 0 <= offset(col, vv) < cols for vv, o in zip(vals, os)): return None
      splits.append((row, col))
    return rows, cols, splits
  boxes = [(s, b) for s in candidates if (b := box(s)) is not None]
  if not boxes: return None
  if prefer is not None and (chosen := [x for x in boxes if prefer(x[1][2])]): boxes = chosen
  # rows of at least 128 bytes where there are such (whole bank lines: the pitch's pad spreads rows over
  # the banks), the shortest of those; else the longest rows
  wide = [x for x in boxes if x[1][1] * itemsize >= 128]
  s, (rows, cols, found) = wide[0] if wide else max(boxes, key=lambda x: x[1][1])
  v = next(w for w in (VECTOR_BYTES // itemsize, 8 // itemsize, 4 // itemsize, 2 // itemsize, 1)
           if w >= 1 and cols % w == 0 and s % w == 0 and base % w == 0 and all(c % w == 0 for c in block.values()))
  splits = [(row, col, all((offset(row, vv) * (cols + v) + offset(col, vv)) % 2 == 0 for vv in vals)) for row, col in found]
  block = dict(block); block[None] = base
  return block, s, rows, cols, v, splits


class _Layout:
  """Where element (row, col) of one stage of a tile lives in its LOCAL buffer. Rows of 16-byte chunks
  (`v` elements) in a power-of-two number are swizzled: chunk c of row r is stored at chunk c XOR f(r),
  f spreading any 8 consecutive rows over the 8 chunk positions of a 128-byte line, so that an ldmatrix
  (8 rows of one chunk) or a copy hits every bank once, with no padding. Other rows are padded by one
  chunk (pitch cols + v) instead. With `panels` (warpgroup MMAs), swizzled rows longer than 128 bytes are
  cut into 128-byte panels, each panel's rows stored together: then every 8 rows of a panel are one of
  wgmma's 128-byte swizzle atoms (and 8 rows of 64 or 32 bytes one of its 64- or 32-byte atoms)."""

  def __init__(self, rows: int, cols: int, v: int, itemsize: int, panels: bool = False):
    self.v, self.rows, self.itemsize = v, rows, itemsize
    self.swizzled = v * itemsize == 16 and cols % v == 0 and (cols // v) & (cols // v - 1) == 0
    self.width = min(cols, 128 // itemsize) if panels and self.swizzled else cols  # the elements of a panel's row
    self.chunks = self.width // v
    self.pitch = self.width if self.swizzled else cols + v
    self.size = rows * (cols if self.swizzled else self.pitch)  # elements of one stage
    self.panels = self.swizzled and self.width < cols

  def at(self, row: UOp, col: UOp) -> UOp:
    if self.panels:
      panel, col = col.alu(Ops.IDIV, _idx(self.width)), col.alu(Ops.MOD, _idx(self.width))
      return self._in_panel(row, col).alu(Ops.ADD, panel.alu(Ops.MUL, _idx(self.rows * self.width)))
    return self._in_panel(row, col)

  def _in_panel(self, row: UOp, col: UOp) -> UOp:
    line = row.alu(Ops.MUL, _idx(self.pitch))
    if not self.swizzled: return line.alu(Ops.ADD, col)
    f = row.alu(Ops.IDIV, _idx(max(1, 8 // self.chunks))).alu(Ops.MOD, _idx(min(8, self.chunks)))
    chunk = col.alu(Ops.IDIV, _idx(self.v)).alu(Ops.XOR, f)
    return line.alu(Ops.ADD, chunk.alu(Ops.MUL, _idx(self.v))).alu(Ops.ADD, col.alu(Ops.MOD, _idx(self.v)))


def _split_on(e: UOp, k: UOp) -> UOp:
  """e as (its terms free of k) + (its terms with k), each simplified: the first is loop-invariant."""
  form = linear_form(simplify(e))
  free = {a: c for a, c in form.items() if a is None or k not in a.toposort()}
  return _build(free).alu(Ops.ADD, _build({a: c for a, c in form.items() if a not in free}))


def _build(form: Form) -> UOp:
  out = _idx(form.get(None, 0))
  for a, c in form.items():
    if a is not None: out = out.alu(Ops.ADD, a.alu(Ops.MUL, _idx(c)) if c != 1 else a)
  return simplify(out)


def _lane_atoms(form: Form, lane: UOp) -> tuple[Form, int, int]:
  """form without its `lane // 4` and `lane % 4` terms, and their coefficients (other lane terms: -1)."""
  rest, g, t = {}, 0, 0
  for a, c in form.items():
    if a is not None and a.op in (Ops.IDIV, Ops.MOD) and a.src[0] is lane and a.src[1].op is Ops.CONST and a.src[1].arg == 4:
      if a.op is Ops.IDIV: g = c
      else: t = c
    elif a is not None and lane in a.toposort(): return rest, -1, -1
    else: rest[a] = c
  return rest, g, t


def _one_row_per_k(lane: UOp):
  """For warpgroup MMAs: a tile split whose lanes' `lane // 4` (along M or N) steps 1 row or column and
  `lane % 4` (pairs along K) 2, so that the tile's rows and columns are the operand's (not, say, rows
  of half a K row each, which a contiguous operand also fills densely)."""
  def ok(splits) -> bool:
    for row, col, *_ in splits:
      (_, rg, rt), (_, cg, ct) = _lane_atoms(row, lane), _lane_atoms(col, lane)
      if sorted((rg, cg)) != [0, 1] or sorted((rt, ct)) != [0, 2] or (rg, rt) in ((1, 2), (0, 0)): return False
    return True
  return ok


def _plus(form: Form, k: int) -> Form: return {**form, None: form.get(None, 0) + k}


def _matrix_load(stack: UOp, where: dict, lane: UOp) -> UOp | None:
  """The fragment as one ldmatrix (uopc.stages.tensor_cores) where its pairs are 8 x 8 matrices of one
  LOCAL tile: rows g and columns 2t, 2t + 1 (trans: rows 2t, 2t + 1 of column g), 16-byte aligned rows."""
  ws = [where[ld] for ld in stack.src]
  n = len(ws)
  if n not in (4, 8) or any(w[0] is not ws[0][0] for w in ws): return None
  tile, layout = ws[0][0], ws[0][1]
  bases, trans = [], None
  for j in range(n // 2):
    (row, rg, rt), (col, cg, ct) = _lane_atoms(ws[2 * j][2], lane), _lane_atoms(ws[2 * j][3], lane)
    (row1, rg1, rt1), (col1, cg1, ct1) = _lane_atoms(ws[2 * j + 1][2], lane), _lane_atoms(ws[2 * j + 1][3], lane)
    plain = (rg, rt, cg, ct) == (1, 0, 0, 2) and row1 == row and col1 == _plus(col, 1)
    flipped = (rg, rt, cg, ct) == (0, 2, 1, 0) and row1 == _plus(row, 1) and col1 == col
    if (rg1, rt1, cg1, ct1) != (rg, rt, cg, ct) or not (plain or flipped) or trans not in (None, flipped): return None
    trans = flipped
    bases.append((row, col))
  def delta(j: int, i: int) -> int | None:
    a, b = bases[j][i], bases[0][i]
    return a.get(None, 0) - b.get(None, 0) if {x: c for x, c in a.items() if x is not None} == {x: c for x, c in b.items() if x is not None} else None
  deltas = [(delta(j, 0), delta(j, 1)) for j in range(n // 2)]
  if any(None in d for d in deltas) or (n == 8 and deltas[3] != (deltas[1][0] + deltas[2][0], deltas[1][1] + deltas[2][1])): return None
  row0, col0 = bases[0]
  if layout.pitch % 8 or any(c % 8 for c in col0.values()) or any(d[1] % 8 for d in deltas): return None  # 16-byte rows
  def idx(v: int) -> UOp: return _idx(v)
  bit0 = lane.alu(Ops.IDIV, idx(8)).alu(Ops.MOD, idx(2))
  row = _build(row0).alu(Ops.ADD, lane.alu(Ops.MOD, idx(8))).alu(Ops.ADD, bit0.alu(Ops.MUL, idx(deltas[1][0])))
  col = _build(col0).alu(Ops.ADD, bit0.alu(Ops.MUL, idx(deltas[1][1])))
  if n == 8:
    bit1 = lane.alu(Ops.IDIV, idx(16))
    row, col = row.alu(Ops.ADD, bit1.alu(Ops.MUL, idx(deltas[2][0]))), col.alu(Ops.ADD, bit1.alu(Ops.MUL, idx(deltas[2][1])))
  at = simplify(layout.at(row, col)).alu(Ops.ADD, ws[0][5])
  return UOp(Ops.LOAD, stack.dtype, (UOp(Ops.INDEX, tile.dtype, (tile, at)),), (LDMATRIX, trans))


def _fragment(stack: UOp, where: dict) -> UOp:
  """A fragment STACK read from the LOCAL tiles: two lanes at consecutive columns of one row, the first
  at an even element, as one 2-lane LOAD (one 32-bit shared-memory read)."""
  def at(w) -> UOp: return simplify(w[1].at(_build(w[2]), _build(w[3]))).alu(Ops.ADD, w[5])
  lanes, i, lds = [], 0, stack.src
  while i < len(lds):
    w = where[lds[i]]
    if i + 1 < len(lds) and w[4] and (n := where[lds[i + 1]])[0] is w[0] and n[2] == w[2] and n[3] == {**w[3], None: w[3][None] + 1}:
      pair = UOp(Ops.LOAD, lds[i].dtype.vec(2), (UOp(Ops.INDEX, w[0].dtype, (w[0], at(w))),))
      lanes += [UOp(Ops.GEP, lds[i].dtype, (pair,), 0), UOp(Ops.GEP, lds[i].dtype, (pair,), 1)]
      i += 2
    else:
      lanes.append(UOp(Ops.LOAD, lds[i].dtype, (UOp(Ops.INDEX, w[0].dtype, (w[0], at(w))),)))
      i += 1
  return stack.replace(src=tuple(lanes))


def stage_operands(sink: UOp, trace=None, stages: int | None = None, local_bytes: int = MAX_LOCAL_BYTES, warpgroup: bool = False) -> UOp:
  """sink with its tensor-core operands staged in LOCAL tiles (module docstring), in `stages` stages
  within `local_bytes` (None: DEEP_STAGES within half of `local_bytes`, else the most of STAGES that fit
  MAX_LOCAL_BYTES); unchanged where not."""
  pinned = stages
  if stages is None and warpgroup:  # 3 or 4 stages for two workgroups a multiprocessor, else for one, else 2
    options = [(n, budget) for budget in (local_bytes // 2, local_bytes) for n in (DEEP_STAGES, 3)] + [(2, local_bytes)]
  elif stages is None: options = [(DEEP_STAGES, local_bytes // 2)] + [(n, MAX_LOCAL_BYTES) for n in STAGES]
  else: options = [(stages, local_bytes)]
  wmmas = [u for u in sink.toposort() if u.op is Ops.WMMA]
  if not wmmas: return sink
  axes = [u for u in sink.toposort() if u.op is Ops.RANGE and isinstance(u.arg, tuple) and len(u.arg) == 2]
  threads = sorted((r for r in axes if r.arg[1] in _THREAD), key=lambda r: (r.arg[1] is AxisType.WARP, r.arg[0]))
  reduces = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if len(reduces) != 1 or not all(isinstance(r.src[0].arg, int) for r in threads) or math.prod(r.src[0].arg for r in threads) > 1024:
    return sink
  k = reduces[0]
  frags: dict[UOp, list[UOp]] = {}
  for w in wmmas:
    for stack in w.src[:2]:
      if stack.op is not Ops.STACK or not all(x.op is Ops.LOAD and len(x.src) == 1 and x.src[0].op is Ops.INDEX for x in stack.src): return sink
      for ld in stack.src:
        lst = frags.setdefault(ld.src[0].src[0], [])
        if ld not in lst: lst.append(ld)
  loads_of = {b: [u for u in sink.toposort() if u.op in (Ops.LOAD, Ops.STORE) and u.src and u.src[0].op is Ops.INDEX and u.src[0].src[0] is b]
              for b in frags}
  ops = [_Operand(b, lds) for b, lds in frags.items() if b.op is Ops.PARAM and len(loads_of[b]) == len(lds)]
  lane = next(r for r in threads if r.arg[1] is AxisType.WARP)
  plans = [(op, p) for op in ops if (p := _plan(op, threads, prefer=_one_row_per_k(lane) if warpgroup else None)) is not None]
  if not plans: return sink
  end = next(u for u in sink.toposort() if u.op is Ops.END and u.src[1] is k)
  tid, count = _idx(0), 1
  for r in threads: tid, count = tid.alu(Ops.MUL, _idx(r.src[0].arg)).alu(Ops.ADD, r), count * r.src[0].arg
  tid = simplify(tid)
  slot = 1 + max((u.arg[0] for u in sink.toposort() if u.op is Ops.BUFFER and isinstance(u.arg, tuple)), default=-1)
  trips = k.src[0].arg
  layouts = [_Layout(p[2], p[3], p[4], op.buf.dtype.base.itemsize, warpgroup) for op, p in plans]
  tile_bytes = sum(lay.size * op.buf.dtype.base.itemsize for (op, p), lay in zip(plans, layouts))
  stages = next((n for n, budget in options if n * tile_bytes <= budget and n - 1 <= trips), 0)
  if not stages or any((p[2] * p[3] // p[4]) % count for _, p in plans): return sink
  # warpgroup MMAs of a workgroup that has its multiprocessor alone keep running while it starts the next
  # iteration (its barrier and copies), so its copies start one iteration later (with two, the other's MMAs fill in)
  lag = 1 if warpgroup and stages >= 3 and stages * tile_bytes > local_bytes // 2 else 0
  tiles = []
  for n, ((op, (block, s, rows, cols, v, splits)), layout) in enumerate(zip(plans, layouts)):
    dt, size = op.buf.dtype.base, layout.size
    local = UOp(Ops.BUFFER, dt.ptr(AddrSpace.LOCAL, stages * size), (), (slot + n, f"tile{slot + n}"))
    origin, vdt = _build(block), dt.vec(v) if v > 1 else dt
    def copy(it: int, at_k: UOp, stage: UOp, into: UOp, gate: UOp | None = None, commit: bool = False, origin=origin, s=s, cols=cols,
             v=v, vdt=vdt, buf=op.buf, layout=layout, size=size) -> UOp:
      """The it-th 16-byte copy this thread issues: of iteration at_k's tile into `stage` of the LOCAL buffer
      `into`, zeros where `gate` is false (nothing read), ending a commit group if `commit` (the defaults
      bind this operand's values)."""
      flat = tid.alu(Ops.ADD, _idx(it * count))
      r, c = flat.alu(Ops.IDIV, _idx(cols // v)), flat.alu(Ops.MOD, _idx(cols // v)).alu(Ops.MUL, _idx(v))
      # the iteration's part apart from the thread's (loop-invariant, computed once): one add per copy
      src = _split_on(substitute(origin, {k: at_k}).alu(Ops.ADD, r.alu(Ops.MUL, _idx(s))).alu(Ops.ADD, c), k)
      dst = simplify(layout.at(r, c)).alu(Ops.ADD, simplify(stage.alu(Ops.MUL, _idx(size))))
      zero = UOp(Ops.STACK, vdt, (UOp.const(vdt.scalar, 0),) * v) if v > 1 else UOp.const(vdt, 0)
      value = UOp(Ops.LOAD, vdt, (UOp(Ops.INDEX, buf.dtype, (buf, src)),) + ((zero, gate) if gate is not None else ()))
      return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, into.dtype, (into, dst)), value), (ASYNC, commit))
    tiles.append((op, local, layout, size, splits, rows * cols // v // count, copy))
  # the first stages - 1 iterations' copies, stage by stage (a wait counts the copies started after it)
  def stage_copies(at_k: UOp, stage: UOp, into, gate: UOp | None = None) -> list[UOp]:  # one commit group
    out = [(it, local, copy) for _, local, _, _, _, iters, copy in tiles for it in range(iters)]
    return [copy(it, at_k, stage, into(local), gate, i == len(out) - 1) for i, (it, local, copy) in enumerate(out)]
  prologue = [x for st in range(stages - 1 - lag) for x in stage_copies(_idx(st), _idx(st), lambda local: local)]
  # iteration k: wait for its own copies (the later stages' may still fly) and for every thread's, read
  # the fragments from stage k % stages, then start the copies of iteration k + stages - 1 into the stage
  # iteration k - 1 read (every thread is past that reading: it is before this barrier)
  wait = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(prologue)), k), (ASYNC, stages - 2 - lag))
  stage_now = k.alu(Ops.MOD, _idx(stages))
  ahead = k.alu(Ops.ADD, _idx(stages - 1 - lag))
  # past the last iteration the copies read nothing (zeros: their group still counts for the waits)
  fetches = stage_copies(ahead, ahead.alu(Ops.MOD, _idx(stages)), lambda local: UOp(Ops.AFTER, local.dtype, (local, wait)),
                         ahead.alu(Ops.CMPLT, _idx(trips)))
  started = UOp(Ops.GROUP, dtypes.void, tuple(fetches))
  where = {}  # fragment LOAD -> (LOCAL tile after the wait, its _Layout, row form, column form, even address, stage base)
  for op, local, layout, size, splits, iters, copy in tiles:
    # the fragments are read after the next copies started, so that those overlap this iteration's math
    synced = UOp(Ops.AFTER, local.dtype, (local, wait, started))
    base = simplify(stage_now.alu(Ops.MUL, _idx(size)))
    for ld, split in zip(op.loads, splits): where[ld] = (synced, layout) + split + (base,)
  from uopc.stages.warpgroup_mma import warpgroup_mmas  # it builds on this module's forms
  body = warpgroup_mmas(end.src[0], where, threads, lag) if warpgroup else None
  if warpgroup and body is None: return stage_operands(sink, trace, pinned, local_bytes)  # not warpgroup MMAs after all
  # an operand that is not staged (not a PARAM, or read elsewhere too) keeps its fragments' global loads
  if body is None: body = substitute(end.src[0], {st: _matrix_load(st, where, lane) or _fragment(st, where) for w in wmmas for st in w.src[:2]
                                                 if all(ld in where for ld in st.src)})
  new_end = UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, (body, started)),) + end.src[1:])
  out = substitute(sink, {end: new_end})
  if trace is not None: trace.append((sink, out))
  return out

