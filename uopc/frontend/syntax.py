"""Text -> line records: the Lark LALR parser of grammar/uop.lark and its inline transformer.

Each line of a file becomes one record (a statement, a numbered-listing statement, a block opener
or a block closer) whose literals, dtypes and names are already Python values. Names that mean
nothing (an unknown dtype, an unknown bare name in an argument) are diagnosed here, at their token.
Building UOps from the records is the job of `uopc.frontend.parser`.
"""
from __future__ import annotations

import ast
import importlib.resources
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import lark

from uopc.diagnostics import Diagnostic, Loc, error
from uopc.dtype import AddrSpace, DType, PtrDType, parse_dtype
from uopc.ops import AxisType, op_by_name


class Bad:
  """A value that could not be resolved; its diagnostic is already reported."""
  def __repr__(self) -> str: return "<bad>"


BAD = Bad()


@dataclass(frozen=True)
class Lit:
  """A literal (or any arg value) with where it was written."""
  value: Any
  line: int
  col: int


@dataclass(frozen=True)
class Ref:
  """A use of a %name (or of a numbered-listing label, kept as the same name space)."""
  name: str
  line: int
  col: int


@dataclass(frozen=True)
class Shape:
  dims: tuple  # of Ref | Lit
  line: int
  col: int


@dataclass(frozen=True)
class Stmt:
  line: int
  col: int
  result: str | None           # the %name defined, without '%'
  opname: str
  op_col: int
  operands: tuple              # of Ref | Shape | Lit
  arg: Lit | None
  dtype: DType | Bad | None
  numbered: bool = False       # a line of seed 002's numbered listing (a legacy statement form)


@dataclass(frozen=True)
class OpenBlock:
  line: int
  col: int
  kind: str
  name: str


@dataclass(frozen=True)
class CloseBlock:
  line: int
  col: int


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_NAMED_VALUES = {"True": True, "False": False, "None": None, "inf": math.inf, "nan": math.nan}


def _number(text: str) -> int | float:
  if text[:2] in ("0x", "0X"): return int(text, 16)
  if any(c in text for c in ".eE"): return float(text)
  return int(text)


def resolve_name(name: str) -> Any:
  """A bare name in an argument: True/False/None/inf/nan, AxisType.X, AddrSpace.X, an op, a dtype;
  BAD when it is none of these."""
  if name in _NAMED_VALUES: return _NAMED_VALUES[name]
  head, _, member = name.partition(".")
  if head == "AxisType": return AxisType.__members__.get(member, BAD)
  if head == "AddrSpace": return AddrSpace.__members__.get(member, BAD)
  if (op := op_by_name(name)) is not None: return op
  try:
    return parse_dtype(name)
  except ValueError:
    return BAD


class _Records(lark.Transformer):
  """Runs inline in the LALR parser (no parse tree is built). `diags` collects name errors."""

  def __init__(self):
    super().__init__()
    self.path = "<string>"
    self.diags: list[Diagnostic] = []

  def _error(self, line: int, col: int, message: str) -> None:
    self.diags.append(error(Loc(self.path, line, col), message))

  # ---- lines ---------------------------------------------------------------------------------------
  def start(self, lines): return lines
  def open_block(self, c): return OpenBlock(c[0].line, c[0].column, str(c[0]), str(c[1]))
  def close_block(self, c): return CloseBlock(c[0].line, c[0].column)

  def stmt(self, c):
    var, name, operands, arg, dtype = c
    first = var or name
    return Stmt(first.line, first.column, var[1:] if var else None, str(name), name.column,
                tuple(operands or ()), arg, dtype)

  def numbered(self, c):
    label, name, dtype, *srcs, value = c
    refs = tuple(Ref(str(_number(s)), s.line, s.column) for s in srcs if s is not None)
    for s in (label, *(s for s in srcs if s is not None)):
      if not isinstance(_number(s), int): self._error(s.line, s.column, f"'{s}' is not a statement number")
    return Stmt(label.line, label.column, str(_number(label)), str(name), name.column, refs, value, dtype, True)

  # ---- operands ------------------------------------------------------------------------------------
  def operands(self, c): return tuple(x for x in c if x is not None)
  def ref(self, c): return Ref(c[0][1:], c[0].line, c[0].column)
  def shape(self, c):
    dims = tuple(x for x in c if x is not None)
    return Shape(dims, dims[0].line if dims else 0, dims[0].col if dims else 0)

  def literal(self, c):
    neg, tok = c
    first = neg or tok
    if tok.type == "NUMBER": value = _number(str(tok))
    else:
      value = resolve_name(str(tok))
      if value is BAD: self._error(tok.line, tok.column, f"unknown name '{tok}'")
    if neg is not None and value is not BAD:
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        self._error(neg.line, neg.column, f"'-' cannot apply to '{tok}'")
        value = BAD
      else: value = -value
    return Lit(value, first.line, first.column)

  # ---- argument values -----------------------------------------------------------------------------
  def arg(self, c): return c[0]
  def string(self, c):
    tok = c[0]
    try:
      return Lit(ast.literal_eval(str(tok)), tok.line, tok.column)
    except (SyntaxError, ValueError) as e:
      self._error(tok.line, tok.column, f"bad string literal: {e.msg if isinstance(e, SyntaxError) else e}")
      return Lit(BAD, tok.line, tok.column)

  def bytes_value(self, c):
    """`x"00ff"`: two hex digits per byte, in order (BINARY data); a bad digit or an odd count is
    reported at the digit, resp. at the literal."""
    tok = c[0]
    digits = str(tok)[2:-1]
    bad = next((i for i, ch in enumerate(digits) if ch not in _HEX_DIGITS), None)
    if bad is not None:
      self._error(tok.line, tok.column + 2 + bad, f"'{digits[bad]}' is not a hex digit: a byte string is x\"...\" "
                  "with two hex digits (0-9, a-f) per byte")
      return Lit(BAD, tok.line, tok.column)
    if len(digits) % 2:
      self._error(tok.line, tok.column, f"a byte string needs two hex digits per byte; this one has {len(digits)} digits")
      return Lit(BAD, tok.line, tok.column)
    return Lit(bytes.fromhex(digits), tok.line, tok.column)

  def empty_tuple(self, c): return Lit((), 0, 0)
  def tuple(self, c):
    items = [x for x in c if x is not None]
    return Lit(tuple(x.value for x in items), items[0].line, items[0].col)
  def ptr_value(self, c):
    dt = self._ptr(c[0], c[1])
    return Lit(dt, c[0].line, c[0].column)

  # ---- dtypes --------------------------------------------------------------------------------------
  def dtype(self, c):
    tok = c[0]
    try:
      return parse_dtype(str(tok))
    except ValueError:
      self._error(tok.line, tok.column, f"unknown dtype '{tok}'")
      return BAD

  def ptr_dtype(self, c): return self._ptr(c[0], c[1])
  def dtype_params(self, c): return c

  def _ptr(self, head, params) -> DType | Bad:
    if head != "ptr":
      self._error(head.line, head.column, f"unknown dtype '{head}<...>' (only ptr<...> takes parameters)")
      return BAD
    base, *rest = params
    space, size = AddrSpace.GLOBAL, -1
    for p in rest:
      if p.type == "NUMBER" and isinstance(_number(str(p)), int): size = _number(str(p))
      elif str(p) in {a.value for a in AddrSpace}: space = AddrSpace(str(p))
      else:
        self._error(p.line, p.column, f"bad pointer parameter '{p}': expected an address space "
                    f"({', '.join(a.value for a in AddrSpace)}) or an element count")
        return BAD
    if base is BAD: return BAD
    return PtrDType.make(base, space, size)


_RECORDS = _Records()


def _grammar_text() -> str:
  """The grammar ships in the wheel as uopc.grammar. Run from a source checkout (this file under the
  repository's uopc/, beside its grammar/ folder) it is that checkout's grammar, even where another
  checkout's editable install also provides uopc.grammar."""
  root = Path(__file__).resolve().parents[2]
  if (root / "grammar" / "uop.lark").is_file() and (root / "uopc" / "frontend" / "syntax.py").is_file():
    return (root / "grammar" / "uop.lark").read_text()
  return (importlib.resources.files("uopc.grammar") / "uop.lark").read_text()


@lru_cache(maxsize=None)
def _parser() -> lark.Lark:
  text = _grammar_text()
  return lark.Lark(text, parser="lalr", lexer="contextual", transformer=_RECORDS, start=["start", "single_line"],
                   maybe_placeholders=True)


_TOKEN_WORDS = {"NAME": "a name", "VAR": "a %name", "NUMBER": "a number", "STRING": "a string", "BYTES": "a byte string",
                "_NL": "end of line", "$END": "end of file", "BLOCK_KIND": "'kernel' or 'func'", "NEG": "'-'"}


def _describe(terminal: str) -> str:
  if terminal in _TOKEN_WORDS: return _TOKEN_WORDS[terminal]
  pattern = _parser().get_terminal(terminal).pattern
  return f"'{pattern.value}'" if pattern.type == "str" else terminal


def _syntax_diag(path: str, e: lark.UnexpectedInput, line_offset: int = 0) -> Diagnostic:
  loc = Loc(path, e.line + line_offset, e.column) if e.line > 0 else None
  if isinstance(e, lark.UnexpectedCharacters):
    return error(loc, f"unexpected character {e.char!r}")
  tok = getattr(e, "token", None)
  what = "end of line" if tok is None or tok.type in ("_NL", "$END") else f"'{tok}'"
  expected = sorted({_describe(t) for t in getattr(e, "expected", ()) or ()})
  return error(loc, f"syntax error: unexpected {what}" + (f"; expected {', '.join(expected)}" if expected else ""))


def parse_lines(text: str, path: str) -> tuple[list, list[Diagnostic]]:
  """The records of every line, and the name errors met; raises nothing but returns syntax errors
  (all of them: after a failure each line is parsed alone) as the diagnostics with no records."""
  _RECORDS.path, _RECORDS.diags = path, []
  try:
    return _parser().parse(text, start="start"), _RECORDS.diags
  except lark.UnexpectedInput as first:
    return [], _line_by_line_errors(text, path) or [_syntax_diag(path, first)]


def _line_by_line_errors(text: str, path: str) -> list[Diagnostic]:
  diags = []
  for i, line in enumerate(text.split("\n")):
    try:
      _parser().parse(line, start="single_line")
    except lark.UnexpectedInput as e:
      diags.append(_syntax_diag(path, e, line_offset=i))
  return diags
