"""The README and every command's --help stand on their own: they explain the accuracy bar and the
options for build systems in place, and point at no file a user does not have (the project's
private notes, its seeds, folders outside the repository)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from uopc.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PRIVATE = re.compile(r"SPEC-NOTES|\.\./shared|\bseeds? 0\d\d\b")
COMMANDS = sorted(cli.commands)


def help_text(*command: str) -> str:
  r = CliRunner().invoke(cli, [*command, "--help"], terminal_width=100)
  assert r.exit_code == 0, r.output
  return r.output


@pytest.mark.parametrize("command", [(), *((c,) for c in COMMANDS)], ids=lambda c: " ".join(c) or "uopc")
def test_help_points_at_no_private_file(command):
  assert not PRIVATE.search(help_text(*command))


def test_readme_points_at_no_private_file_and_its_paths_exist():
  assert not PRIVATE.search(README), PRIVATE.search(README)
  links = re.findall(r"\]\(([^)#:]+)\)", README)
  paths = re.findall(r"`((?:uopc|tests|samples|grammar)/[A-Za-z0-9_./-]+)`", README)
  assert links and paths
  missing = [p for p in links + paths if not (ROOT / p).exists()]
  assert not missing, f"the README names files that do not exist: {missing}"


def test_the_accuracy_bar_and_the_build_system_options_are_explained_in_place():
  build_help = help_text("build")
  for words in ("2 ULP", "rounded once", "--fast-math", "-v"):
    assert words in build_help and words in README, words
  for words in ("--diagnostics-format", "sarif", "NO_COLOR"):
    assert words in help_text() and words in README, words
  assert "pip install 'uopc[amd]'" in README and "--verbose" in build_help and "--verbose" in help_text("run")
