"""CPU schedules: Optimize's heuristics for the c and llvm targets (`heuristic_opts` calls `cpu_heuristics`).

Sized by the vector registers of the build (`caps.vector_width` f32 lanes, W: 4 for the portable
x86-64 build's SSE, 8 for AVX2, 16 for AVX-512; see `--cpu`), measured on 2 cores (tests/bench_optimize.py):
- elementwise: UPCAST the contiguous output axis by two registers' worth (2W lanes); eight (8W) when
  the kernel computes a transcendental, whose decomposition is a chain of some 30 dependent
  operations per element: the copies, emitted side by side (Linearize), overlap their latencies
  (GELU 128x3072 on one core: 0.193 -> 0.126 ms with AVX-512, 0.356 -> 0.241 AVX2, 0.69 -> 0.48
  portable);
- reductions: a register tile of independent accumulators, 2W along the contiguous output axis (two
  registers) and along another output axis as many as make 16 registers' worth (8 for a gemm; 32
  output channels x 8 columns for a 3x3 convolution with AVX-512), that axis one that no gated load
  depends on where there is one (a padded convolution's output channels, not its rows: 3.8-4.1 vs
  34 ms with AVX-512, 11 vs 35 ms portable), the reduce axis unrolled by 2 (small reduce axes, up
  to 8, unrolled whole; instead, a reduce axis of up to CPU_SELECT_UNROLL that selects among STACKed
  values, a convolution's window positions, unrolled whole, so that each unrolled copy loads its own
  value instead of all of them and a chain of WHERE: the 3x3 convolution 5.5 -> 2.6 ms with AVX-512,
  11 -> 4.5 ms portable); the contiguous axis's blocks outermost, so that the block of a gemm's B it
  reads stays in cache while the other axis's blocks stream past (45 vs 21 GFLOP/s for gemm 1024 on
  2 cores with the portable 4x8 tile and the other order), but not in kernels with gated loads (the
  convolution's 7 blocks of 8 columns would be 7 uneven THREAD tasks: 6.3 vs 4.1 ms); a task's own column
  blocks too enclose its row loop (SWAP exchanges the loops: GPT-2's logits 64x768x50257, whose task
  streamed its 12.9 MB of B once per 8 rows, 38 -> 18 ms with AVX-512, numpy 24). A tile two registers wide reads whole
  64-byte cache lines of B on AVX-512: gemm 1024 with --cpu native, 190 GFLOP/s with 32x8 against
  146 with 16x8, 127 with 16x16, 110 with 32x4 and 82 with the portable 8x8; AVX2: 133 with 16x8
  against 92 with 8x8 and 99 with 32x4; portable: 73 with 8x8 against 63 with 16x4;
- each long reduction read contiguously (a full sum; a row sum, whose output lanes would each gather
  from their own row; the row reductions fused into softmax and layernorm): CPU_PARTIALS lanes of
  partial accumulators (GROUP_REDUCE), the reduce axis unrolled by 2, and no register tile (the
  output axis gets its lanes only where its loads are contiguous); a sum of 16M floats went from 7.4
  GB/s (one chain of dependent additions) to 35-42 GB/s on one core, the same (memory-bound) with 32,
  64 or 128 lanes at every level, and 32 lanes are the fastest portable build on data in cache (72
  GB/s against 58 with 64, 46 with 128: more accumulators than SSE's 16 registers). A tile of 8 rows
  instead made softmax's and layernorm's reductions gather 8 rows lane by lane: layernorm 4096x1024
  took 1.30 ms against 0.86 with partials (--cpu native; portable 1.30 against 1.00), softmax 3.9
  against 2.5 (portable 8.1 against 7.8: its exponentials bound it), 64x4096 rows 1.5-1.8x faster.
  The lane count is fixed, not taken from the vector width, so that every `--cpu` level adds in the
  same order;
- a reduction's output axis with few factors of two (197 tokens, 50257 or 1000 classes) is padded to a
  multiple of its lanes or tile rows with overlapping tiles (PADTO's third argument: the last tile moved
  back, nothing masked) before they are chosen, instead of getting a narrower tile or none (`_pad_ragged`);
- where the target has masked vector loads (AVX2, AVX-512) and the gates of a padded border do not move with a
  reduction loop (a convolution's window positions are unrolled whole instead), the gated loads along the
  contiguous axis are vector loads: that axis gets whole vectors like a gemm's (padded with overlapping tiles,
  or with masks when shorter than a vector, then filled with a second axis's rows), and the tile's rows avoid
  only the axes that move the gates (`_lane_by_lane`, `_pad_lanes`, `_fill_vector`, `_border_rows`);
- STAGE (uopc.stages.cpu_staging) where CPU_STAGE_REUSE or more row tiles read a gemm's block of b again, or
  half as many where the block's rows conflict in the cache (a row stride of a multiple of 4 KiB): the block's
  strip is copied to a contiguous array first (2 cores, AVX-512, A/B of the same opts with and without:
  64x3072x768 1.36 -> 0.99 ms, 197x768x3072 3.54 -> 2.79, gemm 1024 8.1 -> 5.7; 5-12% with AVX2 and portable;
  4 row tiles: 32x2048x2048 2.38 -> 1.77, 32x2048x5632 5.4 -> 3.9, but 32x768x768 0.143 -> 0.152, whose rows
  do not conflict; 2 row tiles 3-11% slower: the copy is one more pass over the strip);
- THREAD tasks over the outermost GLOBAL axis when the kernel is big enough to pay for threads and
  every reduction loop is nested in that axis (a task repeats whatever lies outside it: a fused
  reduction beside the output loop of a one-row softmax would run once per task); over the next such
  axis where the outermost's size has no divisor up to THREAD_TASKS.

Invariants: every opt goes through `_Planner.apply`, which refuses what Optimize's `apply_opt` refuses,
so a schedule made here is always legal and `--opts` can pin any of it; only sizes known at compile
time are split.
"""
from __future__ import annotations

import math

from uopc.ops import AxisType, GroupOp, Ops
from uopc.stages.cpu_staging import reuse
from uopc.stages.opts import STAGE_AUTO
from uopc.stages.optimize import Opt, OptOp, _is_global, _memory_ops, axis_size, kernel_axes, nested_with, root_buffer, scopes
from uopc.stages.planner import (CPU_SELECT_UNROLL, _contiguous_output, _in_gated_load, _Planner, _reads_contiguously, _selects,
                                  _store_strides, _strides)
from uopc.uop import UOp

THREAD_MIN_WORK = 1 << 17  # iterations below which starting threads costs more than it saves
THREAD_TASKS = 32          # tasks a THREAD axis aims for: enough to balance any core count up to it
CPU_TILE_ROWS = (32, 16, 8, 4, 2)  # UPCAST factors of a CPU register tile's second output axis (rows of a gemm's C)
CPU_TILE_REGISTERS = 16    # vector registers' worth of accumulators in a CPU register tile
CPU_UNSHARED_ROWS = 4      # register tile rows at most along an axis that every input moves with (no load shared by the rows)
CPU_GATHER_LANES = 8       # lanes of the contiguous output axis when its reads are strided (a row sum's rows)
CPU_PARTIALS = 32          # GROUP_REDUCE lanes (partial accumulators) of a long reduction read contiguously
CPU_PARTIALS_MIN = 256     # reduce sizes from which those pay for their combine (rows of 256-1023 read in 32-lane
                           # partials, not 8 rows gathered lane by lane: GPT-2's layernorm 1.87x, a row count 5.4x) ...
CPU_PARTIALS_GATED_MIN = 1024  # ... or this where the reduction moves a gated load (tinygrad's cumsum: its windows' blocks
                           # of 256, masked lane by lane, took 2.8x longer in partials)
CPU_LONG_BODY = 512        # ALU ops per element beyond which the output lanes take one register, not two
CPU_CHAIN_REGISTERS = 8    # registers of lanes of an elementwise kernel with a transcendental (see _chains)
CPU_CHAIN_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
CPU_CODE_BUDGET = 4096     # vector ops of a register tile's copies of the kernel body at most (compile time; see _register_tile)
CPU_CHAIN_OPS_COST = 24    # ALU ops of one of those once decomposed (float32 EXP2: a range reduction and a polynomial)
CPU_STAGE_REUSE = 8        # row tiles (reads of a staged tile) from which STAGE pays for its copy; half where rows conflict
CPU_ALONE_BLOCKS = 6       # blocks of lanes a reduction without a second tile axis keeps at least (see _register_tile)


def cpu_heuristics(plan: _Planner) -> None:
  """The opts of a CPU kernel (see the module docstring)."""
  work = _work(plan.sink)
  inner = _lane_axis(plan, _contiguous_output(plan))
  if _partials(plan): _output_lanes(plan, inner, 1)  # lanes that would gather: the partials are the kernel's lanes
  else: _register_tile(plan, inner)
  _thread_tasks(plan, work)
  if plan.axes(AxisType.REDUCE):
    reads, conflicts = reuse(plan.sink)
    if reads >= CPU_STAGE_REUSE or (conflicts and reads >= CPU_STAGE_REUSE // 2): plan.apply(Opt(OptOp.STAGE, None, STAGE_AUTO))


def _lane_axis(plan: _Planner, inner: int | None) -> int | None:
  """The output axis a reduction's lanes go along: the contiguous output axis, unless a load inside the reduction
  moves with it by more than one element while another output axis moves every load inside it by one or not at all:
  a product stored transposed (MLP-Mixer's x + (h @ w2).transpose(1, 2): h[d, j] gathered lane by lane in each of
  384 steps along d, w2[j, t] read in vectors along t). Its stores and the loads outside the reduction, once per
  output, are gathered and scattered instead (`_Planner.lanes_inside` then judges the lanes by the reduction's loads)."""
  if inner is None or not plan.axes(AxisType.REDUCE) or _reads_contiguously(plan, inner): return inner
  # not where the reduction computes a transcendental: along the new lanes its values would be broadcast scalars
  # (ConvNeXt's GELU fused into its second product, NHWC stored as NCHW: 9.5 -> 12.1 ms with lanes along channels)
  if any(u.op in CPU_CHAIN_OPS for u in plan.sink.toposort()): return inner
  plan.lanes_inside = True
  moved = [i for i in plan.axes(AxisType.GLOBAL) if i != inner and isinstance(plan.size(i), int) and _moves_inside(plan, i)]
  # ... an operand's axis: some load inside the reduction does not move with it (a product's a serves its lanes)
  best = next((i for i in reversed(moved) if _reads_contiguously(plan, i) and _reused_inside(plan, i)), None)
  if best is None or _reads_contiguously(plan, inner): plan.lanes_inside = False
  return inner if best is None or _reads_contiguously(plan, inner) else best


def _moves_inside(plan: _Planner, i: int) -> bool:
  """Axis i moves some global load inside a reduction."""
  r, scope = kernel_axes(plan.sink)[i], scopes(plan.sink)
  reduces = {kernel_axes(plan.sink)[j] for j in plan.axes(AxisType.REDUCE)}
  return any(u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and scope[u] & reduces and r in u.src[0].src[1].toposort()
             for u in _memory_ops(plan.sink))


def _reused_inside(plan: _Planner, i: int) -> bool:
  """Some global load inside a reduction does not move with axis i."""
  r, scope = kernel_axes(plan.sink)[i], scopes(plan.sink)
  reduces = {kernel_axes(plan.sink)[j] for j in plan.axes(AxisType.REDUCE)}
  return any(u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and scope[u] & reduces and r not in u.src[0].toposort()
             for u in _memory_ops(plan.sink))


def _partials(plan: _Planner) -> bool:
  """CPU_PARTIALS GROUP_REDUCE lanes, then an unroll by 2, for each REDUCE axis that is long
  (CPU_PARTIALS_MIN or more, CPU_PARTIALS_GATED_MIN where it moves a gated load, a multiple of CPU_PARTIALS) and
  read contiguously; whether there was one."""
  def long(r: int, size: int) -> bool: return size >= (CPU_PARTIALS_GATED_MIN if _in_gated_load(plan, r) else CPU_PARTIALS_MIN)
  long_reads = [r for r in plan.axes(AxisType.REDUCE) if isinstance(size := plan.size(r), int) and long(r, size)
                and size % CPU_PARTIALS == 0 and _reads_contiguously(plan, r)]
  for r in reversed(long_reads):  # from the last: a split numbers the axes after it anew
    plan.split_by_first(r, (CPU_PARTIALS,), AxisType.GROUP_REDUCE)
    plan.split_by_first(r, (2,), AxisType.UNROLL)
  return bool(long_reads)


def _output_lanes(plan: _Planner, inner: int | None, gather_lanes: int, registers: int = 2, masked: bool = False,
                  half: bool = False) -> int:
  """UPCAST the contiguous output axis: 2W lanes where its loads are contiguous too, else `gather_lanes`
  (each lane then gathers its own elements); the lanes made. A body of more than CPU_LONG_BODY ALU ops
  gets W lanes: its register's copies are rendered one after the other, too far apart for the CPU to
  overlap them (a 2,000-op chain ran in 26.6 ms with 4 lanes, 26.9 with 8, portable), and a second
  copy only doubles the code that Expand, the renderer and the C compiler go through."""
  if inner is None: return 0
  width = (registers * plan.caps.vector_width) >> half if _reads_contiguously(plan, inner, flipped=True) or masked else gather_lanes
  # a gated load along the axis is made lane by lane (each lane tests its own gate): no more lanes than a
  # gather (tinygrad's cumsum, a window sum over a padded row: 24 -> 12 ms with 8 lanes instead of 32)
  if _lane_by_lane(plan, inner): width = min(width, CPU_GATHER_LANES)
  if _chains(plan) and width == registers * plan.caps.vector_width: width = CPU_CHAIN_REGISTERS * plan.caps.vector_width
  if sum(u.op in GroupOp.ALU for u in plan.sink.toposort()) > CPU_LONG_BODY: width = min(width, plan.caps.vector_width)
  if made := plan.split_by_first(inner, [width >> i for i in range(width.bit_length() - 1)], AxisType.UPCAST): return made
  # an axis no lane count divides (a stride-2 pooling's 27 output columns), of at most two registers: all
  # of it, one row of vector and one partial vector, whose strided reads Expand loads as windows of the
  # row (max_pool 64x56x56: 0.11 -> 0.09 ms on one core, against 8 channels each gathering its lanes)
  size = plan.size(inner)
  if isinstance(size, int) and plan.caps.vector_width < size <= 2 * plan.caps.vector_width and not _in_gated_load(plan, inner):
    return plan.split_by_first(inner, (size,), AxisType.UPCAST)
  return 0


def _short_reductions(plan: _Planner) -> bool:
  """Every REDUCE axis is a window short enough to unroll whole (CPU_SELECT_UNROLL or fewer steps)."""
  return all(isinstance(size := plan.size(r), int) and size <= CPU_SELECT_UNROLL for r in plan.axes(AxisType.REDUCE))


def _halves(plan: _Planner, i: int) -> bool:
  """Half a vector of lanes divides axis i and a whole one does not (with AVX-512: 8 lanes, not 16)."""
  size, width = plan.size(i), plan.caps.vector_width
  return isinstance(size, int) and width >= 16 and size % width != 0 and size % (width // 2) == 0


def _chains(plan: _Planner) -> bool:
  """An elementwise kernel (no reduction) computing a transcendental: each element is a chain of some
  30 dependent operations (the CPU decompositions of uopc.stages.transcendental), which one or two
  registers of lanes leave latency-bound; CPU_CHAIN_REGISTERS copies, emitted side by side by
  Linearize, keep the vector units busy."""
  return not plan.axes(AxisType.REDUCE) and any(u.op in CPU_CHAIN_OPS for u in plan.sink.toposort())


def _body_ops(sink: UOp) -> int:
  """ALU ops per element as Instruction Selection leaves them: a transcendental (EXP2, LOG2, SIN, POW) counts as the
  CPU_CHAIN_OPS_COST ops of its decomposition."""
  return sum(CPU_CHAIN_OPS_COST if u.op in CPU_CHAIN_OPS else 1 for u in sink.toposort() if u.op in GroupOp.ALU)


def _work(sink: UOp) -> int:
  return math.prod(s if isinstance(s, int) else (s.vmax or 1) for s in map(axis_size, kernel_axes(sink)))


def _register_tile(plan: _Planner, inner: int | None) -> None:
  """The output lanes and, in a reduction, the register tile and the unrolled reduce axis (see _cpu_heuristics)."""
  others = [i for i in plan.axes(AxisType.GLOBAL) if i != inner and isinstance(plan.size(i), int)]
  # a reduction with no second output axis to tile (a matrix-vector product: one token through a layer) takes
  # up to the tile's whole budget of registers along the contiguous axis, leaving CPU_ALONE_BLOCKS blocks for
  # the THREAD tasks: each reduction step then reads a long run of a row, into as many independent accumulator
  # chains (AVX-512, 2 cores: 1 x 768 x 3072 0.30 -> 0.08 ms, numpy 0.066; 1 x 3072 x 768 0.057 with 128
  # lanes, 0.103 with 256 in 3 blocks, numpy 0.093)
  registers = 2
  if plan.axes(AxisType.REDUCE) and not others and inner is not None and isinstance(size := plan.size(inner), int):
    registers = next((r for r in (CPU_TILE_REGISTERS, 8, 4) if size // (r * plan.caps.vector_width) >= CPU_ALONE_BLOCKS), 2)
  masked = inner is not None and _in_gated_load(plan, inner) and not _lane_by_lane(plan, inner)  # masked vector loads
  # ... which take two registers of lanes where the tile has 32 registers to live in (AVX-512), one with AVX2's 16
  # (3x3 convolution 3x224x224->64 on Zen 5: 8 lanes by 16 channels 1.14 ms, 16 by 8 1.46-1.56)
  # ... and one where every other element is read (a stride-2 convolution's taps: Expand's masked windows of two
  # vectors; 128x28x28->256 with 16 lanes by 16 channels 0.90 ms, by 8 1.05, 2 columns lane by lane 2.5)
  if masked and (plan.caps.vector_width < 16 or not _reads_contiguously(plan, inner)): registers = 1
  # ... or half of one where that divides the axis and a whole one would not (a stride-2 window of 56 columns,
  # ResNet's first max pooling: 8 lanes in 7 blocks instead of 16 in 4 overlapping tiles, 0.67 -> 0.42 ms)
  half = masked and not _reads_contiguously(plan, inner) and _halves(plan, inner)
  if plan.axes(AxisType.REDUCE) and inner is not None and (_reads_contiguously(plan, inner) or masked) and not _lane_by_lane(plan, inner) \
     and not half:
    registers = _pad_lanes(plan, inner, registers, masked)  # its blocks become the outermost axis (SWAP below)
  before = plan.size(inner) if inner is not None else None
  lanes = _output_lanes(plan, inner, CPU_GATHER_LANES, registers, masked, half)
  if lanes and lanes != before: others = [i + (i > inner) for i in others]  # a split of part of the axis adds one after it
  if lanes and lanes == before and plan.axes(AxisType.REDUCE): lanes, inner, others = _fill_vector(plan, inner, lanes, others)
  if plan.axes(AxisType.REDUCE):
    # the tile's other axis: one whose loads are not gated (a convolution's output channels, not its
    # rows, whose border-gated loads would be gathered lane by lane), as many lanes as fill the budget,
    gated = any(u.op is Ops.LOAD and len(u.src) == 3 for u in _memory_ops(plan.sink))
    rows = [k for k in CPU_TILE_ROWS if k * lanes <= CPU_TILE_REGISTERS * plan.caps.vector_width] if lanes else CPU_TILE_ROWS[-3:]
    # ... and a tile whose copies of the body stay within CPU_CODE_BUDGET vector ops (an LSTM's four steps fused: 8
    # reductions and 14 EXP2 in its body, 475 ops; 8 rows of 2 vectors made 10,000 lines of C and gcc took 97 s)
    if lanes and rows and (body := _body_ops(plan.sink) * max(1, lanes // plan.caps.vector_width)) * rows[-1] <= CPU_CODE_BUDGET:
      rows = [k for k in rows if k * body <= CPU_CODE_BUDGET]
    # the last such axis that a tile size divides (pooling's 27 rows do not: its 64 channels do)
    ungated = [i for i in others if not _border_rows(plan, i, masked)]
    # ... preferably one that some input does not move (its values then serve the whole tile): a gemm's rows,
    # not the heads of a batched one, where each head reads its own a and b
    ungated = [i for i in ungated if _reused(plan, i)] or ungated
    # ... best one that an input read in vectors along the lanes does not move (a gemm's rows share the vectors
    # of b; a 1x1 convolution's output channels share the image's, not its rows, which share only a broadcast
    # weight: 128 -> 256 channels on 40 x 40, 4.5 -> 0.7 ms with AVX-512)
    ungated = [i for i in ungated if inner is not None and _shares_vectors(plan, i, inner)] or ungated
    if rows and ungated and not any(plan.size(i) % k == 0 for i in ungated for k in rows[:-1]): _pad_ragged(plan, ungated[-1], rows[0])
    tileable = [i for i in ungated if any(plan.size(i) % k == 0 for k in rows)]
    other = (tileable or ungated or others or [None])[-1] if rows else None
    # ... and few of them where no input serves the whole tile and the reductions are short windows (a pooling's
    # channels each read their own image: the rows share only index arithmetic, and no long chain of sums needs
    # their independent accumulators; max pooling 64x112x112 with 8 lanes: 16 channels 0.82 ms, 4 0.42)
    if other is not None and not _reused(plan, other) and _short_reductions(plan):
      rows = [k for k in rows if k <= CPU_UNSHARED_ROWS] or rows[-1:]
    if other is not None and plan.split_by_first(other, rows, AxisType.UPCAST) and inner is not None:
      inner += inner > other
    if selecting := [i for i in plan.axes(AxisType.REDUCE) if _selects(plan, i)]:  # their unrolled selections are code enough
      for i in reversed(selecting): plan.split_by_first(i, (plan.size(i),), AxisType.UNROLL)
    elif not (masked and _gate_unroll(plan)):  # so are the masked loads of a window's positions
      r = plan.axes(AxisType.REDUCE)[-1]
      short = isinstance(plan.size(r), int) and (plan.size(r) <= 8 or plan.size(r) <= CPU_SELECT_UNROLL and _invariant_loads(plan, r))
      plan.split_by_first(r, (plan.size(r),) if short else (2,), AxisType.UNROLL)
    if lanes and other is not None and other < inner and not gated: plan.apply(Opt(OptOp.SWAP, other, inner))


def _invariant_loads(plan: _Planner, r: int) -> bool:
  """REDUCE axis r is nested in another reduction whose loop does not move some global load that r moves: unrolled
  whole, those loads leave the outer loop (Linearize hoists them). The row maxima of a product with K = 16,
  (a @ p.T).max(1): a's 8 x 16 tile was gathered again for each of 1024 p rows, 6.4 ms; unrolled 0.83 ms."""
  axes = kernel_axes(plan.sink)
  outer = [axes[o] for o in plan.axes(AxisType.REDUCE) if o != r and axes[r] in nested_with(plan.sink).get(axes[o], frozenset())]
  moved = [set(u.src[0].src[1].toposort()) for u in _memory_ops(plan.sink)
           if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and axes[r] in u.src[0].src[1].toposort()]
  return any(o not in m for o in outer for m in moved)


def _lane_by_lane(plan: _Planner, i: int) -> bool:
  """Axis i moves a gated global load that its lanes would each make on their own: the target has no masked
  vector loads, some load along i does not read consecutive elements (a strided window), or the gates move
  with a reduction loop, so that each step would build its vector of gates lane by lane (tinygrad's cumsum:
  a window sum over a padded row, 1.6 ms with 8 lanes of scalar loads, 2.7 with 32 of masked ones). Short
  reductions (a convolution's window, up to CPU_SELECT_UNROLL positions) are unrolled instead (_gate_unroll)."""
  if not _in_gated_load(plan, i): return False
  sizes = [plan.size(r) for r in _gate_reduces(plan)]
  return not (plan.caps.masked_loads and _reads_windows(plan, i) and all(isinstance(s, int) for s in sizes)
              and math.prod(sizes) <= CPU_SELECT_UNROLL)


def _reads_windows(plan: _Planner, i: int) -> bool:
  """Every global LOAD that axis i moves reads consecutive elements along it, or every other one (Expand's
  windows: two vectors' span holds a vector of lanes)."""
  r = kernel_axes(plan.sink)[i]
  return all((form := _strides(u.src[0].src[1])) is not None and form.get(r) in (1, 2) for u in _memory_ops(plan.sink)
             if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and r in u.src[0].src[1].toposort())


def _gate_reduces(plan: _Planner) -> list[int]:
  """The REDUCE axes that the gate of some gated global load moves with (a padded convolution's window)."""
  axes, gated = kernel_axes(plan.sink), set()
  for u in _memory_ops(plan.sink):
    if u.op is Ops.LOAD and len(u.src) == 3 and _is_global(root_buffer(u.src[0])): gated |= set(u.src[2].toposort())
  return [i for i in plan.axes(AxisType.REDUCE) if axes[i] in gated]


def _gate_unroll(plan: _Planner) -> bool:
  """The REDUCE axes the gates move with, unrolled whole (see _lane_by_lane): each unrolled copy's gates are
  then computed once per tile, outside the reduction loop; whether there were any."""
  axes = _gate_reduces(plan)
  for i in reversed(axes): plan.split_by_first(i, (plan.size(i),), AxisType.UNROLL)
  return bool(axes)


def _pad_lanes(plan: _Planner, inner: int, registers: int, masked: bool) -> int:
  """Pads a reduction's contiguous output axis for its lanes; the registers of lanes it then takes. A ragged axis
  (see _pad_ragged) gets overlapping tiles of `registers` vectors or, where it is shorter than those, of one
  (a 28-wide image: 16 lanes, the second tile moved back by 4); an axis shorter than a vector is padded to the
  next power of two, its extra lanes masked, where that adds at most CPU_PAD_WASTE (a 14-wide image to 16, a
  7-wide one to 8). AVX-512, 2 cores, 3x3 convolutions against numpy's im2col and matmul: 128x28x28->128
  1.9 -> 0.74 ms (1.2), 256x14x14->256 4.7 -> 0.78 (1.1), with the masked vector loads of their padded borders."""
  width = plan.caps.vector_width
  for r in dict.fromkeys((registers, 1)):
    if _pad_ragged(plan, inner, r * width, CPU_PAD_BLOCKS, masked): return r
  size = plan.size(inner)
  if isinstance(size, int) and 2 < size < width and size & (size - 1) and (up := 1 << size.bit_length()) - size <= size * CPU_PAD_WASTE:
    plan.apply(Opt(OptOp.PADTO, inner, up))
  return registers


def _fill_vector(plan: _Planner, inner: int, lanes: int, others: list[int]) -> tuple[int, int, list[int]]:
  """Lanes fewer than a vector (a 7-wide image padded to 8) filled with the next output axis outwards where the
  tile's rows do not take that axis (two rows of the image, padded with masks where needed), so that a vector
  holds one value of the tile's other axis (one output channel: one broadcast weight) instead of several;
  (lanes, inner, others) after it. AVX-512, 2 cores,
  3x3 convolution 512x7x7->512: 1.78 -> 1.61 ms (numpy's im2col and matmul 1.33-1.40)."""
  fill = plan.caps.vector_width // lanes
  strides = _store_strides(plan.sink)
  axes = kernel_axes(plan.sink)
  outward = sorted((strides.get(axes[i], 0), i) for i in others if strides.get(axes[i], 0) > 1)
  if fill < 2 or not outward or not _border_rows(plan, f := outward[0][1], True): return lanes, inner, others  # else the tile's rows take it
  size = plan.size(f)
  if size % fill and not (-size % fill <= size * CPU_PAD_WASTE and plan.apply(Opt(OptOp.PADTO, f, size + -size % fill))): return lanes, inner, others
  size = plan.size(f)
  if not plan.split_by_first(f, (fill,), AxisType.UPCAST): return lanes, inner, others
  shift = int(size != fill)  # the split of part of the axis adds one after it
  return lanes * fill, inner + (shift and inner > f), [i + (shift and i > f) for i in others if i != f]


def _border_rows(plan: _Planner, i: int, masked: bool) -> bool:
  """Axis i would make a register tile's rows load lane by lane: it moves a gated global load (a padded
  border) or, where the lanes' gated loads are `masked` vector loads (each row's vector one load), its gate (a
  padded image's rows, not the output channels of a residual load gated by the padded columns' mask)."""
  if not masked: return _in_gated_load(plan, i)
  r = kernel_axes(plan.sink)[i]
  return any(u.op is Ops.LOAD and len(u.src) == 3 and _is_global(root_buffer(u.src[0])) and r in u.src[2].toposort() for u in _memory_ops(plan.sink))


def _shares_vectors(plan: _Planner, i: int, inner: int) -> bool:
  """Some global input moves with the lane axis `inner` (its values are vectors) but not with axis i."""
  axes = kernel_axes(plan.sink)
  return any(u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and axes[inner] in (t := u.src[0].toposort()) and axes[i] not in t
             for u in _memory_ops(plan.sink))


def _reused(plan: _Planner, i: int) -> bool:
  """Some global input does not depend on axis i (each value it loads serves every iteration of i)."""
  r = kernel_axes(plan.sink)[i]
  return any(u.op is Ops.LOAD and _is_global(root_buffer(u.src[0])) and r not in u.src[0].toposort() for u in _memory_ops(plan.sink))


CPU_PAD_WASTE = 1 / 4       # a ragged output axis is padded where that adds at most this share of its iterations ...
CPU_PAD_BLOCKS = 4          # ... to a multiple of this many tiles where that does (a prime count of blocks has no THREAD tasks)


def _pad_ragged(plan: _Planner, axis: int, tile: int, blocks: int = 1, whole: bool = False) -> bool:
  """An output axis whose largest power-of-two divisor is under half of `tile` (197 tokens, 50257 classes,
  1000: 8 lanes of 32) padded to a multiple of `tile` with overlapping tiles (PADTO's third argument: the last
  tile moved back to end at the axis's end, no gated loads), so that it gets its lanes or tile rows; whether it
  was. 2-core Zen 5, --cpu native (AVX-512), `bench_cpu.py --filter ragged` (numpy's matmul in brackets):
  197 x 768 x 3072 49.7 -> 3.6 ms (4.0), 64 x 768 x 50257 410 -> 39 ms (24), 1000 x 768 x 1000 8.3 -> 3.7 (6.0),
  1024 x 768 x 1031 59 -> 4.8 (6.5). With `whole`, any axis the tile does not divide (a padded convolution's 28
  columns with AVX2: 4 lanes, or 8 in 4 overlapping tiles: 2.15 -> 1.47 ms for 128x28x28->128)."""
  size = plan.size(axis)
  if not isinstance(size, int) or size < tile or (size % tile == 0 if whole else (size & -size) >= tile // 2): return False
  # to a multiple of `blocks` tiles where that wastes little too: the blocks of tiles then divide among THREAD tasks
  m = next((tile * b for b in (blocks, 1) if -size % (tile * b) <= size * CPU_PAD_WASTE), None)
  return m is not None and plan.apply(Opt(OptOp.PADTO, axis, (m, tile)))


def _thread_tasks(plan: _Planner, work: int) -> None:
  """THREAD tasks over the outermost GLOBAL axis (see _cpu_heuristics)."""
  globals_ = plan.axes(AxisType.GLOBAL)
  axes = kernel_axes(plan.sink)
  reduces = {axes[i] for i in plan.axes(AxisType.REDUCE, AxisType.UNROLL, AxisType.GROUP_REDUCE)}
  if not (plan.caps.threads and globals_ and work >= THREAD_MIN_WORK): return
  near = nested_with(plan.sink)
  for g in globals_:  # the outermost, or the next where its size has no divisor up to THREAD_TASKS (1571 blocks of 32 logits)
    size = plan.size(g)
    if not reduces <= near.get(axes[g], frozenset()) or not isinstance(size, int): return
    if plan.split_by_first(g, sorted((d for d in range(2, min(size, THREAD_TASKS) + 1) if size % d == 0), reverse=True),
                           AxisType.THREAD, top=True): return
