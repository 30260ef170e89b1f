"""Elementwise kernels on GPUs: a transposing one (uopc.stages.gpu_transpose, an NCHW -> NHWC permute) gets
its threads along the input's rows (coalesced loads) and 8 lanes of the output's channels a thread (32-byte
stores); one that reads along its output's contiguous axis keeps the elementwise schedule, whose workgroup
spans the next axes where that axis is short (28-wide images). Each schedule is pinned as
`--print-after optimize` prints it and run in the emulator of every GPU target against numpy."""
from __future__ import annotations

import io

import numpy as np
import pytest

import uopc
from uopc.frontend import parse_source
from uopc.pipeline import PrintOptions, compile_module
from uopc.run import run_file

from test_gpu_rows import emulated, optimized
from test_tensor_programs import Func


def nhwc(n: int, c: int, h: int, w: int) -> Func:
  f = Func("nhwc")
  x, out = f.param("x", (n, c, h, w)), f.param("out", (n, h, w, c), out=True)
  f.store(out, f.op("MUL", f.permute(x, (0, 2, 3, 1)), f.const(0.5)))
  return f


def test_an_nhwc_permute_reads_along_rows_and_stores_32_bytes_a_thread():
  # the rows and columns, read as one axis by both sides, are merged (uopc.stages.merge_axes): 168 threads along 6 x 56
  assert optimized(nhwc(2, 16, 6, 56)) == [("g2 g2 l168 g2 u8", "SPLIT(2,8,u),SPLIT(1,168,l)")]
  assert optimized(nhwc(1, 12, 3, 5)) == [("l15 g3 u4", "SPLIT(1,4,u),SPLIT(0,15,l)")]  # 12 channels: 4 lanes (no batch axis of 1)


def test_a_permute_that_keeps_the_contiguous_axis_keeps_the_elementwise_schedule():
  f = Func("heads")  # (tokens, heads, dim) -> (heads, tokens, dim): rows of dim stay rows
  x, out = f.param("x", (8, 4, 32)), f.param("out", (4, 8, 32), out=True)
  f.store(out, f.permute(x, (1, 0, 2)))
  assert optimized(f) == [("l4 l8 l8 u4", "SPLIT(2,4,u),SPLIT(2,8,l),SPLIT(1,8,l),SPLIT(0,4,l)")]  # rows of 8 vectors: 3 axes


@pytest.mark.parametrize("target", ["cuda", "amd", "metal"])
def test_emulated_transposes_match_numpy(tmp_path, target):
  x = np.random.default_rng(0).standard_normal((2, 16, 6, 56)).astype(np.float32)
  np.testing.assert_array_equal(emulated(nhwc(2, 16, 6, 56), tmp_path, {"x": x}, target), x.transpose(0, 2, 3, 1) * np.float32(0.5))


def rowscale(shape) -> Func:
  """x times a value per row (broadcast along the last axis): the rows stay an axis of their own (y does not
  read the row's elements), the axes outside them merge."""
  f = Func("rowscale")
  x, y = f.param("x", shape), f.param("y", (*shape[:-1], 1))
  out = f.param("out", shape, out=True)
  f.store(out, f.op("MUL", x, f.expand(y, shape)))
  return f


def weighted(n: int) -> Func:
  """x of (n, 2, 2, 2) times a weight along each axis of 2 (none of them merges: each weight reads one alone),
  like a bitonic sort's stages, which compare along one such axis each."""
  f = Func("weighted")
  shape = (n, 2, 2, 2)
  x = f.param("x", shape)
  ws = [f.param(f"w{i}", tuple(2 if j == i else 1 for j in range(4))) for i in (1, 2, 3)]
  out = f.param("out", shape, out=True)
  v = x
  for w in ws: v = f.op("MUL", v, f.expand(w, shape))
  f.store(out, v)
  return f


def test_a_short_contiguous_axis_spreads_the_workgroup_over_the_next_axes():
  """An elementwise kernel over rows of 28: the rows' 7 vectors of 4 took 7 threads a workgroup (1 after a
  batch norm's reductions: 0.07 ms for 8 x 64 x 28 x 28 on an H200), now 7 x 32; a long row keeps its 256."""
  assert optimized(rowscale((8, 16, 28, 28))) == [("g112 l32 l7 u4", "SPLIT(1,4,u),SPLIT(1,7,l),SPLIT(0,32,l)")]
  assert optimized(rowscale((4, 4096))) == [("g4 g4 l256 u4", "SPLIT(1,4,u),SPLIT(1,256,l)")]


def test_the_workgroup_takes_the_axes_that_give_the_most_threads():
  """Three dimensions of threads: where the axes next to the contiguous one are short (2, 2), one further out
  takes the place of one of them (a bitonic sort's stage on an H200 ran workgroups of 2 x 2 x 2 threads)."""
  assert optimized(weighted(8192)) == [("g128 l64 g2 l2 l2", "SPLIT(3,2,l),SPLIT(2,2,l),SPLIT(0,64,l)")]


def test_elementwise_loops_read_as_one_merge():
  """Output loops that every address reads as one (a contiguous tensor's axes) are one loop on GPUs."""
  f = Func("scale")
  x, out = f.param("x", (8, 16, 28, 28)), f.param("out", (8, 16, 28, 28), out=True)
  f.store(out, f.op("MUL", x, f.const(0.5)))
  assert optimized(f) == [("g98 l256 u4", "SPLIT(0,4,u),SPLIT(0,256,l)")]


@pytest.mark.parametrize("target", ["cuda", "amd", "metal"])
def test_emulated_short_rows_match_numpy(tmp_path, target):
  rng = np.random.default_rng(1)
  x, y = rng.standard_normal((2, 3, 14, 14)).astype(np.float32), rng.standard_normal((2, 3, 14, 1)).astype(np.float32)
  np.testing.assert_array_equal(emulated(rowscale((2, 3, 14, 14)), tmp_path, {"x": x, "y": y}, target), x * y)
  w = [rng.standard_normal(tuple(2 if j == i else 1 for j in range(4))).astype(np.float32) for i in (1, 2, 3)]
  x = rng.standard_normal((96, 2, 2, 2)).astype(np.float32)
  got = emulated(weighted(96), tmp_path, {"x": x, "w1": w[0], "w2": w[1], "w3": w[2]}, target)
  np.testing.assert_array_equal(got, x * w[0] * w[1] * w[2])


def test_a_cumsum_down_columns_puts_its_threads_along_the_rows_it_reads(tmp_path):
  """tinygrad's x.cumsum(0) over 513 rows: prefix sums of blocks of 256 rows, written block by block (the
  output's contiguous axis runs down x's columns), each a window sum down a column of x: a warp's threads
  go along x's 16 contiguous columns (coalesced loads), not down the rows 64 bytes apart."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  text = uopc.export(lambda x: x.cumsum(0), tinygrad.Tensor.empty(513, 16), name="cumsum0")
  (tmp_path / "cumsum0.uop").write_text(text)
  out = io.StringIO()
  compile_module(parse_source(text, "t.uop"), "cuda", "t", PrintOptions(after=frozenset({"optimize"}), out=out))
  assert next(x for x in out.getvalue().splitlines() if x.startswith("# axes: ")).startswith("# axes: l16 ")
  x = np.random.default_rng(2).standard_normal((513, 16)).astype(np.float32)
  got = run_file(tmp_path / "cumsum0.uop", target="cuda", inputs={"x": x}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, np.cumsum(x.astype(np.float64), axis=0), rtol=1e-4, atol=1e-4)
