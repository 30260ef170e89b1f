"""The text front end: samples, dtype derivation, legacy normalisation, entries and roots, errors.

Expected IR is built directly with UOp constructors (never through the printer)."""
import math
import struct
from pathlib import Path

import pytest

from uopc.diagnostics import CompileError, Loc
from uopc.dtype import AddrSpace, dtypes
from uopc.frontend import load_module, parse_source
from uopc.ops import AxisType, Ops
from uopc.uop import UOp

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "samples").glob("*.uop"))
i32p = dtypes.int32.ptr()


def idx(v): return UOp.const(dtypes.index, v)
def param(slot, name, dt=i32p): return UOp(Ops.PARAM, dt, (), (slot, name))
def sink(*roots): return UOp(Ops.SINK, dtypes.void, tuple(roots))
def one_sink(text): return parse_source(text, "t.uop").entries[0].sink
def errors(text):
  with pytest.raises(CompileError) as e: parse_source(text, "t.uop")
  return [(d.loc.line, d.loc.col, d.message) if d.loc else (None, None, d.message) for d in e.value.diagnostics]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_parses(path):
  m = load_module(path)
  assert m.entries and all(e.sink.op is Ops.SINK for e in m.entries)


def _add_kernel(data0_dt, index, value_of):
  """seed 002's kernel: data0[index] = value_of(data1[index] + data2[index])."""
  loads = [UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.INDEX, i32p, (param(k, f"data{k}"), index)),)) for k in (1, 2)]
  out = UOp(Ops.INDEX, data0_dt, (param(0, "data0", data0_dt), index))
  return sink(UOp(Ops.STORE, dtypes.void, (out, value_of(UOp(Ops.ADD, dtypes.int32, tuple(loads))))))


def test_seed002_listings_normalise_to_modern_ir():
  m = load_module(SAMPLES[0].parent / "seed002_add1.uop")
  assert m.entries[0].name == "seed002_add1" and m.entries[0].kind == "kernel"
  assert m.entries[0].sink is _add_kernel(i32p, idx(0), lambda v: v)
  lidx0 = UOp(Ops.SPECIAL, dtypes.index, (idx(2),), "lidx0")
  assert load_module(SAMPLES[0].parent / "seed002_add2.uop").entries[0].sink is _add_kernel(i32p, lidx0, lambda v: v)
  f32p = dtypes.float32.ptr()
  cast = load_module(SAMPLES[0].parent / "seed002_cast.uop").entries[0].sink
  assert cast is _add_kernel(f32p, lidx0, lambda v: UOp(Ops.CAST, dtypes.float32, (v,)))


def test_seed002_listing_is_its_named_twin():
  listing = load_module(SAMPLES[0].parent / "seed002_add1.uop").entries[0].sink
  assert listing is load_module(SAMPLES[0].parent / "seed002_add1_named.uop").entries[0].sink


def test_numbered_listing_inside_a_block_and_names():
  m = parse_source("kernel k {\n0 UOps.DEFINE_GLOBAL : ptr.dtypes.int [] (0, 'data0', True)\n"
                   "1 UOps.STORE : [0, 0, 0] None\n}\n", "t.uop")
  assert m.names[param(0, "data0")] == "0"
  with pytest.raises(CompileError): parse_source("0 UOps.STORE : [3, 3, 3] None\n")


# ---- legacy forms, one by one ---------------------------------------------------------------------------
def test_define_global_with_element_dtype_becomes_a_pointer_param():
  s = one_sink("%g = DEFINE_GLOBAL {(3, 'out', True)} : f32\nSINK(%g)")
  assert s.src[0] is param(3, "out", dtypes.float32.ptr())


def test_define_local_becomes_a_local_buffer():
  s = one_sink("%l = DEFINE_LOCAL {('temp', 16)} : f32\nSINK(%l)")
  assert s.src[0] is UOp(Ops.BUFFER, dtypes.float32.ptr(AddrSpace.LOCAL, 16), (), (0, "temp"))
  assert one_sink("%l = DEFINE_LOCAL {'t'} : ptr<f32, local, 8>\nSINK(%l)").src[0].dtype.size == 8


def test_old_style_load_and_store_get_an_index():
  s = one_sink("%b = PARAM {(0, 'b')} : ptr<f32>\n%i = CONST {2} : i32\n%v = LOAD(%b, %i)\nSTORE(%b, %i, %v)")
  ptr = UOp(Ops.INDEX, dtypes.float32.ptr(), (param(0, "b", dtypes.float32.ptr()), idx(2)))
  assert s is sink(UOp(Ops.STORE, dtypes.void, (ptr, UOp(Ops.LOAD, dtypes.float32, (ptr,)))))


def test_alu_takes_its_op_from_the_arg():
  s = one_sink("%a = CONST {1.5}\n%n = ALU(%a) {UnaryOps.NEG}\n%w = ALU(%n, %a, %a) {TernaryOps.WHERE} : f32\nSINK(%w)")
  a = UOp.const(dtypes.float32, 1.5)
  assert s.src[0] is UOp(Ops.WHERE, dtypes.float32, (UOp(Ops.NEG, dtypes.float32, (a,)), a, a))


def test_special_tuple_arg_becomes_a_bound():
  s = one_sink("%s = SPECIAL {(1, 'gidx1', 7)} : dtypes.int\nSINK(%s)")
  assert s.src[0] is UOp(Ops.SPECIAL, dtypes.index, (idx(7),), "gidx1")


def test_loop_endloop_become_range_end_over_the_body():
  text = ("%b = PARAM {(0, 'b')} : ptr<i32>\n%s = CONST {2} : i32\n%e = CONST {10} : i32\n"
          "%l = LOOP(%s, %e) : dtypes.int\n%v = CAST(%l) : i32\nSTORE(%b, %l, %v)\nSTORE(%b, %s, %v)\nENDLOOP(%l)\n")
  rng = UOp(Ops.RANGE, dtypes.index, (idx(8),), (0, AxisType.LOOP))
  i = UOp(Ops.ADD, dtypes.index, (rng, idx(2)))
  v = UOp(Ops.CAST, dtypes.int32, (i,))
  b = param(0, "b")
  stores = [UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, i32p, (b, at)), v)) for at in (i, idx(2))]
  assert one_sink(text) is sink(UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(stores)), rng)))


def test_empty_loop_ends_a_group_and_single_body_is_the_op_itself():
  empty = one_sink("%l = LOOP(0, 10)\nENDLOOP(%l)")
  rng = UOp(Ops.RANGE, dtypes.index, (idx(10),), (0, AxisType.LOOP))
  assert empty is sink(UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, ()), rng)))
  one = one_sink("%b = PARAM {(0, 'b')} : ptr<i32>\n%r = RANGE(4)\n%c = CAST(%r) : i32\nSTORE(%b, %r, %c)\nENDRANGE(%r)")
  assert one.src[0].op is Ops.END and one.src[0].src[0].op is Ops.STORE


def test_assign_is_store_then_after():
  s = one_sink("%b = PARAM {(0, 'b')} : ptr<f32>\n%p = INDEX(%b, 0)\n%x = CONST {1.0}\n%a = ASSIGN(%p, %x)")
  p = UOp(Ops.INDEX, dtypes.float32.ptr(), (param(0, "b", dtypes.float32.ptr()), idx(0)))
  assert s is sink(UOp(Ops.STORE, dtypes.void, (p, UOp.const(dtypes.float32, 1.0))))  # the AFTER is unused
  used = one_sink("%b = PARAM {(0, 'b')} : ptr<f32>\n%p = INDEX(%b, 0)\n%a = ASSIGN(%p, 1.0)\n%v = LOAD(%a)\nSTORE(%p, %v)")
  value = used.src[0].src[1].src[0]  # INDEX(AFTER(buffer, STORE), offset): memory is ordered on the buffer
  assert len(used.src) == 1 and value.op is Ops.INDEX and value.src[1] is idx(0)
  assert value.src[0].op is Ops.AFTER and value.src[0].src[0] is param(0, "b", dtypes.float32.ptr())
  assert value.src[0].src[1].op is Ops.STORE


def test_vconst_and_vectorize_are_stacks():
  s = one_sink("%v = VCONST {(1.0, 2.0, 3.0)} : f32\n%w = VECTORIZE(%v, %v) : f32x3\nSINK(%v)")
  assert s.src[0] is UOp(Ops.STACK, dtypes.float32.vec(3), tuple(UOp.const(dtypes.float32, x) for x in (1.0, 2.0, 3.0)))


def test_reduce_axis_and_cast_arg():
  s = one_sink("%x = PARAM([2, 3]) {(0, 'x')} : i32\n%r = REDUCE_AXIS(%x) {(BinaryOps.ADD, (1,))}\n"
               "%c = CAST(%r) {dtypes.float}\nSINK(%c)")
  x = UOp(Ops.PARAM, dtypes.int32, (UOp.shape_of((2, 3)),), (0, "x"))
  assert s.src[0] is UOp(Ops.CAST, dtypes.float32, (UOp(Ops.REDUCE, dtypes.int32, (x,), (Ops.ADD, (1,))),))


def test_define_acc_is_an_initialised_register():
  s = one_sink("%acc = DEFINE_ACC(0.0) {(0,)} : f32\n%v = LOAD(%acc)\n%a = ASSIGN(%acc, ADD_PLACEHOLDER)".replace(
    "ADD_PLACEHOLDER", "%v") + "\n%w = LOAD(%a)\nSINK(%w)")
  reg = UOp(Ops.BUFFER, dtypes.float32.ptr(AddrSpace.REG, 1), (), (0, "acc0"))
  p = UOp(Ops.INDEX, reg.dtype, (reg, idx(0)))
  init = UOp(Ops.STORE, dtypes.void, (p, UOp.const(dtypes.float32, 0.0)))
  acc = UOp(Ops.INDEX, reg.dtype, (UOp(Ops.AFTER, reg.dtype, (reg, init)), idx(0)))
  update = UOp(Ops.STORE, dtypes.void, (acc, UOp(Ops.LOAD, dtypes.float32, (acc,))))
  assert s is sink(UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, reg.dtype, (UOp(Ops.AFTER, reg.dtype, (reg, update)), idx(0))),)))


def test_integer_const_with_float_dtype_stays_as_written():
  c = one_sink("%c = CONST {1} : f32\n%d = RECIP(%c)\nSINK(%d)").src[0].src[0]
  assert c.arg == 1 and type(c.arg) is int and c.dtype is dtypes.float32


# ---- derived dtypes, literals, entries ------------------------------------------------------------------
def test_derived_dtypes():
  s = one_sink("%a = CONST {True}\n%b = CONST {3}\n%f = CONST {2.5}\n%v = STACK(%f, %f) : f32x2\n"
               "%lt = CMPLT(%v, %v)\n%w = WHERE(%a, %f, %f)\n%g = GEP(%v) {(1,)}\n%g2 = GEP(%v) {(0, 1)}\n"
               "%r = RANGE(%b)\nSINK(%lt, %w, %g, %g2, %r)")
  assert [u.dtype for u in s.src] == [dtypes.bool.vec(2), dtypes.float32, dtypes.float32, dtypes.float32.vec(2), dtypes.index]
  assert s.src[0].src[0].src[0].dtype is dtypes.float32


def test_inline_literals_take_the_first_operand_dtype():
  s = one_sink("%x = CONST {1.0} : f16\n%y = MUL(%x, 2)\n%c = CMPNE(%y, 3.5)\n%w = WHERE(%c, %x, 0.5)\nSINK(%w)")
  w = s.src[0]
  assert w.src[2] is UOp.const(dtypes.float16, 0.5) and w.src[0].src[1] is UOp.const(dtypes.float16, 3.5)
  assert w.src[0].src[0].src[1] is UOp.const(dtypes.float16, 2)


def test_arg_literals_keep_exact_values():
  s = one_sink("%c = CUSTOM {(-0.0, nan, -inf, 1e-3, 0x1F, -7, 'a\\'b', \"q\", (), (1,), None, True, "
               "AxisType.REDUCE, AddrSpace.LOCAL, Ops.ADD, BinaryOps.MAX, dtypes.float, ptr<i8, local, 4>, f32x4)} : void")
  a = s.src[0].arg
  assert struct.pack("<d", a[0]) == struct.pack("<d", -0.0) and math.isnan(a[1]) and a[2] == -math.inf
  assert a[3:] [:3] == (1e-3, 31, -7) and a[6:10] == ("a'b", "q", (), (1,))
  assert a[10:] == (None, True, AxisType.REDUCE, AddrSpace.LOCAL, Ops.ADD, Ops.MAX, dtypes.float32,
                    dtypes.int8.ptr(AddrSpace.LOCAL, 4), dtypes.float32.vec(4))


def test_ranges_without_arg_are_distinct_loops():
  s = one_sink("%a = RANGE(4)\n%b = RANGE(4)\n%c = ADD(%a, %b)\nSINK(%c)")
  a, b = s.src[0].src
  assert a is not b and (a.arg, b.arg) == ((0, AxisType.LOOP), (1, AxisType.LOOP))


def test_entries_kinds_and_implicit_entry():
  m = parse_source("kernel a {\n  SINK\n}\n%x = PARAM([4]) {(0, 'x')} : f32\nSTORE(%x, %x)\n"
                   "func b {\n  SINK\n}\n", "dir/my-prog.uop")
  assert [(e.name, e.kind) for e in m.entries] == [("a", "kernel"), ("my_prog", "func"), ("b", "func")]
  assert m.entries[0].loc == Loc("dir/my-prog.uop", 1, 1)
  assert parse_source("%r = RANGE(2)\n%g = GROUP\nEND(%g, %r)", "9x.uop").entries[0].name == "_9x"


def test_root_is_the_unused_void_statements_in_order():
  s = one_sink("%b = PARAM {(0, 'b')} : ptr<i32>\n%p = INDEX(%b, 1)\n%s1 = STORE(%p, 5)\n%g = GROUP(%s1)\n"
               "%q = INDEX(%b, 2)\nSTORE(%q, 6)\nBARRIER")
  assert [u.op for u in s.src] == [Ops.GROUP, Ops.STORE, Ops.BARRIER]


def test_locations_and_names_are_recorded():
  m = parse_source("kernel k {\n  %b = PARAM {(0, 'b')} : ptr<i32>\n  %r = RANGE(8)\n}\n", "t.uop")
  b = param(0, "b")
  rng = UOp(Ops.RANGE, dtypes.index, (idx(8),), (0, AxisType.LOOP))
  assert m.locs[b] == Loc("t.uop", 2, 3) and m.names[b] == "b"
  assert m.locs[idx(8)] == Loc("t.uop", 3, 14) and m.locs[rng] == Loc("t.uop", 3, 3)


# ---- errors -----------------------------------------------------------------------------------------------
def test_syntax_errors_are_located_on_every_bad_line():
  errs = errors("%a = CONST {1}\n%b = ADD(%a,, %a)\n\n  %c = = 3\n%d = MUL(%a, %a)\n")
  assert [(l, c) for l, c, _ in errs] == [(2, 13), (4, 8)]
  assert "unexpected ','" in errs[0][2]


def test_syntax_error_format_has_the_caret_line():
  with pytest.raises(CompileError) as e: parse_source("%a = CONST {1}\n%b = ADD(%a $)\n", "f.uop")
  assert e.value.format() == "f.uop:2:13: error: unexpected character '$'\n%b = ADD(%a $)\n            ^"


def test_name_errors_are_all_reported():
  errs = errors("kernel k {\n  %a = ADD(%x, %y)\n  %b = MUL(%c, %c)\n  %c = CONST {1}\n  %c = CONST {2}\n"
                "  %d = FROB(%c)\n  %e = CONST {1} : flt32\n  %f = ADD(%a, %d)\n  %g = CUSTOM {nope} : void\n}\n")
  assert errs == [(2, 12, "unknown value '%x'"), (2, 16, "unknown value '%y'"),
                  (3, 12, "'%c' is used before its definition"), (3, 16, "'%c' is used before its definition"),
                  (5, 3, "redefinition of '%c'"), (6, 8, "unknown op 'FROB'"), (7, 20, "unknown dtype 'flt32'"),
                  (9, 16, "unknown name 'nope'")]


def test_independent_problems_of_one_statement_are_all_reported():
  base = "%b = PARAM {(0, 'b')} : ptr<i32>\n%i = CONST {0} : index\n%p = INDEX(%b, %i)\n"
  assert errors(base + "STORE(%p, %nope, %i, %i, %i)\n") == [(4, 1, "STORE takes 2 to 4 sources, got 5"),
                                                              (4, 11, "unknown value '%nope'")]
  listing = "0 UOps.DEFINE_GLOBAL : ptr.dtypes.int [] (0, 'data0', True)\n1 UOps.CONST : dtypes.int [] 0\n"
  assert errors(listing + "2 UOps.STORE : [0, 1, 9, 1, 1] None\n") == [(3, 1, "STORE takes 2 to 4 sources, got 5"),
                                                                       (3, 23, "unknown value '%9'")]
  assert errors("%q = FROB(%x, 1)\n") == [(1, 6, "unknown op 'FROB'"), (1, 11, "unknown value '%x'")]
  assert errors("%a = CONST {1}\n%c = ADD(%a, 1.5, 2.5, %a)\n") == [
    (2, 1, "ADD takes 2 sources, got 4"), (2, 14, "float literal 1.5 used where dtype i32 is expected"),
    (2, 19, "float literal 2.5 used where dtype i32 is expected")]
  assert errors("%u = ALU(%x) {BinaryOps.ADD}\n") == [(1, 1, "ALU takes 2 sources, got 1"), (1, 10, "unknown value '%x'")]


def test_no_follow_on_errors():
  # a literal's dtype is unknown while an operand is: not wrong; a bad name is reported once; users stay quiet
  assert errors("%s = ADD(%gone, 1.5)\n%t = MUL(%s, %s)\n") == [(1, 10, "unknown value '%gone'")]
  assert errors("%i = CONST {0}\n%r = ADD(%i, foo)\n") == [(2, 14, "unknown name 'foo'")]
  assert errors("%r = CAST(%gone) {f32}\n%s = ADD(%r, %r)\n") == [(1, 11, "unknown value '%gone'")]


def test_statement_errors_are_located_with_a_caret():
  with pytest.raises(CompileError) as e: parse_source("%b = PARAM {(0, 'b')} : ptr<i32>\nSTORE(%b, %x, 1, 2, 3)\n", "f.uop")
  assert e.value.format().startswith("f.uop:2:1: error: STORE takes 2 to 4 sources, got 5\nSTORE(%b, %x, 1, 2, 3)\n^")


def test_names_are_per_entry():
  errs = errors("kernel a {\n  %x = CONST {1}\n}\nkernel b {\n  %y = ADD(%x, %x)\n}\n")
  assert [m for _, _, m in errs] == ["unknown value '%x'"] * 2


def test_entry_structure_errors():
  assert errors("kernel a {\n  SINK\n") == [(1, 1, "'kernel a' is never closed: add '}' after its last statement")]
  assert errors("SINK\n}\n") == [(2, 1, "'}' closes no entry")]
  assert [m for _, _, m in errors("kernel a {\n}\nfunc a {\n}\nkernel int {\n}\n")] == \
    ["duplicate entry 'a'", "entry name 'int' is not a usable C identifier"]
  assert errors("kernel a {\nkernel b {\n}\n")[0][:2] == (2, 1)


def test_missing_dtype_and_bad_literals():
  assert errors("%p = PARAM {(0, 'p')}\n") == [(1, 1, "PARAM needs a dtype: write ': dtype' after it")]
  assert errors("%x = CONST {1}\n%y = ADD(%x, 1.5)\n") == [(2, 14, "float literal 1.5 used where dtype i32 is expected")]
  assert errors("%x = CAST(%x) {f32} : i32\n")[0][2] == "'%x' is used before its definition"


def test_unreadable_file_is_a_diagnostic_without_location(tmp_path):
  with pytest.raises(CompileError) as e: load_module(tmp_path / "x.uop")
  assert e.value.format() == f"uopc: error: cannot read '{tmp_path / 'x.uop'}': No such file or directory"
  (tmp_path / "bin.uop").write_bytes(b"\xff\xfe")
  with pytest.raises(CompileError): load_module(tmp_path / "bin.uop")
