"""Callify (seed 000): make a tensor program one stateless function.

`GETTUPLE(FUNCTION(TUPLE(v_0, ...), a_0, a_1, ...), i)` becomes `v_i` with each tensor PARAM of slot
k substituted by `a_k` (the body holds only PARAM references, so every PARAM in it is a formal).
Inner functions are inlined first (sources before users), so an inner body's formals are bound by
its own arguments before the outer substitution runs. A CALL stays opaque: it is a reusable kernel
the schedule calls (Rangeify compiles its body once); only its arguments and body are callified.
"""
from __future__ import annotations

from uopc.diagnostics import CompileError, error
from uopc.ops import Ops
from uopc.rewrite import Pat, Rules, graph_rewrite, substitute
from uopc.uop import UOp


def _formals(body: UOp) -> list[UOp]: return [u for u in body.toposort() if u.op is Ops.PARAM and u.src]


def bind_arguments(fn: UOp) -> dict[UOp, UOp]:
  """PARAM k of the body of a FUNCTION or CALL -> argument k, checking that every formal has an
  argument of its shape."""
  args, mapping = fn.src[1:], {}
  for p in _formals(fn.src[0]):
    slot = p.arg[0]
    if not 0 <= slot < len(args):
      raise CompileError([error(None, f"{fn.op.name} has {len(args)} arguments but its body uses PARAM slot {slot}")])
    if args[slot].shape != p.shape:
      raise CompileError([error(None, f"{fn.op.name} argument {slot} has shape {args[slot].shape}, PARAM '{p.arg[1]}' expects {p.shape}")])
    mapping[p] = args[slot]
  return mapping


CALLIFY_RULES = Rules([
  (Pat(Ops.GETTUPLE, src=(Pat(Ops.TUPLE, name="tup"),), name="g"), lambda g, tup: tup.src[g.arg]),
  (Pat(Ops.GETTUPLE, src=(Pat(Ops.FUNCTION, src=(Pat(Ops.TUPLE),), rest=True, name="fn"),), name="g"),
   lambda g, fn: substitute(fn.src[0].src[g.arg], bind_arguments(fn))),
])


def callify(sink: UOp) -> UOp:
  """Inline every FUNCTION reached through GETTUPLE; CALLs stay (with callified bodies and arguments)."""
  return graph_rewrite(sink, CALLIFY_RULES, bottom_up=True)
