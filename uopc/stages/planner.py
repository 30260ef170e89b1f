"""The heuristics' planner and the predicates on a kernel that they share: Optimize asks `plan_opts` for a
kernel's opts where none are pinned; the target's heuristics (uopc.stages.tc_opt, local_staging, gpu_rows,
gpu_schedule on GPUs, cpu_schedule on CPUs) try opts on a `_Planner`, which keeps those that apply.

Invariant: every opt a plan holds went through Optimize's `apply_opt` on the kernel as it was then, so a
plan is always legal and `--opts` can pin it.
"""
from __future__ import annotations

from uopc.ops import AxisType, Ops
from uopc.stages.optimize import (Opt, OptError, OptOp, TargetCaps, _is_global, _memory_ops, affine, apply_opt, axis_size, axis_type,
                                  kernel_axes, root_buffer)
from uopc.symbolic import linear_form, simplify
from uopc.uop import UOp


class _Planner:
  """Tries opts one at a time on the kernel, keeping those that are legal."""

  def __init__(self, sink: UOp, caps: TargetCaps):
    self.sink, self.caps, self.opts = sink, caps, []
    self.lanes_inside = False  # _reads_contiguously counts only the loads inside reductions (cpu_schedule._lane_axis)

  def axes(self, *types: AxisType) -> list[int]:
    return [i for i, r in enumerate(kernel_axes(self.sink)) if axis_type(r) in types]

  def size(self, i: int) -> int | UOp: return axis_size(kernel_axes(self.sink)[i])

  def apply(self, opt: Opt) -> bool:
    try:
      self.sink = apply_opt(self.sink, opt, self.caps, first=not self.opts)
    except OptError:
      return False
    self.opts.append(opt)
    return True

  def split_by_first(self, axis: int, factors, t: AxisType, top: bool = False) -> int:
    """Split `axis` by the first factor that divides it; the factor used, or 0."""
    size = self.size(axis)
    for k in factors:
      if isinstance(size, int) and 1 < k <= size and size % k == 0 and self.apply(Opt(OptOp.SPLIT, axis, (k, t, top))): return k
    return 0


def _strides(address: UOp) -> dict[UOp, int] | None:
  """Each range's coefficient in an address (0 where not a constant), or None where the address is not affine
  in them. An overlapping PADTO's shift, max(0, ...) of ranges alone, is constant over each of its tiles and
  left out (so a padded axis still counts as contiguous: uopc.stages.overlap_tiles)."""
  if (form := affine(address)) is not None: return {r: c.arg if c.op is Ops.CONST else 0 for r, c in form[0].items()}
  out: dict[UOp, int] = {}
  for a, c in linear_form(simplify(address)).items():
    if a is None: continue
    if a.op is Ops.RANGE: out[a] = c
    elif a.op is not Ops.MAX or any(x.op not in (Ops.RANGE, Ops.CONST, Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MAX) for x in a.toposort()): return None
  return out


def _store_strides(sink: UOp) -> dict[UOp, int]:
  """Each range's constant coefficient in the address of the kernel's global STOREs (0 where none)."""
  out: dict[UOp, int] = {}
  for u in _memory_ops(sink):
    if u.op is Ops.STORE and _is_global(root_buffer(u.src[0])) and (form := _strides(u.src[0].src[1])) is not None: out.update(form)
  return out


def _contiguous_output(plan: _Planner) -> int | None:
  """The GLOBAL axis that moves the output by one element, if any."""
  strides = _store_strides(plan.sink)
  axes = kernel_axes(plan.sink)
  return next((i for i in plan.axes(AxisType.GLOBAL) if strides.get(axes[i]) == 1), None)


def _reads_contiguously(plan: _Planner, i: int, flipped: bool = False) -> bool:
  """Every global LOAD that axis i moves reads consecutive elements along it (its coefficient is 1; or -1 with
  `flipped`: a block of lanes read backwards is one vector load and a shuffle)."""
  r = kernel_axes(plan.sink)[i]
  if plan.lanes_inside:
    from uopc.stages.optimize import scopes
    scope, reduces = scopes(plan.sink), {kernel_axes(plan.sink)[j] for j in plan.axes(AxisType.REDUCE)}
  for u in _memory_ops(plan.sink):
    if u.op is not Ops.LOAD or not _is_global(root_buffer(u.src[0])) or r not in u.src[0].src[1].toposort(): continue
    if plan.lanes_inside and not scope[u] & reduces: continue
    if (form := _strides(u.src[0].src[1])) is None or form.get(r) not in ((1, -1) if flipped else (1,)): return False
  return True


def _in_gated_load(plan: _Planner, i: int) -> bool:
  """Axis i moves the address or the gate of a gated global LOAD (a padded border)."""
  r = kernel_axes(plan.sink)[i]
  return any(u.op is Ops.LOAD and len(u.src) == 3 and _is_global(root_buffer(u.src[0])) and r in u.toposort() for u in _memory_ops(plan.sink))


CPU_SELECT_UNROLL = 16  # reduce axes up to this size that select among stacked values are unrolled whole (CPU and GPU)


def _selects(plan: _Planner, i: int) -> bool:
  """Axis i is a short REDUCE axis (CPU_SELECT_UNROLL or less) that picks among stacked values: compared
  with constants (a STACK read along it: a convolution's window positions)."""
  r, size = kernel_axes(plan.sink)[i], plan.size(i)
  return isinstance(size, int) and size <= CPU_SELECT_UNROLL and \
    any(u.op is Ops.CMPLT and u.src[0] is r and u.src[1].op is Ops.CONST for u in plan.sink.toposort())


def _gpu_heuristics(plan: _Planner) -> None:
  """A gemm of half-precision inputs goes on the tensor cores (`uopc.stages.tc_opt`), a large float32
  gemm on -t cuda gets a register tile whose inputs are staged in LOCAL memory (`uopc.stages.local_staging`). A long row
  reduction that no output axis reads contiguously (a row sum, softmax, layernorm) gets a workgroup
  per row whose threads share the row's reductions and its sibling output loops, a number of threads
  chosen from the row's length (`uopc.stages.gpu_rows`). Another reduction over output axes (a float32
  gemm, a convolution, attention's products) gets register tiles, unrolls and a workgroup over several
  output axes (`uopc.stages.gpu_schedule`); one that cannot (a short row's softmax) a row of a warp. A
  transposing elementwise kernel gets its threads along its inputs' contiguous axis
  (`uopc.stages.gpu_transpose`). Otherwise (elementwise) a workgroup along the contiguous output axis
  (LOCAL) and 4-wide vectors per thread (UPCAST)."""
  from uopc.stages.tc_opt import tensor_core_heuristics  # they build on this module's helpers
  from uopc.stages.local_staging import staged_gemm
  from uopc.stages.ragged_axes import pad_ragged_elementwise, pad_ragged_output
  if tensor_core_heuristics(plan) or staged_gemm(plan): return
  pad_ragged_output(plan)
  from uopc.stages.gpu_rows import GROUP_SHORT, row_reduction  # these build on this module's helpers
  from uopc.stages.gpu_schedule import tiled_reduction
  if row_reduction(plan) or tiled_reduction(plan) or row_reduction(plan, GROUP_SHORT): return
  inner = _contiguous_output(plan)
  if inner is None:
    _threaded_loop(plan)
    return
  from uopc.stages.gpu_transpose import transposed_elementwise
  if transposed_elementwise(plan, inner): return
  pad_ragged_elementwise(plan, inner)
  plan.split_by_first(inner, (4,), AxisType.UPCAST)
  if isinstance(size := plan.size(inner), int) and not any(size % k == 0 for k in (256, 128, 64)):
    # a short or odd contiguous axis (a 28-wide image row: 7 vectors) gives fewer than two warps: the workgroup
    # spans the next axes too (batch-norm's normalization of 8 x 64 x 28 x 28 ran one thread a workgroup: 0.07 ms;
    # a bitonic sort's stages of rows of 128, 32 threads)
    from uopc.stages.gpu_schedule import GPU_WORKGROUP_ELEMENTWISE, _workgroup
    _workgroup(plan, [inner], GPU_WORKGROUP_ELEMENTWISE, GPU_WORKGROUP_ELEMENTWISE)
    return
  plan.split_by_first(inner, (256, 128, 64, 32, 16, 8, 4, 2), AxisType.LOCAL)


GPU_REDUNDANT_REDUCE = 64  # reduce iterations each thread of a threaded output loop may repeat (`_threaded_loop`)


def _threaded_loop(plan: _Planner) -> None:
  """An output loop nested in a short fused reduction's loops (a squeeze-excitation's scale, sigmoid of an
  8-term sum per channel, applied to the channel's 14 x 14 pixels) gets threads as an elementwise axis does:
  4-wide vectors along it, a workgroup over it and the GLOBAL axes. Each thread runs the reduction itself
  (at most GPU_REDUNDANT_REDUCE iterations), where the loop ran serially in one thread per channel (H100:
  4 x 32 channels, 128 threads of 196 pixels)."""
  axes, strides = kernel_axes(plan.sink), _store_strides(plan.sink)
  loop = next((i for i in plan.axes(AxisType.LOOP) if strides.get(axes[i]) == 1), None)
  reduced = [plan.size(i) for i in plan.axes(AxisType.REDUCE)]
  if loop is None or not reduced or not all(isinstance(n, int) for n in reduced): return
  iterations = 1
  for n in reduced: iterations *= n
  if iterations > GPU_REDUNDANT_REDUCE: return
  from uopc.stages.gpu_schedule import GPU_WORKGROUP_ELEMENTWISE, _workgroup
  plan.split_by_first(loop, (4,), AxisType.UPCAST)
  _workgroup(plan, [loop], GPU_WORKGROUP_ELEMENTWISE, GPU_WORKGROUP_ELEMENTWISE)


def plan_opts(sink: UOp, caps: TargetCaps) -> tuple[Opt, ...]:
  """The opts the hand-written heuristics pick for a typed kernel (only legal ones)."""
  plan = _Planner(sink, caps)
  if caps.gpu: _gpu_heuristics(plan)
  else:
    from uopc.stages.cpu_schedule import cpu_heuristics  # it builds on this module's helpers
    cpu_heuristics(plan)
  return tuple(plan.opts)
