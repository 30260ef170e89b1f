"""THREEFRY through -t c, both as Instruction Selection decomposes it (uint32 add-rotate-xor) and as the C
prelude renders it, against >= 10^4 known answers made by tinygrad (tests/make_threefry_vectors.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from isel_harness import C_DECOMPOSED, Library, ops_in
from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.targets import get_target
from uopc.uop import UOp

VECTORS = json.loads(Path(__file__).with_name("threefry_vectors.json").read_text())["vectors"]


def _column(i: int) -> np.ndarray: return np.array([int(v[i], 16) for v in VECTORS], dtype=np.uint64)


def _threefry(x: UOp, key: UOp) -> UOp: return UOp(Ops.THREEFRY, dtypes.uint64, (x, key))


def test_enough_vectors():
  assert len(VECTORS) >= 10**4


@pytest.mark.parametrize("caps,decomposed", [(C_DECOMPOSED, True), (get_target("c").ops, False)], ids=["decomposed", "prelude"])
def test_threefry_matches_tinygrad(caps, decomposed):
  lib = Library(caps)
  lowered = lib.add("threefry", _threefry, [dtypes.uint64, dtypes.uint64], dtypes.uint64)
  assert (Ops.THREEFRY not in ops_in(lowered)) == decomposed
  got = lib("threefry", _column(0), _column(1))
  bad = np.flatnonzero(got != _column(2))
  assert bad.size == 0, [VECTORS[i] for i in bad[:5]]
