"""The verifier's rules for the multi-device ops (seed 000's collectives section, tinygrad 0.14's forms).

Each rule is a generator of messages about one UOp, as in `uopc.verify` (whose table registers them);
the arity is checked before these run. Invariants stated here, relied on by the lowering
(`uopc.stages.multi_device`):
- MULTI(shard_0, ...) {axis}: shards of one dtype and shape, each on its own single device, axis None or an axis of the shards (tinygrad's MSTACK is a MULTI without an axis).
- MSELECT(x) {i}: x is on an n-tuple device and 0 <= i < n.
- ALLREDUCE(x) {(op, device)}: op is ADD, MAX or MUL; x is on an n-tuple device, and device (when
  given) is that device.
- REPLICATED(x) {k}: x is sharded on axis k, which has one row per device.
"""
from __future__ import annotations

from typing import Any, Iterator

from uopc.ops import Ops
from uopc.uop import UOp

REDUCE_OPS = (Ops.ADD, Ops.MAX, Ops.MUL)


def _is_int(x: Any) -> bool: return isinstance(x, int) and not isinstance(x, bool)


def check_multi(u: UOp) -> Iterator[str]:
  for i, s in enumerate(u.src):
    if s.dtype is not u.dtype: yield f"MULTI shard {i} is {s.dtype}, the MULTI {u.dtype}"
  shapes = [s.shape for s in u.src]
  if any(s != shapes[0] for s in shapes): yield "MULTI shards have different shapes"
  shape = shapes[0]
  if u.arg is not None and not (_is_int(u.arg) and (shape is None or 0 <= u.arg < len(shape))):
    yield f"MULTI axis must be None or an axis of the shards, got {u.arg!r}"
  devices = [s.device for s in u.src]
  if any(not isinstance(d, str) for d in devices): yield "each MULTI shard must be on a single device"
  elif len(set(devices)) != len(devices): yield f"MULTI shards share a device: {', '.join(devices)}"


def _tuple_device(u: UOp, what: str) -> Iterator[str]:
  if not isinstance(u.src[0].device, tuple): yield f"{what} needs a source on a tuple of devices, got device {u.src[0].device!r}"


def check_mselect(u: UOp) -> Iterator[str]:
  yield from _tuple_device(u, "MSELECT")
  d = u.src[0].device
  n = len(d) if isinstance(d, tuple) else 0
  if not (_is_int(u.arg) and (n == 0 or 0 <= u.arg < n)): yield f"MSELECT arg must be a device number below {n}, got {u.arg!r}"
  if u.dtype is not u.src[0].dtype: yield f"MSELECT has dtype {u.dtype}, its source {u.src[0].dtype}"


def check_allreduce(u: UOp) -> Iterator[str]:
  a = u.arg
  if not (isinstance(a, tuple) and len(a) == 2 and a[0] in REDUCE_OPS):
    yield f"ALLREDUCE arg must be (ADD|MAX|MUL, device), got {a!r}"
    return
  yield from _tuple_device(u, "ALLREDUCE")
  if a[1] is not None and a[1] != u.src[0].device:
    yield f"ALLREDUCE to {a[1]!r} of a value on {u.src[0].device!r}: it reduces onto the devices it reads"
  if u.dtype is not u.src[0].dtype: yield f"ALLREDUCE has dtype {u.dtype}, its source {u.src[0].dtype}"


def check_replicated(u: UOp) -> Iterator[str]:
  src, k = u.src[0], u.arg
  if u.dtype is not src.dtype: yield f"REPLICATED has dtype {u.dtype}, its source {src.dtype}"
  if not _is_int(k): yield f"REPLICATED arg must be an axis, got {k!r}"; return  # noqa: E702
  yield from _tuple_device(u, "REPLICATED")
  if not isinstance(src.device, tuple) or src.shape is None: return
  if src.axis != k: yield f"REPLICATED({k}) of a value sharded on axis {src.axis}: it must be sharded on axis {k}"
  elif src.shape[k] != len(src.device):
    yield f"REPLICATED({k}) needs one row per device on axis {k}: {len(src.device)} devices, size {src.shape[k]}"
