"""--fast-math keeps widened half-precision products exact (uopc.stages.fast_math): `a.matmul(b, dtype=float)`
of float16 operands, as tinygrad writes it (each product rounded to float16, then summed in float32), sums the
exact products under --fast-math, on every target (the CPU targets convert each operand once; -t cuda takes
the tensor cores), and rounds each product without it. An explicit round trip through float16 of a float32
value stays rounded either way."""
from __future__ import annotations

import numpy as np
import pytest

from uopc.driver import BuildOptions, build
from uopc.run import run_file
from test_cuda_gpu import gpu  # noqa: F401,E402 (a fixture)

M, K, N = 32, 48, 40


def _half_gemm(dt: str = "f16", m: int = M, k: int = K, n: int = N) -> str:
  """half_matmul of samples/models at M x K x N: the float16 product of every pair, widened, summed over K."""
  return f"""func half_matmul {{
  %out = PARAM([{m}, {n}]) {{(2, "out")}} : f32
  %a = PARAM([{m}, {k}]) {{(0, "a")}} : {dt}
  %0 = RESHAPE(%a, [{m}, 1, {k}])
  %b = PARAM([{k}, {n}]) {{(1, "b")}} : {dt}
  %1 = RESHAPE(%b, [1, {k}, {n}])
  %2 = PERMUTE(%1) {{(0, 2, 1)}}
  %3 = MUL(%0, %2)
  %4 = CAST(%3) : f32
  %5 = PERMUTE(%4) {{(2, 0, 1)}}
  %6 = REDUCE(%5) {{(ADD, (0,))}}
  %7 = RESHAPE(%6, [{m}, {n}])
  %8 = STORE(%out, %7)
  SINK(%8)
}}
"""


def _within_sum_bound(got: np.ndarray, products: np.ndarray) -> bool:
  want, bound = products.sum(1), np.abs(products).sum(1) * products.shape[1] * 2.0 ** -24
  return bool(np.all(np.abs(got.astype(np.float64) - want) <= bound))


def _inputs():
  rng = np.random.default_rng(11)
  return {"a": rng.standard_normal((M, K)).astype(np.float16), "b": rng.standard_normal((K, N)).astype(np.float16)}


@pytest.mark.parametrize("target,emulated", [("c", False), ("llvm", False), ("c", True), ("cuda", True), ("amd", True)])
def test_fast_math_sums_the_exact_products_and_the_default_the_rounded_ones(tmp_path, target, emulated):
  path = tmp_path / "half_matmul.uop"
  path.write_text(_half_gemm())
  x = _inputs()
  exact = x["a"].astype(np.float64)[:, :, None] * x["b"].astype(np.float64)[None]
  rounded = (x["a"][:, :, None] * x["b"][None]).astype(np.float64)  # numpy rounds each float16 product once
  assert np.any(exact != rounded)  # the inputs tell the two apart
  for fast, products in ((True, exact), (False, rounded)):
    got = run_file(path, target=target, inputs=x, emulated=emulated, fast_math=fast).arrays["out"]
    assert _within_sum_bound(got, products), (fast, np.abs(got - products.sum(1)).max())
  # the bound is tight enough to tell them apart: the rounded sums are outside the exact ones' bound somewhere
  assert not _within_sum_bound(rounded.sum(1).astype(np.float32), exact)


def test_bfloat16_products_are_exact_too(tmp_path):
  import ml_dtypes
  path = tmp_path / "half_matmul.uop"
  path.write_text(_half_gemm("bf16"))
  rng = np.random.default_rng(12)
  x = {n: rng.standard_normal(s).astype(ml_dtypes.bfloat16) for n, s in (("a", (M, K)), ("b", (K, N)))}
  exact = x["a"].astype(np.float64)[:, :, None] * x["b"].astype(np.float64)[None]
  got = run_file(path, target="c", inputs=x, fast_math=True).arrays["out"]
  assert _within_sum_bound(got, exact)


def test_the_fast_math_half_gemm_takes_the_tensor_cores_on_cuda(tmp_path):
  path = tmp_path / "half_matmul.uop"
  path.write_text(_half_gemm(m=256, k=256, n=256))
  for fast in (False, True):
    build(path, BuildOptions(target="cuda", out_dir=tmp_path / str(fast), emit=("ptx",), fast_math=fast))
    assert ("mma.sync" in (tmp_path / str(fast) / "half_matmul.ptx").read_text()) is fast


def test_an_explicit_round_trip_through_float16_stays_rounded(tmp_path):
  path = tmp_path / "round.uop"
  path.write_text("""func round_trip {
  %out = PARAM([64]) {(1, "out")} : f32
  %x = PARAM([64]) {(0, "x")} : f32
  %0 = MUL(%x, %x)
  %1 = CAST(%0) : f16
  %2 = CAST(%1) : f32
  STORE(%out, %2)
}
""")
  x = np.random.default_rng(13).standard_normal(64).astype(np.float32)
  for target, emulated in (("c", False), ("cuda", True)):
    got = run_file(path, target=target, inputs={"x": x}, emulated=emulated, fast_math=True).arrays["out"]
    np.testing.assert_array_equal(got, (x * x).astype(np.float16).astype(np.float32))


@pytest.mark.gpu
def test_the_fast_math_half_gemm_on_a_cuda_gpu(gpu, tmp_path):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  """On the tensor cores of a real GPU: the exact products' sums (the tensor cores' float32 accumulation within
  a few times the float32 sum's bound), not the rounded ones'."""
  import ctypes

  from gpu_samples import call
  from uopc.frontend import load_module
  from uopc.pipeline import compile_module
  m = k = n = 256
  path = tmp_path / "h.uop"
  path.write_text(_half_gemm(m=m, k=k, n=n))
  paths = build(path, BuildOptions(target="cuda", out_dir=tmp_path / "o", fast_math=True))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  (entry,) = compile_module(load_module(str(path)), "cuda", "h", fast_math=True)
  rng = np.random.default_rng(14)
  a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
  got = call(gpu, lib, "h", entry, [a, b, np.zeros((m, n), np.float32)])[2]
  exact = a.astype(np.float64)[:, :, None] * b.astype(np.float64)[None]
  want, bound = exact.sum(1), np.abs(exact).sum(1) * k * 2.0 ** -24
  assert np.all(np.abs(got - want) <= 4 * bound)
