"""Short reductions in kernels with few threads on GPU targets.

- An output loop nested in a short fused reduction's loops (a squeeze-excitation's scale: an 8-term sum per
  channel applied to the channel's pixels) gets threads and 4-wide vectors like an elementwise axis, each
  thread running the short reduction itself (uopc.stages.planner._threaded_loop), where it ran serially in one
  thread per channel.
- A short reduction nested in another reduction's loop, in a kernel of few outputs, is realized when its
  repeats add up to NESTED_MIN iterations (uopc.stages.fusion_checks.check_nested): a mean over 32 rows of
  32-term sums ran as 1024 steps of one thread; realized, the rows run side by side. A kernel with enough
  outputs keeps it nested, and CPU targets are unchanged.
- Where such a reduction holds one value per row of the enclosing sum, the row's term is realized instead
  (uopc.stages.rangeify._term_instead): cross-entropy's max, sum and one-hot pick fuse in one kernel of rows,
  then the mean (2 kernels, 5 before).
Each kernel computes what -t c computes, in the emulator (which reports races and missing BARRIERs)."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from test_optimize import GPU, kernels_of
from uopc.frontend import parse_source
from uopc.pipeline import compile_module
from uopc.run import run_file
from uopc.stages.optimize import apply_opts, format_axes, heuristic_opts

ROOT = pathlib.Path(__file__).resolve().parents[1]

SCALE = """func se {
  %x = PARAM([4, 32, 196]) {(0, "x")} : f32
  %w = PARAM([4, 32, 8]) {(1, "w")} : f32
  %out = PARAM([4, 32, 196]) {(2, "out")} : f32
  %s = REDUCE(%w) {(ADD, (2,))}
  %m = MUL(%x, %s)
  STORE(%out, %m)
}
"""


def nested(rows: int, cols: int, outer: int = 1) -> str:
  """The sum over `rows` of log2 of each row's sum of exp2 (`cols` terms), for each of `outer` outputs."""
  return f"""func nce {{
  %s = PARAM([{outer}, {rows}, {cols}]) {{(0, "s")}} : f32
  %out = PARAM([{outer}]) {{(1, "out")}} : f32
  %e = EXP2(%s)
  %r = REDUCE(%e) {{(ADD, (2,))}}
  %l = LOG2(%r)
  %t = REDUCE(%l) {{(ADD, (1,))}}
  %o = RESHAPE(%t, [{outer}])
  STORE(%out, %o)
}}
"""


def schedule(text: str) -> list[str]:
  return [format_axes(apply_opts(k, heuristic_opts(k, GPU), GPU, "k")) for k in kernels_of(text, GPU).values()]


def kernels(text: str, target: str) -> int:
  (entry,) = compile_module(parse_source(text, "t.uop"), target, "t")
  return len(entry.kernels)


def test_an_output_loop_beside_a_short_fused_reduction_gets_threads():
  [axes] = schedule(SCALE)
  assert "L" not in axes and "l49" in axes and "u4" in axes and axes.endswith("R8")


def test_short_nested_reductions_of_a_few_outputs_are_realized_on_gpus_only():
  assert kernels(nested(32, 32), "cuda") == 2 and kernels(nested(32, 32), "c") == 1
  assert kernels(nested(8, 16), "cuda") == 1      # 128 steps in all: kept nested
  assert kernels(nested(8, 16, 256), "cuda") == 1  # 128 steps each: kept nested
  # 256 outputs of 1024 steps each (a spatial softmax's expected coordinates, 2 x 128 of 32 x 32: 3.6x slower) are
  # too few threads; 1024 outputs are enough (FEW_OUTPUTS)
  assert kernels(nested(32, 32, 256), "cuda") == 2 and kernels(nested(32, 32, 1024), "cuda") == 1


def test_a_losss_row_terms_are_one_kernel_of_rows():
  text = (ROOT / "samples" / "models" / "cross_entropy.uop").read_text()
  assert kernels(text, "cuda") == 2
  assert kernels(nested(32, 32), "cuda") == 2  # the row's term (a log of its sum) realized, then the sum over rows


@pytest.mark.parametrize("target", ["cuda", "amd", "metal"])
def test_a_loss_computes_what_the_c_target_computes(target):
  path = ROOT / "samples" / "models" / "cross_entropy.uop"
  rng = np.random.default_rng(9)
  arrays = {"logits": rng.standard_normal((32, 1000)).astype(np.float32), "labels": rng.integers(0, 1000, 32).astype(np.int32)}
  got = run_file(path, target=target, inputs=arrays, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, run_file(path, target="c", inputs=arrays).arrays["out"], rtol=1e-5)


@pytest.mark.parametrize("target", ["cuda", "amd", "metal"])
@pytest.mark.parametrize("text,inputs", [
  (SCALE, {"x": (4, 32, 196), "w": (4, 32, 8)}),
  (nested(32, 32), {"s": (1, 32, 32)}),
], ids=["scale", "nested"])
def test_the_kernels_compute_what_the_c_target_computes(tmp_path, target, text, inputs):
  path = tmp_path / "t.uop"
  path.write_text(text)
  rng = np.random.default_rng(8)
  arrays = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
  got = run_file(path, target=target, inputs=arrays, emulated=True).arrays["out"]
  want = run_file(path, target="c", inputs=arrays).arrays["out"]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
