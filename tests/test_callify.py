import ctypes
import re

import numpy as np
import pytest

from tensor_ref import run_func
from gpu_samples import call
from test_cuda_gpu import gpu  # noqa: F401 (a fixture)
from uopc.frontend import load_module
from uopc.launcher import entry_args
from uopc.pipeline import compile_module
from uopc.diagnostics import CompileError
from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.stages.callify import callify
from uopc.uop import UOp

f32 = dtypes.float32


def param(slot, name, shape, dt=f32): return UOp(Ops.PARAM, dt, (UOp.shape_of(shape),), (slot, name))
def const(v, dt=f32): return UOp.const(dt, v)
def fn(op, body_values, *args): return UOp(op, dtypes.void, (UOp(Ops.TUPLE, dtypes.void, tuple(body_values)),) + args)
def get(f, i): return UOp(Ops.GETTUPLE, f.src[0].src[i].dtype, (f,), i)
def store(buf, val): return UOp(Ops.STORE, dtypes.void, (buf, val))
def sink(*xs): return UOp(Ops.SINK, dtypes.void, xs)


def ops_in(u): return {n.op for n in u.toposort()}


# a formal pair shared by the functions below: f(a, b) = (a + b, a * b)
A, B = param(0, "a", (3,)), param(1, "b", (3,))
PAIR = (A.alu(Ops.ADD, B), A.alu(Ops.MUL, B))


def test_inline_substitutes_arguments_for_params():
  x, y, out = param(0, "x", (3,)), param(1, "y", (3,)), param(2, "out", (3,))
  f = fn(Ops.FUNCTION, PAIR[:1], x, y)
  got = callify(sink(store(out, get(f, 0))))
  assert got == sink(store(out, x.alu(Ops.ADD, y)))


def test_several_outputs_share_one_function():
  x, y = param(0, "x", (3,)), param(1, "y", (3,))
  o1, o2 = param(2, "o1", (3,)), param(3, "o2", (3,))
  f = fn(Ops.FUNCTION, PAIR, x, y)
  got = callify(sink(store(o1, get(f, 0)), store(o2, get(f, 1))))
  assert got == sink(store(o1, x.alu(Ops.ADD, y)), store(o2, x.alu(Ops.MUL, y)))
  assert not ops_in(got) & {Ops.FUNCTION, Ops.GETTUPLE, Ops.TUPLE}


def test_arguments_swapped_bind_by_slot():
  x, y, out = param(0, "x", (3,)), param(1, "y", (3,)), param(2, "out", (3,))
  sub = (A.alu(Ops.ADD, B.alu(Ops.MUL, const(-1.0))),)
  got = callify(sink(store(out, get(fn(Ops.FUNCTION, sub, y, x), 0))))
  assert got == sink(store(out, y.alu(Ops.ADD, x.alu(Ops.MUL, const(-1.0)))))


def test_nested_functions_and_numeric_equivalence():
  # g(p) = f(p, p*2).0 + 1, called on x; the inner function's formals a, b are bound by g's body
  p = param(0, "p", (3,))
  inner = fn(Ops.FUNCTION, PAIR, p, p.alu(Ops.MUL, const(2.0)))
  g = fn(Ops.FUNCTION, (get(inner, 1).alu(Ops.ADD, const(1.0)),), param(0, "x", (3,)))
  out = param(1, "out", (3,))
  prog = sink(store(out, get(g, 0)))
  flat = callify(prog)
  assert not ops_in(flat) & {Ops.FUNCTION, Ops.GETTUPLE}
  x = np.array([1.0, -2.0, 0.5], np.float32)
  want = x * (x * 2) + 1
  for program in (prog, flat):
    got = run_func(program, {"x": x, "out": np.zeros(3, np.float32)})["out"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_call_stays_opaque_with_callified_arguments():
  x, out = param(0, "x", (3,)), param(1, "out", (3,))
  arg = get(fn(Ops.FUNCTION, PAIR, x, x), 0)
  call = fn(Ops.CALL, PAIR[1:], arg, x)
  got = callify(sink(store(out, get(call, 0))))
  calls = [u for u in got.toposort() if u.op is Ops.CALL]
  assert len(calls) == 1 and calls[0].src[1] == x.alu(Ops.ADD, x)
  assert calls[0].src[0] == call.src[0]


def test_missing_argument_is_a_diagnostic():
  x, out = param(0, "x", (3,)), param(1, "out", (3,))
  with pytest.raises(CompileError, match="2 arguments|1 arguments"):
    callify(sink(store(out, get(fn(Ops.FUNCTION, PAIR[:1], x), 0))))


def test_argument_shape_mismatch_is_a_diagnostic():
  x, y, out = param(0, "x", (4,)), param(1, "y", (3,)), param(2, "out", (3,))
  with pytest.raises(CompileError, match="shape"):
    callify(sink(store(out, get(fn(Ops.FUNCTION, PAIR[:1], x, y), 0))))


# ---- a CALL is one reusable kernel (end to end through the CLI) ----------------------------------------------
# f(a) = (sum(a*a, axis 1), a + 1, a - max(a, axis 1)): the max is read through a broadcast, so the body
# has an intermediate of its own. The entry calls f on 2*x and on y.
TWICE = """func twice {
  %a = PARAM([3, 4]) {(0, "a")} : f32
  %sq = MUL(%a, %a)
  %s = REDUCE(%sq) {(ADD, (1,))} : f32
  %a1 = ADD(%a, 1.0)
  %m = REDUCE(%a) {(MAX, (1,))} : f32
  %d = SUB(%a, %m)
  %body = TUPLE(%s, %a1, %d) : void
  %x = PARAM([3, 4]) {(0, "x")} : f32
  %y = PARAM([3, 4]) {(1, "y")} : f32
  %x2 = MUL(%x, 2.0)
  %c1 = CALL(%body, %x2) : void
  %c2 = CALL(%body, %y) : void
  %o1 = PARAM([3, 1]) {(2, "o1")} : f32
  %o2 = PARAM([3, 4]) {(3, "o2")} : f32
  %o3 = PARAM([3, 4]) {(4, "o3")} : f32
  %r1 = GETTUPLE(%c1) {0} : f32
  %r2 = GETTUPLE(%c2) {0} : f32
  %sum = ADD(%r1, %r2)
  STORE(%o1, %sum)
  %r3 = GETTUPLE(%c2) {1} : f32
  STORE(%o2, %r3)
  %r4 = GETTUPLE(%c1) {2} : f32
  %r5 = GETTUPLE(%c2) {2} : f32
  %diff = SUB(%r4, %r5)
  STORE(%o3, %diff)
}
"""


def uopc(*args):
  from click.testing import CliRunner
  from uopc.cli import cli
  return CliRunner().invoke(cli, [str(a) for a in args])


def twice_reference(x, y):
  def f(a): return (a * a).sum(1, keepdims=True), a + 1, a - a.max(1, keepdims=True)
  (s1, _, d1), (s2, a2, d2) = f(2 * x), f(y)
  return {"o1": s1 + s2, "o2": a2, "o3": d1 - d2}


def test_call_body_is_one_kernel_per_result_launched_at_each_site(tmp_path):
  src = tmp_path / "twice.uop"
  src.write_text(TWICE)
  res = uopc("build", src, "-t", "c", "-o", tmp_path, "--print-after", "rangeify")
  assert res.exit_code == 0, res.output
  # kernels: 2*x; the body's sum, a + 1 and a - max (the max fused, once); the 3 stores. Launches: the body's 3 twice.
  assert "# 7 kernel(s), 10 launch(es)" in res.output
  launches = [line for line in res.output.splitlines() if line.startswith("# launch ")]
  body = [line.split(": ", 1)[1] for line in launches[1:7]]
  assert [b.split("(")[0] for b in body[:3]] == [b.split("(")[0] for b in body[3:]] == ["kernel 1", "kernel 2", "kernel 3"]
  assert all(b.split("(")[1].startswith("0=tmp") for b in body[:3]) and all(b.split("(")[1].startswith("0=y,") for b in body[3:])
  c = (tmp_path / "twice.c").read_text()
  assert len(re.findall(r"^void twice__twice_k\d+\(", c, re.M)) == 7  # one C function per distinct kernel
  wrapper = c[c.index("int twice_twice_with_workspace("):]
  calls = re.findall(r"^  (twice__twice_k\d+)\((.*)\);$", wrapper, re.M)
  by_kernel = {}
  for name, args in calls: by_kernel.setdefault(name, []).append(args)
  assert sorted(len(v) for v in by_kernel.values()) == [1] * 4 + [2] * 3
  assert all(len(set(v)) == len(v) for v in by_kernel.values())  # each call site with its own pointers


@pytest.mark.parametrize("target,emulate", [("c", False), ("c", True), ("llvm", False)])
def test_call_twice_matches_numpy(tmp_path, target, emulate):
  src = tmp_path / "twice.uop"
  src.write_text(TWICE)
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((3, 4), np.float32), rng.standard_normal((3, 4), np.float32)
  np.save(tmp_path / "x.npy", x)
  np.save(tmp_path / "y.npy", y)
  outs = [f"{o}={tmp_path / o}.npy" for o in ("o1", "o2", "o3")]
  res = uopc("run", src, "-t", target, *(["--emulate"] if emulate else []), "--input", f"x={tmp_path / 'x.npy'}",
             "--input", f"y={tmp_path / 'y.npy'}", *(a for o in outs for a in ("--output", o)))
  assert res.exit_code == 0, res.output
  for name, want in twice_reference(x, y).items():
    np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), want, rtol=1e-5, atol=1e-6)


NESTED = """func nested {
  %a = PARAM([4]) {(0, "a")} : f32
  %a3 = MUL(%a, 3.0)
  %inner = TUPLE(%a3) : void
  %b = PARAM([4]) {(0, "b")} : f32
  %ci = CALL(%inner, %b) : void
  %t = GETTUPLE(%ci) {0} : f32
  %t1 = ADD(%t, 1.0)
  %outer = TUPLE(%t1) : void
  %x = PARAM([4]) {(0, "x")} : f32
  %y = PARAM([4]) {(1, "y")} : f32
  %c1 = CALL(%outer, %x) : void
  %c2 = CALL(%outer, %y) : void
  %c3 = CALL(%inner, %y) : void
  %o = PARAM([4]) {(2, "o")} : f32
  %r1 = GETTUPLE(%c1) {0} : f32
  %r2 = GETTUPLE(%c2) {0} : f32
  %r3 = GETTUPLE(%c3) {0} : f32
  %s = ADD(%r1, %r2)
  %s2 = MUL(%s, %r3)
  STORE(%o, %s2)
}
"""


@pytest.mark.parametrize("emulate", [False, True])
def test_nested_calls_reuse_the_inner_body(tmp_path, emulate):
  src = tmp_path / "nested.uop"
  src.write_text(NESTED)
  res = uopc("build", src, "-t", "c", "-o", tmp_path, "--print-after", "rangeify")
  assert res.exit_code == 0, res.output
  # the outer body's inner CALL and the entry's own CALL of the inner body: its kernel once per body
  # that calls it (the inner body's 1 in the outer's, 1 in the entry's), the outer's `+ 1`, the store
  assert "# 4 kernel(s), 6 launch(es)" in res.output
  x, y = np.array([1, -2, 0.5, 4], np.float32), np.array([3, 0.25, -1, 2], np.float32)
  np.save(tmp_path / "x.npy", x)
  np.save(tmp_path / "y.npy", y)
  res = uopc("run", src, *(["--emulate"] if emulate else []), "--input", f"x={tmp_path / 'x.npy'}",
             "--input", f"y={tmp_path / 'y.npy'}", "--output", f"o={tmp_path / 'o.npy'}")
  assert res.exit_code == 0, res.output
  np.testing.assert_allclose(np.load(tmp_path / "o.npy"), (3 * x + 1 + 3 * y + 1) * (3 * y), rtol=1e-6)


def test_call_with_another_shape_is_located(tmp_path):
  src = tmp_path / "shapes.uop"
  src.write_text(TWICE.replace('%y = PARAM([3, 4])', '%y = PARAM([3, 5])'))
  res = uopc("build", src, "-t", "c", "-o", tmp_path)
  assert res.exit_code == 1
  line = 1 + TWICE.splitlines().index("  %c2 = CALL(%body, %y) : void")
  assert res.output.splitlines()[:3] == [f"{src}:{line}:3: error: CALL argument 0 has shape (3, 5) but PARAM 0 has (3, 4)",
                                         "  %c2 = CALL(%body, %y) : void", "  ^"]


@pytest.mark.gpu
def test_call_twice_on_a_cuda_gpu(tmp_path, gpu):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  """The CUDA launcher runs the CALL body's kernels once per call site, each on that site's buffers."""
  src = tmp_path / "twice.uop"
  src.write_text(TWICE)
  assert uopc("build", src, "-t", "cuda", "-o", tmp_path / "cuda").exit_code == 0
  lib = ctypes.CDLL(str(tmp_path / "cuda" / "libtwice.so"))
  entry = compile_module(load_module(str(src)), "cuda", "twice")[0]
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((3, 4), np.float32), rng.standard_normal((3, 4), np.float32)
  want = twice_reference(x, y)
  inputs = {"x": x, "y": y}
  bufs = [a for a in entry_args(entry) if a.kind == "buffer"]
  arrays = [inputs[a.name] if a.name in inputs else np.zeros(want[a.name].shape, np.float32) for a in bufs]
  for a, got in zip(bufs, call(gpu, lib, "twice", entry, arrays)):
    if a.name in want: np.testing.assert_allclose(got, want[a.name], rtol=1e-5, atol=1e-6, err_msg=a.name)
