"""`uopc build -t llvm` end to end, on the C target's own end-to-end cases: the seeds' programs linked
into a C program give the results the seeds state (tests/test_build.py's table); plus the artifacts and a
byte-identical rebuild. The tensor programs at many shapes run in tests/test_llvm_programs.py."""
from __future__ import annotations

import pytest

from test_build import SEED_CASES, build_and_run_seed, uopc


@pytest.mark.parametrize("case", sorted(SEED_CASES))
def test_seed_programs_build_and_run(tmp_path, case):
  out = build_and_run_seed(tmp_path, case, "llvm")
  assert sorted(p.name for p in out.iterdir()) == sorted([f"{case}.ll", f"{case}.o", f"{case}.c", f"lib{case}.so", f"{case}.h"])


def test_two_builds_are_byte_identical(tmp_path):
  src = SEED_CASES["seed002_add_lidx"][0]
  (tmp_path / "p.uop").write_text(src)
  for run in ("a", "b"): assert uopc(tmp_path / "p.uop", "-t", "llvm", "-o", tmp_path / run).exit_code == 0
  for p in (tmp_path / "a").iterdir(): assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name
