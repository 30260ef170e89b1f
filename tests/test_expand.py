"""Expand: UPCAST/UNROLL lanes as vectors no wider than the target's, replicated accumulators, vector
loads and stores where the lanes are contiguous (and aligned on GPUs), per-lane gated accesses,
reductions folded in loop order, GPU launch axes as SPECIALs. Results against numpy."""
from __future__ import annotations

import ctypes
import io
from pathlib import Path

import numpy as np
import pytest

from test_cpu_levels import _cpu_has

from test_optimize import GPU, C, LIB, build_lib, kernels_of, padded, program, random_inputs, reduction, run_func
from test_tensor_programs import Func, gemm
from uopc.diagnostics import CompileError
from uopc.driver import BuildOptions, build
from uopc.dtype import AddrSpace
from uopc.launcher import kernel_name
from uopc.run import run_file
from uopc.ops import AxisType, Ops
from uopc.stages.expand import expand
from uopc.stages.optimize import KernelSchedule, apply_opts, heuristic_opts, parse_opts, parse_schedule, target_caps

AVX2 = target_caps("c", 32)  # --cpu x86-64-v3: 8 x f32 registers


def expanded(f, opts: str, caps=C, kernel: int = 0):
  k = kernels_of(f.text(), caps)[kernel_name(LIB, f.name, kernel)]
  opts_ = parse_opts(opts)
  return expand(KernelSchedule(apply_opts(k, opts_, caps, "k"), opts_, caps))


def loads(sink, base: str | None = None):
  return [u for u in sink.toposort() if u.op is Ops.LOAD and (base is None or u.src[0].src[0].op is Ops.PARAM and u.src[0].src[0].arg[1] == base)]


def test_gemm_tile_loads_rows_of_b_as_vectors_and_keeps_a_register_tile():
  out = expanded(gemm(16, 6, 16), "SPLIT(1,8,u),SPLIT(0,4,u),SPLIT(4,2,r)")
  assert not [u for u in out.toposort() if u.op is Ops.RANGE and u.arg[1] in (AxisType.UPCAST, AxisType.UNROLL)]
  assert {u.dtype.count for u in loads(out, "b")} == {4}          # 8 lanes of a row of b: two 4-wide loads per k
  assert len(loads(out, "b")) == 2 * 2                            # ... for each of the 2 unrolled k
  assert {u.dtype.count for u in loads(out, "a")} == {1}          # a column of a: scalars, broadcast
  acc = [u for u in out.toposort() if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.REG]
  assert [a.dtype.size for a in acc] == [4 * 8]                   # one accumulator per lane of the 4x8 tile
  assert max(u.dtype.count for u in out.toposort()) <= C.vector_width


def test_unrolled_reduction_folds_lanes_in_loop_order():
  out = expanded(reduction(3, 8, "ADD", 1), "SPLIT(1,4,r)")
  update = next(u for u in out.toposort() if u.op is Ops.STORE and u.src[1].op is Ops.ADD)
  chain, terms = update.src[1], []
  while chain.op is Ops.ADD:
    terms.append(chain.src[1])
    chain = chain.src[0]
  assert chain.op is Ops.LOAD and chain.src[0].src[0].op is Ops.AFTER      # the accumulator, read once
  terms.reverse()
  assert [t.op for t in terms] == [Ops.GEP] * 4 and [t.arg for t in terms] == [(0,), (1,), (2,), (3,)]  # lanes in loop order
  squares = terms[0].src[0]
  assert all(t.src[0] is squares for t in terms) and squares.op is Ops.MUL and squares.src[0].op is Ops.LOAD
  assert squares.dtype.count == 4                                         # x*x of 4 consecutive elements, one vector


def test_gates_that_differ_per_lane_make_scalar_gated_loads():
  out = expanded(padded(4, 8), "SPLIT(1,4,u)")
  gated = [u for u in loads(out, "x") if len(u.src) == 3]
  assert gated and all(u.dtype.count == 1 for u in gated)
  assert any(u.dtype.count == 4 for u in loads(out, "x") if len(u.src) == 1)  # the middle tap needs no gate


def test_gpu_launch_axes_become_specials_and_vectors_need_alignment():
  out = expanded(gemm(16, 6, 12), "SPLIT(1,4,u),SPLIT(0,4,l)", GPU)
  specials = sorted(u.arg for u in out.toposort() if u.op is Ops.SPECIAL)
  assert specials == ["gidx0", "gidx1", "lidx0"]
  assert not [u for u in out.toposort() if u.op is Ops.RANGE and u.arg[1] in (AxisType.GLOBAL, AxisType.LOCAL)]
  assert {u.dtype.count for u in loads(out, "b")} == {4}                   # offsets k*12 + 4*j: multiples of 4
  f = Func("shifted")
  x, o = f.param("x", (4, 9)), f.param("out", (4, 8), out=True)
  f.store(o, f.shrink(x, (0, 1), (4, 8)))
  assert {u.dtype.count for u in loads(expanded(f, "SPLIT(1,4,u)", GPU), "x")} == {1}  # x[i, j + 1] at i*9 + j + 1: not aligned
  assert {u.dtype.count for u in loads(expanded(f, "SPLIT(1,4,u)", C), "x")} == {4}    # a CPU loads it unaligned


def test_lanes_of_a_loop_whose_iterations_overwrite_each_other_are_refused():
  text = """kernel last {
  %out = PARAM {(0, "out")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %r = RANGE(8) {(0, AxisType.LOOP)} : index
  %xp = INDEX(%x, %r) : ptr<f32>
  %v = LOAD(%xp) : f32
  %zero = CONST {0} : index
  %op = INDEX(%out, %zero) : ptr<f32>
  %s = STORE(%op, %v)
  %e = END(%s, %r)
  SINK(%e)
}
"""
  k = kernels_of(text)[kernel_name(LIB, "last", 0)]
  opts = parse_opts("SPLIT(0,2,u)")
  with pytest.raises(CompileError, match=r"SPLIT\(0,2,u\): axis 0 \(L\) is not proven parallel"):
    apply_opts(k, opts, C, "k")


def test_expanded_kernels_match_numpy(tmp_path):
  funcs = [gemm(16, 6, 16), reduction(6, 8, "MAX", 0), padded(4, 8)]
  pins = {f"{LIB}__gemm_k0": "SPLIT(1,8,u),SPLIT(0,4,u),SPLIT(4,3,r)", f"{LIB}__red_max0_k0": "SPLIT(1,2,r),SPLIT(0,4,u)",
          f"{LIB}__pad3_k0": "SPLIT(1,8,u),SPLIT(0,2,u)"}
  lib = build_lib(tmp_path, program(funcs), parse_schedule([f"{k}:{v}" for k, v in pins.items()]), "x")
  x = random_inputs(funcs[0], 0)
  np.testing.assert_allclose(run_func(lib, funcs[0], x)["c"], x["a"] @ x["b"], rtol=1e-5, atol=1e-5)
  x = random_inputs(funcs[1], 1)
  np.testing.assert_array_equal(run_func(lib, funcs[1], x)["out"], x["x"].max(axis=0, keepdims=True))
  x = random_inputs(funcs[2], 2)
  p = np.pad(x["x"], ((0, 0), (1, 1)))
  np.testing.assert_allclose(run_func(lib, funcs[2], x)["out"], p[:, :-2] + p[:, 1:-1] + p[:, 2:], rtol=1e-6)


def test_an_integer_accumulator_buried_by_reassociation_still_unrolls(tmp_path):
  """Found by the tinygrad fuzzer: symbolic regroups an integer update acc + (3x + 1) as (3x + acc) + 1;
  Optimize puts the accumulator back on top (stages/accumulators.py), so an unrolled sum still folds."""
  from uopc.run import run_file
  (tmp_path / "s.uop").write_text('func f {\n  %out = PARAM([]) {(1, "out")} : f32\n  %x = PARAM([5]) {(0, "x")} : i32\n'
                                  '  %a = MUL(%x, 3)\n  %b = ADD(%a, 1)\n  %s = REDUCE(%b) {(ADD, (0,))}\n  %r = RESHAPE(%s, [])\n'
                                  '  %c = CAST(%r) : f32\n  STORE(%out, %c)\n}\n')
  x = np.array([1, -2, 3, 4, -5], np.int32)
  for target in ("c", "llvm"):
    assert float(run_file(tmp_path / "s.uop", target=target, inputs={"x": x}).arrays["out"]) == float((3 * x + 1).sum())


def test_an_accumulator_buried_again_by_the_opts_still_unrolls(tmp_path):
  """Found by the tinygrad fuzzer (seed 3131): the same integer sum inside an elementwise kernel of 7 outputs,
  whose overlapping tiles (PADTO(0,4,4)) fold the indices again after Optimize had put the accumulator on top;
  Expand refused the re-buried update. Optimize now canonicalises after its opts too."""
  from uopc.run import run_file
  src = (Path(__file__).parent / "data" / "p7_46.uop").read_text()
  (tmp_path / "p.uop").write_text(src)
  rng = np.random.default_rng(3)
  ins = {"x0": rng.integers(-3, 4, 2).astype(np.int32), "x1": rng.standard_normal((1, 7)).astype(np.float32),
         "x2": rng.standard_normal(7).astype(np.float32), "x3": np.array(0.25, np.float32)}
  s = np.float32((3 * ins["x0"].astype(np.int64) + 1).sum())
  v = s * ins["x1"].reshape(7)
  r = np.log(np.abs(1 / (np.abs(v) + np.float32(0.5))) + np.float32(0.5)) + ins["x2"]
  want = np.where(ins["x3"] < r, r, ins["x3"])
  for target in ("c", "llvm"):
    got = run_file(tmp_path / "p.uop", target=target, inputs=ins).arrays["out"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def pixel_shuffle(c: int, h: int, w: int, r: int = 2) -> Func:
  """tinygrad's pixel shuffle: out[c, y*r + i, x*r + j] = x[c*r*r + i*r + j, y, x]."""
  f = Func("ps")
  x, out = f.param("x", (c * r * r, h, w)), f.param("out", (c, h * r, w * r), out=True)
  f.store(out, f.reshape(f.permute(f.reshape(x, (c, r, r, h, w)), (0, 3, 1, 4, 2)), (c, h * r, w * r)))
  return f


def test_lanes_that_alternate_between_two_rows_load_each_row_as_a_vector(tmp_path):
  """A pixel shuffle's 8 output lanes along a row take x[2c + j, y, 4g .. 4g + 3] for j = 0, 1 in turn: the
  offset of lane l is (8g + l) // 2 + plane * (l % 2), not linear in l, but known per lane once simplified
  (4g + l // 2 + plane * (l % 2)). Sorted by address the lanes are two runs of 4: two vector loads and a
  shuffle instead of 8 scalar loads."""
  f = pixel_shuffle(3, 4, 8)
  assert sorted(u.dtype.count for u in loads(expanded(f, "SPLIT(2,8,u)", AVX2), "x")) == [4, 4]
  assert {u.dtype.count for u in loads(expanded(f, "SPLIT(2,8,u)"), "x")} == {1}  # 4-wide registers: runs of 2, scalar
  x = random_inputs(f, 0)
  want = x["x"].reshape(3, 2, 2, 4, 8).transpose(0, 3, 1, 4, 2).reshape(3, 8, 16)
  (tmp_path / "ps.uop").write_text(f.text())
  for cpu, schedule in (("x86-64-v3", "SPLIT(2,8,u)"), ("portable", "SPLIT(2,8,u)"), ("x86-64-v3", None)):
    out = tmp_path / f"{cpu}-{schedule}"
    pins = parse_schedule([f"{LIB}__ps_k0:{schedule}"]) if schedule else None
    build(tmp_path / "ps.uop", BuildOptions("c", out, name=LIB, schedule=pins, cpu=cpu, print_out=io.StringIO()))
    if cpu == "x86-64-v3" and not _cpu_has("avx2"): continue
    np.testing.assert_array_equal(run_func(ctypes.CDLL(str(out / f"lib{LIB}.so")), f, x)["out"], want)


def test_a_broadcast_pair_of_lanes_stays_scalar_loads():
  """A gemm's two unrolled steps of a row of a are lanes at consecutive addresses out of lane order (the
  unroll varies slowest): runs of 2, shorter than PERMUTED_RUN, stay scalar loads, each broadcast."""
  out = expanded(gemm(16, 6, 16), "SPLIT(1,8,u),SPLIT(0,4,u),SPLIT(4,2,r)")
  assert {u.dtype.count for u in loads(out, "a")} == {1}


def test_a_gpu_reads_rows_across_the_unrolled_steps_as_vectors(tmp_path, monkeypatch):
  """On a GPU, a gemm's 8 upcast rows of a over 4 unrolled steps of k are 32 lanes whose chunks each hold one
  element of 4 rows (the unroll varies slowest); each row's 4 steps are consecutive, so the value is read as 8
  vector loads, the chunks picking their lanes from them, not as 32 scalar loads. A CPU keeps its scalars
  (each is a broadcast there); so does a value of more lanes than ACROSS_LANES. Emulated against numpy."""
  from test_group_reduce import emulated
  opts = "SPLIT(1,4,u),SPLIT(0,8,u),SPLIT(4,4,r)"
  assert sorted(u.dtype.count for u in loads(expanded(gemm(16, 8, 16), opts, GPU), "a")) == [4] * 8
  assert {u.dtype.count for u in loads(expanded(gemm(16, 8, 16), opts, C), "a")} == {1}
  assert {u.dtype.count for u in loads(expanded(gemm(16, 16, 16), "SPLIT(1,4,u),SPLIT(0,8,u),SPLIT(4,8,r)", GPU), "a")} == {1}  # 64 lanes
  rng = np.random.default_rng(5)
  x = {"a": rng.standard_normal((16, 8)).astype(np.float32), "b": rng.standard_normal((8, 16)).astype(np.float32)}
  got = emulated(tmp_path, monkeypatch, gemm(16, 8, 16), x, opts)["c"]
  np.testing.assert_allclose(got.reshape(16, 16), x["a"].astype(np.float64) @ x["b"], rtol=1e-5, atol=1e-5)


def test_a_flipped_row_takes_the_lanes_of_a_contiguous_one(tmp_path):
  """x.flip(-1): each block of lanes reads a block of the row backwards, one vector load and a reversing
  shuffle, so the heuristics give it the two registers of lanes a contiguous read gets (not a gather's 8)."""
  f = Func("flip")
  x, out = f.param("x", (4, 64)), f.param("out", (4, 64), out=True)
  f.store(out, f.let(f"FLIP({x}) {{(False, True)}}"))
  k = kernels_of(f.text(), AVX2)[kernel_name(LIB, "flip", 0)]
  assert str(heuristic_opts(k, AVX2)[0]) == "SPLIT(1,16,u)"
  out_ = expanded(f, "SPLIT(1,16,u)", AVX2)
  assert sorted(u.dtype.count for u in loads(out_, "x")) == [8, 8]
  lib = build_lib(tmp_path, f.text(), None, "flip")
  xs = random_inputs(f, 0)
  np.testing.assert_array_equal(run_func(lib, f, xs)["out"], xs["x"][:, ::-1])


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_lanes_that_all_read_one_element_load_it_once(tmp_path, target):
  """Found by the differential fuzzer: a broadcast whose offset is a lane term, (8g + u) // 8 = g + u // 8 with
  u // 8 = 0 in every lane, is one scalar load splatted (a window of one element took a GEP of a scalar, which
  LLVM rejects)."""
  f = Func("bcast")
  x, out = f.param("x", (2,)), f.param("out", (16,), out=True)
  f.store(out, f.reshape(f.expand(f.reshape(x, (2, 1)), (2, 8)), (16,)))
  assert {u.dtype.count for u in loads(expanded(f, "SPLIT(0,8,u)"), "x")} == {1}
  (tmp_path / "bcast.uop").write_text(f.text())
  xs = np.array([3.5, -2.0], np.float32)
  got = run_file(tmp_path / "bcast.uop", target=target, inputs={"x": xs}).arrays["out"]
  np.testing.assert_array_equal(got, np.repeat(xs, 8))
