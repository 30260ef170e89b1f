"""CPU register tiles: a short reduction nested in another, whose loads the outer loop does not move, is unrolled
whole (uopc.stages.cpu_schedule._invariant_loads), so that Linearize hoists those loads out of the outer loop:
the row maxima of a product with K = 16, (a @ p.T).max(1), gathered a's 8 x 16 tile again for every row of p.
Pinned through the heuristics' opts and checked against numpy (integer-valued data: every order exact)."""
from __future__ import annotations

import ctypes

import numpy as np

from test_optimize import C, LIB, build_lib, kernels_of
from test_tensor_programs import Func
from uopc.stages.optimize import heuristic_opts, target_caps


def row_max_of_product(n: int, m: int, k: int) -> Func:
  f = Func(f"row_max_{n}_{m}_{k}")
  a, p, out = f.param("a", (n, k)), f.param("p", (m, k)), f.param("out", (n,), out=True)
  prod = f.op("MUL", f.expand(f.reshape(a, (n, 1, k)), (n, m, k)), f.expand(f.reshape(p, (1, m, k)), (n, m, k)))
  dots = f.reshape(f.reduce(prod, "ADD", (2,)), (n, m))
  f.store(out, f.reshape(f.reduce(dots, "MAX", (1,)), (n,)))
  return f


def _opts(f: Func, caps) -> list[str]: return [",".join(map(str, heuristic_opts(k, caps))) for k in kernels_of(f.text(), caps).values()]


def test_a_short_inner_reduction_under_an_outer_loop_is_unrolled_whole():
  for caps in (C, target_caps("c", 64)):
    (opts,) = _opts(row_max_of_product(1024, 1024, 16), caps)
    assert ",16,r)" in opts, opts                     # k: one unrolled block, a's loads out of p's loop
  (opts,) = _opts(row_max_of_product(1024, 1024, 64), C)
  assert ",2,r)" in opts, opts                        # a long one keeps its loop


def test_the_unrolled_row_maxima_match_numpy(tmp_path):
  f = row_max_of_product(64, 96, 16)
  lib = build_lib(tmp_path, f.text(), None, "rows")
  rng = np.random.default_rng(6)
  a, p = rng.integers(-4, 5, (64, 16)).astype(np.float32), rng.integers(-4, 5, (96, 16)).astype(np.float32)
  out = np.zeros(64, np.float32)
  assert getattr(lib, f"{LIB}_{f.name}")(*(x.ctypes.data_as(ctypes.c_void_p) for x in (a, p, out))) == 0
  np.testing.assert_array_equal(out, (a @ p.T).max(1))
