"""Select ladders (uopc/select_ladders.py): tinygrad's `Tensor.cat` of slices of one tensor is a STACK that each
kernel reads through a WHERE ladder on `j // width`; where the rungs are one template whose leaves vary
linearly with the rung, the ladder is one value: one load instead of n loads and n - 1 selects. Checked:
the kernel after Rangeify, and the results against numpy on -t c and the emulated GPU targets (exactly:
the same elements are read and scaled)."""
from __future__ import annotations

import numpy as np
import pytest

from uopc.frontend import parse_source
from uopc.ops import Ops
from uopc.run import run_file
from uopc.stages.callify import callify
from uopc.stages.rangeify import rangeify

ROWS, PIECES, WIDTH = 4, 8, 8


def cat_program(offsets: list[int], scales: list[float] | None = None) -> str:
  """out = cat([x[:, o:o+WIDTH] * s for o, s in zip(offsets, scales)], dim=1), as tinygrad exports it."""
  lines, parts = [], []
  for i, o in enumerate(offsets):
    lines.append(f"  %s{i} = SHRINK(%x, [0, {o}], [{ROWS}, {WIDTH}])")
    if scales is None or scales[i] == 1.0: parts.append(f"%s{i}")
    else:
      lines += [f"  %c{i} = CONST {{{scales[i]!r}}}", f"  %m{i} = MUL(%s{i}, %c{i})"]
      parts.append(f"%m{i}")
  n = len(offsets)
  return (f"func cat {{\n  %out = PARAM([{ROWS}, {n * WIDTH}]) {{(1, \"out\")}} : f32\n"
          f"  %x = PARAM([{ROWS}, {PIECES * WIDTH}]) {{(0, \"x\")}} : f32\n" + "\n".join(lines) +
          f"\n  %st = STACK({', '.join(parts)})\n  %p = PERMUTE(%st) {{(1, 0, 2)}}\n"
          f"  %r = RESHAPE(%p, [{ROWS}, {n * WIDTH}])\n  STORE(%out, %r)\n}}\n")


def _ops(text: str) -> dict:
  (kernel,) = rangeify(callify(parse_source(text, "t.uop").entries[0].sink), cpu=True).kernels
  nodes = kernel.toposort()
  return {op: sum(u.op is op for u in nodes) for op in (Ops.LOAD, Ops.WHERE)}


def _want(x: np.ndarray, offsets: list[int], scales: list[float] | None) -> np.ndarray:
  return np.concatenate([x[:, o:o + WIDTH] * np.float32(s) for o, s in zip(offsets, scales or [1.0] * len(offsets))], axis=1)


REVERSED = [WIDTH * (PIECES - 1 - i) for i in range(PIECES)]


@pytest.mark.parametrize("scales", [None, [float(PIECES - i) for i in range(PIECES)]], ids=["plain", "scaled"])
def test_a_cat_of_evenly_spaced_slices_is_one_load(tmp_path, scales):
  text = cat_program(REVERSED, scales)
  assert _ops(text) == {Ops.LOAD: 1, Ops.WHERE: 0}
  (tmp_path / "cat.uop").write_text(text)
  x = np.random.default_rng(8).standard_normal((ROWS, PIECES * WIDTH)).astype(np.float32)
  for target, emulated in (("c", False), ("cuda", True), ("amd", True)):
    got = run_file(tmp_path / "cat.uop", target=target, inputs={"x": x}, emulated=emulated).arrays["out"]
    np.testing.assert_array_equal(got, _want(x, REVERSED, scales))


@pytest.mark.parametrize("offsets,scales", [([0, 24, 8, 56, 16, 40, 32, 48], None),            # not linear in the rung
                                             (REVERSED, [0.1 * (i + 1) for i in range(PIECES)])],  # 0.1*k is not exact
                         ids=["shuffled", "inexact-scales"])
def test_a_ladder_that_is_not_linear_keeps_its_selects(tmp_path, offsets, scales):
  text = cat_program(offsets, scales)
  assert _ops(text)[Ops.WHERE] == PIECES - 1
  (tmp_path / "cat.uop").write_text(text)
  x = np.random.default_rng(9).standard_normal((ROWS, PIECES * WIDTH)).astype(np.float32)
  got = run_file(tmp_path / "cat.uop", target="c", inputs={"x": x}).arrays["out"]
  np.testing.assert_array_equal(got, _want(x, offsets, scales))
