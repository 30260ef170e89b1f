"""Rangeify: the kernel split and the lowering, checked by running the kernels in a small interpreter
of kernel-level IR (below, written from the README's IR table) against the numpy reference."""
import numpy as np
import pytest

from tensor_ref import _BINARY, _UNARY, np_dtype, run_func
from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.rangeify import rangeify
from uopc.uop import UOp

f32, i32 = dtypes.float32, dtypes.int32


# ---- a reference interpreter of kernel-level programs -----------------------------------------------------
class KernelInterpreter:
  """Evaluates a kernel SINK: each node once per value of the RANGEs it depends on (END closes its RANGE)."""

  def __init__(self, memory: dict, variables: dict):
    self.memory, self.variables, self.env, self.memo, self.deps = memory, variables, {}, {}, {}

  def ranges(self, u):
    if u not in self.deps:
      if u.op is Ops.RANGE: d = {u} | self.ranges(u.src[0])
      elif u.op is Ops.END: d = (self.ranges(u.src[0]) - {u.src[1]}) | self.ranges(u.src[1].src[0])
      else: d = set().union(*(self.ranges(s) for s in u.src))
      self.deps[u] = frozenset(d)
    return self.deps[u]

  def ev(self, u):
    key = (u, tuple(sorted((r.arg[0], self.env[r]) for r in self.ranges(u))))
    if key not in self.memo: self.memo[key] = self.compute(u)
    return self.memo[key]

  def compute(self, u):
    op, src = u.op, u.src
    if op is Ops.CONST: return np.array(u.arg, np_dtype(u.dtype))
    if op is Ops.DEFINE_VAR: return np.int64(self.variables[u.arg[0]])
    if op is Ops.RANGE: return np.int64(self.env[u])
    if op in (Ops.PARAM, Ops.BUFFER):
      if op is Ops.BUFFER: self.memory.setdefault(u, np.zeros(u.dtype.size, np_dtype(u.dtype.base)))
      return self.memory[u.arg[0] if op is Ops.PARAM else u]  # a PARAM by its slot
    if op is Ops.AFTER:
      for d in src[1:]: self.ev(d)
      return self.ev(src[0])
    if op is Ops.INDEX: return (self.ev(src[0]), int(self.ev(src[1])))
    if op is Ops.LOAD:
      if len(src) == 3 and not self.ev(src[2]): return self.ev(src[1])
      buf, i = self.ev(src[0])
      assert 0 <= i < len(buf), f"load out of bounds: {i} of {len(buf)}"
      return buf[i]
    if op is Ops.STORE:
      if len(src) == 3 and not self.ev(src[2]): return None
      (buf, i), v = self.ev(src[0]), self.ev(src[1])
      assert 0 <= i < len(buf), f"store out of bounds: {i} of {len(buf)}"
      buf[i] = v
      return None
    if op is Ops.END:
      r = src[1]
      for v in range(int(self.ev(r.src[0]))):
        self.env[r] = v
        self.ev(src[0])
      del self.env[r]
      return None
    if op in (Ops.SINK, Ops.GROUP):
      for s in src: self.ev(s)
      return None
    if op is Ops.CAST: return np.array(self.ev(src[0])).astype(np_dtype(u.dtype))
    if op is Ops.BITCAST: return np.array(self.ev(src[0])).view(np_dtype(u.dtype))
    if op is Ops.WHERE: return np.where(self.ev(src[0]), self.ev(src[1]), self.ev(src[2])).astype(np_dtype(u.dtype))
    xs = [np.asarray(self.ev(s)) for s in src]
    with np.errstate(all="ignore"):
      return np.asarray((_UNARY[op] if op in _UNARY else _BINARY[op])(*xs)).astype(np_dtype(u.dtype))


def run_kernels(prog, arrays: dict, variables: dict | None = None) -> dict:
  """Run a KernelProgram's launches: entry buffers from `arrays` (flattened views), intermediates
  zero-filled; each launch sees the buffers it binds at its kernel's slots."""
  variables = variables or {}
  def size(b): return int(np.prod([d if isinstance(d, int) else variables[d.arg[0]] for d in b.shape]))
  flat = {b.name: arrays[b.name].reshape(-1) if b.is_arg else np.zeros(size(b), np_dtype(b.dtype)) for b in prog.buffers}
  for ln in prog.launches: KernelInterpreter({s: flat[b.name] for s, b in ln.binds}, variables).ev(prog.kernels[ln.kernel])
  return arrays


# ---- building tensor programs ------------------------------------------------------------------------------
def param(slot, name, shape, dt=f32): return UOp(Ops.PARAM, dt, (UOp.shape_of(shape),), (slot, name))
def const(v, dt=f32): return UOp.const(dt, v)
def store(buf, val): return UOp(Ops.STORE, dtypes.void, (buf, val))
def sink(*xs): return UOp(Ops.SINK, dtypes.void, xs)
def reshape(x, shape): return UOp(Ops.RESHAPE, x.dtype, (x, UOp.shape_of(shape)))
def expand(x, shape): return UOp(Ops.EXPAND, x.dtype, (x, UOp.shape_of(shape)))
def pad(x, offs, shape): return UOp(Ops.PAD, x.dtype, (x, UOp.shape_of(offs), UOp.shape_of(shape)))
def shrink(x, offs, shape): return UOp(Ops.SHRINK, x.dtype, (x, UOp.shape_of(offs), UOp.shape_of(shape)))
def permute(x, order): return UOp(Ops.PERMUTE, x.dtype, (x,), tuple(order))
def flip(x, flags): return UOp(Ops.FLIP, x.dtype, (x,), tuple(flags))
def reduce(x, op, axes): return UOp(Ops.REDUCE, x.dtype, (x,), (op, tuple(axes)))
def exp(x): return x.alu(Ops.MUL, const(1.4426950408889634)).alu(Ops.EXP2)


def softmax_program(n, m):
  x, out = param(0, "x", (n, m)), param(1, "out", (n, m))
  mx = expand(reduce(x, Ops.MAX, (1,)), (n, m))
  e = exp(x.alu(Ops.SUB, mx))
  s = expand(reduce(e, Ops.ADD, (1,)), (n, m))
  return sink(store(out, e.alu(Ops.DIV, s)))


def gemm_program(m, k, n):
  a, b, c = param(0, "a", (m, k)), param(1, "b", (k, n)), param(2, "c", (m, n))
  prod = expand(reshape(a, (m, k, 1)), (m, k, n)).alu(Ops.MUL, expand(reshape(b, (1, k, n)), (m, k, n)))
  return sink(store(c, reshape(reduce(prod, Ops.ADD, (1,)), (m, n))))


def prefix_sum_program(n, dt=i32):
  t, out = param(0, "t", (n,), dt), param(1, "out", (n,), dt)
  x = pad(t, (n - 1,), (2 * n - 1,))
  x = expand(reshape(x, (1, 2 * n - 1)), (n + 1, 2 * n - 1))
  x = shrink(reshape(x, ((n + 1) * (2 * n - 1),)), (0,), (2 * n * n,))
  x = shrink(reshape(x, (n, 2 * n)), (0, 0), (n, n))
  return sink(store(out, reshape(reduce(x, Ops.ADD, (1,)), (n,))))


def window_sums(x, n):
  """seed 000's prefix_sum as tinygrad writes cumsum: x padded by n-1 before, tiled n+1 times, cut into
  rows of 2n and each row's first n summed: out[i] = x[0] + .. + x[i]."""
  x = pad(x, (n - 1,), (2 * n - 1,))
  x = expand(reshape(x, (1, 2 * n - 1)), (n + 1, 2 * n - 1))
  x = shrink(reshape(x, ((n + 1) * (2 * n - 1),)), (0,), (2 * n * n,))
  return reshape(reduce(shrink(reshape(x, (n, 2 * n)), (0, 0), (n, n)), Ops.ADD, (1,)), (n,))


def arange_program(n, dt=i32):
  """Tensor.arange(n) as tinygrad 0.14 builds it: the cumsum of n ones, minus one."""
  ones = expand(reshape(const(1, dt), (1,)), (n,))
  out = param(0, "out", (n,), dt)
  return sink(store(out, window_sums(ones, n).alu(Ops.SUB, const(1, dt))))


def inputs_for(prog_sink, rng, variables=None):
  """Random contents for every PARAM (those only written too: a STORE must overwrite them)."""
  out = {}
  for p in (u for u in prog_sink.toposort() if u.op is Ops.PARAM):
    shape = tuple(d if isinstance(d, int) else variables[d.arg[0]] for d in p.shape)
    dt = np_dtype(p.dtype)
    out[p.arg[1]] = rng.standard_normal(shape).astype(dt) if p.dtype.is_float() else rng.integers(-5, 6, shape).astype(dt)
  return out


def check(prog_sink, variables=None, seed=0):
  rng = np.random.default_rng(seed)
  arrays = inputs_for(prog_sink, rng, variables)
  want = run_func(prog_sink, {k: v.copy() for k, v in arrays.items()}, variables)
  prog = rangeify(prog_sink)
  got = run_kernels(prog, {k: v.copy() for k, v in arrays.items()}, variables)
  for name in want:
    if np.issubdtype(want[name].dtype, np.floating): np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    else: np.testing.assert_array_equal(got[name], want[name])
  return prog


# ---- tests -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 8), (3, 5), (1, 7), (6, 1)])
def test_elementwise_chain_is_one_kernel(shape):
  x, y, out = param(0, "x", shape), param(1, "y", shape), param(2, "out", shape)
  v = x.alu(Ops.MUL, y).alu(Ops.ADD, const(1.0)).alu(Ops.MAX, const(0.0)).alu(Ops.SUB, y.alu(Ops.MUL, const(0.5)))
  prog = check(sink(store(out, v)))
  assert len(prog.kernels) == 1 and not prog.intermediates


def test_broadcast_scalar_and_row():
  x, row, out = param(0, "x", (3, 4)), param(1, "row", (4,)), param(2, "out", (3, 4))
  assert len(check(sink(store(out, x.alu(Ops.ADD, row).alu(Ops.MUL, const(2.0)))) ).kernels) == 1


@pytest.mark.parametrize("n,m", [(4, 8), (3, 5), (1, 1), (2, 9)])
def test_softmax_is_one_kernel_with_its_reductions_fused(n, m):
  prog = check(softmax_program(n, m))
  assert len(prog.kernels) == 1 and not prog.intermediates
  if n > 1 and m > 1:  # per row: the max loop, the exp-sum loop, the division loop
    ranges = [u for u in prog.kernels[0].toposort() if u.op is Ops.RANGE]
    assert sorted(r.arg[1].name for r in ranges) == ["LOOP", "LOOP", "REDUCE", "REDUCE"]


def test_reduce_read_at_an_inner_output_loop_is_realized():
  # column sums read per row: computed inside the row loop they would repeat once per row
  x, out = param(0, "x", (4, 6)), param(1, "out", (4, 6))
  prog = check(sink(store(out, x.alu(Ops.SUB, expand(reduce(x, Ops.ADD, (0,)), (4, 6))))))
  assert len(prog.kernels) == 2 and len(prog.intermediates) == 1


@pytest.mark.parametrize("group,realized", [(64, True), (4, False)])
def test_reduce_read_through_a_merging_reshape(group, realized):
  """Group statistics read back through a reshape that merges their axis with others (group norm: the mean
  of (c, y, x) // group): the reduce's index depends on every output loop but repeats each element per
  merged iteration. A long reduction is realized (fused, 2 x 16 x 4 x 4 outputs would each run one); a short
  one (cumsum's 4-block sums) stays fused."""
  n, c, hw = 2, 16, group // 4
  x, out = param(0, "x", (n, c, hw, 2)), param(1, "out", (n, c, hw, 2))
  grouped = reshape(x, (n, c * hw * 2 // group, group))
  mean = expand(reduce(grouped, Ops.ADD, (2,)), grouped.shape)
  prog = check(sink(store(out, reshape(grouped.alu(Ops.SUB, mean), x.shape))))
  assert len(prog.kernels) == (2 if realized else 1)


def test_reduce_read_inside_another_reduction_loop_is_realized():
  # s read twice per element inside the sum over rows: fused it would repeat once per row of that sum
  x, out = param(0, "x", (4, 6)), param(1, "out", (1, 1))
  s = reduce(x, Ops.ADD, (1,))
  prog = check(sink(store(out, reduce(s.alu(Ops.MUL, s), Ops.ADD, (0,)))))
  assert len(prog.kernels) == 2 and len(prog.intermediates) == 1


def _mlp(act, m=4, k=6, h=8, n=5):
  """act(x @ w1) @ w2: the activation is read through a broadcast over n inside the second matmul."""
  x, w1, w2, out = param(0, "x", (m, k)), param(1, "w1", (k, h)), param(2, "w2", (h, n)), param(3, "out", (m, n))
  a = reshape(reduce(expand(reshape(x, (m, k, 1)), (m, k, h)).alu(Ops.MUL, expand(reshape(w1, (1, k, h)), (m, k, h))), Ops.ADD, (1,)), (m, h))
  g = act(a)
  prod = expand(reshape(g, (m, h, 1)), (m, h, n)).alu(Ops.MUL, expand(reshape(w2, (1, h, n)), (m, h, n)))
  return sink(store(out, reshape(reduce(prod, Ops.ADD, (1,)), (m, n))))


def _ops_per_kernel(prog, op):
  return [sum(u.op is op for u in k.toposort()) for k in prog.kernels]


def test_an_expensive_activation_is_computed_once_not_once_per_output_column():
  """GELU-like a / (1 + exp(..)) fused into the second matmul ran once per output column: it is realized,
  computed with the first matmul, and the second matmul only reads it."""
  prog = check(_mlp(lambda a: a.alu(Ops.DIV, const(1.0).alu(Ops.ADD, exp(a.alu(Ops.MUL, const(-1.702)))))))
  assert len(prog.kernels) == 2 and _ops_per_kernel(prog, Ops.EXP2) == [1, 0]


def test_a_cheap_activation_stays_fused():
  prog = check(_mlp(lambda a: a.alu(Ops.MAX, const(0.0))))  # ReLU: recomputing it costs less than a buffer
  assert len(prog.kernels) == 2 and _ops_per_kernel(prog, Ops.MAX)[1] == 1


def test_an_expensive_value_not_repeated_stays_fused():
  """softmax's exp is read inside its row sum at every column: not repeated, so one kernel."""
  assert len(check(softmax_program(4, 8)).kernels) == 1


@pytest.mark.parametrize("mkn", [(2, 3, 4), (5, 1, 3), (1, 7, 1), (4, 4, 4)])
def test_gemm_is_one_kernel(mkn):
  prog = check(gemm_program(*mkn))
  assert len(prog.kernels) == 1
  ranges = [u for u in prog.kernels[0].toposort() if u.op is Ops.RANGE]
  assert sum(r.arg[1] is AxisType.REDUCE for r in ranges) == (mkn[1] > 1)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_prefix_sum(n):
  assert len(check(prefix_sum_program(n)).kernels) == 1


def test_movement_ops():
  x, out = param(0, "x", (3, 4, 2)), param(1, "out", (5, 3, 4))
  v = permute(x, (2, 0, 1))                                   # (2, 3, 4)
  v = flip(v, (True, False, True))
  v = pad(v, (1, 0, 1), (4, 3, 6))
  v = shrink(v, (0, 0, 1), (4, 3, 4))
  v = reshape(v, (4, 12))
  v = pad(v, (1, 0), (5, 12))
  check(sink(store(out, reshape(v, (5, 3, 4)))))


def test_pad_then_elementwise_fills_zero_before_the_op():
  x, out = param(0, "x", (3,)), param(1, "out", (5,))
  check(sink(store(out, exp(pad(x, (1,), (5,))))))


def test_reduce_feeding_reduce_and_full_reduce():
  x, out, tot = param(0, "x", (3, 4, 5)), param(1, "out", (3, 1, 1)), param(2, "tot", (1,))
  inner = reduce(x, Ops.ADD, (2,))
  prog = check(sink(store(out, reduce(inner, Ops.MAX, (1,))), store(tot, reshape(reduce(x, Ops.MUL, (0, 1, 2)), (1,)))))
  assert len(prog.kernels) == 2


def test_reduce_read_twice_is_realized_once():
  x, o1, o2 = param(0, "x", (4, 6)), param(1, "o1", (4, 1)), param(2, "o2", (4, 1))
  s = reduce(x, Ops.ADD, (1,))
  prog = check(sink(store(o1, s.alu(Ops.MUL, const(2.0))), store(o2, s.alu(Ops.ADD, const(1.0)))))
  assert len(prog.kernels) == 3 and len(prog.intermediates) == 1


def test_contiguous_forces_a_buffer():
  x, out = param(0, "x", (4,)), param(1, "out", (4,))
  c = UOp(Ops.CONTIGUOUS, f32, (x.alu(Ops.ADD, const(1.0)),))
  prog = check(sink(store(out, c.alu(Ops.MUL, c))))
  assert len(prog.kernels) == 2 and len(prog.intermediates) == 1


def test_stack_and_gather():
  a, b, idx, out = param(0, "a", (4,)), param(1, "b", (4,)), param(2, "idx", (3,), i32), param(3, "out", (3, 2))
  st = UOp(Ops.STACK, f32, (a, b))                    # (2, 4)
  g = UOp(Ops.INDEX, f32, (permute(st, (1, 0)), idx))  # (3, 2)
  rng = np.random.default_rng(1)
  prog_sink = sink(store(out, g))
  arrays = {"a": rng.standard_normal(4).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
            "idx": np.array([3, 0, 2], np.int32), "out": np.zeros((3, 2), np.float32)}
  want = run_func(prog_sink, {k: v.copy() for k, v in arrays.items()})
  got = run_kernels(rangeify(prog_sink), {k: v.copy() for k, v in arrays.items()})
  np.testing.assert_allclose(got["out"], want["out"])


def test_symbolic_size_stays_a_variable():
  n = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("n", 1, 16))
  x, out = param(0, "x", (n, 3)), param(1, "out", (n, 1))
  prog = check(sink(store(out, reduce(x.alu(Ops.MUL, x), Ops.ADD, (1,)))), variables={"n": 5})
  assert prog.variables == (n,)


def test_call_body_compiles_once_and_runs_at_each_call_site():
  a = param(0, "a", (3, 4))
  body = UOp(Ops.TUPLE, dtypes.void, (reduce(a.alu(Ops.MUL, a), Ops.ADD, (1,)), a.alu(Ops.ADD, const(1.0))))
  x, y = param(0, "x", (3, 4)), param(1, "y", (3, 4))
  o1, o2 = param(2, "o1", (3, 1)), param(3, "o2", (3, 4))
  c1 = UOp(Ops.CALL, dtypes.void, (body, x.alu(Ops.MUL, const(2.0))))
  c2 = UOp(Ops.CALL, dtypes.void, (body, y))
  def get(c, i): return UOp(Ops.GETTUPLE, f32, (c,), i)
  prog = check(sink(store(o1, get(c1, 0).alu(Ops.ADD, get(c2, 0))), store(o2, get(c2, 1))))
  # kernels: x*2 into a buffer, the body's 2 results (once), the two stores: nothing of a CALL is fused
  assert len(prog.kernels) == 1 + 2 + 2 and len(prog.intermediates) == 5
  # launches: x*2, the body at each call site, the two stores
  assert [ln.kernel for ln in prog.launches] == [0, 1, 2, 1, 2, 3, 4]
  first, second = prog.launches[1:3], prog.launches[3:5]
  assert [ln.buffer(0).name for ln in first] == [prog.launches[0].binds[-1][1].name] * 2  # the formal: x*2's buffer
  assert [ln.buffer(0).name for ln in second] == ["y", "y"]
  results = [ln.binds[-1][1] for ln in first + second]
  assert len({b.name for b in results}) == 4 and not any(b.is_arg for b in results)


def test_assign_then_read_after_runs_in_order():
  x, out = param(0, "x", (5,)), param(1, "out", (5,))
  st = store(x, x.alu(Ops.ADD, const(1.0)))
  after = UOp(Ops.AFTER, f32, (x, st))
  prog = check(sink(UOp(Ops.GROUP, dtypes.void, (store(out, after.alu(Ops.MUL, const(2.0))),))))
  assert len(prog.kernels) == 2


# ---- writing a buffer that is also read (the module docstring's part 3) -----------------------------------
def after(buf, *deps): return UOp(Ops.AFTER, buf.dtype, (buf, *deps))


def copies(prog) -> int:
  """How many kernels only copy a buffer (the snapshots): a LOAD stored as it is."""
  return sum(1 for k in prog.kernels for u in k.toposort() if u.op is Ops.STORE and u.src[1].op is Ops.LOAD)


def test_elementwise_store_into_an_input_runs_in_place():
  x, y = param(0, "x", (4, 6)), param(1, "y", (6,))
  prog = check(sink(store(x, x.alu(Ops.MUL, y).alu(Ops.ADD, x))))
  assert len(prog.kernels) == 1 and not prog.intermediates


def test_store_reading_its_target_elsewhere_reads_a_snapshot():
  x = param(0, "x", (5, 5))
  prog = check(sink(store(x, permute(x, (1, 0)).alu(Ops.ADD, x))))
  assert len(prog.kernels) == 2 and copies(prog) == 1 and len(prog.intermediates) == 1


def test_softmax_in_place_reads_its_rows_from_a_snapshot():
  x = param(0, "x", (3, 7))
  mx = expand(reduce(x, Ops.MAX, (1,)), (3, 7))
  e = exp(x.alu(Ops.SUB, mx))
  prog = check(sink(store(x, e.alu(Ops.DIV, expand(reduce(e, Ops.ADD, (1,)), (3, 7))))))
  assert copies(prog) == 1


def test_plain_read_after_a_store_runs_first_and_sees_the_value_on_entry():
  x, y = param(0, "x", (6,)), param(1, "y", (6,))
  prog = check(sink(store(x, x.alu(Ops.ADD, const(1.0))), store(y, x.alu(Ops.MUL, x))))
  assert copies(prog) == 0 and [ln.binds[-1][1].name for ln in prog.launches] == ["y", "x"]


def test_stores_to_one_buffer_keep_their_order_when_a_reader_moves_before_them():
  """x = 2; y = 2 * (x on entry); x = x + 1 (after the first store): y's kernel first, then x's two in order."""
  x, y = param(0, "x", (6,)), param(1, "y", (6,))
  st1 = store(x, const(2.0))
  prog = check(sink(st1, store(y, x.alu(Ops.MUL, const(2.0))), store(x, after(x, st1).alu(Ops.ADD, const(1.0)))))
  assert copies(prog) == 0 and [ln.binds[-1][1].name for ln in prog.launches] == ["y", "x", "x"]


def test_swapping_two_buffers_reads_a_snapshot():
  """x = y and y = x, both of the values on entry: no order of the two kernels reads both before they are overwritten."""
  x, y = param(0, "x", (6,)), param(1, "y", (6,))
  prog = check(sink(store(x, y.alu(Ops.ADD, const(0.0))), store(y, x.alu(Ops.ADD, const(0.0)))))
  assert copies(prog) == 1


def test_plain_read_before_the_store_needs_no_snapshot():
  x, y = param(0, "x", (6,)), param(1, "y", (6,))
  prog = check(sink(store(y, x.alu(Ops.MUL, x)), store(x, x.alu(Ops.ADD, const(1.0)))))
  assert len(prog.kernels) == 2 and copies(prog) == 0


def test_after_reads_the_version_its_store_wrote():
  """x += 1, x *= 2, and out reads the x of after the first store, which the second has replaced."""
  x, out = param(0, "x", (4, 3)), param(1, "out", (4, 3))
  st1 = store(x, x.alu(Ops.ADD, const(1.0)))
  st2 = store(after(x, st1), after(x, st1).alu(Ops.MUL, const(2.0)))
  prog = check(sink(st1, st2, store(out, after(x, st1).alu(Ops.SUB, after(x, st2)))))
  assert copies(prog) == 1


def test_call_argument_is_the_version_it_names():
  a = param(0, "a", (3,))
  body = UOp(Ops.TUPLE, dtypes.void, (a.alu(Ops.MUL, const(3.0)),))
  x, out = param(0, "x", (3,)), param(1, "out", (3,))
  st = store(x, x.alu(Ops.ADD, const(1.0)))
  call = UOp(Ops.CALL, dtypes.void, (body, x))
  check(sink(st, store(out, UOp(Ops.GETTUPLE, f32, (call,), 0))))


def test_markers_are_identities():
  x, out = param(0, "x", (2, 3)), param(1, "out", (2, 3))
  v = UOp(Ops.DETACH, f32, (UOp(Ops.CONTIGUOUSBACKWARD, f32, (x.alu(Ops.MUL, x),)),))
  assert len(check(sink(store(out, v))).kernels) == 1


PAD_OF_MOD = """func padmod {
  %x = PARAM([4, 2]) {(0, "x")} : i8
  %m = MOD(%x, %x)
  %p = PAD(%m, [1, 1], [6, 4])
  %out = PARAM([6, 4]) {(1, "out")} : i8
  STORE(%out, %p)
}
"""


def test_division_inside_a_pad_never_divides_by_the_fill(tmp_path):
  """The fill's lanes load 0; a MOD there must not divide by it (UB, and a fault in the emulator)."""
  from click.testing import CliRunner
  from uopc.cli import cli
  (tmp_path / "p.uop").write_text(PAD_OF_MOD)
  np.save(tmp_path / "x.npy", np.array([[3, -5], [7, 2], [-1, 9], [4, 4]], np.int8))
  r = CliRunner().invoke(cli, ["run", str(tmp_path / "p.uop"), "--emulate", "--input", f"x={tmp_path / 'x.npy'}",
                               "--output", f"out={tmp_path / 'out.npy'}"])
  assert r.exit_code == 0, r.output
  np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.zeros((6, 4), np.int8))


# ---- reductions in closed form (uopc/stages/reduce_collapse.py) ---------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 13, 64])
@pytest.mark.parametrize("dt", [i32, f32])
def test_arange_is_an_index_expression_not_an_o_n2_sum(n, dt):
  prog = check(arange_program(n, dt))
  assert len(prog.kernels) == 1 and not [u for u in prog.kernels[0].toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]
  got = run_kernels(prog, {"out": np.zeros(n, np_dtype(dt))})["out"]
  np.testing.assert_array_equal(got, np.arange(n).astype(np_dtype(dt)))


def test_a_cumsum_of_data_keeps_its_loop():
  x, out = param(0, "x", (7,), i32), param(1, "out", (7,), i32)
  prog = check(sink(store(out, window_sums(x, 7))))
  assert [u for u in prog.kernels[0].toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]


@pytest.mark.parametrize("dt,v", [(i32, 3), (f32, 2.0), (f32, 0.5)])
def test_sums_of_a_padded_constant_collapse_when_exact(dt, v):
  """sum over a window of PAD(full(v)): v times the count of the window's valid places, exactly;
  a float constant that is no integer keeps its loop (the partial sums' rounding is the loop's)."""
  out = param(0, "out", (6,), dt)
  padded = pad(expand(reshape(const(v, dt), (1, 1)), (4, 3)), (1, 2), (6, 8))     # rows 1..4, columns 2..4 hold v
  prog = check(sink(store(out, reshape(reduce(padded, Ops.ADD, (1,)), (6,)))))
  loops = [u for u in prog.kernels[0].toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]
  assert bool(loops) == (v == 0.5)
  np.testing.assert_array_equal(run_kernels(prog, {"out": np.zeros(6, np_dtype(dt))})["out"], np.array([0, 3, 3, 3, 3, 0]) * v)


def embedding_program(vocab, dim, n, dt=f32):
  """tinygrad's Embedding: (arange(vocab) == idx[:, None])[..., None].where(weight, 0).sum(1)."""
  w, idx, out = param(0, "w", (vocab, dim), dt), param(1, "idx", (n,), i32), param(2, "out", (n, dim), dt)
  arange = window_sums(expand(reshape(const(1, i32), (1,)), (vocab,)), vocab).alu(Ops.SUB, const(1, i32))
  eq = expand(reshape(arange, (1, vocab)), (n, vocab)).alu(Ops.CMPNE, expand(reshape(idx, (n, 1)), (n, vocab))).alu(Ops.CMPNE, const(True, dtypes.bool))
  mask = expand(reshape(eq, (n, vocab, 1)), (n, vocab, dim))
  picked = mask.alu(Ops.WHERE, expand(reshape(w, (1, vocab, dim)), (n, vocab, dim)), const(0.0, dt))
  return sink(store(out, reshape(reduce(picked, Ops.ADD, (1,)), (n, dim))))


def _one_hot_rows(table: str, idx: str, rows: int, n: int, tag: str) -> str:
  """Lines of `.uop` text picking rows of the [rows, 1] table by the [n] indices as tinygrad's embedding
  does (arange(rows) == idx, WHERE, summed over the rows); its value is %{tag}."""
  r2 = 2 * rows - 1
  ops = ["CONST {{1}} : i32", "RESHAPE(%{p}, [1])", f"EXPAND(%{{p}}, [{rows}])", f"PAD(%{{p}}, [{rows - 1}], [{r2}])",
         f"RESHAPE(%{{p}}, [1, {r2}])", f"EXPAND(%{{p}}, [{rows + 1}, {r2}])", f"RESHAPE(%{{p}}, [{(rows + 1) * r2}])",
         f"SHRINK(%{{p}}, [0], [{2 * rows * rows}])", f"RESHAPE(%{{p}}, [{rows}, {2 * rows}])",
         f"SHRINK(%{{p}}, [0, 0], [{rows}, {rows}])", "REDUCE(%{p}) {{(ADD, (0,))}}", f"RESHAPE(%{{p}}, [{rows}])",
         "ADD(%{p}, -1)", f"RESHAPE(%{{p}}, [{rows}, 1])"]
  lines = [f"  %{tag}{k} = {op.format(p=f'{tag}{k - 1}')}" for k, op in enumerate(ops)]
  ar = f"%{tag}{len(ops) - 1}"
  lines += [f"  %{tag}i0 = RESHAPE({idx}, [1, 1, {n}])", f"  %{tag}i1 = EXPAND(%{tag}i0, [{rows}, 1, {n}])",
            f"  %{tag}i2 = PERMUTE(%{tag}i1) {{(2, 0, 1)}}", f"  %{tag}i3 = CMPNE(%{tag}i2, {ar})",
            f"  %{tag}i4 = CMPNE(%{tag}i3, True)", f"  %{tag}t = RESHAPE({table}, [1, {rows}, 1])",
            f"  %{tag}w = WHERE(%{tag}i4, %{tag}t, 0.0)", f"  %{tag}p = PERMUTE(%{tag}w) {{(1, 0, 2)}}",
            f"  %{tag}s = REDUCE(%{tag}p) {{(ADD, (0,))}}", f"  %{tag} = RESHAPE(%{tag}s, [{n}, 1])"]
  return "\n".join(lines) + "\n"


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_a_gather_of_a_gather_loads_the_inner_index_only_in_range(tmp_path, target):
  """out[i] = w[inner[outer[i]]]: the outer gather gates every load of the inner one, the load of the
  inner index inside the table's address too (the emulator faults on an out-of-bounds load)."""
  from uopc.run import run_file
  text = ('func gg {\n  %w = PARAM([3, 1]) {(0, "w")} : f32\n  %inner = PARAM([3]) {(1, "inner")} : i32\n'
          '  %outer = PARAM([4]) {(2, "outer")} : i32\n' + _one_hot_rows("%w", "%inner", 3, 3, "m") +
          _one_hot_rows("%m", "%outer", 3, 4, "o") + '  %out = PARAM([4, 1]) {(3, "out")} : f32\n  STORE(%out, %o)\n}\n')
  (tmp_path / "gg.uop").write_text(text)
  inputs = {"w": np.array([[1.0], [2.0], [3.0]], np.float32), "inner": np.array([2, 7, -1], np.int32),
            "outer": np.array([0, 1, 2, 5], np.int32)}
  got = run_file(tmp_path / "gg.uop", target=target, inputs=inputs, emulated=True).arrays["out"]
  np.testing.assert_array_equal(got, np.array([[3.0], [0.0], [0.0], [0.0]], np.float32))


@pytest.mark.parametrize("dt", [f32, i32])
def test_a_one_hot_sum_is_a_gather(dt):
  """No loop over the vocabulary: one gated load per output element; an index out of range (7, -1)
  gives the row of zeros the sum gives; -0.0 in the table comes out +0.0, as 0.0 + -0.0 does."""
  prog = rangeify(embedding_program(6, 3, 6, dt))
  assert not [u for k in prog.kernels for u in k.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]
  w = np.arange(18).reshape(6, 3).astype(np_dtype(dt))
  if dt is f32: w[2, 1] = -0.0
  idx = np.array([1, 5, 0, 7, -1, 2], np.int32)
  got = run_kernels(prog, {"w": w, "idx": idx, "out": np.full((6, 3), 99, np_dtype(dt))})["out"]
  want = np.where((idx[:, None] >= 0) & (idx[:, None] < 6), w[np.clip(idx, 0, 5)], 0) + (0.0 if dt is f32 else 0)
  np.testing.assert_array_equal(got, want)
  if dt is f32: assert not np.signbit(got[5, 1])
  check(embedding_program(6, 3, 6, dt))


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_a_gathered_division_divides_by_one_where_the_index_is_out_of_range(tmp_path, target):
  """sum over r of WHERE(r == idx, x // y, 0) (a one-hot pick of a quotient): the gather reads y with
  fill 0 where idx is out of range, and x // 0 is undefined (the fuzz saw SIGFPE and clang's ud2): the
  divisor is 1 there, the result still 0. Run natively in a forked child, which a trap cannot take down."""
  from test_differential import in_child
  from uopc.run import run_file
  text = ('func q {\n  %x = PARAM([2, 4]) {(0, "x")} : i64\n  %y = PARAM([2, 4]) {(1, "y")} : i64\n'
          '  %idx = PARAM([2]) {(2, "idx")} : i32\n  %d = IDIV(%x, %y)\n  %ar = CONST {1} : i32\n'
          '  %a1 = RESHAPE(%ar, [1])\n  %a2 = EXPAND(%a1, [2])\n  %a3 = PAD(%a2, [1], [3])\n  %a4 = RESHAPE(%a3, [1, 3])\n'
          '  %a5 = EXPAND(%a4, [3, 3])\n  %a6 = RESHAPE(%a5, [9])\n  %a7 = SHRINK(%a6, [0], [8])\n  %a8 = RESHAPE(%a7, [2, 4])\n'
          '  %a9 = SHRINK(%a8, [0, 0], [2, 2])\n  %a10 = REDUCE(%a9) {(ADD, (0,))}\n  %a11 = RESHAPE(%a10, [2])\n'
          '  %a12 = ADD(%a11, -1)\n  %a13 = RESHAPE(%a12, [2, 1])\n  %i1 = RESHAPE(%idx, [1, 1, 2])\n'
          '  %i2 = EXPAND(%i1, [2, 4, 2])\n  %i3 = PERMUTE(%i2) {(2, 0, 1)}\n  %c1 = CMPNE(%i3, %a13)\n  %c2 = CMPNE(%c1, True)\n'
          '  %d1 = RESHAPE(%d, [1, 2, 4])\n  %w = WHERE(%c2, %d1, 0)\n  %p = PERMUTE(%w) {(1, 0, 2)}\n'
          '  %s = REDUCE(%p) {(ADD, (0,))}\n  %r = RESHAPE(%s, [2, 4])\n  %out = PARAM([2, 4]) {(3, "out")} : i64\n'
          '  STORE(%out, %r)\n}\n')
  (tmp_path / "q.uop").write_text(text)
  x, y = np.array([[3, 6, -2, 9], [13, 14, 0, 6]], np.int64), np.array([[17, 8, -17, 15], [10, 4, 9, -7]], np.int64)
  idx = np.array([3, -2], np.int32)  # both out of range: every output row is 0
  def run():
    got = run_file(tmp_path / "q.uop", target=target, inputs={"x": x, "y": y, "idx": idx}).arrays["out"]
    np.testing.assert_array_equal(got, np.zeros((2, 4), np.int64))
  assert in_child(run) is None
  inside = np.array([1, 0], np.int32)
  want = np.stack([np.trunc(x[i] / y[i]).astype(np.int64) for i in inside])
  got = run_file(tmp_path / "q.uop", target=target, inputs={"x": x, "y": y, "idx": inside}).arrays["out"]
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target, emulated", [("c", False), ("llvm", False), ("cuda", True)])
def test_a_gathered_softmax_sums_once_per_gather_not_once_per_index(tmp_path, target, emulated):
  """out = softmax(x, 0)[idx] (the random-seed fuzz's program, tinygrad's methods): the one-hot gather
  gated every load of the gathered expression, the softmax's reductions over x too, which made them
  depend on the loop over idx; their accumulators' initial stores, tied to no loop, stayed outside it,
  so the sum of exponentials grew by one softmax per index (outputs divided by 1, 2, 3). Only what
  depends on the gathered row is gated now: the reductions are computed once, before that loop."""
  from uopc.run import run_file
  text = ('func g {\n  %x = PARAM([5, 1]) {(0, "x")} : f32\n  %idx = PARAM([3]) {(1, "idx")} : i32\n'
          '  %mx = REDUCE(%x) {(MAX, (0,))}\n  %neg = MUL(%mx, -1.0)\n  %d = ADD(%x, %neg)\n'
          '  %l = MUL(%d, 1.4426950408889634)\n  %e = EXP2(%l)\n  %s = REDUCE(%e) {(ADD, (0,))}\n  %rs = RECIP(%s)\n'
          '  %sm = MUL(%e, %rs)\n' + _one_hot_rows("%sm", "%idx", 5, 3, "o") +
          '  %out = PARAM([3, 1]) {(2, "out")} : f32\n  STORE(%out, %o)\n}\n')
  (tmp_path / "g.uop").write_text(text)
  x = np.array([[0.384], [0.536], [-1.584], [1.011], [-0.760]], np.float32)
  idx = np.array([0, 1, 3], np.int32)
  got = run_file(tmp_path / "g.uop", target=target, inputs={"x": x, "idx": idx}, emulated=emulated).arrays["out"]
  e = np.exp(x.astype(np.float64) - x.max())
  np.testing.assert_allclose(got, (e / e.sum())[idx], rtol=1e-5)
  from click.testing import CliRunner
  from uopc.cli import cli
  shown = CliRunner().invoke(cli, ["build", str(tmp_path / "g.uop"), "-t", "c", "-o", str(tmp_path / "b"), "--print-after", "rangeify"])
  x_loads = [ln for ln in shown.output.splitlines() if "LOAD(" in ln]
  assert x_loads and sum(ln.count(",") == 2 for ln in x_loads) == 1, shown.output  # a gate on the gathered row's load only


SHIFTED_CUMSUM = """func shifted {
  %v0 = CONST {1} : i32
  %v1 = RESHAPE(%v0, [1])
  %v2 = EXPAND(%v1, [5])
  %v3 = PAD(%v2, [4], [9])
  %v4 = RESHAPE(%v3, [1, 9])
  %v5 = EXPAND(%v4, [6, 9])
  %v6 = RESHAPE(%v5, [54])
  %v7 = SHRINK(%v6, [0], [50])
  %v8 = RESHAPE(%v7, [5, 10])
  %v9 = SHRINK(%v8, [0, 0], [5, 5])
  %v14 = REDUCE(%v9) {(ADD, (0,))}
  %v15 = RESHAPE(%v14, [5])
  %v16 = ADD(%v15, -1)
  %v28 = SHL(%v16, %v16)
  %v30 = PAD(%v28, [4], [9])
  %v31 = RESHAPE(%v30, [1, 9])
  %v32 = EXPAND(%v31, [6, 9])
  %v33 = RESHAPE(%v32, [54])
  %v34 = SHRINK(%v33, [0], [50])
  %v35 = RESHAPE(%v34, [5, 10])
  %v36 = SHRINK(%v35, [0, 0], [5, 5])
  %v41 = REDUCE(%v36) {(ADD, (0,))}
  %v42 = RESHAPE(%v41, [5])
  %out = PARAM([5]) {(0, "out")} : i32
  %st = STORE(%out, %v42)
  SINK(%st)
}
"""


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_a_shift_outside_a_pad_is_by_zero(tmp_path, target):
  """The cumsum of arange(5) << arange(5) as tinygrad's windows write it: one place before the PAD's start the
  arange is -1, and SHL by it is undefined even where the PAD does not select it (the differential fuzzer, seed
  2468, the emulator's report). Outside the PAD's gate a shift amount is 0, as a divisor is 1."""
  from uopc.run import run_file
  (tmp_path / "s.uop").write_text(SHIFTED_CUMSUM)
  got = run_file(tmp_path / "s.uop", target=target, emulated=True).arrays["out"]
  assert got.tolist() == list(np.cumsum([i << i for i in range(5)]))


PADDED_CAST = """func padcast {
  %x = PARAM([3]) {(0, "x")} : f32
  %r = RECIP(%x)
  %c = CAST(%r) : i32
  %p = PAD(%c, [2], [5])
  %out = PARAM([5]) {(1, "out")} : i32
  %st = STORE(%out, %p)
  SINK(%st)
}
"""


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_a_float_to_int_cast_outside_a_pad_casts_zero(tmp_path, target):
  """Outside the PAD's gate the load reads 0 and 1/0 is inf, whose cast to an integer is undefined even where the
  PAD does not select it (the differential fuzzer, seed 1122): the cast's operand is 0 there."""
  from uopc.run import run_file
  (tmp_path / "p.uop").write_text(PADDED_CAST)
  got = run_file(tmp_path / "p.uop", target=target, inputs={"x": np.array([2, 4, 0.5], np.float32)}, emulated=True).arrays["out"]
  assert got.tolist() == [0, 0, 0, 0, 2]
