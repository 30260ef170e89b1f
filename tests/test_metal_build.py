"""`uopc build -t metal` end to end: every sample gives a .metal that passes the clang check against
the test-only Metal header, a launcher that passes the Objective-C check, and a C99 header."""
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from test_metal import metal_syntax_errors, needs_clang
from test_metal_launcher import _objc_errors
from uopc.cli import cli

SAMPLES = sorted((Path(__file__).parent.parent / "samples").glob("*.uop"))


@needs_clang
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_sample_builds_for_metal(sample, tmp_path):
  r = CliRunner().invoke(cli, ["build", str(sample), "-t", "metal", "-o", str(tmp_path)])
  assert r.exit_code == 0, r.output
  assert "no Xcode tools" in r.stderr
  name = sample.stem
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{name}.metal", f"{name}_launcher.m", f"{name}.h"])
  assert metal_syntax_errors((tmp_path / f"{name}.metal").read_text()) == ""
  assert _objc_errors(tmp_path / f"{name}_launcher.m") == ""
  subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c", str(tmp_path / f"{name}.h")], check=True)


def test_float64_is_refused_at_its_line(tmp_path):
  src = tmp_path / "f64.uop"
  src.write_text("""kernel f64 {
  %out = PARAM {(0, "out")} : ptr<f64>
  %i = INDEX(%out, 0)
  %c = CONST {1.5} : f64
  STORE(%i, %c)
}
""")
  r = CliRunner().invoke(cli, ["build", str(src), "-t", "metal", "-o", str(tmp_path / "out")])
  assert r.exit_code == 1 and r.stderr.startswith(f"{src}:"), r.stderr
  assert "float64" in r.stderr and not (tmp_path / "out").exists()
