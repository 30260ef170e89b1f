"""Legacy forms of seeds 001-003, normalised to modern IR while parsing (SPEC-NOTES.md).

`RULES` maps a (prefix-stripped) op name to a rule `(builder, srcs, arg, dtype, loc) -> UOp | None`.
A rule returns None when the statement is already in modern form; then the op is built as written
(plain renames such as REDUCE_AXIS -> REDUCE come from `uopc.ops.OP_ALIASES`). Each rule builds
through `builder.uop` (or `build`, which ends there), so every UOp it makes gets the statement's location.

DEFINE_ACC (no modern twin): `DEFINE_ACC(init, ranges...) {(k,)} : T` becomes a pointer to a
one-element REG buffer that holds `init` before anything reads it, read inside its ranges:
`INDEX(AFTER(BUFFER {(k, "acck")} : ptr<T, reg, 1>, STORE(INDEX(BUFFER, 0), init), ranges...), 0)`.
ASSIGN(target, value) is `STORE(target, value)`, and its value the target's buffer after that STORE:
`INDEX(AFTER(buffer, STORE), index)`. Memory is ordered on the buffer, as the pipeline wants it (modern
programs write accumulators so). In a legacy statement an accumulator used as a value (an ALU or CAST
operand, a stored value: seed 003's `DEFINE_ACC -> ALU -> ASSIGN(acc)`) is LOADed.

Integers of seeds 001-003 (`build`): those seeds wrote every integer `dtypes.int`, the loop counter,
the thread index and addresses included; modern IR keeps `index` apart. Only in a legacy statement
(a numbered listing line, a `UOps.`/`Ops.` prefix, a legacy op name, or a rule's legacy form) do they
unify as the seeds behave: an integer operand that meets an `index` one in arithmetic becomes an index
(a CONST retyped, anything else CAST), and so does the result, whatever int dtype was written; an index
address or loop bound is an index; an index value stored into an integer buffer is CAST to its element.
A modern statement is never retyped: there the mix is the verifier's dtype error.
"""
from __future__ import annotations

from typing import Any, Callable

from uopc.diagnostics import Diagnostic, Loc, error
from uopc.dtype import AddrSpace, DType, dtypes
from uopc.ops import GroupOp, Ops
from uopc.verify import RULES as VERIFY_RULES

Rule = Callable[..., Any]
# seed 001-003 op names that mark a statement as legacy wherever they appear (the rules' own forms aside)
LEGACY_NAMES = frozenset({"DEFINE_GLOBAL", "DEFINE_LOCAL", "DEFINE_ACC", "ASSIGN", "VCONST", "ALU", "LOOP", "ENDLOOP",
                          "ENDRANGE"})


class StmtError(Exception):
  """A statement that cannot be built; carries its diagnostic (raised by rules and the parser)."""
  def __init__(self, diag: Diagnostic):
    super().__init__(diag.message)
    self.diag = diag


def _fail(loc: Loc, message: str):
  raise StmtError(error(loc, message))


# operand counts of statements whose legacy forms take other counts than the modern op (verify.RULES)
_SOURCE_COUNTS: dict[str, tuple[int, int | None]] = {
  "STORE": (2, 4), "LOOP": (1, 2), "RANGE": (1, 2), "ENDLOOP": (1, 2), "ENDRANGE": (1, 2), "END": (1, 2),
  "SPECIAL": (0, 1), "DEFINE_GLOBAL": (0, 0), "DEFINE_LOCAL": (0, 0), "DEFINE_ACC": (1, None), "ASSIGN": (2, 2),
  "VCONST": (0, 0),
}


def source_counts(name: str, op: Ops | None, arg) -> tuple[int, int | None] | None:
  """The operand counts statement `name` (prefix stripped) accepts in any of its forms; None if unknown."""
  if name in _SOURCE_COUNTS: return _SOURCE_COUNTS[name]
  if name == "ALU": op = arg if isinstance(arg, Ops) else None
  return VERIFY_RULES[op][0] if op in VERIFY_RULES else None


def _as_index(b, u, loc: Loc):
  """An integer address or loop bound as an `index` value (old listings wrote them as int)."""
  if not u.dtype.is_int(): _fail(loc, f"expected an integer operand, got {u.dtype}")
  return _converted(b, u, dtypes.index, loc)


def _converted(b, u, dt: DType, loc: Loc):
  """`u` as a `dt` value: a CONST retyped, anything else CAST; `u` itself when it already is one."""
  if u.dtype is dt: return u
  if u.op is Ops.CONST: return b.uop(Ops.CONST, (), u.arg, dt, loc)
  return b.uop(Ops.CAST, (u,), None, dt, loc)


def _is_int_scalar(dt: DType) -> bool: return dt.count == 1 and not dt.is_ptr() and dt.is_int()


def build(b, op: Ops, srcs: tuple, arg, dtype: DType | None, loc: Loc):
  """`op(srcs) {arg} : dtype` of a legacy statement, its integers unified as the module docstring says."""
  if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST): srcs = tuple(_loaded(b, s, loc) for s in srcs)
  if op in GroupOp.ALU: srcs, dtype = _unified_alu(b, op, srcs, dtype, loc)
  elif op is Ops.STORE and len(srcs) >= 2:
    srcs = (srcs[0], _stored_value(b, srcs[0], _loaded(b, srcs[1], loc), loc)) + srcs[2:]
  elif op is Ops.INDEX and len(srcs) >= 2 and _is_int_scalar(srcs[1].dtype):
    srcs = (srcs[0], _as_index(b, srcs[1], loc)) + srcs[2:]
  elif op in (Ops.RANGE, Ops.SPECIAL) and len(srcs) == 1 and _is_int_scalar(srcs[0].dtype):
    srcs = (_as_index(b, srcs[0], loc),)
  return b.uop(op, srcs, arg, dtype, loc)


def _loaded(b, u, loc: Loc):
  """A REG accumulator (DEFINE_ACC, ASSIGN) used as a value, LOADed; any other operand as it is."""
  if not (u.dtype.is_ptr() and u.dtype.addrspace is AddrSpace.REG): return u
  return b.uop(Ops.LOAD, (u,), None, None, loc)


def _unified_alu(b, op: Ops, srcs: tuple, dtype: DType | None, loc: Loc) -> tuple[tuple, DType | None]:
  """Integer operands meeting an index one become indices, and so does the result (WHERE's condition aside)."""
  first = 1 if op is Ops.WHERE else 0
  data = srcs[first:]
  if not any(s.dtype is dtypes.index for s in data) or not all(_is_int_scalar(s.dtype) for s in data): return srcs, dtype
  if dtype is not None and _is_int_scalar(dtype) and op not in GroupOp.Comparison: dtype = None  # derived: index
  return srcs[:first] + tuple(_as_index(b, s, loc) for s in data), dtype


def _stored_value(b, target, value, loc: Loc):
  """An index value stored through a pointer to integers, CAST to the element dtype (seeds stored `int`s)."""
  element = target.dtype.base if target.dtype.is_ptr() else None
  if value.dtype is not dtypes.index or element is None or not _is_int_scalar(element): return value
  return _converted(b, value, element, loc)


def _is_old_style_buffer(u) -> bool:
  """A pointer buffer addressed without INDEX, as seeds 001/002 wrote LOAD and STORE."""
  return u.dtype.is_ptr() and u.op in (Ops.PARAM, Ops.BUFFER)


def _written_dtype(dtype: DType | None, op: str, loc: Loc) -> DType:
  if dtype is None: _fail(loc, f"{op} needs a dtype: write ': dtype' after it")
  return dtype


def define_global(b, srcs, arg, dtype, loc):
  """DEFINE_GLOBAL {(slot, name, mutable)} : T -> PARAM {(slot, name)} : ptr<T>."""
  if srcs: _fail(loc, "DEFINE_GLOBAL takes no operands")
  if isinstance(arg, int) and not isinstance(arg, bool): arg = (arg, f"data{arg}")
  if not (isinstance(arg, tuple) and len(arg) in (2, 3) and isinstance(arg[0], int) and isinstance(arg[1], str)):
    _fail(loc, "DEFINE_GLOBAL's argument is (slot, 'name', mutable)")
  dt = _written_dtype(dtype, "DEFINE_GLOBAL", loc)
  return b.uop(Ops.PARAM, (), arg[:2], dt if dt.is_ptr() else dt.ptr(), loc)


def define_local(b, srcs, arg, dtype, loc):
  """DEFINE_LOCAL {name} or {(name, size)} : T or ptr<T, local, N> -> BUFFER {(slot, name)} : ptr<T, local, N>."""
  if srcs: _fail(loc, "DEFINE_LOCAL takes no operands")
  dt = _written_dtype(dtype, "DEFINE_LOCAL", loc)
  name, size = (arg, -1) if isinstance(arg, str) else arg if isinstance(arg, tuple) and len(arg) == 2 else (None, -1)
  if not isinstance(name, str) or not isinstance(size, int): _fail(loc, "DEFINE_LOCAL's argument is 'name' or ('name', size)")
  base = dt.base if dt.is_ptr() else dt
  size = dt.size if dt.is_ptr() and dt.size >= 0 else size
  if size < 0: _fail(loc, "DEFINE_LOCAL needs a size: write ptr<T, local, N> or the argument ('name', N)")
  return b.uop(Ops.BUFFER, (), (b.count("local"), name), base.ptr(AddrSpace.LOCAL, size), loc)


def define_acc(b, srcs, arg, dtype, loc):
  """See the module docstring."""
  if not srcs: _fail(loc, "DEFINE_ACC needs its initial value as first operand")
  dt = dtype or srcs[0].dtype
  k = arg[0] if isinstance(arg, tuple) and arg and isinstance(arg[0], int) else arg if isinstance(arg, int) else b.count("acc")
  buf = b.uop(Ops.BUFFER, (), (k, f"acc{k}"), dt.ptr(AddrSpace.REG, 1), loc)
  zero = b.uop(Ops.CONST, (), 0, dtypes.index, loc)
  init = build(b, Ops.STORE, (b.uop(Ops.INDEX, (buf, zero), None, None, loc), srcs[0]), None, None, loc)
  return b.uop(Ops.INDEX, (b.uop(Ops.AFTER, (buf, init) + srcs[1:], None, None, loc), zero), None, None, loc)


def assign(b, srcs, arg, dtype, loc):
  """See the module docstring; the STORE is a root until the value is used. A written dtype that is the
  target's element (seed 003 wrote the value's) means the target's pointer."""
  if len(srcs) != 2: _fail(loc, "ASSIGN takes (target, value)")
  store = build(b, Ops.STORE, srcs, None, None, loc)
  b.add_void(store)
  target = srcs[0]
  if dtype is not None and target.dtype.is_ptr() and dtype is target.dtype.base: dtype = None
  if target.op is not Ops.INDEX: return b.uop(Ops.AFTER, (target, store), None, dtype, loc)
  buf = target.src[0]
  while buf.op is Ops.AFTER: buf = buf.src[0]
  after = b.uop(Ops.AFTER, (buf, store), None, None, loc)
  return b.uop(Ops.INDEX, (after,) + target.src[1:], None, dtype, loc)


def vconst(b, srcs, arg, dtype, loc):
  """VCONST {(v0, v1, ...)} : T or Tx<n> -> STACK(CONST v0, CONST v1, ...) : Tx<n>."""
  if srcs or not isinstance(arg, tuple) or len(arg) < 2: _fail(loc, "VCONST's argument is a tuple of two or more values")
  scalar = dtype.scalar if dtype is not None else None
  elems = tuple(b.uop(Ops.CONST, (), v, scalar, loc) for v in arg)
  return b.uop(Ops.STACK, elems, None, elems[0].dtype.vec(len(elems)), loc)


def alu(b, srcs, arg, dtype, loc):
  """ALU {BinaryOps.X} -> X."""
  if not isinstance(arg, Ops): _fail(loc, "ALU's argument is the op, e.g. BinaryOps.ADD")
  return build(b, arg, srcs, None, dtype, loc)


def loop(b, srcs, arg, dtype, loc):
  """LOOP(start, end) -> RANGE(end - start); a nonzero start is added back for the loop's users."""
  if len(srcs) != 2: return None
  start, end = (_as_index(b, s, loc) for s in srcs)
  for which, s in (("start", start), ("end", end)):
    if s.op is Ops.CONST and (not isinstance(s.arg, int) or isinstance(s.arg, bool)):
      _fail(loc, f"LOOP's {which} must be an integer, got CONST {s.arg!r}")
  if start.op is Ops.CONST and end.op is Ops.CONST: bound = b.uop(Ops.CONST, (), end.arg - start.arg, dtypes.index, loc)
  else: bound = b.uop(Ops.SUB, (end, start), None, None, loc)
  rng = b.uop(Ops.RANGE, (bound,), arg, dtypes.index, loc)
  if start.op is Ops.CONST and start.arg == 0: return rng
  value = b.uop(Ops.ADD, (rng, start), None, None, loc)
  b.loops[value] = rng
  return value


def endloop(b, srcs, arg, dtype, loc):
  """ENDLOOP(loop) -> END(body, range), body the void statements written inside the loop."""
  if len(srcs) != 1: return None
  rng = b.loops.get(srcs[0], srcs[0])
  if rng.op is not Ops.RANGE: _fail(loc, "ENDLOOP closes a LOOP or RANGE")
  body = b.take_body(b.range_starts.get(rng, 0))
  group = body[0] if len(body) == 1 else b.uop(Ops.GROUP, tuple(body), None, None, loc)
  return b.uop(Ops.END, (group, rng), None, None, loc)


def load(b, srcs, arg, dtype, loc):
  """Old-style LOAD(buf, idx) -> LOAD(INDEX(buf, idx))."""
  if len(srcs) != 2 or not _is_old_style_buffer(srcs[0]) or not srcs[1].dtype.is_int(): return None
  ptr = b.uop(Ops.INDEX, (srcs[0], _as_index(b, srcs[1], loc)), None, None, loc)
  return build(b, Ops.LOAD, (ptr,), arg, dtype, loc)


def store(b, srcs, arg, dtype, loc):
  """Old-style STORE(buf, idx, val[, gate]) -> STORE(INDEX(buf, idx), val[, gate])."""
  if len(srcs) not in (3, 4) or not _is_old_style_buffer(srcs[0]) or not srcs[1].dtype.is_int(): return None
  ptr = b.uop(Ops.INDEX, (srcs[0], _as_index(b, srcs[1], loc)), None, None, loc)
  return build(b, Ops.STORE, (ptr,) + srcs[2:], arg, dtype, loc)


def special(b, srcs, arg, dtype, loc):
  """SPECIAL {(axis, name, bound)} -> SPECIAL(bound) {name} : index."""
  if not isinstance(arg, tuple): return None
  if srcs or len(arg) != 3 or not isinstance(arg[1], str) or not isinstance(arg[2], int):
    _fail(loc, "SPECIAL's legacy argument is (axis, 'name', bound)")
  bound = b.uop(Ops.CONST, (), arg[2], dtypes.index, loc)
  return b.uop(Ops.SPECIAL, (bound,), arg[1], dtypes.index, loc)


def cast_with_dtype_arg(op: Ops) -> Rule:
  """CAST {dtypes.float} (seed 002) -> CAST : f32 with arg None."""
  def rule(b, srcs, arg, dtype, loc):
    if not isinstance(arg, DType): return None
    if dtype is not None and dtype is not arg: _fail(loc, f"{op.name} to {arg} but written ': {dtype}'")
    return b.uop(op, srcs, None, arg, loc)
  return rule


def copy(b, srcs, arg, dtype, loc):
  """COPY(x) {device} (a device name or a tuple of them) -> LOAD(x) {(device,)}: seed 000's LOAD to a device."""
  if isinstance(arg, str) or isinstance(arg, tuple) and arg and all(isinstance(d, str) for d in arg):
    arg = (arg,)
  return b.uop(Ops.LOAD, srcs, arg, dtype, loc)


RULES: dict[str, Rule] = {
  "DEFINE_GLOBAL": define_global, "DEFINE_LOCAL": define_local, "DEFINE_ACC": define_acc, "ASSIGN": assign,
  "VCONST": vconst, "ALU": alu, "LOOP": loop, "RANGE": loop, "ENDLOOP": endloop, "ENDRANGE": endloop,
  "END": endloop, "LOAD": load, "STORE": store, "SPECIAL": special, "COPY": copy,
  "CAST": cast_with_dtype_arg(Ops.CAST), "BITCAST": cast_with_dtype_arg(Ops.BITCAST),
}
