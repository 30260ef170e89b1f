"""GPU schedules of reductions over output axes (gemm, convolution, attention's products): register
tiles, reduction unrolls, multi-axis workgroups and, for kernels too small to fill the GPU, workgroups
that share each output's reduction.

A kernel reaches here from Optimize's GPU heuristics when it has REDUCE axes nested in its GLOBAL
output axes and neither the tensor cores nor a row reduction's shared workgroup took it. Each thread
then computes a register tile of outputs: `u_inner` consecutive outputs along the contiguous output
axis (one 16-byte store, and 16-byte loads of every input read along it) times `u_other` along a
second output axis that some input does not depend on (a gemm's rows, a convolution's output
channels): each value loaded once serves every tile element that does not move it, so a 4 x 4 tile
does 16 multiply-adds per 8 loads where one output per thread does one per 2. The reduction is unrolled
(short axes whole, a convolution's window; the longest by 4), giving independent loads to overlap and,
where an input is contiguous along the reduction, 16-byte loads of it. Workgroups span up to three
output axes (the contiguous one first, so that a warp's loads and stores are coalesced), any divisor
of an axis, not just powers of two (a 28-wide image row is 7 threads of 4). A small kernel whose
reduction some input reads contiguously (a gemm's row-major activations) and whose tile is small
shares the reduction among up to 32 threads as the split's inner part: in each iteration the group's
threads read consecutive elements (coalesced), where the blocked split has each read its own run.

Invariants:
- every opt goes through `_Planner.apply`, which refuses what Optimize's `apply_opt` refuses, so a
  schedule made here is always legal, and `--opts` can pin any of it;
- the tile never leaves fewer than GPU_MIN_THREADS threads where a smaller tile would keep that many
  (a small kernel keeps the GPU's multiprocessors busy before it saves loads); where even one output
  per thread leaves fewer and the reduction is long, GROUP_REDUCE threads share each output's
  reduction (split-k inside a workgroup: partials combined through LOCAL memory by Expand), which
  changes the order of a float sum in a fixed way that depends on the schedule, not on the machine;
- only sizes known at compile time are split; everything else keeps Optimize's defaults.
"""
from __future__ import annotations

import itertools
import math

from uopc.ops import AxisType, Ops
from uopc.dtype import dtypes
from uopc.rewrite import substitute
from uopc.symbolic import linear_form, simplify
from uopc.uop import UOp
from uopc.stages.optimize import _is_global, _memory_ops, accumulator_update, kernel_axes, nested_with, root_buffer, scopes
from uopc.stages.gpu_transpose import read_axis
from uopc.stages.planner import _contiguous_output, _in_gated_load, _Planner, _reads_contiguously, _selects

GPU_MIN_THREADS = 1 << 14    # threads that keep a large GPU's multiprocessors busy (an H100: 132 of them, 4 warps each)
GPU_TILE_THREADS = 1 << 11   # threads a register tile may leave where the reduction is then shared (GPU_GROUPS) ...
GPU_SMALL_TILE_THREADS = 1 << 10  # ... and a tile of at most GPU_COALESCED_ACCS elements (H100, a 4 x 8 tile instead of
                             # 4 x 4: GPT-2's MLP 0.112-0.115 -> 0.098-0.101 ms, its block 0.239-0.241 -> 0.222-0.224,
                             # conv3x3 0.019-0.020 -> 0.017; the 8 x 8 tiles this floor would also allow were 1.35-1.46x slower)
GPU_TILES = ((8, 16), (8, 8), (4, 8), (4, 4), (4, 2), (4, 1), (2, 1))  # (u_inner, u_other), largest first; 8 x 16 only
GPU_TILE_ACCS = 128          # where it leaves GPU_MIN_THREADS (a batched convolution: 0.66 -> 0.60 ms on an H100);
                             # accumulators a thread keeps at most (tile elements times the kernel's sibling reductions)
GPU_STRIDED_TILES = ((2, 4),)  # also tried where inputs are read strided along the contiguous output axis (`_strided_reads`),
                             # whose reduction is then shared: a ViT patch embedding's 14 patches a row, 2 x 4 channels
                             # (H200: 0.052 -> 0.035 ms; a 3x3 convolution 1x256x14x14 took 0.065 -> 0.121 with 2 x 8 unshared)
GPU_PARTIAL_BYTES = 16384    # LOCAL memory a workgroup's shared reductions may use for their partials
GPU_WORKGROUP_ELEMENTWISE = 256  # threads of an elementwise kernel's workgroup at most
GPU_WORKGROUP = 128          # threads of a tiled kernel's workgroup ...
GPU_MIN_WORKGROUPS = 256     # ... fewer where it would leave fewer workgroups than this (down to a warp)
GPU_INNER_THREADS = 16       # threads along the contiguous axis at most: 16 x 4 floats = 256 contiguous bytes ...
GPU_GATHER_LANES = 8         # ... times this where a gather drops the tile (its lanes become threads; cumsum 64 x 1000
                             # on the H100: 0.094 ms with 4, 0.073 ms with 8)
GPU_BLOCK_LANES = 4         # lanes of the contiguous axis that a gather reading it only through their block (`_block_reads`) shares
GPU_GATHER_UNROLL = 16       # such a kernel's reduction unrolled by this (independent gated loads in flight), and
GPU_GATHER_SHARED = 2        # this many outputs a thread along an axis no gate depends on (their gates computed once):
                             # cumsum's window sums on the H100 26 -> 22 us
GPU_SHORT_REDUCE = 4         # reduce axes up to this size are unrolled whole (a convolution's 3 x 3 window)
GPU_UNROLL = 4               # the longest reduce axis is unrolled by this much, or by 2, or by one of these where
GPU_ODD_UNROLLS = (3, 5, 7)  # neither divides it (a 7 x 7 window's 49 keys: 7 gathered loads in flight; H200 30 -> 8.5 us)
GPU_UNROLL_MAX = 36          # copies of the body the unrolls make at most
GPU_UNROLL_LOADS = 128       # values loaded by the unrolled copies at most (their registers)
GPU_GROUP_MIN = 64           # reduce iterations per thread from which sharing a reduction pays
GPU_GROUPS = (2, 4, 8, 16)   # GROUP_REDUCE threads per output: the fewest that reach GPU_MIN_THREADS ...
GPU_WIDE_GROUPS = (32, 64)   # ... or these too where 16 leave it less than half filled (H200: column statistics of 4096 x 256,
                             # 0.026 -> 0.019 ms with 64; a matrix-vector product 1 x 3072 x 768 kept 16: 0.018-0.019 ms, 0.023-0.026 with 32)
GPU_RUN = 4                  # ... each keeping one 16-byte run or more where there is no tile and the reduction reads contiguously
GPU_COALESCED_GROUPS = (32, 16, 8, 4, 2)  # GROUP_REDUCE threads on a reduction every input reads contiguously: the most ...
GPU_COALESCED_MIN = 16       # ... that leave each thread this many iterations (then unrolled), in kernels whose threads keep at most
GPU_COALESCED_ACCS = 32      # this many accumulators (8 x 8 tiles of 64 were 1.2-1.6x slower so on the H100: their partials)
GPU_COALESCED_THREADS = 1 << 16  # ... and leave fewer threads than this unshared (4 x GPU_MIN_THREADS: a short reduction's threads
                             # wait on their loads; H200, GQA attention's probabilities times values, 16384 threads of 64 steps)


def tiled_reduction(plan: _Planner) -> bool:
  """Schedule a reduction over output axes (module docstring); False (nothing applied) when the kernel
  has no REDUCE axis, no output axis of a known size, or a LOOP axis beside a reduction (a fused
  softmax's output loop beside its row reductions: every thread of a workgroup would run it; an outer
  LOOP around them all, a batch axis beyond the grid's three, is each thread's loop)."""
  outputs = [i for i in plan.axes(AxisType.GLOBAL) if isinstance(plan.size(i), int)]
  axes, near = kernel_axes(plan.sink), nested_with(plan.sink)
  reduces = {axes[i] for i in plan.axes(AxisType.REDUCE)}
  if not reduces or not outputs or any(not reduces <= near.get(axes[i], frozenset()) for i in plan.axes(AxisType.LOOP)): return False
  inner = _contiguous_output(plan)
  strided = _strided_reads(plan, inner)
  other = _reuse_axis(plan, [i for i in outputs if i != inner], inner)
  accs = max(1, _accumulators(plan))
  gathers = _gathers(plan, inner, other)
  first = inner if gathers else _first_tile_axis(plan, inner, other, outputs)
  tile = (1, 1) if gathers else _tile(plan, first, other, _shareable(plan), accs, GPU_STRIDED_TILES if strided else ())
  # a warp's threads go first along the axis that inputs read across the output's rows read contiguously (a cumsum
  # down a tensor's columns: its windows run down x's rows, its 64 columns lie side by side)
  across = read_axis(plan, inner) if inner is not None else None
  tiled = [a for a in (across, inner, other, first) if a is not None]
  tiled = [a for i, a in enumerate(tiled) if a not in tiled[:i]]
  for axis, k in sorted(zip((first, other), tile), key=lambda t: -1 if t[0] is None else t[0], reverse=True):
    if axis is not None and k > 1: tiled = _split(plan, axis, k, AxisType.UPCAST, tiled)[1]
  if gathers: tiled = _gate_free_lanes(plan, tiled)
  threads = _threads(plan)
  small_tile = tile != (1, 1) and tile[0] * tile[1] * accs <= GPU_COALESCED_ACCS  # untiled: short rows keep their runs
  coalesced = _coalesced_reduction(plan) if (threads < GPU_COALESCED_THREADS or strided) and small_tile else None
  if coalesced is not None: groups, tiled = _share_coalesced(plan, coalesced, tiled)
  elif threads < GPU_MIN_THREADS: groups, tiled = _share_reduction(plan, threads, tiled, tile == (1, 1))
  else: groups = 1
  budget = GPU_WORKGROUP // groups
  if groups > 1:  # each thread's partials, one per accumulator, go through LOCAL memory
    budget = min(budget, max(1, GPU_PARTIAL_BYTES // (4 * accs * tile[0] * tile[1] * groups)))
  while budget > 32 and threads // budget < GPU_MIN_WORKGROUPS: budget //= 2
  _workgroup(plan, tiled, budget, GPU_INNER_THREADS * (GPU_GATHER_LANES if gathers else 1))
  _unroll(plan, factor=GPU_GATHER_UNROLL if gathers else GPU_UNROLL)
  return True


def _split(plan: _Planner, axis: int, k: int, t: AxisType, tracked: list[int], top: bool = False) -> tuple[bool, list[int]]:
  """Split `axis` (see `_Planner.split_by_first`): whether it applied, and the `tracked` axis indices as
  they are after it (a split into two parts moves every later axis up by one)."""
  n = len(kernel_axes(plan.sink))
  if not plan.split_by_first(axis, (k,), t, top): return False, tracked
  grew = len(kernel_axes(plan.sink)) - n
  return True, [a + grew if a > axis else a for a in tracked]


def _reuse_axis(plan: _Planner, candidates: list[int], inner: int | None = None) -> int | None:
  """The register tile's second axis: an output axis that some global input does not depend on (its
  loaded values serve the whole tile along it); preferably one that moves fewest of the loads the contiguous
  axis `inner` moves too (each of those is loaded once per tile element: a convolution's output rows move its
  input with its columns, its output channels only the weights, which the columns do not move: 8 x 8 rows by
  columns loaded 64 inputs a window tap, 8 x 8 channels by columns 16 values; H200, 1x32x64x64 -> 32 from a
  padded input: 0.090 -> 0.018 ms), then one that no gated load depends on (a padded convolution's border checks
  would be made lane by lane); the largest such. An axis of odd size (3 colour channels) only where no other is
  reused: it divides no tile."""
  axes = kernel_axes(plan.sink)
  loads = [u for u in _memory_ops(plan.sink) if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0]))]
  def reused(i: int) -> bool: return any(axes[i] not in u.src[0].toposort() for u in loads)
  def per_element(i: int) -> int:
    return 0 if inner is None else sum(axes[i] in (t := u.src[0].toposort()) and axes[inner] in t for u in loads)
  fits = [i for i in candidates if reused(i)]
  return max(fits, key=lambda i: (plan.size(i) % 2 == 0, -per_element(i), not _in_gated_load(plan, i), plan.size(i), i), default=None)


def _first_tile_axis(plan: _Planner, inner: int | None, other: int | None, outputs: list[int]) -> int | None:
  """The tile's first axis: the contiguous output axis, or where no tile of 4 or more divides it (a 7- or 14-wide
  image) another output axis that some input does not move and a tile of 8 divides, ungated preferred (a batched
  convolution's images: its weights serve them all); the contiguous axis then gets threads only. H200, 3x3
  convolutions (cuDNN with TF32 off in brackets): 8x512x7x7->512 0.431 -> 0.343 ms (0.14) with 8 images by 8
  channels a thread instead of one output, 8x256x14x14->256 0.283 -> 0.211 (0.12) instead of two columns; a
  batch of 4 took 0.211 -> 0.283 with 4 images by 8 channels, and keeps one output a thread."""
  if inner is None or any(plan.size(inner) % ui == 0 for ui, _ in GPU_TILES if ui >= 4): return inner
  candidates = [i for i in outputs if i not in (inner, other) and plan.size(i) % 8 == 0]
  sub = _reuse_axis(plan, candidates)
  return inner if sub is None else sub


def _shareable(plan: _Planner) -> bool:
  """The reduction is long enough to be shared by GROUP_REDUCE threads (see _share_reduction)."""
  return _reduce_iterations(plan) >= 2 * GPU_GROUP_MIN


def _reduce_iterations(plan: _Planner) -> int:
  return math.prod(s for i in plan.axes(AxisType.REDUCE, AxisType.UNROLL) if isinstance(s := plan.size(i), int))


def _accumulators(plan: _Planner) -> int:
  """The REG accumulators the kernel's reductions update (a fused SwiGLU's two products: 2)."""
  return len({root_buffer(u.src[0]) for u in _memory_ops(plan.sink) if u.op is Ops.STORE and accumulator_update(u) is not None})


def _tile(plan: _Planner, inner: int | None, other: int | None, shareable: bool, accs: int,
          extra: tuple[tuple[int, int], ...] = ()) -> tuple[int, int]:
  """(u_inner, u_other): the largest tile of GPU_TILES that divides the axes, keeps GPU_TILE_ACCS
  accumulators or fewer (`accs` per tile element) and leaves GPU_MIN_THREADS threads (GPU_TILE_THREADS
  where the reduction can be shared to make up the rest, GPU_MIN_THREADS over the sharing a short reduction
  allows where that is more, GPU_SMALL_TILE_THREADS for a tile along both
  axes of at most GPU_COALESCED_ACCS accumulators: 4 x 8 loads 12 values for 32 products where 4 x 4 loads
  8 for 16; a tile along one axis loads one value a product however long), else (1, 1)."""
  total = math.prod(plan.size(i) for i in plan.axes(AxisType.GLOBAL) if isinstance(plan.size(i), int))
  # sharing makes up at most as many threads as the reduction has runs of GPU_GROUP_MIN: a tile must leave half of
  # GPU_MIN_THREADS after that (LeNet's second convolution, 150 a output, 2 runs, took a 4 x 8 tile for 2048 threads,
  # shared by 2: 4096 threads, 57 us on an H200; a 3x3 convolution's 576 keep their 4 x 8 tile)
  least = GPU_MIN_THREADS // (2 * max(1, _reduce_iterations(plan) // GPU_GROUP_MIN))
  floor = max(GPU_TILE_THREADS, least) if shareable else GPU_MIN_THREADS
  def divides(axis: int | None, k: int) -> bool: return k == 1 or (axis is not None and plan.size(axis) % k == 0)
  def shape(ui: int, uo: int) -> tuple[int, int]: return (ui if inner is not None else 1, uo if other is not None else 1)
  tiles = sorted(GPU_TILES + extra, key=lambda t: -t[0] * t[1])  # stable: GPU_TILES' order among equal sizes
  shapes = [s for s in dict.fromkeys(shape(*t) for t in tiles)
            if divides(inner, s[0]) and divides(other, s[1]) and s[0] * s[1] * accs <= GPU_TILE_ACCS]
  def enough(s: tuple[int, int]) -> bool:  # a tile past 64 elements only where it keeps GPU_MIN_THREADS unshared
    small = shareable and min(s) > 1 and s[0] * s[1] * accs <= GPU_COALESCED_ACCS  # a 2-D tile: growing it raises reuse
    return total // (s[0] * s[1]) >= (GPU_MIN_THREADS if s[0] * s[1] > 64 else max(GPU_SMALL_TILE_THREADS, least) if small else floor)
  return next((s for s in shapes if enough(s)), (1, 1))


def _gathers(plan: _Planner, inner: int | None, other: int | None) -> bool:
  """No register tile pays: no axis is reused and a gated load moves with the contiguous one
  (tinygrad's cumsum, a window sum over a padded row): each lane would load its own element behind its
  own gate, so the lanes would save no load and only cut the threads by 4. Those lanes become threads
  along the contiguous axis instead (GPU_GATHER_LANES x GPU_INNER_THREADS of a workgroup). Not where every
  such load reads the axis in blocks of GPU_BLOCK_LANES (`_block_reads`): a block's lanes share it."""
  return other is None and inner is not None and _in_gated_load(plan, inner) and not _block_reads(plan, inner, GPU_BLOCK_LANES)


def _block_reads(plan: _Planner, i: int, k: int) -> bool:
  """Every gated global LOAD that axis i moves reads it only in aligned blocks of k: with i = o*k + lane, its
  address and gate simplify to expressions free of the lane (a windowed attention's relative-position bias,
  one per head, at channel // 32: lanes of a head share the load and the softmax weight computed from it)."""
  axes, size = kernel_axes(plan.sink), plan.size(i)
  if not isinstance(size, int) or size % k: return False
  r, fresh = axes[i], max(a.arg[0] for a in axes) + 1
  lane = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, k),), (fresh, AxisType.UPCAST))
  block = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // k),), (fresh + 1, AxisType.GLOBAL))
  value = block.alu(Ops.MUL, UOp.const(dtypes.index, k)).alu(Ops.ADD, lane)
  for u in _memory_ops(plan.sink):
    if u.op is not Ops.LOAD or len(u.src) != 3 or not _is_global(root_buffer(u.src[0])) or r not in u.toposort(): continue
    read = simplify(substitute(UOp(Ops.SINK, dtypes.void, (u.src[0].src[1], u.src[2])), {r: value}))
    if lane in read.toposort(): return False
  return True


def _gate_free_lanes(plan: _Planner, tracked: list[int]) -> list[int]:
  """In a gather kernel (`_gathers`), GPU_GATHER_SHARED lanes (UPCAST) on the largest GLOBAL axis that
  moves no gated load's gate (cumsum's rows: the window's bounds depend on the position in the row
  only), so that each gate is computed once for them; `tracked` as it is after the split."""
  axes = kernel_axes(plan.sink)
  gates = [u.src[2] for u in _memory_ops(plan.sink) if u.op is Ops.LOAD and len(u.src) == 3 and _is_global(root_buffer(u.src[0]))]
  free = [i for i in plan.axes(AxisType.GLOBAL) if isinstance(plan.size(i), int) and plan.size(i) % GPU_GATHER_SHARED == 0
          and not any(axes[i] in g.toposort() for g in gates) and i not in tracked]
  if not free: return tracked
  return _split(plan, max(free, key=lambda i: (plan.size(i), i)), GPU_GATHER_SHARED, AxisType.UPCAST, tracked)[1]


def _unroll(plan: _Planner, factor: int = GPU_UNROLL) -> None:
  """Short reduce axes (GPU_SHORT_REDUCE or less, and those that select among stacked values) unrolled
  whole, then the longest other one of each nest of reduce loops (sibling reductions, such as a fused
  SwiGLU's two products, each get theirs) by `factor` (or 2); at most GPU_UNROLL_MAX copies of the
  body of a nest, and at most GPU_UNROLL_LOADS values loaded by them (a thread's register tile loads
  `_loads_per_copy` values a copy: an 8 x 8 convolution tile's whole 3 x 3 window and 4 channels were
  576, ptxas spilled 1.4 KiB a thread and the kernel took 2.06 ms on an H100; with 256 the whole window,
  0.84 ms; with 128 one window axis and 2 channels, 0.66 ms). Decided first, then applied from the last
  axis (a split renumbers only later axes)."""
  axes, near = kernel_axes(plan.sink), nested_with(plan.sink)
  reduces = [i for i in plan.axes(AxisType.REDUCE) if isinstance(plan.size(i), int)]
  # the load count holds where every load is live in every copy; a selecting axis's copies each read one
  # of its stacked loads, so there only GPU_UNROLL_MAX applies
  selecting = any(_selects(plan, i) for i in reduces)
  most = GPU_UNROLL_MAX if selecting else max(1, min(GPU_UNROLL_MAX, GPU_UNROLL_LOADS // max(1, _loads_per_copy(plan))))
  def nest(i: int) -> list[int]: return [j for j in reduces if axes[j] in near.get(axes[i], frozenset())]
  whole: dict[int, int] = {}
  for i in reversed(reduces):
    copies = math.prod(whole.get(j, 1) for j in nest(i))
    if (plan.size(i) <= GPU_SHORT_REDUCE or _selects(plan, i)) and copies * plan.size(i) <= most: whole[i] = plan.size(i)
  splits = dict(whole)
  for i in sorted((i for i in reduces if i not in whole), key=lambda i: -plan.size(i)):
    copies = math.prod(whole.get(j, 1) for j in nest(i))
    if not any(j in splits for j in nest(i) if j not in whole):
      splits[i] = next((k for k in (factor, GPU_UNROLL, 2, *GPU_ODD_UNROLLS) if plan.size(i) % k == 0 and plan.size(i) > k and copies * k <= most), 0)
  for i in sorted(splits, reverse=True):
    if splits[i]: plan.split_by_first(i, (splits[i],), AxisType.UNROLL)


def _loads_per_copy(plan: _Planner) -> int:
  """Values a thread loads from global memory in one copy of the reduction's body: each global LOAD that
  moves with a reduce axis once per lane of the UPCAST axes it depends on."""
  axes = kernel_axes(plan.sink)
  ups = [(axes[i], plan.size(i)) for i in plan.axes(AxisType.UPCAST)]
  reduces = {axes[i] for i in plan.axes(AxisType.REDUCE)}
  loads = [u for u in _memory_ops(plan.sink) if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0]))
           and any(r in reduces for r in u.src[0].toposort())]
  return sum(math.prod(k for r, k in ups if isinstance(k, int) and r in u.toposort()) for u in loads)


def _threads(plan: _Planner) -> int:
  """Threads the kernel runs: the product of its GLOBAL and LOCAL axes."""
  return math.prod(s for i in plan.axes(AxisType.GLOBAL, AxisType.LOCAL) if isinstance(s := plan.size(i), int))


def _share_reduction(plan: _Planner, threads: int, tracked: list[int], untiled: bool = False) -> tuple[int, list[int]]:
  """GROUP_REDUCE threads on the longest REDUCE axis and its siblings (reduce loops beside it, not
  nested with it: the same threads share each), the fewest of GPU_GROUPS that reach GPU_MIN_THREADS
  (else the most; GPU_WIDE_GROUPS too where GPU_GROUPS leave fewer than half and each thread keeps its
  GPU_GROUP_MIN iterations: column statistics, not a short row read contiguously), each thread keeping
  GPU_GROUP_MIN iterations or more (GPU_RUN, one 16-byte run, in an `untiled` kernel whose reduction reads its inputs contiguously: a short row's max or sum, such as
  attention's softmax over 64 keys, has no tile whose work the combine must be small against): how many
  (1: none), and the `tracked` axes after the splits."""
  axes, near = kernel_axes(plan.sink), nested_with(plan.sink)
  long = [i for i in plan.axes(AxisType.REDUCE) if isinstance(plan.size(i), int)]
  if not long: return 1, tracked
  best = max(long, key=lambda i: (plan.size(i), i))
  least = GPU_RUN if untiled and _reads_contiguously(plan, best) else GPU_GROUP_MIN
  wide = threads * GPU_GROUPS[-1] < GPU_MIN_THREADS // 2 and least == GPU_GROUP_MIN  # (a short contiguous row: as it was)
  groups = GPU_GROUPS + (GPU_WIDE_GROUPS if wide else ())
  fits = [g for g in groups if plan.size(best) % g == 0 and _reduce_iterations(plan) // g >= least]
  if max(fits, default=1) < GPU_GROUPS[2]:  # an axis of 28 (an image's rows): 7 or 14 threads rather than 4
    fits = sorted(set(fits) | {g for g in range(GPU_GROUPS[2], 2 * GPU_GROUPS[-1] + 1)
                               if plan.size(best) % g == 0 and _reduce_iterations(plan) // g >= least})
  if not fits: return 1, tracked
  g = next((g for g in fits if threads * g >= GPU_MIN_THREADS), fits[-1])
  shared = [i for i in long if i == best or (axes[i] not in near.get(axes[best], frozenset()) and plan.size(i) % g == 0)]
  applied = False
  for i in sorted(shared, reverse=True):
    done, tracked = _split(plan, i, g, AxisType.GROUP_REDUCE, tracked, top=True)
    applied = applied or done
  return (g if applied else 1), tracked


def _strided_reads(plan: _Planner, inner: int | None) -> bool:
  """Some global input read inside the reduction moves by more than one element with the contiguous output axis
  `inner`, along which a warp's threads go (a transposed operand: attention's keys k[key, d] along the scores'
  keys, a patch embedding's image x[c, 16 oy + ky, 16 ox + kx] along its patches): each thread reads its own
  line there, so the reduction is shared along the axis such inputs are contiguous in even where the outputs
  give threads enough (H200: a ViT patch embedding 0.186 -> 0.035 ms, GQA attention's scores 0.038 -> 0.023)."""
  if inner is None: return False
  axes, scope = kernel_axes(plan.sink), scopes(plan.sink)
  reduces = {axes[i] for i in plan.axes(AxisType.REDUCE)}
  for u in _memory_ops(plan.sink):
    if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and scope[u] & reduces:
      if abs(_stride(u.src[0].src[1], axes[inner])) > 1: return True
  return False


def _stride(address: UOp, r: UOp) -> int:
  """Range r's constant coefficient in an address (0 where r is not a term of its own: absent, or only inside
  another term, such as attention's kv head h // 4)."""
  return next((c for a, c in linear_form(simplify(address)).items() if a is r and isinstance(c, int)), 0)


def _coalesced_reduction(plan: _Planner) -> int | None:
  """The longest REDUCE axis when some global input is read contiguously along it for GPU_COALESCED_MIN
  elements or more (a gemm's row-major activations along K) and it has no sibling (a fused SwiGLU's two products keep the blocked split),
  else None."""
  axes, near = kernel_axes(plan.sink), nested_with(plan.sink)
  long = [i for i in plan.axes(AxisType.REDUCE) if isinstance(plan.size(i), int)]
  if not long: return None
  best = max(long, key=lambda i: (plan.size(i), i))
  if any(axes[i] not in near.get(axes[best], frozenset()) for i in long if i != best): return None
  return best if _contiguous_run(plan, best) >= GPU_COALESCED_MIN else None


def _contiguous_run(plan: _Planner, i: int) -> int:
  """The longest run of consecutive elements some global LOAD reads along axis i: its size where the
  address moves by 1 with it, m where it moves only through `i % m` (coefficient 1) and `i // m'` (m'
  a multiple of m: attention's heads laid out apart), else 0."""
  r, best = kernel_axes(plan.sink)[i], 0
  for u in _memory_ops(plan.sink):
    if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and r in u.src[0].src[1].toposort():
      best = max(best, _run(u.src[0].src[1], r, plan.size(i)))
  return best


def _run(address, r, size: int) -> int:
  terms, todo, runs, blocks = [], [address], [], []
  while todo:
    e = todo.pop()
    if e.op is Ops.ADD: todo += e.src
    else: terms.append(e)
  for t in terms:
    if r not in t.toposort(): continue
    k, x = (t.src[1].arg, t.src[0]) if t.op is Ops.MUL and t.src[1].op is Ops.CONST else (1, t)
    if x is r and k == 1: runs.append(size)
    elif x.op is Ops.MOD and x.src[0] is r and x.src[1].op is Ops.CONST and k == 1: runs.append(x.src[1].arg)
    elif x.op is Ops.IDIV and x.src[0] is r and x.src[1].op is Ops.CONST: blocks.append(x.src[1].arg)
    else: return 0
  if len(runs) != 1 or any(m % runs[0] for m in blocks): return 0
  return runs[0]


def _share_coalesced(plan: _Planner, axis: int, tracked: list[int]) -> tuple[int, list[int]]:
  """GROUP_REDUCE threads on reduce `axis` as the split's inner part, so that the group's threads read
  consecutive elements of every input in each iteration (coalesced, where a blocked split has each
  thread read its own run): the most of GPU_COALESCED_GROUPS that leave each thread GPU_COALESCED_MIN
  iterations (the rest unrolled by `_unroll`) and no fewer than the group has threads (their partials are
  combined g to an output: an embedding's gradient, 512 steps for each of 1000 x 64 outputs, on an H100
  0.039 ms with 32 threads of 16 steps, 0.023 with 16, 0.021 with 8), or where those give fewer than 8 the
  most divisors up to 32 do. On the H100 the tuner found these for the second products
  of GPT-2's MLP (2.0x) and a LLaMA SwiGLU (2.7x) over the blocked split; measured with the unroll: the
  whole MLP 1.55x, the GPT-2 block 1.49x, the SwiGLU 1.47x, the float16 matmul 256 1.6x faster."""
  size, run = plan.size(axis), _contiguous_run(plan, axis)
  def fits(g: int) -> bool: return size % g == 0 and run % g == 0 and _reduce_iterations(plan) // g >= max(GPU_COALESCED_MIN, g)
  g = next((g for g in GPU_COALESCED_GROUPS if fits(g)), 1)
  if g < GPU_COALESCED_GROUPS[2]:  # a row of 28 (an image's): 28 or 14 threads rather than 4 (a convolution's weight
    # gradient 8x64x28x28 -> 64x64x3x3 on an H200: 0.86 ms with 4, 0.13 with 28 or 14)
    g = next((d for d in range(GPU_COALESCED_GROUPS[0], GPU_COALESCED_GROUPS[2] - 1, -1) if fits(d)), g)
  if g == 1: return 1, tracked
  done, tracked = _split(plan, axis, g, AxisType.GROUP_REDUCE, tracked)
  return (g if done else 1), tracked


def _workgroup_threads(plan: _Planner, order: list[int], budget: int, inner: int) -> int:
  """The threads `_workgroup` gives axes `order` (the first three) out of `budget`."""
  left = budget
  for n, axis in enumerate(order[:3]):
    if left < 2 or not isinstance(size := plan.size(axis), int): continue
    left //= max(d for d in range(1, min(size, min(left, inner) if n == 0 else left) + 1) if size % d == 0)
  return budget // left


def _most_threads(plan: _Planner, first: list[int], others: list[int], budget: int, inner: int) -> list[int]:
  """`others` with the axes that give the most threads after `first` in the dimensions left moved to the
  front (inner ones preferred among equals); in their order where that order gives as many."""
  slots = 3 - len(first)
  if slots <= 0 or len(others) <= slots: return others
  best = max(itertools.combinations(others, slots), key=lambda c: _workgroup_threads(plan, first + list(c), budget, inner))
  if _workgroup_threads(plan, first + list(best), budget, inner) <= _workgroup_threads(plan, first + others, budget, inner): return others
  return list(best) + [i for i in others if i not in best]


def _workgroup(plan: _Planner, first: list[int], budget: int, inner: int) -> None:
  """LOCAL threads over up to three output axes, `first` (the tile's axes, contiguous one first) before
  the others, each the largest divisor of the axis within what is left of `budget` (the contiguous axis
  at most `inner`). The others are taken inner axis first, unless axes further out give more threads in
  the dimensions left: a bitonic sort's stage over (8192, 2, 2, 2) took 2 x 2 x 2 threads a workgroup."""
  others = sorted((i for i in plan.axes(AxisType.GLOBAL) if i not in first), reverse=True)
  order = first + _most_threads(plan, first, others, budget, inner)
  for n in range(min(3, len(order))):
    axis, size = order[n], plan.size(order[n])
    if budget < 2 or not isinstance(size, int): continue
    cap = min(budget, inner) if n == 0 else budget
    k = max(d for d in range(1, min(size, cap) + 1) if size % d == 0)
    applied, order = _split(plan, axis, k, AxisType.LOCAL, order) if k > 1 else (False, order)
    if applied: budget //= k
