"""GPU schedules of transposing elementwise kernels: an output whose contiguous axis is not its input's
(a permute from NCHW to NHWC, x.T.contiguous(), a head-first layout made token-first).

The elementwise schedule puts a workgroup's threads along the output's contiguous axis, 4 lanes each: its
stores are coalesced, but then each lane of such an input reads one element a whole row or plane away from
its neighbour's, and a warp's 128 loads touch 128 sectors (an NHWC permute of 8 x 64 x 56 x 56 with a scale
ran at 0.42x tinygrad's kernel on an H200). Here the threads go along an output axis that the transposed
inputs read contiguously instead (consecutive threads load consecutive elements of each input row), and each
thread takes TRANSPOSE_LANES lanes of the output's contiguous axis: its store is 32 contiguous bytes of float32,
a whole sector, so both sides move whole sectors.

The same axis leads a reduction's workgroup (`read_axis`, used by uopc.stages.gpu_schedule): a cumsum down a
tensor's columns, written block by block down them, reads its windows along x's rows (1000 x 64 on an H200:
0.066 ms with the threads down the columns, 64 floats apart).

Invariants: only elementwise kernels (no REDUCE axis) whose every transposed load reads contiguously along one
GLOBAL axis of known size; every opt goes through `_Planner`, so `--opts` can pin the schedule; the values and
their order are untouched (no reduction), only which thread computes which element.
"""
from __future__ import annotations

from uopc.ops import AxisType, Ops
from uopc.stages.optimize import _is_global, _memory_ops, kernel_axes, root_buffer
from uopc.stages.planner import _Planner, _strides

TRANSPOSE_LANES = (8, 4, 2)  # lanes of the output's contiguous axis a thread takes (the first that divides it): 8 x f32 = 32 bytes
TRANSPOSE_THREADS = 256      # threads of a workgroup along the inputs' contiguous axis at most (the largest divisor of its size)


def transposed_elementwise(plan: _Planner, inner: int) -> bool:
  """Schedule a transposing elementwise kernel (module docstring); False (nothing applied) when it is not one."""
  if plan.axes(AxisType.REDUCE) or (along := read_axis(plan, inner)) is None: return False
  n = len(kernel_axes(plan.sink))
  if not plan.split_by_first(inner, TRANSPOSE_LANES, AxisType.UPCAST): return False
  along += len(kernel_axes(plan.sink)) - n if along > inner else 0  # the split added an axis after inner
  size = plan.size(along)
  plan.split_by_first(along, [d for d in range(min(size, TRANSPOSE_THREADS), 1, -1) if size % d == 0][:1], AxisType.LOCAL)
  return True


def read_axis(plan: _Planner, inner: int) -> int | None:
  """The GLOBAL axis (of known size, not `inner`) along which every global load that reads across the
  output's contiguous axis (a coefficient other than 0 and 1 on it) reads contiguously; None when no load
  does so or no one axis serves them all."""
  axes = kernel_axes(plan.sink)
  forms = [_strides(u.src[0].src[1]) for u in _memory_ops(plan.sink) if u.op is Ops.LOAD and _is_global(root_buffer(u.src[0]))]
  if any(f is None for f in forms): return None
  across = [f for f in forms if f.get(axes[inner], 0) not in (0, 1)]
  if not across: return None
  return next((i for i in plan.axes(AxisType.GLOBAL) if i != inner and isinstance(plan.size(i), int)
               and all(f.get(axes[i]) == 1 for f in across)), None)
