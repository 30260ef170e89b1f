"""Multi-device lowering: a tensor program over tuples of devices -> one single-device tensor program per
device, plus the copies between them, which Rangeify then splits into kernels like any other program.

Meaning (seed 000's collectives section, SPEC-NOTES "where the seeds are silent"): a value on an
n-tuple device D is one whole tensor, held as n shards: along its shard axis (the derived `axis`)
when it has one, device i holding the i-th of n equal blocks; else each device holds a whole copy
(tinygrad's MSTACK: per-device values, which ALLREDUCE combines). Every op means what it means on the
whole tensor, so a REDUCE over the shard axis is a local REDUCE per device then an allreduce.

Invariants of the result:
- No node is on a tuple device: each PARAM on D becomes n PARAMs `NAME_dev<i>` on D[i] holding shard
  i, at consecutive slots where the PARAM was (later slots shift up), so the entry takes one pointer
  per device shard, in slot order; other PARAMs keep their order.
- Each STORE, kernel input and computed value is on one device; the only cross-device op is a LOAD to
  a device (seed 000's COPY) of a buffer or a view of one (`uopc.stages.device_copies`), which
  Rangeify realizes by a copy kernel. The kernels run in the program's order (the host schedule).
- What cannot be lowered is refused before any rewrite, with a located error: a shape that does not
  divide evenly across the devices, a reshape moving elements between shards, a PAD/SHRINK/FLIP of the
  shard axis, operands on different devices.

The lowering is one bottom-up rewrite: each op whose sources are MULTIs (the sharded form) becomes a
MULTI of per-device ops; a MULTI's shape is the whole tensor's, so every rebuilt node keeps its
derived shape and axis while its shards are rebuilt.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from uopc.diagnostics import CompileError, Loc, error
from uopc.dtype import dtypes
from uopc.module import Entry, Module
from uopc.ops import GroupOp, Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.stages import device_copies as dc
from uopc.uop import UOp, copy_device, shape_values, sint


def _n(u: UOp) -> int: return len(u.device) if isinstance(u.device, tuple) else 1


def local_shape(shape: tuple[sint, ...], axis: int | None, n: int) -> tuple[sint, ...]:
  """A shard's shape: the whole shape with the shard axis divided by the device count."""
  if axis is None: return shape
  return shape[:axis] + (shape[axis] // n,) + shape[axis + 1:]


def has_tuple_devices(sink: UOp) -> bool: return any(isinstance(u.device, tuple) for u in sink.toposort())


# ---- what cannot be lowered (located, on the program as written) -------------------------------------
def _uneven(u: UOp, what: str, shape, axis: int, n: int) -> Iterator[str]:
  d = shape[axis]
  if not isinstance(d, int): yield f"{what}: the shard axis {axis} has a symbolic size; sharding needs a known one"
  elif d % n: yield f"{what}: size {d} of axis {axis} does not divide evenly across {n} devices"


def _problems(u: UOp) -> Iterator[str]:
  op, src = u.op, u.src
  if op in GroupOp.Buffers and u.src and isinstance(u.device, tuple):
    if not u.shape: yield f"{op.name} '{u.arg[1]}' is a scalar on {len(u.device)} devices: there is no axis to shard"
    else: yield from _uneven(u, f"{op.name} '{u.arg[1]}' of shape {u.shape} on {len(u.device)} devices", u.shape, 0, len(u.device))
  elif op is Ops.LOAD and isinstance(copy_device(u), tuple) and src[0].shape:
    n = len(copy_device(u))
    if isinstance(src[0].device, tuple) and len(src[0].device) != n:
      yield f"COPY from {len(src[0].device)} devices to {n}: a reshard keeps the device count"
    else: yield from _uneven(u, f"COPY of shape {src[0].shape} to {n} devices", src[0].shape, 0, n)
  elif op in GroupOp.Movement and src[0].axis is not None and isinstance(src[0].device, tuple):
    yield from _movement_problems(u, src[0].axis, _n(src[0]))
  elif op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST, Ops.STORE):
    yield from _operand_problems(u)
  elif op in (Ops.INDEX, Ops.STACK, Ops.CALL, Ops.FUNCTION) and any(isinstance(s.device, tuple) for s in src):
    yield f"{op.name} of a value on several devices is not supported yet: COPY it to one device first"


def _movement_problems(u: UOp, a: int, n: int) -> Iterator[str]:
  op, s0 = u.op, u.src[0].shape
  if op is Ops.RESHAPE:
    if u.axis is None: yield f"RESHAPE {s0} -> {u.shape} moves elements between the shards of axis {a}"
    else: yield from _uneven(u, f"RESHAPE {s0} -> {u.shape} of a value on {n} devices", u.shape, u.axis, n)
  elif op in (Ops.PAD, Ops.SHRINK) and (shape_values(u.src[1])[a] != 0 or u.shape[a] != s0[a]):
    yield f"{op.name} of the shard axis {a}: only the other axes of a value on {n} devices can be padded or shrunk"
  elif op is Ops.FLIP and isinstance(u.arg, tuple) and a < len(u.arg) and u.arg[a]:
    yield f"FLIP of the shard axis {a} would reverse the devices' order: COPY to one device first"


def _operand_problems(u: UOp) -> Iterator[str]:
  data = [s for s in (u.src[:1] if u.op is Ops.STORE else ()) + u.src[1 if u.op is Ops.STORE else 0:]
          if s.shape is not None and s.device is not None]
  devices = list(dict.fromkeys(s.device for s in data))
  if len(devices) > 1:
    yield f"{u.op.name} of values on different devices ({', '.join(map(str, devices))}): COPY one to the other's device"
    return
  n = len(u.shape) if u.shape is not None else 0
  axes = {s.axis + n - len(s.shape) for s in data if s.axis is not None and u.op is not Ops.STORE}
  if len(axes) > 1: yield f"{u.op.name} of values sharded on different axes {sorted(axes)}: COPY one to reshard it"
  if u.op is Ops.STORE and isinstance(u.src[0].device, tuple) and u.src[0].axis not in (0, None) \
     and u.src[1].axis not in (None, u.src[0].axis):
    yield f"STORE into a buffer sharded on axis {u.src[0].axis} of a value sharded on axis {u.src[1].axis}"


def check_sharding(sink: UOp, loc_of: Callable[[UOp], Loc | None]) -> list:
  """Every problem of the program as written, in source order."""
  found = [error(loc_of(u), msg) for u in sink.toposort() for msg in _problems(u)]
  return sorted(found, key=lambda d: (d.loc is None, d.loc.line if d.loc else 0, d.loc.col if d.loc else 0))


# ---- the rewrite ---------------------------------------------------------------------------------------
@dataclass
class _Ctx:
  slots: dict[UOp, int]                           # a PARAM as written -> its (first) slot in the lowered entry
  names: dict[UOp, str] = field(default_factory=dict)  # lowered PARAM -> its name, for printing
  notes: list[tuple[int, str]] = field(default_factory=list)  # (slot, how it holds a sharded buffer), for the header


def _multi(shards, axis: int | None) -> UOp: return UOp(Ops.MULTI, shards[0].dtype, tuple(shards), axis)
def _is_multi(u: UOp) -> bool: return u.op is Ops.MULTI


def _shard_buffer(ctx: _Ctx, b: UOp) -> UOp:
  devs, n, name = b.device, _n(b), b.arg[1]
  shape = local_shape(b.shape, 0, n)
  base = ctx.slots.get(b, b.arg[0])
  shards = [UOp(b.op, b.dtype, (UOp.shape_of(shape),), (base + j if b.op is Ops.PARAM else b.arg[0], f"{name}_dev{j}", d) + b.arg[3:])
            for j, d in enumerate(devs)]
  for s in shards: ctx.names[s] = s.arg[1]
  if b.op is Ops.PARAM:
    k = shape[0]
    ctx.notes.append((base, f"{name}: {b.dtype.name}{list(b.shape)} on {len(devs)} devices, axis 0 split in {n}: " +
                     ", ".join(f"{s.arg[1]} = rows [{j * k}, {(j + 1) * k}) on {d}" for j, (s, d) in enumerate(zip(shards, devs)))))
  return _multi(shards, 0)


def _renumber(ctx: _Ctx, p: UOp) -> UOp | None:
  slot = ctx.slots.get(p)
  return None if slot is None or slot == p.arg[0] else p.replace(arg=(slot,) + p.arg[1:])


def _copy(u: UOp) -> UOp | None:
  """seed 000's COPY: to one device (a gather when the source is sharded) or to a tuple (a reshard)."""
  src, dest = u.src[0], copy_device(u)
  if not _is_multi(src) and not isinstance(dest, tuple): return None  # already a plain copy
  if isinstance(dest, str):
    if src.arg is not None: return dc.gather(src.src, src.arg, dest)
    devs = src.device
    return dc.move(src.src[devs.index(dest)] if dest in devs else src.src[0], dest)
  if not src.shape: return _multi([dc.move(src if not _is_multi(src) else src.src[j], d) for j, d in enumerate(dest)], None)
  if not _is_multi(src): return _multi(dc.scatter(src, dest), 0)
  return _multi(dc.reshard(src.src, src.arg, src.device, dest), 0)


def _operand(s: UOp, j: int, out: UOp) -> UOp:
  """Device j's part of operand `s` of `out`: its shard, a block of a whole copy where `out` is sharded."""
  if not _is_multi(s): return s
  local = s.src[j]
  if s.arg is None and out.axis is not None and s.shape is not None:
    a = out.axis - (len(out.shape) - len(s.shape))
    if 0 <= a and s.shape[a] != 1: local = dc.block(local, a, j, len(s.src))
  return local


def _per_device(u: UOp) -> UOp:
  """An elementwise, movement or marker op over MULTIs: the op on each device's parts."""
  n = next(len(s.src) for s in u.src if _is_multi(s))
  shards = []
  for j in range(n):
    if u.op in GroupOp.Movement:
      src = (u.src[0].src[j],) + u.src[1:]
      if u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK):
        src = src[:-1] + (UOp.shape_of(local_shape(u.shape, u.axis, n)),)
    else: src = tuple(_operand(s, j, u) for s in u.src)
    shards.append(u.replace(src=src))
  return _multi(shards, u.axis)


def _reduce(x: UOp, r: UOp) -> UOp:
  parts = [r.replace(src=(s,)) for s in x.src]
  if x.arg is None or x.arg not in r.arg[1]: return _multi(parts, x.arg)
  return _multi(dc.allreduce(r.arg[0], parts, x.device), None)  # over the shard axis: every device's partial


def _store(st: UOp, t: UOp) -> UOp:
  v, n = st.src[1], len(t.src)
  if not _is_multi(v): vals = [v] * n
  elif v.arg == t.arg: vals = list(v.src)
  elif t.arg is None: vals = [dc.gather(v.src, v.arg, d) for d in t.device]
  elif v.arg is None: vals = [dc.block(s, t.arg, j, n) if v.shape[t.arg] != 1 else s for j, s in enumerate(v.src)]
  else: vals = dc.reshard(v.src, v.arg, v.device, t.device)  # into axis 0, the axis of a buffer on a tuple device
  gates = [_operand(st.src[2], j, t) for j in range(n)] if len(st.src) > 2 else [None] * n
  stores = [UOp(Ops.STORE, dtypes.void, (b, val) + ((g,) if g is not None else ())) for b, val, g in zip(t.src, vals, gates)]
  return UOp(Ops.GROUP, dtypes.void, tuple(stores))


def _after(a: UOp, x: UOp) -> UOp:
  deps = [d for dep in a.src[1:] for d in (dep.src if dep.op is Ops.GROUP else (dep,))]
  return _multi([UOp(Ops.AFTER, s.dtype, (s,) + tuple(d for d in deps if d.device in (s.device, None))) for s in x.src], x.arg)


def _flatten(u: UOp) -> UOp:
  return u.replace(src=tuple(y for s in u.src for y in (s.src if _is_multi(s) else (s,))))


def _replicated(r: UOp, x: UOp) -> UOp:
  return _multi([dc.reshape(s, s.shape[:r.arg] + s.shape[r.arg + 1:]) for s in x.src], None)


def _any_multi(u: UOp) -> bool: return any(s.op is Ops.MULTI for s in u.src)


_MULTI = Pat(Ops.MULTI, name="x")
_PER_DEVICE = GroupOp.ALU | GroupOp.Movement | GroupOp.Markers | {Ops.CAST, Ops.BITCAST, Ops.LOAD}
LOWER_RULES = Rules([
  (Pat(GroupOp.Buffers, name="b", where=lambda b: bool(b.src) and isinstance(b.device, tuple)), _shard_buffer),
  (Pat(Ops.PARAM, name="p", where=lambda p: bool(p.src)), _renumber),
  (Pat(Ops.LOAD, name="u", where=lambda u: copy_device(u) is not None and not u.src[0].dtype.is_ptr()), _copy),
  (Pat(Ops.MSELECT, src=(_MULTI,), name="m"), lambda m, x: x.src[m.arg]),
  (Pat(Ops.REPLICATED, src=(_MULTI,), name="r"), _replicated),
  (Pat(Ops.ALLREDUCE, src=(_MULTI,), name="r"), lambda r, x: _multi(dc.allreduce(r.arg[0], x.src, x.device), None)),
  (Pat(Ops.REDUCE, src=(_MULTI,), name="r"), lambda r, x: _reduce(x, r)),
  (Pat(Ops.STORE, src=(Pat(Ops.MULTI, name="t"),), rest=True, name="st"), _store),
  (Pat(Ops.AFTER, src=(_MULTI,), rest=True, name="a"), _after),
  (Pat(_PER_DEVICE, name="u", where=_any_multi), _per_device),
  (Pat((Ops.SINK, Ops.GROUP), name="u", where=_any_multi), _flatten),
])


def _slots(sink: UOp) -> dict[UOp, int]:
  """The lowered slot of each PARAM: slot order kept, a PARAM on n devices taking n consecutive slots."""
  outer = lambda u: u.src[1:] if u.op in (Ops.FUNCTION, Ops.CALL) else u.src  # noqa: E731
  params = sorted({u for u in sink.toposort(outer) if u.op is Ops.PARAM and u.src}, key=lambda p: p.arg[0])
  out, nxt = {}, 0
  for p in params:
    out[p] = nxt
    nxt += _n(p) if isinstance(p.device, tuple) else 1
  return out


def lower_devices(sink: UOp, loc_of: Callable[[UOp], Loc | None] = lambda u: None, sources: dict | None = None) -> tuple[UOp, _Ctx]:
  """`sink` (callified) with every tuple-device value lowered to per-device values (see the module docstring)."""
  if problems := check_sharding(sink, loc_of): raise CompileError(problems, sources)
  ctx = _Ctx(_slots(sink))
  for m in (u for u in sink.toposort() if u.op is Ops.MULTI and all(s.op is Ops.PARAM for s in u.src)):
    ctx.notes.append((ctx.slots.get(m.src[0], 0), f"{m.dtype.name}{list(m.shape)} written as MULTI on axis {m.arg}: " +
                      ", ".join(f"{s.arg[1]} on {s.device}" for s in m.src)))
  out = graph_rewrite(sink, LOWER_RULES, bottom_up=True, ctx=ctx)
  if left := [u for u in out.toposort() if isinstance(u.device, tuple) or u.op is Ops.MULTI]:
    raise CompileError([error(loc_of(left[-1]), f"{left[-1].op.name} on several devices could not be lowered")], sources)
  return out, ctx


def lower_entry(entry: Entry, module: Module) -> tuple[Entry, tuple[str, ...]]:
  """A func entry on tuple devices as its per-device program (unchanged otherwise), and the notes that
  describe its per-device arguments."""
  params = tuple(u for u in entry.unused if u.op is Ops.PARAM)
  sink = entry.sink.replace(src=entry.sink.src + params) if params else entry.sink
  if entry.kind != "func" or not has_tuple_devices(sink): return entry, ()
  from uopc.stages.callify import callify
  out, ctx = lower_devices(callify(sink), module.loc_of, {module.path: module.text})
  for u, name in ctx.names.items(): module.names.setdefault(u, name)
  roots = [s for s in out.src if s.op is not Ops.PARAM]
  unused = tuple(s for s in out.src if s.op is Ops.PARAM) + tuple(u for u in entry.unused if u.op is not Ops.PARAM)
  return Entry(entry.name, entry.kind, out.replace(src=tuple(roots)), entry.loc, unused), tuple(n for _, n in sorted(ctx.notes))
