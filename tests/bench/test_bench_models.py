"""The model benchmarks' result check, without tinygrad: the same NaNs on both sides agree (a masked
maximum's NaN lanes), a NaN on one side only does not, and the rest is compared relative to the largest value."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import check  # noqa: E402


def test_matching_nans_agree_and_a_lone_nan_does_not():
  want = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
  assert check("p", want.copy(), want) == ""
  got = want.copy()
  got[1] = np.nan
  assert "NaN" in check("p", got, want)
  got = want.copy()
  got[2] = 2.01
  assert "max error" in check("p", got, want)
  assert check("p", np.full(3, np.nan, np.float32), np.full(3, np.nan, np.float32)) == ""


def test_integers_compare_exactly():
  assert check("p", np.array([1, 2], np.int32), np.array([1, 2], np.int32)) == ""
  assert "1 indices differ" in check("p", np.array([1, 3], np.int32), np.array([1, 2], np.int32))
