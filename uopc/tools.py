"""Outside tools: LLVM's command-line tools (ld.lld, llvm-mc, ...) found by version, not by name, and
how a tool's failure on generated files is told apart (the user's tool, or our output).

A machine often has several: Debian installs each LLVM release under /usr/lib/llvm-N/bin and puts
only some of them on PATH, as `NAME-N` or (the distribution's default release, often an old one) as
plain `NAME`. The first `NAME` on PATH is therefore no promise of a usable version. Every candidate
(`NAME` and `NAME-N` on PATH, /usr/lib/llvm-N/bin/NAME) is asked its `--version`; the newest one at
or above the version asked for wins. A candidate that does not run or says no version is skipped.

Every outside command uopc runs goes through `run_tool`, which shows it first under -v
(uopc.reporter).
"""
from __future__ import annotations

import functools
import glob
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence


@dataclass(frozen=True)
class Tool:
  path: str
  version: int   # the LLVM major version the tool reports


def candidates(name: str, path_var: str | None) -> list[str]:
  """Every file that may be `name`: on PATH (plain and -N suffixed) and under /usr/lib/llvm-*/bin."""
  found: list[str] = []
  for d in (path_var or "").split(os.pathsep):
    if d: found += [p for p in [os.path.join(d, name), *sorted(glob.glob(os.path.join(d, f"{name}-[0-9]*")))] if os.path.isfile(p)]
  found += sorted(glob.glob(f"/usr/lib/llvm-*/bin/{name}"))
  unique: dict[str, str] = {}
  for p in found: unique.setdefault(os.path.realpath(p), p)
  return [p for p in unique.values() if os.access(p, os.X_OK)]


def run_tool(cmd: Sequence[str], cwd=None, env: Mapping[str, str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
  """Run an outside command, its output captured as text; -v shows it first as a shell line.
  OSError (it cannot be started) and subprocess.TimeoutExpired are the caller's to handle."""
  from uopc.reporter import current
  current().command(cmd, cwd)
  return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)


@functools.lru_cache(maxsize=None)
def tool_version(path: str, *args: str) -> int | None:
  """The major version `path *args --version` reports ('LLVM version 19.1.7', 'LLD 19.1.7'), or None."""
  try:
    out = run_tool([path, *args, "--version"], timeout=30).stdout
  except (OSError, subprocess.SubprocessError):
    return None
  m = re.search(r"(?:LLVM version|LLD|clang version) (\d+)\.", out)
  return int(m.group(1)) if m else None


def found_tools(name: str, env: Mapping[str, str] = os.environ) -> list[Tool]:
  """Every runnable `name` with its version, newest first."""
  tools = [Tool(p, v) for p in candidates(name, env.get("PATH")) if (v := tool_version(p)) is not None]
  return sorted(tools, key=lambda t: -t.version)


def find_tool(name: str, min_version: int = 0, env: Mapping[str, str] = os.environ) -> Tool | None:
  """The newest `name` of at least `min_version`, or None."""
  return next((t for t in found_tools(name, env) if t.version >= min_version), None)


def describe_missing(name: str, min_version: int, package: str, env: Mapping[str, str] = os.environ) -> str:
  """Why no `name` >= min_version is usable, naming what was found instead and how to get one."""
  found = ", ".join(f"{t.version} at {t.path}" for t in found_tools(name, env))
  return (f"{name} >= {min_version} not found" + (f" (found only LLVM {found})" if found else "")
          + f"; install it, e.g. Debian's {package}")


# ---- running a tool on generated files ------------------------------------------------------------------


def run_on_generated(cmd: list[str], cwd, probe: Callable[[], list[str]] | None = None, env: Mapping[str, str] | None = None) -> None:
  """Run an outside tool (the C compiler, ptxas, ...) on files uopc generated. A tool that cannot be
  started, or that also fails on `probe()`'s command (the same tool and flags on a minimal input that
  the probe writes), is the user's to fix: a CompileError (exit 1) with the tool's own words. A tool
  that fails only on our output is our bug: ToolFailure, an internal compiler error. What a tool that
  succeeds says on stderr (warnings) is passed on."""
  from uopc.diagnostics import CompileError, error
  from uopc.reporter import current
  try:
    done = run_tool(cmd, cwd, env)
  except OSError as e:
    raise CompileError([error(None, f"cannot run '{cmd[0]}': {e.strerror}")]) from e
  if done.returncode == 0:
    current().tool_output(os.path.basename(cmd[0]), done.stderr)
    return
  said = f"{done.stdout}{done.stderr}".strip() or "(no output)"
  if probe is not None:
    check = run_tool(probe(), cwd, env)
    if check.returncode != 0:
      raise CompileError([error(None, f"{os.path.basename(cmd[0])} failed (exit {done.returncode}): {shlex.join(cmd)}", said,
                                "it fails on a minimal input too, so the tool or its flags are at fault, not the generated code")])
  raise ToolFailure(f"{os.path.basename(cmd[0])} failed (exit {done.returncode}) on generated code: {shlex.join(cmd)}\n{said}")


class ToolFailure(Exception):
  """An outside tool refused what uopc generated: an internal compiler error, with the tool's output."""
