"""The real-model programs of samples/models (GPT-2 block, ResNet basic block, LLaMA MLP, argmax,
embedding, cross-entropy, ...) at small shapes: exported with `uopc.export`, checked and built for the
CPU targets and run in the emulator of a GPU target, against tinygrad's own result on the same inputs
(float32 to 1e-5 of the output's largest magnitude, integers exactly). The checked-in `.uop` files at
real shapes are what `export_models.py` writes today."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor  # noqa: E402

import uopc  # noqa: E402
from test_tinygrad_export import assert_match  # noqa: E402
from uopc.run import run_file  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "samples" / "models"
sys.path.insert(0, str(MODELS))
from programs import programs  # noqa: E402

SMALL = programs("small")
# tinygrad's CPU backend multiplies float16 inputs in float; the graph (and uopc) rounds each product to half
TOLERANCE = {"half_matmul": 3e-3}


def tinygrad_result(p, arrays) -> np.ndarray:
  return p.fn(*[Tensor(a) for a in arrays]).numpy()


@pytest.mark.parametrize("target,emulated", [("c", False), ("llvm", False), ("cuda", True)])
@pytest.mark.parametrize("p", SMALL, ids=[p.name for p in SMALL])
def test_model_program_matches_tinygrad(p, target, emulated, tmp_path):
  arrays = p.arrays(seed=3)
  path = tmp_path / f"{p.name}.uop"
  path.write_text(uopc.export(p.fn, *p.examples(), name=p.name))
  result = run_file(path, target=target, inputs={n: a for (n, _, _), a in zip(p.inputs, arrays)}, emulated=emulated)
  assert_match(result.arrays["out"], tinygrad_result(p, arrays), TOLERANCE.get(p.name, 1e-5), f"{p.name} on {target}")


def test_checked_in_models_are_what_the_exporter_writes():
  import export_models
  for p in programs("real"):
    assert (MODELS / f"{p.name}.uop").read_text() == export_models.export_text(p), f"regenerate: python {MODELS}/export_models.py"


def test_gpt2_app_runs_the_block_from_its_library_and_matches_tinygrad(tmp_path):
  """samples/models/gpt2-app: uopc builds the block, the C program loads 7.1M weights from a file by the
  entry's metadata, calls it and compares with tinygrad's output."""
  import subprocess
  bindir = Path(sys.executable).parent
  r = subprocess.run(["make", "-C", str(MODELS / "gpt2-app"), f"BUILD={tmp_path}", f"UOPC={bindir / 'uopc'}",
                      f"PY={sys.executable}"], capture_output=True, text=True)
  assert r.returncode == 0, r.stdout + r.stderr
  assert "ok: matches tinygrad" in r.stdout and "7137024 parameters" in r.stdout


def test_every_model_builds_for_every_gpu_target_in_one_module(tmp_path):
  """uopc.export_module puts every program in one file; the GPU targets build it (ptxas checks the PTX,
  ld.lld links the AMD code object when there is one, clang checks the Metal source where it can)."""
  from test_metal import CLANGXX, metal_syntax_errors
  from uopc.driver import BuildOptions, build
  path = tmp_path / "models.uop"
  path.write_text(uopc.export_module([(p.fn, p.examples(), p.name) for p in SMALL]))
  assert path.read_text().count("\nfunc ") + path.read_text().startswith("func ") == len(SMALL)
  for target, extra in (("cuda", {}), ("amd", {"archs": ("gfx90a",)}), ("metal", {})):
    build(path, BuildOptions(target, tmp_path / target, **extra))
  if CLANGXX: assert metal_syntax_errors((tmp_path / "metal" / "models.metal").read_text()) == ""


def test_bilinear_upsampling_computes_its_source_columns(tmp_path):
  """tinygrad's interpolate(mode="linear") builds its source columns and rows as integer arithmetic on aranges
  (clamp(..) // 256) read inside one-hot reductions. That index arithmetic is computed where it is used, not
  realized into an integer buffer for its cost (uopc.stages.fusion_cost): its range is then known, the gates
  of the gathers it addresses fold (the clamp keeps every column in bounds), and the program is two kernels
  (the rows' interpolation, then the columns') and, on a CPU, a table of the columns' float weights (computed
  once instead of once per row: fusion_checks.check_repeats), none of them storing integers."""
  import io
  from uopc.driver import BuildOptions, build
  p = next(p for p in SMALL if p.name == "upsample_bilinear")
  path = tmp_path / "up.uop"
  path.write_text(uopc.export(p.fn, *p.examples(), name="up"))
  printed = io.StringIO()
  build(path, BuildOptions("c", tmp_path / "out", cpu="portable", print_after=("rangeify",), print_out=printed))
  ir = printed.getvalue()
  assert "# 3 kernel(s)" in ir and "tmp2: f32[34] intermediate" in ir, ir
  assert not any(t in ir for t in (": i32[", ": bool[", ": i64[")), ir
  assert "?*(" not in (tmp_path / "out" / "up.c").read_text()  # no gated scalar load
