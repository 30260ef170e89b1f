"""Tensor programs end to end through `-t llvm` against numpy: every program and shape of
tests/test_tensor_programs.py with Optimize's CPU heuristics (4-lane vectors, 8-lane register tiles), and
programs big enough for the heuristics to add a THREAD axis, whose worker threads must give numpy's
result at every worker count."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from test_tensor_programs import CASES, NP, gemm, np_softmax, random_inputs, softmax
from uopc.driver import BuildOptions, build


def build_llvm(f, tmp_path) -> ctypes.CDLL:
  src = tmp_path / f"{f.name}.uop"
  src.write_text(f.text())
  build(src, BuildOptions("llvm", tmp_path))
  return ctypes.CDLL(str(tmp_path / f"lib{f.name}.so"))


def call(lib, f, inputs: list[np.ndarray], suffix: str = "", extra=()) -> np.ndarray:
  _, shape, dt, _ = next(a for a in f.args if a[3])
  out = np.zeros(shape, NP[dt])
  it = iter(inputs)
  bufs = [out if a[3] else np.ascontiguousarray(next(it)) for a in f.args]
  assert getattr(lib, f"{f.name}_{f.name}{suffix}")(*[b.ctypes.data_as(ctypes.c_void_p) for b in bufs], *extra) == 0
  return out


def expected(formula, inputs: list[np.ndarray]) -> np.ndarray:
  return formula(*[i.astype(np.float64) if i.dtype == np.float32 else i for i in inputs])


def check(got: np.ndarray, want: np.ndarray) -> None:
  if got.dtype == np.int32: np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("builder,shape,formula", CASES, ids=[f"{c[0].__name__}{list(c[1])}" for c in CASES])
def test_matches_numpy(builder, shape, formula, tmp_path):
  f = builder(*shape)
  inputs = random_inputs(f, np.random.default_rng(sum(shape)))
  check(call(build_llvm(f, tmp_path), f, inputs), expected(formula, inputs))


BIG = [(gemm, (96, 64, 80), lambda a, b: a @ b), (softmax, (512, 260), np_softmax)]


@pytest.mark.parametrize("builder,shape,formula", BIG, ids=[f"{c[0].__name__}{list(c[1])}" for c in BIG])
def test_threaded_vector_programs_match_numpy_at_every_worker_count(builder, shape, formula, tmp_path):
  f = builder(*shape)
  lib = build_llvm(f, tmp_path)
  assert "int num_threads" in (tmp_path / f"{f.name}.h").read_text(), "the heuristics gave no THREAD axis"
  assert "x float>" in (tmp_path / f"{f.name}.ll").read_text(), "the heuristics gave no vectors"
  inputs = random_inputs(f, np.random.default_rng(sum(shape)))
  want = expected(formula, inputs)
  for n in (1, 3, 16):
    check(call(lib, f, inputs, "_with_threads", (n,)), want)


def test_half_and_bfloat16_programs_get_vector_casts(tmp_path):
  """The case that once stopped the llvm target at 1 lane: float16/bfloat16 values cast inside UPCAST lanes."""
  from ml_dtypes import bfloat16
  from test_tensor_programs import Func
  f = Func("mixed")
  x, y, out = f.param("x", (64, 40), "f16"), f.param("y", (64, 40), "bf16"), f.param("out", (64, 40), "f16", out=True)
  f.store(out, f.cast(f.op("MUL", f.cast(x, "f32"), f.cast(y, "f32")), "f16"))
  lib = build_llvm(f, tmp_path)
  ir = (tmp_path / "mixed.ll").read_text()
  assert "x half>" in ir and "x i16>" in ir, "the heuristics gave no float16/bfloat16 vectors"
  rng = np.random.default_rng(7)
  xs, ys = rng.standard_normal((64, 40)).astype(np.float16), rng.standard_normal((64, 40)).astype(bfloat16)
  got = np.zeros((64, 40), np.float16)
  assert lib.mixed_mixed(*[a.ctypes.data_as(ctypes.c_void_p) for a in (xs, ys, got)]) == 0
  np.testing.assert_array_equal(got, (xs.astype(np.float32) * ys.astype(np.float32)).astype(np.float16))
