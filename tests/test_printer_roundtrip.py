"""The printer: parse(print(m)) has the same entries and sink UOps, printing is idempotent and stable."""
from pathlib import Path

import pytest

from uopc.dtype import dtypes
from uopc.frontend import load_module, parse_source, print_module, print_uops
from uopc.ops import Ops
from uopc.uop import UOp

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "samples").glob("*.uop"))
LEGACY = {"seed001_alu", "seed001_const", "seed001_define_global", "seed001_load", "seed001_loop", "seed001_loop_offset",
          "seed001_loop_store", "seed001_special", "seed001_store", "seed002_add1", "seed002_add2", "seed002_cast",
          "seed002_gidx_add", "seed003_acc", "seed003_gated"}

PROGRAMS = {
  'values': 'kernel v {\n  %c = CUSTOM {(-0.0, nan, -nan, inf, -inf, 1e-300, 5e+300, "t\\"ab\\\\\\n\\x00", (), (1,), AddrSpace.REG, AxisType.UPCAST, ptr<u8, reg, 3>, bf16x8, -9223372036854775808)} : void\n}\n',
  'kernel_loops': 'kernel loops {\n  %out = PARAM {(0, "out")} : ptr<f32>\n  %inp = PARAM {(1, "inp")} : ptr<f32>\n  %n = DEFINE_VAR {("n", 1, 64)}\n  %i = RANGE(%n) {(0, AxisType.GLOBAL)}\n  %j = RANGE(16) {(1, AxisType.REDUCE)}\n  %acc = BUFFER {(0, "acc")} : ptr<f32, reg, 1>\n  %ap = INDEX(%acc, 0)\n  %init = STORE(%ap, 0.0)\n  %a0 = AFTER(%ap, %init)\n  %row = MUL(%i, 16)\n  %off = ADD(%row, %j)\n  %xp = INDEX(%inp, %off)\n  %x = LOAD(%xp)\n  %old = LOAD(%a0)\n  %new = ADD(%old, %x)\n  %st = STORE(%a0, %new)\n  %e = END(%st, %j)\n  %a1 = AFTER(%ap, %e)\n  %res = LOAD(%a1)\n  %o = INDEX(%out, %i)\n  %so = STORE(%o, %res)\n  END(%so, %i)\n}\n\nfunc tensor {\n  %n2 = DEFINE_VAR {("m", 1, 8)}\n  %x = PARAM([4, %n2]) {(0, "x")} : f32\n  %y = EXPAND(%x, [4, %n2])\n  STORE(%x, %y)\n}\n',
  'two_entries': "kernel a {\n  %p = PARAM {(0, 'p')} : ptr<i8>\n  %q = INDEX(%p, 0)\n  STORE(%q, 1)\n}\n",
  'vectors': 'kernel vec {\n  %p = PARAM {(0, "p")} : ptr<f32>\n  %g = SPECIAL(4) {"gidx0"}\n  %q = INDEX(%p, %g)\n  %v = LOAD(%q) : f32x4\n  %w = GEP(%v) {(3, 2, 1, 0)}\n  %s = GEP(%w) {0}\n  %b = CMPLT(%s, 1.0)\n  %z = WHERE(%b, %s, 0.0)\n  %h = CAST(%z) : f16\n  %bits = BITCAST(%h) : u16\n  %v2 = STACK(%s, %s) : f32x2\n  %t = STACK(%v2, %v2)\n  STORE(%q, %z)\n  SINK(%bits, %t)\n}\n',
}


CASES = [pytest.param(p.read_text(), str(p), id=p.name) for p in SAMPLES] + \
        [pytest.param(t, f"{k}.uop", id=k) for k, t in PROGRAMS.items()]


@pytest.mark.parametrize("text,path", CASES)
def test_round_trip_gives_the_same_sinks(text, path):
  m = parse_source(text, path)
  printed = print_module(m)
  again = parse_source(printed, "printed.uop")
  assert [(e.name, e.kind, e.sink) for e in again.entries] == [(e.name, e.kind, e.sink) for e in m.entries]
  assert all(a.sink is b.sink for a, b in zip(again.entries, m.entries))
  assert print_module(again) == printed and print_module(m) == printed
  assert printed.endswith("}\n") and "\n\n\n" not in printed


@pytest.mark.parametrize("path", [p for p in SAMPLES if p.stem not in LEGACY], ids=lambda p: p.name)
def test_modern_samples_are_canonical(path):
  assert print_module(load_module(path)) == path.read_text()


def test_canonical_layout():
  m = parse_source("%b = PARAM {(0, 'b')} : ptr<i32>\n%r = RANGE(8)\n%p = INDEX(%b, %r)\n%v = CAST(%r) : i32\n"
                   "%s = STORE(%p, %v)\nEND(%s, %r)\n", "lay.uop")
  assert print_module(m) == ('kernel lay {\n  %b = PARAM {(0, "b")} : ptr<i32>\n  %r = RANGE(8) {(0, AxisType.LOOP)}\n'
                             '  %p = INDEX(%b, %r)\n  %v = CAST(%r) : i32\n  %s = STORE(%p, %v)\n  %0 = END(%s, %r)\n'
                             '  SINK(%0)\n}\n')


def test_print_uops_on_any_graph_and_linear_lists():
  a = UOp.const(dtypes.int32, 3)
  b = UOp(Ops.ADD, dtypes.int32, (a, a))
  assert print_uops(b) == "%0 = CONST {3}\n%1 = ADD(%0, %0)\n"
  assert print_uops([a, b], names={b: "sum"}) == "%0 = CONST {3}\n%sum = ADD(%0, %0)\n"
  lin = UOp(Ops.LINEAR, dtypes.void, (a, b))
  assert print_uops(lin).splitlines()[-1] == "LINEAR(%0, %1)"
