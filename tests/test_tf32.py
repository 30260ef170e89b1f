"""--allow-tf32: float32 gemms on the tensor cores as tf32 (m16n8k8, inputs rounded by cvt.rna.tf32.f32),
only when asked. Checked: the heuristics take the tensor cores with the flag and not without; the
emulator's result is within tf32's error of numpy's and exactly the tf32-rounded product summed in
float64 up to float32 rounding; the PTX assembles for sm_80 and sm_90."""
from __future__ import annotations

import numpy as np
import pytest

from test_cuda_ptx import needs_ptxas, ptxas_accepts
from test_tensor_programs import gemm
from uopc.driver import BuildOptions, build
from uopc.run import run_file
from test_cuda_gpu import gpu  # noqa: F401,E402 (a fixture)


def _tf32(x: np.ndarray) -> np.ndarray:
  bits = x.astype(np.float32).view(np.uint32)
  return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def test_the_flag_puts_a_float32_gemm_on_the_tensor_cores(tmp_path):
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(64, 64, 64).text())
  for flag in (False, True):
    out = tmp_path / str(flag)
    build(path, BuildOptions(target="cuda", out_dir=out, emit=("ptx",), allow_tf32=flag))
    ptx = (out / "gemm.ptx").read_text()
    assert ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx) is flag
    assert ("cvt.rna.tf32.f32" in ptx) is flag




@pytest.mark.parametrize("m, k, n", [(64, 96, 32), (128, 128, 128)], ids=["from-global", "staged"])  # 128: cp.async tiles
def test_emulated_tf32_gemm_matches_the_rounded_inputs(tmp_path, m, k, n):
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(m, k, n).text())
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  got = run_file(path, target="cuda", inputs={"a": a, "b": b}, emulated=True, allow_tf32=True).arrays["c"]
  exact = a.astype(np.float64) @ b.astype(np.float64)
  assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 2e-3      # tf32's error, as torch's allow_tf32
  rounded = _tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64)
  np.testing.assert_allclose(got, rounded, rtol=1e-5, atol=1e-5)          # the inputs rounded, the sums in float32
  assert np.abs(got - exact).max() > 1e-4                                 # it really ran as tf32


@needs_ptxas
def test_the_tf32_ptx_assembles(tmp_path):
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(256, 256, 256).text())
  build(path, BuildOptions(target="cuda", out_dir=tmp_path / "o", emit=("ptx",), allow_tf32=True))
  for arch in ("sm_80", "sm_90"): ptxas_accepts((tmp_path / "o" / "gemm.ptx").read_text(), arch, tmp_path)


@pytest.mark.gpu
def test_tf32_gemms_on_a_cuda_gpu(gpu, tmp_path):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  """The tf32 gemm on a real GPU (from global memory and staged): within tf32's error of the exact product."""
  import ctypes

  from gpu_samples import call
  from uopc.frontend import load_module
  from uopc.pipeline import compile_module
  for m, k, n in ((64, 96, 32), (256, 256, 256)):
    path = tmp_path / f"g{m}.uop"
    path.write_text(gemm(m, k, n).text())
    paths = build(path, BuildOptions(target="cuda", out_dir=tmp_path / f"o{m}", allow_tf32=True))
    lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
    (entry,) = compile_module(load_module(str(path)), "cuda", f"g{m}", allow_tf32=True)
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    got = call(gpu, lib, f"g{m}", entry, [a, b, np.zeros((m, n), np.float32)])[2]
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 2e-3


def test_a_product_with_one_operand_staged_builds_and_matches(tmp_path):
  """GPT-2 attention, 2 heads of 64: its attention-times-V product stages only V (the probabilities are the
  kernel's own values, read from no PARAM); the other operand keeps its fragments' global loads. This was an
  internal compiler error under --allow-tf32."""
  pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed")
  import sys
  from pathlib import Path
  from tinygrad import Tensor
  import uopc
  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples" / "models"))
  from programs import causal_attention
  t, d = 64, 128
  def attention(x, w_qkv, b_qkv, w_proj, b_proj): return causal_attention(x, w_qkv, b_qkv, w_proj, b_proj, 2)
  shapes = {"x": (t, d), "w_qkv": (d, 3 * d), "b_qkv": (3 * d,), "w_proj": (d, d), "b_proj": (d,)}
  path = tmp_path / "attention.uop"
  path.write_text(uopc.export(attention, *[Tensor.empty(*s) for s in shapes.values()], name="attention"))
  build(path, BuildOptions(target="cuda", out_dir=tmp_path / "o", emit=("ptx",), allow_tf32=True))
  assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in (tmp_path / "o" / "attention.ptx").read_text()
  rng = np.random.default_rng(7)
  inputs = {n: (rng.standard_normal(s) / (np.sqrt(s[0]) if n.startswith("w") else 1)).astype(np.float32) for n, s in shapes.items()}
  got = run_file(path, target="cuda", inputs=inputs, emulated=True, allow_tf32=True).arrays["out"]
  want = attention(*[Tensor(a) for a in inputs.values()]).numpy()
  assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3
