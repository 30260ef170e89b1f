"""Reduction loops cut to the iterations that their gate lets through.

A reduction whose body is `WHERE(gate, x, identity)` adds nothing at an iteration where the gate is
false. tinygrad's backward pass of a pooling window (so every convolution's input gradient) sums a
4 x 4 window of which a 3 x 3 kernel fills 3 x 3: the gate of tap 3 is false for every output (its
clauses `30*3 + h + 1 < 93` and `h + 1 - 3 >= 0` bound h to an empty interval). Rangeify asks
`trim(value, ranges, identity)` for each REDUCE it lowers to loops: a loop's last iterations whose
gate is false at every other index (`symbolic_gates.gate_false` of the gate with the loop index
made that constant) are dropped, the loop's RANGE replaced by a shorter one (same axis id).

Then the body's loads gated by clauses of that gate whose addresses stay inside their buffers over the (cut)
loops read ungated: the WHERE discards their value where the gate is false, and a gated load of an
address that does not move with the gated axes (a convolution's weight, read for a row of positions
of which the border ones are masked) becomes one vector-wide load instead of a masked gather.

Exact: only iterations that add the identity are removed, and their order among the others is kept;
an ungated load reads memory it may read, and its value is selected away where the gate is false.
"""
from __future__ import annotations

from typing import Callable

from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.rewrite import substitute
from uopc.symbolic import simplify
from uopc.symbolic_gates import clauses, gate_false
from uopc.uop import UOp

MAX_TRIES = 8  # iterations tried from the end of each loop


def _is_identity(u: UOp, identity) -> bool:
  return u.op is Ops.CONST and u.arg == identity and str(u.arg) == str(identity)  # +0.0, not -0.0


def trim(value: UOp, ranges: list[UOp], identity, size_of: Callable[[UOp], int | None]) -> tuple[UOp, list[UOp]]:
  """(value, ranges) with each loop cut to its gate's last possibly-true iteration and the loads that
  the gate needs not guard ungated (module doc); `size_of(index)` is the element count of the buffer an
  INDEX addresses (None where unknown)."""
  body = simplify(value)
  if body.op is not Ops.WHERE or not _is_identity(body.src[2], identity): return value, ranges
  gate, mapping, out = body.src[0], {}, []
  for r in ranges:
    n = r.src[0].arg if r.src[0].op is Ops.CONST else None
    keep = n
    while n is not None and keep > 1 and n - keep < MAX_TRIES and gate_false(simplify(substitute(gate, {r: UOp.const(dtypes.index, keep - 1)}))):
      keep -= 1
    if keep == n: out.append(r); continue  # noqa: E702
    mapping[r] = UOp(Ops.RANGE, r.dtype, (UOp.const(dtypes.index, keep),), r.arg)
    out.append(mapping[r])
  body = substitute(body, mapping) if mapping else body
  held = set(clauses(body.src[0]))  # a load whose gate's clauses the WHERE's all hold is true where it is selected
  ungated = {ld: ld.replace(src=ld.src[:1]) for ld in body.src[1].toposort() if ld.op is Ops.LOAD and len(ld.src) == 3
             and held.issuperset(clauses(ld.src[2])) and _inside(ld.src[0], size_of(ld.src[0]))}
  if not mapping and not ungated: return value, ranges
  return body.replace(src=(body.src[0], substitute(body.src[1], ungated), body.src[2])) if ungated else body, out


def _inside(index: UOp, size: int | None) -> bool:
  if size is None or index.op is not Ops.INDEX: return False
  lo, hi = simplify(index.src[1]).min_max
  return 0 <= lo and hi < size
