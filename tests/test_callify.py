import numpy as np
import pytest

from tensor_ref import run_func
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
