"""Vector equality as one comparison: Instruction Selection turns a vector's NOT(a != b) (tinygrad's ==) into CMPEQ
where the target renders it, and the C target keeps a comparison whose users take its lanes as numbers (a CAST) or
select by them as a -1/0 mask of the operands' width (uopc.targets.c.render `_mask`), so no vector of 0/1 bytes is
made between them. A histogram, `(x[:, None] == arange(256)).sum(0)`: 3.6 -> 0.59 ms on 2 cores (AVX-512)."""
from __future__ import annotations

import re

import numpy as np
import pytest

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor, dtypes as tdt  # noqa: E402

import uopc  # noqa: E402
from isel_harness import elementwise, ops_in  # noqa: E402
from uopc.dtype import dtypes  # noqa: E402
from uopc.driver import BuildOptions, build  # noqa: E402
from uopc.ops import Ops  # noqa: E402
from uopc.run import run_file  # noqa: E402
from uopc.stages.isel import isel  # noqa: E402
from uopc.targets import get_target  # noqa: E402
from uopc.uop import UOp  # noqa: E402


def _not_equal_negated(n: int) -> UOp:
  def f(a, b):
    t = UOp(Ops.STACK, dtypes.bool.vec(n), (UOp.const(dtypes.bool, True),) * n) if n > 1 else UOp.const(dtypes.bool, True)
    return a.alu(Ops.CMPNE, b).alu(Ops.CMPNE, t)
  return elementwise(f, [dtypes.int32.vec(n)] * 2 if n > 1 else [dtypes.int32] * 2, dtypes.bool.vec(n) if n > 1 else dtypes.bool)


def test_a_vectors_negated_inequality_is_one_equality_where_the_target_has_it():
  assert Ops.CMPEQ in ops_in(isel(_not_equal_negated(8), get_target("c").ops))
  assert Ops.CMPEQ not in ops_in(isel(_not_equal_negated(8), get_target("c").ops.without(Ops.CMPEQ)))  # no loop back
  assert Ops.CMPEQ not in ops_in(isel(_not_equal_negated(1), get_target("c").ops))  # scalars as written


def histogram(x): return (x.unsqueeze(1) == Tensor.arange(256)).sum(0)
def weighted_matches(x, t, w): return ((x.unsqueeze(1) == t.unsqueeze(0)).float() * w).sum(1)


def test_a_histograms_comparisons_are_masks_summed_as_integers(tmp_path):
  path = tmp_path / "hist.uop"
  path.write_text(uopc.export(histogram, Tensor.empty(4096, dtype=tdt.int32), name="hist"))
  build(path, BuildOptions("c", tmp_path / "out", cpu="native", emit=("source",)))
  src = (tmp_path / "out" / "hist.c").read_text()
  kernel = src[src.index("void hist__hist_k0("):]
  assert re.search(r"uopc_int32x\d+ mask\d+ = \(\(uopc_int32x\d+\)\(\w+==\w+\)\);", kernel), "no equality mask"
  assert "uopc_boolx" not in kernel[:kernel.index("\n}\n")]  # no 0/1 byte vectors in the kernel


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_equality_masks_count_and_weigh_what_numpy_does(target, tmp_path):
  rng = np.random.default_rng(2)
  x = rng.integers(-3, 260, 4096).astype(np.int32)
  path = tmp_path / "hist.uop"
  path.write_text(uopc.export(histogram, Tensor.empty(4096, dtype=tdt.int32), name="hist"))
  got = run_file(path, target=target, inputs={"x": x}).arrays["out"]
  np.testing.assert_array_equal(got, np.bincount(x[(x >= 0) & (x < 256)], minlength=256))
  # float lanes: a NaN equals nothing, -0.0 equals 0.0
  xf = rng.integers(0, 4, 64).astype(np.float32)
  xf[::7], xf[3::11] = np.nan, -0.0
  t = np.array([0.0, 1.0, 2.0, np.nan, 3.0] * 6 + [0.0, 1.0], np.float32)
  w = rng.standard_normal((64, 32)).astype(np.float32)
  path = tmp_path / "wm.uop"
  path.write_text(uopc.export(weighted_matches, Tensor.empty(64), Tensor.empty(32), Tensor.empty(64, 32), name="wm"))
  got = run_file(path, target=target, inputs={"x": xf, "t": t, "w": w}).arrays["out"]
  want = ((xf[:, None] == t[None, :]).astype(np.float32) * w).sum(1, dtype=np.float32)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
