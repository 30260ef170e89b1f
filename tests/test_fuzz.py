"""The coverage-guided fuzzer (tests/fuzz_uop.py, atheris) run briefly: mutations of the samples through the
parser and verifier, then through the pipeline up to Render; no input may raise anything but CompileError.
`make fuzz` runs the same targets at length."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris", reason="atheris is not installed (pip install -e '.[test]' on x86-64 Linux)")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mode,runs", [("parse", 3000), ("pipeline", 1500)])
def test_fuzzer_finds_no_crash(tmp_path, mode, runs):
  corpus, artifacts = tmp_path / "corpus", tmp_path / "crashes"
  corpus.mkdir(), artifacts.mkdir()
  for p in (ROOT / "samples").glob("*.uop"): shutil.copy(p, corpus)
  cmd = [sys.executable, str(ROOT / "tests" / "fuzz_uop.py"), *(["--pipeline"] if mode == "pipeline" else []),
         f"-runs={runs}", "-max_len=4096", "-seed=1", f"-artifact_prefix={artifacts}/", str(corpus)]
  done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
  crashes = sorted(p.name for p in artifacts.iterdir())
  assert done.returncode == 0 and not crashes, f"{crashes}\n{done.stderr[-4000:]}"
  assert f"Done {runs} runs" in done.stderr
