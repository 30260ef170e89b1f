"""Contraction order: a sum over several axes of a product is summed one factor group at a time.

`Tensor.einsum("ij,jk,kl->il", a, w1, w2)` is, as tinygrad writes it, one REDUCE(ADD) over (j, k) of the
broadcast product a[i, j] * w1[j, k] * w2[k, l]: 128 x 256 x 256 x 128 terms for 128x256 and 256x256
operands, 4 000 times the work of the two matrix products it equals. Distributivity gives the same value
with less work: the factors that do not depend on a reduced axis r (here w2, for r = j) come out of r's sum,
sum_j sum_k a w1 w2 = sum_k (sum_j a w1) w2, and the inner sum is a tensor of the axes its factors span
(i, k) instead of all of them. This is the contraction order that opt_einsum (and so torch.einsum) picks.

For each REDUCE(ADD) whose source is, through at most one PERMUTE, a tree of MULs of the reduction's dtype
(numbers, not bools), every leaf of the product's rank: the leaves are the factors (an EXPAND's view where
the MULs broadcast it as well), and each spans the axes where its size is not 1. The axis r to sum first is the one whose split costs least: the factors spanning r
give the inner sum (REDUCE over r, realized: CONTIGUOUS), read by the rest of the reduction with the other
factors, which is split again the same way. A split is made only where it at least halves the terms: inner
(the product of the sizes of the axes its factors span) plus outer (all axes but r) at most half of the whole,
or, on a CPU, where the inner sum is a matrix product of two factors, at least a quarter fewer operations (a
term of n factors: n - 1 multiplies and an add): the bilinear form `einsum("bi,ij,bj->b", x, w, y)` sums x @ w
first, a tiled matrix product, then its rows times y (2 operations per term instead of 3, and the product's
schedule; 2 cores: 2.8 -> 0.21 ms for 128 x 256 operands. On an H100 the one kernel is launch-bound there:
0.0099 ms against 0.0120 for two). A plain matrix product (every factor's axes together span all: nothing to
gain) and a convolution are left as they are.

Exact for integers (wrapping arithmetic distributes); a float sum's terms are grouped differently, products
rounded as (sum of products) * factor instead of product * factor: the accuracy bar's reassociation, as the
two matrix products the user could have written.
"""
from __future__ import annotations

from math import prod

from uopc.ops import Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.uop import UOp

MIN_GAIN = 2  # a split must divide the terms summed by this much at least


def contraction_order(sink: UOp, fewer_products: bool = False) -> UOp:
  """Every sum of a product over several axes split as the module docstring says; `fewer_products` (CPU
  targets) also where the split only saves operations."""
  return graph_rewrite(sink, _RULES, bottom_up=True, ctx=fewer_products)


def _factors(u: UOp, dtype, peel: bool) -> list[UOp]:
  """The leaves of the MUL tree `u`; with `peel`, each EXPAND of the product's rank as the view it broadcasts."""
  if u.op is Ops.MUL and u.dtype == dtype: return [f for s in u.src for f in _factors(s, dtype, peel)]
  if peel and u.op is Ops.EXPAND and len(u.src[0].shape) == len(u.shape): return _factors(u.src[0], dtype, peel)
  return [u]


def _leaves(m: UOp, dtype) -> list[UOp]:
  """The factors of `m`, broadcast by the MULs themselves where every axis of m's stays spanned by some
  factor (an axis only an EXPAND gives is a sum of copies: those factors keep their EXPANDs)."""
  peeled = _factors(m, dtype, True)
  spanned = frozenset().union(*map(_span, peeled))
  return peeled if spanned == frozenset(a for a, d in enumerate(m.shape) if d != 1) else _factors(m, dtype, False)


def _contract(u: UOp, ctx: bool) -> UOp | None:
  op, axes = u.arg
  if op is not Ops.ADD or len(axes) < 2 or not (u.dtype.is_float() or u.dtype.is_int()): return None
  src, order = u.src[0], None
  if src.op is Ops.PERMUTE: src, order = src.src[0], tuple(src.arg)
  if src.op is not Ops.MUL or src.dtype != u.dtype: return None
  dims = src.shape
  if not all(isinstance(d, int) for d in dims): return None
  reduced = tuple(sorted(order[a] if order else a for a in axes))
  split = _split(_leaves(src, u.dtype), dims, reduced, u.dtype, ctx)
  if split is None: return None
  if order is None: return split
  return UOp(Ops.PERMUTE, u.dtype, (split,), order)


def _span(f: UOp) -> frozenset[int]: return frozenset(a for a, d in enumerate(f.shape) if d != 1)


def _product(factors: list[UOp], dtype) -> UOp:
  out = factors[0]
  for f in factors[1:]: out = UOp(Ops.MUL, dtype, (out, f))
  return out


def _split(factors: list[UOp], dims: tuple[int, ...], reduced: tuple[int, ...], dtype, fewer_products: bool) -> UOp | None:
  """The sum over `reduced` of the product of `factors` (each of rank len(dims)), split where that pays, else None."""
  if len(reduced) < 2 or any(len(f.shape) != len(dims) for f in factors): return None
  whole, best = prod(dims), None
  for r in reduced:
    inner = [f for f in factors if r in _span(f)]
    if not inner or len(inner) == len(factors): continue
    terms, outer = prod(dims[a] for a in frozenset().union(*map(_span, inner))), whole // dims[r]
    cost = terms + outer
    fewer_terms = MIN_GAIN * cost <= whole
    saves = fewer_products and len(inner) == 2 and 4 * (2 * terms + (len(factors) - 1) * outer) <= 3 * len(factors) * whole
    if (fewer_terms or saves) and (best is None or cost < best[0]): best = (cost, r, inner)
  if best is None: return None
  _, r, inner = best
  summed = UOp(Ops.CONTIGUOUS, dtype, (UOp(Ops.REDUCE, dtype, (_product(inner, dtype),), (Ops.ADD, (r,))),))
  rest = [summed] + [f for f in factors if r not in _span(f)]
  shape = tuple(1 if a == r else d for a, d in enumerate(dims))
  others = tuple(a for a in reduced if a != r)
  return _split(rest, shape, others, dtype, fewer_products) or UOp(Ops.REDUCE, dtype, (_product(rest, dtype),), (Ops.ADD, others))


_RULES = Rules([(Pat(Ops.REDUCE, src=(Pat.var(),), name="u"), lambda u, ctx: _contract(u, ctx))])
