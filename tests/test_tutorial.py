"""The README's "From zero to a running kernel" works as written: its shell blocks after the install
line run in a fresh folder, with this checkout's uopc as `uopc` on PATH, and print what it shows."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def tutorial() -> tuple[list[str], str]:
  """The section's sh blocks and the output it shows (its text block)."""
  section = README[README.index("## From zero to a running kernel"):]
  section = section[:section.index("\n## ", 1)]
  return re.findall(r"```sh\n(.*?)```", section, re.S), re.search(r"```text\n(.*?)```", section, re.S).group(1)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no cc")
def test_the_readme_tutorial_runs_as_written(tmp_path):
  blocks, shown = tutorial()
  assert "pip install uopc" in blocks[0] and len(blocks) >= 3
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "uopc").write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -m uopc "$@"\n')
  (bin_dir / "uopc").chmod(0o755)
  work = tmp_path / "work"
  work.mkdir()
  script = "set -euo pipefail\n" + "".join(blocks[1:])
  done = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True,
                        env={"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)})
  assert done.returncode == 0, done.stdout + done.stderr
  assert done.stdout == shown and done.stderr == ""
  assert {"add.c", "libadd.so", "add.h"} <= {p.name for p in (work / "build").iterdir()}
