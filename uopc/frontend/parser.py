"""Line records -> a Module: entries, %name resolution, derived dtypes, roots, locations.

Statements are built in order, one UOp (or a few, for legacy forms) each, with O(1) work per
statement. Name errors do not stop the parse: the statement's result is poisoned, so its users
stay quiet, and every error of the file is reported together. A statement that cannot be built
reports each of its independent problems (an unknown op, each bad operand, a wrong operand count),
never one that follows from another (a literal's dtype is not judged while an operand is unknown).
A legacy statement (a numbered listing line, a `UOps.`/`Ops.` prefix, a seed 001-003 op name) is
built through `legacy.build`, which unifies its integers; a modern one is built as written.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from uopc.diagnostics import CompileError, Diagnostic, Loc, error
from uopc.dtype import DType, dtypes
from uopc.frontend import legacy
from uopc.frontend.infer import derive_dtype
from uopc.frontend.legacy import StmtError
from uopc.frontend.syntax import BAD, CloseBlock, Lit, OpenBlock, Ref, Shape, Stmt, parse_lines
from uopc.module import Entry, Module
from uopc.ops import AxisType, GroupOp, Ops, op_by_name
from uopc.uop import UOp
from uopc.verify import source_count_problem

_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
  inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
  volatile while main""".split())
_OP_PREFIXES = ("UOps.", "Ops.")
_op_named = lru_cache(maxsize=None)(op_by_name)  # a file names few distinct ops: keep statements O(1) and cheap


class Poisoned(Exception):
  """A statement using a value that already failed: stay quiet, its error is reported."""


class EntryBuilder:
  """Builds one entry's graph from its statements; the state legacy forms need lives here too."""

  def __init__(self, module: Module, name: str, kind: str | None, loc: Loc, diags: list[Diagnostic]):
    self.module, self.name, self.kind, self.loc, self.diags = module, name, kind, loc, diags
    self.values: dict[str, UOp | None] = {}      # %name -> UOp; None when its statement failed
    self.defined_at: dict[str, Loc] = {}
    self.voids: list[UOp] = []                   # void statement results, in source order
    self.used: set[UOp] = set()                  # values a later statement consumed
    self.loops: dict[UOp, UOp] = {}              # a legacy LOOP's value -> its RANGE
    self.range_starts: dict[UOp, int] = {}       # RANGE -> len(voids) when it was written (for ENDLOOP)
    self.counters: dict[str, int] = {}
    self.undefined: list[Ref] = []
    self.last: UOp | None = None

  # ---- helpers for statement builders (legacy rules use them) --------------------------------------
  def count(self, what: str) -> int:
    """The next ordinal of `what` in this entry (RANGE axis ids, DEFINE_LOCAL slots...)."""
    n = self.counters.get(what, 0)
    self.counters[what] = n + 1
    return n

  def uop(self, op: Ops, src: tuple[UOp, ...], arg: Any, dtype: DType | None, loc: Loc) -> UOp:
    """A UOp with its dtype derived when not written; the modern form every statement ends in."""
    if op is Ops.RANGE: arg = self._range_arg(arg)
    if dtype is None: dtype = derive_dtype(op, src, arg)
    if dtype is None:
      raise StmtError(error(loc, f"{op.name} needs a dtype: write ': dtype' after it"))
    u = UOp(op, dtype, src, arg)
    if u not in self.module.locs: self.module.locs[u] = loc
    if op is Ops.RANGE: self.range_starts.setdefault(u, len(self.voids))
    return u

  def _range_arg(self, arg: Any) -> Any:
    if arg is None: return (self.count("range"), AxisType.LOOP)
    if isinstance(arg, int) and not isinstance(arg, bool): return (arg, AxisType.LOOP)
    return arg

  def take_body(self, since: int) -> list[UOp]:
    """The void statements written since position `since` that nothing consumed yet; consumes them."""
    body = [v for v in dict.fromkeys(self.voids[since:]) if v not in self.used]
    self.used.update(body)
    return body

  def add_void(self, u: UOp) -> None: self.voids.append(u)

  # ---- statements ----------------------------------------------------------------------------------
  def statement(self, s: Stmt) -> None:
    loc = Loc(self.module.path, s.line, s.col)
    if s.result is not None and s.result in self.defined_at:
      first = self.defined_at[s.result]
      self.diags.append(error(loc, f"redefinition of '%{s.result}'", f"first defined at {first}"))
      return
    try:
      u = self._build(s, loc)
    except StmtError as e:
      self.diags.append(e.diag); u = None  # noqa: E702
    except Poisoned:
      u = None
    if s.result is not None:
      self.values[s.result], self.defined_at[s.result] = u, loc
      if u is not None: self.module.names.setdefault(u, s.result)
    if u is None: return
    if u.dtype is dtypes.void: self.voids.append(u)
    self.last = u

  def _build(self, s: Stmt, loc: Loc) -> UOp:
    name = s.opname
    for prefix in _OP_PREFIXES: name = name.removeprefix(prefix)
    op = _op_named(name)
    problems: list[Diagnostic] = []
    if op is None and name not in legacy.RULES:
      problems.append(error(Loc(self.module.path, s.line, s.op_col), f"unknown op '{s.opname}'"))
    srcs = self._operands(s, loc, problems)
    arg = None if s.arg is None else s.arg.value
    if problems or srcs is None or arg is BAD or s.dtype is BAD or _has_bad(arg):
      self._check_count(s, name, op, arg, loc, problems)
      self.diags.extend(problems)
      raise Poisoned()
    self._consume(srcs)
    rule = legacy.RULES.get(name)
    if rule is not None and (u := rule(self, srcs, arg, s.dtype, loc)) is not None: return u
    if s.numbered or name != s.opname or name in legacy.LEGACY_NAMES:  # written as seeds 001-003 wrote it
      return legacy.build(self, op, srcs, arg, s.dtype, loc)
    return self.uop(op, srcs, arg, s.dtype, loc)

  def _check_count(self, s: Stmt, name: str, op: Ops | None, arg: Any, loc: Loc, problems: list[Diagnostic]) -> None:
    """A statement that cannot be built still gets its operand count checked: it does not depend on
    the operands that failed, so it is an independent problem (verify checks it on built statements)."""
    if (counts := legacy.source_counts(name, op, arg)) is None: return
    if (msg := source_count_problem(name, len(s.operands), counts)) is not None: problems.append(error(loc, msg))

  def _operands(self, s: Stmt, loc: Loc, problems: list[Diagnostic]) -> tuple[UOp, ...] | None:
    """The operands, or None when one of them failed (each failure is in `problems` or already reported).
    Literals are typed only when every %-operand is known: otherwise their dtype is unknown, not wrong."""
    refs = [self._ref(o) for o in s.operands if isinstance(o, Ref)]
    known = all(r is not None for r in refs)
    written = s.dtype if isinstance(s.dtype, DType) else None
    lit_dtype = _literal_dtype(s.opname, refs, written) if known and len(refs) < len(s.operands) else None
    out: list[UOp | None] = []
    for o in s.operands:
      try:
        if isinstance(o, Ref): out.append(self.values.get(o.name))
        elif isinstance(o, Shape): out.append(self._shape(o, loc))
        else: out.append(self._literal(o, lit_dtype))
      except StmtError as e:
        problems.append(e.diag); out.append(None)  # noqa: E702
      except Poisoned: out.append(None)
    return tuple(out) if all(u is not None for u in out) else None

  def _consume(self, srcs: tuple[UOp, ...]) -> None:
    for u in srcs:
      self.used.add(u)
      after = u.src[0] if u.op is Ops.INDEX and u.src else u  # an ASSIGN's value is INDEX(AFTER(...))
      if after.op is Ops.AFTER: self.used.update(after.src[1:])  # the effects an AFTER orders are consumed with it

  def _ref(self, r: Ref) -> UOp | None:
    if r.name not in self.values:
      self.undefined.append(r)
      return None
    return self.values[r.name]

  def _shape(self, sh: Shape, loc: Loc) -> UOp:
    dims = []
    for d in sh.dims:
      if isinstance(d, Ref):
        u = self._ref(d)
        if u is None: raise Poisoned()
        dims.append(u)
      else: dims.append(self._literal(d, dtypes.index))
    u = UOp.shape_of(tuple(dims))
    self.module.locs.setdefault(u, loc)
    return u

  def _literal(self, lit: Lit, dt: DType | None) -> UOp | None:
    """The literal as a CONST of `dt`; with `dt` None (unknown) only what holds for any dtype is checked."""
    loc = Loc(self.module.path, lit.line, lit.col)
    v = lit.value
    if v is BAD: raise Poisoned()  # its name error is reported
    if not isinstance(v, (bool, int, float)):
      raise StmtError(error(loc, f"an operand must be a %name, a [shape] or a number, not {v!r}"))
    if dt is None: return None
    if isinstance(v, bool) or (dt is dtypes.bool and isinstance(v, int)):
      if dt is not dtypes.bool or v not in (0, 1):
        raise StmtError(error(loc, f"literal {v!r} does not fit dtype {dt}"))
      v = bool(v)
    elif isinstance(v, float) and not dt.is_float():
      raise StmtError(error(loc, f"float literal {v!r} used where dtype {dt} is expected"))
    u = UOp.const(dt, v)
    self.module.locs.setdefault(u, loc)
    return u

  # ---- the entry's root ----------------------------------------------------------------------------
  def finish(self) -> Entry:
    self._report_undefined()
    if self.last is not None and self.last.op is Ops.SINK: sink = self.last
    else:
      roots = [v for v in dict.fromkeys(self.voids) if v not in self.used]
      sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
      self.module.locs.setdefault(sink, self.loc)
    reached = set(sink.toposort())
    unused = tuple(u for u in dict.fromkeys(self.values.values())
                   if u is not None and u.op in (Ops.PARAM, Ops.DEFINE_VAR) and u not in reached)
    return Entry(self.name, self.kind or _implicit_kind(sink), sink, self.loc, unused)

  def _report_undefined(self) -> None:
    for r in self.undefined:
      loc = Loc(self.module.path, r.line, r.col)
      if r.name in self.defined_at:
        self.diags.append(error(loc, f"'%{r.name}' is used before its definition",
                                f"'%{r.name}' is defined at {self.defined_at[r.name]}"))
      else: self.diags.append(error(loc, f"unknown value '%{r.name}'"))


def _has_bad(arg: Any) -> bool: return isinstance(arg, tuple) and any(a is BAD or _has_bad(a) for a in arg)


def _literal_dtype(opname: str, refs: list[UOp], written: DType | None) -> DType:
  """An inline number takes the scalar dtype of the op's first %-operand (WHERE: skip the condition);
  after a pointer it is an offset for INDEX, else a value of the pointee. With no %-operand it takes
  the written value dtype (`DEFINE_ACC(0.0) : f32`), else `index` (`RANGE(16)`)."""
  op = _op_named(opname)
  values = refs[1:] if op is Ops.WHERE else refs
  if not values:
    return written.scalar if written is not None and not written.is_ptr() and written is not dtypes.void else dtypes.index
  if values[0].dtype.is_ptr(): return dtypes.index if op is Ops.INDEX else values[0].dtype.base.scalar
  return values[0].dtype.scalar


def _implicit_kind(sink: UOp) -> str:
  """'func' when the graph is tensor level (shaped buffers, movement ops, axis REDUCE), else 'kernel'."""
  for u in sink.toposort():
    if u.op in GroupOp.Movement or u.op in GroupOp.Buffers and u.src or u.op is Ops.REDUCE and len(u.src) == 1:
      return "func"
  return "kernel"


def c_identifier(stem: str) -> str:
  """A file stem made a C identifier: other characters become '_', a leading digit gets a '_'."""
  ident = re.sub(r"[^A-Za-z0-9_]", "_", stem) or "_"
  return "_" + ident if ident[0].isdigit() else ident


def _build_module(module: Module, lines: list, diags: list[Diagnostic]) -> None:
  path, implicit, block = module.path, None, None
  builders: list[EntryBuilder] = []
  for rec in lines:
    loc = Loc(path, rec.line, rec.col)
    if isinstance(rec, OpenBlock):
      if block is not None:
        diags.append(error(loc, f"'{rec.kind} {rec.name}' opens inside '{block.kind} {block.name}'",
                           "entries do not nest: close the first with '}'"))
        continue
      block = EntryBuilder(module, rec.name, rec.kind, loc, diags)
      builders.append(block)
    elif isinstance(rec, CloseBlock):
      if block is None: diags.append(error(loc, "'}' closes no entry"))
      block = None
    elif block is not None: block.statement(rec)
    else:
      if implicit is None:
        implicit = EntryBuilder(module, c_identifier(Path(path).stem), None, loc, diags)
        builders.append(implicit)
      implicit.statement(rec)
  if block is not None:
    diags.append(error(block.loc, f"'{block.kind} {block.name}' is never closed: add '}}' after its last statement"))
  module.entries = [b.finish() for b in builders]
  _check_entry_names(builders, diags)


def _check_entry_names(builders: list[EntryBuilder], diags: list[Diagnostic]) -> None:
  seen: dict[str, Loc] = {}
  for b in builders:
    if not _C_IDENT.match(b.name) or b.name in _C_KEYWORDS:
      diags.append(error(b.loc, f"entry name '{b.name}' is not a usable C identifier"))
    elif b.name in seen:
      diags.append(error(b.loc, f"duplicate entry '{b.name}'", f"first defined at {seen[b.name]}"))
    seen.setdefault(b.name, b.loc)


def parse_source(text: str, path: str = "<string>") -> Module:
  """Parse .uop text into a Module; every syntax and name error is a located diagnostic in one CompileError."""
  module = Module(path=path, text=text)
  lines, diags = parse_lines(text, path)
  diags = list(diags)
  if lines or not diags: _build_module(module, lines, diags)
  if diags: raise CompileError(sorted(diags, key=_position), {path: text})
  return module


def _position(d: Diagnostic) -> tuple: return (d.loc.line, d.loc.col) if d.loc else (0, 0)


def load_module(path: str | Path) -> Module:
  """Read and parse a .uop file; an unreadable file is a diagnostic without a location."""
  try:
    text = Path(path).read_text(encoding="utf-8")
  except OSError as e:
    raise CompileError([error(None, f"cannot read '{path}': {e.strerror or e}")]) from None
  except UnicodeDecodeError as e:
    raise CompileError([error(None, f"cannot read '{path}': not UTF-8 text ({e.reason} at byte {e.start})")]) from None
  return parse_source(text, str(path))
