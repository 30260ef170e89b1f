"""The reference emulator (uopc.emulator): semantics against hand-computed values, GPU-style
workgroups with LOCAL memory and BARRIER, and the located faults it reports."""
import numpy as np
import pytest
from ml_dtypes import bfloat16

from uopc.diagnostics import CompileError
from uopc.dtype import dtypes
from uopc.emulator import EmulationError, emulate, round_to, threefry2x32, trunc_div, trunc_mod
from uopc.frontend import parse_source
from uopc.stages.linearize import linearize


def run_kernel(body: str, buffers: dict, variables=None, path="t.uop"):
  """Parse `kernel k { body }`, linearize it and emulate it on `buffers` (slot -> array, in place)."""
  m = parse_source("kernel k {\n" + body.strip() + "\n}\n", path)
  emulate(linearize(m.entries[0].sink), buffers, variables or {}, m.loc_of)
  return m


def line_of(body: str, needle: str) -> int:
  """The line of `needle` in the file run_kernel makes of `body` (its first line is `kernel k {`)."""
  return 2 + next(i for i, line in enumerate(body.strip().splitlines()) if needle in line)


def fault(body: str, buffers: dict, variables=None) -> str:
  with pytest.raises(EmulationError) as e: run_kernel(body, buffers, variables)
  assert len(e.value.diagnostics) == 1
  return e.value.format()


def binary_kernel(op: str, dt: str) -> str:
  return f"""
  %out = PARAM {{(0, "out")}} : ptr<{dt}>
  %a = PARAM {{(1, "a")}} : ptr<{dt}>
  %b = PARAM {{(2, "b")}} : ptr<{dt}>
  %i = RANGE({{n}}) {{(0, AxisType.LOOP)}} : index
  %ap = INDEX(%a, %i) : ptr<{dt}>
  %av = LOAD(%ap) : {dt}
  %bp = INDEX(%b, %i) : ptr<{dt}>
  %bv = LOAD(%bp) : {dt}
  %r = {op}(%av, %bv) : {dt}
  %op = INDEX(%out, %i) : ptr<{dt}>
  %st = STORE(%op, %r)
  %e = END(%st, %i)
  SINK(%e)"""


def binary(op: str, dt: str, a: list, b: list, np_dt) -> np.ndarray:
  a, b = np.array(a, np_dt), np.array(b, np_dt)
  out = np.zeros(len(a), np_dt)
  run_kernel(binary_kernel(op, dt).replace("{n}", str(len(a))), {0: out, 1: a, 2: b})
  return out


# ---- integer semantics (SPEC-NOTES): hand-computed expectations --------------------------------------
def test_idiv_truncates_and_mod_takes_the_dividends_sign():
  assert binary("IDIV", "i32", [7, -7, 7, -7, -2**31], [2, 2, -2, -2, -1], np.int32).tolist() == [3, -3, -3, 3, -2**31]
  assert binary("MOD", "i32", [7, -7, 7, -7, -2**31], [2, 2, -2, -2, -1], np.int32).tolist() == [1, -1, 1, -1, 0]


def test_integer_add_and_mul_wrap():
  assert binary("ADD", "i8", [127, -128], [1, -1], np.int8).tolist() == [-128, 127]
  assert binary("MUL", "u8", [16, 255], [16, 255], np.uint8).tolist() == [0, 1]


def test_shr_is_arithmetic_on_signed_and_logical_on_unsigned():
  assert binary("SHR", "i8", [-128, -1, 64], [3, 7, 2], np.int8).tolist() == [-16, -1, 16]
  assert binary("SHR", "u8", [128, 255], [3, 7], np.uint8).tolist() == [16, 1]


def test_trunc_div_and_mod_helpers_on_int64_extremes():
  a = np.array([-2**63, -9, 9], np.int64)
  b = np.array([-1, 4, -4], np.int64)
  assert trunc_div(a, b).tolist() == [-2**63, -2, -2]
  assert trunc_mod(a, b).tolist() == [0, -1, 1]


# ---- float semantics ------------------------------------------------------------------------------------
def test_max_propagates_nan_and_cmpne_is_true_for_nan():
  nan = float("nan")
  out = binary("MAX", "f32", [nan, 1.0, -0.5], [2.0, nan, -1.5], np.float32)
  assert np.isnan(out[0]) and np.isnan(out[1]) and out[2] == -0.5
  a, b = np.array([nan, 1.0], np.float32), np.array([nan, 1.0], np.float32)
  out = np.zeros(2, np.bool_)
  run_kernel(binary_kernel("CMPNE", "f32").replace("{n}", "2").replace("%r = CMPNE(%av, %bv) : f32",
             "%r = CMPNE(%av, %bv) : bool").replace('ptr<f32>\n  %a', 'ptr<bool>\n  %a', 1), {0: out, 1: a, 2: b})
  assert out.tolist() == [True, False]


def test_float16_add_rounds_once_to_nearest_even():
  # 2048 + 1 = 2049 is a tie between 2048 and 2050 in float16: even mantissa wins (2048); 2048 + 3 -> 2052
  out = binary("ADD", "f16", [2048, 2048], [1, 3], np.float16)
  assert out.tolist() == [2048, 2052]


def test_round_to_bfloat16_from_double_rounds_once():
  # 1 + 2^-8 + 2^-40 is just above the tie 1 + 2^-8 between bfloat16 1 and 1 + 2^-7: it rounds up.
  # Through float32 with round-to-nearest it would lose the 2^-40 and round the tie to even (1.0).
  x = np.array([1 + 2**-8 + 2**-40, 1 + 2**-8, -(1 + 3 * 2**-8)], np.float64)
  assert round_to(x, dtypes.bfloat16).astype(np.float64).tolist() == [1 + 2**-7, 1.0, -(1 + 2**-6)]
  assert np.isinf(round_to(np.array([3.4e38 * 2], np.float64), dtypes.bfloat16)[0])


def test_threefry_matches_a_hand_rolled_reference():
  def ref(x: int, key: int) -> int:  # straight from SPEC-NOTES, in Python integers
    m = 0xFFFFFFFF
    rotl = lambda v, r: ((v << r) | (v >> (32 - r))) & m  # noqa: E731
    k0, k1 = key & m, key >> 32
    ks = [k1, k0 ^ k1 ^ 0x1BD11BDA, k0]
    x0, x1 = (x & m) + ks[2] & m, (x >> 32) + ks[0] & m
    for i in range(5):
      for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
        x0 = x0 + x1 & m
        x1 = rotl(x1, r) ^ x0
      x0, x1 = x0 + ks[i % 3] & m, x1 + ks[(i + 1) % 3] + i + 1 & m
    return x1 << 32 | x0
  xs, keys = [0, 1, 2**64 - 1, 0x123456789ABCDEF0], [0, 7, 2**63, 0xDEADBEEFCAFEF00D]
  got = threefry2x32(np.array(xs, np.uint64), np.array(keys, np.uint64))
  assert got.tolist() == [ref(x, k) for x, k in zip(xs, keys)]


# ---- kernels with threads -----------------------------------------------------------------------------
REVERSE = """
  %out = PARAM {(0, "out")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %tmp = BUFFER {(0, "tmp")} : ptr<f32, local, 4>
  %g = SPECIAL(2) {"gidx0"} : index
  %l = SPECIAL(4) {"lidx0"} : index
  %g4 = MUL(%g, 4) : index
  %gi = ADD(%g4, %l) : index
  %xp = INDEX(%x, %gi) : ptr<f32>
  %xv = LOAD(%xp) : f32
  %tp = INDEX(%tmp, %l) : ptr<f32, local, 4>
  %st = STORE(%tp, %xv)
  %b = BARRIER(%st)
  %rl = SUB(3, %l) : index
  %tmp2 = AFTER(%tmp, %b) : ptr<f32, local, 4>
  %rp = INDEX(%tmp2, %rl) : ptr<f32, local, 4>
  %rv = LOAD(%rp) : f32
  %op = INDEX(%out, %gi) : ptr<f32>
  %st2 = STORE(%op, %rv)
  SINK(%st2)"""


def test_workgroups_reverse_through_local_memory_with_a_barrier():
  x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
  run_kernel(REVERSE, {0: out, 1: x})
  assert out.tolist() == [3, 2, 1, 0, 7, 6, 5, 4]


def test_vector_load_store_and_gep():
  body = """
  %out = PARAM {(0, "out")} : ptr<i32>
  %x = PARAM {(1, "x")} : ptr<i32>
  %xp = INDEX(%x, 2) : ptr<i32>
  %v = LOAD(%xp) : i32x4
  %v3 = GEP(%v) {(3,)} : i32
  %v0 = GEP(%v) {(0,)} : i32
  %v1 = GEP(%v) {(1,)} : i32
  %s = ADD(%v3, %v0) : i32
  %w = STACK(%s, %v1) : i32x2
  %op = INDEX(%out, 1) : ptr<i32>
  %st = STORE(%op, %w)
  SINK(%st)"""
  x, out = np.arange(10, 16, dtype=np.int32), np.zeros(3, np.int32)
  run_kernel(body, {0: out, 1: x})
  assert out.tolist() == [0, 15 + 12, 13]


def test_gated_load_reads_the_alternative_and_does_not_fault():
  body = """
  %out = PARAM {(0, "out")} : ptr<i32>
  %x = PARAM {(1, "x")} : ptr<i32>
  %i = RANGE(4) {(0, AxisType.LOOP)} : index
  %ok = CMPLT(%i, 2) : bool
  %i10 = ADD(%i, 10) : index
  %xp10 = INDEX(%x, %i10) : ptr<i32>
  %v = LOAD(%xp10, -1, %ok) : i32
  %xp = INDEX(%x, %i) : ptr<i32>
  %w = LOAD(%xp, 0, %ok) : i32
  %s = ADD(%v, %w) : i32
  %op = INDEX(%out, %i) : ptr<i32>
  %st = STORE(%op, %s)
  %e = END(%st, %i)
  SINK(%e)"""
  with pytest.raises(EmulationError, match="out-of-bounds load from 'x'"):
    run_kernel(body, {0: np.zeros(4, np.int32), 1: np.arange(4, dtype=np.int32)})
  x, out = np.arange(12, dtype=np.int32), np.zeros(4, np.int32)
  run_kernel(body, {0: out, 1: x})
  assert out.tolist() == [10, 12, -1, -1]


# ---- planted faults, each located at its source line --------------------------------------------------
def test_planted_out_of_bounds_store_is_located():
  body = """
  %out = PARAM {(0, "out")} : ptr<i32>
  %i = RANGE(5) {(0, AxisType.LOOP)} : index
  %op = INDEX(%out, %i) : ptr<i32>
  %st = STORE(%op, 1)
  %e = END(%st, %i)
  SINK(%e)"""
  msg = fault(body, {0: np.zeros(4, np.int32)})
  assert msg.splitlines()[0] == f"t.uop:{line_of(body, '%st =')}:3: error: out-of-bounds store to 'out': the kernel accesses element 4, but it has 4 elements"
  assert msg.splitlines()[1:] == []  # no source text was handed over; with it the caret line follows


def test_planted_missing_barrier_is_located():
  body = REVERSE.replace("%b = BARRIER(%st)", "%b = GROUP(%st)")
  msg = fault(body, {0: np.zeros(8, np.float32), 1: np.zeros(8, np.float32)})
  assert msg.startswith(f"t.uop:{line_of(body, '%rv = LOAD')}:3: error: missing BARRIER: thread 0 of workgroup gidx0=0 reads element 3 of LOCAL 'tmp', "
                        "which thread 3 wrote with no BARRIER in between")


def test_planted_uninitialised_local_read_is_located():
  body = REVERSE.replace("%st = STORE(%tp, %xv)", "%lt3 = CMPLT(%l, 3) : bool\n  %st = STORE(%tp, %xv, %lt3)")
  msg = fault(body, {0: np.zeros(8, np.float32), 1: np.zeros(8, np.float32)})
  assert msg.startswith(f"t.uop:{line_of(body, '%rv = LOAD')}:3: error: read of uninitialised LOCAL memory 'tmp': thread 0 of workgroup gidx0=0 "
                        "reads element 3, which no thread has written")


def test_two_threads_storing_one_local_element_at_once_is_a_race():
  body = REVERSE.replace("%tp = INDEX(%tmp, %l)", "%tp = INDEX(%tmp, 0)")
  assert "threads 0 and 1 both write element 0 of LOCAL 'tmp'" in fault(body, {0: np.zeros(8, np.float32), 1: np.zeros(8, np.float32)})


def test_barrier_in_divergent_code_is_reported():
  body = """
  %x = PARAM {(0, "x")} : ptr<f32>
  %l = SPECIAL(4) {"lidx0"} : index
  %c = CMPLT(%l, 2) : bool
  %if = IF(%c)
  %b = BARRIER(%if)
  %end = ENDIF(%if)
  SINK(%b, %end)"""
  assert "BARRIER reached by only some threads" in fault(body, {0: np.zeros(1, np.float32)})


def test_division_by_zero_is_reported_only_where_it_runs():
  body = binary_kernel("IDIV", "i32").replace("{n}", "2")
  assert "undefined behaviour: IDIV by zero" in fault(body, {0: np.zeros(2, np.int32), 1: np.ones(2, np.int32), 2: np.array([1, 0], np.int32)})


_CAST_IN_A_WHERE = """
  %out = PARAM {(0, "out")} : ptr<i32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %i = RANGE(4) {(0, AxisType.LOOP)} : index
  %xp = INDEX(%x, %i) : ptr<f32>
  %xv = LOAD(%xp) : f32
  %big = CAST(%xv) : i32
  %ok = CMPLT(%xv, 100.0) : bool
  %v = WHERE(%ok, %big, 7) : i32
  %neg = CMPLT(%big, 0) : bool
  %w = WHERE(%neg, 1, %v) : i32
  %op = INDEX(%out, %i) : ptr<i32>
  %st = STORE(%op, VALUE)
  %e = END(%st, %i)
  SINK(%e)"""


def test_an_out_of_range_cast_is_poison_a_where_may_discard_but_a_store_may_not_use():
  """tinygrad's T5 bucket casts log(0) = -inf to int32 in the arm its `where` discards: no undefined behaviour
  there. Where the value is used (stored, or through a comparison that decides a WHERE), it is reported at the CAST."""
  x = np.array([1.5, 3e10, 5e10, 2.0], np.float32)
  out = np.zeros(4, np.int32)
  run_kernel(_CAST_IN_A_WHERE.replace("VALUE", "%v"), {0: out, 1: x})
  assert out.tolist() == [1, 7, 7, 2]
  for value in ("%big", "%w"):
    body = _CAST_IN_A_WHERE.replace("VALUE", value)
    msg = fault(body, {0: np.zeros(4, np.int32), 1: x})
    assert "undefined behaviour: CAST of an out-of-range float to" in msg and "whose value STORE uses" in msg, msg
    assert f":{line_of(body, '%big = CAST')}:" in msg, msg


def test_missing_variable_and_wrong_buffer_dtype_are_diagnostics():
  body = """
  %out = PARAM {(0, "out")} : ptr<f32>
  %n = DEFINE_VAR {("n", 1, 8)} : index
  %i = RANGE(%n) {(0, AxisType.LOOP)} : index
  %op = INDEX(%out, %i) : ptr<f32>
  %st = STORE(%op, 1.0)
  %e = END(%st, %i)
  SINK(%e)"""
  assert "no value for DEFINE_VAR 'n'" in fault(body, {0: np.zeros(4, np.float32)})
  assert "outside its range [1, 8]" in fault(body, {0: np.zeros(4, np.float32)}, {"n": 9})
  assert "buffer 'out' holds int32, the program reads f32" in fault(body, {0: np.zeros(4, np.int32)}, {"n": 2})
  out = np.zeros(4, np.float32)
  run_kernel(body, {0: out}, {"n": 3})
  assert out.tolist() == [1, 1, 1, 0]


def test_emulation_error_is_a_compile_error():
  assert issubclass(EmulationError, CompileError)
  assert bfloat16  # ml_dtypes is what the emulator rounds with
