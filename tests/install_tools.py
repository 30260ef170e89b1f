"""`make test`'s set-up of the outside tools the tests use, checked by version, not by name.

A fresh machine of our image has Debian's default LLVM 14 (`llvm-mc` on PATH) and no clang or lld:
an old tool under the right name is as good as none. cmake and ninja (for the CMake sample) do in
any version. For each requirement below, uopc.tools looks at
every candidate (plain and -N suffixed on PATH, /usr/lib/llvm-N/bin) and asks its version. What is
missing is installed with apt-get when we are root and apt-get exists; otherwise (or if that fails)
this says once which tools are missing, and the tests that need them skip with the same reason
(pytest's summary then counts them). It never fails the run.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from uopc.targets.amd.codeobj import LLD_MIN_VERSION
from uopc.tools import describe_missing, find_tool

# tool -> (lowest major version that works, the Debian package that provides a good one, what needs it)
REQUIREMENTS = {
  "llvm-mc": (19, "llvm-19", "reassembling the AMD ISA (LLVM 14 and 16 refuse code object v5's directives)"),
  "ld.lld": (LLD_MIN_VERSION, "lld-19", "linking AMD code objects (LLD 14 refuses code object v5)"),
  "clang": (0, "clang", "compiling the C output with clang, the Metal syntax checks (clang++)"),
}


# tool -> (the Debian package, what needs it), for tools any version of which does
PLAIN_REQUIREMENTS = {
  "cmake": ("cmake", "building samples/cmake-app with uopc's CMake package"),
  "ninja": ("ninja-build", "building samples/cmake-app with uopc's CMake package"),
}


def missing() -> dict[str, str]:
  """Debian package -> why, for every requirement no installed tool meets."""
  llvm = {pkg: f"{describe_missing(tool, low, pkg)}: needed for {why}" for tool, (low, pkg, why) in REQUIREMENTS.items()
          if find_tool(tool, low) is None}
  plain = {pkg: f"{tool} not found; install it, e.g. Debian's {pkg}: needed for {why}"
           for tool, (pkg, why) in PLAIN_REQUIREMENTS.items() if shutil.which(tool) is None}
  return {**llvm, **plain}


def main() -> int:
  need = missing()
  if not need: return 0
  if os.geteuid() == 0 and shutil.which("apt-get"):
    print(f"make test: installing {' '.join(need)} with apt-get:", *need.values(), sep="\n  ", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    ok = subprocess.run(["apt-get", "update", "-qq"], env=env).returncode == 0 and \
      subprocess.run(["apt-get", "install", "-y", "-qq", *need], env=env, stdout=subprocess.DEVNULL).returncode == 0
    if ok: return 0
    print("make test: apt-get failed", file=sys.stderr)
  else:
    print("make test: not root or no apt-get: cannot install tools", file=sys.stderr)
  print("make test: the tests that need these will skip:", *missing().values(), sep="\n  ", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
