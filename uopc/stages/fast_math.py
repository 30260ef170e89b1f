"""What --fast-math allows before Rangeify: float16/bfloat16 products kept exact where they are widened.

A float16 (or bfloat16) MUL that a CAST to float32 or float64 reads is, by the IR, the product rounded to
half precision and then widened: `a.matmul(b, dtype=dtypes.float)` of float16 operands, as
tinygrad writes it (`(a * b).cast(float).sum()`). Under --fast-math it becomes the product of the widened
operands, `CAST(a) * CAST(b)`: the exact product (11 x 11 significant bits fit float32's 24; bfloat16's
8 x 8 too), which is what tensor cores and tinygrad's CPU backend compute. The sum is then a plain float32
gemm of converted operands: the CPU targets convert each operand once instead of rounding every product
(two conversions per product), and on -t cuda the TC opt, which takes `acc + CAST(a) * CAST(b)`, puts it on
the tensor cores.

Invariant: without --fast-math nothing here runs; with it, only what a widening CAST of a half-precision MUL
reads changes (other uses of the MUL keep its rounding), to a value at least as accurate (never an explicit `x.cast(half).cast(float)` of a float value,
which a program writes to round on purpose).
"""
from __future__ import annotations

from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.uop import UOp

_HALVES = (dtypes.float16, dtypes.bfloat16)
_WIDE = (dtypes.float32, dtypes.float64)
_VIEWS = (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP)


def _widened(x: UOp, dt) -> UOp:
  """x converted to dt beneath its views (a matmul's operand is a reshaped, permuted, expanded PARAM): the
  conversion reads the buffer in its own layout, so a CPU target converts it once as it is stored."""
  if x.op in _VIEWS: return x.replace(dtype=dt, src=(_widened(x.src[0], dt),) + x.src[1:])
  return UOp(Ops.CAST, dt, (x,))


def _exact_product(u: UOp, m: UOp) -> UOp | None:
  if u.dtype not in _WIDE or m.dtype not in _HALVES: return None
  return UOp(Ops.MUL, u.dtype, tuple(_widened(x, u.dtype) for x in m.src))


_RULES = Rules([(Pat(Ops.CAST, src=(Pat(Ops.MUL, name="m"),), name="u"), _exact_product)])


def exact_half_products(sink: UOp) -> UOp:
  """`sink` with every half-precision product that is widened computed exactly (module docstring)."""
  return graph_rewrite(sink, _RULES, bottom_up=True)
