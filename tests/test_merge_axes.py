"""Adjacent reduce loops that walk memory as one merge into one loop (uopc.stages.merge_axes, Optimize's first
step): which pairs merge, which do not, and that a merged kernel computes bit for bit what the unmerged one
computes (both run by the kernel interpreter of test_rangeify on the same random inputs)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import uopc
from test_gpu_rows import optimized_text
from test_rangeify import expand, inputs_for, param, permute, reduce, run_kernels, sink, store
from uopc.ops import AxisType, Ops
from uopc.stages.merge_axes import merge_reduce_axes
from uopc.stages.optimize import accumulator_first, axis_size, axis_type, is_axis, kernel_axes
from uopc.stages.rangeify import rangeify
from uopc.run import run_file


def _reduce_sizes(k) -> list[int]:
  return [axis_size(r) for r in kernel_axes(k) if is_axis(r) and axis_type(r) is AxisType.REDUCE]


def merged(prog_sink, cpu: bool = True):
  """(the kernels, the kernels merged) of a program, after checking that both compute the same bits."""
  prog = rangeify(prog_sink, cpu=cpu)
  kernels = tuple(accumulator_first(k) for k in prog.kernels)
  after = dataclasses.replace(prog, kernels=tuple(merge_reduce_axes(k) for k in kernels))
  arrays = inputs_for(prog_sink, np.random.default_rng(0))
  want = run_kernels(prog, {k: v.copy() for k, v in arrays.items()})
  got = run_kernels(after, {k: v.copy() for k, v in arrays.items()})
  for name in want: np.testing.assert_array_equal(got[name], want[name])
  return kernels, after.kernels


@pytest.mark.parametrize("cpu", [True, False])
def test_per_channel_statistics_reduce_each_image_in_one_loop(cpu):
  """x[n, c, h, w] summed over (n, h, w) per channel: the rows and columns of an image are one run of
  memory (h's coefficient is w's size), the images are not (the channels lie between them)."""
  x, out = param(0, "x", (4, 3, 6, 8)), param(1, "out", (1, 3, 1, 1))
  before, after = merged(sink(store(out, reduce(x, Ops.ADD, (0, 2, 3)))), cpu)
  assert [_reduce_sizes(k) for k in before] == [[4, 6, 8]]
  assert [_reduce_sizes(k) for k in after] == [[4, 48]]


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_three_adjacent_axes_become_one(op):
  x, out = param(0, "x", (2, 3, 4, 5)), param(1, "out", (2, 1, 1, 1))
  _, after = merged(sink(store(out, reduce(x, op, (1, 2, 3)))))
  assert [_reduce_sizes(k) for k in after] == [[60]]


def test_a_transposed_walk_is_not_merged():
  """The sum of x^T over both axes: the outer loop moves by 1, the inner by a row (not row-major)."""
  x, out = param(0, "x", (6, 8)), param(1, "out", (1, 1))
  before, after = merged(sink(store(out, reduce(permute(x, (1, 0)), Ops.ADD, (0, 1)))))
  assert [_reduce_sizes(k) for k in after] == [_reduce_sizes(k) for k in before] == [[8, 6]]


def test_an_axis_read_on_its_own_is_not_merged():
  """sum over (h, w) of x[h, w] * g[w]: g's index is the inner loop alone, which one merged loop would not give."""
  x, g, out = param(0, "x", (6, 8)), param(1, "g", (1, 8)), param(2, "out", (1, 1))
  prod = x.alu(Ops.MUL, expand(g, (6, 8)))
  before, after = merged(sink(store(out, reduce(prod, Ops.ADD, (0, 1)))))
  assert [_reduce_sizes(k) for k in after] == [_reduce_sizes(k) for k in before] == [[6, 8]]


def test_output_loops_keep_their_shape():
  """Only REDUCE loops merge: an elementwise kernel's loops, row-major too, stay as they are."""
  x, out = param(0, "x", (4, 6, 8)), param(1, "out", (4, 6, 8))
  before, after = merged(sink(store(out, x.alu(Ops.ADD, x))))
  assert after == before


def test_an_instance_norm_is_one_kernel_of_rows_on_gpus(tmp_path):
  """Statistics over 16 x 16 beside 16 x 16 outputs: Rangeify sees the reduction loops as Optimize will (merged,
  a row of 256) and keeps them fused; on a GPU the output loops beside them merge too, and a workgroup row
  shares all three (as a layernorm's). CPUs keep their output loops, and the merged row of 256 takes 32 partials per
  reduction (2 cores, 32x64x16x16: 0.46 -> 0.075 ms against 8 rows gathered lane by lane)."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  def norm(x): return (x - x.mean((2, 3), keepdim=True)) * (x.var((2, 3), keepdim=True) + 1e-5).rsqrt()
  text = uopc.export(norm, tinygrad.Tensor.empty(2, 8, 16, 16), name="inorm")
  [(axes, _)] = optimized_text(text)
  assert axes == "g16 l64 u4 G64 r4 G64 r4"  # the batch and channel loops merged too
  [(cpu_axes, _)] = optimized_text(text, "c")  # one kernel too: its reductions merged, its two 16-wide output loops not
  assert cpu_axes.count("G32") == 2 and cpu_axes.count("R4 r2 G32") == 2, cpu_axes  # each 256 as 4 x 2 x 32 lanes
  (tmp_path / "inorm.uop").write_text(text)
  x = np.random.default_rng(3).standard_normal((2, 8, 16, 16)).astype(np.float32)
  got = run_file(tmp_path / "inorm.uop", target="cuda", inputs={"x": x}, emulated=True).arrays["out"]
  x64 = x.astype(np.float64)
  want = (x64 - x64.mean((2, 3), keepdims=True)) / np.sqrt(x64.var((2, 3), keepdims=True, ddof=1) + 1e-5)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_positions_of_a_pointwise_convolution_merge_into_a_staged_gemm_on_gpus(tmp_path):
  """1x1 convolution 1x256x28x28 -> 512: its outputs (c, h, w) read x at (k, h * 28 + w): on a GPU h and w become
  one axis of 784 around the reduction, which the staged gemm takes (its tiles fit no 28-wide axis); a padded
  3x3 convolution's gates read h on its own, so its positions stay two axes. In the emulator: numpy's result."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  text = uopc.export(lambda x, w: x.conv2d(w), tinygrad.Tensor.empty(1, 256, 28, 28), tinygrad.Tensor.empty(512, 256, 1, 1), name="pw")
  [(axes, opts)] = optimized_text(text)
  assert "STAGE" in opts and "g28" not in axes, (axes, opts)
  conv = uopc.export(lambda x, w: x.conv2d(w, padding=1), tinygrad.Tensor.empty(1, 8, 28, 28), tinygrad.Tensor.empty(8, 8, 3, 3), name="c3")
  [(conv_axes, _)] = optimized_text(conv)
  assert "784" not in conv_axes, conv_axes
  small = uopc.export(lambda x, w: x.conv2d(w), tinygrad.Tensor.empty(1, 16, 12, 12), tinygrad.Tensor.empty(32, 16, 1, 1), name="pw")
  (tmp_path / "pw.uop").write_text(small)
  rng = np.random.default_rng(4)
  x, w = rng.standard_normal((1, 16, 12, 12)).astype(np.float32), rng.standard_normal((32, 16, 1, 1)).astype(np.float32)
  got = run_file(tmp_path / "pw.uop", target="cuda", inputs={"x": x, "w": w}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, np.einsum("ok,khw->ohw", w[:, :, 0, 0], x[0])[None], rtol=1e-5, atol=1e-5)
