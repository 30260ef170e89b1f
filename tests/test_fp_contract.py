"""--fp-contract and MULACC {"fused"}: a float multiply feeding an add becomes one fused multiply-add
(rounded once) on the targets that form them (cuda: fma.rn, amd: llvm.fma), by default there (as nvcc does)
and with --fp-contract=fast or --fast-math, never with --fp-contract=off; the CPU targets form none; an
explicit MULACC {"fused"} is rounded once on every target and in the emulator; any other MULACC arg is a
located error."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from test_cuda_ptx import PTXAS, needs_ptxas, ptxas_accepts
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
  out = tmp_path / ("_".join(f"{k}{v}" for k, v in opts.items()) or "default")
  build(path, BuildOptions(target="cuda", out_dir=out, emit=("ptx",), **opts))
  return (out / "gemm.ptx").read_text()


def test_cuda_fuses_a_gemms_products_unless_the_flag_says_off(tmp_path):
  plain = _ptx(tmp_path, fp_contract=False)
  assert "fma.rn.f32" not in plain and "mul.rn.f32" in plain and "add.rn.f32" in plain
  for opts in ({}, {"fp_contract": True}, {"fast_math": True}):
    fused = _ptx(tmp_path, **opts)
    assert fused.count("fma.rn.f32") >= 4 and "mul.rn.f32" not in fused, opts


def test_the_c_target_fuses_nothing_by_default(tmp_path):
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(16, 16, 16).text())
  build(path, BuildOptions(target="c", out_dir=tmp_path / "c", emit=("source",)))
  src = (tmp_path / "c" / "gemm.c").read_text()
  assert not re.search(r"\bfmaf?\(", src)


@needs_ptxas
def test_the_fused_ptx_assembles(tmp_path):
  ptx = _ptx(tmp_path, fp_contract=True)
  for arch in ("sm_80", "sm_90"): ptxas_accepts(ptx, arch, tmp_path)


def test_the_cli_flag_reaches_the_build(tmp_path):
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(64, 64, 64).text())
  for flag, fused in ((("--fp-contract", "off"), False), (("--fp-contract", "fast"), True), ((), True)):
    out = tmp_path / (flag[-1] if flag else "default")
    done = subprocess.run([sys.executable, "-m", "uopc", "build", str(path), "-t", "cuda", "--emit", "ptx", *flag,
                           "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert ("fma.rn.f32" in (out / "gemm.ptx").read_text()) is fused


def _mul_add(n: int, dtype: str) -> str:
  """out = a * b + c over n elements of dtype."""
  params = "".join(f'  %{v} = PARAM([{n}]) {{({i}, "{v}")}} : {dtype}\n' for i, v in enumerate(("a", "b", "c", "out")))
  return f"func f {{\n{params}  %0 = MUL(%a, %b)\n  %1 = ADD(%0, %c)\n  STORE(%out, %1)\n}}\n"


_MUL_ADD = _mul_add(4, "f32")


@pytest.mark.parametrize("target, fused_by_default", [("cuda", True), ("amd", True), ("c", False), ("llvm", False)])
def test_a_multiply_feeding_an_add_is_fused_by_default_on_gpu_targets_only(tmp_path, target, fused_by_default):
  """ADD(MUL) in the emulator as each target lowers it: rounded once (2^-24) where the target fuses by default,
  twice (0) with --fp-contract=off and on the CPU targets."""
  path = tmp_path / "f.uop"
  path.write_text(_MUL_ADD)
  for contract, fused in ((None, fused_by_default), (False, False)):
    got = run_file(path, target=target, inputs=_inputs(), emulated=True, fp_contract=contract).arrays["out"]
    np.testing.assert_array_equal(got, np.full(4, 2.0 ** -24 if fused else 0.0, np.float32), err_msg=f"{target} {contract}")


def test_uopc_run_takes_the_flag(tmp_path):
  path = tmp_path / "f.uop"
  path.write_text(_MUL_ADD)
  for name, arr in _inputs().items(): np.save(tmp_path / f"{name}.npy", arr)
  ins = [a for n in "abc" for a in ("--input", f"{n}={tmp_path / f'{n}.npy'}")]
  for flag, want in ((("--fp-contract", "off"), 0.0), ((), 2.0 ** -24)):
    done = subprocess.run([sys.executable, "-m", "uopc", "run", str(path), "-t", "cuda", "--emulate", *ins, *flag,
                           "--output", f"out={tmp_path / 'out.npy'}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.full(4, want, np.float32))


_BOOL_MUL_ADD = _mul_add(8, "bool")


@pytest.mark.parametrize("target", ["cuda", "amd", "metal", "c", "llvm"])
def test_a_bool_and_feeding_an_or_is_not_a_mulacc(tmp_path, target):
  """MUL and ADD of bools are AND and OR (tinygrad's isinf(x) writes (x == inf) * True + (x == -inf) * True): no
  MULACC is formed for them; -t cuda refused the kernel ("MULACC of bool")."""
  path = tmp_path / "f.uop"
  path.write_text(_BOOL_MUL_ADD)
  a, b, c = (np.array([int(ch) for ch in f"{k:08b}"], bool) for k in (0b11001100, 0b10101010, 0b11110000))
  got = run_file(path, target=target, inputs={"a": a, "b": b, "c": c}, emulated=target in ("cuda", "amd", "metal")).arrays["out"]
  np.testing.assert_array_equal(got, (a & b) | c)
  if target == "cuda":
    build(path, BuildOptions(target="cuda", out_dir=tmp_path / "ptx", emit=("ptx",)))
    if PTXAS is not None: ptxas_accepts((tmp_path / "ptx" / "f.ptx").read_text(), "sm_80", tmp_path)
