"""PTX written around ptxas bugs. ptxas 13.0 for sm_90/sm_90a folds a chain of signed 32-bit maxima (max.s32, min.s32,
or the compare and select that make one) into the three-input VIMNMX3 and drops the negation of an operand it folds
in: max(max(-a, -b), -c) ran as max(max(-a, b), -c) on an H100, so tinygrad's integer min (-max(-x)) and a row
maximum of -|x| came out positive. A signed negation that a MAX reads is written `not` then `add 1`, which ptxas does
not take for a negation. CI checks the form and that ptxas assembles it; on a GPU the results are checked."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from test_cuda_ptx import PTXAS, needs_ptxas, ptxas_accepts
from uopc.driver import BuildOptions, build
from uopc.frontend import load_module
from uopc.launcher import entry_args
from uopc.pipeline import compile_module
from uopc.run import run_file

ROWS, N = 64, 64

PROGRAM = f"""func negmax {{
  %x = PARAM([{ROWS}, {N}]) {{(0, "x")}} : i32
  %lo = PARAM([{ROWS}, 1]) {{(1, "lo")}} : i32
  %nabs = PARAM([{ROWS}, 1]) {{(2, "nabs")}} : i32
  %m1 = CONST {{-1}} : i32
  %r = RESHAPE(%m1, [1, 1])
  %neg1 = EXPAND(%r, [{ROWS}, {N}])
  %negx = MUL(%x, %neg1)
  %mx = REDUCE(%negx) {{(MAX, (1,))}}
  %negr = EXPAND(%r, [{ROWS}, 1])
  %min = MUL(%mx, %negr)
  STORE(%lo, %min)
  %sq = MUL(%x, %x)
  %nsq = MUL(%sq, %neg1)
  %m2 = REDUCE(%nsq) {{(MAX, (1,))}}
  STORE(%nabs, %m2)
}}
"""


def _inputs() -> np.ndarray:
  return np.random.default_rng(7).integers(-1000, 1001, (ROWS, N)).astype(np.int32)


def _want(x: np.ndarray) -> dict[str, np.ndarray]:
  return {"lo": x.min(1, keepdims=True), "nabs": (-(x.astype(np.int64) ** 2)).max(1, keepdims=True).astype(np.int32)}


def _ptx(tmp_path) -> str:
  (tmp_path / "negmax.uop").write_text(PROGRAM)
  build(tmp_path / "negmax.uop", BuildOptions(target="cuda", out_dir=tmp_path / "ptx", emit=("ptx",)))
  return (tmp_path / "ptx" / "negmax.ptx").read_text()


def test_a_negation_read_by_a_signed_max_is_not_then_add(tmp_path):
  ptx = _ptx(tmp_path)
  assert ptx.count("not.b32") >= 4 and "max.s32" in ptx and "neg.s32" not in ptx, ptx
  regs = {line.split()[1].rstrip(",") for line in ptx.splitlines() if line.strip().startswith("max.s32")}
  negated = {line.split()[1].rstrip(",") for line in ptx.splitlines() if line.strip().startswith("mul.lo.s32")}
  assert not any(line.strip().startswith("max.s32") and any(r in line.split()[2:] for r in {r + "," for r in negated} | negated)
                 for line in ptx.splitlines()), "a product feeds a max.s32 directly"
  assert regs


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptxas_assembles_it(tmp_path, arch):
  ptxas_accepts(_ptx(tmp_path), arch, tmp_path)


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_the_emulated_kernels_compute_min_and_max_of_negations(tmp_path, target):
  (tmp_path / "negmax.uop").write_text(PROGRAM)
  x = _inputs()
  got = run_file(tmp_path / "negmax.uop", target=target, inputs={"x": x}, emulated=True).arrays
  for name, want in _want(x).items(): np.testing.assert_array_equal(got[name], want, err_msg=name)


@pytest.mark.gpu
def test_on_the_gpu_min_and_max_of_negations_are_right(tmp_path):
  """The H100 run that found it: every row wrong before."""
  from gpu_samples import call
  from test_cuda_gpu import Driver
  try: gpu = Driver()
  except Exception as e:  # noqa: BLE001 - no driver or no GPU here
    pytest.skip(f"no CUDA GPU: {e}")
  (tmp_path / "negmax.uop").write_text(PROGRAM)
  paths = build(tmp_path / "negmax.uop", BuildOptions(target="cuda", out_dir=tmp_path / "cuda"))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  module = load_module(str(tmp_path / "negmax.uop"))
  [entry] = compile_module(module, "cuda", "negmax")
  x = _inputs()
  _, lo, nabs = call(gpu, lib, "negmax", entry, [x, np.zeros((ROWS, 1), np.int32), np.zeros((ROWS, 1), np.int32)])
  want = _want(x)
  np.testing.assert_array_equal(lo, want["lo"])
  np.testing.assert_array_equal(nabs, want["nabs"])
