"""uopc's CMake package (`uopc --cmake-dir`): samples/cmake-app configures with find_package(uopc
CONFIG), builds with Ninja, runs, does nothing on a second build and rebuilds the library after its
.uop changes, and only then. Needs cmake and ninja (Debian's cmake and ninja-build; `make test`
installs them as root)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from uopc import __version__
from uopc.cli import cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "cmake-app"
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                                 reason="cmake or ninja not found (Debian's cmake, ninja-build)")


def cmake_dir() -> Path:
  r = CliRunner().invoke(cli, ["--cmake-dir"])
  assert r.exit_code == 0
  return Path(r.stdout.strip())


def test_cmake_dir_holds_the_package_of_this_version():
  d = cmake_dir()
  assert (d / "uopcConfig.cmake").is_file()
  assert re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', (d / "uopcConfigVersion.cmake").read_text()).group(1) == __version__


def _run(cmd: list[str], cwd: Path) -> str:
  done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
  assert done.returncode == 0, f"{cmd}:\n{done.stdout}{done.stderr}"
  return done.stdout


@needs_cmake
def test_the_cmake_sample_builds_runs_and_rebuilds_only_after_the_uop_changes(tmp_path):
  src, build = tmp_path / "app", tmp_path / "build"
  shutil.copytree(SAMPLE, src)
  uopc = tmp_path / "uopc"  # this checkout's uopc, run by the interpreter running the tests
  uopc.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -m uopc "$@"\n')
  uopc.chmod(0o755)
  _run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", f"-Duopc_DIR={cmake_dir()}", f"-DUOPC_EXECUTABLE={uopc}"], tmp_path)
  first = _run(["cmake", "--build", str(build)], tmp_path)
  assert "uopc: building scale from scale.uop (-t c)" in first
  assert _run([str(build / "app")], tmp_path) == "1 4 7 10 13 16 19 22\n"
  assert "no work to do" in _run(["cmake", "--build", str(build)], tmp_path)
  (src / "scale.uop").write_text((src / "scale.uop").read_text().replace("MUL(%xv, 3.0)", "MUL(%xv, 5.0)"))
  assert "uopc: building scale" in _run(["cmake", "--build", str(build)], tmp_path)
  done = subprocess.run([str(build / "app")], capture_output=True, text=True)
  assert done.returncode == 1 and done.stdout == "1 6 11 16 21 26 31 36\n"  # main.cpp still expects 3x + 1
  assert "no work to do" in _run(["cmake", "--build", str(build)], tmp_path)
