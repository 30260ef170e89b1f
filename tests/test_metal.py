"""The Metal renderer: seed 002's listings give seed 002's code (golden text copied from the seed),
FileCheck pins the Metal-specific lowering, every op and dtype renders to source that clang++
accepts against tests/metal/metal_stub.h, and what Metal lacks is refused at its source line."""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from uopc.diagnostics import CompileError
from uopc.dtype import AddrSpace, dtypes
from uopc.frontend import load_module, parse_source
from uopc.ops import GroupOp, Ops
from uopc.stages.linearize import linearize
from uopc.targets.metal.render import const_literal, render_kernel, render_module
from uopc.uop import UOp

ROOT = Path(__file__).parent.parent
STUB_DIR = Path(__file__).parent / "metal"
CLANGXX = shutil.which("clang++")
needs_clang = pytest.mark.skipif(CLANGXX is None, reason="clang++ is not installed (CI installs it)")


# ---- helpers shared with test_metal_launcher.py ------------------------------------------------------------
def metal_syntax_errors(source: str) -> str:
  """clang++'s complaints about a .metal source checked against the stub header ('' when it passes)."""
  with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "kernels.metal"
    path.write_text(source)
    cmd = [CLANGXX, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-I", str(STUB_DIR),
           "-include", str(STUB_DIR / "metal_stub.h"), str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
  return "" if done.returncode == 0 else (done.stdout + done.stderr or f"clang++ exit {done.returncode}")


def filecheck(text: str, checks: str) -> None:
  """Run the `filecheck` tool with `checks` (lines of `CHECK: ...`) on `text`. Metal's `[[attr]]` is
  FileCheck's variable syntax, so the brackets are matched through regex blocks."""
  with tempfile.TemporaryDirectory() as tmp:
    check_file = Path(tmp) / "checks.txt"
    check_file.write_text(checks.replace("[[", r"{{\[\[}}").replace("]]", r"{{\]\]}}"))
    tool = Path(shutil.which("filecheck") or ROOT / ".venv/bin/filecheck")
    done = subprocess.run([str(tool), str(check_file)], input=text, capture_output=True, text=True)
  assert done.returncode == 0, f"{done.stdout}{done.stderr}\n--- input ---\n{text}"


def render_entry(path_or_text: str, kernel_name: str, from_text: bool = False) -> str:
  module = parse_source(path_or_text, "test.uop") if from_text else load_module(path_or_text)
  return render_kernel(linearize(module.entries[0].sink), kernel_name, module.loc_of).source


def normalise(code: str) -> str:
  return "\n".join(" ".join(line.split()) for line in code.strip().splitlines() if line.strip())


# ---- seed 002, word for word -------------------------------------------------------------------------------
# Copied from seed 002 (the `#include` lines and the kernels it prints); the cast kernel's signature
# is not printed by the seed, so it is written in the seed's shape with a float output buffer.
SEED002_ADD1 = """#include <metal_stdlib>
using namespace metal;
kernel void E_(device int* data0, const device int* data1, const device int* data2, uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
int val0 = *(data1+0);
int val1 = *(data2+0);
*(data0+0) = (val0+val1);
}"""
SEED002_ADD2 = """kernel void E_2(device int* data0, const device int* data1, const device int* data2, uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
int lidx0 = lid.x; /* 2 */
int val0 = *(data1+lidx0);
int val1 = *(data2+lidx0);
*(data0+lidx0) = (val0+val1);
}"""
SEED002_CAST_BODY = """int lidx0 = lid.x; /* 2 */
int val0 = *(data1+lidx0);
int val1 = *(data2+lidx0);
*(data0+lidx0) = (float)((val0+val1));"""


def test_seed002_add1_module_is_the_seeds_code():
  module = load_module(str(ROOT / "samples/seed002_add1.uop"))
  k = render_kernel(linearize(module.entries[0].sink), "E_", module.loc_of)
  assert normalise(render_module([k])) == normalise(SEED002_ADD1)


def test_seed002_add2_is_the_seeds_code():
  assert normalise(render_entry(str(ROOT / "samples/seed002_add2.uop"), "E_2")) == normalise(SEED002_ADD2)


def test_seed002_cast_is_the_seeds_code():
  code = render_entry(str(ROOT / "samples/seed002_cast.uop"), "E_2")
  head, body = code.split("\n", 1)
  assert head.startswith("kernel void E_2(device float* data0, const device int* data1, const device int* data2,")
  assert normalise(body.rsplit("}", 1)[0]) == normalise(SEED002_CAST_BODY)


# ---- Metal-specific lowering, pinned with FileCheck ---------------------------------------------------------
REDUCE_LOCAL = """kernel reduce {
  %out = PARAM {(0, "out")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %n = DEFINE_VAR {("n", 1, 4096)} : index
  %tmp = BUFFER {(0, "temp0")} : ptr<f32, local, 16>
  %g = SPECIAL(%n) {"gidx0"} : index
  %l = SPECIAL(16) {"lidx0"} : index
  %gi = MUL(%g, 16) : index
  %i = ADD(%gi, %l) : index
  %xp = INDEX(%x, %i) : ptr<f32>
  %xv = LOAD(%xp) : f32
  %tp = INDEX(%tmp, %l) : ptr<f32, local, 16>
  %st = STORE(%tp, %xv)
  %bar = BARRIER(%st)
  %t0 = INDEX(%tmp, 0) : ptr<f32, local, 16>
  %a = AFTER(%t0, %bar) : ptr<f32, local, 16>
  %v = LOAD(%a) : f32
  %bits = BITCAST(%v) : u32
  %op = INDEX(%out, %g) : ptr<f32>
  %ob = BITCAST(%bits) : f32
  %st2 = STORE(%op, %ob)
  SINK(%st2)
}
"""


def test_address_spaces_barrier_threadgroup_memory_and_as_type():
  code = render_entry(REDUCE_LOCAL, "reduce", from_text=True)
  filecheck(code, """CHECK: kernel void reduce(device float* out, const device float* x, constant int& n [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
CHECK-DAG: threadgroup float temp0[16];
CHECK-DAG: int gidx0 = gid.x; /* n */
CHECK-DAG: int lidx0 = lid.x; /* 16 */
CHECK: float val0 = *(x+((gidx0*16)+lidx0));
CHECK-NEXT: *(temp0+lidx0) = val0;
CHECK-NEXT: threadgroup_barrier(mem_flags::mem_threadgroup);
CHECK-NEXT: float val1 = *(temp0+0);
CHECK-NEXT: *(out+gidx0) = as_type<float>(as_type<uint>(val1));
CHECK-NEXT: }
""")


VECTOR_GATED = """kernel vec {
  %out = PARAM {(0, "out")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %acc = BUFFER {(1, "acc")} : ptr<f32, reg, 4>
  %l = SPECIAL(8) {"lidx0"} : index
  %i = MUL(%l, 4) : index
  %xp = INDEX(%x, %i) : ptr<f32>
  %ok = CMPLT(%l, 6) : bool
  %z = CONST {0.0} : f32
  %zero = STACK(%z, %z, %z, %z) : f32x4
  %xv = LOAD(%xp, %zero, %ok) : f32x4
  %ap = INDEX(%acc, 0) : ptr<f32, reg, 4>
  %st = STORE(%ap, %xv)
  %aa = AFTER(%ap, %st) : ptr<f32, reg, 4>
  %av = LOAD(%aa) : f32x4
  %s = GEP(%av) {(2,)} : f32
  %m = MAX(%s, %s) : f32
  %op = INDEX(%out, %l) : ptr<f32>
  %st2 = STORE(%op, %m, %ok)
  SINK(%st2)
}
"""


def test_vector_access_register_arrays_gates_and_nan_propagating_max():
  k = render_kernel(linearize(parse_source(VECTOR_GATED, "v.uop").entries[0].sink), "vec")
  filecheck(render_module([k]), """CHECK: using namespace metal;
CHECK-NEXT: template <typename T> inline T uopc_fmax(T a, T b) { return select(max(a, b), a + b, isunordered(a, b)); }
CHECK: kernel void vec(device float* out, const device float* x,
CHECK-DAG: float acc[4];
CHECK-DAG: int lidx0 = lid.x; /* 8 */
CHECK-DAG: bool alu0 = lidx0<6;
CHECK: float4 val0 = (alu0?*((device float4*)(x+(lidx0*4))):float4(0.0f, 0.0f, 0.0f, 0.0f));
CHECK-NEXT: *((thread float4*)(acc+0)) = val0;
CHECK-NEXT: float4 val1 = *((thread float4*)(acc+0));
CHECK-NEXT: float gep0 = val1[2];
CHECK-NEXT: if (alu0) { *(out+lidx0) = uopc_fmax(gep0, gep0); }
""")


LOOP = """kernel sum {
  %out = PARAM {(0, "out")} : ptr<i32>
  %x = PARAM {(1, "x")} : ptr<i32>
  %acc = BUFFER {(0, "acc")} : ptr<i32, reg, 1>
  %a0 = INDEX(%acc, 0) : ptr<i32, reg, 1>
  %init = STORE(%a0, 0)
  %r = RANGE(10) {(0, AxisType.REDUCE)} : index
  %aa = AFTER(%a0, %init) : ptr<i32, reg, 1>
  %cur = LOAD(%aa, %r) : i32
  %xp = INDEX(%x, %r) : ptr<i32>
  %xv = LOAD(%xp) : i32
  %sum = ADD(%cur, %xv) : i32
  %upd = STORE(%a0, %sum)
  %e = END(%upd, %r)
  %done = AFTER(%a0, %e) : ptr<i32, reg, 1>
  %fin = LOAD(%done) : i32
  %op = INDEX(%out, 0) : ptr<i32>
  %st = STORE(%op, %fin)
  SINK(%st)
}
"""


def test_loops_are_for_loops_over_int():
  code = render_entry(LOOP, "sum", from_text=True)
  filecheck(code, """CHECK: int acc[1];
CHECK: *(acc+0) = 0;
CHECK: for (int ridx0 = 0; ridx0 < 10; ridx0++) {
CHECK: (val{{[0-9]}}+val{{[0-9]}})
CHECK: }
CHECK: *(out+0) = val{{[0-9]}};
""")


# ---- every op and dtype: rendered, then accepted by clang++ against the stub --------------------------------
SCALARS = [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
           dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32]
VECTORS = [dtypes.float32.vec(4), dtypes.float16.vec(2), dtypes.int32.vec(3), dtypes.uint8.vec(4)]
UNRENDERED = frozenset({Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD})


def _takes(op: Ops, dt) -> bool:
  s = dt.scalar
  if op in GroupOp.FloatOnly or op is Ops.TRUNC: return s.is_float()
  if op in GroupOp.IntOnly: return s.kind in ("i", "u")
  if op is Ops.NOT: return s is dtypes.bool
  if op in GroupOp.Bitwise: return not s.is_float()
  return s.kind != "b" or op in (Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.MAX)


def _op_kernel(name: str, op: Ops, dt) -> UOp:
  """out[i] = op(a[i], b[i], ...) over buffers of dt's scalar, a vector access when dt is a vector."""
  s = dt.scalar
  i = UOp(Ops.SPECIAL, dtypes.index, (UOp.const(dtypes.index, 4),), "lidx0")
  arity = 3 if op in GroupOp.Ternary else 2 if op in GroupOp.Binary else 1
  ins = []
  for slot in range(1, arity + 1):
    want = dtypes.bool.vec(dt.count) if op is Ops.WHERE and slot == 1 else dt
    buf = UOp(Ops.PARAM, want.scalar.ptr(), (), (slot, f"in{slot}"))
    ins.append(UOp(Ops.LOAD, want, (UOp(Ops.INDEX, buf.dtype, (buf, i)),)))
  out_dt = dtypes.bool.vec(dt.count) if op in GroupOp.Comparison else dt
  val = UOp(op, out_dt, tuple(ins))
  out = UOp(Ops.PARAM, out_dt.scalar.ptr(), (), (0, "out"))
  st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i)), val))
  return linearize(UOp(Ops.SINK, dtypes.void, (st,)))


def _all_op_kernels():
  for dt in SCALARS + VECTORS:
    for op in sorted(GroupOp.ALU - UNRENDERED, key=lambda o: o.value):
      if _takes(op, dt): yield f"{op.name.lower()}_{dt.short}_{dt.count}", _op_kernel("", op, dt)


def _cast_kernels():
  for src in SCALARS:
    for dst in SCALARS:
      for op in (Ops.CAST, Ops.BITCAST):
        if op is Ops.BITCAST and (src.itemsize != dst.itemsize or dtypes.bool in (src, dst)): continue
        a = UOp(Ops.PARAM, src.ptr(), (), (1, "a"))
        out = UOp(Ops.PARAM, dst.ptr(), (), (0, "out"))
        v = UOp(op, dst, (UOp(Ops.LOAD, src, (UOp(Ops.INDEX, a.dtype, (a, UOp.const(dtypes.index, 0))),)),))
        st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, UOp.const(dtypes.index, 0))), v))
        yield f"{op.name.lower()}_{src.short}_{dst.short}", linearize(UOp(Ops.SINK, dtypes.void, (st,)))


def _const_kernels():
  """One kernel per dtype storing its extreme and special constants."""
  for dt in SCALARS:
    values = [False, True] if dt is dtypes.bool else [dt.min, dt.max, 0, 1] if not dt.is_float() else \
             [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 1e-40 if dt is dtypes.float32 else 6e-8]
    out = UOp(Ops.PARAM, dt.ptr(), (), (0, "out"))
    sts = tuple(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, UOp.const(dtypes.index, j))), UOp.const(dt, v)))
                for j, v in enumerate(values))
    yield f"consts_{dt.short}", linearize(UOp(Ops.SINK, dtypes.void, sts))


@needs_clang
@pytest.mark.parametrize("family", ["ops", "casts", "consts"])
def test_every_op_dtype_and_constant_passes_clang(family):
  gen = {"ops": _all_op_kernels, "casts": _cast_kernels, "consts": _const_kernels}[family]
  kernels = [render_kernel(lin, name) for name, lin in gen()]
  assert len(kernels) > 10
  source = render_module(kernels)
  assert metal_syntax_errors(source) == ""


def _kernel_samples():
  for path in sorted((ROOT / "samples").rglob("*.uop")):
    m = load_module(str(path))
    for e in m.entries:
      if e.kind == "kernel": yield pytest.param(path, e.name, id=f"{path.stem}:{e.name}")


@needs_clang
@pytest.mark.parametrize("path,entry", list(_kernel_samples()))
def test_every_sample_passes_clang(path, entry):
  m = load_module(str(path))
  k = render_kernel(linearize(m.entry(entry).sink), entry, m.loc_of)
  assert metal_syntax_errors(render_module([k])) == ""


# ---- semantics that the text shows -------------------------------------------------------------------------
@pytest.mark.parametrize("value,dt,text", [
  (0, dtypes.int32, "0"), (-5, dtypes.int32, "(-5)"), (-2**31, dtypes.int32, "(-2147483647-1)"),
  (2**63 - 1, dtypes.int64, "9223372036854775807l"), (-2**63, dtypes.int64, "(-9223372036854775807l-1l)"),
  (2**64 - 1, dtypes.uint64, "18446744073709551615ul"), (7, dtypes.uint32, "7u"), (-128, dtypes.int8, "(char)((-128))"),
  (255, dtypes.uint8, "(uchar)(255)"), (True, dtypes.bool, "true"), (1.0, dtypes.float32, "1.0f"),
  (0.1, dtypes.float32, "0.1f"), (-0.0, dtypes.float32, "(-0.0f)"), (math.inf, dtypes.float32, "INFINITY"),
  (-math.inf, dtypes.float32, "(-INFINITY)"), (math.nan, dtypes.float32, "NAN"), (1.5, dtypes.float16, "half(1.5f)"),
  (3.0, dtypes.bfloat16, "bfloat(3.0f)"), (2.0, dtypes.float32.vec(4), "float4(2.0f)"),
])
def test_constants(value, dt, text):
  assert const_literal(value, dt) == text


def test_float_constants_read_back_exactly():
  import numpy as np
  for bits in (0x3DCCCCCD, 0x00000001, 0x7F7FFFFF, 0x33D6BF95, 0x4B000001):
    v = float(np.array([bits], dtype=np.uint32).view(np.float32)[0])
    text = const_literal(v, dtypes.float32)
    assert np.float32(text.rstrip("f")) == np.float32(v), text


def test_narrow_integer_results_are_cast_back():
  """char + char is int in Metal; the sum must wrap at 8 bits before it is compared."""
  a = UOp(Ops.PARAM, dtypes.int8.ptr(), (), (1, "a"))
  out = UOp(Ops.PARAM, dtypes.bool.ptr(), (), (0, "out"))
  x = UOp(Ops.LOAD, dtypes.int8, (UOp(Ops.INDEX, a.dtype, (a, UOp.const(dtypes.index, 0))),))
  lt = UOp(Ops.CMPLT, dtypes.bool, (UOp(Ops.ADD, dtypes.int8, (x, x)), UOp.const(dtypes.int8, 0)))
  st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, UOp.const(dtypes.index, 0))), lt))
  code = render_kernel(linearize(UOp(Ops.SINK, dtypes.void, (st,))), "k").source
  assert "*(out+0) = ((char)((val0+val0))<(char)(0));" in code


def test_half_transcendentals_run_in_float_and_float_add_keeps_its_order():
  h = dtypes.float16
  a = UOp(Ops.PARAM, h.ptr(), (), (1, "a"))
  out = UOp(Ops.PARAM, h.ptr(), (), (0, "out"))
  x = UOp(Ops.LOAD, h, (UOp(Ops.INDEX, a.dtype, (a, UOp.const(dtypes.index, 0))),))
  y = UOp(Ops.ADD, h, (x, UOp(Ops.ADD, h, (UOp(Ops.EXP2, h, (x,)), UOp(Ops.SIN, h, (x,))))))
  st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, UOp.const(dtypes.index, 0))), y))
  code = render_kernel(linearize(UOp(Ops.SINK, dtypes.void, (st,))), "k").source
  assert "(val0+((half)(precise::exp2((float)(val0)))+(half)(precise::sin((float)(val0)))))" in code


def test_params_report_slots_written_and_var_ranges():
  module = parse_source(REDUCE_LOCAL, "r.uop")
  k = render_kernel(linearize(module.entries[0].sink), "reduce")
  assert [(p.name, p.slot, p.kind, p.written, p.vmin, p.vmax) for p in k.params] == [
    ("out", 0, "buffer", True, None, None), ("x", 1, "buffer", False, None, None), ("n", None, "var", False, 1, 4096)]
  assert k.params[0].dtype == dtypes.float32.ptr()


# ---- what Metal lacks ---------------------------------------------------------------------------------------
F64 = """kernel k {
  %a = PARAM {(0, "a")} : ptr<f32>
  %i = SPECIAL(4) {"gidx0"} : index
  %p = INDEX(%a, %i) : ptr<f32>
  %v = LOAD(%p) : f32
  %w = CAST(%v) : f64
  %x = CAST(%w) : f32
  %st = STORE(%p, %x)
  SINK(%st)
}
"""


def test_float64_is_refused_at_its_source_line():
  module = parse_source(F64, "f64.uop")
  with pytest.raises(CompileError) as e:
    render_kernel(linearize(module.entries[0].sink), "k", module.loc_of)
  e.value.sources = {"f64.uop": F64}
  text = e.value.format()
  assert text.splitlines()[:3] == ["f64.uop:6:3: error: metal: CAST of float64 is not supported: Metal has no float64 type",
                                   "  %w = CAST(%v) : f64", "  ^"]
  assert len(e.value.diagnostics) == 1


def test_wide_vectors_and_unlowered_ops_are_refused():
  a = UOp(Ops.PARAM, dtypes.uint64.ptr(), (), (0, "a"))
  p = UOp(Ops.INDEX, a.dtype, (a, UOp.const(dtypes.index, 0)))
  v = UOp(Ops.LOAD, dtypes.uint64, (p,))
  st = UOp(Ops.STORE, dtypes.void, (p, UOp(Ops.THREEFRY, dtypes.uint64, (v, v))))
  with pytest.raises(CompileError, match="THREEFRY is not supported by the Metal renderer .instruction selection"):
    render_kernel(linearize(UOp(Ops.SINK, dtypes.void, (st,))), "k")
  f = UOp(Ops.PARAM, dtypes.float32.ptr(), (), (0, "f"))
  wide = UOp(Ops.LOAD, dtypes.float32.vec(8), (UOp(Ops.INDEX, f.dtype, (f, UOp.const(dtypes.index, 0))),))
  st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, f.dtype, (f, UOp.const(dtypes.index, 8))), UOp(Ops.GEP, dtypes.float32, (wide,), (0,))))
  with pytest.raises(CompileError, match="vectors wider than 4 lanes"):
    render_kernel(linearize(UOp(Ops.SINK, dtypes.void, (st,))), "k")


def test_index_wider_than_32_bits_is_refused():
  text = F64.replace("ptr<f32>", "ptr<f32>", 1).replace('%i = SPECIAL(4) {"gidx0"} : index',
                                                         '%n = DEFINE_VAR {("n", 1, 8589934592)} : index\n  %i = SPECIAL(%n) {"gidx0"} : index')
  text = text.replace(" : f64", " : f32")
  module = parse_source(text, "big.uop")
  with pytest.raises(CompileError, match="does not fit Metal's 32-bit index"):
    render_kernel(linearize(module.entries[0].sink), "k", module.loc_of)


def test_rendering_is_deterministic():
  texts = {render_entry(REDUCE_LOCAL, "reduce", from_text=True) for _ in range(3)}
  assert len(texts) == 1 and not re.search(r"0x[0-9a-f]{6,}", texts.pop())
