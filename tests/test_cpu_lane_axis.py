"""The lanes of a CPU reduction go along the output axis its loads inside the reduction read in vectors
(uopc/stages/cpu_schedule.py `_lane_axis`): a product stored transposed (MLP-Mixer's token mixing,
x + (h @ w2).transpose(1, 2)) has its contiguous output axis along h's rows, which h moves by 384 elements in each
of the 384 reduction steps; its lanes go along w2's columns instead, and only the stores and the residual's loads,
once per output, are scattered and gathered (2 cores, AVX-512: 40.5 -> 4.2 ms, tinygrad 6.4)."""
from __future__ import annotations

import io

import numpy as np
import pytest

from uopc.frontend import parse_source
from uopc.pipeline import PrintOptions, compile_module
from uopc.run import run_file

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")


def _mix(b: int, d: int, j: int, t: int) -> str:
  import uopc
  T = tinygrad.Tensor
  return uopc.export(lambda h, w2, x: x + h.matmul(w2).transpose(1, 2), T.empty(b, d, j), T.empty(j, t), T.empty(b, t, d), name="mix")


def _opts(text: str) -> list[tuple[str, str]]:
  out = io.StringIO()
  compile_module(parse_source(text, "t.uop"), "c", "t", PrintOptions(after=frozenset({"optimize"}), out=out), vector_bytes=64)
  lines = out.getvalue().splitlines()
  return list(zip([x[8:] for x in lines if x.startswith("# axes: ")], [x[8:] for x in lines if x.startswith("# opts: ")]))


def test_a_transposed_product_takes_its_lanes_along_the_columns_of_w():
  """The output is [b, t, d] with d contiguous; the lanes (the first UPCAST, 16 floats) go on t (axis 1), which moves
  w2[j, t] by one element, not on d, which moves h[b, d, j] by 96 (lanes that gather in each reduction step)."""
  [(axes, opts)] = _opts(_mix(2, 64, 96, 48))
  assert opts.startswith("SPLIT(1,16,u)"), (axes, opts)


@pytest.mark.parametrize("target,emulated,vector_bytes", [("c", False, None), ("llvm", False, None), ("c", True, 64)],
                         ids=["c", "llvm", "c-emulated-64-byte-vectors"])
def test_the_transposed_product_matches_numpy(tmp_path, target, emulated, vector_bytes):
  rng = np.random.default_rng(9)
  h, w2, x = (rng.standard_normal(s).astype(np.float32) for s in ((2, 64, 96), (96, 48), (2, 48, 64)))
  path = tmp_path / "mix.uop"
  path.write_text(_mix(2, 64, 96, 48))
  got = run_file(path, target=target, inputs={"h": h, "w2": w2, "x": x}, emulated=emulated, vector_bytes=vector_bytes).arrays["out"]
  want = x.astype(np.float64) + (h.astype(np.float64) @ w2.astype(np.float64)).transpose(0, 2, 1)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
