"""Compiler diagnostics: `file:line:col: error: message`, the source line, and a caret.

Every error a user can cause is a Diagnostic carried by CompileError; the CLI prints them all and
exits 1. Anything else escaping the compiler is an internal compiler error (exit 2).
"""
from __future__ import annotations

from dataclasses import dataclass, field


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

  def format(self, source: str | None = None) -> str:
    """The diagnostic as the user sees it; `source` is the text of loc.file, for the caret line."""
    head = f"{self.loc}: {self.severity}: {self.message}" if self.loc else f"uopc: {self.severity}: {self.message}"
    lines = [head]
    if self.loc and source is not None:
      src_lines = source.splitlines()
      if 1 <= self.loc.line <= len(src_lines):
        text = src_lines[self.loc.line - 1].expandtabs(1)
        lines += [text, " " * (max(self.loc.col, 1) - 1) + "^"]
    lines += [f"note: {n}" for n in self.notes]
    return "\n".join(lines)


class CompileError(Exception):
  """One or more diagnostics that stop compilation; `sources` maps a file name to its text for carets."""

  def __init__(self, diagnostics: list[Diagnostic], sources: dict[str, str] | None = None):
    self.diagnostics = list(diagnostics)
    self.sources = dict(sources or {})
    super().__init__("\n".join(d.message for d in self.diagnostics))

  def format(self) -> str:
    return "\n".join(d.format(self.sources.get(d.loc.file) if d.loc else None) for d in self.diagnostics)


def error(loc: Loc | None, message: str, *notes: str) -> Diagnostic: return Diagnostic(loc, message, "error", notes)
