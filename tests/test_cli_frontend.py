"""`uopc check`, `uopc fmt` and `uopc show` on good and bad input: located errors, exit codes, no tracebacks."""
from pathlib import Path

from click.testing import CliRunner

from uopc.cli import cli

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def run(*args):
  r = CliRunner().invoke(cli, list(args))
  return r.exit_code, r.output


def test_check_reports_syntax_errors_with_caret(tmp_path):
  f = tmp_path / "bad.uop"
  f.write_text("%a = CONST {1}\n%b = ADD(%a,, %a)\n")
  code, out = run("check", str(f))
  assert code == 1 and "Traceback" not in out
  assert f"{f}:2:13: error: syntax error: unexpected ','" in out
  assert "%b = ADD(%a,, %a)\n            ^" in out


def test_check_reports_every_name_error(tmp_path):
  f = tmp_path / "names.uop"
  f.write_text("%a = ADD(%x, %x)\n%b = FROB\n")
  code, out = run("check", str(f))
  assert code == 1 and out.count("error:") == 3 and "3 errors generated." in out
  assert f"{f}:1:10: error: unknown value '%x'" in out and f"{f}:2:6: error: unknown op 'FROB'" in out


def test_check_missing_file():
  code, out = run("check", "no/such/file.uop")
  assert code == 1 and "uopc: error: cannot read 'no/such/file.uop': No such file or directory" in out


def test_fmt_check_and_in_place(tmp_path):
  assert run("fmt", "--check", str(SAMPLES / "gemm.uop"))[0] == 0
  f = tmp_path / "k.uop"
  f.write_text("%b = PARAM {(0, 'b')} : ptr<i32>   # out\nSTORE(INDEX_SLOT, 7)\n".replace("INDEX_SLOT", "%b, 0"))
  code, out = run("fmt", "--check", str(f))
  assert code == 1 and "not in canonical form" in out
  assert run("fmt", "-i", str(f))[0] == 0
  assert run("fmt", "--check", str(f))[0] == 0
  assert f.read_text().startswith('kernel k {\n  %b = PARAM {(0, "b")} : ptr<i32>\n')


def test_fmt_prints_the_canonical_text():
  code, out = run("fmt", str(SAMPLES / "seed002_add1_named.uop"))
  assert code == 0 and out == (SAMPLES / "seed002_add1_named.uop").read_text()


def test_show_lists_derived_properties():
  code, out = run("show", str(SAMPLES / "gemm.uop"))
  assert code == 0
  line = next(l for l in out.splitlines() if l.strip().startswith("%prod = MUL"))
  assert "shape=(4, 3, 2)" in line and ": f32" in line and "min_max=(-inf, inf)" in line and "addrspace=" in line
  code, out = run("show", str(SAMPLES / "seed002_add2.uop"))
  assert "SPECIAL(%" in out and "min_max=(0, 1)" in out


def test_version_lists_uopc_and_the_outside_tools(tmp_path):
  """`uopc --version` says uopc's version, the LLVM it compiles with and each outside tool a build runs,
  or where to get it when it is missing (here: a C compiler that is not there)."""
  import os
  import subprocess
  import sys
  env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
  done = subprocess.run([sys.executable, "-m", "uopc", "--version"], capture_output=True, text=True, env=env)
  assert done.returncode == 0, done.stderr
  from uopc import __version__
  assert done.stdout.startswith(f"uopc {__version__} (Python ") and "through llvmlite" in done.stdout
  assert "C compiler ($CC): " in done.stdout and "cannot run" in done.stdout
  assert "ptxas (-t cuda): " in done.stdout and "ld.lld >= 16 (-t amd): " in done.stdout
