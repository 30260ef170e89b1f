"""Tensor cores (the TC opt, -t cuda's mma.sync): which kernels the heuristics put on them and which
TC refuses; the lowered kernels run in the reference emulator (warps of 32 lanes, fragments laid out
as uopc/stages/tensor_cores.py says) and ptxas accepts them; on an NVIDIA GPU they run for real.

Results are compared with numpy's float64 gemm within the error of a float32 sum of K products
(the tensor cores add in their own order and rounding): |got - want| <= 2 K eps32 (|a| @ |b|)."""
from __future__ import annotations

import ctypes
import re

import ml_dtypes
import numpy as np
import pytest

from gpu_samples import call
from test_cuda_gpu import gpu  # noqa: F401 (a fixture)
from test_cuda_ptx import filecheck, needs_ptxas, ptxas_accepts
from test_group_reduce import emulated
from test_optimize import GPU, C, kernels_of, program
from test_tensor_programs import Func
from uopc.diagnostics import CompileError
from uopc.driver import BuildOptions, build
from uopc.frontend import load_module
from uopc.ops import Ops
from uopc.pipeline import compile_module
from uopc.stages.optimize import apply_opts, format_axes, heuristic_opts, parse_opts

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def gemm_relu(m: int, k: int, n: int, dtype: str) -> Func:
  """out = max(float(a) @ float(b) + bias, 0): a gemm whose epilogue reads the output's column."""
  f = Func(f"tc_{dtype}")
  a, b = f.param("a", (m, k), dtype), f.param("b", (k, n), dtype)
  bias, out = f.param("bias", (1, n)), f.param("out", (m, n), out=True)
  prod = f.matmul(f.cast(a, "f32"), f.cast(b, "f32"), m, k, n)
  f.store(out, f.op("MAX", f.op("ADD", prod, bias), f.const(0.0)))
  return f


def inputs(m: int, k: int, n: int, dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {"a": rng.standard_normal((m, k)).astype(NP[dtype]), "b": rng.standard_normal((k, n)).astype(NP[dtype]),
          "bias": rng.standard_normal((1, n)).astype(np.float32)}


def assert_gemm_relu(got: np.ndarray, x: dict[str, np.ndarray]) -> None:
  a, b = x["a"].astype(np.float64), x["b"].astype(np.float64)
  want = np.maximum(a @ b + x["bias"], 0)
  bound = 2 * a.shape[1] * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b) + np.abs(x["bias"]))
  bad = np.abs(got.astype(np.float64).reshape(want.shape) - want) > bound
  assert not bad.any(), f"{bad.sum()} of {bad.size} wrong, first at {np.argwhere(bad)[0]}"


def _kernel(f: Func, caps=GPU):
  return next(iter(kernels_of(f.text(), caps).values()))


# ---- the heuristics and the refusals -------------------------------------------------------------------------


def test_heuristics_put_half_precision_gemms_on_tensor_cores():
  opts = heuristic_opts(_kernel(gemm_relu(256, 32, 256, "f16")), GPU)
  assert str(opts[0]) == "TC(2,-1)"
  sink = apply_opts(_kernel(gemm_relu(256, 32, 256, "f16")), opts, GPU, "k")
  # 32 x 32 per warp (2 x 4 tiles of 16 x 8), one warp per workgroup (64 warp tiles: fewer than the SMs), K by 2 steps of 16
  assert format_axes(sink) == "g8 g8 R1 w32"
  assert sum(u.op is Ops.WMMA for u in sink.toposort()) == 16
  assert "TC" not in ",".join(map(str, heuristic_opts(_kernel(gemm_relu(64, 32, 64, "f32")), GPU)))
  assert "TC" not in ",".join(map(str, heuristic_opts(_kernel(gemm_relu(64, 32, 64, "f16"), C), C)))


@pytest.mark.parametrize("f, opts, caps, message", [
  (gemm_relu(64, 32, 64, "f16"), "TC(2)", C, "target c has no tensor cores"),
  (gemm_relu(64, 32, 64, "f32"), "TC(2)", GPU, "no tensor core for float32 x float32 -> float32"),
  (gemm_relu(60, 32, 64, "f16"), "TC(2)", GPU, "sizes M x N x K = 60 x 64 x 32 must be multiples of 16 x 8 x 16"),
  (gemm_relu(64, 32, 64, "f16"), "TC(0)", GPU, "one REDUCE axis (a gemm), the REDUCE axis named"),
  (gemm_relu(64, 32, 64, "f16"), "TC(2,7)", GPU, "tensor core 7 does not exist"),
  (gemm_relu(64, 32, 64, "f16"), "TC(2,1)", GPU, "tensor core 1 (m16n8k16 bfloat16->float32) does not fit"),
  (gemm_relu(64, 32, 64, "f16"), "TC(2),SPLIT(0,2,u)", GPU, "UPCAST after TC"),
  (gemm_relu(64, 32, 64, "f16"), "SPLIT(0,2,l),TC(3)", GPU, "TC must be the first opt"),
])
def test_tc_refusals_say_why(f, opts, caps, message):
  with pytest.raises(CompileError) as e:
    apply_opts(_kernel(f, caps), parse_opts(opts), caps, "k")
  assert message in e.value.diagnostics[0].message, e.value.diagnostics[0].message


@pytest.mark.parametrize("text, message", [("TC(2,0,5)", "stages must be 0"), ("TC(2,0,1,11)", "tile must be -1 (chosen by size) or 0..10"),
                                           ("TC(2,0,1,11)", "10 = 1 x 32 (8 x 1 warps, 2 warpgroups)"),
                                           ("TC(2,0,1,1,1)", "expected TC(axis[, tc[, stages[, tile]]])")])
def test_tc_arguments_parse(text, message):
  with pytest.raises(CompileError, match=re.escape(message)):
    parse_opts(text)


# ---- in the emulator, and through ptxas ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("opts", [None, "TC(2)", "TC(2),SPLIT(0,2,l),PADTO(1,8)"], ids=["heuristics", "tc-only", "tc-local-padto"])
@pytest.mark.parametrize("m, k, n", [(64, 48, 96), (32, 32, 40)], ids=["warp-tile-2x4", "warp-tile-1x1"])
def test_emulated_tensor_core_gemms_match_numpy(tmp_path, monkeypatch, dtype, opts, m, k, n):
  x = inputs(m, k, n, dtype)
  got = emulated(tmp_path, monkeypatch, gemm_relu(m, k, n, dtype), x, opts)["out"]
  assert_gemm_relu(got, x)


def _tc_program() -> str: return program([gemm_relu(64, 32, 64, "f16"), gemm_relu(32, 64, 48, "bf16")])


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_tensor_core_kernels(tmp_path, arch):
  (tmp_path / "tc.uop").write_text(_tc_program())
  build(tmp_path / "tc.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", emit=("ptx",)))
  ptx = (tmp_path / "out" / "tc.ptx").read_text()
  filecheck(ptx, """
    CHECK: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}}
    CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
    """, tmp_path)
  ptxas_accepts(ptx, arch, tmp_path)


# ---- on an NVIDIA GPU (skips without one) ----------------------------------------------------------------------


@pytest.mark.gpu
def test_tensor_core_gemms_on_a_cuda_gpu(gpu, tmp_path):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  (tmp_path / "tc.uop").write_text(_tc_program())
  paths = build(tmp_path / "tc.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out"))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  entries = {e.name: e for e in compile_module(load_module(str(tmp_path / "tc.uop")), "cuda", "tc")}
  for (m, k, n), dtype in (((64, 32, 64), "f16"), ((32, 64, 48), "bf16")):
    x = inputs(m, k, n, dtype, seed=1)
    got = call(gpu, lib, "tc", entries[f"tc_{dtype}"], [x["a"], x["b"], x["bias"], np.zeros((m, n), np.float32)])[3]
    assert_gemm_relu(got, x)
