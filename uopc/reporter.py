"""Where what a command says goes: its diagnostics, the outside commands it runs (-v), the output of
tools that succeeded, and the progress bar of a long build. One Reporter is current at a time: the
CLI installs one per command (`reporting`) from --diagnostics-format and -v; code run as a library
gets the default, text on stderr without command lines.

Invariants:
- Everything uopc writes on stderr during a command goes through the current Reporter.
- text and json write each diagnostic when it comes; sarif keeps them and writes one log at
  `finish`, so that stderr is then a single JSON document.
- In the json and sarif formats stderr carries nothing else: a tool's own stderr and -v's command
  lines become notes (json lines; SARIF toolExecutionNotifications), and there is no progress bar.
- The stream is looked up (sys.stderr) at each write, so a redirected stderr is honoured.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from typing import Iterator, Sequence

from uopc import diagnostics_format as fmt
from uopc.diagnostics import CompileError, Diagnostic, note


class Reporter:
  def __init__(self, format: str = "text", verbose: bool = False):
    if format not in fmt.FORMATS: raise ValueError(f"unknown diagnostics format '{format}'; formats: {', '.join(fmt.FORMATS)}")
    self.format, self.verbose = format, verbose
    self.kept: list[Diagnostic] = []   # sarif: every diagnostic, for the log
    self.notifications: list[dict] = []  # sarif: tool output, command lines, internal errors
    self.progress_bar = None             # the build's progress bar (uopc.progress.Progress) while one is open

  @property
  def stream(self): return sys.stderr

  def _write(self, text: str) -> None:
    text = text if text.endswith("\n") else text + "\n"
    if self.progress_bar is not None: self.progress_bar.write(text)
    else: self.stream.write(text); self.stream.flush()  # noqa: E702

  def report(self, d: Diagnostic, source: str | None = None) -> None:
    """One diagnostic; `source` is the text of its file, for the caret line."""
    if self.format == "sarif": self.kept.append(d)
    elif self.format == "json": self._write(fmt.json_line(d))
    else: self._write(fmt.text(d, source, fmt.use_color(self.stream)))

  def fail(self, e: CompileError) -> None:
    """The errors that stop the command (exit 1)."""
    for d in e.diagnostics: self.report(d, e.sources.get(d.loc.file) if d.loc else None)
    if self.format == "text" and len(e.diagnostics) > 1: self._write(f"{len(e.diagnostics)} errors generated.")

  def internal_error(self, message: str, hint: str) -> None:
    """An internal compiler error (exit 2): `message`, then `hint` in text (how to learn more)."""
    if self.format == "sarif": self.notifications.append(fmt.sarif_notification("error", f"uopc: {message}"))
    elif self.format == "json": self.report(Diagnostic(None, message, "error"))
    else: self._write(f"uopc: {message}\n{hint}")

  def tool_output(self, tool: str, said: str) -> None:
    """What a tool that succeeded wrote on stderr (warnings), passed on."""
    if not said.strip(): return
    if self.format == "text": self._write(said)
    else: self.report(note(None, f"{tool} said: {said.strip()}"))

  def command(self, cmd: Sequence[str], cwd: str | os.PathLike | None = None) -> None:
    """-v: an outside command about to run, as a shell line one can paste."""
    if not self.verbose: return
    line = shlex.join(map(str, cmd))
    if cwd is not None: line = f"cd {shlex.quote(str(cwd))} && {line}"
    if self.format == "sarif": self.notifications.append(fmt.sarif_notification("note", line))
    elif self.format == "json": self.report(note(None, f"running: {line}"))
    else: self._write(line)

  def finish(self, exit_code: int) -> None:
    """The command ended with `exit_code`: sarif writes its log now."""
    if self.format != "sarif": return
    from uopc import __version__
    self._write(json.dumps(fmt.sarif_log(self.kept, self.notifications, exit_code, __version__), indent=2, ensure_ascii=False))
    self.kept, self.notifications = [], []

  def progress(self, what: str):
    """A progress bar for a long piece of work (uopc.progress.Progress), drawn only in text on a terminal."""
    from uopc.progress import Progress
    return Progress(self, what, self.format == "text" and fmt.is_terminal(self.stream))


_current = Reporter()


def current() -> Reporter:
  return _current


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
  """Make `reporter` current for the block."""
  global _current
  saved, _current = _current, reporter
  try:
    yield reporter
  finally:
    _current = saved
