"""The target's name is resolved once, at the edge: `uopc build` looks `-t` up one time and the driver,
the pipeline and every stage take that Target object (its capabilities) from there."""
from __future__ import annotations

from pathlib import Path

import pytest

import uopc.targets as targets
from uopc.driver import BuildOptions, build, check_target
from uopc.pipeline import pipeline
from uopc.stages.optimize import target_caps

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


@pytest.fixture
def lookups(monkeypatch):
  seen: list[str] = []
  real = targets.get_target
  def counting(name: str):
    seen.append(name)
    return real(name)
  monkeypatch.setattr(targets, "get_target", counting)
  import uopc.driver
  monkeypatch.setattr(uopc.driver, "get_target", counting)
  return seen


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_a_build_looks_its_target_up_once(tmp_path, lookups, target):
  build(SAMPLES / "mlp.uop", BuildOptions(target=target, out_dir=tmp_path, emit=("header",)))
  assert lookups == [target]


def test_a_resolved_target_is_taken_as_it_is(tmp_path, lookups):
  t = check_target("cuda")
  lookups.clear()
  build(SAMPLES / "gemm.uop", BuildOptions(target=t, out_dir=tmp_path, emit=("header",)))
  assert [s.name for s in pipeline(t)][-1] == "render" and target_caps(t).gpu
  assert lookups == []
