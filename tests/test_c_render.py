"""The C renderer on whole kernels: the seed 002 programs, gates, IF blocks, accumulators, local
arrays, run-time sizes, SPECIAL loops, vectors, constants, the signature, and its errors. Every kernel
is compiled with gcc (under ASan/UBSan) and clang with -Wall -Wextra -Werror and run."""
from __future__ import annotations

import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from c_harness import Call, compile_c, have, run_calls
from uopc.diagnostics import CompileError
from uopc.dtype import AddrSpace, dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.linearize import linearize
from uopc.targets.c.render import C_PRELUDE, KernelParam, render_kernel
from uopc.uop import UOp

idx, i32, f32 = dtypes.index, dtypes.int32, dtypes.float32
CONFIGS = [("gcc", True)] + ([("clang", False)] if have("clang") else [])


def c(value, dt=idx) -> UOp: return UOp.const(dt, value)
def param(slot: int, dt=i32) -> UOp: return UOp(Ops.PARAM, dt.ptr(), (), (slot, f"data{slot}"))
def rng(bound, axis: int = 0) -> UOp: return UOp(Ops.RANGE, idx, (bound if isinstance(bound, UOp) else c(bound),), (axis, AxisType.LOOP))
def index(buf: UOp, off: UOp) -> UOp: return UOp(Ops.INDEX, buf.dtype, (buf, off))
def load(buf: UOp, off: UOp, dt=None) -> UOp: return UOp(Ops.LOAD, dt or buf.dtype.base, (index(buf, off),))
def store(buf: UOp, off: UOp, val: UOp, gate: UOp | None = None) -> UOp:
  return UOp(Ops.STORE, dtypes.void, (index(buf, off), val) + ((gate,) if gate is not None else ()))
def end(body: UOp, r: UOp) -> UOp: return UOp(Ops.END, dtypes.void, (body, r))
def sink(*xs: UOp) -> UOp: return UOp(Ops.SINK, dtypes.void, xs)


def run(kernel_sink: UOp, *args, name: str = "kern") -> list:
  """Render, compile with every configured compiler, run; the results must agree; returns the arguments after the call."""
  source = C_PRELUDE + render_kernel(linearize(kernel_sink), name).source
  results = []
  for compiler, sanitize in CONFIGS:
    results.append(run_calls(compile_c(source, compiler, sanitize), [Call(name, args)], sanitize)[0])
  for other in results[1:]:
    for a, b in zip(results[0], other):
      if isinstance(a, np.ndarray): np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
  return list(results[0])


# ---- seed 002 -----------------------------------------------------------------------------------------------
def test_seed002_one_element_add():
  d0, d1, d2 = param(0), param(1), param(2)
  k = sink(store(d0, c(0), load(d1, c(0)).alu(Ops.ADD, load(d2, c(0)))))
  out, _, _ = run(k, np.zeros(1, np.int32), np.array([1], np.int32), np.array([2], np.int32))
  assert out.tolist() == [3]


def test_seed002_add_with_lidx0_is_a_loop():
  d0, d1, d2 = param(0), param(1), param(2)
  lidx0 = UOp(Ops.SPECIAL, idx, (c(3),), "lidx0")
  k = sink(store(d0, lidx0, load(d1, lidx0).alu(Ops.ADD, load(d2, lidx0))))
  src = render_kernel(linearize(k), "E_3").source
  assert "for (int64_t lidx0 = 0; lidx0 < 3; lidx0++) {" in src
  out, _, _ = run(k, np.zeros(3, np.int32), np.array([1, 2, 3], np.int32), np.array([2, 5, 6], np.int32))
  assert out.tolist() == [3, 7, 9]


def test_seed002_int_add_cast_to_float():
  d0, d1, d2 = param(0, f32), param(1), param(2)
  lidx0 = UOp(Ops.SPECIAL, idx, (c(2),), "lidx0")
  k = sink(store(d0, lidx0, UOp(Ops.CAST, f32, (load(d1, lidx0).alu(Ops.ADD, load(d2, lidx0)),))))
  out, _, _ = run(k, np.zeros(2, np.float32), np.array([1, 3], np.int32), np.array([4, 3], np.int32))
  assert out.tolist() == [5.0, 6.0] and out.dtype == np.float32


# ---- memory, gates, blocks ----------------------------------------------------------------------------------
def test_gated_load_gives_alt_and_reads_nothing_when_false():
  # data1 has 3 elements and the loop runs 8 times: ASan fails the test if a false gate still reads
  d0, d1 = param(0), param(1)
  r = rng(8)
  gate = r.alu(Ops.CMPLT, c(3))
  val = UOp(Ops.LOAD, i32, (index(d1, r), c(-7, i32), gate))
  out, _ = run(sink(end(store(d0, r, val), r)), np.zeros(8, np.int32), np.array([10, 11, 12], np.int32))
  assert out.tolist() == [10, 11, 12, -7, -7, -7, -7, -7]


def test_gated_store_writes_only_where_the_gate_holds():
  d0 = param(0)
  r = rng(8)
  out, = run(sink(end(store(d0, r, UOp(Ops.CAST, i32, (r,)), r.alu(Ops.CMPLT, c(3))), r)), np.full(3, 99, np.int32))
  assert out.tolist() == [0, 1, 2]


def test_if_block_guards_its_stores():
  d0 = param(0)
  r = rng(6)
  cond = UOp(Ops.IF, dtypes.void, (r.alu(Ops.MOD, c(2)).alu(Ops.CMPNE, c(0)),))
  st = UOp(Ops.STORE, dtypes.void, (index(d0, r), c(1, i32), cond))
  k = sink(end(UOp(Ops.ENDIF, dtypes.void, (cond, st)), r))
  src = render_kernel(linearize(k), "kern").source
  assert re.search(r"if \(alu\d+\) \{\n\s+\*\(data0\+ridx0\) = 1;\n\s+\}", src), src
  out, = run(k, np.zeros(6, np.int32))
  assert out.tolist() == [0, 1, 0, 1, 0, 1]


def reduce_kernel(n_outer: int, n_inner: int):
  """out[i] = sum_j in[i*n_inner + j] through a REG accumulator (init, loop-carried update, final read)."""
  d0, d1 = param(0, f32), param(1, f32)
  acc = UOp(Ops.BUFFER, f32.ptr(AddrSpace.REG, 1), (), (0, "acc"))
  i, j = rng(n_outer, 0), rng(n_inner, 1)
  init = UOp(Ops.STORE, dtypes.void, (index(UOp(Ops.AFTER, acc.dtype, (acc, i)), c(0)), c(0.0, f32)))
  cur = UOp(Ops.AFTER, acc.dtype, (acc, init, j))
  upd = store(cur, c(0), load(cur, c(0)).alu(Ops.ADD, load(d1, i.alu(Ops.MUL, c(n_inner)).alu(Ops.ADD, j))))
  total = load(UOp(Ops.AFTER, acc.dtype, (acc, end(upd, j))), c(0))
  return sink(end(store(d0, i, total), i))


def test_reduce_through_a_reg_accumulator():
  x = np.arange(12, dtype=np.float32)
  out, _ = run(reduce_kernel(3, 4), np.zeros(3, np.float32), x)
  np.testing.assert_array_equal(out, x.reshape(3, 4).sum(axis=1))


def test_local_buffer_is_a_local_array():
  d0, d1 = param(0), param(1)
  tmp = UOp(Ops.BUFFER, i32.ptr(AddrSpace.LOCAL, 4), (), (0, "tmp"))
  r = rng(4, 0)
  fill = end(store(tmp, r, load(d1, r).alu(Ops.MUL, c(2, i32))), r)
  r2 = rng(4, 1)
  rev = load(UOp(Ops.AFTER, tmp.dtype, (tmp, fill)), c(3).alu(Ops.SUB, r2))
  k = sink(end(store(d0, r2, rev), r2))
  assert "int32_t temp0[4];" in render_kernel(linearize(k), "kern").source
  out, _ = run(k, np.zeros(4, np.int32), np.array([1, 2, 3, 4], np.int32))
  assert out.tolist() == [8, 6, 4, 2]


def test_define_var_is_a_runtime_size_argument():
  d0, d1 = param(0), param(1)
  n = UOp(Ops.DEFINE_VAR, idx, (), ("n", 1, 16))
  r = rng(n)
  k = sink(end(store(d0, r, load(d1, r).alu(Ops.ADD, c(1, i32))), r))
  rk = render_kernel(linearize(k), "kern")
  assert rk.params[-1] == KernelParam("n", 2, "var", idx, False, 1, 16)
  assert rk.source.startswith("void kern(int32_t* restrict data0, const int32_t* restrict data1, int64_t n) {")
  out, _, _ = run(k, np.zeros(8, np.int32), np.arange(8, dtype=np.int32), 5)
  assert out.tolist() == [1, 2, 3, 4, 5, 0, 0, 0]


def test_special_grid_loops_cover_every_thread():
  d0 = param(0)
  g, l = UOp(Ops.SPECIAL, idx, (c(3),), "gidx0"), UOp(Ops.SPECIAL, idx, (c(4),), "lidx0")
  flat = g.alu(Ops.MUL, c(4)).alu(Ops.ADD, l)
  out, = run(sink(store(d0, flat, UOp(Ops.CAST, i32, (flat,)).alu(Ops.MUL, c(10, i32)))), np.zeros(12, np.int32))
  assert out.tolist() == [10 * i for i in range(12)]


# ---- vectors ---------------------------------------------------------------------------------------------------
def test_float4_load_add_swizzle_store():
  d0, d1, d2 = param(0, f32), param(1, f32), param(2, f32)
  r = rng(2)
  base = r.alu(Ops.MUL, c(4))
  v4 = f32.vec(4)
  a, b = load(d1, base, v4), load(d2, base, v4)
  s = a.alu(Ops.ADD, b)
  swz = UOp(Ops.GEP, v4, (s,), (3, 2, 1, 0))
  k = sink(end(store(d0, base, swz), r))
  src = render_kernel(linearize(k), "kern").source
  assert "uopc_float32x4" in src and "memcpy" in src
  x, y = np.arange(8, dtype=np.float32), np.full(8, 0.5, np.float32)
  out, _, _ = run(k, np.zeros(8, np.float32), x, y)
  np.testing.assert_array_equal(out, (x + y).reshape(2, 4)[:, ::-1].reshape(-1))


def test_vector_stack_gep_and_lane_ops_in_16_bit_floats_and_bools():
  d0, d1 = param(0, dtypes.float16), param(1, dtypes.float16)
  h4 = dtypes.float16.vec(4)
  lanes = [load(d1, c(i)) for i in range(4)]
  v = UOp(Ops.STACK, h4, tuple(lanes))
  big = v.alu(Ops.CMPLT, UOp(Ops.CONST, h4, (), 1.0))  # a bool vector
  picked = UOp(Ops.WHERE, h4, (big, v.alu(Ops.MUL, v), UOp(Ops.CONST, h4, (), -0.0)))
  k = sink(*[store(d0, c(i), UOp(Ops.GEP, dtypes.float16, (picked,), (i,))) for i in range(4)])
  x = np.array([0.5, 2.0, -3.0, 0.1], np.float16)
  out, _ = run(k, np.zeros(4, np.float16), x)
  expected = np.where(x < 1.0, (x.astype(np.float32) * x.astype(np.float32)).astype(np.float16), np.float16(-0.0))
  np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_three_lane_int_vector_wraps():
  d0, d1 = param(0), param(1)
  i3 = i32.vec(3)
  v = load(d1, c(0), i3)
  k = sink(store(d0, c(0), v.alu(Ops.ADD, v)))
  out, _ = run(k, np.full(4, 77, np.int32), np.array([2**31 - 1, -5, 7, 1000], np.int32))
  assert out.tolist() == [-2, -10, 14, 77]  # the 4th element is past the vector: untouched
  # its load reads its 3 lanes one by one (a 12-byte memcpy into the 16-byte type went through the stack)
  src = render_kernel(linearize(k), "kern").source
  assert "memcpy(&val" not in src and "{((data1+0))[0], ((data1+0))[1], ((data1+0))[2]}" in src, src


def test_vector_bitcast_and_cast():
  d0, d1 = param(0, dtypes.uint32), param(1, dtypes.float16)
  h2, u = dtypes.float16.vec(2), dtypes.uint32
  pair = load(d1, c(0), h2)
  k = sink(store(d0, c(0), UOp(Ops.BITCAST, u, (pair,))),
           store(d0, c(1), UOp(Ops.CAST, u, (UOp(Ops.GEP, dtypes.float16, (UOp(Ops.CAST, h2, (pair,)),), (1,)),))))
  x = np.array([1.0, 300.75], np.float16)
  out, _ = run(k, np.zeros(2, np.uint32), x)
  assert out.tolist() == [int(x.view(np.uint32)[0]), 300]


# ---- constants ---------------------------------------------------------------------------------------------------
CONST_VALUES = {
  dtypes.bool: [True, False], dtypes.int8: [-128, 127, -1], dtypes.int16: [-32768, 32767], dtypes.int32: [-2**31, 2**31 - 1, -5],
  dtypes.int64: [-2**63, 2**63 - 1, 2**40, -2**40], dtypes.uint8: [255, 0], dtypes.uint16: [65535], dtypes.uint32: [2**32 - 1],
  dtypes.uint64: [2**64 - 1, 2**63],
  dtypes.float16: [math.inf, -math.inf, -0.0, 65504.0, 2.0**-24, 0.1], dtypes.bfloat16: [math.inf, -0.0, 3.0e38, 0.1],
  dtypes.float32: [math.inf, -math.inf, -0.0, 0.1, 3.4028234663852886e38, 1e-45, -2.5],
  dtypes.float64: [math.inf, -math.inf, -0.0, 0.1, 5e-324, 1.7976931348623157e308, 1 / 3],
}
NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.int16: np.int16, dtypes.int32: np.int32, dtypes.int64: np.int64,
      dtypes.uint8: np.uint8, dtypes.uint16: np.uint16, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64,
      dtypes.float16: np.float16, dtypes.bfloat16: ml_dtypes.bfloat16, dtypes.float32: np.float32, dtypes.float64: np.float64}


@pytest.mark.parametrize("dt", list(CONST_VALUES), ids=str)
def test_constants_are_exact(dt):
  values = CONST_VALUES[dt] + ([math.nan] if dt.is_float() else [])
  d0 = param(0, dt)
  out, = run(sink(*[store(d0, c(i), c(v, dt)) for i, v in enumerate(values)]), np.zeros(len(values), NP[dt]))
  expected = np.array(values, NP[dt])
  if dt.is_float():
    assert np.isnan(out[-1]) and np.array_equal(out[:-1].view(np.uint8), expected[:-1].view(np.uint8))
  else: assert out.tolist() == expected.tolist()


# ---- the signature, names, determinism -----------------------------------------------------------------------------
def test_signature_orders_buffers_by_slot_then_vars_by_name_and_voids_unused():
  d2, d0, d1 = param(2, f32), param(0, f32), param(1, f32)
  b, a = UOp(Ops.DEFINE_VAR, idx, (), ("b", 0, 9)), UOp(Ops.DEFINE_VAR, idx, (), ("a", 0, 9))
  k = sink(store(d0, a, load(d2, b)), UOp(Ops.GROUP, dtypes.void, (d1,)))
  rk = render_kernel(linearize(k), "sig")
  assert [(p.name, p.slot, p.kind, p.written) for p in rk.params] == \
    [("data0", 0, "buffer", True), ("data1", 1, "buffer", False), ("data2", 2, "buffer", False), ("a", 3, "var", False), ("b", 4, "var", False)]
  assert rk.source.splitlines()[0] == \
    "void sig(float* restrict data0, const float* restrict data1, const float* restrict data2, int64_t a, int64_t b) {"
  assert "(void)data1;" in rk.source
  compile_c(C_PRELUDE + rk.source, "gcc", shared=False)


def test_render_is_deterministic_and_names_are_readable():
  texts = {render_kernel(linearize(reduce_kernel(3, 4)), "red").source for _ in range(3)}
  assert len(texts) == 1
  text = texts.pop()
  assert "acc0[1]" in text and "ridx0" in text and "ridx1" in text and "val0" in text and "alu0" in text


def test_dead_values_are_not_emitted():
  d0, d1 = param(0), param(1)
  unused = load(d1, c(1)).alu(Ops.MUL, c(3, i32))  # reachable only through a GROUP: no side effect, no reader
  k = sink(store(d0, c(0), c(4, i32)), UOp(Ops.GROUP, dtypes.void, (unused,)))
  rk = render_kernel(linearize(k), "dead")
  assert "val" not in rk.source and "(void)data1;" in rk.source
  for compiler, _ in CONFIGS: compile_c(C_PRELUDE + rk.source, compiler, shared=False)


# ---- errors -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad,message", [
  (lambda d: UOp(Ops.WMMA, f32, (load(d, c(0)),) * 3, ()), "cannot render op WMMA"),
  (lambda d: UOp(Ops.IDIV, f32, (load(d, c(0)), load(d, c(1)))), "IDIV on f32"),
  (lambda d: UOp(Ops.BITCAST, dtypes.float64, (load(d, c(0)),)), "BITCAST"),
  (lambda d: UOp(Ops.CUSTOM, f32, (), "rand()"), "cannot render op CUSTOM"),
])
def test_unrenderable_input_is_a_compile_error_naming_the_op(bad, message):
  d0, d1 = param(0, f32), param(1, f32)
  with pytest.raises(CompileError) as e:
    render_kernel(linearize(sink(store(d0, c(0), bad(d1)))), "bad")
  assert message in str(e.value)


def test_bad_names_are_compile_errors():
  d0 = param(0)
  with pytest.raises(CompileError, match="kernel name"):
    render_kernel(linearize(sink(store(d0, c(0), c(1, i32)))), "not a name")
  v = UOp(Ops.DEFINE_VAR, idx, (), ("int", 0, 4))
  with pytest.raises(CompileError, match="DEFINE_VAR name"):
    render_kernel(linearize(sink(store(d0, v, c(1, i32)))), "k")


# ---- the seed samples, from .uop text ---------------------------------------------------------------------------
SAMPLES = Path(__file__).parent.parent / "samples"


def sample_kernel(name: str):
  from uopc.frontend import load_module
  (entry,) = load_module(SAMPLES / f"{name}.uop").entries
  return entry.sink, entry.name


@pytest.mark.parametrize("name,inputs,expected", [
  ("seed002_add1", ([1], [2]), [3]),
  ("seed002_add1_named", ([1], [2]), [3]),
  ("seed001_alu", ([1], [2]), [3]),
  ("seed002_add2", ([1, 3], [2, 5]), [3, 8]),
  ("seed002_cast", ([1, 3], [4, 3]), [5.0, 6.0]),
])
def test_seed_samples_give_the_results_the_seeds_state(name, inputs, expected):
  k, entry = sample_kernel(name)
  out_dt = np.float32 if name.endswith("cast") else np.int32
  out, *_ = run(k, np.zeros(len(expected), out_dt), *(np.array(x, np.int32) for x in inputs), name=entry)
  assert out.tolist() == expected and out.dtype == out_dt


def test_seed001_special_is_a_loop_over_all_ten_threads():
  # every thread writes data1[gidx0] + data2[gidx0] to data0[0]: the last one (gidx0 = 9) is what remains
  k, entry = sample_kernel("seed001_special")
  src = render_kernel(linearize(k), entry).source
  assert "for (int64_t gidx0 = 0; gidx0 < 10; gidx0++) {" in src
  out, _, _ = run(k, np.zeros(1, np.int32), np.arange(10, dtype=np.int32), np.full(10, 100, np.int32), name=entry)
  assert out.tolist() == [109]


def test_seed001_loop_and_store_samples_compile():
  for name in ("seed001_loop", "seed001_store"):
    k, entry = sample_kernel(name)
    for compiler, _ in CONFIGS: compile_c(C_PRELUDE + render_kernel(linearize(k), entry).source, compiler, shared=False)


def test_barrier_orders_only_and_is_refused_inside_a_thread_loop():
  d0, d1 = param(0), param(1)
  tmp = UOp(Ops.BUFFER, i32.ptr(AddrSpace.LOCAL, 2), (), (0, "tmp"))
  fill = store(tmp, c(0), load(d1, c(0)))
  bar = UOp(Ops.BARRIER, dtypes.void, (fill,))
  ok = sink(store(d0, c(0), load(UOp(Ops.AFTER, tmp.dtype, (tmp, bar)), c(0))))
  out, _ = run(ok, np.zeros(1, np.int32), np.array([42], np.int32))
  assert out.tolist() == [42]
  lidx0 = UOp(Ops.SPECIAL, idx, (c(2),), "lidx0")
  per_thread = UOp(Ops.BARRIER, dtypes.void, (store(tmp, lidx0, load(d1, lidx0)),))
  bad = sink(store(d0, lidx0, load(UOp(Ops.AFTER, tmp.dtype, (tmp, per_thread)), c(1).alu(Ops.SUB, lidx0))))
  with pytest.raises(CompileError, match="BARRIER inside the loop over thread index lidx0"):
    render_kernel(linearize(bad), "bad")
