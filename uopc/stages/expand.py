"""Expand (seed 000): UPCAST and UNROLL axes become vector values; GPU launch axes become SPECIALs.

1. Accumulators. A REG buffer written inside UPCAST axes holds one element per lane of those axes:
   its size is multiplied by their lane count and each access gets the lane's position added, so
   the lanes of an upcast accumulator sit side by side (one vector load/store). So does a REG buffer
   all of whose STOREs (its initialisation included) lie inside an UNROLL axis: an inner reduction
   nested in an unrolled outer one starts afresh on each outer iteration, so each lane of the outer
   axis needs its own accumulator. An UNROLL axis that holds the updates but not the initialisation is
   a reduction axis of that accumulator: its lanes are contracted into it (4.).
2. Lanes. Every value that depends on expanded axes becomes a vector with one lane per point of those
   axes: UNROLL axes vary slowest, then UPCAST axes in axis order. A value wider than the target's
   vector width is kept as consecutive chunks of that width (the devectorised form), so no op is ever
   wider than the target handles; chunks do not straddle two rows of an innermost axis that is longer
   than the width but not a multiple of it. An op's operands are brought to its lanes with GEP (a lane
   permutation or broadcast) or, across chunks, a STACK of lanes.
3. Memory. A LOAD or STORE address that is `base + sum(c_a * axis_a)` gives each lane a constant
   offset from one base; runs of consecutive offsets (whose start is a multiple of their width on
   targets that need aligned vectors) are one vector access, other lanes are scalar accesses
   STACKed. A gate that differs between lanes makes every lane its own gated access, except for
   loads on targets with masked loads (CPUs) whose gate does not move with a reduction loop: there a run
   is one vector load with a gate per lane (a masked lane reads no memory and takes its `alt`), as a
   padded convolution's border taps are. On GPUs a small value whose chunks cut across such runs (rows of a gemm's
   a over its unrolled steps) is read one vector per run over all its lanes, the chunks picking their lanes.
4. Contraction. A STORE that does not depend on an UNROLL axis its value depends on is a reduction
   over that axis, `acc = op(acc, v)`: the lanes of v are folded into acc one after the other, in the
   order the loop would have run them, so the result is bit for bit the unexpanded one.
5. GPU targets: GLOBAL and LOCAL axes become SPECIAL gidx<n>/lidx<n> (n = 0 innermost); on CPUs
   they stay loops. THREAD axes stay RANGEs: the C target runs them on its worker pool.

A GROUP_REDUCE axis is a reduction shared by k workers, each accumulating a partial that is combined
with the others' after the loop: on a GPU the workers are a workgroup's threads, on a CPU they are
vector lanes (uopc.stages.group_reduce).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
from typing import Callable

from uopc.diagnostics import CompileError, error
from uopc.dtype import AddrSpace, PtrDType, dtypes
from uopc.ops import AxisType, GroupOp, Ops
from uopc.stages.optimize import (KernelSchedule, TargetCaps, Trace, axis_size, axis_type, is_axis, kernel_axes, note,
                                  replace_ranges, root_buffer, scopes, workgroup_dims)
from uopc.stages.group_reduce import group_lanes, group_reduce
from uopc.rewrite import substitute
from uopc.symbolic import simplify
from uopc.uop import UOp

EXPANDED = (AxisType.UPCAST, AxisType.UNROLL)
ACROSS_LANES = 32  # lanes a GPU load may have to be read across its chunks (see loads_across_chunks)
PERMUTED_RUN = 4  # consecutive lanes a run read out of lane order holds at least to be one vector load (see permuted_loads)


def _fail(message: str) -> CompileError: return CompileError([error(None, f"expand: {message}")])
def _idx(v: int) -> UOp: return UOp.const(dtypes.index, v)
def _expanded(r: UOp) -> bool: return is_axis(r) and axis_type(r) in EXPANDED
def _lane_order(r: UOp) -> tuple: return (axis_type(r) is not AxisType.UNROLL, r.arg[0])


def expand(schedule: KernelSchedule, relocate: Callable[[UOp, UOp], None] = lambda old, new: None) -> UOp:
  """The kernel with its UPCAST/UNROLL axes as vectors (and its launch axes as SPECIALs on GPUs);
  `relocate(old, new)` hands each replaced node's source location to its replacement."""
  sink, caps, trace = schedule.sink, schedule.caps, []
  if any(_expanded(r) for r in kernel_axes(sink)): sink = replicate_accumulators(sink, trace)
  sink = group_reduce(sink, trace) if caps.gpu else group_lanes(sink, trace)
  if any(_expanded(r) for r in kernel_axes(sink)): sink = _Expander(sink, caps, trace).run()
  if caps.gpu: sink = launch_axes(sink, trace)
  for old, new in trace: relocate(old, new)
  return sink


# ---- 1. accumulators ------------------------------------------------------------------------------------


def replicate_accumulators(sink: UOp, trace: Trace | None = None) -> UOp:
  scope = scopes(sink)
  stores = [u for u in sink.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
  upcast: dict[UOp, set[UOp]] = {}
  unrolled: dict[UOp, set[UOp]] = {}  # the UNROLL axes every STORE of the buffer lies inside
  for st in stores:
    buf = root_buffer(st.src[0])
    if isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace is AddrSpace.REG:
      upcast.setdefault(buf, set()).update(r for r in scope[st] if _expanded(r) and axis_type(r) is AxisType.UPCAST)
      inside = {r for r in scope[st] if _expanded(r) and axis_type(r) is AxisType.UNROLL}
      unrolled[buf] = unrolled[buf] & inside if buf in unrolled else inside
  lanes_of = {b: tuple(sorted(upcast[b] | unrolled[b], key=_lane_order)) for b in upcast if upcast[b] | unrolled[b]}
  if not lanes_of: return sink
  for u in sink.toposort():
    if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and not set(lanes_of.get(root_buffer(u.src[0]), ())) <= scope[u]:
      raise _fail(f"accumulator {root_buffer(u.src[0]).arg!r} is used outside its UPCAST/UNROLL axes")
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo[s] for s in u.src)
    if u in lanes_of:
      n = math.prod(axis_size(r) for r in lanes_of[u])
      memo[u] = UOp(Ops.BUFFER, u.dtype.base.ptr(AddrSpace.REG, u.dtype.size * n), (), u.arg)
    elif u.op is Ops.INDEX and (buf := root_buffer(u)) in lanes_of:
      axes = lanes_of[buf]
      lane = _idx(0)
      for r in axes: lane = lane.alu(Ops.MUL, _idx(axis_size(r))).alu(Ops.ADD, r)
      n = math.prod(axis_size(r) for r in axes)
      memo[u] = UOp(Ops.INDEX, memo[u.src[0]].dtype, (src[0], simplify(src[1].alu(Ops.MUL, _idx(n)).alu(Ops.ADD, lane))))
    elif u.op is Ops.AFTER: memo[u] = u.replace(dtype=src[0].dtype, src=src)
    else: memo[u] = u if src == u.src else u.replace(src=src)
    note(trace, u, memo[u])
  return memo[sink]


# ---- 2. lanes -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lanes:
  """A value over `axes`: lane i is element i % width of chunks[i // width]; with rows (`row` > 0),
  lane i is element (i % row) % width of the ((i % row) // width)-th chunk of row i // row."""
  axes: tuple[UOp, ...]
  chunks: tuple[UOp, ...]
  width: int
  row: int = 0

  @property
  def count(self) -> int: return math.prod(axis_size(r) for r in self.axes)
  def pick(self, i: int) -> tuple[UOp, int]:
    if not self.row: return self.chunks[i // self.width], i % self.width
    r, col = divmod(i, self.row)
    return self.chunks[r * -(-self.row // self.width) + col // self.width], col % self.width
  def scalar(self, i: int) -> UOp:
    c, j = self.pick(i)
    if c.op is Ops.STACK: return c.src[j]
    return c if c.dtype.count == 1 else UOp(Ops.GEP, c.dtype.scalar, (c,), (j,))


def gather(v: Lanes, lanes: list[int]) -> UOp:
  """The lanes `lanes` of v as one value (a vector when more than one). Lanes of a STACK are taken
  from its scalars, so a broadcast of a loaded scalar is a splat of that scalar (one shuffle)."""
  picks = [v.pick(i) for i in lanes]
  chunk = picks[0][0]
  dt = chunk.dtype.scalar
  if chunk.op is Ops.STACK and any(c is not chunk or j != k for k, (c, j) in enumerate(picks)):
    scalars = [v.scalar(i) for i in lanes]
    return scalars[0] if len(scalars) == 1 else UOp(Ops.STACK, dt.vec(len(scalars)), tuple(scalars))
  if all(c is chunk for c, _ in picks):
    subs = tuple(j for _, j in picks)
    if chunk.dtype.count == 1: return chunk if len(subs) == 1 else UOp(Ops.STACK, dt.vec(len(subs)), (chunk,) * len(subs))
    if subs == tuple(range(chunk.dtype.count)): return chunk
    return UOp(Ops.GEP, dt.vec(len(subs)), (chunk,), subs)
  return UOp(Ops.STACK, dt.vec(len(lanes)), tuple(v.scalar(i) for i in lanes))


def _coords(axes: tuple[UOp, ...]) -> list[tuple[int, ...]]:
  return list(product(*(range(axis_size(r)) for r in axes)))


def _project(axes: tuple[UOp, ...], sub: tuple[UOp, ...]) -> list[int]:
  """For each lane over `axes`, the lane over `sub` (a subset) at the same point."""
  pos = [axes.index(r) for r in sub]
  sizes = [axis_size(r) for r in sub]
  out = []
  for c in _coords(axes):
    i = 0
    for p, n in zip(pos, sizes): i = i * n + c[p]
    out.append(i)
  return out


class _Expander:
  def __init__(self, sink: UOp, caps: TargetCaps, trace: Trace):
    self.sink, self.caps, self.width, self.trace = sink, caps, caps.vector_width, trace
    self.scope = scopes(sink)
    self.v: dict[UOp, Lanes] = {}
    self.projections: dict[tuple[tuple[UOp, ...], tuple[UOp, ...]], list[int]] = {}

  def run(self) -> UOp:
    for u in self.sink.toposort():
      self.v[u] = self._expand(u)
      for c in self.v[u].chunks:
        note(self.trace, u, c)
        if u.op is Ops.STORE and c.op is Ops.GROUP:  # a store split into several: each is where u was
          for x in c.src: note(self.trace, u, x)
    return self.v[self.sink].chunks[0]

  def one(self, u: UOp) -> UOp:
    """The new node of a value without expanded axes."""
    lanes = self.v[u]
    if lanes.axes: raise _fail(f"{u.op.name} is used where one value is needed, but it differs across UPCAST/UNROLL lanes")
    return lanes.chunks[0]

  def flat(self, u: UOp) -> tuple[UOp, ...]: return self.v[u].chunks

  def make(self, axes: tuple[UOp, ...], build) -> Lanes:
    """Lanes over `axes`, chunk by chunk: build(lane list) -> the chunk's node. Where the innermost
    axis is longer than the vector width but not a multiple of it (a pooling's 27 output columns
    under its unrolled window taps), the chunks are cut per row of that axis (16 + 11 lanes a row),
    so that no chunk mixes two rows: a row's lanes are one window of memory (see window_loads). CPU
    targets only."""
    n = math.prod(axis_size(r) for r in axes)
    row = axis_size(axes[-1]) if axes else 0
    if self.caps.gpu or not (isinstance(row, int) and row > self.width and row % self.width and n > row): row = 0
    starts = [(s, min(n, s + self.width)) for s in range(0, n, self.width)] if not row else \
             [(r + c, min(r + row, r + c + self.width)) for r in range(0, n, row) for c in range(0, row, self.width)]
    return Lanes(axes, tuple(build(list(range(a, b))) for a, b in starts), self.width, row)

  def operand(self, s: UOp, axes: tuple[UOp, ...], lanes: list[int]) -> UOp:
    key = (axes, self.v[s].axes)  # few distinct pairs in a kernel: project each once
    if (proj := self.projections.get(key)) is None: proj = self.projections[key] = _project(*key)
    return gather(self.v[s], [proj[i] for i in lanes])

  def _expand(self, u: UOp) -> Lanes:
    if _expanded(u): return self.make((u,), lambda ls: _idx(ls[0]) if len(ls) == 1 else UOp(Ops.STACK, dtypes.index.vec(len(ls)), tuple(map(_idx, ls))))
    if u.op is Ops.END and _expanded(u.src[1]): return Lanes((), (self.one(u.src[0]),), 1)
    if u.op is Ops.AFTER:
      buf = self.one(u.src[0])
      deps = tuple(x for s in u.src[1:] if not _expanded(s) for x in self.flat(s))
      return Lanes((), (UOp(Ops.AFTER, buf.dtype, (buf,) + deps) if deps else buf,), 1)
    if u.op in (Ops.SINK, Ops.GROUP): return Lanes((), (u.replace(src=tuple(x for s in u.src for x in self.flat(s))),), 1)
    if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX: return self.load(u)
    if u.op is Ops.STORE and u.src[0].op is Ops.INDEX: return self.store(u)
    axes = self.axes_of(u.src)
    if not axes: return Lanes((), (u.replace(src=tuple(self.one(s) for s in u.src)),), 1)
    if u.op in (Ops.IDIV, Ops.MOD) and (fewer := self.block_quotient(u, axes)) is not None: return fewer
    if u.op is Ops.INDEX: return Lanes(axes, (), self.width)  # only a LOAD/STORE reads it, through its offset
    if not (u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST)) or u.dtype.count != 1:
      raise _fail(f"{u.op.name} of {u.dtype} cannot be expanded over UPCAST/UNROLL axes")
    return self.make(axes, lambda ls: UOp(u.op, u.dtype.vec(len(ls)), tuple(self.operand(s, axes, ls) for s in u.src), u.arg))

  def block_quotient(self, u: UOp, axes: tuple[UOp, ...]) -> Lanes | None:
    """An index quotient or remainder that simplifies to depend on fewer expanded axes (a SPLIT's lanes inside one
    block: (l*4 + u) // 32 is l // 8), expanded in that form, so that the lanes share one value and what is computed
    from it (a head's attention weight under its 4 upcast channels) is computed once; None where it does not."""
    simple = simplify(u)
    if simple is u or not any(r not in simple.toposort() for r in axes): return None
    for x in simple.toposort():
      if x not in self.v: self.v[x] = self._expand(x)
    return self.v[simple]

  def axes_of(self, srcs) -> tuple[UOp, ...]:
    return tuple(sorted({r for s in srcs for r in self.v[s].axes}, key=_lane_order))

  # ---- 3. memory ----
  def offsets(self, off: UOp, axes: tuple[UOp, ...]) -> tuple[UOp, list[int]] | None:
    """(base, per-lane offsets) when off = base + sum(c_t * t) with constant c_t, each term t an expanded axis
    or a function of expanded axes alone (a lane's `u // 2`, `u % 2` of a merged axis: known per lane); else None.
    An offset that has no such form as it stands may after simplifying: (g*8 + u) // 2 is g*4 + u // 2."""
    form = _lane_form(off)
    if form is None and (simple := simplify(off)) is not off: form = _lane_form(simple)
    if form is None: return None
    base, coeffs = form
    points = _coords(axes)
    values = {t: _lane_values(t, axes, points) for t in coeffs}
    if any(v is None for v in values.values()): return None
    deltas = [sum(c * values[t][i] for t, c in coeffs.items()) for i in range(len(points))]
    return self.rebuild(base), deltas

  def rebuild(self, e: UOp) -> UOp:
    """The new form of an expression built from unexpanded nodes (their Lanes where known)."""
    if e in self.v: return self.one(e)
    return e.replace(src=tuple(self.rebuild(s) for s in e.src))

  def runs(self, base: UOp, deltas: list[int], lanes: list[int]) -> list[list[int]]:
    """`lanes` cut into runs of consecutive offsets: each run is one access."""
    out: list[list[int]] = []
    for i in lanes:
      if out and deltas[i] == deltas[out[-1][-1]] + 1 and len(out[-1]) < self.width: out[-1].append(i)
      else: out.append([i])
    if self.caps.aligned_vectors: out = [piece for run in out for piece in self.aligned(base, deltas, run)]
    return out

  def aligned(self, base: UOp, deltas: list[int], run: list[int]) -> list[list[int]]:
    """Pieces of a run of power-of-two width whose offset is provably a multiple of that width."""
    out, i = [], 0
    while i < len(run):
      n = 1
      while n * 2 <= len(run) - i and _multiple_of(base, n * 2) and deltas[run[i]] % (n * 2) == 0: n *= 2
      out.append(run[i:i + n])
      i += n
    return out

  def access_axes(self, u: UOp) -> tuple[UOp, ...]:
    idx = u.src[0]
    return self.axes_of((idx.src[1],) + u.src[2 if u.op is Ops.STORE else 1:])

  def load(self, u: UOp) -> Lanes:
    idx, axes = u.src[0], self.access_axes(u)
    if self.v[idx.src[0]].axes: raise _fail("a pointer that differs across lanes")
    if not axes: return Lanes((), (u.replace(src=(idx.replace(src=(self.one(idx.src[0]), self.one(idx.src[1]))),) + tuple(self.one(s) for s in u.src[1:])),), 1)
    ptr, gate = self.one(idx.src[0]), (u.src[2] if len(u.src) == 3 else None)
    form = self.offsets(idx.src[1], axes) if gate is None or not self.v[gate].axes or self._masked(gate) else None
    if form is not None and gate is None and (across := self.loads_across_chunks(u, ptr, form, axes)) is not None: return across
    def access(lanes: list[int]) -> UOp:
      if form is None: return self.scalar_loads(u, ptr, axes, lanes)
      runs = self.runs(form[0], form[1], lanes)
      if (window := self.window_loads(u, ptr, form[0], form[1], lanes, len(runs), axes)) is not None: return window
      if len(runs) > 1 and len(by_address := self.runs(form[0], form[1], sorted(lanes, key=lambda i: form[1][i]))) < len(runs) \
         and min(map(len, by_address)) >= PERMUTED_RUN:
        return self.permuted_loads(u, ptr, form, axes, lanes, by_address)
      pieces = [self.vector_load(u, ptr, form[0], form[1][run[0]], axes, run) for run in runs]
      return pieces[0] if len(pieces) == 1 else _stack_pieces(pieces)
    return self.make(axes, access)

  def loads_across_chunks(self, u: UOp, ptr: UOp, form: tuple[UOp, list[int]], axes) -> Lanes | None:
    """GPU targets: an ungated load whose lanes read runs of consecutive elements that the chunks cut across (a
    row of `a` read along the unrolled reduction steps, its rows upcast: lane = step x rows + row, so every chunk
    holds one element of each of 4 rows) is read as one vector access per run over all its lanes, each chunk
    picking its lanes from them (a GEP of a vector is a register on a GPU): 8 128-bit loads instead of 32 scalar
    ones. None where the chunks' own accesses are as few, where lanes share elements (a convolution's or
    pooling's overlapping windows) or where the value has more than ACROSS_LANES lanes (a convolution's 288 weights
    a step): loaded whole, they would all be live at once (ptxas then spills)."""
    base, deltas = form
    if not self.caps.gpu or len(deltas) > ACROSS_LANES or len(set(deltas)) < len(deltas): return None
    chunks = [list(range(s, min(len(deltas), s + self.width))) for s in range(0, len(deltas), self.width)]
    whole = self.runs(base, deltas, sorted(range(len(deltas)), key=lambda i: deltas[i]))
    if len(whole) >= sum(len(self.runs(base, deltas, c)) for c in chunks): return None
    pieces = [self.vector_load(u, ptr, base, deltas[run[0]], axes, run) for run in whole]
    where = {i: (p, k) for p, run in zip(pieces, whole) for k, i in enumerate(run)}
    def lane(i: int) -> UOp:
      p, k = where[i]
      return p if p.dtype.count == 1 else UOp(Ops.GEP, u.dtype, (p,), (k,))
    def chunk(lanes: list[int]) -> UOp:
      return lane(lanes[0]) if len(lanes) == 1 else UOp(Ops.STACK, u.dtype.vec(len(lanes)), tuple(lane(i) for i in lanes))
    return Lanes(axes, tuple(chunk(c) for c in chunks), self.width)

  def _masked(self, gate: UOp) -> bool:
    """A gate that differs across lanes makes masked vector loads: on targets that have them, where it does not
    move with a reduction loop (whose every step would build the vector of gates lane by lane; a padded
    convolution's window positions are unrolled, its gates computed once per tile)."""
    return self.caps.masked_loads and not any(is_axis(r) and axis_type(r) in (AxisType.REDUCE, AxisType.GROUP_REDUCE) for r in gate.toposort())

  def vector_load(self, u: UOp, ptr: UOp, base: UOp, delta: int, axes, run: list[int]) -> UOp:
    at = UOp(Ops.INDEX, ptr.dtype, (ptr, simplify(base.alu(Ops.ADD, _idx(delta)))))
    gate = (self.operand(u.src[2], axes, run) if self.v[u.src[2]].axes else self.one(u.src[2])) if len(u.src) == 3 else None
    extra = ((self.operand(u.src[1], axes, run), gate) if gate is not None else ())
    return UOp(Ops.LOAD, u.dtype.vec(len(run)), (at,) + extra)

  def permuted_loads(self, u: UOp, ptr: UOp, form: tuple[UOp, list[int]], axes, lanes: list[int], runs: list[list[int]]) -> UOp:
    """Lanes whose addresses are runs of consecutive elements in another order than the lanes' (a pixel
    shuffle's output lanes alternate between two input planes: lanes 0, 2, 4, .. read one row, 1, 3, 5, .. the
    next plane's): one vector access per run in address order, the lanes picked from them (a shuffle). Runs of
    PERMUTED_RUN lanes or more only: shorter ones are lanes read one by one to be broadcast (a gemm's two
    unrolled steps of a row of a), which a scalar load broadcasts in one instruction and a lane of a vector in two."""
    pieces = [self.vector_load(u, ptr, form[0], form[1][run[0]], axes, run) for run in runs]
    where = {i: (p, k) for p, run in zip(pieces, runs) for k, i in enumerate(run)}
    def lane(i: int) -> UOp:
      p, k = where[i]
      return p if p.dtype.count == 1 else UOp(Ops.GEP, u.dtype, (p,), (k,))
    return UOp(Ops.STACK, u.dtype.vec(len(lanes)), tuple(lane(i) for i in lanes))

  def window_loads(self, u: UOp, ptr: UOp, base: UOp, deltas: list[int], lanes: list[int], runs: int, axes) -> UOp | None:
    """Lanes that read scattered elements of a span of at most two vectors (a strided window: a
    pooling's stride-2 taps, every other element of a row) as one or two vector loads inside that span
    (they read nothing the lanes do not lie between) and a STACK of their lanes, which the CPU
    renderers make one shuffle, instead of a load per lane. Targets without aligned vector accesses (CPUs)
    only; a gated load where masked loads apply (`_masked`, an alt the same in every lane, no two lanes at one
    element: a padded stride-2 convolution's taps), each window's gate then a lane's where it reads that
    element, else false (nothing else is read)."""
    gated = len(u.src) == 3
    if runs < 3 or self.caps.aligned_vectors or (gated and not (self._masked(u.src[2]) and not self.v[u.src[1]].axes)): return None
    lo, hi = min(deltas[i] for i in lanes), max(deltas[i] for i in lanes)
    n = min(hi - lo + 1, self.width)
    if gated and len({deltas[i] for i in lanes}) < len(lanes): return None
    if hi - lo + 1 <= 2 * self.width: starts = [lo] if hi - lo < n else [lo, hi - n + 1]
    elif not gated: return None
    else:  # masked windows can leave gaps (two rows of a strided window): one from each lane no window covers yet
      starts = []
      for d in sorted(deltas[i] for i in lanes):
        if not starts or d >= starts[-1] + n: starts.append(d)
      if len(starts) * 2 > runs: return None
    def window(s: int) -> UOp:
      at = UOp(Ops.INDEX, ptr.dtype, (ptr, simplify(base.alu(Ops.ADD, _idx(s)))))
      if not gated: return UOp(Ops.LOAD, u.dtype.vec(n), (at,))
      reader = {deltas[i]: i for i in lanes}
      gates = [self.operand(u.src[2], axes, [reader[d]]) if d in reader else UOp.const(dtypes.bool, False) for d in range(s, s + n)]
      alt = UOp(Ops.STACK, u.dtype.vec(n), (self.one(u.src[1]),) * n)
      return UOp(Ops.LOAD, u.dtype.vec(n), (at, alt, UOp(Ops.STACK, dtypes.bool.vec(n), tuple(gates))))
    windows = [window(s) for s in starts]
    def lane(d: int) -> UOp:  # (a window of one element: every lane reads it, as a lane term's u // 8 over 8 lanes does)
      k = next(j for j, s in enumerate(starts) if s <= d < s + n)
      return windows[k] if windows[k].dtype.count == 1 else UOp(Ops.GEP, u.dtype, (windows[k],), (d - starts[k],))
    return UOp(Ops.STACK, u.dtype.vec(len(lanes)), tuple(lane(deltas[i]) for i in lanes))

  def scalar_loads(self, u: UOp, ptr: UOp, axes, lanes: list[int]) -> UOp:
    vals = []
    for i in lanes:
      at = UOp(Ops.INDEX, ptr.dtype, (ptr, self.operand(u.src[0].src[1], axes, [i])))
      vals.append(UOp(Ops.LOAD, u.dtype, (at,) + tuple(self.operand(s, axes, [i]) for s in u.src[1:])))
    return vals[0] if len(vals) == 1 else UOp(Ops.STACK, u.dtype.vec(len(vals)), tuple(vals))

  def store(self, u: UOp) -> Lanes:
    idx, val = u.src[0], u.src[1]
    gate = u.src[2] if len(u.src) == 3 else None
    if self.v[idx.src[0]].axes: raise _fail("a pointer that differs across lanes")
    addr = self.axes_of((idx.src[1],))
    gate_axes = set(self.v[gate].axes) if gate is not None else set()
    varying = (set(self.v[val].axes) | gate_axes) - set(addr)
    repeated = {r for r in self.scope[u] if _expanded(r) and axis_type(r) is AxisType.UNROLL} - set(addr)
    if varying or (repeated and self.accumulates(u, addr) is not None):  # lanes that write one place: a reduction
      gated_fold = not gate_axes <= set(addr)
      value, axes = self.contract(u, addr, tuple(sorted(varying | repeated, key=_lane_order)), gated_fold), addr
      if gated_fold: gate = None  # the fold skipped the masked lanes; the rest is acc stored back
    else: value, axes = None, self.access_axes(u)
    ptr = self.one(idx.src[0])
    if not axes:
      v = value.chunks[0] if value is not None else self.one(val)
      at = idx.replace(src=(ptr, self.one(idx.src[1])))
      return Lanes((), (UOp(Ops.STORE, dtypes.void, (at, v) + ((self.one(gate),) if gate is not None else ()), u.arg),), 1)  # an async copy keeps its arg
    value = value or self.make(axes, lambda ls: self.operand(val, axes, ls))
    form = self.offsets(idx.src[1], axes) if gate is None or not self.v[gate].axes else None
    n = math.prod(axis_size(r) for r in axes)
    stores = []
    if form is None:
      for i in range(n):
        at = UOp(Ops.INDEX, ptr.dtype, (ptr, self.operand(idx.src[1], axes, [i])))
        stores.append(UOp(Ops.STORE, dtypes.void, (at, value.scalar(i)) + ((self.operand(gate, axes, [i]),) if gate is not None else ())))
    else:
      base, deltas = form
      for run in self.runs(base, deltas, list(range(n))):
        at = UOp(Ops.INDEX, ptr.dtype, (ptr, simplify(base.alu(Ops.ADD, _idx(deltas[run[0]])))))
        stores.append(UOp(Ops.STORE, dtypes.void, (at, gather(value, run)) + ((self.one(gate),) if gate is not None else ())))
    return Lanes((), (stores[0] if len(stores) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(stores)),), 1)

  # ---- 4. contraction ----
  def accumulates(self, u: UOp, axes: tuple[UOp, ...]) -> int | None:
    """For STORE u of acc = op(acc, v): which source of op is the LOAD of acc (the same buffer, the
    same lanes as the address); None when u is no such update."""
    val = u.src[1]
    if val.op not in (Ops.ADD, Ops.MUL, Ops.MAX): return None
    return next((i for i, s in enumerate(val.src) if s.op is Ops.LOAD and s.src[0].op is Ops.INDEX
                 and root_buffer(s.src[0]) is root_buffer(u.src[0]) and not set(self.v[s].axes) - set(axes)), None)

  def contract(self, u: UOp, axes: tuple[UOp, ...], extra: tuple[UOp, ...], gated: bool) -> Lanes:
    """acc = op(acc, v) inside `extra` UNROLL axes: fold v's lanes into acc in loop order (a lane whose
    STORE gate is false, with `gated`, leaves acc as it is)."""
    val, gate = u.src[1], (u.src[2] if gated else None)
    pos_acc = self.accumulates(u, axes)
    if any(axis_type(r) is not AxisType.UNROLL for r in extra) or pos_acc is None:
      raise _fail(f"a STORE does not depend on the {'/'.join(axis_type(r).name for r in extra)} axes its value depends on, "
                  "and it is not a reduction acc = op(acc, value)")
    acc_pos = [pos_acc]
    cur, v = val.src[acc_pos[0]], val.src[1 - acc_pos[0]]
    full = tuple(sorted(set(axes) | set(extra), key=_lane_order))
    where = {p: i for i, p in enumerate(_coords(full))}
    pos, epos = [full.index(r) for r in axes], [full.index(r) for r in extra]
    out_points, cur_lanes = _coords(axes), _project(axes, self.v[cur].axes)
    def fold(lanes: list[int]) -> UOp:
      acc = gather(self.v[cur], [cur_lanes[i] for i in lanes])
      for e in _coords(extra):
        lanes_full = []
        for i in lanes:
          p = [0] * len(full)
          for k, c in zip(pos, out_points[i]): p[k] = c
          for k, c in zip(epos, e): p[k] = c
          lanes_full.append(where[tuple(p)])
        term = self.operand(v, full, lanes_full)
        new = UOp(val.op, acc.dtype, (acc, term) if acc_pos[0] == 0 else (term, acc))
        acc = new if gate is None else UOp(Ops.WHERE, acc.dtype, (self.operand(gate, full, lanes_full), new, acc))
      return acc
    return self.make(axes, fold)


def _stack_pieces(pieces: list[UOp]) -> UOp:
  lanes = [p if p.dtype.count == 1 else UOp(Ops.GEP, p.dtype.scalar, (p,), (j,)) for p in pieces for j in range(p.dtype.count)]
  return UOp(Ops.STACK, lanes[0].dtype.vec(len(lanes)), tuple(lanes))


def _lane_form(e: UOp) -> tuple[UOp, dict[UOp, int]] | None:
  """e = base + sum(c_a * axis_a) over expanded axes with integer c_a and base free of them; else None."""
  if _expanded(e): return _idx(0), {e: 1}
  if not any(_expanded(x) for x in e.toposort()): return e, {}
  if e.op is Ops.ADD:
    a, b = _lane_form(e.src[0]), _lane_form(e.src[1])
    if a is None or b is None: return None
    coeffs = dict(a[1])
    for r, c in b[1].items(): coeffs[r] = coeffs.get(r, 0) + c
    return a[0].alu(Ops.ADD, b[0]), coeffs
  if e.op is Ops.MUL and e.src[1].op is Ops.CONST:
    inner = _lane_form(e.src[0])
    if inner is None: return None
    return inner[0].alu(Ops.MUL, e.src[1]), {r: c * e.src[1].arg for r, c in inner[1].items()}
  if e.op in (Ops.IDIV, Ops.MOD) and all(x.op is Ops.CONST or _expanded(x) or x.op in (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD) for x in e.toposort()):
    return _idx(0), {e: 1}  # a lane term: a function of the lanes alone, evaluated per lane (_lane_values)
  return None


def _lane_values(t: UOp, axes: tuple[UOp, ...], points: list[tuple[int, ...]]) -> list[int] | None:
  """Term t of a lane form at each lane's point: the axis's coordinate, or a lane term evaluated there (None
  where one does not fold to a constant: the lanes are then loaded one by one)."""
  if t in axes: return [p[axes.index(t)] for p in points]
  out = []
  for p in points:
    v = simplify(substitute(t, {r: _idx(c) for r, c in zip(axes, p)}))
    if v.op is not Ops.CONST: return None
    out.append(v.arg)
  return out


def _multiple_of(e: UOp, n: int) -> bool:
  """e is provably a multiple of n."""
  if n == 1: return True
  if e.op is Ops.CONST: return e.arg % n == 0
  if e.op is Ops.ADD: return _multiple_of(e.src[0], n) and _multiple_of(e.src[1], n)
  if e.op is Ops.MUL: return _multiple_of(e.src[0], n) or _multiple_of(e.src[1], n)
  return False


# ---- 5. launch axes ---------------------------------------------------------------------------------------


def launch_axes(sink: UOp, trace: Trace | None = None) -> UOp:
  """GLOBAL RANGEs -> SPECIAL gidx<n>, workgroup dimensions (`workgroup_dims`: the LOCAL axes, siblings
  of one size sharing one) -> SPECIAL lidx<n>, n counted from the innermost. A grid of more than three
  axes folds its outer ones into gidx2 (each the quotient and remainder of it by the inner ones' sizes)."""
  new = {}
  grid = [[r] for r in kernel_axes(sink) if is_axis(r) and axis_type(r) is AxisType.GLOBAL]
  if len(grid) > 3:
    outer, grid = [d[0] for d in grid[:-2]], grid[-2:]
    sizes = [axis_size(r) for r in outer]
    if not all(isinstance(n, int) for n in sizes): raise _fail("more than 3 GLOBAL dimensions, the outer ones of symbolic size")
    special, stride = UOp(Ops.SPECIAL, dtypes.index, (_idx(math.prod(sizes)),), "gidx2"), 1
    for r, n in reversed(list(zip(outer, sizes))):  # the outermost one's END closes the SPECIAL, the others' nothing
      new[r] = (simplify(special.alu(Ops.IDIV, _idx(stride)).alu(Ops.MOD, _idx(n))), (special,) if r is outer[0] else ())
      stride *= n
  for dims, t, prefix in ((grid, AxisType.GLOBAL, "gidx"), (workgroup_dims(sink), AxisType.LOCAL, "lidx")):
    if len(dims) > 3: raise _fail(f"{len(dims)} {t.name} dimensions; a GPU launch has 3")
    for n, d in enumerate(reversed(dims)):
      special = UOp(Ops.SPECIAL, dtypes.index, (d[0].src[0],), f"{prefix}{n}")
      new.update({r: (special, (special,)) for r in d})
  return replace_ranges(sink, new, trace) if new else sink
