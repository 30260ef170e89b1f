"""GPU schedules of row reductions: a workgroup per row, its threads sharing the row's reductions.

A kernel reaches here from Optimize's GPU heuristics when it has a long REDUCE axis (GROUP_MIN or
more) that no output axis reads contiguously (a row sum, softmax's max and sum, layernorm's mean and
variance: one thread per row would walk its row alone, with strided loads). The row's reduce axis and
its siblings (reduce loops beside it, not nested with it) are split into the same T GROUP_REDUCE
threads, each reading runs of V consecutive elements (V = 4: one 16-byte load of f32), and the
row's sibling output loops (softmax's division, layernorm's scaling) into T LOCAL threads of V lanes
each: thread t reads and writes the same elements in every loop, so the later loops read the row
again from its own L1 lines.

T is chosen from the row's sizes, not from powers of two: the largest divisor of every shared size
over V that a workgroup holds (GROUP_MAX threads), a warp (GROUP_MIN_THREADS) or more. A row of 768
gets 192 threads of one 16-byte load each, a row of 1000 250 of them. Every thread then does the
same work and no sibling loop is left undivided. Few rows (64 rows of a GPT-2 layernorm) thus get
the most threads per row their length allows, one load per thread, so each row's loads are all in
flight at once; many long rows (4096 x 4096) get GROUP_MAX threads of several loads each, the
schedule measured at 77-81% of the H100's copy bandwidth. Where no such divisor exists (a prime
length) the axes are padded (PADTO) to a multiple of a power-of-two group instead: masked iterations
neither load nor update nor store.

Invariants:
- every opt goes through `_Planner.apply`, which refuses what Optimize's `apply_opt` refuses, so a
  schedule made here is legal and `--opts` can pin it;
- the sizes of a workgroup dimension agree: every shared reduce axis gets exactly T GROUP_REDUCE
  threads and every sibling output loop exactly T LOCAL threads (Expand gives them one thread index);
- the partials are combined in a fixed order that depends on T alone (`uopc.stages.expand._combine`),
  never on the machine.
"""
from __future__ import annotations

import math

from uopc.ops import AxisType, Ops
from uopc.stages.optimize import Opt, OptOp, _is_global, _memory_ops, affine, kernel_axes, nested_with, root_buffer
from uopc.stages.planner import _Planner
from uopc.symbolic import linear_form, simplify

GROUP_MIN = 256                   # reduce sizes from which a workgroup shares one reduction
GROUP_SHORT = 64                  # ... and, in a kernel no register tile schedules (a fused softmax or layernorm over
                                  # rows of 128: its output loop beside the reductions), from which a warp does (2 elements
                                  # a thread or more), where one thread per row ran the row alone, one per workgroup
GROUP_MAX = 256                   # threads a row's workgroup takes at most (and the target's workgroup size)
GROUP_MIN_THREADS = 32            # fewer threads per row than a warp: pad the row instead
GROUP_UNROLL = 4                  # consecutive elements a thread reads at once (one 16-byte load of f32) where they divide
GROUP_PAD_SIZES = (256, 128, 64, 32)  # a padded row's threads: the first that leaves each thread 2 or more elements


def row_reduction(plan: _Planner, least: int = GROUP_MIN) -> bool:
  """Schedule a row reduction (module docstring) over a reduce axis of `least` elements or more; False (nothing
  applied) when the kernel has none."""
  axes = kernel_axes(plan.sink)
  long = [i for i in plan.axes(AxisType.REDUCE) if _row_axis(plan, i, least)]
  if not long: return False
  forms = _load_forms(plan)
  best = max(long, key=lambda i: (any(_unit(f[axes[i]]) for f in forms if axes[i] in f), plan.size(i)))
  near = nested_with(plan.sink)
  # every reduction beside the row's is shared too, row axis or not: the workgroup's threads would each run it whole
  # (logcumsumexp's window max, read along the output's positions, beside its sum: 64 threads ran its 256 steps each)
  beside = [i for i in plan.axes(AxisType.REDUCE) if isinstance(s := plan.size(i), int) and s >= least]
  shared = [i for i in beside if i == best or axes[i] not in near.get(axes[best], frozenset())]
  loops = [i for i in plan.axes(AxisType.LOOP) if axes[i] not in near.get(axes[best], frozenset()) and isinstance(plan.size(i), int)]
  cap = min(GROUP_MAX, plan.caps.max_local)
  v, t = row_threads([plan.size(i) for i in shared + loops], cap)
  if t == 0:
    v, t = _pad(plan, shared + loops, cap)
    if t == 0: return False
  done = False
  for i in sorted(shared + loops, reverse=True):  # from the last axis: a split renumbers only the axes after it
    kind = AxisType.GROUP_REDUCE if i in shared else AxisType.LOCAL
    if v > 1: plan.split_by_first(i, (v,), AxisType.UNROLL if i in shared else AxisType.UPCAST)
    done = bool(plan.split_by_first(i, (t,), kind)) or done
  return done


def row_threads(sizes: list[int], cap: int) -> tuple[int, int]:
  """(V, T): runs of V consecutive elements (GROUP_UNROLL where every size allows, else 1) and T threads,
  the largest divisor of every size / V up to `cap` that is GROUP_MIN_THREADS or more and leaves each
  thread 2 elements or more; (1, 0) when there is none."""
  for v in (GROUP_UNROLL, 1):
    if any(s % v for s in sizes): continue
    g = math.gcd(*(s // v for s in sizes))
    limit = min(cap, g if v > 1 else g // 2)
    t = next((d for d in range(limit, GROUP_MIN_THREADS - 1, -1) if g % d == 0), 0)
    if t: return v, t
  return 1, 0


def _pad(plan: _Planner, axes: list[int], cap: int) -> tuple[int, int]:
  """No divisor fits (a prime row length): pad every axis to a multiple of the first of
  GROUP_PAD_SIZES that leaves each thread 2 elements or more (runs of GROUP_UNROLL where that pads no
  further); (V, T) as `row_threads`, T = 0 when the axes are too short."""
  t = next((k for k in GROUP_PAD_SIZES if k <= cap and all(plan.size(i) // k >= 2 for i in axes)), 0)
  if not t: return 1, 0
  def up(n: int, m: int) -> int: return -(-n // m) * m
  v = GROUP_UNROLL if all(up(plan.size(i), GROUP_UNROLL * t) == up(plan.size(i), t) for i in axes) else 1
  for i in sorted(axes): plan.apply(Opt(OptOp.PADTO, i, v * t))
  return v, t


def _row_axis(plan: _Planner, i: int, least: int) -> bool:
  """REDUCE axis i is long (`least` or more, a known size) and no output axis is read contiguously
  (coefficient 1) by a load it moves: an affine one, or a gather whose address moves with it through the
  index it reads along a warp's worth of outputs or more (an embedding's gradient, table[idx[n]] * 64 + d: one
  thread per output then reads the row of d coalesced, where a workgroup per output shared 512 n among 128
  threads, 7x tinygrad's time; T5's bias table[bucket(q, k)] * 8 + h, 8 heads, is no such row: one thread per
  (h, q) walked the row of 128 k alone, 1024 threads in all, 11x tinygrad's time)."""
  axes, size = kernel_axes(plan.sink), plan.size(i)
  if not isinstance(size, int) or size < least: return False  # before the loads' forms: a kernel may have hundreds of short ones
  outputs = {axes[j] for j in plan.axes(AxisType.GLOBAL)}
  # the loads of the whole nest of reductions count: a reduction over two axes of a product of three operands (an einsum
  # "ij,jk,kl->il") whose inner axis reads w[k, l] along the output's rows is a gemm (register tiles), not a row
  near = nested_with(plan.sink).get(axes[i], frozenset())
  nest = {axes[i]} | {axes[r] for r in plan.axes(AxisType.REDUCE) if axes[r] in near}
  reads = [f for f in _load_forms(plan) if nest & f.keys()]
  if any(_near(c) for f in reads for r, c in f.items() if r in outputs) or _crossed(reads, outputs): return False
  gathers = [linear_form(simplify(a)) for a in _gather_addresses(plan) if axes[i] in a.toposort()]
  def coalesces(r) -> bool: return not isinstance(n := r.src[0].arg, int) or n >= GROUP_MIN_THREADS
  return not any((f.get(r) == 1 or _halved(f, r)) and coalesces(r) for f in gathers for r in outputs)


def _halved(form: dict, r) -> bool:
  """A gather's address moves with r through a quotient (y // d, d <= ROW_NEAR_STRIDE, y moving by 1 with r, or its
  max with 0): a transposed convolution's zero-stuffed input, x[(t + k - 2) // 2], which a warp along the output's
  t reads in one line, as a convolution with stride 2 reads x[2t + k] (H200, 1-D transposed convolution 256 -> 128
  channels over 1000 samples: 1.72 ms as rows of 256 shared by a workgroup per output, tinygrad's kernel 0.094)."""
  for atom, k in form.items():
    if k != 1 or atom is None or atom.op is not Ops.IDIV or atom.src[1].op is not Ops.CONST or not 1 < atom.src[1].arg <= ROW_NEAR_STRIDE: continue
    y = atom.src[0]
    if y.op is Ops.MAX and y.src[1].op is Ops.CONST: y = y.src[0]
    if linear_form(y).get(r) == 1: return True
  return False


ROW_CROSSED_MIN = 16  # output axes at least this long that a product's operands cross make it a gemm, not rows


def _crossed(reads: list[dict], outputs: set) -> bool:
  """Two output axes of ROW_CROSSED_MIN or more, each moving a load of the reduction that the other does not
  move: the operands of a product (x[m, k] and w[n, k], both read along k) each serve a register tile along the
  axis they do not depend on. tinygrad's nn.Linear computes x @ weight.T this way (H100, 64 x 512 @ (1024 x
  512).T: 0.050 ms as rows of 512 shared by a workgroup per output)."""
  big = [r for r in outputs if isinstance(r.src[0].arg, int) and r.src[0].arg >= ROW_CROSSED_MIN]
  def moves(a, b) -> bool: return any(a in f and b not in f for f in reads)
  return any(moves(a, b) and moves(b, a) for a in big for b in big if a is not b)


def _gather_addresses(plan: _Planner) -> list:
  """The addresses of the global LOADs that are not affine in the loop indices (gathers)."""
  return [u.src[0].src[1] for u in _memory_ops(plan.sink) if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0]))
          and affine(u.src[0].src[1]) is None]


def _load_forms(plan: _Planner) -> list[dict]:
  """The affine coefficients of each global LOAD's address (those that have them)."""
  return [f[0] for u in _memory_ops(plan.sink) if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0]))
          and (f := affine(u.src[0].src[1])) is not None]


def _unit(c) -> bool: return c.op is Ops.CONST and c.arg == 1


ROW_NEAR_STRIDE = 2  # an output axis that moves a load by this many elements or fewer reads it near contiguously


def _near(c) -> bool:
  """A coefficient of 1 or 2: a warp along that output axis reads one line (or two) per load, and operands reused
  across the other output axes pay for register tiles: a strided convolution is a gemm, not a row reduction
  (H100, a 1-D convolution 256 -> 256 channels, stride 2, over 4000 samples: 2.01 ms as rows of 768 shared by a
  workgroup, tinygrad's kernel 0.43)."""
  return c.op is Ops.CONST and isinstance(c.arg, int) and 1 <= c.arg <= ROW_NEAR_STRIDE
