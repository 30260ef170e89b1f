"""GROUP_REDUCE lowering, a part of Expand (uopc.stages.expand): a reduction shared by k workers, each
accumulating a partial that is combined with the others' after the loop. On a GPU the workers are a
workgroup's threads (`group_reduce`: partials through LOCAL memory, combined in a fixed order after a
BARRIER); on a CPU they are vector lanes (`group_lanes`: a k-wide accumulator folded pairwise).

Invariant: the combination order depends only on the schedule (k and the axes), never on the machine, so
a kernel's float results are the same on every run.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Mapping

from uopc.diagnostics import CompileError, error
from uopc.dtype import AddrSpace, PtrDType, dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.optimize import (Trace, accumulator_update, axis_size, axis_type, is_axis, kernel_axes, note,
                                  root_buffer, scopes, workgroup_dims)
from uopc.symbolic import simplify
from uopc.uop import UOp


def _fail(message: str) -> CompileError: return CompileError([error(None, f"expand: {message}")])
def _idx(v: int) -> UOp: return UOp.const(dtypes.index, v)


def group_reduce(sink: UOp, trace: Trace | None = None) -> UOp:
  """Each GROUP_REDUCE axis g (Optimize checks that all it does is acc = op(acc, v) into REG
  accumulators) becomes a LOCAL axis: the workgroup's threads each accumulate their share of the
  reduction. Each read of an accumulator after its loop becomes the combination of all threads'
  partials through LOCAL memory (see `_combine`), so every thread holds the reduced value. A kernel's
  global STORE outside every LOCAL axis of g's workgroup dimension stores a value equal on all its
  threads then: thread 0 alone does it. The workgroup's other threads (LOCAL axes of other dimensions
  around the read: a register-tiled gemm's threads along its output axes, each sharing its outputs'
  reductions with its own GROUP_REDUCE threads) combine their own partials: the LOCAL buffers hold a
  row of partials for each of them."""
  gs = [r for r in kernel_axes(sink) if is_axis(r) and axis_type(r) is AxisType.GROUP_REDUCE]
  if not gs: return sink
  scope = scopes(sink)
  reducing = {root_buffer(u.src[0]): (g, accumulator_update(u)) for u in sink.toposort() if u.op is Ops.STORE
              for g in gs if g in scope[u]}
  # the axes of a workgroup dimension become one LOCAL axis, the thread's index in it: once the combined
  # values depend on it, the sibling loops could no longer be told apart from nested ones
  dims = [d for d in workgroup_dims(sink) if any(g in d for g in gs)]
  lid = {r: UOp(Ops.RANGE, dtypes.index, d[0].src, (d[0].arg[0], AxisType.LOCAL)) for d in dims for r in d}
  def uniform_gate(st: UOp) -> UOp | None:
    gates = [lid[d[0]].alu(Ops.CMPLT, _idx(1)) for d in dims if not scope[st] & set(d)]
    return functools.reduce(lambda a, b: a.alu(Ops.AND, b), gates) if gates else None
  names = _Names(sink, len(kernel_axes(sink)))
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    if u in lid: new = lid[u]
    elif u.op is Ops.END and u.src[1] in lid: new = memo[u.src[0]]  # a thread index, not a loop
    else:
      src = tuple(memo[s] for s in u.src if not (u.op is Ops.AFTER and s in lid))
      new = u if src == u.src else src[0] if u.op is Ops.AFTER and len(src) == 1 else u.replace(src=src)
      if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and (g_op := reducing.get(root_buffer(u.src[0]))) and g_op[0] not in scope[u]:
        new = _combine(new, g_op[1], lid[g_op[0]], names, _other_threads(scope[u], lid))
      elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and _is_global(root_buffer(u.src[0])) and (gate := uniform_gate(u)) is not None:
        new = new.replace(src=new.src[:2] + ((new.src[2].alu(Ops.AND, gate),) if len(new.src) == 3 else (gate,)))
    memo[u] = new
    note(trace, u, new)
  return memo[sink]


class _Names:
  """Fresh BUFFER slots and axis ids for the nodes a group reduction adds."""

  def __init__(self, sink: UOp, axes: int):
    self.slot = 1 + max((u.arg[0] for u in sink.toposort() if u.op is Ops.BUFFER and isinstance(u.arg, tuple)), default=-1)
    self.axis = axes

  def buffer(self, dt: PtrDType, name: str) -> UOp:
    self.slot += 1
    return UOp(Ops.BUFFER, dt, (), (self.slot - 1, f"{name}{self.slot - 1}"))

  def reduce_axis(self, size: int) -> UOp: return self.new_axis(size, AxisType.REDUCE)

  def new_axis(self, size: int, t: AxisType) -> UOp:
    self.axis += 1
    return UOp(Ops.RANGE, dtypes.index, (_idx(size),), (self.axis - 1, t))


def _fold(acc: PtrDType, off: UOp, op: Ops, dt, values: Callable[[UOp], UOp], n: int, names: _Names) -> tuple[UOp, UOp]:
  """op over values(0), .., values(n - 1) in that order into a fresh REG accumulator: it and the END of the fold."""
  total = names.buffer(acc.base.ptr(AddrSpace.REG, acc.size), "total")
  init = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, total.dtype, (total, off)), values(_idx(0))))
  j = names.reduce_axis(n - 1)
  running = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, total.dtype, (UOp(Ops.AFTER, total.dtype, (total, init, j)), off)),))
  fold = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, total.dtype, (total, off)), UOp(op, dt, (running, values(j.alu(Ops.ADD, _idx(1)))))))
  return total, UOp(Ops.END, dtypes.void, (fold, j))


def _read_after(buf: UOp, dep: UOp, off: UOp, dt) -> UOp:
  return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, buf.dtype, (UOp(Ops.AFTER, buf.dtype, (buf, dep)), off)),))


def _group_split(k: int) -> tuple[int, int]:
  """k partials as a groups of b, a * b = k, b the largest divisor of k up to sqrt(k)."""
  b = max(d for d in range(1, math.isqrt(k) + 1) if k % d == 0)
  return k // b, b


def _other_threads(scope: frozenset, lid: Mapping[UOp, UOp]) -> tuple[UOp, int]:
  """The flat index of the LOCAL axes in `scope` that are not GROUP_REDUCE dimensions (`lid`'s keys),
  the innermost fastest, and how many values it takes (0, 1 where there are none)."""
  flat, count = _idx(0), 1
  for r in sorted((r for r in scope if is_axis(r) and axis_type(r) is AxisType.LOCAL and r not in lid), key=lambda r: r.arg[0]):
    flat, count = flat.alu(Ops.MUL, _idx(axis_size(r))).alu(Ops.ADD, r), count * axis_size(r)
  return simplify(flat), count


def _combine(partial: UOp, op: Ops, lid: UOp, names: _Names, others: tuple[UOp, int] | None = None) -> UOp:
  """partial = LOAD(acc[off]), this thread's share of a reduction, and the value of all the workgroup's
  k shares, through LOCAL memory: each thread stores its partial (thread t at t * S + off, S = acc's
  size) and a BARRIER. With k = a * b (b > 1, see `_group_split`), threads t < a fold the b partials
  of group t in thread order into a second LOCAL buffer and a BARRIER, so that each thread folds
  a + b values instead of k; every thread then folds the a group values (or, for a prime k, the k
  partials) in order, so all threads get the same bits; a last BARRIER before the LOCAL buffers can be
  written again (by the next iteration of an enclosing loop). `others` (the flat index of the thread
  among the workgroup's other threads, and their count) picks each one's own row of the buffers."""
  acc, off, k, dt = partial.src[0].dtype, partial.src[0].src[1], axis_size(lid), partial.dtype
  row, rows = others or (_idx(0), 1)
  def at(buf: UOp, n: int, i: UOp) -> UOp:
    flat = row.alu(Ops.MUL, _idx(n)).alu(Ops.ADD, i).alu(Ops.MUL, _idx(acc.size)).alu(Ops.ADD, off)
    return UOp(Ops.INDEX, buf.dtype, (buf, simplify(flat)))
  def shared(name: str, n: int, i: UOp, value: UOp, gate: UOp | None = None) -> Callable[[UOp], UOp]:
    """A LOCAL buffer of n values per element of acc (and per other thread), `value` stored at [i] (where
    `gate`), and a reader after a BARRIER."""
    buf = names.buffer(acc.base.ptr(AddrSpace.LOCAL, acc.size * n * rows), name)
    wrote = UOp(Ops.STORE, dtypes.void, (at(buf, n, i), value) + ((gate,) if gate is not None else ()))
    synced = UOp(Ops.AFTER, buf.dtype, (buf, UOp(Ops.BARRIER, dtypes.void, (wrote,))))
    return lambda j: UOp(Ops.LOAD, dt, (at(synced, n, j),))
  part = shared("part", k, lid, partial)
  a, b = _group_split(k)
  if b > 1:
    first = lid.alu(Ops.MOD, _idx(a)).alu(Ops.MUL, _idx(b))
    group, end = _fold(acc, off, op, dt, lambda j: part(first.alu(Ops.ADD, j)), b, names)
    part, k = shared("group", a, lid, _read_after(group, end, off, dt), lid.alu(Ops.CMPLT, _idx(a))), a
  total, end = _fold(acc, off, op, dt, part, k, names)
  return _read_after(total, UOp(Ops.BARRIER, dtypes.void, (end,)), off, dt)


def _is_global(buf: UOp) -> bool: return isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace is AddrSpace.GLOBAL


# ---- group reductions on CPUs: vector lanes -------------------------------------------------------------


def group_lanes(sink: UOp, trace: Trace | None = None) -> UOp:
  """Each GROUP_REDUCE axis g of size k (Optimize checks that all it does is acc = op(acc, v) into REG
  accumulators) becomes an UPCAST axis: k lanes, each with its own partial accumulator, so that the
  loop carries k independent chains instead of one (the additions of a long sum no longer wait on
  each other). Each accumulator gets k elements per element (lane j of element e at e * k + j): its
  init STORE, outside g, fills all k; its update inside g is lane-wise; each read after the loop
  becomes the pairwise combination of the k partials (`_pairwise`). The order of the operations
  depends on k alone, never on the vector width, so every `--cpu` level computes the same bits."""
  gs = [r for r in kernel_axes(sink) if is_axis(r) and axis_type(r) is AxisType.GROUP_REDUCE]
  if not gs: return sink
  scope = scopes(sink)
  reducing = {root_buffer(u.src[0]): (g, accumulator_update(u)) for u in sink.toposort() if u.op is Ops.STORE
              for g in gs if g in scope[u]}
  lanes = {g: UOp(Ops.RANGE, dtypes.index, g.src, (g.arg[0], AxisType.UPCAST)) for g in gs}
  names = _Names(sink, len(kernel_axes(sink)))
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo[s] for s in u.src)
    if u in lanes: new = lanes[u]
    elif u in reducing: new = UOp(Ops.BUFFER, u.dtype.base.ptr(AddrSpace.REG, u.dtype.size * axis_size(reducing[u][0])), (), u.arg)
    elif u.op is Ops.AFTER: new = u.replace(dtype=src[0].dtype, src=src)
    elif u.op is Ops.INDEX: new = u.replace(dtype=src[0].dtype, src=src)
    elif u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and (g_op := reducing.get(root_buffer(u.src[0]))):
      g, op = g_op
      ptr, off, k = src[0].src[0], src[0].src[1], axis_size(g)
      if g in scope[u]: new = u.replace(src=(_lane(ptr, off, k, lanes[g]),) + src[1:])
      elif u.op is Ops.STORE:  # the init: every lane starts from it
        z = names.new_axis(k, AxisType.UPCAST)
        new = UOp(Ops.END, dtypes.void, (u.replace(src=(_lane(ptr, off, k, z),) + src[1:]), z))
      else: new = _pairwise(ptr, off, k, op, u.dtype, names)
    else: new = u if src == u.src else u.replace(src=src)
    memo[u] = new
    note(trace, u, new)
  return memo[sink]


def _lane(ptr: UOp, off: UOp, k: int, j: UOp) -> UOp:
  """Lane j of element `off` of an accumulator with k lanes per element."""
  return UOp(Ops.INDEX, ptr.dtype, (ptr, simplify(off.alu(Ops.MUL, _idx(k)).alu(Ops.ADD, j))))


def _pairwise(ptr: UOp, off: UOp, k: int, op: Ops, dt, names: _Names) -> UOp:
  """op over the k partials ptr[off * k + j]: the second half folded into the first, lane by lane,
  until one value is left (a pairwise tree, about log2(k) vector operations deep)."""
  while k > 1: ptr, k = _fold_half(ptr, off, k, op, dt, names)
  return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, ptr.dtype, (ptr, off)),))


def _fold_half(ptr: UOp, off: UOp, m: int, op: Ops, dt, names: _Names) -> tuple[UOp, int]:
  """The m partials ptr[off * m + j] as c = ceil(m / 2) in a fresh REG buffer: partial i (i < m // 2)
  is op(partial i, partial i + c); the middle one of an odd m passes on. The buffer after its writes, and c."""
  h, c = m // 2, m - m // 2
  buf = names.buffer(ptr.dtype.base.ptr(AddrSpace.REG, ptr.dtype.size // m * c), "pair")
  def read(j: UOp) -> UOp: return UOp(Ops.LOAD, dt, (_lane(ptr, off, m, j),))
  i = names.new_axis(h, AxisType.UPCAST) if h > 1 else _idx(0)
  folded = UOp(Ops.STORE, dtypes.void, (_lane(buf, off, c, i), UOp(op, dt, (read(i), read(i.alu(Ops.ADD, _idx(c)))))))
  writes = (UOp(Ops.END, dtypes.void, (folded, i)) if h > 1 else folded,)
  if c > h: writes += (UOp(Ops.STORE, dtypes.void, (_lane(buf, off, c, _idx(h)), read(_idx(h)))),)
  return UOp(Ops.AFTER, buf.dtype, (buf,) + writes), c
