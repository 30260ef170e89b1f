"""Fusion cost: when computing an elementwise value inside its consumer repeats work.

Rangeify fuses elementwise chains into the kernel that reads them. Inside a reduction loop that
costs nothing extra when the value varies with every output loop, but a value read through a
broadcast over an output axis is recomputed once per iteration of that axis: GELU fused into the
second matmul of an MLP runs once per output column. `repeats_expensive_work` says when that is worse
than a round trip through memory: the value costs at least EXPENSIVE (a transcendental, a division,
or a long chain; weights below) and is recomputed more than A_FEW times. Rangeify then realizes it
into a buffer of its own, computed once per element. Cheap chains (a bias add and ReLU) stay fused.

On CPU targets a widening CAST from float16 or bfloat16 weighs EXPENSIVE too (`CPU_WEIGHT`): inside a
reduction it runs on the same vector ports as the products and sums, once per output element it
meets. A half-precision gemm's operands (widened by `uopc.stages.cpu_graph`) are then converted once
into float32 buffers and the gemm reads floats: half_matmul 256, --cpu native, one thread, 0.64 -> 0.47
ms against 0.15 ms for float32 (the rest is each product's rounding to float16, which the program asks
for; tests/bench/RESULTS.md, issue 19).

Index arithmetic (an integer or bool value computed from constants alone: aranges and their arithmetic, no
buffer read, no THREEFRY; bilinear interpolation's source columns, clamp(..) // 256, and their masks) is
never realized for its cost: computed again per use it lowers to an expression of the loop indices whose
range Symbolic knows, so the gates of the loads it addresses fold; realized, it would be a gather of unknown
values, every load it addresses gated (64x64 -> 128x128 bilinear upsampling of 32 channels, 2 cores: 0.54
-> 0.30 ms). `reads_something` tells the two apart.
"""
from __future__ import annotations

import math

from uopc.dtype import dtypes
from uopc.ops import GroupOp, Ops
from uopc.uop import UOp

EXPENSIVE = 8
A_FEW = 4
_WEIGHT = {Ops.EXP2: 8, Ops.LOG2: 8, Ops.SIN: 8, Ops.POW: 16, Ops.SQRT: 4, Ops.RECIP: 4, Ops.DIV: 4,
           Ops.IDIV: 4, Ops.MOD: 4, Ops.FLOORDIV: 6, Ops.FLOORMOD: 6, Ops.THREEFRY: 16}
CPU_WEIGHT = EXPENSIVE  # a CAST from a half-precision float on a CPU target
_HALVES = (dtypes.float16, dtypes.bfloat16)
_STOP = (Ops.REDUCE, Ops.CONTIGUOUS, Ops.LOAD, Ops.PARAM, Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.CALL, Ops.GETTUPLE)


def elementwise_cost(u: UOp, memo: dict[UOp, int], cpu: bool = False) -> int:
  """The weighted count of the ops computed to get one element of `u`, down to its reductions and
  buffers (a shared subexpression counted once per use: an upper bound); `cpu`: with the CPU weights
  (one memo per choice)."""
  if u in memo: return memo[u]
  if u.op in _STOP: cost = 0
  else:
    own = _WEIGHT.get(u.op, 1) if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST) else 0
    if cpu and u.op is Ops.CAST and u.src[0].dtype in _HALVES: own = CPU_WEIGHT
    srcs = u.src[:1] if u.op in GroupOp.Movement else u.src
    cost = own + sum(elementwise_cost(s, memo, cpu) for s in srcs)
  memo[u] = min(cost, 1 << 20)
  return memo[u]


_READS = (Ops.PARAM, Ops.BUFFER, Ops.LOAD, Ops.BINARY, Ops.CALL, Ops.GETTUPLE, Ops.THREEFRY)


def reads_something(sink: UOp) -> dict[UOp, bool]:
  """For each value of the program: whether it reads a buffer or draws random bits (a float value, or one
  that does, is not index arithmetic)."""
  reads: dict[UOp, bool] = {}
  for u in sink.toposort(): reads[u] = u.dtype.scalar.is_float() or u.op in _READS or any(reads[s] for s in u.src)
  return reads


def repeats_expensive_work(cost: int, repeats: list) -> bool:
  """Is a value of this cost, recomputed once per combination of `repeats` (loop sizes, ints or
  symbolic), better realized?"""
  if cost < EXPENSIVE: return False
  n = math.prod(r if isinstance(r, int) else A_FEW + 1 for r in repeats)
  return n > A_FEW
