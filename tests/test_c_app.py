"""samples/c-app: `make run` builds saxpy.uop with uopc, links main.c and checks every result; the same
under AddressSanitizer and UndefinedBehaviorSanitizer, which instrument the generated library too
(CFLAGS reaches both uopc's compiler step and the app's)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


APP = Path(__file__).resolve().parent.parent / "samples" / "c-app"
UOPC = f"{sys.executable} -m uopc"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_run(build: Path, cflags: str) -> subprocess.CompletedProcess:
  env = {**os.environ, "CFLAGS": cflags}
  return subprocess.run(["make", "-C", str(APP), "run", f"UOPC={UOPC}", f"BUILD={build}"], env=env,
                        capture_output=True, text=True)


def test_c_app_runs(tmp_path):
  done = make_run(tmp_path, "-O2 -Wall -Wextra -Werror")
  assert done.returncode == 0, done.stdout + done.stderr
  assert "saxpy(n=0) -> 2 (a size argument is outside the [min, max] range the program declares)" in done.stdout
  assert "ok: 0 of 1000 results wrong" in done.stdout
  assert (tmp_path / "saxpy.d").is_file()


def test_c_app_is_clean_under_sanitizers(tmp_path):
  done = make_run(tmp_path, "-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer")
  assert done.returncode == 0, done.stdout + done.stderr
  assert "ok: 0 of 1000 results wrong" in done.stdout
  assert "runtime error" not in done.stderr and "AddressSanitizer" not in done.stderr
