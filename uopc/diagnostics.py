"""Compiler diagnostics: `file:line:col: error: message`, the source line, and a caret.

Every error a user can cause is a Diagnostic carried by CompileError; the CLI prints them all and
exits 1. Anything else escaping the compiler is an internal compiler error (exit 2).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


def _plain(part: str, text: str) -> str: return text


@dataclass(frozen=True)
class Loc:
  file: str
  line: int  # 1-based
  col: int   # 1-based

  def __str__(self) -> str: return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
  loc: Loc | None
  message: str
  severity: str = "error"
  notes: tuple[str, ...] = field(default=())

  def format(self, source: str | None = None, paint: Callable[[str, str], str] = _plain) -> str:
    """The diagnostic as the user sees it; `source` is the text of loc.file, for the caret line.
    `paint(part, text)` may decorate each part ("loc", the severity, "message", "caret", "note")
    without changing its text (uopc.diagnostics_format colours them on a terminal)."""
    where = paint("loc", f"{self.loc}:" if self.loc else "uopc:")
    lines = [f"{where} {paint(self.severity, self.severity + ':')} {paint('message', self.message)}"]
    if self.loc and source is not None:
      src_lines = source.splitlines()
      if 1 <= self.loc.line <= len(src_lines):
        text = src_lines[self.loc.line - 1].expandtabs(1)
        lines += [text, " " * (max(self.loc.col, 1) - 1) + paint("caret", "^")]
    lines += [f"{paint('note', 'note:')} {n}" for n in self.notes]
    return "\n".join(lines)


class CompileError(Exception):
  """One or more diagnostics that stop compilation; `sources` maps a file name to its text for carets."""

  def __init__(self, diagnostics: list[Diagnostic], sources: dict[str, str] | None = None):
    self.diagnostics = list(diagnostics)
    self.sources = dict(sources or {})
    super().__init__("\n".join(d.message for d in self.diagnostics))

  def format(self, paint: Callable[[str, str], str] = _plain) -> str:
    return "\n".join(d.format(self.sources.get(d.loc.file) if d.loc else None, paint) for d in self.diagnostics)


def error(loc: Loc | None, message: str, *notes: str) -> Diagnostic: return Diagnostic(loc, message, "error", notes)


def warning(loc: Loc | None, message: str, *notes: str) -> Diagnostic: return Diagnostic(loc, message, "warning", notes)


def note(loc: Loc | None, message: str, *notes: str) -> Diagnostic: return Diagnostic(loc, message, "note", notes)
