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
from uopc.uop import UOp


def rebuild(root: UOp, replace) -> UOp:
  """Rebuild `root` bottom-up: each node gets its rebuilt sources, then `replace(node)` may swap it.
  Iterative (deep graphs), and each shared node is visited once."""
  done: dict[UOp, UOp] = {}
  for u in root.toposort():
    new = u.replace(src=tuple(done[s] for s in u.src)) if u.src else u
    done[u] = replace(new)
  return done[root]


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """`root` with every node in `mapping` replaced, sharing untouched subgraphs."""
  return rebuild(root, lambda u: mapping.get(u, u))


def _formals(body: UOp) -> list[UOp]: return [u for u in body.toposort() if u.op is Ops.PARAM and u.src]


def _bind(fn: UOp) -> dict[UOp, UOp]:
  """PARAM k of the body -> argument k, checking that every formal has an argument of its shape."""
  args, mapping = fn.src[1:], {}
  for p in _formals(fn.src[0]):
    slot = p.arg[0]
    if not 0 <= slot < len(args):
      raise CompileError([error(None, f"FUNCTION has {len(args)} arguments but its body uses PARAM slot {slot}")])
    if args[slot].shape != p.shape:
      raise CompileError([error(None, f"FUNCTION argument {slot} has shape {args[slot].shape}, PARAM '{p.arg[1]}' expects {p.shape}")])
    mapping[p] = args[slot]
  return mapping


def _inline(u: UOp) -> UOp:
  if u.op is not Ops.GETTUPLE: return u
  target = u.src[0]
  if target.op is Ops.TUPLE: return target.src[u.arg]
  if target.op is Ops.FUNCTION and target.src[0].op is Ops.TUPLE:
    return substitute(target.src[0].src[u.arg], _bind(target))
  return u


def callify(sink: UOp) -> UOp:
  """Inline every FUNCTION reached through GETTUPLE; CALLs stay (with callified bodies and arguments)."""
  return rebuild(sink, _inline)
