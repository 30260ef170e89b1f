"""Tensor-level rewrites for the CPU targets (c, llvm), run by Rangeify before it splits the program.

1. Long full reductions. A full reduction of SPLIT_MIN or more elements (every axis reduced, a
   multiple of SPLIT_CHUNKS elements) is split in two; so is one over reductions of reductions (each
   element a max or a sum of sums, which fusion puts in the one kernel: the mean over 1024 rows of each
   row's max over a 1024 x 1024 product of K = 16 ran 16M steps on one thread, 27x slower) whose
   reductions read SPLIT_MIN elements or more in all: the reductions of SPLIT_CHUNKS equal chunks,
   realized (a kernel whose chunks Optimize makes THREAD tasks: both cores read), then the reduction
   of those partials. The split changes the order of a float sum's additions, in a way fixed by
   SPLIT_CHUNKS alone (the same on every machine).
2. Half-precision arithmetic in float. ADD, SUB, MUL and DIV of float16 or bfloat16 values become the
   float32 op on the widened operands, rounded back once: `CAST(MUL(CAST(x) : f32, CAST(y) : f32)) : f16`.
   That is how both CPU renderers compute them already (C widens to float and rounds once; LLVM's
   fpext/fptrunc, and `round_bf16` for bfloat16), so no value changes (and float's 24 bits are at
   least 2p+2 for p = 11 and 8: one float op then one rounding is the correctly rounded result, tiny
   bfloat16 results in float's subnormal range aside; a product of two float16 values is exact). What
   changes is that each operand's widening is a value of its own: one widening per element read, which
   Rangeify's fusion cost (`uopc.stages.fusion_cost`, CPU weights) realizes into a float32 buffer when a
   reduction would convert it again for every output it meets. A float16 gemm then reads floats, with
   the float32 gemm's register tile, and converts only each product's rounding (half_matmul 256 with
   --cpu native on one thread: 0.64 ms converting the operands per use, 0.47 ms converted once, against
   0.15 ms for float32; tests/bench/RESULTS.md, issue 19).
"""
from __future__ import annotations

from math import prod

from uopc.dtype import dtypes
from uopc.ops import GroupOp, Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.uop import UOp

SPLIT_CHUNKS = 32     # chunks of a split full reduction: the THREAD tasks Optimize aims for
SPLIT_MIN = 1 << 17   # elements from which a full reduction is split: below, starting threads costs more

HALVES = frozenset({dtypes.float16, dtypes.bfloat16})
ROUNDED_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.DIV})  # the ops whose half result is a rounding


def cpu_graph(sink: UOp) -> UOp:
  """Both rewrites of the module docstring, on a callified tensor program."""
  return split_full_reductions(widen_half_arithmetic(sink))


def split_full_reductions(sink: UOp) -> UOp:
  """Each REDUCE of SPLIT_MIN or more elements to one value (see the module docstring) as the
  REDUCE of the CONTIGUOUS REDUCEs of its SPLIT_CHUNKS chunks, reshaped back to its shape."""
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo[s] for s in u.src)
    new = u if src == u.src else u.replace(src=src)
    dims = u.src[0].shape if u.op is Ops.REDUCE and len(u.src) == 1 else None
    if dims is not None and all(isinstance(d, int) for d in dims) and prod(u.shape) == 1 and prod(dims) % SPLIT_CHUNKS == 0 \
       and prod(dims) + _elements_reduced(u.src[0]) >= SPLIT_MIN:
      op, n = u.arg[0], prod(dims)
      chunks = UOp(Ops.RESHAPE, u.dtype, (src[0], UOp.shape_of((SPLIT_CHUNKS, n // SPLIT_CHUNKS))))
      partials = UOp(Ops.CONTIGUOUS, u.dtype, (UOp(Ops.REDUCE, u.dtype, (chunks,), (op, (1,))),))
      new = UOp(Ops.RESHAPE, u.dtype, (UOp(Ops.REDUCE, u.dtype, (partials,), (op, (0,))), UOp.shape_of(u.shape)))
    memo[u] = new
  return memo[sink]


def _elements_reduced(x: UOp) -> int:
  """Where x reads a reduction of a reduction (not through a CONTIGUOUS: that is realized), the elements every
  REDUCE under x reads in all, else 0 (one level of reductions under x: fusion realizes or threads them)."""
  stop = lambda v: () if v.op is Ops.CONTIGUOUS else v.src  # noqa: E731
  reduces = [v for v in x.toposort(stop) if v.op is Ops.REDUCE and len(v.src) == 1 and all(isinstance(d, int) for d in v.src[0].shape)]
  nested = any(r is not v and r.op is Ops.REDUCE for v in reduces for r in v.src[0].toposort(stop))
  return sum(prod(v.src[0].shape) for v in reduces) if nested else 0


def _widened(x: UOp) -> UOp:
  """CAST(x) : f32, the CAST under x's movement ops (it commutes with them, PAD's fill 0 included): the
  widening of a permuted or broadcast input is the widening of the input as it is laid out."""
  if x.op in GroupOp.Movement: return x.replace(dtype=dtypes.float32, src=(_widened(x.src[0]),) + x.src[1:])
  return UOp(Ops.CAST, dtypes.float32, (x,))


def _in_float(u: UOp) -> UOp | None:
  if any(s.dtype != u.dtype for s in u.src): return None
  return UOp(Ops.CAST, u.dtype, (UOp(u.op, dtypes.float32, tuple(_widened(s) for s in u.src)),))


_WIDEN = Rules([(Pat(ROUNDED_OPS, dtype=HALVES, name="u"), _in_float)])


def widen_half_arithmetic(sink: UOp) -> UOp:
  """float16/bfloat16 ADD/SUB/MUL/DIV as the float32 op between CASTs (see the module docstring)."""
  return graph_rewrite(sink, _WIDEN)
