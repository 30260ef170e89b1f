"""Rangeify's fusion checks (uopc.stages.rangeify): while a kernel is lowered, whether a value it computes
inline should instead be realized into a buffer of its own. Each check raises `_Unfused` (or `_Nested`)
naming the value; Rangeify then lowers the whole program again with it realized, so the checks only ever
add realizations, and the program they end with is the first in which none raises.

- check_fused: a REDUCE read again (by several consumers or through a broadcast) fuses into one kernel
  only at an index of a prefix of its output loops that names each of its elements about once;
- check_beside (GPU): such a REDUCE read at fewer than all the output loops is realized where the loops
  beside it would stay off the grid with no workgroup row to share them;
- check_reread: a REDUCE lowered at several indices in one kernel (slices of one matmul, LSTM gates from one
  product) is realized where that runs NESTED_MIN or more iterations of its loop again per output;
- check_repeats: an expensive elementwise value (`uopc.stages.fusion_cost`) computed again per iteration
  of a loop around a reduction (on a CPU also of an output loop outside one it depends on) is realized (on
  a GPU, unless that reduction folds into a gather: `unfuse`); index arithmetic never is;
- check_nested (GPU): a long REDUCE inside another reduction's loop is realized;
- _term_instead: where such a REDUCE holds one value per iteration of the loop around it, the term of that
  outer reduction is realized instead (a loss's per-row term: one kernel of rows).
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.fusion_cost import elementwise_cost, repeats_expensive_work
from uopc.symbolic import simplify
from uopc.uop import UOp

if TYPE_CHECKING:
  from uopc.stages.rangeify import _Rangeify


class _Unfused(Exception):
  """A REDUCE tried fused that does not fuse (see `_Kernel.check_fused`), or an elementwise value whose
  fusion repeats expensive work (`_Kernel.check_repeats`): lower again with it realized."""

  def __init__(self, reduce: UOp):
    super().__init__()
    self.reduce = reduce


class _Nested(Exception):
  """A long REDUCE lowered inside another reduction's loop on a GPU: lower again with it realized."""

  def __init__(self, reduce: UOp):
    super().__init__()
    self.reduce = reduce


NESTED_MIN = 256  # elements of a nested reduction from which a GPU gets it realized (gpu_rows.GROUP_MIN: a workgroup's)
REREAD_MAX = 8  # indices a fused REDUCE's loop is lowered at in one kernel, at most, however short it is
FANOUT_MAX = 32  # indices (with their gates) any elementwise value is lowered at in one kernel, at most (check_fanout)
FEW_OUTPUTS = 4 * NESTED_MIN  # outputs of a kernel too few for a short nested reduction's NESTED_MIN repeats in each


def _ranges(idx: tuple[UOp, ...], valid: UOp | None) -> tuple[UOp, ...]:
  """The RANGEs an index (and its validity) depends on."""
  return tuple(r for r in UOp(Ops.SINK, dtypes.void, idx + ((valid,) if valid is not None else ())).toposort() if r.op is Ops.RANGE)


def _below_reshapes(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u


class FusionChecks:
  """The checks of the module docstring, mixed into Rangeify's _Kernel (its program, output loops and the
  loops around the reductions it lowers)."""
  program: "_Rangeify"
  outputs: tuple[UOp, ...]
  enclosing: list[tuple[UOp, ...]]
  beside: list[tuple[UOp, set[UOp], list[UOp]]]
  lowered_at: dict[UOp, set[tuple[UOp, ...]]]
  alu_path: list[UOp]
  reduce_outers: list[tuple[UOp, ...]]
  deferred: list[list[UOp]]

  def check_fused(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None, ranges: list[UOp] | None = None) -> None:
    """A fused REDUCE must be read by this kernel only, at an index that depends on the outermost output
    loops alone: else its reduction would run again for each iteration of a loop it does not depend on.
    Nor may those loops iterate several times for each of its elements where that repeats a long
    reduction (`repeats_expensive_work`): an index that merges loops (group norm's statistics, read at
    (c * 1024 + y * 32 + x) // 8192) would run an 8192-element reduction again per merged iteration.
    On a GPU see `check_beside`."""
    deps = set(_ranges(idx, valid))
    if deps != set(self.outputs[:len(deps)]) or self.program.fused_in.setdefault(u, self) is not self: raise _Unfused(u)
    if self.program.realize_nested and ranges is not None and len(deps) < len(self.outputs): self.beside.append((u, deps, ranges))
    sizes = [r.src[0].arg if r.src[0].op is Ops.CONST else None for r in deps]
    if None in sizes or not all(isinstance(d, int) for d in u.shape + u.src[0].shape): return
    elements = prod(u.shape)
    if repeats_expensive_work(prod(u.src[0].shape) // elements, [prod(sizes) // elements]): raise _Unfused(u)

  def check_reread(self, u: UOp, idx: tuple[UOp, ...], ranges: list[UOp]) -> None:
    """A fused REDUCE whose loop is lowered at another index of the same kernel (an LSTM's four gates, slices
    of one product `x @ w` read side by side) runs that loop again for each index: where that repeats
    NESTED_MIN iterations or more per output it is realized instead, computed once per element by a kernel
    of its own (and a product there gets its tiles), and read back at each index; with it the elementwise
    values of its shape directly above it (a sum of two products and a bias: one kernel)."""
    at = self.lowered_at.setdefault(u, set())
    at.add(idx)
    if len(at) < 2 or not all(r.src[0].op is Ops.CONST for r in ranges): return
    if (len(at) - 1) * prod(r.src[0].arg for r in ranges) < NESTED_MIN and len(at) <= REREAD_MAX: return
    top = u  # the elementwise values right above it, of its size, are realized with it (x @ wx + h @ wh + b)
    for v in reversed(self.alu_path):
      if prod(v.shape) != prod(u.shape) or top not in map(_below_reshapes, v.src): break
      top = v
    raise _Unfused(top)

  def check_beside(self, value: UOp) -> None:
    """On a GPU, a reduction fused at fewer than all the output loops leaves the others beside it, off the
    grid (Optimize's type_axes): a workgroup row (uopc.stages.gpu_rows) shares them among its threads, or
    each thread runs a short row alone. Realized instead, so that every output loop goes on the grid: one
    read at no output loop (a whole tensor's mean: one workgroup would run the kernel); one whose loops are
    too short for a workgroup row (under NESTED_MIN each) where its reduction or the output loops beside it
    are long (NESTED_MIN or more: statistics over a transposed 32 x 32; a split layernorm's total of 4
    partials beside its 64 x 256 outputs); and one beside an output loop that holds a reduction of its own
    (a masked mean's count of 128 per row, beside the sum of each of its 768 columns). A reduction's loops
    count as Optimize will see them, adjacent ones that walk memory as one merged (`value`, the kernel's lowered
    value, merged by uopc.stages.merge_axes: an instance norm's 32 x 32 statistics are rows of 1024)."""
    if not self.beside: return
    from uopc.stages.merge_axes import merge_reduce_axes  # it builds on Optimize's helpers, which import Rangeify's
    merged = {r.arg: r.src[0].arg for r in merge_reduce_axes(simplify(UOp(Ops.SINK, dtypes.void, (value,)))).toposort()
              if r.op is Ops.RANGE and r.src[0].op is Ops.CONST}
    def size(r: UOp) -> int: return r.src[0].arg if r.src[0].op is Ops.CONST else NESTED_MIN
    for u, deps, ranges in self.beside:
      row = max(merged.get(r.arg, size(r)) for r in ranges) >= NESTED_MIN  # a workgroup row can take it
      long = prod(map(size, ranges)) >= NESTED_MIN or prod(size(r) for r in self.outputs if r not in deps) >= NESTED_MIN
      if not deps or (long and not row) or any(set(outer) - deps for outer in self.reduce_outers if set(outer) & set(self.outputs)):
        raise _Unfused(u)

  def check_repeats(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> None:
    """An elementwise value computed inside a reduction loop is computed again for each loop around
    that reduction its index does not depend on: realize it when that repeats expensive work. On a CPU so
    is one outside reductions broadcast over an output loop outside a loop it depends on (the compiler
    hoists it out of the loops inside): RoPE's cos and sin of (position, frequency), broadcast over 12 heads,
    a 128 x 32 table each instead of 12 times the transcendentals. On a GPU its threads recompute it (a
    kernel for the table would add a launch to a kernel of a few microseconds)."""
    deps = set(_ranges(idx, valid))
    if self.enclosing: loops = self.enclosing[-1]
    elif self.program.cpu: loops = self.outputs[:max((i for i, r in enumerate(self.outputs) if r in deps), default=0)]
    else: return
    repeats = [r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0] for r in loops if r not in deps]
    if repeats and repeats_expensive_work(elementwise_cost(u, self.program.costs, self.program.cpu), repeats): self.unfuse(u)

  def check_fanout(self, u: UOp) -> None:
    """An elementwise value lowered at more than FANOUT_MAX indices of one kernel is realized: a network of
    compare-exchanges reads each stage at two indices of the one before (a bitonic sort's 10 stages of 16, and
    its backward pass: 2^10 indices of the first, which took more than 10 minutes to lower for a 3 x 12 topk's
    gradient); realized, each stage is computed once and read back."""
    self.fanout[u] = self.fanout.get(u, 0) + 1
    if self.fanout[u] > FANOUT_MAX: raise _Unfused(u)

  def unfuse(self, u: UOp) -> None:
    """Realize u; on a GPU, inside a reduction that may fold into a loop-free form (a one-hot sum: a gather),
    only once that reduction turns out to keep its loop (`deferred`): folded, u is read at a few gathered
    indices (bilinear upsampling in one kernel instead of two: on a GPU the second launch costs more than
    the repeated gathers; a CPU's realized rows are vector loads, 0.31 ms against 0.65 fused)."""
    if self.deferred and self.program.realize_nested: self.deferred[-1].append(u)
    else: raise _Unfused(u)

  def check_nested(self, u: UOp, ranges: list[UOp], outer: tuple[UOp, ...]) -> None:
    """On a GPU, a long reduction whose index moves with another reduction's loop is realized (see the
    module docstring). So is a short one whose repeats over the enclosing reductions' loops add up to
    NESTED_MIN iterations or more in a kernel of fewer than FEW_OUTPUTS outputs: its few threads would run
    them one after another (a contrastive loss's mean over 32 rows of 32-term sums: 1024 steps in one
    thread; a spatial softmax's expected coordinates, 2 x 128 outputs of 32 x 32 terms), where realized its
    rows run side by side."""
    if not self.program.realize_nested or not any(r.arg[1] is AxisType.REDUCE for r in outer): return
    if not all(r.src[0].op is Ops.CONST for r in ranges): return
    n = prod(r.src[0].arg for r in ranges)
    if n >= NESTED_MIN: raise _Nested(u)
    repeats = [r.src[0].arg if r.src[0].op is Ops.CONST else NESTED_MIN for r in outer if r.arg[1] is AxisType.REDUCE]
    outputs = prod(r.src[0].arg if r.src[0].op is Ops.CONST else NESTED_MIN for r in self.outputs)
    if n * prod(repeats) >= NESTED_MIN and outputs < FEW_OUTPUTS: raise _Nested(u)


def _term_instead(term: UOp, inner: UOp, loops: list[UOp]) -> UOp | None:
  """A reduction `inner` found nested in the reduction of `term` over `loops`, or read there where it cannot
  fuse (on a GPU): realize `term` instead where `inner` holds at most one value per iteration of those
  loops (a per-row statistic in a sum over rows) and `term` no more elements than `inner`: a loss's per-row
  term over its row's max, sum and one-hot pick is one kernel of rows, each row's reductions fused in it at
  the row's index, instead of a kernel per reduction (cross-entropy: 5 kernels -> 2). The term is taken below
  its PERMUTEs and RESHAPEs (a transposed copy would be one more kernel); None where it is `inner` itself."""
  while term.op in (Ops.PERMUTE, Ops.RESHAPE): term = term.src[0]
  if inner.op is not Ops.REDUCE or term.op is Ops.REDUCE or not all(isinstance(d, int) for d in term.shape + inner.shape): return None
  if any(r.src[0].op is not Ops.CONST for r in loops) or prod(inner.shape) > prod(r.src[0].arg for r in loops): return None
  return term if prod(term.shape) <= prod(inner.shape) else None
