"""--diagnostics-format: text (coloured on a terminal only, never with NO_COLOR), JSON lines and SARIF
2.1.0 validated against the official schema (tests/data/sarif-schema-2.1.0.json, as published by the
OASIS SARIF TC in oasis-tcs/sarif-spec, sarif-2.1/schema/), on every command, exit codes unchanged."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from uopc.cli import cli
from uopc.diagnostics import Diagnostic, Loc, error
from uopc.diagnostics_format import json_line, sarif_log, text, use_color

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates the SARIF (pip install -e '.[test]')")
SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())
SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SAXPY = SAMPLES / "c-app" / "saxpy.uop"
ANSI = re.compile(r"\033\[[0-9;]*m")


def uopc(*args, env=None):
  r = CliRunner(env=env).invoke(cli, [*map(str, args)])
  return r.exit_code, r.stdout, r.stderr


def valid_sarif(stderr: str) -> dict:
  log = json.loads(stderr)
  jsonschema.Draft4Validator(SCHEMA).validate(log)
  return log


def bad_file(tmp_path: Path) -> Path:
  f = tmp_path / "names.uop"
  f.write_text("%a = ADD(%x, %x)\n%b = FROB\n")
  return f


def test_the_vendored_schema_is_sarif_2_1_0_and_rejects_a_bad_log():
  assert SCHEMA["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
  with pytest.raises(jsonschema.ValidationError):
    jsonschema.Draft4Validator(SCHEMA).validate({"version": "2.1.0", "runs": [{"results": [{"level": "fatal"}]}]})


def test_json_lines_have_file_line_column_severity_message(tmp_path):
  f = bad_file(tmp_path)
  code, out, err = uopc("check", "--diagnostics-format=json", f)
  assert code == 1 and out == ""
  records = [json.loads(line) for line in err.splitlines()]
  assert [list(r) for r in records] == [["file", "line", "column", "severity", "message", "notes"]] * 3
  assert [(r["file"], r["line"], r["column"], r["severity"]) for r in records] == [
    (str(f), 1, 10, "error"), (str(f), 1, 14, "error"), (str(f), 2, 6, "error")]
  assert records[2]["message"] == "unknown op 'FROB'"


def test_sarif_validates_and_locates_each_error(tmp_path, monkeypatch):
  f = bad_file(tmp_path)
  monkeypatch.chdir(tmp_path)
  code, _, err = uopc("check", "--diagnostics-format", "sarif", "names.uop")
  assert code == 1
  run = valid_sarif(err)["runs"][0]
  assert run["invocations"][0]["exitCode"] == 1 and run["invocations"][0]["executionSuccessful"] is False
  where = [(r["locations"][0]["physicalLocation"]["artifactLocation"], r["locations"][0]["physicalLocation"]["region"])
           for r in run["results"]]
  assert where[2] == ({"uri": "names.uop", "uriBaseId": "%SRCROOT%"}, {"startLine": 2, "startColumn": 6})
  assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
  assert [r["level"] for r in run["results"]] == ["error"] * 3 and f.exists()


def test_sarif_of_a_clean_run_and_of_unlocated_errors(tmp_path):
  code, _, err = uopc("check", "--diagnostics-format=sarif", SAMPLES / "gemm.uop")
  run = valid_sarif(err)["runs"][0]
  assert code == 0 and run["results"] == [] and run["invocations"][0]["executionSuccessful"] is True
  code, _, err = uopc("check", "--diagnostics-format=sarif", tmp_path / "missing.uop")
  run = valid_sarif(err)["runs"][0]
  assert code == 1 and run["results"] == []  # a result needs a location: code scanning refuses one without
  told = run["invocations"][0]["toolExecutionNotifications"]
  assert told[0]["level"] == "error" and "cannot read" in told[0]["message"]["text"]


def test_a_file_outside_the_working_directory_is_a_file_uri(tmp_path):
  log = sarif_log([error(Loc("/elsewhere/a b.uop", 3, 4), "bad")], [], 1, "0", cwd=tmp_path)
  jsonschema.Draft4Validator(SCHEMA).validate(log)
  assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "file:///elsewhere/a%20b.uop"}


def test_an_internal_compiler_error_keeps_exit_2_in_every_format(tmp_path):
  picky = tmp_path / "picky-cc"
  picky.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *.uopc-probe.c) exec cc "$@";; esac; done\n'
                   'echo "picky: I refuse this code" >&2; exit 1\n')
  picky.chmod(0o755)
  for fmt in ("text", "json", "sarif"):
    code, _, err = uopc("build", SAXPY, "-o", tmp_path / fmt, f"--diagnostics-format={fmt}", env={"CC": str(picky)})
    assert code == 2 and "internal compiler error" in err and "picky: I refuse this code" in err, fmt
  told = valid_sarif(err)["runs"][0]["invocations"][0]
  assert told["exitCode"] == 2 and told["toolExecutionNotifications"][0]["level"] == "error"


def test_usage_errors_and_tool_warnings_keep_stderr_machine_readable(tmp_path):
  code, _, err = uopc("build", "--diagnostics-format=json", SAXPY, "--no-such-option")
  assert code == 1 and json.loads(err)["message"] == "No such option '--no-such-option'."
  code, _, err = uopc("build", SAXPY, "--no-such-option", env={"UOPC_DIAGNOSTICS_FORMAT": "sarif"})
  assert code == 1 and "No such option" in valid_sarif(err)["runs"][0]["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]
  chatty = tmp_path / "chatty-cc"
  chatty.write_text('#!/bin/sh\necho "chatty: a warning" >&2\nexec cc "$@"\n')
  chatty.chmod(0o755)
  code, _, err = uopc("build", SAXPY, "-o", tmp_path / "out", "--diagnostics-format=json", env={"CC": str(chatty)})
  assert code == 0 and json.loads(err) == {"file": None, "line": None, "column": None, "severity": "note",
                                           "message": "chatty-cc said: chatty: a warning", "notes": []}
  code, _, err = uopc("build", SAXPY, "-o", tmp_path / "out", env={"CC": str(chatty)})
  assert code == 0 and err == "chatty: a warning\n"


def test_fmt_check_points_at_the_first_line_that_is_not_canonical(tmp_path):
  f = tmp_path / "k.uop"
  f.write_text('kernel k {\n  %b = PARAM {(0, "b")} : ptr<i32>\n  %z = CONST {0} :  index\n}\n')
  code, _, err = uopc("fmt", "--check", "--diagnostics-format=json", f)
  record = json.loads(err)
  assert code == 1 and (record["line"], record["message"]) == (3, "not in canonical form") and "uopc fmt -i" in record["notes"][0]


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path):
  class Tty(io.StringIO):
    def isatty(self): return True
  assert use_color(Tty(), {}) and not use_color(io.StringIO(), {})
  assert not use_color(Tty(), {"NO_COLOR": "1"}) and use_color(Tty(), {"NO_COLOR": ""}) and not use_color(Tty(), {"TERM": "dumb"})
  d = Diagnostic(Loc("a.uop", 1, 3), "bad thing", "warning", ("try this",))
  coloured = text(d, "%a = X\n", color=True)
  assert "\033[1;35mwarning:\033[0m" in coloured and ANSI.sub("", coloured) == text(d, "%a = X\n", color=False) == d.format("%a = X\n")
  code, _, err = uopc("check", bad_file(tmp_path))  # CliRunner's stderr is no terminal
  assert code == 1 and "\033[" not in err and "3 errors generated." in err


def test_json_line_of_an_unlocated_note():
  assert json.loads(json_line(Diagnostic(None, "m", "note", ("n",)))) == {
    "file": None, "line": None, "column": None, "severity": "note", "message": "m", "notes": ["n"]}
