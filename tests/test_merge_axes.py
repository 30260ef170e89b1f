"""Adjacent reduce loops that walk memory as one merge into one loop (uopc.stages.merge_axes, Optimize's first
step): which pairs merge, which do not, and that a merged kernel computes bit for bit what the unmerged one
computes (both run by the kernel interpreter of test_rangeify on the same random inputs)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from test_rangeify import expand, inputs_for, param, permute, reduce, run_kernels, sink, store
from uopc.ops import AxisType, Ops
from uopc.stages.merge_axes import merge_reduce_axes
from uopc.stages.optimize import accumulator_first, axis_size, axis_type, is_axis, kernel_axes
from uopc.stages.rangeify import rangeify


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
