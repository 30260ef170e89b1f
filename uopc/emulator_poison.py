"""Poison in the emulator: the lanes whose value is a float-to-int CAST out of range.

SPEC-NOTES makes such a cast undefined, as in C, where an expression that is not evaluated cannot be
undefined. In the IR a WHERE reads both of its arms, so the arm it does not choose is computed but never
used: tinygrad's T5 relative-position bucket casts log(0) = -inf to int32 for the distance 0, in the arm
its `where` discards. The emulator therefore treats such a lane's value as poison (as LLVM's fptosi does,
and as every target computes it: some value, never a trap) and reports the undefined behaviour, at the
CAST, only where a poisoned lane is used: stored, read as an address, a gate, a loop bound or a branch
condition, or fed to an op that does not pass it on lane by lane.

Invariant: a poison mask has its value's shape; the lanes a WHERE does not choose drop their arm's poison.
"""
from __future__ import annotations

import numpy as np

from uopc.ops import GroupOp, Ops

# the sources of these ops that a poisoned lane may not reach: they decide what memory or control flow does
USES = {Ops.INDEX: (1,), Ops.STORE: (1, 2), Ops.LOAD: (1, 2), Ops.IF: (0,), Ops.RANGE: (0,)}
_LANEWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.STACK, Ops.GEP}  # poison flows through these, lane by lane


def fit(mask: np.ndarray, shape: tuple) -> np.ndarray:
  """mask broadcast to a value's shape (a per-thread scalar mask across a vector's lanes)."""
  mask = mask.reshape(mask.shape + (1,) * (len(shape) - mask.ndim)) if mask.ndim < len(shape) else mask
  return np.broadcast_to(mask, shape)


def used(u, poison: dict, active: np.ndarray):
  """(the poisoned source, a thread that uses it) where `u` uses a poisoned lane of an active thread, else None;
  every source of an op that is neither lane by lane nor in USES (a WMMA's fragments) counts as used."""
  if u.op in _LANEWISE: return None
  for i in USES.get(u.op, range(len(u.src))):
    if i < len(u.src) and (p := poison.get(u.src[i])) is not None:
      lanes = p[0].reshape(len(active), -1).any(axis=1) & active
      if lanes.any(): return u.src[i], int(np.flatnonzero(lanes)[0])
  return None


def propagate(u, values: dict, poison: dict, fresh: np.ndarray | None):
  """The poison of `u`'s value (mask, the CAST it comes from), or None: `fresh` is a CAST's own out-of-range lanes."""
  if fresh is not None and fresh.any(): return fresh, u
  src = [s for s in u.src if s in poison]
  if not src or u.op not in _LANEWISE or not isinstance(values.get(u), np.ndarray): return None
  value, origin = values[u], poison[src[0]][1]
  def mask(i: int) -> np.ndarray:
    s = u.src[i]
    return fit(poison[s][0], np.shape(values[s])) if s in poison else np.zeros(np.shape(values[s]), bool)
  if u.op is Ops.WHERE:
    cond = np.asarray(values[u.src[0]]).astype(bool)
    out = fit(mask(0), value.shape) | np.where(fit(cond, value.shape), fit(mask(1), value.shape), fit(mask(2), value.shape))
  elif u.op is Ops.STACK: out = np.stack([mask(i) for i in range(len(u.src))], axis=1)
  elif u.op is Ops.GEP:
    lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
    out = fit(mask(0), np.shape(values[u.src[0]]))[:, list(lanes)]
    out = out[:, 0] if value.ndim == 1 else out
  elif u.op is Ops.BITCAST: out = fit(mask(0).reshape(len(value), -1).any(axis=1), value.shape)
  else: out = np.logical_or.reduce([fit(mask(i), value.shape) for i in range(len(u.src))])
  return (out, origin) if out.any() else None
