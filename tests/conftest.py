"""pytest set-up shared by every test module.

- hypothesis keeps what it stores (its example database, its cache of the constants in our code)
  under tests/.hypothesis (git-ignored) rather than creating .hypothesis/ at the top of the repository.
- Tests write only under pytest's own temporary folders (tmp_path, tmp_path_factory): the C harness's
  builds go under the session's folder, so a run leaves nothing of its own in /tmp.
- At the end, the skipped tests are counted by reason, once: a machine without a tool (an old
  llvm-mc, no clang, no GPU) says plainly what it did not test and how to get it tested.
"""
from collections import Counter
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

import c_harness

set_hypothesis_home_dir(Path(__file__).parent / ".hypothesis")


@pytest.fixture(scope="session", autouse=True)
def _c_builds_under_pytest(tmp_path_factory):
  c_harness.BUILD_ROOT[:] = [tmp_path_factory.mktemp("c_builds")]


def _skip_reason(report) -> str:
  reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
  return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
  skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.skipped]
  if not skipped: return
  terminalreporter.section("skipped tests by reason")
  for reason, n in sorted(Counter(map(_skip_reason, skipped)).items(), key=lambda kv: (-kv[1], kv[0])):
    terminalreporter.write_line(f"{n:5d}  {reason}")
