"""The derived-property table at the end of seed 000, row by row: dtype, shape, device and min_max of each op,
the broadcast rule, CAST clamping and the shard axis rules. Every expected value is written by hand from the
table (and the arithmetic it names), never computed by the code under test."""
import math

import pytest

from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.uop import UOp

f32, i8, i32, u8, idx, b, void = dtypes.float32, dtypes.int8, dtypes.int32, dtypes.uint8, dtypes.index, dtypes.bool, dtypes.void
I32 = (-2147483648, 2147483647)
TWO = ("CPU:0", "CPU:1")


def c(v, dt=i32): return UOp.const(dt, v)
def shape(*dims): return UOp.shape_of(dims)
def u(op, dt, *src, arg=None): return UOp(op, dt, tuple(src), arg)
def buffer(*dims, dt=f32, device="CPU"): return UOp(Ops.BUFFER, dt, (shape(*dims),), (0, "buf", device))
def rng(n): return UOp(Ops.RANGE, idx, (c(n, idx),), (0, AxisType.LOOP))
def props(x): return x.dtype, x.shape, x.device, x.min_max


# ---- source ops ---------------------------------------------------------------------------------------
def test_buffer():  # dtype from arg, shape from src[0], device from arg, dtype range
  assert props(buffer(4, 8, dt=i8, device="GPU")) == (i8, (4, 8), "GPU", (-128, 127))


def test_const():  # dtype from arg, (), no device, [v, v]
  assert props(c(7)) == (i32, (), None, (7, 7))
  assert props(c(-1.5, f32)) == (f32, (), None, (-1.5, -1.5))
  assert props(c(True, b)) == (b, (), None, (True, True))


def test_param():  # dtype from arg, shape from src[0], device from arg, dtype range
  p = UOp(Ops.PARAM, u8, (shape(3),), (0, "x", "CPU"))
  assert props(p) == (u8, (3,), "CPU", (0, 255))


# ---- movement ops: src[0].dtype, the op's shape, src[0].device, src[0]'s min_max ---------------------------
def _five_as(*dims):
  """The constant 5 reshaped to (1,)*n and expanded to dims: every element is 5."""
  ones = u(Ops.RESHAPE, i32, c(5), shape(*[1] * len(dims)))
  return u(Ops.EXPAND, i32, ones, shape(*dims))


@pytest.mark.parametrize("make, want_shape", [
  (lambda: u(Ops.RESHAPE, i32, _five_as(4, 8), shape(32)), (32,)),
  (lambda: u(Ops.EXPAND, i32, u(Ops.RESHAPE, i32, c(5), shape(1, 1)), shape(4, 8)), (4, 8)),
  (lambda: u(Ops.PERMUTE, i32, _five_as(4, 8), arg=(1, 0)), (8, 4)),
  (lambda: u(Ops.FLIP, i32, _five_as(4, 8), arg=(True, False)), (4, 8)),
  (lambda: u(Ops.PAD, i32, _five_as(4), shape(1), shape(6)), (6,)),
  (lambda: u(Ops.SHRINK, i32, _five_as(8), shape(2), shape(3)), (3,)),
], ids=["RESHAPE", "EXPAND", "PERMUTE", "FLIP", "PAD", "SHRINK"])
def test_movement_ops_keep_dtype_and_min_max(make, want_shape):
  assert props(make()) == (i32, want_shape, None, (5, 5))


def test_movement_ops_keep_the_device():
  assert u(Ops.PERMUTE, f32, buffer(4, 8, device="GPU"), arg=(1, 0)).device == "GPU"
  assert u(Ops.RESHAPE, f32, buffer(4, 8, device="GPU"), shape(32)).device == "GPU"


def test_index_keeps_remaining_dims():  # src[0].dtype, remaining dims, src[0].device, src[0]
  t = buffer(4, 8, dt=u8, device="GPU")
  assert props(u(Ops.INDEX, u8, t, c(2, idx))) == (u8, (8,), "GPU", (0, 255))
  assert u(Ops.INDEX, u8, t, c(2, idx), c(3, idx)).shape == ()
  assert u(Ops.INDEX, u8, t, UOp(Ops.BUFFER, idx, (shape(5),), (1, "ix"))).shape == (5, 8)  # a (k,) index makes a dim k
  assert u(Ops.INDEX, i32, _five_as(4, 8), c(0, idx)).min_max == (5, 5)


def test_stack_adds_a_leading_axis():
  assert u(Ops.STACK, f32, buffer(4), buffer(4)).shape == (2, 4)


# ---- reduce, casts, copies ----------------------------------------------------------------------------
def test_reduce_collapses_axes_to_one():  # src[0].dtype, axes -> 1, src[0].device, dtype range
  r = u(Ops.REDUCE, i32, u(Ops.EXPAND, i32, u(Ops.RESHAPE, i32, c(5), shape(1, 1)), shape(4, 8)), arg=(Ops.ADD, (1,)))
  assert props(r) == (i32, (4, 1), None, I32)
  assert u(Ops.REDUCE, f32, buffer(4, 8, device="GPU"), arg=(Ops.MAX, (0, 1))).shape == (1, 1)
  assert u(Ops.REDUCE, f32, buffer(4, 8, device="GPU"), arg=(Ops.MAX, (0, 1))).device == "GPU"


@pytest.mark.parametrize("src, dt, want", [
  (rng(10), u8, (0, 9)),                 # in range: unchanged
  (c(300), u8, (0, 255)),                # out of range: wraps, so only the dtype range is known
  (c(-1), u8, (0, 255)),
  (c(3.7, f32), i32, (3, 3)),            # float to int truncates toward zero
  (c(-2.5, f32), i32, (-2, -2)),
  (rng(10), f32, (0.0, 9.0)),            # to float: the source's bounds, as floats
  (c(70000), dtypes.float16, (math.inf, math.inf)),  # beyond f16's largest finite value: inf
  (c(0), b, (False, False)),             # to bool: x != 0
  (c(3), b, (True, True)),
  (rng(10), b, (False, True)),
], ids=str)
def test_cast_is_clamped_to_its_dtype(src, dt, want):
  assert u(Ops.CAST, dt, src).min_max == want


def test_cast_keeps_shape_and_device():
  x = u(Ops.CAST, i32, buffer(4, 8, device="GPU"))
  assert (x.dtype, x.shape, x.device) == (i32, (4, 8), "GPU")


def test_bitcast():  # dtype from arg, src[0].shape, src[0].device, dtype range
  assert props(u(Ops.BITCAST, i32, buffer(4, device="GPU"))) == (i32, (4,), "GPU", I32)
  assert u(Ops.BITCAST, i32, c(1.0, f32)).min_max == I32


def test_copy_is_a_load_to_a_device():  # src[0].dtype, src[0].shape, device from arg, src[0]'s min_max
  x = u(Ops.LOAD, i32, _five_as(4, 8), arg=("GPU",))
  assert props(x) == (i32, (4, 8), "GPU", (5, 5))


def test_kernel_load_through_a_pointer_has_the_dtype_range():
  p = UOp(Ops.PARAM, u8.ptr(), (), (0, "p"))
  assert u(Ops.LOAD, u8, u(Ops.INDEX, u8.ptr(), p, rng(4))).min_max == (0, 255)


# ---- elementwise --------------------------------------------------------------------------------------
def test_alu_unary():  # src[0].dtype, src[0].shape, src[0].device, dtype range
  x = u(Ops.RECIP, f32, buffer(4, device="GPU"))
  assert props(x) == (f32, (4,), "GPU", (-math.inf, math.inf))
  assert u(Ops.NEG, i32, c(5)).min_max == I32


def test_add():  # [a + b, A + B]
  assert u(Ops.ADD, idx, rng(10), c(5, idx)).min_max == (5, 14)
  assert u(Ops.ADD, i8, c(100, i8), c(100, i8)).min_max == (-128, 127)  # 200 wraps: only the dtype range is known


def test_mul():  # [min, max] of the four products
  assert u(Ops.MUL, idx, rng(10), c(-3, idx)).min_max == (-27, 0)
  assert u(Ops.MUL, i32, u(Ops.ADD, i32, u(Ops.CAST, i32, rng(5)), c(-2)), c(4)).min_max == (-8, 8)  # [-2, 2] * 4


def test_max():  # [max(a, b), max(A, B)]
  assert u(Ops.MAX, idx, rng(10), c(5, idx)).min_max == (5, 9)


def test_other_binary_ops_have_the_dtype_range():
  assert u(Ops.XOR, i32, c(1), c(2)).min_max == I32
  assert u(Ops.SHL, i32, c(1), c(2)).min_max == I32
  assert u(Ops.IDIV, i32, c(-7), c(2)).min_max == I32


@pytest.mark.parametrize("op, x, y, want", [
  (Ops.CMPLT, rng(10), c(20, idx), (True, True)),
  (Ops.CMPLT, rng(10), c(0, idx), (False, False)),
  (Ops.CMPLT, rng(10), c(5, idx), (False, True)),
  (Ops.CMPNE, c(3, idx), c(3, idx), (False, False)),
  (Ops.CMPNE, rng(10), c(10, idx), (True, True)),
  (Ops.CMPNE, rng(10), c(4, idx), (False, True)),
], ids=str)
def test_comparisons_are_bool_from_intervals(op, x, y, want):
  assert props(u(op, b, x, y)) == (b, (), None, want)


def test_where():  # src[1].dtype, broadcast, [min(b, c), max(B, C)]
  cond = u(Ops.CMPLT, b, rng(10), c(5, idx))
  assert props(u(Ops.WHERE, i32, cond, c(1), c(7))) == (i32, (), None, (1, 7))
  assert u(Ops.WHERE, f32, c(True, b), buffer(4, 1), buffer(8)).shape == (4, 8)


@pytest.mark.parametrize("shapes, want", [
  (((4, 1), (1, 8)), (4, 8)),
  (((8,), (4, 8)), (4, 8)),
  (((), (4, 8)), (4, 8)),
  (((4, 8), (4, 8)), (4, 8)),
  (((3,), (4,)), None),
], ids=str)
def test_broadcast_right_aligns_and_takes_the_size_that_is_not_one(shapes, want):
  assert u(Ops.ADD, f32, *[buffer(*s) for s in shapes]).shape == want


# ---- calls and ordering -------------------------------------------------------------------------------
def test_function_and_call():  # src[0].dtype, src[1].device, dtype range
  param = UOp(Ops.PARAM, f32, (shape(4, 8),), (0, "x"))
  body = u(Ops.TUPLE, void, u(Ops.ADD, f32, param, param))
  fn = u(Ops.FUNCTION, void, body, buffer(4, 8, device="GPU"))
  assert (fn.dtype, fn.device, fn.min_max) == (void, "GPU", (None, None))
  got = u(Ops.GETTUPLE, f32, fn, arg=0)
  assert (got.shape, got.device) == ((4, 8), "GPU")
  call = u(Ops.CALL, void, u(Ops.SINK, void), buffer(4, device="NV"))
  assert (call.dtype, call.device) == (void, "NV")


def test_range():  # index, (), no device, [0, n-1]
  assert props(rng(16)) == (idx, (), None, (0, 15))


def test_store():  # void, (), src[0].device, no min_max
  t = buffer(4, device="GPU")
  assert props(u(Ops.STORE, void, t, t)) == (void, (), "GPU", (None, None))
  assert u(Ops.STORE, void, buffer(4, device=None), t).device is None  # the buffer's, not the value's


def test_after():  # everything from src[0]
  t = _five_as(4, 8)
  after = u(Ops.AFTER, i32, t, u(Ops.STORE, void, buffer(4), buffer(4)))
  assert props(after) == (i32, (4, 8), None, (5, 5))
  assert u(Ops.AFTER, f32, buffer(2, device="GPU"), u(Ops.SINK, void)).device == "GPU"


# ---- the shard axis -----------------------------------------------------------------------------------
def sharded(*dims): return buffer(*dims, device=TWO)


def test_buffer_on_a_tuple_device_is_sharded_on_axis_0():
  assert sharded(8, 4).axis == 0
  assert buffer(8, 4).axis is None


@pytest.mark.parametrize("new, want", [
  ((32,), 0),          # flattening keeps the shard boundary on the one axis
  ((2, 4, 4), 0),      # splitting the sharded axis: the boundary stays on the outer part
  ((1, 8, 4), 1),      # a leading size-1 axis moves the shard axis along
  ((8, 2, 2), 0),
], ids=str)
def test_reshape_remaps_the_shard_axis(new, want):
  assert u(Ops.RESHAPE, f32, sharded(8, 4), shape(*new)).axis == want


def test_reshape_of_an_inner_shard_axis():
  inner = u(Ops.PERMUTE, f32, sharded(8, 4), arg=(1, 0))  # (4, 8) sharded on axis 1: 4 elements before it
  assert u(Ops.RESHAPE, f32, inner, shape(4, 2, 4)).axis == 1
  assert u(Ops.RESHAPE, f32, inner, shape(32)).axis is None  # no axis starts after 4 elements


def test_permute_follows_the_shard_axis():
  assert u(Ops.PERMUTE, f32, sharded(8, 4), arg=(1, 0)).axis == 1
  assert u(Ops.PERMUTE, f32, sharded(8, 4, 2), arg=(2, 0, 1)).axis == 1


def test_reduce_on_the_shard_axis_clears_it():
  assert u(Ops.REDUCE, f32, sharded(8, 4), arg=(Ops.ADD, (0,))).axis is None
  assert u(Ops.REDUCE, f32, sharded(8, 4), arg=(Ops.ADD, (1,))).axis == 0


def test_copy_clears_the_shard_axis():
  assert u(Ops.LOAD, f32, sharded(8, 4), arg=("CPU:0",)).axis is None


def test_alu_ops_inherit_the_shard_axis():
  assert u(Ops.ADD, f32, c(1.0, f32), sharded(8, 4)).axis == 0
  assert u(Ops.CAST, i32, sharded(8, 4)).axis == 0
  assert u(Ops.WHERE, f32, c(True, b), sharded(8, 4), c(0.0, f32)).axis == 0


def test_copy_to_a_tuple_device_reshards_on_axis_0():  # seed 000: "COPY to an n-tuple device reshards with axis = 0"
  col = u(Ops.PERMUTE, f32, sharded(8, 4), arg=(1, 0))
  assert u(Ops.LOAD, f32, col, arg=(TWO,)).axis == 0
  assert u(Ops.LOAD, f32, buffer(8, 4), arg=(TWO,)).axis == 0
  assert u(Ops.LOAD, f32, col).axis == 1  # a LOAD naming no device is no copy: it keeps the axis


def test_param_on_a_tuple_device_is_sharded_like_a_buffer():
  p = u(Ops.PARAM, f32, shape(8, 4), arg=(0, "p", TWO))
  assert (p.axis, p.device) == (0, TWO)
  assert u(Ops.PARAM, f32, shape(), arg=(0, "s", TWO)).axis is None  # a scalar has no axis to shard


def test_multi_is_the_whole_tensor_of_its_shards():
  a, b2 = buffer(4, 3, device="CPU:0"), buffer(4, 3, device="CPU:1")
  m = u(Ops.MULTI, f32, a, b2, arg=0)
  assert (m.shape, m.device, m.axis) == ((8, 3), TWO, 0)
  stacked = u(Ops.MULTI, f32, a, b2)  # tinygrad's MSTACK: one whole value per device
  assert (stacked.shape, stacked.axis) == ((4, 3), None)


def test_mselect_is_one_devices_shard():
  x = u(Ops.MSELECT, f32, sharded(8, 4), arg=1)
  assert (x.shape, x.device, x.axis) == ((4, 4), TWO[1], None)


def test_replicated_drops_the_per_device_axis():
  rows = u(Ops.LOAD, f32, u(Ops.EXPAND, f32, buffer(1, 5), shape(2, 5)), arg=(TWO,))
  r = u(Ops.REPLICATED, f32, rows, arg=0)
  assert (r.shape, r.device, r.axis) == ((5,), TWO, None)
  assert u(Ops.ALLREDUCE, f32, r, arg=(Ops.ADD, TWO)).axis is None
