"""Optimize (seed 000): give each kernel's RANGE axes their roles, then apply OptOps to them.

Axes. A kernel's axes are its RANGEs, numbered 0.. by their axis id (the id orders the loop nest
where the graph leaves it free). Each RANGE's arg is `(axis_id, AxisType)`; `format_axes` shows a
kernel as letters and sizes, `g16 l8 R64 u4`, as `--print-after optimize` prints it.

Typing. Rangeify makes every output axis a LOOP. An axis is *parallel* when its iterations are
independent, which is proven, not assumed: every global STORE lies inside it at an address that is an
injective affine function of the loops around it (so two iterations never write the same element;
where the STORE's gate keeps an affine part e of the address below n, as PADTO's mask does, e counts
as one loop of size n),
no global buffer is both written and read (except in place, at the very address written), and every
REG/LOCAL buffer written inside it is used inside it only, written before it is read (so it carries
nothing between iterations; one written before the axis and only read inside it is shared, like a
fused reduction's result read by the loop beside it). Parallel LOOP axes become GLOBAL: the kernel's
launch space (a loop on a CPU, the grid on a GPU; on a GPU only axes that every reduction loop is
nested in, see `type_axes`).

OptOps (seed 000's table), composed left to right, each checked before it applies:
- `SPLIT(axis, k, T[, top])`: axis of size n becomes (n/k, k), or (k, n/k) with `top`; the part of
  size k gets AxisType T, the other keeps the old type. T must be splittable from the axis's type
  (LOCAL from g/L, THREAD from g, UPCAST from g/l/L, UNROLL from R/G, GROUP_REDUCE from R) in the
  table's direction (THREAD is the outer part, LOCAL/UPCAST/UNROLL the inner, GROUP_REDUCE either);
  LOCAL needs a target with workgroups, THREAD one with CPU threads; a LOOP axis becomes LOCAL or
  UPCAST lanes only when it is parallel (on a GPU, beyond the three grid axes). A GROUP_REDUCE axis
  is k workers sharing a reduction, each with a partial accumulator: its REDUCE axis may only
  accumulate, acc = op(acc, v) with op ADD/MUL/MAX, and may not be nested with another GROUP_REDUCE
  axis. On a GPU the workers are a workgroup's threads, whose partials Expand combines through LOCAL
  memory; LOCAL and GROUP_REDUCE axes make the workgroup's dimensions (`workgroup_dims`: sibling
  loops of one size share one), at most 3, with at most the target's workgroup size of threads. On a
  CPU they are vector lanes, combined pairwise after the loop (see uopc.stages.expand.group_lanes).
  Either way the partials change the order of the operations (a float sum's rounding), in a fixed
  way that depends on k, not on the machine.
- `PADTO(axis, m)`: the axis runs to the next multiple of m; the extra iterations are masked (every
  LOAD and STORE inside the axis is gated by `index < n`). `PADTO(axis, m, t)` masks nothing: the
  iterations are tiles of t, and a tile that would run past the end is moved back to end at it (it
  repeats some of the tile before it, storing the same values again), so loads stay ungated; only for
  a GLOBAL axis of a kernel that reads no global buffer it stores to (`uopc.stages.overlap_tiles`).
- `SWAP(i, j)`: exchange the positions (nesting) of two axes of the same type that enclose the same
  loops (else a loop would land inside one it does not depend on and repeat for nothing).
- `NOLOCALS`: no LOCAL axes from here on.
- `TC(axis[, tc])`: put a gemm-shaped REDUCE axis on the target's tensor cores (`uopc.stages.tensor_cores`;
  tc picks one of the target's shapes, -1 the first that fits; seed 000's `opt` and `mode` arguments,
  padding and emulation, are not supported). The kernel must be `out[m, n] = f(sum over k of
  CAST(a[m, k]) * CAST(b[k, n]))` with two GLOBAL axes m, n and the REDUCE axis k, a and b of the tensor
  core's input dtype and the sum of its accumulator dtype, M, N, K multiples of its shape. m and n
  become the axes of the warps' tiles (each warp computes up to 2 x 4 of the tensor core's tiles:
  M/32 x N/32 warps for m16n8k16 where that divides), k steps by the tensor core's K, and a WARP axis
  of 32 lanes joins them (a workgroup dimension, always the innermost: the lanes of one warp); each
  lane loads its fragments of a and b and the reduction accumulates WMMA ops; the epilogue f runs
  once per accumulator element. Then (`uopc.stages.tc_staging`) the workgroup stages each iteration's
  tiles of a and b in LOCAL memory and the lanes read their fragments from there, in as many stages as
  fit 48 KiB (4 where they fit half of the target's `local_bytes`: two workgroups a multiprocessor),
  unless the third argument pins their number (`TC(axis, tc, stages)`: 0 for fragments straight
  from global memory, 2, 3 or 4, within the target's `local_bytes`) or NOLOCALS; the fourth pins the warp tile,
  and for tiles 6..10 the warps of a workgroup (`uopc.stages.opts.TC_TILES`, else chosen by the gemm's size; 9 and
  10, the warpgroup tiles, give each 4 warps interleaved rows so that an sm_90a build turns their k steps into
  warpgroup MMAs, `uopc.stages.warpgroup_mma`, which the heuristics pick where every --arch is sm_90a). TC must
  be the first opt; after it, axes may still be split into LOCAL (more warps per workgroup) or padded,
  but not UPCAST or UNROLLed (a WMMA is not widened). Only -t cuda has tensor cores.
- `STAGE[(stages)]` (-t cuda, the last opt): the inputs that a workgroup's threads read again (a float32
  gemm's a and b) go through LOCAL tiles filled by asynchronous copies, in 2 or 3 stages (default: as
  many as fit); refused where the analysis of `uopc.stages.local_staging` finds no such tile.

Without `--opts`, hand-written heuristics (`heuristic_opts`) pick the opts per target class: the CPU
schedules in `uopc.stages.cpu_schedule`, the GPU ones here and in `uopc.stages.gpu_schedule`.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from uopc.diagnostics import CompileError, error
from uopc.dtype import AddrSpace, PtrDType, dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.opts import TC_AUTO_STAGES, Opt, OptOp, parse_opts, parse_schedule  # noqa: F401 (the opts' home; re-exported)
from uopc.stages.tensor_cores import TensorCore
from uopc.stages.accumulators import accumulator_first
from uopc.stages.warpgroup_mma import warpgroup_arg
from uopc.symbolic import INT_DIVISIONS, divide_where, simplify
from uopc.uop import UOp

if TYPE_CHECKING: from uopc.targets import Target

# ---- targets --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetCaps:
  """What Optimize and Expand need to know of a target."""
  name: str
  gpu: bool                    # GLOBAL/LOCAL axes become SPECIAL gidx/lidx (else loops)
  threads: bool                # THREAD axes run on the host library's worker pool
  vector_width: int            # lanes of the widest vector value Expand makes (wider ones are split)
  aligned_vectors: bool        # vector loads/stores need an offset that is a multiple of their width
  tensor_cores: tuple[TensorCore, ...] = ()
  max_local: int = 256         # threads of a workgroup
  local_bytes: int = 48 * 1024  # LOCAL (shared) memory a workgroup may use: what TC's pinned stages may fill
  warpgroup_mma: bool = False  # every arch of the build has warpgroup MMAs (sm_90a's wgmma): TC takes the warpgroup tile
  masked_loads: bool = False   # a vector load may take a gate per lane (-t c with AVX2 or AVX-512 vectors: their masked loads)
  async_copies: bool = False   # asynchronous copies into shared memory (the STAGE opt, staged float32 gemms: -t cuda)


def target_caps(target: "str | Target", vector_bytes: int | None = None, archs: tuple[str, ...] = (), tf32: bool = False) -> TargetCaps:
  """What Optimize plans for, from the Target's fields. CPU targets (c, llvm) share the C launcher, which
  runs THREAD axes on worker threads. Both build for the portable baseline by default (x86-64's SSE:
  16-byte registers, 4 x f32); `vector_bytes` is the register width a target with --cpu levels (-t c)
  builds for (32 for AVX2, 64 for AVX-512): vector values get that many bytes' worth of f32 lanes, and the
  heuristics size their register tiles by it. A GPU target's `local_bytes` is the least its `Target`
  allows a workgroup on any of `archs` (() : the target's default archs), so one plan runs on all; `tf32`
  (--allow-tf32) adds the target's tf32 tensor core for float32 gemms. The schedules do not depend on
  --fp-contract: a fused multiply-add changes a kernel's arithmetic, not its best tiles."""
  from uopc.targets import as_target
  t = as_target(target)
  if not t.gpu:
    width = (vector_bytes if t.cpu_levels else None) or 16
    return TargetCaps(t.name, gpu=False, threads=True, vector_width=width // 4, aligned_vectors=False, masked_loads=width >= 32)
  local = min(map(t.local_bytes, archs or t.default_archs), default=TargetCaps.local_bytes) if t.local_bytes else TargetCaps.local_bytes
  tensor_cores = t.tensor_cores + ((t.tf32_tensor_core,) if tf32 and t.tf32_tensor_core else ())
  warpgroup = bool(archs and t.warpgroup_archs) and all(a in t.warpgroup_archs for a in archs)
  return TargetCaps(t.name, gpu=True, threads=False, vector_width=4, aligned_vectors=True, tensor_cores=tensor_cores, local_bytes=local,
                    warpgroup_mma=warpgroup, async_copies=t.async_copies)


# ---- axes ------------------------------------------------------------------------------------------------


def is_axis(u: UOp) -> bool:
  return u.op is Ops.RANGE and isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], AxisType)


def kernel_axes(sink: UOp) -> list[UOp]:
  """The kernel's RANGEs in axis order (by axis id)."""
  return sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: (r.arg[0] if isinstance(r.arg, tuple) else 0, str(r.arg)))


def axis_type(r: UOp) -> AxisType: return r.arg[1]
def axis_size(r: UOp) -> int | UOp: return r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0]


def format_axes(sink: UOp) -> str:
  """`g16 l8 R64 u4`: each axis's letter and size (a run-time size by its DEFINE_VAR's name, else ?)."""
  def size(r: UOp) -> str:
    s = axis_size(r)
    return str(s) if isinstance(s, int) else s.arg[0] if s.op is Ops.DEFINE_VAR else "?"
  return " ".join(f"{axis_type(r).letter}{size(r)}" if is_axis(r) else f"?{size(r)}" for r in kernel_axes(sink))


def _range(size: int | UOp, axis_id: int, t: AxisType) -> UOp:
  bound = size if isinstance(size, UOp) else UOp.const(dtypes.index, size)
  return UOp(Ops.RANGE, dtypes.index, (bound,), (axis_id, t))


Trace = list  # (old, new) pairs of the nodes a rewrite replaced, so that diagnostics keep their source location


def note(trace: Trace | None, old: UOp, new: UOp) -> None:
  if trace is not None and new is not old: trace.append((old, new))


def replace_ranges(root: UOp, new: Mapping[UOp, tuple[UOp, tuple[UOp, ...]]], trace: Trace | None = None) -> UOp:
  """Replace each RANGE r in `new` by (value, ranges): uses of r read `value`; an END of r closes the
  `ranges` instead (innermost first; none: the body stays) and an AFTER that waits on r waits on them."""
  memo: dict[UOp, UOp] = {}
  for u in root.toposort():
    if u in new: memo[u] = new[u][0]
    elif u.op is Ops.END and u.src[1] in new:
      body = memo[u.src[0]]
      for r in reversed(new[u.src[1]][1]): body = UOp(Ops.END, dtypes.void, (body, r))
      memo[u] = body
    elif u.op is Ops.AFTER:
      src = [memo[u.src[0]]] + [x for s in u.src[1:] for x in (new[s][1] if s in new else (memo[s],))]
      memo[u] = src[0] if len(src) == 1 else u.replace(src=tuple(src))
    else:
      src = tuple(memo[s] for s in u.src)
      memo[u] = u if src == u.src else u.replace(src=src)
    note(trace, u, memo[u])
  return memo[root]


def renumber(root: UOp, order: list[UOp], trace: Trace | None = None) -> UOp:
  """Axis ids 0.. in `order` (the new axis order)."""
  new = {r: _range(axis_size(r), i, axis_type(r)) for i, r in enumerate(order)}
  return replace_ranges(root, {r: (n, (n,)) for r, n in new.items() if n is not r}, trace)


def _swap_nesting(sink: UOp, a: UOp, b: UOp) -> UOp:
  """Exchange a and b in every chain of ENDs that closes both (END(END(body, a), b) -> END(END(body, b), a)):
  the loops then nest in the swapped axis order, which Linearize follows. A chain whose inner ENDs have
  users of their own is kept."""
  nodes = sink.toposort()
  users = Counter(s for u in nodes for s in u.src)
  inner = {u.src[0] for u in nodes if u.op is Ops.END and len(u.src) == 2 and u.src[0].op is Ops.END and len(u.src[0].src) == 2}
  memo: dict[UOp, UOp] = {}
  for u in nodes:
    src = tuple(memo[s] for s in u.src)
    memo[u] = u if src == u.src else u.replace(src=src)
    if u.op is not Ops.END or len(u.src) != 2 or u in inner: continue
    ranges, body, shared = [], u, False
    while body.op is Ops.END and len(body.src) == 2:
      ranges.append(body.src[1])
      shared, body = shared or (body is not u and users[body] > 1), body.src[0]
    if a in ranges and b in ranges and not shared:
      i, j = ranges.index(a), ranges.index(b)
      ranges[i], ranges[j] = b, a
      out = memo[body]
      for r in reversed(ranges): out = UOp(Ops.END, dtypes.void, (out, r))
      memo[u] = out
  return memo[sink]


# ---- scopes and parallel axes -----------------------------------------------------------------------------


def scopes(sink: UOp) -> dict[UOp, frozenset]:
  """The RANGEs each node lies inside: those it depends on, except through their END."""
  out: dict[UOp, frozenset] = {}
  for u in sink.toposort():
    s = frozenset().union(*(out[x] for x in u.src))
    if u.op is Ops.RANGE: s |= {u}
    elif u.op is Ops.END and len(u.src) == 2: s -= {u.src[1]}
    out[u] = s
  return out


def nested_with(sink: UOp) -> dict[UOp, frozenset]:
  """For each RANGE, the RANGEs some node lies inside together with it (itself included): the loops it
  is nested in and those nested in it, but not its siblings."""
  out: dict[UOp, frozenset] = {}
  for s in scopes(sink).values():
    for r in s: out[r] = out.get(r, frozenset()) | s
  return out


WORKGROUP_AXES = (AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.WARP)


def workgroup_dims(sink: UOp) -> list[list[UOp]]:
  """The workgroup's dimensions: its LOCAL and GROUP_REDUCE axes in axis order, where an axis joins the
  dimension of earlier ones of its size that it is never nested with (sibling loops, such as a fused
  softmax's max, sum and output loops: the same threads take each loop in turn); else it adds one."""
  near = nested_with(sink)
  dims: list[list[UOp]] = []
  for r in kernel_axes(sink):
    if not is_axis(r) or axis_type(r) not in WORKGROUP_AXES: continue
    shared = next((d for d in dims if axis_size(d[0]) == axis_size(r) and not near.get(r, frozenset()) & set(d)), None)
    if shared is None: dims.append([r])
    else: shared.append(r)
  return dims


def root_buffer(u: UOp) -> UOp:
  """The PARAM/BUFFER under an INDEX's pointer operand (AFTERs see through)."""
  while u.op in (Ops.AFTER, Ops.INDEX): u = u.src[0]
  return u


def _memory_ops(sink: UOp) -> list[UOp]:
  return [u for u in sink.toposort() if u.op in (Ops.LOAD, Ops.STORE) and u.src and u.src[0].op is Ops.INDEX]


def affine(e: UOp) -> tuple[dict[UOp, UOp], UOp] | None:
  """e = sum(coeff * range) + rest with index-valued coeffs and rest free of ranges; None when it is not."""
  if e.op is Ops.RANGE: return {e: UOp.const(dtypes.index, 1)}, UOp.const(dtypes.index, 0)
  if not any(x.op is Ops.RANGE for x in e.toposort()): return {}, e
  if e.op is Ops.ADD:
    a, b = affine(e.src[0]), affine(e.src[1])
    if a is None or b is None: return None
    coeffs = dict(a[0])
    for r, c in b[0].items(): coeffs[r] = simplify(coeffs[r].alu(Ops.ADD, c)) if r in coeffs else c
    return coeffs, simplify(a[1].alu(Ops.ADD, b[1]))
  if e.op is Ops.MUL:
    for x, k in (e.src, e.src[::-1]):
      if any(y.op is Ops.RANGE for y in k.toposort()): continue
      inner = affine(x)
      if inner is None: return None
      return {r: simplify(c.alu(Ops.MUL, k)) for r, c in inner[0].items()}, simplify(inner[1].alu(Ops.MUL, k))
  return None


def _at_least(a: UOp, b: UOp) -> bool:
  """a >= b provably: the same value, or by their ranges."""
  a, b = simplify(a), simplify(b)
  return a is b or (a.vmin is not None and b.vmax is not None and a.vmin >= b.vmax)


def injective_in(address: UOp, r: UOp, gates: tuple[UOp, ...] = ()) -> bool:
  """Different values of range r never give the same address: address is affine in its ranges, r's
  coefficient is not 0, and the terms form a mixed radix (each coefficient at least the previous
  coefficient times the previous range's size), so the map from range values to addresses is one to one.
  `gates` are conditions `e < n` that hold where the access happens (a padded axis's mask, `e` affine):
  where the address is c * e plus terms in other ranges, e counts as one range of size n there (if r
  is one of e's ranges, e must be injective in r too)."""
  form = affine(address)
  if form is None: return False
  terms = {x: c for x, c in form[0].items() if not (c.op is Ops.CONST and c.arg == 0)}
  for gate in gates:
    if (merged := _merge_gated(terms, gate)) is not None and (r not in merged[1] or injective_in(gate.src[0], r)):
      terms, r = merged[0], merged[2] if r in merged[1] else r
  return _mixed_radix(terms, r)


def _mixed_radix(terms: Mapping[UOp, UOp], r: UOp) -> bool:
  if r not in terms or any(c.vmin is None or c.vmin < 1 for c in terms.values()): return False
  order = sorted(terms.items(), key=lambda t: (t[1].vmin, t[1].vmax, t[0].arg[0] if isinstance(t[0].arg, tuple) else 0))
  return all(_at_least(c, pc.alu(Ops.MUL, px.src[0])) for (px, pc), (_, c) in zip(order, order[1:]))


def _merge_gated(terms: Mapping[UOp, UOp], gate: UOp) -> tuple[dict[UOp, UOp], frozenset, UOp] | None:
  """For a gate `e < n` whose ranges appear in `terms` as c times e's coefficients (constants): the
  terms with e's replaced by one range of size n (coefficient c), e's ranges, and that range."""
  form = affine(gate.src[0])
  if form is None or not form[0] or not all(c.op is Ops.CONST and c.arg > 0 for c in form[0].values()): return None
  first, k = next(iter(form[0].items()))
  if first not in terms or terms[first].op is not Ops.CONST or terms[first].arg % k.arg: return None
  c = terms[first].arg // k.arg
  if any(terms.get(x) is None or terms[x].op is not Ops.CONST or terms[x].arg != c * v.arg for x, v in form[0].items()): return None
  whole = UOp(Ops.RANGE, dtypes.index, (gate.src[1],), (-1, gate.src[0]))  # a stand-in, never in a kernel
  out = {x: v for x, v in terms.items() if x not in form[0]}
  out[whole] = UOp.const(dtypes.index, c)
  return out, frozenset(form[0]), whole


def store_gates(st: UOp) -> tuple[UOp, ...]:
  """The conditions `e < n` (n a constant) among the AND of a gated STORE's gate (PADTO's mask)."""
  out, todo = [], [st.src[2]] if st.op is Ops.STORE and len(st.src) == 3 else []
  while todo:
    g = todo.pop()
    if g.op is Ops.AND: todo += g.src
    elif g.op is Ops.CMPLT and g.src[1].op is Ops.CONST and g.src[1].arg > 0: out.append(g)
  return tuple(out)


def parallel_axes(sink: UOp) -> set[UOp]:
  """The RANGEs whose iterations are independent (see the module docstring)."""
  mem = _memory_ops(sink)
  scope = scopes(sink)
  stored = {root_buffer(u.src[0]) for u in mem if u.op is Ops.STORE}
  def address(u: UOp) -> tuple: return (root_buffer(u.src[0]), simplify(u.src[0].src[1]))
  written_at = {address(u) for u in mem if u.op is Ops.STORE}
  if any(u.op is Ops.LOAD and root_buffer(u.src[0]) in stored and _is_global(root_buffer(u.src[0])) and address(u) not in written_at
         for u in mem): return set()
  if any(u.op in (Ops.IF, Ops.BARRIER, Ops.SPECIAL) for u in sink.toposort()): return set()
  # an axis that no global STORE lies in does no work to spread
  candidates = {r for u in mem if u.op is Ops.STORE and _is_global(root_buffer(u.src[0])) for r in scope[u]}
  private: dict[UOp, list[UOp]] = {}
  for u in mem:
    buf = root_buffer(u.src[0])
    if not _is_global(buf): private.setdefault(buf, []).append(u)
    elif u.op is Ops.STORE: candidates &= {r for r in scope[u] if injective_in(u.src[0].src[1], r, store_gates(u))}
  for ops in private.values():  # a REG/LOCAL buffer written inside an axis is used inside it only ...
    inside_all = frozenset.intersection(*(scope[u] for u in ops))
    candidates -= frozenset().union(*(scope[u] for u in ops if u.op is Ops.STORE)) - inside_all
  written = _written_before(sink)
  for u in mem:  # ... and written there before it is read
    if u.op is Ops.LOAD and not _is_global(root_buffer(u.src[0])) and root_buffer(u.src[0]) not in written[u]: return set()
  return candidates


def _is_global(buf: UOp) -> bool: return isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace is AddrSpace.GLOBAL


def _written_before(sink: UOp) -> dict[UOp, frozenset]:
  """The buffers a STORE to which each node depends on."""
  out: dict[UOp, frozenset] = {}
  for u in sink.toposort():
    s = frozenset().union(*(out[x] for x in u.src))
    if u.op is Ops.STORE and u.src[0].op is Ops.INDEX: s |= {root_buffer(u.src[0])}
    out[u] = s
  return out


def type_axes(sink: UOp, caps: TargetCaps, trace: Trace | None = None) -> UOp:
  """Parallel LOOP axes become GLOBAL. On a GPU, a grid dimension repeats everything outside it in
  every workgroup, so an axis goes on the grid only when every reduction loop of the kernel is nested
  in it (a fused softmax's output loop, a sibling of its max and sum loops, stays a LOOP for the
  workgroup to share); Expand folds a grid of more than three axes into the launch's three."""
  parallel = parallel_axes(sink)
  loops = [r for r in kernel_axes(sink) if is_axis(r) and axis_type(r) is AxisType.LOOP and r in parallel]
  if caps.gpu:
    near = nested_with(sink)
    reduces = {r for r in kernel_axes(sink) if is_axis(r) and axis_type(r) is AxisType.REDUCE}
    loops = [r for r in loops if reduces <= near.get(r, frozenset())]
  new = {r: _range(axis_size(r), r.arg[0], AxisType.GLOBAL) for r in loops}
  return replace_ranges(sink, {r: (n, (n,)) for r, n in new.items()}, trace)


# ---- applying opts ----------------------------------------------------------------------------------------

# seed 000's table: the types a new sub-axis of each type may be split from, and on which side it goes
SPLIT_FROM = {AxisType.LOCAL: {AxisType.GLOBAL, AxisType.LOOP}, AxisType.THREAD: {AxisType.GLOBAL},
              AxisType.UPCAST: {AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP},
              AxisType.UNROLL: {AxisType.REDUCE, AxisType.GROUP_REDUCE}, AxisType.GROUP_REDUCE: {AxisType.REDUCE}}
SPLIT_SIDE = {AxisType.LOCAL: (False,), AxisType.THREAD: (True,), AxisType.UPCAST: (False,), AxisType.UNROLL: (False,),
              AxisType.GROUP_REDUCE: (False, True)}
# the ops of an accumulator update acc = op(acc, v) that a GROUP_REDUCE axis may combine across threads
GROUP_OPS = (Ops.ADD, Ops.MUL, Ops.MAX)


class OptError(Exception):
  """An opt that cannot apply to a kernel; the message names the opt and why."""


@dataclass
class KernelSchedule:
  """A kernel after Optimize: its SINK and the opts that made it (printed by --print-after optimize)."""
  sink: UOp
  opts: tuple[Opt, ...]
  caps: TargetCaps

  @property
  def arch_specific(self) -> bool:
    """It uses instructions that only some archs of a build have (sm_90a's warpgroup MMAs): a build that
    mixes those archs with others gives it a variant of its own (uopc.pipeline)."""
    return any(u.op is Ops.WMMA and warpgroup_arg(u.arg) is not None for u in self.sink.toposort())

  def format(self) -> str:
    from uopc.frontend import print_uops
    return f"# axes: {format_axes(self.sink)}\n# opts: {','.join(map(str, self.opts)) or '(none)'}\n{print_uops(self.sink)}"


def apply_opt(sink: UOp, opt: Opt, caps: TargetCaps, first: bool = True, nolocals: bool = False, trace: Trace | None = None) -> UOp:
  """`sink` with `opt` applied; raises OptError when the opt is not legal here."""
  if opt.op is OptOp.TC:
    if not first: raise OptError("TC must be the first opt")
    from uopc.stages.tc_opt import tensor_core  # it builds on this module's helpers
    return tensor_core(sink, opt, caps, trace)
  if opt.op is OptOp.STAGE and not caps.gpu:
    from uopc.stages.cpu_staging import stage_opt as stage_on_cpu  # it builds on this module's helpers
    return stage_on_cpu(sink, opt.arg, trace)
  if opt.op is OptOp.STAGE:
    from uopc.stages.local_staging import stage_opt  # it builds on this module's helpers
    return stage_opt(sink, opt, caps, trace)
  if opt.op is OptOp.NOLOCALS:
    if any(is_axis(r) and axis_type(r) is AxisType.LOCAL for r in kernel_axes(sink)): raise OptError("the kernel already has LOCAL axes")
    return sink
  axes = kernel_axes(sink)
  r = _axis(axes, opt.axis)
  if opt.op is OptOp.SWAP:
    other = _axis(axes, opt.arg)
    if other is r: raise OptError("swaps an axis with itself")
    if axis_type(r) is not axis_type(other): raise OptError(f"axes of different types ({axis_type(r).letter}, {axis_type(other).letter}) cannot swap")
    near = nested_with(sink)
    if near.get(r, frozenset()) - {r, other} != near.get(other, frozenset()) - {r, other}:
      raise OptError(f"axes {opt.axis} and {opt.arg} enclose different loops: the swap would repeat a loop inside one it does not depend on")
    order = list(axes)
    order[opt.axis], order[opt.arg] = other, r
    new = renumber(sink, order, trace)
    return _swap_nesting(new, *(a for a in kernel_axes(new) if a.arg[0] in (opt.axis, opt.arg)))
  size = axis_size(r)
  if not isinstance(size, int): raise OptError(f"axis {opt.axis} has a run-time size")
  if opt.op is OptOp.PADTO: return _padto(sink, r, size, opt.arg, trace)
  return _split(sink, axes, opt.axis, size, opt.arg, caps, nolocals, trace)


def _axis(axes: list[UOp], i: Any) -> UOp:
  if not isinstance(i, int) or not 0 <= i < len(axes): raise OptError(f"axis {i} does not exist (the kernel has {len(axes)} axes)")
  if not is_axis(axes[i]): raise OptError(f"axis {i} has no axis type")
  return axes[i]


def _split(sink: UOp, axes: list[UOp], n: int, size: int, arg: tuple, caps: TargetCaps, nolocals: bool, trace: Trace | None) -> UOp:
  k, new_type, top = arg
  old_type = axis_type(axes[n])
  if new_type not in SPLIT_FROM: raise OptError(f"no axis is split into {new_type.name} ({new_type.letter})")
  if old_type not in SPLIT_FROM[new_type]:
    raise OptError(f"{new_type.name} ({new_type.letter}) cannot be split from {old_type.name} ({old_type.letter}); "
                   f"only from {'/'.join(sorted(t.letter for t in SPLIT_FROM[new_type]))}")
  if top not in SPLIT_SIDE[new_type]: raise OptError(f"{new_type.name} is the {'outer' if not top else 'inner'} part of a split ({'add' if not top else 'drop'} 'top')")
  if new_type is AxisType.LOCAL and not caps.gpu: raise OptError(f"{new_type.name} needs workgroups; target {caps.name} is a CPU")
  if new_type is AxisType.LOCAL and nolocals: raise OptError("LOCAL after NOLOCALS")
  if new_type is AxisType.THREAD and not caps.threads: raise OptError(f"target {caps.name} has no CPU threads")
  if new_type is AxisType.THREAD and any(axis_type(a) is AxisType.THREAD for a in axes): raise OptError("the kernel already has a THREAD axis")
  if new_type is AxisType.GROUP_REDUCE: _check_group_reduce(sink, axes, axes[n])
  if new_type in (AxisType.UPCAST, AxisType.UNROLL) and any(axis_type(a) is AxisType.WARP for a in axes):
    raise OptError(f"{new_type.name} after TC: a WMMA is not widened")
  if old_type is AxisType.LOOP and new_type in (AxisType.LOCAL, AxisType.UPCAST) and axes[n] not in parallel_axes(sink):
    raise OptError(f"axis {n} (L) is not proven parallel: its iterations may depend on each other")
  if k < 1 or size % k != 0: raise OptError(f"{k} does not divide the size {size} of axis {n}")
  (outer_n, outer_t), (inner_n, inner_t) = ((k, new_type), (size // k, old_type)) if top else ((size // k, old_type), (k, new_type))
  tmp = max(a.arg[0] for a in axes) + 1
  outer, inner = _range(outer_n, tmp, outer_t), _range(inner_n, tmp + 1, inner_t)
  parts = tuple(p for p in (outer, inner) if axis_size(p) != 1)
  zero = UOp.const(dtypes.index, 0)
  value = UOp(Ops.ADD, dtypes.index, (UOp(Ops.MUL, dtypes.index, (outer if outer in parts else zero, UOp.const(dtypes.index, inner_n))),
                                      inner if inner in parts else zero))
  split = replace_ranges(sink, {axes[n]: (simplify(value), parts)}, trace)
  out = renumber(split, axes[:n] + list(parts) + axes[n + 1:], trace)
  if new_type in WORKGROUP_AXES and caps.gpu:
    dims = workgroup_dims(out)
    if len(dims) > 3: raise OptError("a workgroup has at most 3 dimensions")
    if math.prod(axis_size(d[0]) for d in dims) > caps.max_local: raise OptError(f"more than {caps.max_local} threads in a workgroup")
  return out


def _check_group_reduce(sink: UOp, axes: list[UOp], r: UOp) -> None:
  """A REDUCE axis splits into GROUP_REDUCE threads only when all it does is accumulate into REG
  buffers, acc = op(acc, v) with an associative op: then each thread's partial accumulator can be
  combined with the others' after the loop (Expand lowers that through LOCAL memory)."""
  if any(is_axis(a) and axis_type(a) is AxisType.GROUP_REDUCE for a in nested_with(sink).get(r, ())):
    raise OptError(f"axis {r.arg[0]} is nested with a GROUP_REDUCE axis")
  scope = scopes(sink)
  for u in sink.toposort():
    if r not in scope[u]: continue
    if u.op is Ops.BARRIER: raise OptError(f"axis {r.arg[0]} holds a BARRIER")
    if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and root_buffer(u.src[0]).dtype.addrspace is AddrSpace.LOCAL:
      raise OptError(f"axis {r.arg[0]} uses LOCAL memory")
    if u.op is Ops.STORE and accumulator_update(u) is None:
      raise OptError(f"axis {r.arg[0]} stores something other than an accumulator update acc = op(acc, v) with op ADD, MUL or MAX")


def accumulator_update(st: UOp) -> Ops | None:
  """The op of a STORE acc[i] = op(acc[i], v) to a REG buffer (None when st is not one)."""
  idx, val = st.src[0], st.src[1]
  if idx.op is not Ops.INDEX or val.op not in GROUP_OPS: return None
  acc = root_buffer(idx)
  if not isinstance(acc.dtype, PtrDType) or acc.dtype.addrspace is not AddrSpace.REG: return None
  own = any(s.op is Ops.LOAD and s.src[0].op is Ops.INDEX and root_buffer(s.src[0]) is acc and s.src[0].src[1] is idx.src[1] for s in val.src)
  return val.op if own else None


def _padto(sink: UOp, r: UOp, size: int, arg: Any, trace: Trace | None) -> UOp:
  m, tile = arg if isinstance(arg, tuple) and len(arg) == 2 else (arg, None)
  if not isinstance(m, int) or m < 1: raise OptError(f"pads to a multiple of {m}")
  padded = -(-size // m) * m
  if padded == size: return sink
  wide = _range(padded, r.arg[0], axis_type(r))
  if tile is not None:
    from uopc.stages.overlap_tiles import overlapped  # it builds on this module's helpers
    return replace_ranges(sink, {r: (overlapped(sink, r, size, tile, wide), (wide,))}, trace)
  out = replace_ranges(sink, {r: (wide, (wide,))}, trace)
  valid = UOp(Ops.CMPLT, dtypes.bool, (wide, UOp.const(dtypes.index, size)))
  return _gate_inside(out, wide, valid, trace)


def _gate_inside(sink: UOp, r: UOp, valid: UOp, trace: Trace | None) -> UOp:
  """Every STORE inside r also gated by `valid`, and every LOAD of a global buffer (it reads 0 then,
  and never out of bounds). Loads of REG/LOCAL buffers stay as they are: their addresses do not grow
  with r, and what they read in a masked iteration is never stored. An integer division inside r
  divides by 1 where `valid` is false (a masked load's 0 would be a division by zero)."""
  scope = scopes(sink)
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo[s] for s in u.src)
    if u.op in (Ops.LOAD, Ops.STORE) and r in scope[u] and src and src[0].op is Ops.INDEX and \
       (u.op is Ops.STORE or _is_global(root_buffer(src[0]))):
      if u.op is Ops.STORE: src = src[:2] + ((src[2].alu(Ops.AND, valid),) if len(src) == 3 else (valid,))
      elif len(src) == 3: src = (src[0], src[1], src[2].alu(Ops.AND, valid))
      else: src = (src[0], UOp.const(u.dtype, False if u.dtype.is_bool() else 0.0 if u.dtype.is_float() else 0), valid)
    memo[u] = u if src == u.src else u.replace(src=src)
    if u.op in INT_DIVISIONS and r in scope[u]: memo[u] = divide_where(memo[u], valid)  # not by a masked load's 0
    note(trace, u, memo[u])
  return memo[sink]


def apply_opts(sink: UOp, opts: tuple[Opt, ...], caps: TargetCaps, kernel: str, trace: Trace | None = None) -> UOp:
  """Apply `opts` left to right; an illegal one is a CompileError naming the kernel and the opt."""
  nolocals = False
  for i, opt in enumerate(opts):
    try:
      if i and opts[i - 1].op is OptOp.STAGE: raise OptError("STAGE must be the last opt")
      sink = apply_opt(sink, opt, caps, first=i == 0, nolocals=nolocals, trace=trace)
    except OptError as e:
      raise CompileError([error(None, f"kernel {kernel}: cannot apply {opt}: {e}")]) from e
    nolocals = nolocals or opt.op is OptOp.NOLOCALS
  if any(o.op is OptOp.PADTO and isinstance(o.arg, tuple) for o in opts):
    from uopc.stages.overlap_tiles import simplified_addresses
    sink = simplified_addresses(sink, trace)
  return sink


# ---- the stage ---------------------------------------------------------------------------------------------


def optimize(sink: UOp, kernel: str, caps: TargetCaps, pinned: tuple[Opt, ...] | None = None,
             relocate: Callable[[UOp, UOp], None] = lambda old, new: None) -> KernelSchedule:
  """Type the kernel's axes, then apply `pinned` (from --opts) or the heuristics' opts. `relocate(old,
  new)` hands each replaced node's source location to its replacement."""
  if not all(is_axis(r) for r in kernel_axes(sink)): return KernelSchedule(sink, (), caps)  # an untyped legacy RANGE: as written
  trace: Trace = []
  from uopc.stages.merge_axes import merge_reduce_axes  # it builds on this module's axis helpers
  typed = type_axes(merge_reduce_axes(accumulator_first(sink), beside=caps.gpu), caps, trace)
  opts = pinned if pinned is not None else heuristic_opts(typed, caps)
  sink = accumulator_first(apply_opts(typed, opts, caps, kernel, trace))  # the opts' index folding may bury it again
  tc = next((o for o in opts if o.op is OptOp.TC), None)
  stages = tc.arg[1] if tc is not None and len(tc.arg) > 1 else TC_AUTO_STAGES
  if caps.gpu and stages and not any(o.op is OptOp.NOLOCALS for o in opts):
    from uopc.stages.tc_staging import stage_operands  # it builds on this module's types
    staged = stage_operands(sink, trace, None if stages == TC_AUTO_STAGES else stages, caps.local_bytes, caps.warpgroup_mma)
    if staged is sink and stages != TC_AUTO_STAGES:
      raise CompileError([error(None, f"kernel {kernel}: cannot apply {tc}: its operand tiles cannot be staged in {stages} stages "
                                      f"(they must fit {caps.local_bytes // 1024} KiB of LOCAL memory, the least of the build's archs, "
                                      f"and the reduction must have {stages - 1} iterations or more)")])
    sink = staged
  out = KernelSchedule(sink, opts, caps)
  for old, new in trace: relocate(old, new)
  return out


# ---- heuristics (uopc.stages.planner) ------------------------------------------------------------------
def heuristic_opts(sink: UOp, caps: TargetCaps) -> tuple[Opt, ...]:
  """The opts the hand-written heuristics pick for a typed kernel (only legal ones; `uopc.stages.planner`)."""
  from uopc.stages.planner import plan_opts  # it builds on this module
  return plan_opts(sink, caps)
