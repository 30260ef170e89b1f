"""The verifier: for every op a valid graph that passes and a broken one whose diagnostic names the problem,
the entry-level rules, source order and locations, and that garbage never crashes it."""
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uopc.diagnostics import Loc
from uopc.dtype import AddrSpace, dtypes
from uopc.module import Entry, Module
from uopc.ops import AxisType, GroupOp, Ops
from uopc.uop import UOp
from uopc.verify import verify_module, verify_uops

f32, f16, i32, i64, u8, u64, idx, b, void = (dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int64, dtypes.uint8,
                                             dtypes.uint64, dtypes.index, dtypes.bool, dtypes.void)


def c(v, dt=i32): return UOp.const(dt, v)
def shape(*dims): return UOp.shape_of(dims)
def u(op, dt=void, *src, arg=None): return UOp(op, dt, tuple(src), arg)
def tensor(*dims, dt=f32, slot=0, name=None): return UOp(Ops.PARAM, dt, (shape(*dims),), (slot, name or ("a" if slot == 0 else f"a{slot}")))
DEVS = ("CPU:0", "CPU:1")
def on(p, i): return p.replace(arg=p.arg + (DEVS[i],))
def sharded(*dims, dt=f32, slot=0): return UOp(Ops.PARAM, dt, (shape(*dims),), (slot, "s" if slot == 0 else f"s{slot}", DEVS))
def ptr(dt=f32, slot=0): return UOp(Ops.PARAM, dt.ptr(), (), (slot, f"d{slot}"))
def rng(n=16, axis=0): return UOp(Ops.RANGE, idx, (c(n, idx),), (axis, AxisType.LOOP))
def at(p, i, dt=f32): return UOp(Ops.INDEX, p.dtype, (p, i))
def load(p, i): return UOp(Ops.LOAD, p.dtype.base, (at(p, i),))
def store(p, i, v): return u(Ops.STORE, void, at(p, i), v)
def var(name="n", lo=1, hi=64): return UOp(Ops.DEFINE_VAR, idx, (), (name, lo, hi))


def messages(root, kind=None): return [d.message for d in verify_uops(root, kind=kind)]


# ---- elementwise ops: one operand dtype per op class --------------------------------------------------
def _operand_dtype(op):
  if op is Ops.THREEFRY: return u64
  if op is Ops.NOT: return b
  if op in GroupOp.IntOnly or op in GroupOp.Bitwise: return i32
  return f32


def _alu(op, dt, *src):
  out = b.vec(dt.count) if op in GroupOp.Comparison else dt
  return u(op, out, *src)


def _valid_alu(op):
  dt = _operand_dtype(op)
  x, y = (c(True, b), c(False, b)) if dt is b else (c(3, dt), c(5, dt)) if dt.is_int() else (c(1.5, dt), c(2.5, dt))
  if op is Ops.WHERE: return u(op, dt, c(True, b), x, y)
  return _alu(op, dt, *(x, y, x)[:len(_arity(op))])


def _arity(op): return "x" if op in GroupOp.Unary else "xy" if op in GroupOp.Binary else "xyz"


def _mixed_alu(op):
  """The same op with operands of two different dtypes (WHERE: its two values)."""
  dt = _operand_dtype(op)
  other = i64 if dt.is_int() else f16
  if op is Ops.WHERE: return u(op, f32, c(True, b), c(1.0, f32), c(1.0, f16)), "f32 and f16"
  if op in (Ops.SHL, Ops.SHR):  # a shift's amount may differ in width, but not the value and result
    return u(op, i64, c(1, i32), c(1, i32)), "gives i32, got i64"
  if op in GroupOp.Unary:  # one operand: the mismatch is in the result dtype
    return u(op, other, _valid_alu(op).src[0]), f"gives {dt}, got {other}"
  x = c(3, dt) if dt.is_int() else c(True, b) if dt is b else c(1.5, dt)
  y = c(5, other) if dt.is_int() else c(1.0, f16)
  return _alu(op, dt, *(x, y, x)[:len(_arity(op))]), "operands have different dtypes"


# ---- every other op: (valid graph, broken graph, what the message must say) ---------------------------
def _kernel_add():
  p0, p1, r = ptr(slot=0), ptr(slot=1), rng()
  return u(Ops.SINK, void, u(Ops.END, void, store(p0, r, load(p1, r)), r))


def _function(arg_dt=f32, nargs=1):
  p = tensor(4, slot=0, name="x")
  body = u(Ops.TUPLE, void, _alu(Ops.ADD, f32, p, p))
  return u(Ops.FUNCTION, void, body, *[tensor(4, dt=arg_dt, slot=9, name="y")] * nargs)


CASES = {
  Ops.PARAM: (lambda: tensor(4, 8), lambda: u(Ops.PARAM, f32, arg=(0, "a")), "must be a pointer"),
  Ops.BUFFER: (lambda: u(Ops.BUFFER, f32.ptr(AddrSpace.LOCAL, 16), arg=(0, "tmp")),
               lambda: u(Ops.BUFFER, f32.ptr(AddrSpace.LOCAL), arg=(0, "tmp")), "LOCAL or REG pointer with a size"),
  Ops.CONST: (lambda: c(255, u8), lambda: c(256, u8), "CONST value 256 is not representable in u8"),
  Ops.BINARY: (lambda: u(Ops.BINARY, u8, arg=b"\x7fELF"), lambda: u(Ops.BINARY, u8, arg="text"), "must be bytes"),
  Ops.DEFINE_VAR: (lambda: var(), lambda: var(lo=8, hi=4), "min 8 greater than max 4"),
  Ops.BIND: (lambda: u(Ops.BIND, idx, var(), c(7, idx)), lambda: u(Ops.BIND, idx, var(), c(99, idx)), "outside the range [1, 64]"),
  Ops.PERMUTE: (lambda: u(Ops.PERMUTE, f32, tensor(4, 8), arg=(1, 0)), lambda: u(Ops.PERMUTE, f32, tensor(4, 8), arg=(0, 0)),
                "not a permutation"),
  Ops.FLIP: (lambda: u(Ops.FLIP, f32, tensor(4, 8), arg=(True, False)), lambda: u(Ops.FLIP, f32, tensor(4, 8), arg=(True,)),
             "one bool per axis"),
  Ops.RESHAPE: (lambda: u(Ops.RESHAPE, f32, tensor(4, 8), shape(32)), lambda: u(Ops.RESHAPE, f32, tensor(4, 8), shape(3, 8)),
                "RESHAPE from (4, 8) (32 elements) to (3, 8) (24 elements)"),
  Ops.EXPAND: (lambda: u(Ops.EXPAND, f32, tensor(1, 8), shape(4, 8)), lambda: u(Ops.EXPAND, f32, tensor(4, 8), shape(8, 8)),
               "EXPAND can only broadcast axes of size 1: axis 0 has size 4, target 8"),
  Ops.PAD: (lambda: u(Ops.PAD, f32, tensor(4), shape(1), shape(6)), lambda: u(Ops.PAD, f32, tensor(4), shape(3), shape(6)),
            "PAD places axis 0 (size 4) at offset 3, beyond the target size 6"),
  Ops.SHRINK: (lambda: u(Ops.SHRINK, f32, tensor(8), shape(2), shape(6)), lambda: u(Ops.SHRINK, f32, tensor(8), shape(4), shape(6)),
               "SHRINK keeps 6 elements of axis 0 from offset 4, beyond its size 8"),
  Ops.INDEX: (lambda: at(ptr(), rng()), lambda: u(Ops.INDEX, f32, ptr(), rng()), "the buffer's pointer dtype is ptr<f32>"),
  Ops.STACK: (lambda: u(Ops.STACK, f32.vec(2), c(1.0, f32), c(2.0, f32)),
              lambda: u(Ops.STACK, f32.vec(2), c(1.0, f32), c(2, i32)), "STACK element 1 is i32, expected f32"),
  Ops.BITCAST: (lambda: u(Ops.BITCAST, i32, c(1.0, f32)), lambda: u(Ops.BITCAST, dtypes.int16, c(1.0, f32)),
                "BITCAST from f32 (4 bytes) to i16 (2 bytes)"),
  Ops.REDUCE: (lambda: u(Ops.REDUCE, f32, tensor(4, 8), arg=(Ops.ADD, (1,))),
               lambda: u(Ops.REDUCE, f32, tensor(4, 8), arg=(Ops.SUB, (1,))), "REDUCE op must be ADD, MAX or MUL, got SUB"),
  Ops.FUNCTION: (lambda: _function(), lambda: _function(arg_dt=i32), "FUNCTION argument 0 is i32 but PARAM 0 is f32"),
  Ops.CALL: (lambda: u(Ops.CALL, void, _kernel_add(), ptr(slot=5), ptr(slot=6)),
             lambda: u(Ops.CALL, void, _kernel_add(), ptr(slot=5)), "CALL body uses PARAM 1 but is given 1 argument"),
  Ops.TUPLE: (lambda: u(Ops.TUPLE, void, tensor(4), tensor(8, slot=1)), lambda: u(Ops.TUPLE, void, store(ptr(), rng(), c(1.0, f32))),
              "TUPLE element 0 is a STORE, which has no value"),
  Ops.GETTUPLE: (lambda: u(Ops.GETTUPLE, f32, _function(), arg=0),
                 lambda: u(Ops.GETTUPLE, f32, _function(), arg=1), "GETTUPLE index 1 is out of range for a TUPLE of 1"),
  Ops.LOAD: (lambda: load(ptr(), rng()), lambda: u(Ops.LOAD, i32, at(ptr(), rng())), "gives f32, not i32"),
  Ops.STORE: (lambda: store(ptr(), rng(), c(1.0, f32)), lambda: store(ptr(), rng(), c(1, i32)),
              "STORE of i32 into ptr<f32>"),
  Ops.RANGE: (lambda: rng(), lambda: u(Ops.RANGE, idx, c(1.5, f32), arg=(0, AxisType.LOOP)), "bound must be an integer scalar"),
  Ops.END: (lambda: _kernel_add().src[0], lambda: u(Ops.END, void, store(ptr(), rng(), c(1.0, f32)), c(4, idx)),
            "END must close a RANGE, got CONST"),
  Ops.AFTER: (lambda: u(Ops.AFTER, f32.ptr(), ptr(), store(ptr(), c(0, idx), c(1.0, f32))),
              lambda: u(Ops.AFTER, f32, ptr(), store(ptr(), c(0, idx), c(1.0, f32))), "AFTER has dtype f32, its source ptr<f32>"),
  Ops.GROUP: (lambda: u(Ops.GROUP, void, store(ptr(), c(0, idx), c(1.0, f32)), store(ptr(), c(1, idx), c(2.0, f32))),
              lambda: u(Ops.GROUP, void, store(ptr(), c(0, idx), c(1.0, f32)), c(2.0, f32)), "GROUP source 1 is CONST, not a side effect"),
  Ops.SINK: (lambda: _kernel_add(), lambda: u(Ops.SINK, f32), "SINK has no value: its dtype is void, got f32"),
  Ops.LINEAR: (lambda: u(Ops.LINEAR, void, ptr(), rng()), lambda: u(Ops.LINEAR, i32, ptr()), "LINEAR has no value"),
  Ops.CAST: (lambda: u(Ops.CAST, i32, c(1.5, f32)), lambda: u(Ops.CAST, i32.vec(2), c(1.5, f32)), "changes the vector width"),
  Ops.CONTIGUOUS: (lambda: u(Ops.CONTIGUOUS, f32, tensor(4)), lambda: u(Ops.CONTIGUOUS, i32, tensor(4)),
                   "CONTIGUOUS has dtype i32, its source f32"),
  Ops.CONTIGUOUSBACKWARD: (lambda: u(Ops.CONTIGUOUSBACKWARD, f32, tensor(4)),
                           lambda: u(Ops.CONTIGUOUSBACKWARD, f32, tensor(4), tensor(4, slot=1)), "takes 1 source, got 2"),
  Ops.DETACH: (lambda: u(Ops.DETACH, f32, tensor(4)), lambda: u(Ops.DETACH, void, store(ptr(), c(0, idx), c(1.0, f32))),
               "DETACH source is a STORE, which has no value"),
  Ops.MULTI: (lambda: u(Ops.MULTI, f32, on(tensor(4), 0), on(tensor(4, slot=1), 1), arg=0),
              lambda: u(Ops.MULTI, f32, on(tensor(4), 0), on(tensor(4, slot=1), 1), arg=3), "MULTI axis must be None or an axis"),
  Ops.MSELECT: (lambda: u(Ops.MSELECT, f32, sharded(4), arg=1), lambda: u(Ops.MSELECT, f32, sharded(4), arg=2),
                "MSELECT arg must be a device number below 2"),
  Ops.ALLREDUCE: (lambda: u(Ops.ALLREDUCE, f32, sharded(4), arg=(Ops.ADD, DEVS)),
                  lambda: u(Ops.ALLREDUCE, f32, sharded(4), arg=(Ops.SUB, DEVS)), "ALLREDUCE arg must be (ADD|MAX|MUL, device)"),
  Ops.REPLICATED: (lambda: u(Ops.REPLICATED, f32, sharded(2, 4), arg=0),
                   lambda: u(Ops.REPLICATED, f32, sharded(4, 4), arg=0), "needs one row per device on axis 0: 2 devices, size 4"),
  Ops.BARRIER: (lambda: u(Ops.BARRIER, void, store(ptr(), c(0, idx), c(1.0, f32))), lambda: u(Ops.BARRIER, f32), "BARRIER has no value"),
  Ops.INS: (lambda: u(Ops.INS, f32, c(1.0, f32), arg="v_mov_b32"), lambda: u(Ops.INS, f32, arg=None), "INS arg must name the instruction"),
  Ops.SPECIAL: (lambda: u(Ops.SPECIAL, idx, c(64, idx), arg="gidx0"), lambda: u(Ops.SPECIAL, idx, c(64, idx), arg="tid0"),
                "SPECIAL name must be gidx<n>, lidx<n> or idx<n>, got 'tid0'"),
  Ops.IF: (lambda: u(Ops.IF, void, c(True, b)), lambda: u(Ops.IF, void, c(1, i32)), "IF gate must be bool, got i32"),
  Ops.ENDIF: (lambda: u(Ops.ENDIF, void, u(Ops.IF, void, c(True, b))), lambda: u(Ops.ENDIF, void, c(True, b)),
              "ENDIF must close an IF, got CONST"),
  Ops.WMMA: (lambda: u(Ops.WMMA, f32.vec(2), c(1.0, f16), c(1.0, f16), u(Ops.STACK, f32.vec(2), c(0.0, f32), c(0.0, f32)),
                       arg=("WMMA_8_16_16", (8, 16, 16))),
             lambda: u(Ops.WMMA, f32, c(1.0, f16), c(1.0, f16), u(Ops.STACK, f32.vec(2), c(0.0, f32), c(0.0, f32)), arg=("x",)),
             "WMMA has dtype f32, its accumulator f32x2"),
  Ops.CUSTOM: (lambda: u(Ops.CUSTOM, f32, c(1.0, f32), arg="sinf({0})"), lambda: u(Ops.CUSTOM, f32, c(1.0, f32), arg="f({0}, {1})"),
               "does not fit its 1 operands"),
  Ops.CUSTOMI: (lambda: u(Ops.CUSTOMI, f32, arg="1.0f"), lambda: u(Ops.CUSTOMI, f32, arg=7), "arg must be a format string"),
  Ops.ATOMICADD: (lambda: u(Ops.ATOMICADD, void, at(ptr(), c(0, idx)), c(1.0, f32)),
                  lambda: u(Ops.ATOMICADD, void, c(0, idx), c(1.0, f32)), "ATOMICADD target must be a pointer, got index"),
  Ops.CUSTOMFUNCTION: (lambda: u(Ops.CUSTOMFUNCTION, void, arg="jpeg_decode"), lambda: u(Ops.CUSTOMFUNCTION, void, arg=""),
                       "arg must be a non-empty string"),
  Ops.PROGRAM: (lambda: u(Ops.PROGRAM, void, u(Ops.LINEAR, void), u(Ops.SOURCE, void, arg="void k(){}"), u(Ops.BINARY, u8, arg=b"")),
                lambda: u(Ops.PROGRAM, void, u(Ops.LINEAR, void), u(Ops.LINEAR, void)), "got LINEAR for SOURCE"),
  Ops.SOURCE: (lambda: u(Ops.SOURCE, void, arg="int x;"), lambda: u(Ops.SOURCE, void, c(1), arg="x"), "takes 0 sources, got 1"),
  Ops.GEP: (lambda: u(Ops.GEP, f32.vec(2), u(Ops.STACK, f32.vec(4), *[c(float(i), f32) for i in range(4)]), arg=(3, 0)),
            lambda: u(Ops.GEP, f32, u(Ops.STACK, f32.vec(4), *[c(float(i), f32) for i in range(4)]), arg=(4,)),
            "GEP lane 4 is out of range for f32x4"),
  Ops.CONTRACT: (lambda: u(Ops.CONTRACT, f32.vec(4), c(1.0, f32), arg=((1, 4),)),
                 lambda: u(Ops.CONTRACT, f32.vec(2), c(1.0, f32), arg=((1, 4),)), "CONTRACT over 4 lanes relates f32 and f32x2"),
  Ops.UNROLL: (lambda: u(Ops.UNROLL, f32, u(Ops.STACK, f32.vec(2), c(1.0, f32), c(2.0, f32)), arg=((1, 2),)),
               lambda: u(Ops.UNROLL, f32, c(1.0, f32), arg=((1, 0),)), "UNROLL arg must be ((axis, size), ...)"),
  Ops.NOOP: (lambda: u(Ops.NOOP, void, c(1.0, f32)), lambda: u(Ops.NOOP, f32, c(1.0, f32)), "NOOP has no value"),
}
for _op in sorted(GroupOp.ALU, key=lambda op: op.value):  # a fixed order: xdist workers must collect alike
  CASES[_op] = (lambda op=_op: _valid_alu(op), lambda op=_op: _mixed_alu(op)[0], _mixed_alu(_op)[1])


@pytest.mark.parametrize("op", list(CASES), ids=lambda op: op.name)
def test_valid_graph_has_no_diagnostics(op):
  root = CASES[op][0]()
  assert root.op is op
  assert messages(root) == []


@pytest.mark.parametrize("op", list(CASES), ids=lambda op: op.name)
def test_broken_graph_is_named_once(op):
  root, expected = CASES[op][1](), CASES[op][2]
  assert root.op is op
  found = messages(root)
  assert len(found) == 1 and expected in found[0], found


def test_every_op_has_a_case():
  assert set(Ops) == set(CASES)


# ---- the rules of the elementwise ops, one by one -----------------------------------------------------
@pytest.mark.parametrize("root, expected", [
  (u(Ops.MOD, f32, c(1.0, f32), c(2.0, f32)), "MOD needs integer operands, got f32"),
  (u(Ops.SQRT, i32, c(4)), "SQRT needs float operands, got i32"),
  (u(Ops.XOR, f32, c(1.0, f32), c(2.0, f32)), "XOR needs integer or bool operands, got f32"),
  (u(Ops.THREEFRY, dtypes.uint32, c(1, dtypes.uint32), c(2, dtypes.uint32)), "THREEFRY needs uint64 operands, got u32"),
  (u(Ops.NOT, i32, c(1)), "NOT needs bool operands, got i32"),
  (u(Ops.SUB, b, c(True, b), c(False, b)), "SUB needs numeric operands, got bool"),
  (u(Ops.CMPLT, i32, c(1), c(2)), "CMPLT of i32 gives bool, got i32"),
  (u(Ops.ADD, b, c(1), c(2)), "ADD of i32 gives i32, got bool"),
  (u(Ops.WHERE, f32, c(1), c(1.0, f32), c(2.0, f32)), "WHERE condition must be bool, got i32"),
  (u(Ops.SHL, i32, c(1), c(2.0, f32)), "SHL shift amount must be an integer, got f32"),
  (u(Ops.ADD, f32.ptr(), ptr(), ptr()), "ADD operand 0 is a pointer"),
  (u(Ops.ADD, f32, tensor(4), tensor(3, slot=1)), "ADD operand shapes (4,) and (3,) do not broadcast (axis 0)"),
  (u(Ops.MULTI, f32, on(tensor(4), 0), tensor(4, slot=1)), "each MULTI shard must be on a single device"),
  (u(Ops.MULTI, f32, on(tensor(4), 0), on(tensor(4, slot=1), 0)), "MULTI shards share a device: CPU:0, CPU:0"),
  (u(Ops.MULACC, f32, c(1.0, f32), c(1.0, f32), c(1, i32)), "MULACC operands have different dtypes: f32 and i32"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_elementwise_rules(root, expected):
  found = messages(root)
  assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("root", [
  u(Ops.SHR, i32, c(8), c(1, u8)),  # a shift's amount has its own width
  u(Ops.ADD, f32, tensor(4, 1), tensor(1, 8, slot=1)),  # broadcast both ways
  u(Ops.MUL, f32, tensor(4, 8), c(2.0, f32)),  # a scalar broadcasts
  u(Ops.WHERE, f32.vec(2), c(True, b), u(Ops.STACK, f32.vec(2), c(1.0, f32), c(2.0, f32)),
    u(Ops.STACK, f32.vec(2), c(3.0, f32), c(4.0, f32))),  # a scalar condition selects whole vectors
  u(Ops.CMPNE, b.vec(2), *[u(Ops.STACK, i32.vec(2), c(1), c(2))] * 2),
  u(Ops.ADD, idx, rng(), c(1, idx)),
  u(Ops.AND, b, c(True, b), c(False, b)),
  u(Ops.MAX, b, c(True, b), c(False, b)),
], ids=lambda r: r.op.name)
def test_elementwise_valid(root):
  assert messages(root) == []


# ---- constants, arguments and shapes ------------------------------------------------------------------
@pytest.mark.parametrize("root, expected", [
  (c(70000.0, f16), "CONST value 70000.0 is not representable in f16"),
  (c(1.5, i32), "CONST value 1.5 is not representable in i32"),
  (c(1, b), "CONST value 1 is not representable in bool"),
  (c(-1, dtypes.uint32), "CONST value -1 is not representable in u32 (range 0 to 4294967295)"),
  (c(10 ** 400, f32), "is not representable in f32"),
  (u(Ops.CONST, f32.vec(4), arg=1.0), "vector constants are a STACK of CONSTs"),
  (u(Ops.PARAM, f32.ptr(), arg=("a", 0)), "PARAM arg must be (slot, \"name\", ...)"),
  (u(Ops.PARAM, f32.ptr(), arg=(-1, "a")), "PARAM slot must be non-negative, got -1"),
  (u(Ops.PARAM, f32.ptr(AddrSpace.LOCAL), arg=(0, "a")), "points to global memory"),
  (u(Ops.PARAM, f32, c(4, idx), arg=(0, "a")), "PARAM shape must be a STACK of index scalars, got CONST"),
  (u(Ops.BUFFER, f32, shape(4), arg=(0, "b", 3.5)), "where a device or an address space belongs"),
  (u(Ops.DEFINE_VAR, idx, arg=("n", 1)), "DEFINE_VAR arg must be (\"name\", min, max)"),
  (u(Ops.DEFINE_VAR, f32, arg=("n", 1, 4)), "DEFINE_VAR must have an integer dtype, got f32"),
  (u(Ops.RANGE, idx, c(4, idx), arg=0), "RANGE arg must be (axis_id, AxisType), got 0"),
  (u(Ops.RANGE, idx, c(-4, idx), arg=(0, AxisType.LOOP)), "RANGE bound -4 is negative"),
  (u(Ops.RANGE, idx, c(4), arg=(0, AxisType.LOOP)), "RANGE has dtype index, its bound i32"),
  (u(Ops.CAST, i32, c(1.0, f32), arg=f16), "CAST arg f16 disagrees with its dtype i32"),
  (u(Ops.RESHAPE, f32, tensor(4), c(4, idx)), "RESHAPE shape must be a STACK of index scalars"),
  (u(Ops.RESHAPE, f32, tensor(4), shape(-4)), "RESHAPE shape has a negative entry -4"),
  (u(Ops.EXPAND, f32, tensor(4), shape(2, 4)), "EXPAND from (4,) to (2, 4) changes the number of axes"),
  (u(Ops.PAD, f32, tensor(4), shape(-1), shape(6)), "PAD offsets has a negative entry -1"),
  (u(Ops.PAD, f32, tensor(4, 4), shape(1), shape(6, 6)), "PAD has 1 offsets for a 2-axis tensor"),
  (u(Ops.SHRINK, f32, tensor(4), shape(0), shape(2, 2)), "SHRINK to (2, 2) changes the number of axes of (4,)"),
  (u(Ops.REDUCE, f32, tensor(4, 8), arg=(Ops.ADD, (1, 1))), "REDUCE axis 1 appears 2 times"),
  (u(Ops.REDUCE, f32, tensor(4, 8), arg=(Ops.MAX, (2,))), "REDUCE axis 2 is out of range for (4, 8)"),
  (u(Ops.REDUCE, f32, tensor(4, 8), arg=Ops.ADD), "REDUCE arg must be (op, axes)"),
  (u(Ops.REDUCE, f32, c(1.0, f32), c(4, idx), arg=Ops.ADD), "REDUCE source 1 must be a RANGE, got CONST"),
  (u(Ops.INDEX, f32, tensor(4, 8), c(1, idx), c(2, idx), c(3, idx)), "INDEX with 3 indices into a 2-axis tensor (4, 8)"),
  (u(Ops.INDEX, f32, tensor(4, 8), c(1.0, f32)), "INDEX index 1 must be an integer, got f32"),
  (u(Ops.INDEX, f32.ptr(), ptr(), rng(), c(1, idx)), "INDEX of a pointer takes (buffer, offset) or (buffer, offset, valid)"),
  (u(Ops.STACK, f32, tensor(4), tensor(3, slot=1)), "STACK operands have different shapes: (4,) and (3,)"),
  (u(Ops.STACK, f32.vec(4), c(1.0, f32), c(2.0, f32)), "STACK of 2 elements cannot make f32x4"),
  (u(Ops.STORE, void, tensor(4, 8), tensor(4, slot=1)), "STORE value shape (4,) differs from the buffer's shape (4, 8)"),
  (u(Ops.STORE, void, at(ptr(), rng()), c(1.0, f32), c(1)), "STORE gate must be bool, got i32"),
  (u(Ops.LOAD, f32, at(ptr(), rng()), c(0.0, f32)), "LOAD takes (index) or (index, alt, gate), got 2 sources"),
  (u(Ops.LOAD, f32, at(ptr(), rng()), c(0, i32), c(True, b)), "LOAD alternative value is i32, the load f32"),
  (u(Ops.LOAD, f32, tensor(4), arg=("CPU", "GLOBAL")), "LOAD arg must be (device, addrspace)"),
  (u(Ops.LOAD, f32.vec(4), at(ptr(), rng()), u(Ops.STACK, f32.vec(4), *[c(0.0, f32)] * 4), u(Ops.STACK, b.vec(2), c(True, b), c(False, b))),
   "one bool, or one per lane of"),  # a masked load's gate has one lane per loaded lane
  (u(Ops.STORE, void, at(ptr(), rng()), c(1.0, f32), u(Ops.STACK, b.vec(2), c(True, b), c(False, b))), "a store takes one bool"),
  (u(Ops.END, void, c(1.0, f32), rng()), "END body must be a side effect (STORE, END, GROUP or BARRIER), got CONST"),
  (u(Ops.GETTUPLE, i32, _function(), arg=0), "GETTUPLE has dtype i32, element 0 is f32"),
  (u(Ops.FUNCTION, void, tensor(4)), "FUNCTION body must be a TUPLE, got PARAM"),
  (u(Ops.FUNCTION, void, u(Ops.TUPLE, void, tensor(4, slot=0)), tensor(8, slot=3)),
   "FUNCTION argument 0 has shape (8,) but PARAM 0 has (4,)"),
  (u(Ops.BIND, idx, c(1, idx), c(1, idx)), "BIND must bind a DEFINE_VAR, got CONST"),
  (u(Ops.GEP, f32.vec(2), u(Ops.STACK, f32.vec(4), *[c(0.0, f32)] * 4), arg=(0,)), "GEP of 1 lanes of f32x4 gives f32, got f32x2"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_argument_and_shape_rules(root, expected):
  found = messages(root)
  assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("root", [
  c(float("inf"), f16), c(-(2 ** 63), i64), c(65504.0, f16), c(True, b), c(3, f32),
  u(Ops.RESHAPE, f32, tensor(4, 8), shape(var(), 8)),  # symbolic: checked at run time, not here
  u(Ops.REDUCE, f32, tensor(4, 8), arg=(Ops.MUL, ())),
  u(Ops.REDUCE, f32, load(ptr(), rng()), rng(8, axis=1), arg=Ops.ADD),  # kernel level: over RANGEs
  u(Ops.INDEX, f32, tensor(4, 8), c(1, idx)),
  u(Ops.INDEX, f32.ptr(), ptr(), rng(), c(True, b)),  # a valid mask as the third source
  u(Ops.LOAD, f32, at(ptr(), rng()), c(0.0, f32), c(True, b)),
  u(Ops.LOAD, f32.vec(2), at(ptr(), rng()), u(Ops.STACK, f32.vec(2), c(0.0, f32), c(0.0, f32)), u(Ops.STACK, b.vec(2), c(True, b), c(False, b))),
  u(Ops.LOAD, f32, tensor(4), arg=(("CPU:0", "CPU:1"), AddrSpace.GLOBAL)),  # a copy to two devices
  u(Ops.STORE, void, tensor(4, 8), tensor(4, 8, slot=1)),
  u(Ops.STACK, f32, tensor(4), tensor(4, slot=1)),
  u(Ops.SPECIAL, idx, c(32, idx), arg="lidx2"), u(Ops.SPECIAL, idx, c(32, idx), arg="idx0"),
  u(Ops.CAST, f16, c(1.0, f32), arg=f16), u(Ops.BITCAST, u32 := dtypes.uint32, c(1.0, f32), arg=u32),
  u(Ops.BUFFER, f32, shape(4), arg=(0, "b", ("CPU:0", "CPU:1"), AddrSpace.GLOBAL)),
  u(Ops.BUFFER, f32.ptr(AddrSpace.REG, 1), arg=(0, "acc")),
], ids=lambda r: r.op.name)
def test_valid_forms(root):
  assert messages(root) == []


# ---- rules on whole entries ---------------------------------------------------------------------------
def _kernel(*roots): return u(Ops.SINK, void, *roots)


def test_param_slot_is_unique_per_entry():
  a, b_ = ptr(slot=0), UOp(Ops.PARAM, f32.ptr(), (), (0, "other"))
  sink = _kernel(store(a, c(0, idx), load(b_, c(0, idx))))
  assert messages(sink, "kernel") == ["PARAM slot 0 of 'other' is already used by 'd0'"]


def test_a_function_body_has_its_own_slots():
  fn = u(Ops.GETTUPLE, f32, _function(), arg=0)
  outer = tensor(4, slot=0, name="outer")
  assert messages(u(Ops.SINK, void, u(Ops.ADD, f32, fn, outer)), "func") == []


def test_a_range_is_closed_once():
  r = rng()
  body = store(ptr(), r, c(1.0, f32))
  inner = u(Ops.END, void, body, r)
  assert messages(_kernel(u(Ops.END, void, inner, r)), "kernel") == ["RANGE 0 is closed by more than one END"]


def test_kernel_entries_have_no_tensor_level_ops():
  t = tensor(4, 8, slot=1)
  sink = _kernel(store(ptr(), c(0, idx), u(Ops.RESHAPE, f32, t, shape(32))))
  assert messages(sink, "kernel") == ["a shaped PARAM is a tensor-level input; a kernel takes pointers",
                                      "RESHAPE is a tensor-level op; a kernel entry works on pointers and RANGEs"]
  assert messages(sink, "func") == ["a tensor-level entry takes shaped PARAMs, got the bare pointer ptr<f32>"]


def test_kernel_memory_goes_through_pointers_and_roots_are_effects():
  sink = _kernel(u(Ops.STORE, void, tensor(4), tensor(4, slot=1)), c(1.0, f32))
  found = messages(sink, "kernel")
  assert "STORE in a kernel goes through a pointer, got PARAM of f32" in found
  assert "kernel SINK source 1 is CONST, not a side effect (STORE, END, GROUP or BARRIER)" in found


def test_tensor_entries_have_no_loops_or_bare_pointers():
  sink = u(Ops.SINK, void, store(ptr(), rng(), c(1.0, f32)))
  assert messages(sink, "func") == ["a tensor-level entry takes shaped PARAMs, got the bare pointer ptr<f32>",
                                    "RANGE outside a kernel: a tensor-level entry uses shapes and REDUCE axes"]
  assert messages(sink, "kernel") == []


def test_kernels_of_a_tensor_entry_do_not_share_ranges():
  r = rng()
  k1 = _kernel(u(Ops.END, void, store(ptr(slot=0), r, c(1.0, f32)), r))
  k2 = _kernel(u(Ops.END, void, store(ptr(slot=0), r, c(2.0, f32)), r))
  buf = tensor(16)
  sink = u(Ops.SINK, void, u(Ops.CALL, void, k1, buf), u(Ops.CALL, void, k2, buf))
  assert messages(sink, "func") == ["RANGE 0 is used by two kernels"]
  assert messages(u(Ops.SINK, void, u(Ops.CALL, void, k1, buf)), "func") == []


# ---- locations, source order, modules -----------------------------------------------------------------
def _three_mistakes():
  """A kernel with three independent errors, each on its own line, written out of graph order."""
  p0, p1, r = ptr(slot=0), ptr(slot=1), rng()
  bad_add = u(Ops.ADD, f32, load(p1, r), c(1, i32))          # line 5
  bad_cast = u(Ops.BITCAST, dtypes.int16, bad_add.src[0])     # line 3
  bad_store = store(p0, r, bad_cast)                          # STORE of i16 into ptr<f32>: line 9
  sink = _kernel(u(Ops.END, void, u(Ops.GROUP, void, bad_store, store(p1, r, bad_add)), r))
  locs = {bad_cast: Loc("k.uop", 3, 7), bad_add: Loc("k.uop", 5, 3), bad_store: Loc("k.uop", 9, 1)}
  return sink, locs


def test_three_mistakes_give_three_diagnostics_in_source_order():
  sink, locs = _three_mistakes()
  m = Module("k.uop", "", [Entry("k", "kernel", sink)], locs)
  diags = verify_module(m)
  assert [d.loc.line for d in diags] == [3, 5, 9]
  assert "BITCAST from f32 (4 bytes) to i16 (2 bytes)" in diags[0].message
  assert diags[1].message == "ADD operands have different dtypes: f32 and i32"
  assert diags[2].message == "STORE of i16 into ptr<f32>: the value must be f32"


def test_unlocated_nodes_point_at_their_user():
  bad = u(Ops.RESHAPE, f32, tensor(4), shape(-4))  # the shape literal's STACK has no place of its own
  m = Module("t.uop", "", [Entry("f", "func", u(Ops.SINK, void, bad))], {bad: Loc("t.uop", 2, 5)})
  assert [(d.loc.line, d.loc.col) for d in verify_module(m)] == [(2, 5)]


def test_nodes_shared_by_entries_are_reported_once():
  bad = c(300, u8)
  store_bad = store(ptr(u8), c(0, idx), bad)
  entries = [Entry("a", "kernel", _kernel(store_bad)), Entry("b", "kernel", _kernel(store_bad))]
  diags = verify_module(Module("k.uop", "", entries, {bad: Loc("k.uop", 1, 1)}))
  assert [d.message for d in diags] == ["CONST value 300 is not representable in u8 (range 0 to 255)"]


THREE_MISTAKES = """\
kernel three {
  %out = PARAM {(0, "out")} : ptr<f32>
  %in = PARAM {(1, "in")} : ptr<f32>
  %r = RANGE(16) {(0, AxisType.LOOP)}
  %src = INDEX(%in, %r)
  %x = LOAD(%src)
  %one = CONST {1} : i32
  %sum = ADD(%x, %one)
  %bits = BITCAST(%x) : i16
  %big = CONST {300} : u8
  %a = CAST(%bits) : f32
  %b = CAST(%big) : f32
  %ab = ADD(%a, %b)
  %total = ADD(%ab, %sum)
  %dst = INDEX(%out, %r)
  %st = STORE(%dst, %total)
  %e = END(%st, %r)
  SINK(%e)
}
"""


def test_three_mistakes_from_text_via_cli(tmp_path):
  src = tmp_path / "three.uop"
  src.write_text(THREE_MISTAKES)
  out = subprocess.run([sys.executable, "-m", "uopc", "check", str(src)], capture_output=True, text=True)
  assert out.returncode == 1, out.stderr
  errors = [line for line in out.stderr.splitlines() if ": error: " in line]
  assert [e.split(":")[1:3] for e in errors] == [["8", "3"], ["9", "3"], ["10", "3"]], out.stderr
  assert "ADD operands have different dtypes: f32 and i32" in errors[0]
  assert "BITCAST from f32 (4 bytes) to i16 (2 bytes)" in errors[1]
  assert "CONST value 300 is not representable in u8" in errors[2]
  assert "3 errors generated." in out.stderr


def test_samples_verify_clean():
  from uopc.frontend import load_module
  samples = sorted((Path(__file__).parent.parent / "samples").glob("*.uop"))
  assert samples
  for path in samples:
    assert verify_module(load_module(path)) == [], path.name


# ---- garbage in, diagnostics out: the verifier never raises ---------------------------------------------
DTYPES = [f32, f16, i32, u8, u64, idx, b, void, f32.vec(4), i32.vec(2), f32.ptr(), f32.ptr(AddrSpace.LOCAL, 16), u8.ptr()]
ARGS = [None, 0, 1, -1, 7, 1.5, float("nan"), True, "x", "gidx0", b"", (), (0,), (1, 0), (0, 0), (True, False),
        (0, "a"), (0, "a", "CPU"), (0, "a", ("CPU:0", "CPU:1")), (0, AxisType.LOOP), ("n", 1, 8), ("n", 8, 1), ("n", "a", "b"),
        (Ops.ADD, (0,)), (Ops.ADD, (5,)), (Ops.ADD, 1), (Ops.ADD, ("a",)), Ops.ADD, ((1, 4),), ((1, 0),), (("a", "b"),),
        f32, AddrSpace.LOCAL, ("CPU", AddrSpace.LOCAL), (None,), ("{0}",), "{5}", "{", 10 ** 30]


@st.composite
def graphs(draw):
  pool = [c(4, idx), c(0, idx), c(1.0, f32), c(True, b), shape(4, 8), shape(), ptr(), tensor(4, 8), rng(), var()]
  for _ in range(draw(st.integers(1, 12))):
    op = draw(st.sampled_from(sorted(Ops, key=lambda o: o.value)))
    src = tuple(draw(st.lists(st.sampled_from(pool[-4:]) | st.sampled_from(pool), max_size=4)))  # nest garbage in garbage
    pool.append(UOp(op, draw(st.sampled_from(DTYPES)), src, draw(st.sampled_from(ARGS))))
  return UOp(Ops.SINK, void, tuple(pool[-3:]))


@pytest.mark.parametrize("inner", [u(Ops.PERMUTE, f32, tensor(4, 8), arg=("n", 1, 8)),
                                   u(Ops.REDUCE, f32, tensor(4, 8), arg=(Ops.ADD, 1))], ids=lambda r: r.op.name)
def test_a_malformed_operand_is_reported_once(inner):
  assert len(messages(u(Ops.ADD, f32, inner, c(1.0, f32)))) == 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from([None, "kernel", "func"]))
def test_garbage_never_crashes_the_verifier(sink, kind):
  diags = verify_uops(sink, kind=kind)
  assert all(isinstance(d.message, str) and d.message for d in diags)


def test_two_params_of_one_entry_cannot_share_a_name():
  """The library's metadata looks arguments up by name: a second PARAM named like another is a located error."""
  from uopc.frontend import parse_source
  m = parse_source('func f {\n  %a = PARAM([4]) {(0, "x")} : f32\n  %b = PARAM([4]) {(1, "x")} : f32\n  STORE(%b, %a)\n}\n', "dup.uop")
  (d,) = verify_module(m)
  assert d.loc.line == 3 and "PARAM slot 1 is named 'x' like slot 0" in d.message
