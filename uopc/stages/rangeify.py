"""Rangeify (seed 000): split a tensor program into kernels and lower each kernel to shape `()`.

1. Kernel split. Every tensor-level STORE is a kernel writing its target. Other values are computed
   inside the kernel that reads them (elementwise chains and movement ops fuse into their consumer),
   except those *realized* into an intermediate buffer: a CONTIGUOUS or a tensor-level LOAD (they
   ask for memory), and a REDUCE that is read more than once per element of its value (by several
   consumers, or through a broadcast: an EXPAND, an elementwise op with a smaller operand, a gather)
   unless it *fuses* into its consumer. It fuses when one kernel reads it, at indices that depend
   only on the outermost of that kernel's output loops (a prefix of them): then its reduction loop
   runs once per iteration of those loops, beside the inner loops that read it, and the kernel reads
   its inputs again from cache instead of an intermediate from memory. Softmax, whose max and sum
   are read per row, is one kernel: per row, a max loop, an exp-sum loop, the division loop. A
   REDUCE read inside another reduction's loop at an index that moves with it, or read by two
   kernels, would repeat its whole reduction per read: it is realized. Which REDUCEs fuse is found
   by lowering: a REDUCE found not to fuse is marked realized and the program is lowered again. So is
   an expensive elementwise value that lowering finds computed again per iteration of an output loop
   (read through a broadcast inside a reduction: GELU inside an MLP's second matmul; `fusion_cost`).
   On GPU targets (`rangeify(..., cpu=False)`), a long REDUCE (fusion_checks.NESTED_MIN elements or more)
   whose index moves with another reduction's loop (cross-entropy's per-row sums inside the mean over
   rows) is realized too: nested, each outer iteration would run its reduction in turn inside one
   workgroup, combining its threads' partials each time; realized, its values are one kernel whose
   rows run side by side on the grid, and the outer reduction reads them. So is a REDUCE fused at
   fewer than all the output loops where that would keep the others off the grid with no workgroup row
   to share them (`uopc.stages.fusion_checks`), and `uopc.stages.gpu_graph` first splits long reductions
   to few values (a whole tensor's sum) into partials that fill the GPU.
   Before the split, a sum of a product over several axes (an einsum of several operands) is summed
   one factor group at a time where that pays (`uopc.stages.contraction`), its inner sums realized.
   On CPU targets (`rangeify(..., cpu=True)`), `uopc.stages.cpu_graph` rewrites the program first:
   long full reductions split in two (chunk partials realized, then their reduction), half-precision
   arithmetic computed in float with each operand's widening a value of its own, which the fusion
   cost's CPU weights realize as a float32 buffer when a reduction would convert it again per output.
2. Lowering. A kernel loops over its output with one `RANGE(.., LOOP)` per dim of size > 1 and
   asks for its value at that index: each op maps an output index to its sources' indices (the
   movement ops become index arithmetic, PAD a validity mask that gates the loads and selects the
   fill 0), down to LOADs of the buffers. A REDUCE computed inline becomes an accumulator: a REG
   BUFFER of one element, its init STORE (placed inside the loops its value depends on, through
   AFTER on those RANGEs), `RANGE(.., REDUCE)` loops over the reduced axes with the update STORE, END,
   and a LOAD after the END; unless `reduce_collapse` gives it in closed form (arange's window sums). Its
   loops are cut to what its gate lets through (`reduce_trim`), and a sum of sums is one reduction
   (`nested_sums`). Under a PAD's mask an op that values outside it could make undefined gets safe operands.

3. Writing a buffer that is also read. A tensor program reads a buffer's value as of a moment: a
   PARAM or BUFFER read plainly is its value on entry, `AFTER(buf, STORE(buf, ..))` the value that
   STORE wrote (a *version* of the buffer). Kernels run in program order, so a read sees the version
   it names as long as no later STORE has replaced it, and a kernel may load and store one buffer
   when it loads each element only where it stores that element (`x = x + y` in place: one pass, no
   copy). Otherwise the buffer is *snapshot*: a copy kernel saves the version before the STORE that
   replaces it, and the reads of that version load the copy (`x = x.T`, or `x = y` then `y = x` on
   the x of entry). Which STOREs need a snapshot is found by lowering, as for fusion: a read found to
   need one raises, and the program is lowered again with it. Before that, the program's roots are
   reordered so that those reading a buffer's value on entry come before those overwriting it where
   nothing orders them otherwise (`x = x + 1` then `y = x * x` on the x of entry runs y's kernel
   first, with no copy).

Constant data (a BINARY, or `BITCAST(BINARY) : T`, its bytes as little-endian elements of T) is a
read-only buffer of the program (`BufferInfo.data`), one per distinct data and dtype, declared when a
kernel first reads it; kernels load it like any buffer, and the launcher binds it to the data it embeds
(`uopc.embedded_data`). It is never an argument, an intermediate or written.

An opaque CALL (kept by Callify) is a reusable kernel: its body is rangeified once, as a program of
its own whose PARAM k is formal k and whose PARAMs after the last formal are its results, and every
call site launches those kernels with that site's buffers: its arguments (realized into buffers),
fresh result buffers and fresh intermediates (each on its device in the body). A collective's CALL
(`uopc.stages.collective_calls`) is recorded as a `Collective` over its launches, and may write its
results straight into the buffers they are stored to.

The result is a `KernelProgram`: the distinct kernel-level SINKs, and the launches in run order, each
naming a kernel and the program buffer bound to each of its pointer PARAM slots; the memory plan
(`uopc.stages.plan`) places the intermediates.
Symbolic sizes (DEFINE_VAR in shapes) stay symbolic: loop bounds and strides use the variables,
which become run-time arguments of the kernels.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from math import prod

from uopc.diagnostics import CompileError, error
from uopc.dtype import AddrSpace, DType, dtypes
from uopc.ops import AxisType, GroupOp, Ops
from uopc.stages import collective_calls
from uopc.stages.buffer_versions import data_srcs as _data_srcs, reads_before_writes, strip_after as _strip_after, version as _version
from uopc.stages.callify import bind_arguments
from uopc.stages.contiguous_copy import contiguous_copy
from uopc.stages.contraction import contraction_order
from uopc.stages.cpu_graph import cpu_graph
from uopc.stages.fast_math import exact_half_products
from uopc.stages.fusion_checks import FusionChecks, _Nested, _ranges, _term_instead, _Unfused
from uopc.stages.fusion_cost import reads_something
from uopc.stages.gpu_graph import gpu_graph
from uopc.stages.kernel_program import BufferInfo, Collective, KernelProgram, Launch
from uopc.stages.nested_sums import nested_reduce
from uopc.stages.reduce_collapse import collapse
from uopc.stages.reduce_trim import trim
from uopc.symbolic_gates import simplify_given
from uopc.symbolic import simplify
from uopc.uop import UOp, is_data_view, shape_values, sint

# ---- index arithmetic (built plainly; `symbolic.simplify` folds each finished kernel) ---------------


def _idx(x: sint) -> UOp: return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)
def _add(a: UOp, b: UOp) -> UOp: return UOp(Ops.ADD, dtypes.index, (a, b))
def _mul(a: UOp, b: UOp) -> UOp: return UOp(Ops.MUL, dtypes.index, (a, b))
def _div(a: UOp, b: UOp) -> UOp: return UOp(Ops.IDIV, dtypes.index, (a, b))
def _mod(a: UOp, b: UOp) -> UOp: return UOp(Ops.MOD, dtypes.index, (a, b))
def _lt(a: UOp, b: UOp) -> UOp: return UOp(Ops.CMPLT, dtypes.bool, (a, b))


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
  if a is None or b is None: return b if a is None else a
  return UOp(Ops.AND, dtypes.bool, (a, b))


def _flat(idx: tuple[UOp, ...], shape: tuple[sint, ...]) -> UOp:
  """Row-major offset of `idx` in a buffer of `shape`."""
  off, stride = _idx(0), _idx(1)
  for i, d in zip(reversed(idx), reversed(shape)):
    off, stride = _add(off, _mul(i, stride)), _mul(stride, _idx(d))
  return off


def _size_key(dims: tuple[sint, ...]) -> tuple:
  """A comparable product of dims: the known factors multiplied, the symbolic ones counted."""
  return (prod(d for d in dims if isinstance(d, int)), Counter(d for d in dims if isinstance(d, UOp)))


def _reshape_groups(src: tuple[sint, ...], dst: tuple[sint, ...]) -> list[tuple[list[int], list[int]]]:
  """Pair runs of source and destination axes (size-1 axes left out) with equal products."""
  si = [i for i, d in enumerate(src) if d != 1]
  di = [j for j, d in enumerate(dst) if d != 1]
  groups: list[tuple[list[int], list[int]]] = []
  while si and di:
    gs, gd = [si.pop(0)], [di.pop(0)]
    while _size_key(tuple(src[i] for i in gs)) != _size_key(tuple(dst[j] for j in gd)):
      ps, pd = (_size_key(tuple(src[i] for i in gs)), _size_key(tuple(dst[j] for j in gd)))
      if ps[1] or pd[1]:  # symbolic sizes that do not pair up: one group for the rest
        gs, gd = gs + si, gd + di
        si, di = [], []
        break
      if ps[0] < pd[0] and si: gs.append(si.pop(0))
      elif di: gd.append(di.pop(0))
      else: gs.append(si.pop(0))
    groups.append((gs, gd))
  if si or di: groups.append((si, di))
  return groups


def _reshape_index(idx: tuple[UOp, ...], src: tuple[sint, ...], dst: tuple[sint, ...]) -> tuple[UOp, ...]:
  """The source index of a RESHAPE from `src` to `dst`, read at destination index `idx`."""
  out = [_idx(0)] * len(src)
  for gs, gd in _reshape_groups(src, dst):
    if len(gs) == 1 and len(gd) == 1:
      out[gs[0]] = idx[gd[0]]
      continue
    linear = _flat(tuple(idx[j] for j in gd), tuple(dst[j] for j in gd))
    for n, i in enumerate(gs):
      inner = _idx(1)
      for k in gs[n + 1:]: inner = _mul(inner, _idx(src[k]))
      v = _div(linear, inner)
      out[i] = v if n == 0 else _mod(v, _idx(src[i]))
  return tuple(out)


def _broadcast_index(idx: tuple[UOp, ...], src: tuple[sint, ...], dst: tuple[sint, ...]) -> tuple[UOp, ...]:
  """Index of a right-aligned broadcast operand: leading axes dropped, size-1 axes read at 0."""
  tail = idx[len(idx) - len(src):] if src else ()
  return tuple(_idx(0) if s == 1 and d != 1 else i for i, s, d in zip(tail, src, dst[len(dst) - len(src):]))


# ---- which values get their own buffer ----------------------------------------------------------------


def _rereads(user: UOp, src: UOp) -> bool:
  """Does `user` read an element of `src` more than once per element of its own value?"""
  if user.op is Ops.INDEX: return True
  if user.op is Ops.STORE: return src.shape != user.src[0].shape
  if user.op is Ops.EXPAND or user.op in GroupOp.ALU or user.op in (Ops.CAST, Ops.BITCAST): return src.shape != user.shape
  return False


def _order(sink: UOp) -> list[UOp]:
  """The data graph under `sink` (shape operands left out), sources before users."""
  return sink.toposort(_data_srcs)


def _realized(order: list[UOp], unfused: frozenset[UOp], nested: frozenset[UOp] = frozenset()) -> tuple[set[UOp], set[UOp]]:
  """The values that get an intermediate buffer, and the REDUCEs read more than once per element that
  are tried fused into their consumer (those in `unfused` were found not to fuse, those in `nested`
  are long reductions found inside another reduction's loop on a GPU; see the module docstring)."""
  uses: dict[UOp, int] = {u: 0 for u in order}
  reread: dict[UOp, bool] = {u: False for u in order}
  stored: set[UOp] = set()  # values a STORE writes as they are
  out: set[UOp] = set()
  fusing: set[UOp] = set()
  for u in reversed(order):  # users before their sources
    if u.op is Ops.STORE and len(u.src) == 2 and u.src[1].shape == u.src[0].shape: stored.add(u.src[1])
    read_again = u.op is Ops.REDUCE and (uses[u] > 1 or reread[u])
    if read_again and u not in unfused: fusing.add(u)
    forced = u.op in (Ops.CONTIGUOUS, Ops.LOAD) or u in nested or u in unfused and (read_again or u.op is not Ops.REDUCE)
    if forced and not (u in stored and uses[u] == 1): out.add(u)
    root = forced or u.op in (Ops.STORE, Ops.CALL, Ops.GETTUPLE)  # the start of a kernel (or of a CALL's)
    own_uses, own_reread = (1, False) if root else (uses[u], reread[u])
    for s in _data_srcs(u):
      uses[s] = min(2, uses[s] + own_uses)
      reread[s] = reread[s] or own_reread or _rereads(u, s)
  return out, fusing


# ---- lowering one kernel ------------------------------------------------------------------------------

_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1}


_DIVISIONS = frozenset({Ops.IDIV, Ops.MOD, Ops.FLOORDIV, Ops.FLOORMOD})


def _defined_outside(u: UOp, lowered: tuple[UOp, ...], valid: UOp) -> tuple[UOp, ...]:
  """u's operands with those whose value outside a PAD's `valid` could make u undefined replaced there (u's
  result is not selected there, but undefined behaviour is undefined anyway): the loads read their alt value 0,
  so an integer divisor is 1, a float cast to an integer 0 (1/0 would be inf), and a shift amount 0 (index
  arithmetic there may be any value: an arange's -1 one place before its start)."""
  op, dt = u.op, u.dtype.scalar
  def where(x: UOp, v) -> UOp: return UOp(Ops.WHERE, x.dtype, (valid, x, UOp.const(x.dtype, v)))
  if op in _DIVISIONS and dt.is_int(): return (lowered[0], where(lowered[1], 1))
  if op in (Ops.SHL, Ops.SHR): return (lowered[0], where(lowered[1], 0))
  if op is Ops.CAST and u.src[0].dtype.scalar.is_float() and not dt.is_float() and not dt.is_bool(): return (where(lowered[0], 0.0),)
  return lowered


def _identity(op: Ops, dt: DType):
  if op is Ops.MAX: return -float("inf") if dt.is_float() else dt.min
  v = _IDENTITY[op]
  return float(v) if dt.is_float() else bool(v) if dt.is_bool() else v


class _Kernel(FusionChecks):
  """Builds one kernel: its RANGE axes, accumulators, and the memoized lowering of tensor values at an index."""

  def __init__(self, program: "_Rangeify"):
    self.program = program
    self.n_axes = 0
    self.n_regs = 0
    self.memo: dict[tuple, UOp] = {}
    self.outputs: tuple[UOp, ...] = ()  # the output loops, outermost first
    self.enclosing: list[tuple[UOp, ...]] = []  # the loops around each reduction being lowered, innermost last
    self.beside: list[tuple[UOp, set[UOp], list[UOp]]] = []  # fused REDUCEs read at a prefix of the output loops (GPU)
    self.reduce_outers: list[tuple[UOp, ...]] = []  # the loops around each reduction loop
    self.deferred: list[list[UOp]] = []  # values to realize if the reductions being lowered keep their loops
    self.merged: dict[UOp, list[UOp]] = {}  # a REDUCE lowered as more loops of the enclosing one: its loop list
    self.lowered_at: dict[UOp, set[tuple[UOp, ...]]] = {}  # a fused REDUCE -> the indices its loop was lowered at
    self.fanout: dict[UOp, int] = {}  # an elementwise value -> the (index, gate) pairs it was lowered at (check_fanout)
    self.alu_path: list[UOp] = []  # the elementwise values being lowered, innermost last

  def buffer_size(self, index: UOp) -> int | None:
    """The element count of the program buffer an INDEX addresses (None: an accumulator, or symbolic)."""
    if (slot := _slot(index)) is None or (buf := self.program.by_slot.get(slot)) is None: return None
    return prod(buf.shape) if all(isinstance(d, int) for d in buf.shape) else None

  @staticmethod
  def ptr(buf: BufferInfo) -> UOp: return UOp(Ops.PARAM, buf.dtype.ptr(), (), (buf.slot, buf.name))

  def new_range(self, bound: sint, kind: AxisType) -> UOp:
    self.n_axes += 1
    return UOp(Ops.RANGE, dtypes.index, (_idx(bound),), (self.n_axes - 1, kind))

  def loop_index(self, shape: tuple[sint, ...]) -> tuple[UOp, ...]:
    idx = tuple(_idx(0) if d == 1 else self.new_range(d, AxisType.LOOP) for d in shape)
    self.outputs = tuple(i for i in idx if i.op is Ops.RANGE)
    return idx

  def load(self, buf: BufferInfo, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    at = UOp(Ops.INDEX, self.ptr(buf).dtype, (self.ptr(buf), _flat(idx, buf.shape)))
    if valid is None: return UOp(Ops.LOAD, buf.dtype, (at,))
    return UOp(Ops.LOAD, buf.dtype, (at, UOp.const(buf.dtype, _identity(Ops.ADD, buf.dtype)), valid))

  def lower(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    """The scalar value of tensor `u` at `idx` (loads gated by `valid`), reading realized values and
    constant data."""
    if _is_constant(u): return self.load(self.program.constant(u), idx, valid)
    if u in self.program.buffer_of: return self.load(self.program.read(u, None), idx, valid)
    return self.define(u, idx, valid)

  def define(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    """Like `lower`, but computes `u` itself even when it is realized (the kernel that writes it)."""
    key = (u, idx, valid)
    if key not in self.memo: self.memo[key] = self._define(u, idx, valid)
    return self.memo[key]

  def _define(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    op, src = u.op, u.src
    if op in (Ops.CONST, Ops.DEFINE_VAR): return u
    if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
      self.check_fanout(u)
      if self.program.reads.get(u, True): self.check_repeats(u, idx, valid)
      if op is Ops.BITCAST and u.dtype.itemsize != src[0].dtype.itemsize:
        raise CompileError([error(None, f"BITCAST between sizes ({src[0].dtype} to {u.dtype}) is not supported in tensor programs")])
      self.alu_path.append(u)
      try: lowered = tuple(self.lower(s, _broadcast_index(idx, s.shape, u.shape), valid) for s in src)
      finally: self.alu_path.pop()
      return u.replace(src=_defined_outside(u, lowered, valid) if valid is not None else lowered)
    if op is Ops.AFTER and (base := _strip_after(u)) in self.program.buffer_of:
      return self.load(self.program.read(base, _version(u)), idx, valid)
    if op in GroupOp.Markers or op in (Ops.AFTER, Ops.LOAD): return self.lower(src[0], idx, valid)
    if op is Ops.REDUCE: return self.reduce(u, idx, valid)
    if op is Ops.PAD: return self.pad(u, idx, valid)
    if op is Ops.STACK: return self.stack(u, idx, valid)
    if op is Ops.INDEX: return self.gather(u, idx, valid)
    if op in GroupOp.Movement: return self.lower(src[0], self.move(u, idx), valid)
    raise CompileError([error(None, f"Rangeify cannot lower {op.name} in a tensor program")])

  def move(self, u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """The source index of a movement op (other than PAD) read at `idx`."""
    op, s0 = u.op, u.src[0].shape
    if op is Ops.RESHAPE: return _reshape_index(idx, s0, u.shape)
    if op is Ops.EXPAND: return _broadcast_index(idx, s0, u.shape)
    if op is Ops.PERMUTE:
      out = [idx[0]] * len(idx)
      for j, a in enumerate(u.arg): out[a] = idx[j]
      return tuple(out)
    if op is Ops.SHRINK: return tuple(_add(i, _idx(o)) for i, o in zip(idx, shape_values(u.src[1])))
    # FLIP
    return tuple(_add(_idx(n - 1) if isinstance(n, int) else _add(n, _idx(-1)), _mul(i, _idx(-1))) if f else i
                 for i, n, f in zip(idx, s0, u.arg))

  def pad(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    inner, inside = [], None
    for i, o, n, d in zip(idx, shape_values(u.src[1]), u.src[0].shape, u.shape):
      inner.append(_add(i, _mul(_idx(o), _idx(-1))))
      if not (isinstance(o, int) and o == 0): inside = _and(inside, _lt(_add(_idx(o), _idx(-1)), i))
      if not all(isinstance(x, int) for x in (o, n, d)) or o + n != d: inside = _and(inside, _lt(i, _add(_idx(o), _idx(n))))
    if inside is None: return self.lower(u.src[0], tuple(inner), valid)
    value = self.lower(u.src[0], tuple(inner), _and(valid, inside))
    if value.op is Ops.LOAD and len(value.src) == 3 and value.src[2] is _and(valid, inside): return value
    return UOp(Ops.WHERE, u.dtype, (inside, value, UOp.const(u.dtype, _identity(Ops.ADD, u.dtype))))

  def stack(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    """A new leading axis: choose among the stacked values by the first index."""
    value = self.lower(u.src[-1], idx[1:], valid)
    for k in range(len(u.src) - 2, -1, -1):
      value = UOp(Ops.WHERE, u.dtype, (_lt(idx[0], _idx(k + 1)), self.lower(u.src[k], idx[1:], valid), value))
    return value

  def gather(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    """Tensor INDEX: a ()-shaped index picks one element of its axis, a (k,)-shaped one makes an axis."""
    pos, base_idx = 0, []
    for i in u.src[1:]:
      at = () if i.shape == () else (idx[pos],)
      pos += len(at)
      v = self.lower(i, at, valid)
      base_idx.append(v if v.dtype == dtypes.index else UOp(Ops.CAST, dtypes.index, (v,)))
    return self.lower(u.src[0], tuple(base_idx) + idx[pos:], valid)

  def reduce(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    red, axes = u.arg
    src, dt = u.src[0], u.dtype
    inner = list(idx)
    ranges = []
    for a in axes:
      if src.shape[a] == 1: continue
      inner[a] = self.new_range(src.shape[a], AxisType.REDUCE)
      ranges.append(inner[a])
    if (loops := self.merged.pop(u, None)) is not None:  # the enclosing reduction's loops, its own inside them
      loops.extend(ranges)
      return self.lower(src, tuple(inner), valid)
    if ranges and (nested := nested_reduce(self.program, u)) is not None: self.merged[nested] = ranges  # uopc.stages.nested_sums
    if not ranges:
      if u in self.program.fusing: self.check_fused(u, idx, valid)
      return self.lower(src, tuple(inner), valid)
    outer = _ranges(idx, valid)
    mine = len(self.reduce_outers)
    self.reduce_outers.append(outer)
    self.enclosing.append(outer)
    self.deferred.append([])
    try: value = self.lower(src, tuple(inner), valid)
    except (_Unfused, _Nested) as e:  # a realization found while lowering its body: one deferred before it goes first
      if self.deferred[-1]: raise _Unfused(self.deferred[-1][0]) from None
      if self.program.realize_nested and (term := _term_instead(src, e.reduce, ranges)) is not None: raise _Nested(term) from None
      raise
    finally:
      self.enclosing.pop(); repeated = self.deferred.pop()  # noqa: E702
      if ranges: self.merged.pop(nested, None)  # not met (its value was lowered before): it kept its own loops
    value, ranges = trim(value, ranges, _identity(red, dt), self.buffer_size)
    if len(ranges) == 1 and (closed := collapse(red, simplify_given(value, valid), ranges[0])) is not None:
      del self.reduce_outers[mine]  # no loop after all (an arange's count: a masked softmax's mask holds one per row)
      return closed
    for v in repeated: self.unfuse(v)
    if u in self.program.fusing: self.check_fused(u, idx, valid, ranges); self.check_reread(u, idx, ranges)  # noqa: E702 - a loop-free closed form fuses anywhere
    self.check_nested(u, ranges, outer)
    acc = UOp(Ops.BUFFER, dt.ptr(AddrSpace.REG, 1), (), (self.n_regs, f"acc{self.n_regs}"))
    self.n_regs += 1
    zero = _idx(0)
    init = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, acc.dtype, (UOp(Ops.AFTER, acc.dtype, (acc,) + outer) if outer else acc, zero)),
                                        UOp.const(dt, _identity(red, dt))))
    current = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, acc.dtype, (UOp(Ops.AFTER, acc.dtype, (acc, init) + tuple(ranges)), zero)),))
    body = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, acc.dtype, (acc, zero)), UOp(red, dt, (current, value))))
    for r in reversed(ranges): body = UOp(Ops.END, dtypes.void, (body, r))
    return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, acc.dtype, (UOp(Ops.AFTER, acc.dtype, (acc, body)), zero)),))


# ---- the program --------------------------------------------------------------------------------------


def _is_constant(u: UOp) -> bool:
  """Constant data: a BINARY (u8 elements) or a BITCAST view of one (its bytes as wider elements)."""
  return u.op is Ops.BINARY or is_data_view(u)


def _slot(index: UOp) -> int | None:
  """The slot of the pointer PARAM an INDEX addresses (None for an accumulator)."""
  return index.src[0].arg[0] if index.src[0].op is Ops.PARAM else None


def _loads_elsewhere(sink: UOp, buf: BufferInfo) -> bool:
  """Does a kernel load an element of `buf` at another index than the ones it stores? (Then an
  iteration could read an element that another has already overwritten.)"""
  nodes = sink.toposort()
  stored_at = {u.src[0] for u in nodes if u.op is Ops.STORE and _slot(u.src[0]) == buf.slot}
  return any(u.op is Ops.LOAD and _slot(u.src[0]) == buf.slot and u.src[0] not in stored_at for u in nodes)


class _Snapshot(Exception):
  """A read needs the version that `store` replaces (see the module docstring): lower again with it saved."""

  def __init__(self, store: UOp):
    super().__init__()
    self.store = store


class _Rangeify:
  def __init__(self, sink: UOp, unfused: frozenset[UOp], snapshot: frozenset[UOp], cpu: bool, nested: frozenset[UOp] = frozenset()):
    self.unfused, self.snapshot, self.cpu = unfused, snapshot, cpu
    self.realize_nested, self.nested = not cpu, nested
    self.costs: dict[UOp, int] = {}  # fusion_cost.elementwise_cost's memo
    self.reads = reads_something(sink)  # values that are not index arithmetic
    self.version: dict[str, UOp | None] = {}                   # buffer name -> the STORE that wrote its contents
    self.replaced_by: dict[tuple[str, UOp | None], UOp] = {}   # (buffer name, version) -> the STORE that overwrote it
    self.saved: dict[UOp, BufferInfo] = {}                      # STORE -> the copy of the version it overwrote
    self.fusing: set[UOp] = set()
    self.fused_in: dict[UOp, _Kernel] = {}
    self.buffers: dict[str, BufferInfo] = {}
    self.buffer_of: dict[UOp, BufferInfo] = {}
    self.constants: dict[tuple[bytes, DType], BufferInfo] = {}  # (data, dtype) -> its read-only buffer
    self.kernels: list[UOp] = []
    self.call_results: dict[UOp, list[BufferInfo]] = {}
    self.callees: dict[UOp, tuple[int, KernelProgram]] = {}
    self.by_slot: dict[int, BufferInfo] = {}
    self.launches: list[Launch] = []
    self.collectives: list[Collective] = []
    self.forwarded: set[UOp] = set()  # STOREs whose value a collective call writes in place (collective_calls)
    order = _order(sink)
    graph = order + [_strip_after(u.src[0]) for u in order if u.op is Ops.STORE]
    params = list(dict.fromkeys(u for u in graph if u.op is Ops.PARAM))
    self.next_slot = self.first_temp_slot = max((p.arg[0] + 1 for p in params), default=0)
    for p in params: self.buffer_of[p] = self.declare(p.arg[1], p.dtype, p.shape, p.arg[0], p.device)
    for b in dict.fromkeys(u for u in graph if u.op is Ops.BUFFER): self.buffer_of[b] = self.declare(b.arg[1], b.dtype, b.shape, device=b.device)
    self.emit(order)
    self.variables = tuple(sorted((u for u in sink.toposort() if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0]))

  def emit(self, order: list[UOp]) -> None:
    """The kernels of a data graph, in order: its STOREs, realized values and CALLs."""
    realized, fusing = _realized(order, self.unfused, self.nested)
    self.fusing |= fusing
    forwards = collective_calls.forwarded(order)
    for u in order:
      if u.op is Ops.STORE: self.store_kernel(u)
      elif u.op is Ops.CALL: self.call(u, forwards.get(u, {}))
      elif u.op is Ops.GETTUPLE and u.src[0].op is Ops.CALL: self.buffer_of[u] = self.call_results[u.src[0]][u.arg]
      elif u in realized: self.buffer_of[u] = self.realize(u, lambda buf: self.kernel(buf, u, None, realize=True))

  def realize(self, u: UOp, write) -> BufferInfo:
    buf = self.declare(self.fresh_name(), u.dtype, u.shape, device=u.device)
    write(buf)
    return buf

  def call(self, c: UOp, forward: dict[int, UOp]) -> None:
    """An opaque CALL: its arguments in buffers, then the launches of its body's kernels (compiled once
    per body) bound to them, to fresh result buffers (or, for `forward`'s results, the buffer its STORE
    writes) and to fresh intermediates of this call site, each on its device in the body."""
    bind_arguments(c)  # every formal has an argument of its shape
    args = [self.argument(a) for a in c.src[1:]]
    first, body = self.callee(c.src[0], len(args))
    site = dict(enumerate(args))
    for k, st in forward.items():
      site[len(args) + k] = self.buffer_of[st.src[0]]
      self.forwarded.add(st)
    for b in body.buffers:
      if b.slot in site: continue
      site[b.slot] = self.constant_buffer(b.data, b.dtype, b.shape) if b.data is not None else self.declare(self.fresh_name(), b.dtype, b.shape, device=b.device)
    start = len(self.launches)
    self.launches += [replace(ln, kernel=first + ln.kernel, binds=tuple((s, site[b.slot]) for s, b in ln.binds)) for ln in body.launches]
    self.call_results[c] = [site[len(args) + i] for i in range(len(c.src[0].src))]
    if collective_calls.is_collective(c):
      self.collectives.append(Collective(c.arg[0], c.arg[1], tuple(args), tuple(self.call_results[c]), start, len(self.launches)))

  def argument(self, a: UOp) -> BufferInfo:
    """The buffer holding a CALL's argument: the version of a buffer it names, else a realized copy."""
    base = _strip_after(a)
    if base in self.buffer_of and (a is base or a.op is Ops.AFTER): return self.read(base, _version(a))
    return self.buffer_of.get(a) or self.realize(a, lambda buf: self.kernel(buf, a, None))

  def read(self, u: UOp, version: UOp | None) -> BufferInfo:
    """Where the kernels emitted from now on find `version` of buffer `u` (any value of a realized one)."""
    buf = self.buffer_of[u]
    if version is self.version.get(buf.name): return buf
    store = self.replaced_by[(buf.name, version)]
    if store not in self.saved: raise _Snapshot(store)
    return self.saved[store]

  def callee(self, body: UOp, n_args: int) -> tuple[int, KernelProgram]:
    """The body of a CALL as a program of its own (formals at their slots, result i at slot `n_args + i`),
    rangeified at its first call; its kernels join this program's from the index returned."""
    if body not in self.callees:
      taken = {u.arg[1] for u in body.toposort() if u.op in GroupOp.Buffers}
      names = [f"result{i}" for i in range(len(body.src))]
      while taken & set(names): names = ["_" + n for n in names]
      stores = tuple(UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, v.dtype, (UOp.shape_of(v.shape),),
                                                         (n_args + i, name) + ((v.device,) if isinstance(v.device, str) else ())), v))
                     for i, (v, name) in enumerate(zip(body.src, names)))
      self.callees[body] = (len(self.kernels), rangeify(UOp(Ops.SINK, dtypes.void, stores), self.cpu))
      self.kernels += self.callees[body][1].kernels
    return self.callees[body]

  def declare(self, name: str, dtype: DType, shape, slot: int | None = None, device=None, data: bytes | None = None) -> BufferInfo:
    """An entry argument (at its slot), or an intermediate or constant (at the next free slot), on `device`."""
    if name in self.buffers: raise CompileError([error(None, f"two different buffers are named '{name}'")])
    if slot is None: slot, self.next_slot = self.next_slot, self.next_slot + 1
    self.buffers[name] = self.by_slot[slot] = BufferInfo(name, dtype, shape, slot, slot < self.first_temp_slot, device, data)
    return self.buffers[name]

  def constant(self, u: UOp) -> BufferInfo:
    """The read-only buffer of constant data `u` (one per distinct data and dtype), declared at first use."""
    data = u.arg if u.op is Ops.BINARY else u.src[0].arg
    return self.constant_buffer(data, u.dtype, u.shape)

  def constant_buffer(self, data: bytes, dtype: DType, shape) -> BufferInfo:
    key = (data, dtype)
    if key not in self.constants: self.constants[key] = self.declare(self.fresh_name("const"), dtype, shape, data=data)
    return self.constants[key]

  def fresh_name(self, stem: str = "tmp") -> str:
    n = len(self.buffers)
    while f"{stem}{n}" in self.buffers: n += 1
    return f"{stem}{n}"

  def store_kernel(self, st: UOp) -> None:
    target = _strip_after(st.src[0])
    if target not in self.buffer_of:
      raise CompileError([error(None, f"a tensor STORE must write a PARAM or BUFFER, not {target.op.name}")])
    out, value, gate = self.buffer_of[target], st.src[1], st.src[2] if len(st.src) > 2 else None
    before = self.version.get(out.name)
    if st in self.forwarded: return self.overwrite(out, before, st)  # written by its collective call
    if st in self.snapshot:
      current = target if before is None else UOp(Ops.AFTER, target.dtype, (target, before))
      self.saved[st] = self.realize(current, lambda buf: self.kernel(buf, current, None))
      self.overwrite(out, before, st)  # before the kernel: its own reads of `before` load the copy
      self.kernel(out, value, gate)
    else:
      self.kernel(out, value, gate, in_place=st)
      self.overwrite(out, before, st)

  def overwrite(self, buf: BufferInfo, version: UOp | None, store: UOp) -> None:
    self.version[buf.name], self.replaced_by[(buf.name, version)] = store, store

  def kernel(self, out: BufferInfo, value: UOp, gate: UOp | None, realize: bool = False, in_place: UOp | None = None) -> None:
    """The kernel writing `value` into `out` (computing `value` itself when it is being realized); `in_place`:
    the STORE it lowers, whose reads of `out` load it directly, which needs them at the stored indices."""
    k = _Kernel(self)
    out_ptr = k.ptr(out)
    idx = k.loop_index(out.shape)
    v = (k.define if realize else k.lower)(value, _broadcast_index(idx, value.shape, out.shape), None)
    srcs = (UOp(Ops.INDEX, out_ptr.dtype, (out_ptr, _flat(idx, out.shape))), v)
    if gate is not None: srcs += (k.lower(gate, _broadcast_index(idx, gate.shape, out.shape), None),)
    k.check_beside(v)
    body = UOp(Ops.STORE, dtypes.void, srcs)
    for r in reversed([i for i in idx if i.op is Ops.RANGE]): body = UOp(Ops.END, dtypes.void, (body, r))
    sink = simplify(UOp(Ops.SINK, dtypes.void, (body,)))
    if in_place is not None and _loads_elsewhere(sink, out): raise _Snapshot(in_place)
    self.launch(sink)

  def launch(self, sink: UOp) -> None:
    """A kernel of this program, run once with its PARAM slots bound to the buffers of those slots."""
    nodes = sink.toposort()
    slots = sorted({u.arg[0] for u in nodes if u.op is Ops.PARAM})
    written = [self.by_slot[_slot(u.src[0])].device for u in nodes if u.op is Ops.STORE and _slot(u.src[0]) is not None]
    device = written[0] if written else None
    peers = tuple(dict.fromkeys(d for s in slots if (d := self.by_slot[s].device) not in (device, None)))
    copy = contiguous_copy(sink) if peers else None
    if copy is not None and prod(d if isinstance(d, int) else -1 for d in self.by_slot[copy.dst].shape) != copy.count: copy = None
    self.launches.append(Launch(len(self.kernels), tuple((s, self.by_slot[s]) for s in slots), device, peers, copy))
    self.kernels.append(sink)


def rangeify(sink: UOp, cpu: bool = False, fast_math: bool = False) -> KernelProgram:
  """Split a callified tensor program into kernels (see the module docstring); `cpu`: for a CPU target
  (`uopc.stages.cpu_graph`'s rewrites first, the fusion cost's CPU weights), else a GPU target
  (`uopc.stages.gpu_graph`'s split of long reductions to few values first; long reductions nested in
  another reduction's loop realized); `fast_math`: widened half-precision products exact first
  (`uopc.stages.fast_math`)."""
  if fast_math: sink = exact_half_products(sink)
  sink = contraction_order(sink, fewer_products=cpu)
  sink = cpu_graph(sink) if cpu else gpu_graph(sink)
  sink = reads_before_writes(sink)
  unfused: frozenset[UOp] = frozenset()
  snapshot: frozenset[UOp] = frozenset()
  nested: frozenset[UOp] = frozenset()
  while True:
    try:
      r = _Rangeify(sink, unfused, snapshot, cpu, nested)
      break
    except _Unfused as e:
      unfused |= {e.reduce}
    except _Nested as e:
      nested |= {e.reduce}
    except _Snapshot as e:
      snapshot |= {e.store}
  return KernelProgram(tuple(r.kernels), tuple(sorted(r.buffers.values(), key=lambda b: b.slot)), r.variables, tuple(r.launches),
                       tuple(r.collectives))
