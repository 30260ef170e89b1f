"""The canonical form of an accumulator update: `acc[i] = op(acc[i], v)`, the LOAD of the accumulator a
direct source of the op. Rangeify writes updates that way; symbolic's integer reassociation may then bury
the load inside a chain of the same op (`acc + (3x + 1)` becomes `(3x + acc) + 1`, exact for wrapping
integers), which Optimize's heuristics and Expand's unrolled folds do not recognise as a reduction (Expand
refused it: "a STORE does not depend on the UNROLL axes its value depends on").

`accumulator_first` puts the load back on top: the chain's other terms, in their order, become `v`. Optimize
applies it before its heuristics look and again after the opts (whose folding of the indices simplifies the
kernel again: a PADTO of overlapping tiles re-buried `acc + (3x + 1)`, tinygrad fuzzer seed 3131). Only
where regrouping is exact: integer ADD and MUL (wrapping arithmetic is associative and commutative), and
MAX of any dtype. A float chain is left alone (symbolic does not reassociate floats).
"""
from __future__ import annotations

from uopc.dtype import AddrSpace, PtrDType
from uopc.ops import Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.uop import UOp

_REGROUPABLE = (Ops.ADD, Ops.MUL, Ops.MAX)


def _root_buffer(u: UOp) -> UOp:
  while u.op in (Ops.INDEX, Ops.AFTER) and u.src: u = u.src[0]
  return u


def _terms(u: UOp, op: Ops) -> list[UOp]:
  """The leaves of a chain of `op` (same dtype), left to right."""
  if u.op is not op: return [u]
  return [t for s in u.src for t in (_terms(s, op) if s.dtype is u.dtype else [s])]


def _is_acc_load(t: UOp, acc: UOp, idx: UOp) -> bool:
  return t.op is Ops.LOAD and t.src[0].op is Ops.INDEX and _root_buffer(t.src[0]) is acc and t.src[0].src[1:] == idx.src[1:]


def _accumulator_on_top(st: UOp) -> UOp | None:
  idx, val = st.src[0], st.src[1]
  if idx.op is not Ops.INDEX or val.op not in _REGROUPABLE or not (val.dtype.scalar.is_int() or val.op is Ops.MAX): return None
  acc = _root_buffer(idx)
  if not isinstance(acc.dtype, PtrDType) or acc.dtype.addrspace is not AddrSpace.REG: return None
  if any(_is_acc_load(s, acc, idx) for s in val.src): return None  # canonical already
  terms = _terms(val, val.op)
  loads = [t for t in terms if _is_acc_load(t, acc, idx)]
  if len(loads) != 1: return None
  rest = [t for t in terms if t is not loads[0]]
  v = rest[0]
  for t in rest[1:]: v = UOp(val.op, val.dtype, (v, t))
  return st.replace(src=(idx, UOp(val.op, val.dtype, (loads[0], v))) + st.src[2:])


ACCUMULATOR_FIRST = Rules([(Pat(Ops.STORE, name="st"), _accumulator_on_top)])


def accumulator_first(sink: UOp) -> UOp: return graph_rewrite(sink, ACCUMULATOR_FIRST)
