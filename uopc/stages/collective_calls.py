"""The call sites of collective bodies in Rangeify (`uopc.stages.device_copies.allreduce` makes them):
which results go straight into the buffer a STORE writes them to, and the `Collective` a site records.

Invariants:
- A collective CALL is a CALL whose arg is `(kind, op)` with kind in KINDS.
- Result k of a collective call is *forwarded* into buffer B when a STORE (ungated) writes B with that
  result as it is (through movement ops that keep its elements in order: `_same_elements`), B is a PARAM or BUFFER of the
  result's dtype, device and element count, and nothing else in the program reads or writes B (only
  AFTERs that name that STORE). Then the call site binds B as its result buffer and the STORE needs no
  kernel: a collective writes its output argument directly, whichever way a launcher runs it.
"""
from __future__ import annotations

from math import prod

from uopc.ops import GroupOp, Ops
from uopc.uop import UOp, shape_values

KINDS = ("allreduce",)


def is_collective(c: UOp) -> bool:
  return c.op is Ops.CALL and isinstance(c.arg, tuple) and len(c.arg) == 2 and c.arg[0] in KINDS


def _same_elements(value: UOp) -> UOp | None:
  """The value whose elements `value` holds in the same order, under one movement op that keeps them: a
  RESHAPE, an EXPAND to its own shape, a SHRINK of one copy out of an EXPAND of size-1 axes; else None."""
  if value.op is Ops.RESHAPE or value.op is Ops.EXPAND and value.shape == value.src[0].shape: return value.src[0]
  if value.op is Ops.SHRINK and value.src[0].op is Ops.EXPAND:
    inner, offsets = value.src[0].src[0], shape_values(value.src[1])
    if inner.shape == value.shape and all(d == 1 or o == 0 for d, o in zip(inner.shape, offsets)): return inner
  return None


def _stored_result(value: UOp) -> UOp | None:
  """The GETTUPLE of a collective call that `value` is, under movement ops that keep its elements."""
  while (inner := _same_elements(value)) is not None: value = inner
  return value if value.op is Ops.GETTUPLE and is_collective(value.src[0]) else None


def _elements(shape) -> int | None:
  return prod(shape) if shape is not None and all(isinstance(d, int) for d in shape) else None


def forwarded(order: list[UOp]) -> dict[UOp, dict[int, UOp]]:
  """collective CALL -> {result index: the STORE its result is forwarded to} (see the module docstring)."""
  users: dict[UOp, list[UOp]] = {}
  for u in order:
    for s in u.src: users.setdefault(s, []).append(u)
  out: dict[UOp, dict[int, UOp]] = {}
  for st in order:
    if st.op is not Ops.STORE or len(st.src) != 2 or (g := _stored_result(st.src[1])) is None: continue
    target, call = st.src[0], g.src[0]
    if target.op not in GroupOp.Buffers or target.dtype != g.dtype or target.device != g.device: continue
    if _elements(target.shape) is None or _elements(target.shape) != _elements(g.shape): continue
    if any(u is not st and not (u.op is Ops.AFTER and st in u.src[1:]) for u in users.get(target, [])): continue
    out.setdefault(call, {}).setdefault(g.arg, st)
  return out
