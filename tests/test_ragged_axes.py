"""Ragged contiguous output axes (uopc/stages/ragged_axes.py): a reduction's contiguous output axis of 1024 or
more with no factor of 8 (GPT-2's 50257 logits) is padded before the GPU tile heuristics run; the others are
not. The padded kernel computes what the unpadded one does (the emulator against numpy)."""
from __future__ import annotations

import numpy as np

import uopc.stages.gpu_schedule as gs
from test_local_staging import _check_gemm, _heuristic, _inputs
from test_tensor_programs import conv2d, gemm
from uopc.run import run_file


def test_a_long_ragged_contiguous_axis_is_padded():
  axes, opts = _heuristic(gemm(64, 768, 50257))
  assert opts.startswith("PADTO(1,64),") and "g393" in axes  # 50304 columns: 393 x 128
  assert _heuristic(gemm(64, 768, 1031))[1].startswith("PADTO(1,64),")  # 1031 -> 1088: 5.5% more columns


def test_other_axes_are_left_alone():
  assert "PADTO" not in _heuristic(gemm(197, 768, 3072))[1]   # ragged rows: not the contiguous axis
  assert "PADTO" not in _heuristic(gemm(64, 768, 1000))[1]    # 1000 = 8 x 125
  assert "PADTO" not in _heuristic(gemm(64, 768, 997))[1]     # shorter than RAGGED_MIN
  assert "PADTO" not in _heuristic(conv2d(64, 28, 28, 64, 3, 3, 1))[1]


def test_a_padded_gemm_runs_correctly(tmp_path, monkeypatch):
  """8 x 16 x 1031 (1031 is prime): padded to 1040 columns, masked; the emulator against numpy."""
  monkeypatch.setattr(gs, "GPU_MIN_THREADS", 64)
  f, x = gemm(8, 16, 1031), _inputs(8, 16, 1031)
  assert _heuristic(f)[1].startswith("PADTO(1,")
  (tmp_path / f"{f.name}.uop").write_text(f.text())
  got = run_file(tmp_path / f"{f.name}.uop", target="cuda", inputs=x, emulated=True).arrays["c"]
  _check_gemm(got, x["a"], x["b"])
  assert np.isfinite(got).all()
