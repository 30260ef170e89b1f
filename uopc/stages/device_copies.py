"""Moving data between devices, in single-device tensor ops: the building blocks of the multi-device
lowering (`uopc.stages.multi_device`).

A value on a tuple of devices is held as its *shards*, one single-device tensor per device (a MULTI's
sources): along the shard axis when it has one, else each device's whole copy. Invariants:
- The only cross-device op produced is `move(x, d)`: a LOAD to device `d` (seed 000's COPY), which
  Rangeify realizes into a buffer on `d` by a copy kernel. What it copies is a buffer, a view of one,
  or a CONTIGUOUS value computed on the source device first: a copy kernel never computes.
- Every composition here is seed 000's, in a fixed order (deterministic output): a gather is a STACK
  of the moved shards, permuted and reshaped into place; an allreduce is seed 000's reduce_scatter
  then allgather when the element count divides by the device count, else each device reducing all
  the moved shards (in device order).
- An allreduce of a known size is a CALL marked `("allreduce", op)` of that composition (its arguments
  the shards, its results each device's copy), so that the schedule knows it as one collective.
"""
from __future__ import annotations

from math import prod
from typing import Sequence

from uopc.dtype import dtypes
from uopc.ops import GroupOp, Ops
from uopc.uop import UOp, sint

def is_view(x: UOp) -> bool:
  """A buffer, a copy already made, or movement ops over one: copying it computes nothing."""
  while x.op in GroupOp.Movement: x = x.src[0]
  return x.op in GroupOp.Buffers or x.op in (Ops.LOAD, Ops.CONTIGUOUS, Ops.AFTER)


def realized(x: UOp) -> UOp:
  """`x` computed once into its own buffer unless it already is a view of one."""
  return x if is_view(x) else UOp(Ops.CONTIGUOUS, x.dtype, (x,))


def move(x: UOp, device: str) -> UOp:
  """`x` on `device`: itself when it is there, else a copy (LOAD to that device) of it realized."""
  return x if x.device == device else UOp(Ops.LOAD, x.dtype, (realized(x),), (device,))


def reshape(x: UOp, shape: tuple[sint, ...]) -> UOp:
  return x if x.shape == shape else UOp(Ops.RESHAPE, x.dtype, (x, UOp.shape_of(shape)))


def block(x: UOp, axis: int, j: int, n: int) -> UOp:
  """The j-th of n equal blocks of `x` along `axis` (a SHRINK)."""
  k = x.shape[axis] // n
  offsets = tuple(j * k if i == axis else 0 for i in range(len(x.shape)))
  sizes = tuple(k if i == axis else d for i, d in enumerate(x.shape))
  return UOp(Ops.SHRINK, x.dtype, (x, UOp.shape_of(offsets), UOp.shape_of(sizes)))


def concat(pieces: Sequence[UOp], axis: int) -> UOp:
  """Equal-shaped pieces joined along `axis`: STACK (a new leading axis), PERMUTE it before `axis`, RESHAPE."""
  if len(pieces) == 1: return pieces[0]
  shape = pieces[0].shape
  stacked = UOp(Ops.STACK, pieces[0].dtype, tuple(pieces))
  order = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, len(shape) + 1))
  permuted = UOp(Ops.PERMUTE, stacked.dtype, (stacked,), order) if axis else stacked
  return reshape(permuted, shape[:axis] + (shape[axis] * len(pieces),) + shape[axis + 1:])


def gather(shards: Sequence[UOp], axis: int, device: str) -> UOp:
  """The whole tensor on `device` from its shards along `axis`."""
  return concat([move(s, device) for s in shards], axis)


def _combine(op: Ops, values: Sequence[UOp]) -> UOp:
  out = values[0]
  for v in values[1:]: out = UOp(op, out.dtype, (out, v))
  return out


def _composed_allreduce(op: Ops, parts: Sequence[UOp], devices: Sequence[str]) -> list[UOp]:
  """seed 000's allreduce of realized `parts` (same shape, one per device): each device's copy."""
  n, shape = len(parts), parts[0].shape
  size = prod(shape) if all(isinstance(d, int) for d in shape) else None
  if size is None or size % n or size < n:  # each device reduces every shard
    return [_combine(op, [move(p, d) for p in parts]) for d in devices]
  # reduce_scatter (device j reduces chunk j of every shard), then allgather of the chunks
  flat = [reshape(p, (size,)) for p in parts]
  chunks = [realized(_combine(op, [move(block(f, 0, j, n), d) for f in flat])) for j, d in enumerate(devices)]
  return [reshape(gather(chunks, 0, d), shape) for d in devices]


def allreduce(op: Ops, shards: Sequence[UOp], devices: Sequence[str]) -> list[UOp]:
  """Each device's copy of `op` over all the devices' values (same shape, one per device). With a known
  size it is a CALL marked `("allreduce", op name)` whose body is the composition over its formals (shard
  j on devices[j]) and whose result j is device j's copy: Rangeify realizes the shards as its arguments
  and records the call site as a collective, which a launcher may run another way (NCCL)."""
  shape, dtype = shards[0].shape, shards[0].dtype
  if not all(isinstance(d, int) for d in shape): return _composed_allreduce(op, [realized(s) for s in shards], devices)
  formals = [UOp(Ops.PARAM, dtype, (UOp.shape_of(shape),), (j, f"shard{j}", d)) for j, d in enumerate(devices)]
  body = UOp(Ops.TUPLE, dtypes.void, tuple(_composed_allreduce(op, formals, devices)))
  call = UOp(Ops.CALL, dtypes.void, (body, *shards), ("allreduce", op.name))
  return [UOp(Ops.GETTUPLE, dtype, (call,), j) for j in range(len(devices))]


def reshard(shards: Sequence[UOp], axis: int | None, devices: Sequence[str], target: Sequence[str]) -> list[UOp]:
  """A value held as `shards` (on `devices`, along `axis` or whole) as shards along axis 0 on `target`
  (as many devices): seed 000's COPY to a tuple device."""
  n = len(target)
  if axis == 0: return [move(s, d) for s, d in zip(shards, target)]
  if axis is None: return [move(block(s, 0, j, n), d) for j, (s, d) in enumerate(zip(shards, target))]
  return [gather([block(s, 0, j, n) for s in shards], axis, d) for j, d in enumerate(target)]


def scatter(x: UOp, target: Sequence[str]) -> list[UOp]:
  """A single-device value as shards along axis 0 on `target`."""
  return [move(block(x, 0, j, len(target)), d) for j, d in enumerate(target)]

