"""Rangeify for the GPU targets: long reductions to few values split in two (uopc.stages.gpu_graph), and
reductions fused beside output loops that would keep those loops off the grid realized (check_beside).
Each program's kernels are run by the kernel interpreter and compared with the tensor program's own
result (test_rangeify.check); the CPU targets keep their own rules."""
from __future__ import annotations

import numpy as np
import pytest

from test_rangeify import check, expand, param, permute, reduce, sink, store
from uopc.ops import Ops
from uopc.stages.gpu_graph import SPLIT_OUTPUTS, SPLIT_ROW, _parts
from uopc.stages.rangeify import rangeify


def _intermediates(prog) -> int:
  return sum(not b.is_arg for b in prog.buffers)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_a_whole_tensor_reduction_is_split_into_partials(op):
  n = 1 << 16
  x, out = param(0, "x", (n,)), param(1, "out", (1,))
  prog = check(sink(store(out, reduce(x, op, (0,)))))
  assert len(prog.kernels) == 2 and _intermediates(prog) == 1
  assert next(b for b in prog.buffers if not b.is_arg).shape == (n // SPLIT_ROW, 1)
  assert len(rangeify(sink(store(out, reduce(x, op, (0,)))), cpu=True).kernels) == 1  # the CPU's own rule: from 2 ** 17


def test_per_channel_statistics_take_their_parts_from_the_outer_reduced_axes():
  """An image batch's per-channel mean, 8 x 3 x 64 x 64 -> 3: the parts are the 8 images and 2 halves of
  each image's rows (each part 2048 contiguous-row elements); then the 16 partials of each channel."""
  assert _parts((8, 3, 64, 64), (0, 2, 3), 16) == ({0: 8, 2: 2}, {})
  assert _parts((8, 3, 64, 64), (0, 2, 3), 5) == ({0: 4}, {})
  assert _parts((7, 3, 64, 64), (0, 2, 3), 5) == ({}, {})  # no divisor of 7 up to 5: left whole
  x, out = param(0, "x", (8, 3, 64, 64)), param(1, "out", (1, 3, 1, 1))
  prog = check(sink(store(out, reduce(x, Ops.ADD, (0, 2, 3)))))
  assert len(prog.kernels) == 2


def test_a_sum_over_an_axis_with_few_divisors_is_padded_to_its_parts():
  """x.sum() of 123 x 457 (a std over a whole tensor): 123's divisors up to the 13 parts that fit give 3 (three
  workgroups did all the work: 0.026 ms on an H100, tinygrad 0.016), so the sum pads the rows to 130 with zeros and
  takes 13 parts; a max is not padded (its padding would not be neutral)."""
  assert _parts((123, 457), (0, 1), 13) == ({0: 3}, {})
  assert _parts((123, 457), (0, 1), 13, pad=True) == ({0: 13}, {0: 130})
  assert _parts((128, 457), (0, 1), 13, pad=True) == ({0: 8}, {})  # 8 of 13: divisors enough
  x, out = param(0, "x", (123, 457)), param(1, "out", (1, 1))
  prog = check(sink(store(out, reduce(x, Ops.ADD, (0, 1)))))
  assert len(prog.kernels) == 2 and next(b for b in prog.buffers if not b.is_arg).shape == (13, 1, 1)
  prog = check(sink(store(out, reduce(x, Ops.MAX, (0, 1)))))
  assert next(b for b in prog.buffers if not b.is_arg).shape[0] == 3


def test_many_values_or_short_reductions_are_not_split():
  x, out = param(0, "x", (SPLIT_OUTPUTS, 4 * SPLIT_ROW)), param(1, "out", (SPLIT_OUTPUTS, 1))
  assert len(rangeify(sink(store(out, reduce(x, Ops.ADD, (1,))))).kernels) == 1  # a workgroup row each
  y, small = param(0, "y", (4, 4 * SPLIT_ROW - 1)), param(1, "small", (4, 1))
  assert len(rangeify(sink(store(small, reduce(y, Ops.ADD, (1,))))).kernels) == 1


def test_a_whole_tensor_mean_read_by_every_output_is_its_own_kernel():
  """x - mean(x): fused, the mean (read at no output loop) would keep every output loop off the grid."""
  x, out = param(0, "x", (16, 32)), param(1, "out", (16, 32))
  mean = expand(reduce(x, Ops.ADD, (0, 1)), (16, 32))
  prog = check(sink(store(out, x.alu(Ops.SUB, mean))))
  assert len(prog.kernels) == 2
  assert len(rangeify(sink(store(out, x.alu(Ops.SUB, mean))), cpu=True).kernels) == 1  # a CPU runs it fused


def test_a_count_beside_a_reduced_column_is_realized():
  """A masked mean: sum over t of x[b, t, d] * m[b, t], divided by the sum of m[b, :]: the count (read per
  row b) beside the columns d, each of which reduces over t, is realized."""
  b, t, d = 3, 8, 5
  x, m, out = param(0, "x", (b, t, d)), param(1, "m", (b, t, 1)), param(2, "out", (b, 1, d))
  total = reduce(x.alu(Ops.MUL, expand(m, (b, t, d))), Ops.ADD, (1,))
  count = expand(reduce(m, Ops.ADD, (1,)), (b, 1, d))
  prog = check(sink(store(out, total.alu(Ops.DIV, count))))
  assert len(prog.kernels) == 2


@pytest.mark.parametrize("hw,kernels", [((16, 16), 1), ((8, 8), 1), ((1, 512), 1), ((16, 16, "T"), 2)])
def test_statistics_too_long_for_one_thread_and_split_over_axes_are_realized(hw, kernels):
  """An instance norm's mean over 16 x 16 (256 elements in two loops that merge into one row of 256, which a
  workgroup row takes), a short one (8 x 8: each thread runs its row) and one long loop stay fused; a mean over
  the transposed 16 x 16 (the loops do not merge: two loops of 16 no workgroup row takes) is realized."""
  h, w, *transposed = hw
  x, out = param(0, "x", (4, h, w)), param(1, "out", (4, h, w))
  xs = permute(x, (0, 2, 1)) if transposed else x
  mean = expand(reduce(xs, Ops.ADD, (1, 2)), (4, w, h) if transposed else (4, h, w))
  assert len(check(sink(store(out, xs.alu(Ops.MUL, mean)))).kernels) == kernels  # (a product: no cancellation)


def test_split_values_match_numpy_within_float_rounding():
  """The split only reorders a float sum's additions: 2 ** 16 values summed two ways agree to float32's
  accumulated rounding."""
  n = 1 << 16
  x, out = param(0, "x", (n,)), param(1, "out", (1,))
  prog = rangeify(sink(store(out, reduce(x, Ops.ADD, (0,)))))
  from test_rangeify import run_kernels
  data = np.random.default_rng(2).standard_normal(n).astype(np.float32)
  got = run_kernels(prog, {"x": data.copy(), "out": np.zeros(1, np.float32)})["out"]
  np.testing.assert_allclose(got, data.astype(np.float64).sum(), rtol=1e-5, atol=1e-3)


def test_a_reduction_over_rows_of_28_shares_it_among_more_threads():
  """Batch-norm statistics' partials (per channel, over an image's 28 x 28): the reduce axis of 28 has no
  GROUP_REDUCE count of 8 or 16, so 7, 14 or 28 threads share it instead of 4 (on an H200, bn_train's
  statistics 0.110 ms with 4; see tests/bench/RESULTS.md)."""
  from test_local_staging import _heuristic
  from test_tensor_programs import Func
  f = Func("stats")
  x, out = f.param("x", (256, 28, 28)), f.param("out", (256, 1, 1), out=True)
  f.store(out, f.reduce(x, "ADD", (1, 2)))
  opts = _heuristic(f)[1]
  assert any(f",{g},G" in opts for g in (7, 14, 28)), opts
