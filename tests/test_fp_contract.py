"""--fp-contract=fast and MULACC {"fused"}: a float multiply feeding an add becomes one fused multiply-add
(rounded once) on the targets that form them (cuda: fma.rn, amd: llvm.fma), and only with the flag (or
--fast-math); an explicit MULACC {"fused"} is rounded once on every target and in the emulator; any
other MULACC arg is a located error."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from test_cuda_ptx import needs_ptxas, ptxas_accepts
from test_tensor_programs import gemm
from uopc.driver import BuildOptions, build
from uopc.run import run_file

# a * b = 1 + 2^-11 + 2^-24 exactly: float32 rounds it to 1 + 2^-11 (a tie, to even), so a * b + c is 0
# rounded twice and 2^-24 rounded once
A, B, C = np.float32(1 + 2 ** -12), np.float32(1 + 2 ** -12), np.float32(-(1 + 2 ** -11))


def _program(arg: str) -> str:
  return f"""func f {{
  %a = PARAM([4]) {{(0, "a")}} : f32
  %b = PARAM([4]) {{(1, "b")}} : f32
  %c = PARAM([4]) {{(2, "c")}} : f32
  %out = PARAM([4]) {{(3, "out")}} : f32
  %0 = MULACC(%a, %b, %c){arg}
  STORE(%out, %0)
}}
"""


def _inputs() -> dict[str, np.ndarray]:
  return {"a": np.full(4, A), "b": np.full(4, B), "c": np.full(4, C)}


@pytest.mark.parametrize("emulated", [False, True], ids=["c", "emulator"])
def test_a_fused_mulacc_rounds_once_and_a_plain_one_twice(tmp_path, emulated):
  for arg, want in ((' {"fused"}', 2.0 ** -24), ("", 0.0)):
    path = tmp_path / "f.uop"
    path.write_text(_program(arg))
    got = run_file(path, target="c", inputs=_inputs(), emulated=emulated).arrays["out"]
    np.testing.assert_array_equal(got, np.full(4, want, np.float32))


def test_another_mulacc_arg_is_a_located_error(tmp_path):
  path = tmp_path / "f.uop"
  path.write_text(_program(' {"fast"}'))
  done = subprocess.run([sys.executable, "-m", "uopc", "check", str(path)], capture_output=True, text=True)
  assert done.returncode == 1
  assert f"{path}:6:3: error:" in done.stderr and 'MULACC arg must be none' in done.stderr and "^" in done.stderr


def _ptx(tmp_path, **opts) -> str:
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(64, 64, 64).text())
  out = tmp_path / ("fused" if opts else "plain")
  build(path, BuildOptions(target="cuda", out_dir=out, emit=("ptx",), **opts))
  return (out / "gemm.ptx").read_text()


def test_only_the_flag_or_fast_math_fuses_a_gemms_products(tmp_path):
  assert "fma.rn.f32" not in _ptx(tmp_path)
  fused = _ptx(tmp_path, fp_contract=True)
  assert fused.count("fma.rn.f32") >= 4 and "mul.rn.f32" not in fused


@needs_ptxas
def test_the_fused_ptx_assembles(tmp_path):
  ptx = _ptx(tmp_path, fp_contract=True)
  for arch in ("sm_80", "sm_90"): ptxas_accepts(ptx, arch, tmp_path)


def test_the_cli_flag_reaches_the_build(tmp_path):
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(64, 64, 64).text())
  for flag, fused in (("off", False), ("fast", True)):
    done = subprocess.run([sys.executable, "-m", "uopc", "build", str(path), "-t", "cuda", "--emit", "ptx", "--fp-contract", flag,
                           "-o", str(tmp_path / flag)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert ("fma.rn.f32" in (tmp_path / flag / "gemm.ptx").read_text()) is fused
