"""-v prints every outside command as a shell line one can paste; the progress bar of a long build
shows on a terminal only, and never in the machine formats."""
from __future__ import annotations

import io
import re
import shlex
import subprocess
from pathlib import Path

from click.testing import CliRunner

from uopc import progress, reporter
from uopc.cli import cli
from uopc.driver import BuildOptions, build

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SAXPY = SAMPLES / "c-app" / "saxpy.uop"


class Tty(io.StringIO):
  def isatty(self): return True


def test_verbose_prints_the_compiler_line_which_runs_as_pasted(tmp_path):
  r = CliRunner(env={"CC": "cc", "CFLAGS": "-DUOPC_TEST='a b'"}).invoke(cli, ["build", str(SAXPY), "-o", str(tmp_path / "out"), "-v"])
  assert r.exit_code == 0, r.stderr
  [line] = r.stderr.splitlines()
  cd, staging, sep, *cmd = shlex.split(line)
  assert (cd, sep) == ("cd", "&&") and Path(staging).parent == tmp_path / "out" and cmd[0] == "cc" and "-DUOPC_TEST=a b" in cmd
  assert cmd[-2:] == ["saxpy.c", "-lm"] and cmd[cmd.index("-o") + 1] == "libsaxpy.so"
  cmd[cmd.index("-o") + 1] = str(tmp_path / "again.so")  # the staging folder is gone; the line works where saxpy.c is
  assert subprocess.run(cmd, cwd=tmp_path / "out", capture_output=True, text=True).returncode == 0 and (tmp_path / "again.so").is_file()
  quiet = CliRunner().invoke(cli, ["build", str(SAXPY), "-o", str(tmp_path / "out")])
  assert quiet.exit_code == 0 and quiet.stderr == ""


def test_verbose_in_the_machine_formats_is_notes(tmp_path):
  import json
  r = CliRunner().invoke(cli, ["build", str(SAXPY), "-o", str(tmp_path), "-v", "--diagnostics-format=json"])
  [record] = [json.loads(line) for line in r.stderr.splitlines()]
  assert r.exit_code == 0 and record["severity"] == "note" and record["message"].startswith("running: cd ")


def _multi_entry(tmp_path: Path, n: int) -> Path:
  f = tmp_path / "many.uop"
  f.write_text("".join(f"kernel k{i} {{\n  %b = PARAM {{(0, \"b\")}} : ptr<i32>\n  %z = CONST {{0}} : index\n"
                       f"  %i = INDEX(%b, %z)\n  %c = CONST {{{i}}} : i32\n  STORE(%i, %c)\n}}\n" for i in range(n)))
  return f


def test_a_bar_on_a_terminal_only(tmp_path, monkeypatch):
  """Six entries and the C compiler's run: steps of 6, then 7."""
  monkeypatch.setattr(progress, "DELAY_S", 0.0)
  monkeypatch.setattr(progress, "MININTERVAL_S", 0.0)  # every step redrawn, however fast the build
  source = _multi_entry(tmp_path, 6)
  for fmt, stream, shown in (("text", Tty(), True), ("text", io.StringIO(), False), ("json", Tty(), False)):
    monkeypatch.setattr("sys.stderr", stream)
    with reporter.reporting(reporter.Reporter(fmt)):
      build(source, BuildOptions(out_dir=tmp_path / fmt / str(shown)))
    drawn = stream.getvalue()
    assert bool(re.search(r"many \(-t c\): .*\| \d/[67] ", drawn)) == shown and (drawn != "") == shown, (fmt, drawn)


def test_without_a_bar_progress_calls_do_nothing():
  assert reporter.current().progress_bar is None
  progress.expect(3)
  progress.step("x")
  with reporter.current().progress("quiet") as p:
    assert p.bar is None
