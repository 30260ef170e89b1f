"""The canonical text of a Module (`uopc fmt`), of any UOp graph (`--print-after`), and `uopc show`.

Canonical form: one `kernel`/`func` block per entry, 2-space indent, a blank line between entries;
values named by the user's %names where free, else %0, %1, ... in toposort order; a `: dtype` only
where the parser would not derive it; index CONSTs inlined as RANGE/SPECIAL bounds and shape dims,
shape STACKs inlined as `[..]`; the entry's SINK written last. Parsing the output rebuilds the same
UOps (they are hash-consed), and printing is deterministic.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from uopc.dtype import AddrSpace, DType, dtypes
from uopc.frontend.infer import derive_dtype
from uopc.module import Module
from uopc.ops import AxisType, Ops
from uopc.uop import UOp

_VAR_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def format_arg(v: Any) -> str:
  """An arg in the text syntax; the parser reads it back to an equal value (-0.0 and NaN included)."""
  if v is None or isinstance(v, (bool, int)): return str(v)
  if isinstance(v, float):
    if math.isnan(v): return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return repr(v)
  if isinstance(v, str): return _string(v)
  if isinstance(v, bytes): return f'x"{v.hex()}"'  # BINARY data: two lower-case hex digits per byte
  if isinstance(v, tuple):
    if len(v) == 1: return f"({format_arg(v[0])},)"
    return "(" + ", ".join(format_arg(x) for x in v) + ")"
  if isinstance(v, Ops): return v.name
  if isinstance(v, (AxisType, AddrSpace)): return repr(v)
  if isinstance(v, DType): return str(v)
  return repr(v)  # objects of later stages: readable, not meant to be parsed back


def _string(s: str) -> str:
  return '"' + "".join(c if c.isprintable() and c not in '"\\' else '\\"' if c == '"' else repr(c)[1:-1]
                       for c in s) + '"'


def _is_shape(u: UOp) -> bool:
  """A shape operand (`UOp.shape_of`), printed inline as [..]."""
  return (u.op is Ops.STACK and u.dtype is dtypes.index and u.arg is None and u.tag is None
          and all(s.dtype is dtypes.index for s in u.src))


def _is_inline_const(u: UOp) -> bool:
  return u.op is Ops.CONST and u.dtype is dtypes.index and type(u.arg) is int and u.tag is None


def _inline_at(user: UOp, i: int, s: UOp) -> bool:
  """Whether `s`, operand i of `user`, is written inline rather than as a %name."""
  if _is_shape(s): return True
  return _is_inline_const(s) and (user.op in (Ops.RANGE, Ops.SPECIAL) and i == 0 or _is_shape(user))


class _Listing:
  """Statements for the graphs under `roots`: which UOps get a line, and their names."""

  def __init__(self, roots: Iterable[UOp], names: dict[UOp, str], inline: bool):
    self.order = list(dict.fromkeys(u for r in roots for u in r.toposort()))
    self.inline = inline
    roots = set(roots)
    self.referenced: set[UOp] = set()
    for u in self.order:
      for i, s in enumerate(u.src):
        if not self._inlined(u, i, s): self.referenced.add(s)
    self.lines = [u for u in self.order if u in roots or u in self.referenced or not self.inline
                  or not (_is_shape(u) or _is_inline_const(u))]
    self.names = self._name(names)

  def _inlined(self, user: UOp, i: int, s: UOp) -> bool: return self.inline and _inline_at(user, i, s)

  def _name(self, user_names: dict[UOp, str]) -> dict[UOp, str]:
    named = [u for u in self.lines if u in self.referenced or u.dtype is not dtypes.void]
    out, taken = {}, set()
    for u in named:
      n = user_names.get(u)
      if n and n not in taken and set(n) <= _VAR_CHARS and n[0] != ".": out[u] = n; taken.add(n)  # noqa: E702
    counter = 0
    for u in named:
      if u in out: continue
      while str(counter) in taken: counter += 1
      out[u] = str(counter); taken.add(str(counter))  # noqa: E702
    return out

  def operand(self, user: UOp, i: int, s: UOp) -> str:
    if not self._inlined(user, i, s): return f"%{self.names[s]}"
    if _is_shape(s): return "[" + ", ".join(self.operand(s, j, d) for j, d in enumerate(s.src)) + "]"
    return str(s.arg)

  def statement(self, u: UOp, always_dtype: bool = False) -> str:
    lhs = f"%{self.names[u]} = " if u in self.names else ""
    ops = "(" + ", ".join(self.operand(u, i, s) for i, s in enumerate(u.src)) + ")" if u.src else ""
    arg = "" if u.arg is None else f" {{{format_arg(u.arg)}}}"
    dtype = "" if not always_dtype and derive_dtype(u.op, u.src, u.arg) is u.dtype else f" : {u.dtype}"
    return f"{lhs}{u.op.name}{ops}{arg}{dtype}"


def print_uops(uops: UOp | Iterable[UOp], names: dict[UOp, str] | None = None, indent: str = "") -> str:
  """Any IR (a graph root, a list of roots, a LINEAR) as statements, one a line, sources first."""
  roots = [uops] if isinstance(uops, UOp) else list(uops)
  listing = _Listing(roots, names or {}, inline=True)
  return "".join(f"{indent}{listing.statement(u)}\n" for u in listing.lines)


def print_module(m: Module) -> str:
  """The canonical text of a module: `parse_source(print_module(m))` has the same entries and sinks."""
  blocks = [f"{e.kind} {e.name} {{\n{print_uops([*e.unused, e.sink], m.names, indent='  ')}}}\n" for e in m.entries]
  return "\n".join(blocks)


def show_module(m: Module) -> str:
  """`uopc show`: every UOp of every entry on its own line with its derived properties."""
  out = []
  for e in m.entries:
    listing = _Listing([e.sink], m.names, inline=False)
    out.append(f"{e.kind} {e.name}:\n")
    for u in listing.lines:
      props = [f"shape={_dims(u.shape, listing.names)}", f"device={u.device!r}",
               f"addrspace={u.addrspace.name if u.addrspace else None}", f"min_max={_min_max(u.min_max)}"]
      if u.axis is not None: props.append(f"axis={u.axis}")
      out.append(f"  {listing.statement(u, always_dtype=True)}    # {' '.join(props)}\n")
  return "".join(out)


def _dims(shape: tuple | None, names: dict[UOp, str]) -> str:
  if shape is None: return "None"
  dims = [f"%{names[d]}" if isinstance(d, UOp) and d in names else str(d) for d in shape]
  return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _min_max(mm: tuple) -> str: return "(" + ", ".join(format_arg(v) if isinstance(v, float) else str(v) for v in mm) + ")"
