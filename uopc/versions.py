"""`uopc --version`: uopc's version and the outside tools a build would use, each with the first line of
what it reports about itself (or why it is not there). Nothing is installed or changed."""
from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
from typing import Mapping

from uopc import __version__


def _first_line(cmd: list[str]) -> str:
  try:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.SubprocessError) as e:
    return f"cannot run: {e}"
  lines = (done.stdout or done.stderr).strip().splitlines()
  if not lines: return f"exit {done.returncode}"
  return next((ln for ln in lines if re.search(r"(version|release|LLD) \d", ln)), lines[0]).strip()


def _tool_line(label: str, cmd: tuple[str, ...] | None, missing: str) -> str:
  if cmd is None: return f"  {label}: not found ({missing})"
  return f"  {label}: {shlex.join(cmd)} -- {_first_line([*cmd, '--version'])}"


def version_report(env: Mapping[str, str] = os.environ) -> str:
  import llvmlite.binding as llvm
  from uopc.targets.amd.codeobj import LLD_MIN_VERSION, find_linker
  from uopc.targets.cuda.toolchain import find_tool
  cc = shlex.split(env.get("CC", "cc")) or ["cc"]
  ptxas, fatbinary = find_tool("ptxas", env), find_tool("fatbinary", env)
  llvm_version = ".".join(map(str, llvm.llvm_version_info))
  return "\n".join([
    f"uopc {__version__} (Python {platform.python_version()}, LLVM {llvm_version} through llvmlite)",
    "tools (a build runs these; -t llvm and -t amd compile with the LLVM above):",
    _tool_line("C compiler ($CC)", tuple(cc), "set CC or install a C compiler"),
    _tool_line("ptxas (-t cuda)", (str(ptxas),) if ptxas else None, "CUDA_HOME, PATH or pip install 'uopc[cuda]'; PTX only then"),
    _tool_line("fatbinary (-t cuda)", (str(fatbinary),) if fatbinary else None, "as ptxas"),
    _tool_line(f"ld.lld >= {LLD_MIN_VERSION} (-t amd)", find_linker(env), "apt-get install lld-19 or pip install 'uopc[amd]'"),
  ]) + "\n"
