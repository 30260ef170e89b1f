"""GPU: the contiguous output axis of a reduction whose size has no factor of 8 (a vocabulary of 50257 =
29 x 1733) is padded (PADTO) to a multiple of up to 64 before the tile heuristics run, so that they find the
factors their vectors, register tiles and workgroups need along it.

Without it that axis cannot be split: GPT-2's logits, 64 x 768 @ 768 x 50257 in float32, got one workgroup
per column, and ran at 6% of torch.matmul on an H100 (2.73 ms; 0.79 padded: tests/bench/RESULTS.md). The
padded iterations are masked (PADTO gates every LOAD and STORE inside the axis), so the results are those of
the unpadded kernel. A float32 gemm large enough for the staged schedule does not come here: that schedule
pads its ragged axes with overlapping tiles instead, which keep the loads ungated (`local_staging.staged_gemm`:
the logits 0.20 ms). Other ragged axes are left alone: a gemm's 197 rows padded to 256 with masks ran slower
(0.219 and 0.299 ms against 0.195 and 0.175) under the same register tiles.

An elementwise kernel's contiguous axis of RAGGED_MIN or more with no factor of ELEMENTWISE_BLOCK (a softmax's
division over 50257 classes once its reductions are their own kernels: uopc.stages.gpu_graph) is padded the same
way to a multiple of ELEMENTWISE_BLOCK, its workgroups' 64 threads of 4 lanes (else a prime size got one thread a
workgroup).

Invariants: only the contiguous GLOBAL axis (`_contiguous_output`) of known size, RAGGED_MIN or more, of a
kernel with a REDUCE axis is padded, to the largest of RAGGED_MULTIPLES that adds at most RAGGED_MAX_WASTE of its iterations; an
axis with a factor of 8 is left as it is, so kernels whose axes the heuristics can already split are unchanged.
"""
from __future__ import annotations

from uopc.ops import AxisType
from uopc.stages.optimize import Opt, OptOp
from uopc.stages.planner import _contiguous_output, _Planner

RAGGED_MULTIPLES = (64, 32, 16, 8)
RAGGED_MAX_WASTE = 1 / 4
ELEMENTWISE_BLOCK = 256  # an elementwise kernel's ragged contiguous axis is padded to a multiple of this (4 lanes x 64 threads)
RAGGED_MIN = 1024  # shorter axes keep their own divisors (a 28-wide image row is 7 threads of 4: gpu_schedule)


def pad_ragged_output(plan: _Planner) -> None:
  """PADTO the ragged contiguous output axis of a reducing kernel (module docstring); nothing where it is not."""
  if not plan.axes(AxisType.REDUCE) or (i := _contiguous_output(plan)) is None: return
  size = plan.size(i)
  if not isinstance(size, int) or size % 8 == 0 or size < RAGGED_MIN: return
  multiple = next((m for m in RAGGED_MULTIPLES if -size % m <= size * RAGGED_MAX_WASTE), None)
  if multiple is not None: plan.apply(Opt(OptOp.PADTO, i, multiple))


def pad_ragged_elementwise(plan: _Planner, i: int) -> None:
  """PADTO an elementwise kernel's ragged contiguous output axis i to a multiple of ELEMENTWISE_BLOCK (module
  docstring); nothing where 32 threads of 4 lanes divide it, where it is short, or where the padding would waste
  more than RAGGED_MAX_WASTE."""
  size = plan.size(i)
  if plan.axes(AxisType.REDUCE) or not isinstance(size, int) or size < RAGGED_MIN or size % ELEMENTWISE_BLOCK == 0: return
  if size % (ELEMENTWISE_BLOCK // 2) and -size % ELEMENTWISE_BLOCK <= size * RAGGED_MAX_WASTE:  # fewer than 32 threads of 4 lanes
    plan.apply(Opt(OptOp.PADTO, i, ELEMENTWISE_BLOCK))
