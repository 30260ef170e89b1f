"""The one node type of the IR: an immutable, hash-consed UOp `(op, src, arg, dtype, tag)`.

Structurally equal UOps are the same Python object, so `==` is identity, hashing is O(1) and a
rewrite that rebuilds an unchanged node gets the very node back. Derived properties (shape, device,
addrspace, min_max, axis) are computed once per node, lazily, by the rules of seed 000's table.
"""
from __future__ import annotations

import math
import struct
import weakref
from functools import cached_property
from typing import Any, Callable, Iterator, Union

from uopc.dtype import AddrSpace, DType, PtrDType, dtype_range, dtypes, truncate
from uopc.ops import GroupOp, Ops

sint = Union[int, "UOp"]  # a shape entry: a known size or a symbolic index-valued UOp


def _arg_key(arg: Any) -> Any:
  """A key for `arg` that tells apart what Python's == conflates: 0.0/-0.0, 1/True, NaN payloads."""
  if isinstance(arg, float): return ("f", struct.pack("<d", arg))
  if isinstance(arg, bool): return ("b", arg)
  if isinstance(arg, tuple): return ("t",) + tuple(_arg_key(a) for a in arg)
  return arg


# The hash-consing table: key -> weak reference to the live UOp. A plain dict of KeyedRefs rather than
# a WeakValueDictionary, whose lookups raise and catch KeyError on every miss: raising walks the chain of
# running generators (CPython's topmost-exception search), so inside a deep recursion through generator
# expressions each new node cost time proportional to the depth, and building a long chain was quadratic.
_CACHE: dict[tuple, weakref.KeyedRef] = {}


def _evict(ref: weakref.KeyedRef) -> None:
  """A cached UOp died: drop its entry (unless the key was since given to a new node)."""
  if _CACHE.get(ref.key) is ref: del _CACHE[ref.key]


class UOp:
  __slots__ = ("op", "src", "arg", "dtype", "tag", "__weakref__", "__dict__")
  op: Ops
  src: tuple["UOp", ...]
  arg: Any
  dtype: DType
  tag: Any

  def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple["UOp", ...] = (), arg: Any = None, tag: Any = None):
    key = (op, dtype, src, _arg_key(arg), tag)
    if (ref := _CACHE.get(key)) is not None and (hit := ref()) is not None: return hit
    u = object.__new__(cls)
    object.__setattr__(u, "op", op); object.__setattr__(u, "dtype", dtype); object.__setattr__(u, "src", src)  # noqa: E702
    object.__setattr__(u, "arg", arg); object.__setattr__(u, "tag", tag)  # noqa: E702
    _CACHE[key] = weakref.KeyedRef(u, _evict, key)
    return u

  def __setattr__(self, name, value):
    if name in UOp.__slots__: raise AttributeError("UOp is immutable")
    object.__setattr__(self, name, value)

  def __reduce__(self): return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))
  def __repr__(self) -> str:
    return f"UOp({self.op!r}, {self.dtype!r}, arg={self.arg!r}, src=({', '.join(s.op.name for s in self.src)}))"

  def replace(self, **kw) -> "UOp":
    new = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg, "tag": self.tag} | kw
    return UOp(new["op"], new["dtype"], tuple(new["src"]), new["arg"], new["tag"])

  # ---- graph walking -------------------------------------------------------------------------------
  def toposort(self, srcs: Callable[["UOp"], tuple["UOp", ...]] | None = None) -> list["UOp"]:
    """Every node reachable from self through `srcs` (default: every source), sources before users, in a
    deterministic order (a depth-first post-order, sources left to right). The default walk is done once
    per node and kept (a UOp never changes): passes ask for the same kernel's order many times."""
    if srcs is not None: return _toposort(self, srcs)
    if (order := self.__dict__.get("_toposort")) is None: self.__dict__["_toposort"] = order = tuple(_toposort(self, _sources))
    return list(order)

  def walk(self) -> Iterator["UOp"]: return iter(self.toposort())

  # ---- constructors used by passes and tests ------------------------------------------------------
  @staticmethod
  def const(dtype: DType, value: Any) -> "UOp": return UOp(Ops.CONST, dtype, (), value)
  @staticmethod
  def shape_of(dims: tuple[sint, ...]) -> "UOp":
    """The shape operand of BUFFER/PARAM/RESHAPE/EXPAND/PAD/SHRINK: a STACK of index scalars."""
    return UOp(Ops.STACK, dtypes.index, tuple(d if isinstance(d, UOp) else UOp.const(dtypes.index, d) for d in dims))
  def alu(self, op: Ops, *others: "UOp") -> "UOp":
    dt = dtypes.bool.vec(self.dtype.count) if op in GroupOp.Comparison else (others[0].dtype if op is Ops.WHERE else self.dtype)
    return UOp(op, dt, (self,) + others)

  # ---- derived properties --------------------------------------------------------------------------
  @cached_property
  def shape(self) -> tuple[sint, ...] | None: return _shape(self)
  @cached_property
  def device(self) -> Any: return _device(self)
  @cached_property
  def addrspace(self) -> AddrSpace | None: return _addrspace(self)
  @cached_property
  def min_max(self) -> tuple: return _min_max(self)
  @cached_property
  def axis(self) -> int | None: return _axis(self)
  @property
  def vmin(self): return self.min_max[0]
  @property
  def vmax(self): return self.min_max[1]


def _sources(u: UOp) -> tuple[UOp, ...]: return u.src


def _toposort(root: UOp, srcs: Callable[[UOp], tuple[UOp, ...]]) -> list[UOp]:
  """The post-order of a depth-first walk from `root`, with an explicit stack (graph depth is unbounded)."""
  order, seen = [], {root}
  stack = [(root, iter(srcs(root)))]
  while stack:
    u, it = stack[-1]
    for s in it:
      if s not in seen:
        seen.add(s)
        stack.append((s, iter(srcs(s))))
        break
    else:
      stack.pop()
      order.append(u)
  return order


# ---- shape ---------------------------------------------------------------------------------------------
def shape_values(u: UOp) -> tuple[sint, ...] | None:
  """The dims a shape operand spells: CONST entries as ints, anything else stays symbolic."""
  if u.op is not Ops.STACK: return None
  return tuple(s.arg if s.op is Ops.CONST else s for s in u.src)


def broadcast_shapes(*shapes: tuple[sint, ...]) -> tuple[sint, ...] | None:
  """Right-align, take the size that is not 1 per axis; None when two sizes disagree."""
  n = max((len(s) for s in shapes), default=0)
  out = []
  for dims in zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes]):
    sizes = {d for d in dims if not (isinstance(d, int) and d == 1)}
    if len(sizes) > 1: return None
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def is_data_view(u: UOp) -> bool:
  """BITCAST(BINARY) to a wider dtype: the data's little-endian bytes read as elements of that dtype (a
  typed constant tensor); as in tinygrad, a BITCAST between sizes rescales the last axis, here the only one."""
  return (u.op is Ops.BITCAST and len(u.src) == 1 and u.src[0].op is Ops.BINARY and isinstance(u.src[0].arg, bytes)
          and u.dtype.itemsize != 1 and u.dtype.count == 1)


def is_vector_stack(u: UOp) -> bool:
  """A STACK of scalars into a vector dtype (kernel level) rather than a new tensor axis."""
  return u.op is Ops.STACK and u.dtype.count > 1 and u.dtype.count == len(u.src)


def _shape(u: UOp) -> tuple[sint, ...] | None:
  op, src = u.op, u.src
  if op in GroupOp.Buffers:
    if src: return shape_values(src[0])
    return (u.dtype.size,) if isinstance(u.dtype, PtrDType) and u.dtype.size >= 0 else None
  if op is Ops.BINARY: return (len(u.arg),) if isinstance(u.arg, (bytes, tuple)) else None
  if op in (Ops.CONST, Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR, Ops.BIND, Ops.STORE, Ops.GEP, Ops.WMMA,
            Ops.ATOMICADD, Ops.CUSTOM, Ops.CUSTOMI): return ()
  if op in GroupOp.Void or op in (Ops.TUPLE, Ops.FUNCTION, Ops.CALL, Ops.PROGRAM, Ops.SOURCE, Ops.INS): return None
  if not src: return ()
  s0 = src[0].shape
  if op is Ops.STACK:
    if is_vector_stack(u): return s0
    return None if s0 is None else (len(src),) + s0
  if op in (Ops.RESHAPE, Ops.EXPAND): return shape_values(src[1]) if len(src) > 1 else None
  if op in (Ops.PAD, Ops.SHRINK): return shape_values(src[2]) if len(src) > 2 else None
  if op is Ops.PERMUTE:
    if s0 is None or not isinstance(u.arg, tuple) or not all(type(i) is int for i in u.arg): return None
    if sorted(u.arg) != list(range(len(s0))): return None
    return tuple(s0[i] for i in u.arg)
  if op is Ops.INDEX: return _index_shape(u)
  if op is Ops.REDUCE:
    if s0 is None: return None
    if len(src) > 1: return s0  # kernel-level REDUCE over RANGEs: scalars stay scalars
    axes = u.arg[1] if isinstance(u.arg, tuple) and len(u.arg) > 1 else ()
    if not isinstance(axes, tuple): return None  # a malformed arg: the verifier reports it
    return tuple(1 if i in axes else d for i, d in enumerate(s0))
  if op is Ops.GETTUPLE:
    tup = src[0].src[0] if src[0].op in (Ops.FUNCTION, Ops.CALL) and src[0].src else src[0]
    return tup.src[u.arg].shape if tup.op is Ops.TUPLE and isinstance(u.arg, int) and 0 <= u.arg < len(tup.src) else None
  if op is Ops.BITCAST and is_data_view(u): return (len(src[0].arg) // u.dtype.itemsize,)
  if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
    shapes = [s.shape for s in src]
    return None if any(s is None for s in shapes) else broadcast_shapes(*shapes)
  if op in (Ops.MULTI, Ops.MSELECT, Ops.REPLICATED): return _multi_shape(u, s0)
  return s0  # FLIP, LOAD, AFTER, markers, ALLREDUCE


def _multi_shape(u: UOp, s0: tuple[sint, ...] | None) -> tuple[sint, ...] | None:
  """MULTI: the whole tensor (its shard axis n times a shard's); MSELECT: one device's shard of its
  source; REPLICATED: its source without the axis it names."""
  if s0 is None: return None
  a = u.arg if u.op is not Ops.MSELECT else u.src[0].axis
  if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a < len(s0): return s0
  if u.op is Ops.REPLICATED: return s0[:a] + s0[a + 1:]
  n = len(u.src) if u.op is Ops.MULTI else len(u.src[0].device) if isinstance(u.src[0].device, tuple) else 1
  d = s0[a]
  if not isinstance(d, int): return s0
  return s0[:a] + ((d * n) if u.op is Ops.MULTI else (d // n),) + s0[a + 1:]


def _index_shape(u: UOp) -> tuple[sint, ...] | None:
  base = u.src[0].shape
  if base is None or u.src[0].dtype.is_ptr() and not u.src[0].src: return ()  # kernel-level pointer arithmetic
  idxs = u.src[1:]
  if len(idxs) > len(base): return None
  out: list[sint] = []
  for i in idxs:
    if i.shape is None or len(i.shape) > 1: return None
    out.extend(i.shape)  # ()-shaped removes the dim, (k,)-shaped makes it k
  return tuple(out) + tuple(base[len(idxs):])


# ---- device, addrspace, shard axis -------------------------------------------------------------------
def _device(u: UOp) -> Any:
  op, src = u.op, u.src
  if op in GroupOp.Buffers: return u.arg[2] if isinstance(u.arg, tuple) and len(u.arg) > 2 else None
  if op in (Ops.CONST, Ops.RANGE, Ops.DEFINE_VAR, Ops.SPECIAL): return None
  if op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg and u.arg[0] is not None: return u.arg[0]
  if op in (Ops.FUNCTION, Ops.CALL): return src[1].device if len(src) > 1 else None
  if op is Ops.GETTUPLE and src and src[0].op in (Ops.FUNCTION, Ops.CALL) and src[0].src and src[0].src[0].op is Ops.TUPLE:
    tup = src[0].src[0]  # a result of a body: where the body computes it (a collective's results are on several devices)
    if isinstance(u.arg, int) and 0 <= u.arg < len(tup.src) and tup.src[u.arg].device is not None: return tup.src[u.arg].device
  if op is Ops.MULTI: return tuple(s.device for s in src) if all(isinstance(s.device, str) for s in src) else None
  if op is Ops.MSELECT:
    d = src[0].device if src else None
    return d[u.arg] if isinstance(d, tuple) and isinstance(u.arg, int) and 0 <= u.arg < len(d) else None
  if op is Ops.ALLREDUCE and isinstance(u.arg, tuple) and len(u.arg) == 2 and u.arg[1] is not None: return u.arg[1]
  # the buffer acted on decides, not an index, a stored value or a dependency
  if op in (Ops.INDEX, Ops.STORE, Ops.AFTER): return src[0].device if src else None
  # src[0].device per the table; a CONST has none, so a broadcast constant takes its partner's device
  return next((s.device for s in src if s.device is not None), None)


def copy_device(u: UOp) -> Any:
  """The device a LOAD copies to (seed 000's COPY), None when it names none."""
  return u.arg[0] if u.op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg else None


def _addrspace(u: UOp) -> AddrSpace | None:
  if isinstance(u.dtype, PtrDType): return u.dtype.addrspace
  if u.op in GroupOp.Buffers:
    return next((a for a in (u.arg if isinstance(u.arg, tuple) else ()) if isinstance(a, AddrSpace)), AddrSpace.GLOBAL)
  if u.op is Ops.LOAD and isinstance(u.arg, tuple) and len(u.arg) > 1 and isinstance(u.arg[1], AddrSpace): return u.arg[1]
  if u.op in GroupOp.Movement or u.op in (Ops.INDEX, Ops.AFTER, Ops.LOAD) or u.op in GroupOp.Markers:
    return u.src[0].addrspace if u.src else None
  return None


def _axis(u: UOp) -> int | None:
  op, src = u.op, u.src
  # a buffer on an n-tuple device, and a COPY to one, are sharded on axis 0 (seed 000); a scalar has no axis
  if op in GroupOp.Buffers or op is Ops.LOAD and copy_device(u) is not None:
    return 0 if isinstance(u.device, tuple) and u.shape else None
  if op is Ops.MULTI: return u.arg if isinstance(u.arg, int) else None
  if not src or op in (Ops.MSELECT, Ops.ALLREDUCE, Ops.REPLICATED): return None
  a = src[0].axis
  if op is Ops.PERMUTE: return u.arg.index(a) if isinstance(u.arg, tuple) and a in u.arg else None
  if op is Ops.RESHAPE: return _reshape_axis(src[0].shape, u.shape, a)
  if op is Ops.REDUCE:
    axes = u.arg[1] if isinstance(u.arg, tuple) and len(u.arg) > 1 else ()
    return None if not isinstance(axes, tuple) or a in axes else a
  if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):  # operands right-align (the broadcast rule)
    n = len(u.shape) if u.shape is not None else 0
    return next((s.axis + n - len(s.shape) for s in src if s.axis is not None and s.shape is not None), None)
  return a


def _reshape_axis(old: tuple | None, new: tuple | None, axis: int | None) -> int | None:
  """The last axis of `new` with as many elements before it as `old` has before `axis`, so the shard boundary
  stays put (as tinygrad does); None when no axis starts there or a shard's elements would straddle axes."""
  if axis is None or old is None or new is None or not all(isinstance(d, int) for d in old + new): return None
  if not 0 <= axis < len(old): return None
  before = math.prod(old[:axis])
  starts = [i for i in range(len(new)) if math.prod(new[:i]) == before]
  if not starts: return None
  inner = math.prod(new[starts[-1] + 1:])
  return starts[-1] if inner and math.prod(old[axis:]) % inner == 0 else None


# ---- min_max -------------------------------------------------------------------------------------------
def _clamp(lo, hi, dt: DType) -> tuple:
  dlo, dhi = dtype_range(dt)
  if dlo is None: return (lo, hi)
  if dt.scalar.is_float(): return (lo, hi)
  if lo < dlo or hi > dhi: return (dlo, dhi)  # wrapped: nothing better is known
  return (bool(lo), bool(hi)) if dt.scalar.is_bool() else (lo, hi)


def _round_to(lo, hi, dt: DType) -> tuple:
  """[lo, hi] as values of the float dtype `dt`: rounding is monotonic, so the bounds stay bounds."""
  try:
    return (truncate(lo, dt), truncate(hi, dt))
  except (OverflowError, TypeError):
    return dtype_range(dt)


def _min_max(u: UOp) -> tuple:
  op, src, dt = u.op, u.src, u.dtype
  rng = dtype_range(dt)
  if dt.is_ptr() or dt == dtypes.void: return (None, None)
  if op is Ops.CONST:
    v = u.arg
    return (v, v) if isinstance(v, (int, float)) else rng
  if op in (Ops.RANGE, Ops.SPECIAL):
    return (0, src[0].vmax - 1) if src and isinstance(src[0].vmax, int) and src[0].vmax >= 1 else rng
  if op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2]) if isinstance(u.arg, tuple) and len(u.arg) == 3 else rng
  if op is Ops.BIND: return src[1].min_max if len(src) > 1 else rng
  if op in GroupOp.Movement or op in (Ops.INDEX, Ops.AFTER) or op in GroupOp.Markers: return src[0].min_max if src else rng
  # a copy (LOAD of a tensor) keeps its source's values; a load through a pointer can read anything
  if op is Ops.LOAD: return src[0].min_max if src and not src[0].dtype.is_ptr() and src[0].dtype == dt else rng
  if op is Ops.STACK and src and dt.count > 1:  # a vector made of its lanes: the range of them all
    lanes = [s.min_max for s in src]
    if any(lo is None or hi is None or isinstance(lo, float) != isinstance(lanes[0][0], float) for lo, hi in lanes): return rng
    return (min(lo for lo, _ in lanes), max(hi for _, hi in lanes))
  if op is Ops.CAST:
    lo, hi = src[0].min_max
    if lo is None: return rng
    if dt.scalar.is_float(): return _round_to(lo, hi, dt)
    if isinstance(lo, float) and not (math.isfinite(lo) and math.isfinite(hi)): return rng
    if dt.scalar.is_bool(): return (bool(lo) and bool(hi) and not (lo <= 0 <= hi), bool(lo) or bool(hi))
    return _clamp(math.trunc(lo), math.trunc(hi), dt)
  if op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.IDIV, Ops.MOD) and len(src) == 2:
    (a, A), (b, B) = src[0].min_max, src[1].min_max
    if None in (a, A, b, B): return rng
    if op in (Ops.CMPLT, Ops.CMPNE) and src[0].dtype.scalar.is_float() and not (src[0].op is Ops.CONST and src[1].op is Ops.CONST):
      return (False, True)  # a float range cannot say "never NaN", and NaN makes every comparison go the other way
    if op is Ops.CMPLT: return (True, True) if A < b else (False, False) if a >= B else (False, True)
    if op is Ops.CMPNE:
      if a == A == b == B: return (False, False)
      return (True, True) if A < b or B < a else (False, True)
    if dt.scalar.is_float() and any(isinstance(x, float) and math.isnan(x) for x in (a, A, b, B)): return rng
    if op is Ops.ADD: return _clamp(a + b, A + B, dt)
    if op is Ops.MAX: return (max(a, b), max(A, B))
    if op is Ops.MUL:
      if dt.scalar.is_float() and any(math.isinf(x) for x in (a, A, b, B)): return rng
      prods = [a * b, a * B, A * b, A * B]
      return _clamp(min(prods), max(prods), dt)
    return _int_div_range(op, a, A, b, B, rng)
  if op in (Ops.FLOORDIV, Ops.FLOORMOD) and len(src) == 2:
    (a, A), (b, B) = src[0].min_max, src[1].min_max
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (a, A, b, B)) or b != B or b <= 0: return rng
    if op is Ops.FLOORDIV: return (a // b, A // b)
    return (a, A) if a >= 0 and A < b else (0, b - 1)
  if op is Ops.WHERE and len(src) == 3:
    (c, C), (b, B), (e, E) = src[0].min_max, _branch_range(src[0], src[1], True), _branch_range(src[0], src[2], False)
    if None in (b, B, e, E): return rng
    if c is True or e > E: return (b, B)
    if C is False or b > B: return (e, E)
    return (min(b, e), max(B, E))
  return rng


def _branch_range(cond: UOp, v: UOp, taken: bool) -> tuple:
  """The range of a WHERE's branch v where its condition is `taken`: narrowed where the condition compares v
  itself with an integer (a clamp, WHERE(x < 0, 0, x), keeps x >= 0); lo > hi where the branch never runs."""
  lo, hi = v.min_max
  if cond.op is not Ops.CMPLT or not v.dtype.scalar.is_int() or not isinstance(lo, int) or v not in cond.src: return (lo, hi)
  x, y = cond.src
  (ylo, yhi) = (y if x is v else x).min_max
  if not isinstance(ylo, int) or not isinstance(yhi, int): return (lo, hi)
  if x is v: return (lo, min(hi, yhi - 1)) if taken else (max(lo, ylo), hi)  # v < y, or v >= y
  return (max(lo, ylo + 1), hi) if taken else (lo, min(hi, yhi))              # y < v, or v <= y


def _int_div_range(op: Ops, a, A, b, B, rng) -> tuple:
  """IDIV/MOD by a positive constant-range divisor on a non-negative dividend; anything else: dtype range.
  (Beyond the table, which says 'dtype range' for other binaries: index simplification needs this.)"""
  if not all(isinstance(x, int) for x in (a, A, b, B)) or b <= 0 or a < 0: return rng
  if op is Ops.IDIV: return (a // B, A // b)
  return (0, min(A, B - 1)) if b == B or A < b else (0, B - 1)
