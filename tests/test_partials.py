"""Long reductions on CPU targets. GROUP_REDUCE: a reduce axis split into k vector lanes, each
accumulating its own partial, the k partials combined pairwise after the loop
(uopc.stages.expand.group_lanes). And a long full reduction split by Rangeify into the reductions of
32 chunks (a kernel whose chunks are THREAD tasks) and the reduction of those partials.

The partials change the order of a float sum's additions, so results are checked three ways: sums
whose every partial sum is exact (integers, small integer-valued floats) and MAX must equal the
unoptimised kernels' bit for bit; float sums of random data must equal, bit for bit, a numpy model
of the order (lane j adds elements j, j + k, j + 2k, ... in turn, then the pairwise tree); and the
heuristics' lane count does not depend on the vector width, so every `--cpu` level computes the same
bits (tests/test_cpu_levels.py runs long reductions too).
"""
from __future__ import annotations

import re

import ctypes

import numpy as np
import pytest

from test_group_reduce import lowered, row_reduce
from test_optimize import C, LIB, build_lib, kernels_of, program
from test_tensor_programs import Func, gemm, layernorm, softmax
from uopc.dtype import AddrSpace
from uopc.frontend import parse_source
from uopc.ops import AxisType, Ops
from uopc.stages.callify import callify
from uopc.stages.optimize import heuristic_opts, parse_opts, target_caps, type_axes
from uopc.stages.cpu_graph import SPLIT_CHUNKS, SPLIT_MIN
from uopc.stages.rangeify import rangeify


def total(n: int, op: str = "ADD", dtype: str = "f32") -> Func:
  f = Func(f"total_{op.lower()}_{dtype}")
  x, out = f.param("x", (n,), dtype), f.param("out", (1,), dtype, out=True)
  f.store(out, f.reduce(x, op, (0,)))
  return f


def _heuristics(f: Func, caps=C) -> list[str]:
  return [",".join(map(str, heuristic_opts(k, caps))) for k in kernels_of(f.text(), caps).values()]


def _call(lib, f: Func, x: np.ndarray) -> np.ndarray:
  out = np.zeros(next(shape for _, shape, _, is_out in f.args if is_out), x.dtype)
  assert getattr(lib, f"{LIB}_{f.name}")(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p)) == 0
  return out


# ---- the heuristics ---------------------------------------------------------------------------------------


def test_long_contiguous_reductions_get_32_partials_at_every_vector_width():
  for caps in (target_caps("c", 16), target_caps("c", 32), target_caps("c", 64), target_caps("llvm")):
    assert _heuristics(total(1 << 16), caps) == ["SPLIT(0,32,G),SPLIT(0,2,r)"]
    # a row sum: partials along each row instead of 8 rows gathered lane by lane; THREAD tasks of rows
    assert _heuristics(row_reduce(4096, 4096, "ADD"), caps) == ["SPLIT(1,32,G),SPLIT(1,2,r),SPLIT(0,32,t,top)"]


def test_fused_row_reductions_get_partials_and_the_output_its_lanes():
  """softmax and layernorm: each row reduction (axes 2, 3) partials along the row, the output 2W lanes along
  it (axis 1), THREAD tasks of rows; no tile of 8 rows, whose reductions would gather the rows lane by lane."""
  for f in (softmax(64, 4096), layernorm(64, 4096)):
    assert _heuristics(f) == ["SPLIT(3,32,G),SPLIT(3,2,r),SPLIT(2,32,G),SPLIT(2,2,r),SPLIT(1,8,u),SPLIT(0,32,t,top)"], f.name


def test_short_strided_or_tiled_reductions_keep_their_order():
  assert _heuristics(total(128)) == ["SPLIT(0,2,r)"]                          # too short to pay for the combine
  assert _heuristics(total(1000)) == ["SPLIT(0,2,r)"]                         # no multiple of 32
  assert not re.search(r",G[,)]", _heuristics(row_reduce(64, 128, "ADD"))[0])
  assert not re.search(r",G[,)]", _heuristics(gemm(256, 1024, 256))[0])  # its k reads b with a stride: a register tile


def test_rows_from_256_take_partials_unless_their_loads_are_gated():
  """Rows of 256 to 1023 read contiguously take 32 partials too (2 cores, AVX-512: softmax 4096 x 512 2.1x, a
  layernorm of rows of 256 2.1x, GPT-2's of 768 1.6-1.9x, against 8 rows gathered lane by lane); a reduction that
  moves a gated load needs CPU_PARTIALS_GATED_MIN (tinygrad's cumsum: its blocks of 256 are masked windows, 2.8x
  slower in partials)."""
  assert _heuristics(total(256)) == ["SPLIT(0,32,G),SPLIT(0,2,r)"]
  assert _heuristics(row_reduce(64, 512, "ADD"))[0].startswith("SPLIT(1,32,G)")
  assert _heuristics(softmax(64, 512))[0].count(",G)") == 2  # its max and its sum
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  f = Func("cumsum")
  f.text = lambda: uopc.export(lambda x: x.cumsum(-1), tinygrad.Tensor.empty(64, 1000), name="cumsum")  # type: ignore[method-assign]
  assert not any(re.search(r",G[,)]", o) for o in _heuristics(f))


# ---- the lowering -----------------------------------------------------------------------------------------


def test_lanes_need_no_workgroup_and_combine_pairwise():
  out = lowered(total(1024), "SPLIT(0,32,G)", C)
  nodes = out.toposort()
  assert not [u for u in nodes if u.op in (Ops.SPECIAL, Ops.BARRIER)]
  assert not [u for u in nodes if u.op is Ops.RANGE and u.arg[1] is not AxisType.REDUCE]  # the lanes are vectors now
  reg = sorted(u.dtype.size for u in nodes if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.REG)
  assert reg == [1, 2, 4, 8, 16, 32]  # the partials, then each level of the tree
  assert max(u.dtype.count for u in nodes if u.op is Ops.ADD) == C.vector_width


# ---- results ----------------------------------------------------------------------------------------------

OPTS = ["SPLIT(0,32,G)", "SPLIT(0,32,G,top)", "SPLIT(0,32,G),SPLIT(0,2,r)", "SPLIT(0,24,G)", "SPLIT(0,7,G)", "SPLIT(0,2,G)",
        "SPLIT(0,4,r),SPLIT(0,16,G)"]
N = 1344  # 2^6 * 3 * 7: every factor above divides it


def _libs(tmp_path, funcs: list[Func], opts: str) -> tuple:
  """The unoptimised build of funcs, and the build with `opts` on each kernel."""
  text = program(funcs)
  names = list(kernels_of(text))
  return build_lib(tmp_path, text, {k: () for k in names}, "plain"), build_lib(tmp_path, text, {k: parse_opts(opts) for k in names}, "lanes")


@pytest.mark.parametrize("opts", OPTS)
def test_exact_sums_and_max_equal_the_unoptimised_kernels(tmp_path, opts):
  funcs = [total(N, "ADD", "i32"), total(N, "ADD"), total(N, "MAX"), total(N, "MUL")]
  plain, lanes = _libs(tmp_path, funcs, opts)
  rng = np.random.default_rng(0)
  xi = rng.integers(-2**31, 2**31 - 1, N).astype(np.int32)          # wraps: exact in any order all the same
  xf = rng.integers(-1000, 1001, N).astype(np.float32)               # every partial sum is an integer below 2^24
  xm = rng.standard_normal(N).astype(np.float32)
  xm[[5, 700]] = [np.inf, -np.inf]
  xp = rng.choice(np.array([-1, 1], np.float32), N)  # products of powers of two, never far from 1: exact in any order
  xp[rng.choice(N, 40, replace=False)] = np.repeat(np.array([2, -0.5], np.float32), 20)
  for f, x in zip(funcs, (xi, xf, xm, xp)):
    want, got = _call(plain, f, x), _call(lanes, f, x)
    np.testing.assert_array_equal(got, want, err_msg=f"{f.name} {opts}")
  assert _call(lanes, funcs[0], xi)[0] == xi.sum(dtype=np.int32)


def model_sum(x: np.ndarray, k: int) -> np.ndarray:
  """The sums (over the last axis) in GROUP_REDUCE lanes' order, every addition rounded to float32:
  lane j adds elements j, j + k, ... in turn from 0, then while m > 1 partials are left, partial i
  (i < m // 2) adds partial i + ceil(m / 2)."""
  rows = x.reshape(x.shape[0], -1, k)
  part = np.zeros((x.shape[0], k), np.float32)
  for i in range(rows.shape[1]): part = part + rows[:, i]
  while part.shape[1] > 1:
    m = part.shape[1]
    h, c = m // 2, m - m // 2
    nxt = part[:, :c].copy()
    nxt[:, :h] = part[:, :h] + part[:, c:c + h]
    part = nxt
  return part


@pytest.mark.parametrize("k", [32, 24, 7])
def test_float_sums_follow_the_lane_order(tmp_path, k):
  x = np.random.default_rng(1).standard_normal(N).astype(np.float32) * np.float32(3.7)
  _, lanes = _libs(tmp_path, [total(N)], f"SPLIT(0,{k},G),SPLIT(0,2,r)" if k != 7 else "SPLIT(0,7,G)")
  got = _call(lanes, total(N), x)
  np.testing.assert_array_equal(got, model_sum(x[None], k)[0])
  assert got[0] != np.float32(np.add.accumulate(x, dtype=np.float32)[-1])  # a different order from the plain loop's, here


@pytest.mark.parametrize("opts, k", [("SPLIT(1,32,G),SPLIT(0,4,u)", 32), ("SPLIT(1,16,G),SPLIT(1,4,r),SPLIT(0,2,t,top)", 16),
                                     ("SPLIT(1,8,G,top),SPLIT(0,8,u)", None)])
def test_row_sums_with_output_lanes_and_threads(tmp_path, opts, k):
  f = row_reduce(8, 512, "ADD")
  plain, lanes = _libs(tmp_path, [f], opts)
  x = np.random.default_rng(2).standard_normal((8, 512)).astype(np.float32)
  if k is not None: np.testing.assert_array_equal(_call(lanes, f, x), model_sum(x, k))  # (with top, lane j sums block j)
  xf = np.random.default_rng(3).integers(-100, 101, (8, 512)).astype(np.float32)
  np.testing.assert_array_equal(_call(lanes, f, xf), _call(plain, f, xf))


# ---- full reductions split into chunks --------------------------------------------------------------------


def _split_program(f: Func, split: bool):
  return rangeify(callify(parse_source(f.text(), "t.uop").entries[0].sink), cpu=split)


def _kernel_split(f: Func, split: bool) -> list[str]:
  program = _split_program(f, split)
  return [f"{b.name}{list(b.shape)}" for b in program.intermediates] + [f"{len(program.kernels)} kernels"]


def test_long_full_reductions_split_into_chunks():
  assert _kernel_split(total(SPLIT_MIN), True) == ["tmp2[32, 1]", "2 kernels"]
  # GPU targets by their own rule (uopc.stages.gpu_graph: parts of 4096 elements; tests/test_gpu_graph.py)
  assert _kernel_split(total(SPLIT_MIN), False) == ["tmp2[32, 1]", "2 kernels"]
  assert _kernel_split(total(1 << 13), False) == ["1 kernels"]
  assert _kernel_split(total(SPLIT_MIN - SPLIT_CHUNKS), True) == ["1 kernels"]           # too short for threads
  assert _kernel_split(total(SPLIT_MIN + 1), True) == ["1 kernels"]                      # no multiple of 32
  assert _kernel_split(row_reduce(2, SPLIT_MIN, "ADD"), True) == ["1 kernels"]           # rows: THREAD tasks already
  # the chunks: THREAD tasks, each with 32 partials; then the 32 chunk sums in order
  kernels = [type_axes(k, C) for k in _split_program(total(1 << 24), True).kernels]
  assert [",".join(map(str, heuristic_opts(k, C))) for k in kernels] == ["SPLIT(1,32,G),SPLIT(1,2,r),SPLIT(0,32,t,top)", "SPLIT(0,2,r)"]


def mean_of_row_max(n: int, m: int, k: int) -> Func:
  """(a @ p.T).max(1).mean(): each of n elements a max over m of a sum over k, all fused in one kernel."""
  f = Func(f"mean_row_max_{n}_{m}_{k}")
  a, p, out = f.param("a", (n, k)), f.param("p", (m, k)), f.param("out", (1,), out=True)
  prod = f.op("MUL", f.expand(f.reshape(a, (n, 1, k)), (n, m, k)), f.expand(f.reshape(p, (1, m, k)), (n, m, k)))
  dots = f.reshape(f.reduce(prod, "ADD", (2,)), (n, m))
  f.store(out, f.op("MUL", f.reshape(f.reduce(f.reduce(dots, "MAX", (1,)), "ADD", (0, 1)), (1,)), f.const(1.0 / n)))
  return f


def test_a_full_reduction_of_reductions_of_reductions_is_split_by_the_work_under_it(tmp_path):
  """1024 row maxima of sums over 16: 16M steps under 1024 elements, one thread before (27x slower); now the
  chunks' kernel is THREAD tasks. A single level of reductions under a short full one is left to fusion."""
  assert _kernel_split(mean_of_row_max(1024, 1024, 16), True) == ["tmp3[32, 1]", "2 kernels"]
  assert _kernel_split(mean_of_row_max(64, 64, 16), True) == ["1 kernels"]                # too little work
  assert _kernel_split(row_reduce(32, 4096, "ADD"), True) == ["1 kernels"]
  f = mean_of_row_max(1024, 1024, 16)
  (k0, _) = [type_axes(k, C) for k in _split_program(f, True).kernels]
  assert ",t" in ",".join(map(str, heuristic_opts(k0, C)))
  lib = build_lib(tmp_path, program([f]), None, "rows")
  rng = np.random.default_rng(5)
  a, p = rng.integers(-3, 4, (1024, 16)).astype(np.float32), rng.integers(-3, 4, (1024, 16)).astype(np.float32)
  out = np.zeros(1, np.float32)
  fn = getattr(lib, f"{LIB}_{f.name}")
  assert fn(*(x.ctypes.data_as(ctypes.c_void_p) for x in (a, p, out))) == 0
  assert out[0] == np.float32((a @ p.T).max(1).sum() / 1024)  # integers: every partial exact


def test_split_sums_follow_the_chunk_and_lane_order(tmp_path):
  n = SPLIT_MIN
  funcs = [total(n), total(n, "MAX"), total(n, "ADD", "i32")]
  lib = build_lib(tmp_path, program(funcs), None, "split")
  rng = np.random.default_rng(4)
  x = rng.standard_normal(n).astype(np.float32)
  chunks = model_sum(x.reshape(SPLIT_CHUNKS, -1), 32)[:, 0]              # each chunk in 32 lanes
  want = np.add.accumulate(np.concatenate([[0], chunks]).astype(np.float32), dtype=np.float32)[-1]  # then in order
  assert _call(lib, funcs[0], x)[0] == want
  assert _call(lib, funcs[1], x)[0] == x.max()
  xi = rng.integers(-2**31, 2**31 - 1, n).astype(np.int32)
  assert _call(lib, funcs[2], xi)[0] == xi.sum(dtype=np.int32)
