"""Sharded tinygrad tensors (`Tensor.shard`) -> uopc's multi-device programs: the exporter's conversion of
tinygrad 0.14's multi-device graph.

What tinygrad's lazy graph holds (before `realize`, see tinygrad/schedule/multi.py) and what it becomes:
- `UNSHARD(x, r) {(k,)}`: the whole tensor whose shard on device j is `x` with the DEVICE range r = j,
  concatenated along axis k. Two forms of x are exported:
  - a realized sharded buffer, `RESHAPE(BUFFER on D)`: device j holds shard j. It becomes a PARAM on the
    tuple of devices D holding the shards one after the other along axis 0 (shape (n * s0, s1, ...) for
    shards of shape s: device j's argument is shard j in its own row-major layout, as tinygrad holds it),
    viewed as the whole tensor sharded on axis k (for k > 0: RESHAPE to (n, s...), PERMUTE the device
    axis to k, RESHAPE to the whole shape; uopc's shard axis follows both);
  - `SHRINK(COPY(v) {D}, ...)` with the offsets of shard j on axis k (what `Tensor.shard` of a tensor on
    one device builds): uopc's `COPY(v) {D}` (a scatter on axis 0), behind a PERMUTE and its inverse
    for k > 0.
- `COPY(x) {D}` to a tuple from one device (`shard` without an axis, `to(devices)`) and from a tuple
  (an allgather): every device holds the whole value, `MULTI(COPY(x) {D[0]}, ...)` without an axis.
  `COPY(x) {d}` of a value on a tuple gathers it onto d (uopc's COPY to one device).
- `MSELECT`, `ALLREDUCE` are uopc's own; `MSTACK(s0, ...)` is a MULTI without an axis.
- Every other op on values on a tuple of devices is written as for one device: uopc gives ops on
  sharded values their meaning on the whole tensor (a REDUCE over the shard axis is an allreduce), as
  tinygrad does (`reduce_multi`).
Device names: tinygrad's canonical "CPU" is written "CPU:0" (the same device), others as they are.
A form not listed (a shard over several axes at once, an UNSHARD of another computation) is refused
with the op's name at the user's line, like any unsupported op.

The entry's own tensors: a sharded example input is a PARAM on its devices in the layout above (the
caller passes one buffer per device: its shard), a replicated one (`shard` without an axis) one PARAM
on no device that the program copies to every device; a sharded output is written shard by shard into
such a PARAM, a replicated one (an allreduce's result) once, on the first device.
"""
from __future__ import annotations

from typing import Any, Callable

from uopc.frontend.printer import format_arg

MULTI_OPS = frozenset({"UNSHARD", "MSELECT", "MSTACK", "ALLREDUCE"})


class Unsupported(Exception):
  """A multi-device form the exporter does not write; the exporter locates it at the user's line."""


def device_name(d: str) -> str:
  """tinygrad's device name as uopc writes it: "CPU" is "CPU:0"."""
  return d if ":" in d else f"{d}:0"


def device_names(d: Any) -> Any:
  """One device or a tuple of them, as uopc writes them."""
  return tuple(device_name(x) for x in d) if isinstance(d, tuple) else device_name(d)


def devices_arg(d: Any) -> str: return format_arg(device_names(d))


def is_multi(u: Any) -> bool:
  """Is `u` a multi-device op the generic conversion does not write (a COPY between single devices is)?"""
  if u.op.name in MULTI_OPS: return True
  return u.op.name == "COPY" and (isinstance(u.device, tuple) or isinstance(u.src[0].device, tuple))


def operands(u: Any) -> tuple:
  """The tinygrad values the conversion of multi-device op `u` reads (converted before it)."""
  if u.op.name == "UNSHARD":
    x = u.src[0]
    return (x.src[0].src[0],) if _scatter_of(u) is not None else ()
  return tuple(u.src)


# ---- views between the whole tensor and its per-device layout --------------------------------------
def layout_shape(shard: tuple, n: int) -> tuple:
  """The PARAM shape holding n shards one after the other along axis 0."""
  return (n * shard[0],) + tuple(shard[1:])


def whole_from_layout(let: Callable[[str], str], dims: Callable[[tuple], str], p: str, shard: tuple, k: int, n: int) -> str:
  """The whole tensor (sharded on axis k) from the value `p` of layout shape."""
  if k == 0: return p
  stacked = let(f"RESHAPE({p}, {dims((n,) + tuple(shard))})")
  order = tuple(range(1, k + 1)) + (0,) + tuple(range(k + 1, len(shard) + 1))
  moved = let(f"PERMUTE({stacked}) {{{format_arg(order)}}}")
  return let(f"RESHAPE({moved}, {dims(_whole(shard, k, n))})")


def layout_from_whole(let: Callable[[str], str], dims: Callable[[tuple], str], v: str, whole: tuple, k: int, n: int) -> str:
  """The value of layout shape (shards along axis 0) of `v`, the whole tensor sharded on axis k."""
  if k == 0: return v
  shard = whole[:k] + (whole[k] // n,) + whole[k + 1:]
  split = let(f"RESHAPE({v}, {dims(whole[:k] + (n, whole[k] // n) + whole[k + 1:])})")
  order = (k,) + tuple(range(k)) + tuple(range(k + 1, len(whole) + 1))
  moved = let(f"PERMUTE({split}) {{{format_arg(order)}}}")
  return let(f"RESHAPE({moved}, {dims(layout_shape(shard, n))})")


def _whole(shard: tuple, k: int, n: int) -> tuple: return shard[:k] + (shard[k] * n,) + shard[k + 1:]


# ---- the conversion ---------------------------------------------------------------------------------
def _axis(u: Any) -> int:
  if len(u.arg) != 1: raise Unsupported(f"a tensor sharded over several axes at once (UNSHARD of axes {tuple(u.arg)}) is not exported")
  return u.arg[0]


def _count(u: Any) -> int:
  rng = u.src[1]
  if not isinstance(u.device, tuple) or rng.src[0].op.name != "CONST" or rng.src[0].arg != len(u.device):
    raise Unsupported("UNSHARD over a range that is not its devices is not exported")
  return len(u.device)


def _ints(shape: Any) -> tuple:
  if not all(isinstance(d, int) for d in shape): raise Unsupported("a sharded tensor of symbolic shape is not exported")
  return tuple(shape)


def input_sharding(u: Any) -> tuple[int, int, tuple]:
  """(shard axis, device count, shard shape) of a sharded example input (an UNSHARD)."""
  return _axis(u), _count(u), _ints(u.src[0].shape)


def sharded_buffer(u: Any) -> Any | None:
  """The BUFFER on a tuple of devices an UNSHARD reads as its shards, or None."""
  x = u.src[0]
  buf = x.src[0] if x.op.name == "RESHAPE" else x
  return buf if buf.op.name == "BUFFER" and isinstance(buf.arg.device, tuple) else None


def _scatter_of(u: Any) -> Any | None:
  """For UNSHARD(SHRINK(COPY(v) {D}, shard j's offsets on axis k)): the COPY; else None."""
  x = u.src[0]
  if x.op.name != "SHRINK" or x.src[0].op.name != "COPY" or isinstance(x.src[0].src[0].device, tuple): return None
  if len(u.arg) != 1 or not isinstance(u.device, tuple): return None
  k, n, rng, v = u.arg[0], len(u.device), u.src[1], x.src[0].src[0]
  whole, shard = tuple(v.shape), tuple(x.shape)
  if tuple(u.shape) != whole or not all(isinstance(d, int) for d in whole + shard) or whole[k] != n * shard[k]: return None
  if any(s != w for i, (s, w) in enumerate(zip(shard, whole)) if i != k): return None
  offsets = [o for o, _ in x.marg]
  for j in range(n):
    at = [o.substitute({rng: rng.const_like(j)}).ssimplify() if hasattr(o, "substitute") else o for o in offsets]
    if at != [j * shard[k] if i == k else 0 for i in range(len(at))]: return None
  return x.src[0]


def convert(conv: Any, u: Any, weak_as: str | None) -> str:
  """The uopc value of multi-device op `u`; `conv` is the exporter's Converter (its writer, the values of
  other nodes, new weight PARAMs)."""
  w, name = conv.w, u.op.name
  if name == "UNSHARD": return _unshard(conv, u)
  if name == "MSELECT": return w.let(f"MSELECT({conv._get(u.src[0], weak_as)}) {{{u.arg}}}")
  if name == "ALLREDUCE":
    op, dev = u.arg
    return w.let(f"ALLREDUCE({conv._get(u.src[0], weak_as)}) {{({op.name}, {devices_arg(dev)})}}")
  if name == "MSTACK":
    shards = [w.let(f"COPY({conv._get(s, weak_as)}) {{{devices_arg(d)}}}") for s, d in zip(u.src, u.device)]
    return w.let(f"MULTI({', '.join(shards)}) {{None}}")
  # COPY to or from a tuple of devices
  x = conv._get(u.src[0], weak_as)
  if not isinstance(u.device, tuple): return w.let(f"COPY({x}) {{{devices_arg(u.device)}}}")
  return replicate(w, x, u.device)


def replicate(w: Any, x: str, devices: tuple) -> str:
  """A whole copy of value `x` on each of `devices` (a MULTI without an axis)."""
  copies = [w.let(f"COPY({x}) {{{devices_arg(d)}}}") for d in devices]
  return w.let(f"MULTI({', '.join(copies)}) {{None}}")


def _unshard(conv: Any, u: Any) -> str:
  w, k, n = conv.w, _axis(u), _count(u)
  if (buf := sharded_buffer(u)) is not None:
    shard = _ints(u.src[0].shape)
    p = conv.new_weight(buf, layout_shape(shard, n), u.device, k)
    return whole_from_layout(w.let, w.dims, p, shard, k, n)
  if (copy := _scatter_of(u)) is not None:
    v, whole, devs = conv._get(copy.src[0], None), tuple(u.shape), devices_arg(u.device)
    if k == 0: return w.let(f"COPY({v}) {{{devs}}}")
    order = (k,) + tuple(i for i in range(len(whole)) if i != k)
    front = w.let(f"PERMUTE({v}) {{{format_arg(order)}}}")
    scattered = w.let(f"COPY({front}) {{{devs}}}")
    return w.let(f"PERMUTE({scattered}) {{{format_arg(tuple(order.index(i) for i in range(len(whole))))}}}")
  raise Unsupported(f"UNSHARD of {u.src[0].op.name} is not exported: only a sharded buffer or Tensor.shard of a tensor on one device")


# ---- what uopc's multi-device lowering refuses, found at export --------------------------------------
def sharding_problems(text: str, entry: str, origin: list) -> list[tuple[Any, str]]:
  """(tinygrad node, message) for each statement of the exported entry `text` that uopc's multi-device
  lowering refuses (a reshape moving elements between shards, a SHRINK of the shard axis, ...); `origin`
  gives, per statement line after the entry's first, the tinygrad node that wrote it. Empty for an entry
  on one device."""
  if '", ("' not in text and "MULTI(" not in text and "COPY(" not in text: return []  # no tuple of devices
  from uopc.frontend.parser import parse_source
  from uopc.stages.multi_device import check_sharding, has_tuple_devices
  module = parse_source(text, f"<export of {entry}>")
  sink = module.entries[0].sink
  if not has_tuple_devices(sink): return []
  out = []
  for d in check_sharding(sink, module.loc_of):
    line = d.loc.line - 2 if d.loc is not None else -1
    out.append((origin[line] if 0 <= line < len(origin) else None, f"uopc cannot run this on several devices: {d.message}"))
  return out
