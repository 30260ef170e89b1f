"""The search space of `uopc tune`: which OptOps the BEAM search tries next from a kernel's current opts.

From a kernel with opts O (an optimized sink S), the children are O + (one more opt) for each opt of
seed 000's table that `apply_opt` accepts on S:
- SPLIT of every axis into each type it may be split into, by the factors below that divide it:
  UPCAST (u) and UNROLL (r, also a whole short axis), GROUP_REDUCE (G: vector lanes on a CPU,
  workgroup threads on a GPU, both sides there), THREAD (t, CPU targets), LOCAL (l, GPUs);
- PADTO of an axis to a multiple it is not already of (PADS), masked, and for a GLOBAL axis also with
  overlapping tiles of that multiple (PADTO's third argument: no gated loads);
- SWAP of two axes of one type; NOLOCALS on a GPU; TC (tensor cores) as the first opt on -t cuda, with
  its operand tiles staged in shared memory in as many stages as fit, in 2, 3 or 4, or not at all, and
  each tile of TC_TILES; the tiles that make several warps a workgroup also with 3 and 4 stages
  (BIG_TILE_STAGES: more than 48 KiB, dynamic shared memory, where the target's archs give it); STAGE(2)
  and STAGE(3) on -t cuda without TC (the re-read inputs staged in shared memory,
  uopc.stages.local_staging: the last opt, so a staged kernel has no children); STAGE on -t c/llvm (a block
  read again copied to a contiguous array, uopc.stages.cpu_staging).
Besides children, the search tries the heuristics' opts with one of them replaced (`variants`): by another
action of the same OptOp on the same axis (another factor or type of a SPLIT, another staging or tile
of TC, ...), the opts after it applied again, or none of them where one no longer applies (a TC
tile that sets the workgroup's warps itself takes no further LOCAL splits). Adding opts alone cannot find these: a TC's staging is its first opt, and the kernel without
its later opts is too slow to stay in the beam. A child or variant whose vector lanes (the product of its UPCAST, UNROLL and CPU GROUP_REDUCE sizes) exceed
MAX_LANES (or the heuristics' own, when larger) is left out: its code size costs compile time for
nothing.

Invariant: the space is a function of (kernel, opts, target caps) and SPACE_VERSION; a change to the
space (factors, opts, rules) must bump SPACE_VERSION, which is part of every database key, so entries
found in an older space go stale instead of silently standing for the new one.
"""
from __future__ import annotations

from uopc.diagnostics import CompileError
from uopc.ops import AxisType
from uopc.stages.optimize import (Opt, OptError, OptOp, TargetCaps, apply_opt, axis_size, axis_type, is_axis, kernel_axes)
from uopc.stages.opts import STAGE_AUTO, STAGE_COUNTS, TC_AUTO_STAGES, TC_STAGE_COUNTS, TC_TILES
from uopc.uop import UOp

SPACE_VERSION = 8  # 7: TC_TILES grew the warpgroup tiles 9 and 10; 8: PADTO with overlapping tiles
UPCASTS = (2, 3, 4, 8, 16)
UNROLLS = (2, 4, 8, 16)
CPU_GROUPS = (4, 8, 16, 32)
GPU_GROUPS = (8, 16, 32, 64, 128, 256)
LOCALS = (2, 4, 8, 16, 32, 64, 128, 256)
THREADS = (2, 4, 8, 16, 32, 64)
PADS = (8, 32)
MAX_LANES = 512
BIG_TILE_STAGES = (3, 4)


def _splits(t: AxisType, size: int, caps: TargetCaps) -> list[tuple[int, bool, AxisType]]:
  """(factor, top, new type) of each SPLIT of an axis of type t and `size`."""
  out: list[tuple[int, bool, AxisType]] = []
  if t in (AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP):
    out += [(k, False, AxisType.UPCAST) for k in UPCASTS]
  if t in (AxisType.REDUCE, AxisType.GROUP_REDUCE):
    out += [(k, False, AxisType.UNROLL) for k in sorted(set(UNROLLS) | ({size} if size <= 16 else set()))]
  if t is AxisType.REDUCE:
    out += [(k, top, AxisType.GROUP_REDUCE) for k in (GPU_GROUPS if caps.gpu else CPU_GROUPS) for top in ((False, True) if caps.gpu else (False,))]
  if t is AxisType.GLOBAL and caps.threads: out += [(k, True, AxisType.THREAD) for k in THREADS]
  if t in (AxisType.GLOBAL, AxisType.LOOP) and caps.gpu: out += [(k, False, AxisType.LOCAL) for k in LOCALS]
  return [(k, top, nt) for k, top, nt in out if 1 < k <= size and size % k == 0]


def actions(sink: UOp, opts: tuple[Opt, ...], caps: TargetCaps) -> list[Opt]:
  """Every opt to try after `opts` (not yet checked: `children` applies them)."""
  axes = kernel_axes(sink)
  out: list[Opt] = []
  if any(o.op is OptOp.STAGE for o in opts): return out  # STAGE is the last opt
  if caps.async_copies and not any(o.op is OptOp.TC for o in opts): out += [Opt(OptOp.STAGE, None, n) for n in STAGE_COUNTS]
  if not caps.gpu: out.append(Opt(OptOp.STAGE, None, STAGE_AUTO))  # a CPU's copy of a block read again (cpu_staging)
  if not opts and caps.tensor_cores:  # every staging (none, as many as fit, 2 to 4) and tile (by size, or each of TC_TILES)
    groups = [t for t, (_, _, wm, wn) in enumerate(TC_TILES) if wm * wn > 1]
    args = [(-1,), (-1, 0), *((-1, n) for n in TC_STAGE_COUNTS), *((-1, TC_AUTO_STAGES, t) for t in range(len(TC_TILES))),
            *((-1, n, t) for t in groups for n in BIG_TILE_STAGES)]
    out += [Opt(OptOp.TC, i, arg) for i, r in enumerate(axes) if is_axis(r) and axis_type(r) is AxisType.REDUCE for arg in args]
  for i, r in enumerate(axes):
    if not is_axis(r) or not isinstance(size := axis_size(r), int): continue
    out += [Opt(OptOp.SPLIT, i, (k, t, top)) for k, top, t in _splits(axis_type(r), size, caps)]
    out += [Opt(OptOp.PADTO, i, m) for m in PADS if size % m != 0 and size > m // 2]
    if axis_type(r) is AxisType.GLOBAL: out += [Opt(OptOp.PADTO, i, (m, m)) for m in PADS if size % m != 0 and size > m]
    out += [Opt(OptOp.SWAP, i, j) for j in range(i + 1, len(axes)) if is_axis(axes[j]) and axis_type(axes[j]) is axis_type(r)]
  if caps.gpu and not any(o.op is OptOp.NOLOCALS for o in opts): out.append(Opt(OptOp.NOLOCALS))
  return out


def lanes(sink: UOp, caps: TargetCaps) -> int:
  """The vector lanes of an optimized kernel: the product of its UPCAST, UNROLL (and on a CPU GROUP_REDUCE) sizes."""
  wide = (AxisType.UPCAST, AxisType.UNROLL) + (() if caps.gpu else (AxisType.GROUP_REDUCE,))
  n = 1
  for r in kernel_axes(sink):
    if is_axis(r) and axis_type(r) in wide and isinstance(s := axis_size(r), int): n *= s
  return n


def children(sink: UOp, opts: tuple[Opt, ...], caps: TargetCaps, max_lanes: int = MAX_LANES) -> list[tuple[tuple[Opt, ...], UOp]]:
  """(opts + (opt,), the kernel they make) for each legal action within the lane budget."""
  nolocals = any(o.op is OptOp.NOLOCALS for o in opts)
  out = []
  for opt in actions(sink, opts, caps):
    try:
      new = apply_opt(sink, opt, caps, first=not opts, nolocals=nolocals)
    except (OptError, CompileError):
      continue
    if lanes(new, caps) <= max_lanes: out.append((opts + (opt,), new))
  return out


def _extend(sink: UOp, done: tuple[Opt, ...], more: tuple[Opt, ...], caps: TargetCaps) -> UOp:
  """`sink` (made by `done`) with each opt of `more` applied in turn (OptError/CompileError if one does not apply)."""
  for opt in more:
    sink = apply_opt(sink, opt, caps, first=not done, nolocals=any(o.op is OptOp.NOLOCALS for o in done))
    done += (opt,)
  return sink


def variants(prefixes: list[UOp], opts: tuple[Opt, ...], caps: TargetCaps, max_lanes: int = MAX_LANES) -> list[tuple[tuple[Opt, ...], UOp]]:
  """(opts with opts[j] replaced, the kernel they make) for each j and each other action of opts[j]'s OptOp
  on its axis that applies after opts[:j], followed by opts[j + 1:] where they still apply, else alone
  (module docstring); `prefixes[j]` is the kernel opts[:j] make."""
  out = []
  for j, o in enumerate(opts):
    for alt in actions(prefixes[j], opts[:j], caps):
      if alt.op is not o.op or alt.axis != o.axis or alt == o: continue
      for rest in (opts[j + 1:], ()):  # the opts after it again, else none of them
        try:
          new = _extend(prefixes[j], opts[:j], (alt,) + rest, caps)
        except (OptError, CompileError):
          continue
        if lanes(new, caps) <= max_lanes: out.append((opts[:j] + (alt,) + rest, new))
        break
  return out
