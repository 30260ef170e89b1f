"""The verifier: every rule of the IR, one rule set per op, plus rules on whole entries.

Each rule is a generator of messages about one UOp; the message is located at that UOp (for a bad
operand, at its user). Rules never assume their input is well formed: the arity of an op is checked
first and its other rules only run when it holds, and a property that cannot be known (an operand's
shape after an earlier error) skips the rule instead of reporting a cascade of follow-on errors.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable, Iterator

from uopc.diagnostics import Diagnostic, Loc, error
from uopc.dtype import AddrSpace, DType, dtypes, truncate
from uopc.module import Module
from uopc.ops import FUSED, GroupOp, Ops
from uopc.uop import UOp, is_data_view, shape_values
from uopc.verify_kernel import (_check_atomicadd, _check_barrier, _check_end, _check_endif, _check_if, _check_load, _check_range,
                                 _check_special, _check_store, _is_void, _sources_are_effects)
from uopc.verify_multi import check_allreduce, check_mselect, check_multi, check_replicated
from uopc.verify_util import EFFECTS, _count_text, _element, _fmt, _is_device, _is_int, _is_int_scalar, _is_value, _known, _src_count_ok

Check = Callable[[UOp], Iterator[str]]
REDUCE_OPS = (Ops.ADD, Ops.MAX, Ops.MUL)


# ---- operands that spell shapes -----------------------------------------------------------------------
def _shape_operand(u: UOp, s: UOp, what: str) -> Iterator[str]:
  """A shape, offsets or target operand: a STACK of index scalars with non-negative constant entries."""
  if s.op is not Ops.STACK or not all(_is_int_scalar(x.dtype) for x in s.src):
    yield f"{u.op.name} {what} must be a STACK of index scalars, got {s.op.name} of {s.dtype}"
    return
  for d in shape_values(s):
    if _is_int(d) and d < 0: yield f"{u.op.name} {what} has a negative entry {d}"


def _dims(s: UOp) -> tuple | None:
  """The entries of a well-formed shape operand, or None (its own rule reports why)."""
  vals = shape_values(s)
  ok = vals is not None and all(_is_int(d) and d >= 0 or isinstance(d, UOp) for d in vals)
  return vals if ok else None


# ---- source ops ---------------------------------------------------------------------------------------
def _slot_name_arg(u: UOp) -> Iterator[str]:
  # (slot, "name", device?, addrspace?): the slot numbers the launcher's arguments
  a = u.arg
  if not (isinstance(a, tuple) and len(a) >= 2 and _is_int(a[0]) and isinstance(a[1], str)):
    yield f"{u.op.name} arg must be (slot, \"name\", ...), got {a!r}"
    return
  if a[0] < 0: yield f"{u.op.name} slot must be non-negative, got {a[0]}"
  for extra in a[2:]:
    if not (_is_device(extra) or isinstance(extra, AddrSpace)):
      yield f"{u.op.name} arg has {extra!r} where a device or an address space belongs"


def _check_param(u: UOp) -> Iterator[str]:
  yield from _slot_name_arg(u)
  if u.src:  # a tensor-level input: an element dtype and a shape
    yield from _shape_operand(u, u.src[0], "shape")
    if not _is_value(u.dtype): yield f"a shaped PARAM has an element dtype, got {u.dtype}"
  elif not u.dtype.is_ptr(): yield f"a PARAM without a shape is a kernel argument and must be a pointer, got {u.dtype}"
  elif u.dtype.addrspace is not AddrSpace.GLOBAL: yield f"a kernel argument PARAM points to global memory, got {u.dtype}"


def _check_buffer(u: UOp) -> Iterator[str]:
  yield from _slot_name_arg(u)
  if u.src:
    yield from _shape_operand(u, u.src[0], "shape")
    if not _is_value(u.dtype): yield f"a shaped BUFFER has an element dtype, got {u.dtype}"
  elif not (u.dtype.is_ptr() and u.dtype.addrspace in (AddrSpace.LOCAL, AddrSpace.REG) and u.dtype.size >= 1):
    yield f"a BUFFER without a shape must be a LOCAL or REG pointer with a size, got {u.dtype}"


def _const_fits(v: Any, dt: DType) -> bool:
  if dt.is_bool(): return isinstance(v, bool)
  if dt.is_int(): return _is_int(v) and dt.min <= v <= dt.max
  if not dt.is_float() or not isinstance(v, (int, float)) or isinstance(v, bool): return False
  try:
    f = float(v)
  except OverflowError:
    return False
  return not math.isfinite(f) or math.isfinite(truncate(f, dt))  # a finite value must not round to inf


def _check_const(u: UOp) -> Iterator[str]:
  if u.dtype.count != 1 or not _is_value(u.dtype):
    yield f"CONST must have a scalar dtype, got {u.dtype} (vector constants are a STACK of CONSTs)"
  elif not _const_fits(u.arg, u.dtype):
    rng = f" (range {u.dtype.min} to {u.dtype.max})" if u.dtype.is_int() and _is_int(u.arg) else ""
    yield f"CONST value {u.arg!r} is not representable in {u.dtype}{rng}"


def _check_binary_data(u: UOp) -> Iterator[str]:
  if not isinstance(u.arg, bytes): yield f"BINARY arg must be bytes, got {type(u.arg).__name__}"
  if u.dtype is not dtypes.uint8: yield f"BINARY has dtype u8, got {u.dtype}"


def _check_define_var(u: UOp) -> Iterator[str]:
  a = u.arg
  if not _is_int_scalar(u.dtype): yield f"DEFINE_VAR must have an integer dtype, got {u.dtype}"
  if not (isinstance(a, tuple) and len(a) == 3 and isinstance(a[0], str) and _is_int(a[1]) and _is_int(a[2])):
    yield f"DEFINE_VAR arg must be (\"name\", min, max), got {a!r}"
  elif a[1] > a[2]: yield f"DEFINE_VAR '{a[0]}' has min {a[1]} greater than max {a[2]}"


def _check_bind(u: UOp) -> Iterator[str]:
  var, val = u.src
  if var.op is not Ops.DEFINE_VAR: yield f"BIND must bind a DEFINE_VAR, got {var.op.name}"; return  # noqa: E702
  if val.op is not Ops.CONST: yield f"BIND value must be a CONST, got {val.op.name}"; return  # noqa: E702
  if u.dtype is not var.dtype: yield f"BIND has dtype {u.dtype}, its DEFINE_VAR {var.dtype}"
  lo, hi = var.arg[1:] if isinstance(var.arg, tuple) and len(var.arg) == 3 else (None, None)
  if _is_int(val.arg) and _is_int(lo) and _is_int(hi) and not lo <= val.arg <= hi:
    yield f"BIND value {val.arg} is outside the range [{lo}, {hi}] of '{var.arg[0]}'"


# ---- movement ops -------------------------------------------------------------------------------------
def _same_dtype_as_src(u: UOp) -> Iterator[str]:
  # movement ops, markers and AFTER pass their source's elements through unchanged
  if u.dtype is not u.src[0].dtype: yield f"{u.op.name} has dtype {u.dtype}, its source {u.src[0].dtype}"


def _has_value(u: UOp) -> Iterator[str]:
  if u.src[0].dtype is dtypes.void: yield f"{u.op.name} source is a {u.src[0].op.name}, which has no value"


def _check_reshape(u: UOp) -> Iterator[str]:
  yield from _shape_operand(u, u.src[1], "shape")
  old, new = u.src[0].shape, _dims(u.src[1])
  if _known(old) and _known(new) and math.prod(old) != math.prod(new):
    yield f"RESHAPE from {_fmt(old)} ({math.prod(old)} elements) to {_fmt(new)} ({math.prod(new)} elements)"


def _check_expand(u: UOp) -> Iterator[str]:
  yield from _shape_operand(u, u.src[1], "shape")
  old, new = u.src[0].shape, _dims(u.src[1])
  if old is None or new is None: return
  if len(old) != len(new):
    yield f"EXPAND from {_fmt(old)} to {_fmt(new)} changes the number of axes"; return  # noqa: E702
  for i, (s, t) in enumerate(zip(old, new)):
    if _is_int(s) and _is_int(t) and s != 1 and s != t:
      yield f"EXPAND can only broadcast axes of size 1: axis {i} has size {s}, target {t}"


def _offsets_and_target(u: UOp) -> tuple | None:
  """(source shape, offsets, target shape) of a PAD/SHRINK when all are known and agree in length."""
  old, offs, new = u.src[0].shape, _dims(u.src[1]), _dims(u.src[2])
  if not (_known(old) and _known(offs) and _known(new)) or not len(old) == len(offs) == len(new): return None
  return old, offs, new


def _pad_shrink_lengths(u: UOp) -> Iterator[str]:
  yield from _shape_operand(u, u.src[1], "offsets")
  yield from _shape_operand(u, u.src[2], "shape")
  old, offs, new = u.src[0].shape, _dims(u.src[1]), _dims(u.src[2])
  if old is not None and offs is not None and len(offs) != len(old):
    yield f"{u.op.name} has {len(offs)} offsets for a {len(old)}-axis tensor"
  if old is not None and new is not None and len(new) != len(old):
    yield f"{u.op.name} to {_fmt(new)} changes the number of axes of {_fmt(old)}"


def _check_pad(u: UOp) -> Iterator[str]:
  yield from _pad_shrink_lengths(u)
  if (known := _offsets_and_target(u)) is None: return
  for i, (s, o, t) in enumerate(zip(*known)):
    if o >= 0 and o + s > t: yield f"PAD places axis {i} (size {s}) at offset {o}, beyond the target size {t}"


def _check_shrink(u: UOp) -> Iterator[str]:
  yield from _pad_shrink_lengths(u)
  if (known := _offsets_and_target(u)) is None: return
  for i, (s, o, t) in enumerate(zip(*known)):
    if o >= 0 and o + t > s: yield f"SHRINK keeps {t} elements of axis {i} from offset {o}, beyond its size {s}"


def _check_permute(u: UOp) -> Iterator[str]:
  a, shape = u.arg, u.src[0].shape
  if not (isinstance(a, tuple) and all(_is_int(i) for i in a)): yield f"PERMUTE arg must be a tuple of axes, got {a!r}"
  elif shape is not None and sorted(a) != list(range(len(shape))):
    yield f"PERMUTE order {a} is not a permutation of the {len(shape)} axes of {_fmt(shape)}"


def _check_flip(u: UOp) -> Iterator[str]:
  a, shape = u.arg, u.src[0].shape
  if not (isinstance(a, tuple) and all(isinstance(f, bool) for f in a)): yield f"FLIP arg must be a tuple of bools, got {a!r}"
  elif shape is not None and len(a) != len(shape): yield f"FLIP needs one bool per axis of {_fmt(shape)}, got {len(a)}"


# ---- indexing, stacking, casts ------------------------------------------------------------------------
def _check_index(u: UOp) -> Iterator[str]:
  buf, idxs = u.src[0], u.src[1:]
  if buf.dtype.is_ptr():  # kernel level: (pointer, offset) or (pointer, offset, valid)
    if len(idxs) > 2 or len(idxs) == 2 and idxs[1].dtype.scalar is not dtypes.bool:
      yield "INDEX of a pointer takes (buffer, offset) or (buffer, offset, valid)"
    if not idxs[0].dtype.is_int() or idxs[0].dtype.is_ptr(): yield f"INDEX offset must be an integer, got {idxs[0].dtype}"
    if u.dtype is not buf.dtype: yield f"INDEX has dtype {u.dtype}, the buffer's pointer dtype is {buf.dtype}"
    return
  if buf.dtype is dtypes.void: yield f"INDEX needs a pointer or a shaped buffer, got {buf.op.name}"; return  # noqa: E702
  if u.dtype is not buf.dtype: yield f"INDEX has dtype {u.dtype}, its buffer {buf.dtype}"
  for i, x in enumerate(idxs, 1):
    if not x.dtype.is_int() or x.dtype.is_ptr(): yield f"INDEX index {i} must be an integer, got {x.dtype}"
    elif x.shape is not None and len(x.shape) > 1: yield f"INDEX index {i} has shape {_fmt(x.shape)}; indices have shape () or (k,)"
  if buf.shape is not None and len(idxs) > len(buf.shape):
    yield f"INDEX with {len(idxs)} indices into a {len(buf.shape)}-axis tensor {_fmt(buf.shape)}"


def _check_stack(u: UOp) -> Iterator[str]:
  if not _is_value(u.dtype): yield f"STACK must have a value dtype, got {u.dtype}"; return  # noqa: E702
  if u.dtype.count > 1:  # a vector of scalars
    if len(u.src) != u.dtype.count: yield f"STACK of {len(u.src)} elements cannot make {u.dtype}"
    want = u.dtype.scalar
  else: want = u.dtype  # a new leading axis over equal tensors
  for i, s in enumerate(u.src):
    if s.dtype is not want: yield f"STACK element {i} is {s.dtype}, expected {want}"
  shapes = [s.shape for s in u.src if s.shape is not None]
  for s in shapes[1:]:
    if s != shapes[0]: yield f"STACK operands have different shapes: {_fmt(shapes[0])} and {_fmt(s)}"; break  # noqa: E702


def _dtype_arg(u: UOp) -> Iterator[str]:
  # the target dtype lives in the UOp's dtype; a dtype in arg (seed 000's spelling) must agree
  if u.arg is not None and u.arg is not u.dtype: yield f"{u.op.name} arg {u.arg} disagrees with its dtype {u.dtype}"


def _check_cast(u: UOp) -> Iterator[str]:
  src = u.src[0].dtype
  if not _is_value(u.dtype): yield f"CAST target must be a value dtype, got {u.dtype}"
  elif not _is_value(src): yield f"CAST source must be a value, got {src}"
  elif src.count != u.dtype.count: yield f"CAST from {src} to {u.dtype} changes the vector width"


def _check_bitcast(u: UOp) -> Iterator[str]:
  src = u.src[0].dtype
  if not _is_value(u.dtype): yield f"BITCAST target must be a value dtype, got {u.dtype}"
  elif not _is_value(src): yield f"BITCAST source must be a value, got {src}"
  elif is_data_view(u):
    if len(u.src[0].arg) % u.dtype.itemsize:
      yield f"BITCAST of {len(u.src[0].arg)} bytes of BINARY data to {u.dtype}: not a whole number of {u.dtype.itemsize}-byte elements"
  elif src.itemsize != u.dtype.itemsize:
    yield f"BITCAST from {src} ({src.itemsize} bytes) to {u.dtype} ({u.dtype.itemsize} bytes) must keep the size"


# ---- reduce and calls ---------------------------------------------------------------------------------
def _check_reduce(u: UOp) -> Iterator[str]:
  a = u.arg
  op = a if isinstance(a, Ops) else a[0] if isinstance(a, tuple) and a else None
  if op not in REDUCE_OPS: yield f"REDUCE op must be ADD, MAX or MUL, got {getattr(op, 'name', repr(a))}"
  if u.dtype is not u.src[0].dtype: yield f"REDUCE has dtype {u.dtype}, its source {u.src[0].dtype}"
  axes = a[1] if isinstance(a, tuple) and len(a) > 1 else ()
  if len(u.src) > 1:  # kernel level: reduce over RANGEs, not axes
    for i, r in enumerate(u.src[1:], 1):
      if r.op is not Ops.RANGE: yield f"REDUCE source {i} must be a RANGE, got {r.op.name}"
    if axes: yield "REDUCE over RANGEs takes no axes"
    return
  if not (isinstance(a, tuple) and len(a) == 2 and isinstance(axes, tuple) and all(_is_int(x) for x in axes)):
    yield f"REDUCE arg must be (op, axes), got {a!r}"; return  # noqa: E702
  for x, n in Counter(axes).items():
    if n > 1: yield f"REDUCE axis {x} appears {n} times"
  shape = u.src[0].shape
  for x in axes:
    if shape is not None and not 0 <= x < len(shape): yield f"REDUCE axis {x} is out of range for {_fmt(shape)}"


def _scope_nodes(root: UOp, enter=lambda call: False) -> list[UOp]:
  """The nodes reachable from root without going into the body of a FUNCTION or CALL (unless `enter` says so):
  a body is its own scope, with its own PARAM slots."""
  out, seen, stack = [], set(), [root]
  while stack:
    x = stack.pop()
    if x in seen: continue
    seen.add(x)
    out.append(x)
    skip_body = x.op in (Ops.FUNCTION, Ops.CALL) and x.src and not enter(x)
    stack.extend(reversed(x.src[1:] if skip_body else x.src))
  return out


def _params_in(body: UOp) -> list[UOp]: return [x for x in _scope_nodes(body) if x.op is Ops.PARAM]


def _call_args(u: UOp) -> Iterator[str]:
  # each PARAM k of the body is substituted with argument k: it must exist and agree in dtype and shape
  args = u.src[1:]
  for p in _params_in(u.src[0]):
    k = p.arg[0] if isinstance(p.arg, tuple) and p.arg and _is_int(p.arg[0]) else None
    if k is None or k < 0: continue
    if k >= len(args):
      yield f"{u.op.name} body uses PARAM {k} but is given {len(args)} argument{'s' if len(args) != 1 else ''}"; continue  # noqa: E702
    if _element(p.dtype) is not _element(args[k].dtype):
      yield f"{u.op.name} argument {k} is {args[k].dtype} but PARAM {k} is {p.dtype}"
    elif p.src and _known(p.shape) and _known(args[k].shape) and p.shape != args[k].shape:
      yield f"{u.op.name} argument {k} has shape {_fmt(args[k].shape)} but PARAM {k} has {_fmt(p.shape)}"


def _check_function(u: UOp) -> Iterator[str]:
  if u.src[0].op is not Ops.TUPLE: yield f"FUNCTION body must be a TUPLE, got {u.src[0].op.name}"; return  # noqa: E702
  if u.dtype is not u.src[0].dtype: yield f"FUNCTION has dtype {u.dtype}, its body {u.src[0].dtype}"
  yield from _call_args(u)


def _elements_have_values(u: UOp) -> Iterator[str]:
  # a TUPLE is what a FUNCTION returns: its elements are values
  for i, s in enumerate(u.src):
    if s.dtype is dtypes.void: yield f"TUPLE element {i} is a {s.op.name}, which has no value"


def _check_gettuple(u: UOp) -> Iterator[str]:
  t = u.src[0]
  tup = t.src[0] if t.op in (Ops.FUNCTION, Ops.CALL) and t.src else t
  if t.op not in (Ops.TUPLE, Ops.FUNCTION, Ops.CALL): yield f"GETTUPLE needs a TUPLE, FUNCTION or CALL, got {t.op.name}"
  elif not _is_int(u.arg): yield f"GETTUPLE index must be an integer, got {u.arg!r}"
  elif tup.op is Ops.TUPLE:
    if not 0 <= u.arg < len(tup.src): yield f"GETTUPLE index {u.arg} is out of range for a TUPLE of {len(tup.src)}"
    elif u.dtype is not tup.src[u.arg].dtype: yield f"GETTUPLE has dtype {u.dtype}, element {u.arg} is {tup.src[u.arg].dtype}"


# ---- elementwise --------------------------------------------------------------------------------------
def _operand_kind_problem(op: Ops, dt: DType) -> str | None:
  """Why `dt` cannot be an operand of `op`, or None."""
  if op is Ops.THREEFRY: return None if dt.scalar is dtypes.uint64 else "uint64"
  if op in GroupOp.IntOnly: return None if dt.is_int() else "integer"
  if op in GroupOp.FloatOnly: return None if dt.is_float() else "float"
  if op in GroupOp.Bitwise: return None if dt.is_int() or dt.is_bool() else "integer or bool"
  if op is Ops.NOT: return None if dt.is_bool() else "bool"
  if op in (Ops.NEG, Ops.SUB, Ops.TRUNC, Ops.MULACC): return None if dt.is_int() or dt.is_float() else "numeric"
  return None


def _data_operands(u: UOp) -> tuple[UOp, ...]:
  """The operands that must share one dtype: all but WHERE's condition and a shift's amount."""
  if u.op is Ops.WHERE: return u.src[1:]
  if u.op in (Ops.SHL, Ops.SHR): return u.src[:1]
  return u.src


def _check_alu(u: UOp) -> Iterator[str]:
  for i, s in enumerate(u.src):
    if not _is_value(s.dtype):
      yield f"{u.op.name} operand {i} is {'a pointer' if s.dtype.is_ptr() else 'void'} ({s.op.name} of {s.dtype})"; return  # noqa: E702
  data = _data_operands(u)
  dts = list(dict.fromkeys(s.dtype for s in data))
  if len(dts) > 1: yield f"{u.op.name} operands have different dtypes: {' and '.join(map(str, dts))}"; return  # noqa: E702
  dt = dts[0]
  if (kind := _operand_kind_problem(u.op, dt)) is not None: yield f"{u.op.name} needs {kind} operands, got {dt}"
  if u.op in (Ops.SHL, Ops.SHR) and not u.src[1].dtype.is_int(): yield f"{u.op.name} shift amount must be an integer, got {u.src[1].dtype}"
  if u.op is Ops.WHERE:
    c = u.src[0].dtype
    if c.scalar is not dtypes.bool: yield f"WHERE condition must be bool, got {c}"
    elif c.count not in (1, dt.count): yield f"WHERE condition {c} does not match the width of {dt}"
  want = dtypes.bool.vec(dt.count) if u.op in GroupOp.Comparison else dt
  if u.dtype is not want: yield f"{u.op.name} of {dt} gives {want}, got {u.dtype}"


def _elementwise_shapes(u: UOp) -> Iterator[str]:
  # elementwise operands broadcast: right-aligned, each axis equal or 1
  shapes = [s.shape for s in u.src]
  if any(s is None for s in shapes): return
  n = max(len(s) for s in shapes)
  for axis, dims in enumerate(zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes])):
    sizes = {d for d in dims if d != 1}
    if len(sizes) > 1 and all(_is_int(d) for d in sizes):
      yield f"{u.op.name} operand shapes {' and '.join(_fmt(s) for s in shapes)} do not broadcast (axis {axis})"; return  # noqa: E702


# ---- multi-device and codegen -------------------------------------------------------------------------
def _check_mulacc(u: UOp) -> Iterator[str]:
  if u.arg not in (None, FUSED): yield f'MULACC arg must be none (rounded twice, as ADD(MUL)) or "{FUSED}" (rounded once), got {u.arg!r}'


def _check_wmma(u: UOp) -> Iterator[str]:
  if not (isinstance(u.arg, tuple) and u.arg): yield f"WMMA arg must be its configuration tuple, got {u.arg!r}"
  if u.dtype is not u.src[2].dtype: yield f"WMMA has dtype {u.dtype}, its accumulator {u.src[2].dtype}"


def _check_custom(u: UOp) -> Iterator[str]:
  if not isinstance(u.arg, str): yield f"{u.op.name} arg must be a format string, got {u.arg!r}"; return  # noqa: E702
  try:
    u.arg.format(*(["x"] * len(u.src)))
  except (IndexError, KeyError, ValueError):
    yield f"{u.op.name} format {u.arg!r} does not fit its {len(u.src)} operands"


def _check_named(u: UOp) -> Iterator[str]:
  if not (isinstance(u.arg, str) and u.arg): yield f"{u.op.name} arg must be a non-empty string, got {u.arg!r}"


def _check_ins(u: UOp) -> Iterator[str]:
  a = u.arg
  if not (isinstance(a, str) and a or isinstance(a, tuple) and a and isinstance(a[0], str)):
    yield f"INS arg must name the instruction, got {a!r}"


def _check_program(u: UOp) -> Iterator[str]:
  for s, want in zip(u.src, (Ops.LINEAR, Ops.SOURCE, Ops.BINARY)):
    if s.op is not want: yield f"PROGRAM takes (LINEAR, SOURCE, BINARY), got {s.op.name} for {want.name}"


def _check_gep(u: UOp) -> Iterator[str]:
  a, src = u.arg, u.src[0].dtype
  if not (isinstance(a, tuple) and a and all(_is_int(i) for i in a)): yield f"GEP arg must be a tuple of lanes, got {a!r}"; return  # noqa: E702
  if not _is_value(src): yield f"GEP needs a vector, got {src}"; return  # noqa: E702
  for i in a:
    if not 0 <= i < src.count: yield f"GEP lane {i} is out of range for {src}"
  if u.dtype is not src.scalar.vec(len(a)): yield f"GEP of {len(a)} lanes of {src} gives {src.scalar.vec(len(a))}, got {u.dtype}"


def _unroll_size(u: UOp) -> int | None:
  a = u.arg
  if not (isinstance(a, tuple) and all(isinstance(p, tuple) and len(p) == 2 and _is_int(p[0]) and _is_int(p[1]) and p[1] >= 1 for p in a)):
    return None
  return math.prod(p[1] for p in a)


def _check_contract_unroll(u: UOp) -> Iterator[str]:
  # UNROLL splits a vector into its unrolled scalars; CONTRACT gathers them back into a vector
  if (n := _unroll_size(u)) is None: yield f"{u.op.name} arg must be ((axis, size), ...), got {u.arg!r}"; return  # noqa: E702
  wide, narrow = (u.src[0].dtype, u.dtype) if u.op is Ops.UNROLL else (u.dtype, u.src[0].dtype)
  if wide.count != narrow.count * n: yield f"{u.op.name} over {n} lanes relates {narrow} and {wide}"


# ---- the table: op -> (sources (min, max), rules) -------------------------------------------------------
ELEMENTWISE: tuple[Check, ...] = (_check_alu, _elementwise_shapes)
PASSTHROUGH: tuple[Check, ...] = (_has_value, _same_dtype_as_src)  # movement ops, markers, AFTER

RULES: dict[Ops, tuple[tuple[int, int | None], tuple[Check, ...]]] = {
  Ops.PARAM: ((0, 1), (_check_param,)), Ops.BUFFER: ((0, 1), (_check_buffer,)), Ops.CONST: ((0, 0), (_check_const,)),
  Ops.BINARY: ((0, 0), (_check_binary_data,)), Ops.DEFINE_VAR: ((0, 0), (_check_define_var,)),
  Ops.BIND: ((2, 2), (_check_bind,)),
  Ops.PERMUTE: ((1, 1), PASSTHROUGH + (_check_permute,)), Ops.FLIP: ((1, 1), PASSTHROUGH + (_check_flip,)),
  Ops.RESHAPE: ((2, 2), PASSTHROUGH + (_check_reshape,)), Ops.EXPAND: ((2, 2), PASSTHROUGH + (_check_expand,)),
  Ops.PAD: ((3, 3), PASSTHROUGH + (_check_pad,)), Ops.SHRINK: ((3, 3), PASSTHROUGH + (_check_shrink,)),
  Ops.INDEX: ((2, None), (_check_index,)), Ops.STACK: ((0, None), (_check_stack,)),
  Ops.BITCAST: ((1, 1), (_check_bitcast, _dtype_arg)), Ops.CAST: ((1, 1), (_check_cast, _dtype_arg)),
  Ops.REDUCE: ((1, None), (_has_value, _check_reduce)),
  Ops.FUNCTION: ((1, None), (_check_function,)), Ops.CALL: ((1, None), (_call_args,)),
  Ops.TUPLE: ((0, None), (_elements_have_values,)), Ops.GETTUPLE: ((1, 1), (_check_gettuple,)),
  Ops.LOAD: ((1, 3), (_check_load,)), Ops.STORE: ((2, 3), (_is_void, _check_store)),
  Ops.RANGE: ((1, 1), (_check_range,)), Ops.END: ((2, 2), (_is_void, _check_end)),
  Ops.AFTER: ((2, None), PASSTHROUGH), Ops.GROUP: ((0, None), (_is_void, _sources_are_effects)),
  Ops.SINK: ((0, None), (_is_void,)), Ops.LINEAR: ((0, None), (_is_void,)),
  Ops.MULTI: ((1, None), (check_multi,)), Ops.MSELECT: ((1, 1), (check_mselect,)),
  Ops.ALLREDUCE: ((1, 1), (check_allreduce,)), Ops.REPLICATED: ((1, 1), (check_replicated,)),
  Ops.BARRIER: ((0, None), (_is_void, _check_barrier)), Ops.INS: ((0, None), (_check_ins,)), Ops.SPECIAL: ((1, 1), (_check_special,)),
  Ops.IF: ((1, 2), (_is_void, _check_if)), Ops.ENDIF: ((1, 1), (_is_void, _check_endif)),
  Ops.WMMA: ((3, 3), (_check_wmma,)), Ops.CUSTOM: ((0, None), (_check_custom,)), Ops.CUSTOMI: ((0, None), (_check_custom,)),
  Ops.ATOMICADD: ((2, 2), (_check_atomicadd,)), Ops.CUSTOMFUNCTION: ((0, None), (_check_named,)),
  Ops.PROGRAM: ((2, 3), (_check_program,)),
  Ops.SOURCE: ((0, 0), (_check_named,)),
  Ops.GEP: ((1, 1), (_check_gep,)), Ops.CONTRACT: ((1, 1), (_check_contract_unroll,)),
  Ops.UNROLL: ((1, 1), (_check_contract_unroll,)), Ops.NOOP: ((0, None), (_is_void,)),
  **{op: ((1, 1), PASSTHROUGH) for op in GroupOp.Markers},
  **{op: ((1, 1), ELEMENTWISE) for op in GroupOp.Unary},
  **{op: ((2, 2), ELEMENTWISE) for op in GroupOp.Binary},
  **{op: ((3, 3), ELEMENTWISE) for op in GroupOp.Ternary},
  Ops.MULACC: ((3, 3), ELEMENTWISE + (_check_mulacc,)),
}


def source_count_problem(name: str, n: int, counts: tuple[int, int | None]) -> str | None:
  """Why `n` sources are wrong for op `name` taking `counts` (min, max or None), or None; the front end
  uses it on statements it could not build."""
  lo, hi = counts
  return None if _src_count_ok(n, lo, hi) else f"{name} takes {_count_text(lo, hi)}, got {n}"


def check_uop(u: UOp) -> list[str]:
  """Every problem of one UOp on its own, as messages; the rules after the source count need it right."""
  counts, checks = RULES[u.op]
  if (msg := source_count_problem(u.op.name, len(u.src), counts)) is not None: return [msg]
  return [msg for check in checks for msg in check(u)]


# ---- rules on whole entries ---------------------------------------------------------------------------
def _slot(p: UOp) -> int | None: return p.arg[0] if isinstance(p.arg, tuple) and p.arg and _is_int(p.arg[0]) else None
def _name(p: UOp) -> str: return p.arg[1] if isinstance(p.arg, tuple) and len(p.arg) > 1 else "?"


def _scopes(root: UOp) -> list[list[UOp]]:
  """The nodes of the entry and of each FUNCTION/CALL body, each list in toposort order."""
  order = root.toposort()
  index = {u: i for i, u in enumerate(order)}
  heads = [root] + [x.src[0] for x in order if x.op in (Ops.FUNCTION, Ops.CALL) and x.src]
  return [sorted(_scope_nodes(h), key=index.__getitem__) for h in dict.fromkeys(heads)]


def _unique_slots(scope: list[UOp]) -> Iterator[tuple[UOp, str]]:
  # a slot numbers one argument of an entry (or of a FUNCTION/CALL body): two PARAMs (or two BUFFERs) cannot
  # share it; nor a name, which the library's metadata looks arguments up by
  first: dict[tuple, UOp] = {}
  for x in scope:
    if x.op not in GroupOp.Buffers or (k := _slot(x)) is None: continue
    if (x.op, k) in first: yield x, f"{x.op.name} slot {k} of '{_name(x)}' is already used by '{_name(first[(x.op, k)])}'"
    else: first[(x.op, k)] = x
  named: dict[str, int] = {}
  for (op, k), x in sorted(first.items(), key=lambda kv: kv[0][1]):
    if op is not Ops.PARAM or not (isinstance(x.arg, tuple) and len(x.arg) > 1 and isinstance(x.arg[1], str)): continue
    if (slot := named.setdefault(x.arg[1], k)) != k:
      yield x, f"PARAM slot {k} is named '{_name(x)}' like slot {slot}: an entry's arguments have distinct names"


def _single_end(nodes: list[UOp]) -> Iterator[tuple[UOp, str]]:
  # a loop is closed once: a RANGE closed by two ENDs would be run twice or nest in itself
  closed: set[UOp] = set()
  for x in nodes:
    if x.op is Ops.END and len(x.src) == 2 and x.src[1].op is Ops.RANGE:
      if x.src[1] in closed: yield x, f"RANGE {_axis_id(x.src[1])} is closed by more than one END"
      closed.add(x.src[1])


def _axis_id(r: UOp) -> str: return str(r.arg[0]) if isinstance(r.arg, tuple) and r.arg else "?"


def _is_tensor_level(x: UOp) -> bool:
  """Ops that only make sense on shaped tensors: movement ops, REDUCE over axes, FUNCTION."""
  return x.op in GroupOp.Movement or x.op is Ops.FUNCTION or x.op is Ops.REDUCE and len(x.src) == 1


def _kernel_rules(sink: UOp, nodes: list[UOp]) -> Iterator[tuple[UOp, str]]:
  for x in nodes:
    # a kernel works on pointers, RANGEs and shape-() values; Rangeify is what removes tensor-level ops
    if x.op in GroupOp.Buffers and x.src: yield x, f"a shaped {x.op.name} is a tensor-level input; a kernel takes pointers"
    elif _is_tensor_level(x): yield x, f"{x.op.name} is a tensor-level op; a kernel entry works on pointers and RANGEs"
    # memory in a kernel is reached through pointers (INDEX of a PARAM or BUFFER)
    elif x.op in (Ops.LOAD, Ops.STORE) and x.src and _is_value(x.src[0].dtype):
      yield x, f"{x.op.name} in a kernel goes through a pointer, got {x.src[0].op.name} of {x.src[0].dtype}"
  # what a kernel does is its side effects: a root with a value would be computed for nothing
  if sink.op is Ops.SINK:
    for i, s in enumerate(sink.src):
      if s.dtype is not dtypes.void: yield s, f"kernel SINK source {i} is {s.op.name}, not {EFFECTS}"


def _func_rules(sink: UOp) -> Iterator[tuple[UOp, str]]:
  outside = _scope_nodes(sink, enter=lambda call: call.op is Ops.FUNCTION)
  for x in outside:
    # loops and pointers exist inside kernels only; a tensor-level entry has shapes and REDUCE axes
    if x.op is Ops.RANGE: yield x, "RANGE outside a kernel: a tensor-level entry uses shapes and REDUCE axes"
    elif x.op is Ops.PARAM and not x.src and x.dtype.is_ptr():
      yield x, f"a tensor-level entry takes shaped PARAMs, got the bare pointer {x.dtype}"
  # a RANGE belongs to one kernel: two CALLed kernels cannot share a loop
  owner: dict[UOp, UOp] = {}
  for call in (x for x in outside if x.op is Ops.CALL and x.src):
    for r in (y for y in call.src[0].toposort() if y.op is Ops.RANGE):
      if owner.setdefault(r, call) is not call: yield call, f"RANGE {_axis_id(r)} is used by two kernels"


def _entry_problems(sink: UOp, nodes: list[UOp], kind: str | None) -> Iterator[tuple[UOp, str]]:
  for scope in _scopes(sink):
    yield from _unique_slots(scope)
    yield from _single_end(scope)
  if kind == "kernel": yield from _kernel_rules(sink, nodes)
  elif kind == "func": yield from _func_rules(sink)


# ---- the public entry points --------------------------------------------------------------------------
def _locator(nodes: list[UOp], loc_of: Callable[[UOp], Loc | None]) -> Callable[[UOp], Loc | None]:
  """loc_of, falling back to the nearest located user: nodes the front end made (a shape literal's STACK)
  have no place of their own."""
  users: dict[UOp, list[UOp]] = {}
  for u in nodes:
    for s in u.src: users.setdefault(s, []).append(u)

  def locate(u: UOp) -> Loc | None:
    seen, queue = {u}, [u]
    for x in queue:
      if (loc := loc_of(x)) is not None: return loc
      queue.extend(y for y in users.get(x, []) if y not in seen and not seen.add(y))
    return None
  return locate


def _in_source_order(diags: list[Diagnostic]) -> list[Diagnostic]:
  return sorted(diags, key=lambda d: (d.loc is None, d.loc.file, d.loc.line, d.loc.col) if d.loc else (True, "", 0, 0))


def verify_uops(sink: UOp, loc_of: Callable[[UOp], Loc | None] = lambda u: None, kind: str | None = None) -> list[Diagnostic]:
  """Every problem in the graph under `sink`, in source order. `kind` ('kernel' or 'func') adds the rules of
  that level; None checks only what holds at every level."""
  nodes = sink.toposort()
  found = [(u, msg) for u in nodes for msg in check_uop(u)] + list(_entry_problems(sink, nodes, kind))
  locate = _locator(nodes, loc_of)
  return _in_source_order([error(locate(u), msg) for u, msg in found])


def verify_module(m: Module) -> list[Diagnostic]:
  """Every problem in every entry of `m`, each once (entries share hash-consed nodes), in source order."""
  seen, out = set(), []
  for e in m.entries:
    for d in verify_uops(e.sink, m.loc_of, e.kind):
      if (d.loc, d.message) not in seen: seen.add((d.loc, d.message)); out.append(d)  # noqa: E702
  return _in_source_order(out)
