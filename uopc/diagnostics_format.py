"""How diagnostics are written (`--diagnostics-format`, as gcc's `-fdiagnostics-format`): `text` for
people, `json` (one object a line) and `sarif` (one SARIF 2.1.0 log) for machines. Pure functions:
where and when they are written is uopc.reporter's business.

Invariants:
- text is Diagnostic.format's layout byte for byte; colour (on a terminal only, never with NO_COLOR
  set to anything but "") only wraps its parts in ANSI SGR codes.
- A JSON line is one diagnostic: file, line, column (1-based; null when it has no location),
  severity ("error", "warning" or "note"), message and notes (a list of strings), in that order.
- The SARIF log validates against the SARIF 2.1.0 schema (tests/data/sarif-schema-2.1.0.json).
  A located diagnostic is a result with one location; as code-scanning services refuse a result
  without one, unlocated diagnostics (a missing tool, an unreadable file) and internal compiler
  errors are the invocation's toolExecutionNotifications. A file under the working directory is
  named relative to it (uriBaseId %SRCROOT%), others by an absolute file: URI. Columns count code points.
  Diagnostics have no codes of their own, so a result's ruleId is its level (error, warning, note).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import quote

from uopc.diagnostics import Diagnostic

FORMATS = ("text", "json", "sarif")
SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SEVERITIES = ("error", "warning", "note")
# The SGR codes of gcc's default GCC_COLORS: bold locations, red errors, magenta warnings, cyan notes, green carets.
_SGR = {"loc": "1", "error": "1;31", "warning": "1;35", "note": "1;36", "caret": "1;32", "message": "1"}


def is_terminal(stream, env: Mapping[str, str] = os.environ) -> bool:
  """`stream` is a terminal that takes escape codes (TERM is not "dumb")."""
  isatty = getattr(stream, "isatty", None)
  return env.get("TERM") != "dumb" and bool(isatty and isatty())


def use_color(stream, env: Mapping[str, str] = os.environ) -> bool:
  """Colour only on a terminal, and never when NO_COLOR is set to anything but "" (https://no-color.org)."""
  return not env.get("NO_COLOR") and is_terminal(stream, env)


def paint(part: str, text: str) -> str:
  """`text` in the colour of `part` (a Diagnostic.format part)."""
  code = _SGR.get(part)
  return f"\033[{code}m{text}\033[0m" if code else text


def text(d: Diagnostic, source: str | None, color: bool) -> str:
  return d.format(source, paint) if color else d.format(source)


def json_line(d: Diagnostic) -> str:
  loc = d.loc
  record = {"file": loc.file if loc else None, "line": loc.line if loc else None, "column": loc.col if loc else None,
            "severity": d.severity, "message": d.message, "notes": list(d.notes)}
  return json.dumps(record, ensure_ascii=False)


def _message(d: Diagnostic) -> dict:
  return {"text": "\n".join([d.message, *(f"note: {n}" for n in d.notes)])}


def _artifact(file: str, cwd: Path) -> dict:
  absolute = Path(os.path.normpath(cwd / file))  # cwd / an absolute path is that path
  try:
    return {"uri": quote(absolute.relative_to(cwd).as_posix()), "uriBaseId": "%SRCROOT%"}
  except ValueError:
    return {"uri": absolute.as_uri()}


def sarif_result(d: Diagnostic, cwd: Path) -> dict:
  assert d.loc is not None
  region = {"startLine": max(d.loc.line, 1), "startColumn": max(d.loc.col, 1)}
  return {"ruleId": d.severity, "level": d.severity, "message": _message(d),
          "locations": [{"physicalLocation": {"artifactLocation": _artifact(d.loc.file, cwd), "region": region}}]}


def sarif_notification(level: str, message: str) -> dict:
  return {"level": level, "message": {"text": message}}


_RULES = [{"id": "error", "shortDescription": {"text": "An error in the input: uopc does not compile it."}},
          {"id": "warning", "shortDescription": {"text": "A warning: the input compiles, but probably not as meant."}},
          {"id": "note", "shortDescription": {"text": "A remark about the input."}}]


def sarif_log(diagnostics: Sequence[Diagnostic], notifications: Sequence[dict], exit_code: int, version: str,
              cwd: Path | None = None) -> dict:
  """The SARIF 2.1.0 log of one uopc command: `diagnostics` (located ones as results, others as
  notifications, after `notifications`), and whether it succeeded (exit code 0)."""
  cwd = Path(os.path.normpath(cwd or os.getcwd()))
  located = [d for d in diagnostics if d.loc is not None]
  told = [*notifications, *(sarif_notification(d.severity, _message(d)["text"]) for d in diagnostics if d.loc is None)]
  invocation = {"executionSuccessful": exit_code == 0, "exitCode": exit_code, "toolExecutionNotifications": told}
  run = {"tool": {"driver": {"name": "uopc", "version": version, "rules": _RULES}},
         "invocations": [invocation], "columnKind": "unicodeCodePoints",
         "originalUriBaseIds": {"%SRCROOT%": {"uri": cwd.as_uri().rstrip("/") + "/"}},
         "results": [sarif_result(d, cwd) for d in located]}
  return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}
