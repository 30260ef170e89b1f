"""How a `uopc` command reports: the options every command shares (--diagnostics-format, and -v on
those that run outside tools) and the outcome of running one (uopc.cli's compiler_command).

Invariants:
- Exit codes are the same in every format: 0 success, 1 an error in the input or the command line
  (a CompileError, a click.UsageError), 2 an internal compiler error (any other exception).
- The reporter has said everything (in sarif: written its log) before the command's exit code is
  returned, whatever ended it.
- A command line that click cannot parse is reported in the format it asks for as well (read from
  argv and $UOPC_DIAGNOSTICS_FORMAT without click).
"""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

import click

from uopc.diagnostics import CompileError, error
from uopc.diagnostics_format import FORMATS


def diagnostics_format_option(fn):
  return click.option("--diagnostics-format", type=click.Choice(FORMATS), default="text", show_default=True,
                      envvar="UOPC_DIAGNOSTICS_FORMAT",
                      help="How diagnostics are written on stderr: text (coloured on a terminal unless NO_COLOR is set), "
                           "json (one object a line: file, line, column, severity, message, notes) or sarif (one SARIF 2.1.0 "
                           "log, for code-scanning tools). Also $UOPC_DIAGNOSTICS_FORMAT.")(fn)


def verbose_option(fn):
  return click.option("-v", "--verbose", is_flag=True,
                      help="Print every outside command uopc runs (the C compiler, ptxas, fatbinary, ld.lld, ...) on stderr "
                           "as a shell line one can paste.")(fn)


def outcome(reporter, command: Callable[[], object]) -> int:
  """Run `command` with `reporter` current; its exit code, once the reporter has said everything."""
  code = 1
  try:
    command()
    code = 0
  except CompileError as e:
    reporter.fail(e)
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else int(e.code is not None)
  except click.UsageError as e:
    if reporter.format == "text": raise
    reporter.fail(CompileError([error(None, e.format_message())]))
  except (click.exceptions.Exit, click.ClickException, KeyboardInterrupt):
    raise
  except Exception as e:  # noqa: BLE001 - the last line of defence for the user
    reporter.internal_error(f"internal compiler error: {type(e).__name__}: {e}", traceback.format_exc().rstrip() if _debug() else
                            "(set UOPC_DEBUG=1 for the Python traceback, and please report it)")
    code = 2
  finally:
    reporter.finish(code)
  return code


def _debug() -> bool:
  return "--debug" in sys.argv or os.environ.get("UOPC_DEBUG", "") not in ("", "0")


def requested_format(argv: list[str]) -> str:
  """The diagnostics format a command line asks for, read without click (whose parsing failed)."""
  fmt = os.environ.get("UOPC_DIAGNOSTICS_FORMAT", "text")
  for i, a in enumerate(argv):
    if a.startswith("--diagnostics-format="): fmt = a.partition("=")[2]
    elif a == "--diagnostics-format" and i + 1 < len(argv): fmt = argv[i + 1]
  return fmt if fmt in FORMATS else "text"


def show_usage_error(e: click.ClickException, code: int, fmt: str) -> None:
  """A bad command line in the format asked for: click's own text, or a diagnostic for machines."""
  if fmt == "text": return e.show()
  from uopc.reporter import Reporter
  reporter = Reporter(fmt)
  reporter.fail(CompileError([error(None, e.format_message())]))
  reporter.finish(code)
