"""Index arithmetic under a gate (uopc.symbolic_gates) and reduction loops cut to their gate
(uopc.stages.reduce_trim), as tinygrad's backward passes of pooling windows and convolutions need them.

Every rewrite is checked by evaluating before and after over every combination of the loop indices
(test_symbolic's numpy reference evaluator): the gate keeps its value everywhere, and the address (or
the selected value) keeps it wherever the gate is true. End to end, tinygrad's own backward passes are
built and checked against numpy."""
import numpy as np
import pytest

from test_symbolic import add, c, evaluate, grid, idiv, lt, mod, mul, rng
from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.symbolic import simplify
from uopc.symbolic_gates import gate_false, simplify_given
from uopc.uop import UOp

F = dtypes.float32


def _and(*xs):
  out = xs[0]
  for x in xs[1:]: out = out.alu(Ops.AND, x)
  return out


def gated_load(address: UOp, gate: UOp) -> UOp:
  buf = UOp(Ops.PARAM, F.ptr(), (), (0, "x"))
  return UOp(Ops.LOAD, F, (UOp(Ops.INDEX, F.ptr(), (buf, address)), c(0.0, F), gate))


def assert_same_where_gated(before: UOp, after: UOp) -> None:
  """The LOADs' gates agree everywhere and their addresses wherever the gate is true."""
  (a0, g0), (a1, g1) = ((ld.src[0].src[1], ld.src[2]) for ld in (before, after))
  env = grid([a0, g0])
  gate0, gate1 = evaluate(g0, env), evaluate(g1, env)
  np.testing.assert_array_equal(np.broadcast_to(gate1, gate0.shape), gate0)
  addr0, addr1 = np.broadcast_to(evaluate(a0, env), gate0.shape), np.broadcast_to(evaluate(a1, env), gate0.shape)
  np.testing.assert_array_equal(addr1[gate0], addr0[gate0])


def ops_in(u: UOp) -> set[Ops]: return {n.op for n in u.toposort()}


def test_pool_backward_window_tap_and_position_fold():
  """tinygrad's input gradient of a 3x3 window: X = 30*i + h + 1 read as (X // 31, X % 31) under X % 31 < 28."""
  i, h = rng(4, 0), rng(28, 1)
  x = add(add(mul(i, c(30)), h), c(1))
  gate = _and(lt(x, c(93)), lt(mod(x, c(31)), c(28)))
  before = gated_load(add(mul(idiv(x, c(31)), c(3)), mod(x, c(31))), gate)
  after = simplify(before)
  assert Ops.MOD not in ops_in(after) and Ops.IDIV not in ops_in(after), after
  assert_same_where_gated(before, after)


def test_case_excluded_by_two_clauses_together():
  """Max pooling's backward (2x2, stride 2): X = 56*i + h over 57 and (X % 57) % 2 < 1: y = h - i = -2 passes
  the first clause (X % 57 = 55 < 56) and fails the second, y = -1 fails the first."""
  i, h = rng(3, 0), rng(56, 1)
  x = add(mul(i, c(56)), h)
  m = mod(x, c(57))
  gate = _and(lt(x, c(114)), lt(m, c(56)), lt(mod(m, c(2)), c(1)))
  before = gated_load(add(idiv(m, c(2)), mul(idiv(x, c(57)), c(28))), gate)
  after = simplify(before)
  assert mod(x, c(57)) not in after.toposort() and idiv(x, c(57)) not in after.toposort(), after
  assert_same_where_gated(before, after)


def test_an_even_position_gives_back_what_it_halved():
  """Under z % 2 < 1 (z >= 0 there): (z // 2) * 2 is z, so the address (z // 2) * 2 + j of w - j is w."""
  w, j = rng(8, 0), rng(2, 1)
  z = add(w, mul(j, c(-1)))
  gate = _and(lt(c(-1), z), lt(mod(z, c(2)), c(1)))
  before = gated_load(add(mul(idiv(z, c(2)), c(2)), j), gate)
  after = simplify(before)
  assert Ops.IDIV not in ops_in(after.src[0]) and Ops.MOD not in ops_in(after.src[0]), after
  assert_same_where_gated(before, after)


def test_a_selected_values_loads_keep_their_addresses():
  """WHERE(p % 2 < 1, x[(p // 2)*2 + 1], ...): the selected value is computed where the condition is false too,
  so its load must not become x[p + 1] (at an odd last p, one past the buffer: an interleaved RoPE's last lane);
  the index arithmetic outside loads still folds."""
  p = rng(8, 0)
  even = lt(mod(p, c(2)), c(1))
  buf = UOp(Ops.PARAM, F.ptr(), (), (0, "x"))
  address = add(mul(idiv(p, c(2)), c(2)), c(1))
  load = UOp(Ops.LOAD, F, (UOp(Ops.INDEX, F.ptr(), (buf, address)),))
  scale = UOp(Ops.CAST, F, (mul(idiv(p, c(2)), c(2)),))
  after = simplify(even.alu(Ops.WHERE, load.alu(Ops.MUL, scale), c(0.0, F)))
  [ld] = [u for u in after.toposort() if u.op is Ops.LOAD]
  assert ld is load, ld  # the address as written
  assert sum(u.op is Ops.IDIV for u in after.toposort()) == 1  # the scale's (p // 2)*2 is p: only the load's division


def test_a_division_the_gate_keeps_non_negative_divides_a_clamped_dividend():
  """(w - j) % 2 in a gate that also holds w - j >= 0 (and in the load it guards): max(w - j, 0) % 2, equal where
  the gate holds and known non-negative (then a mask, not a signed remainder)."""
  w, j = rng(8, 0), rng(3, 1)
  z = add(w, mul(j, c(-1)))
  gate = _and(lt(c(-1), z), lt(mod(z, c(2)), c(1)))
  before = gated_load(idiv(z, c(2)), gate)
  after = simplify(before)
  divisions = [u for u in after.toposort() if u.op in (Ops.MOD, Ops.IDIV)]
  assert divisions and all(u.src[0].vmin >= 0 for u in divisions), after
  assert_same_where_gated(before, after)


def test_a_gate_that_allows_the_wrapped_case_is_left_alone():
  """Without the gate clause that excludes y < 0 the remainder wraps there: nothing may change."""
  i, h = rng(4, 0), rng(28, 1)
  x = add(add(mul(i, c(30)), h), c(1))
  before = gated_load(mod(x, c(31)), lt(x, c(93)))
  after = simplify(before)
  assert mod(x, c(31)) in after.toposort()
  assert_same_where_gated(before, after)


def test_gate_false_finds_disjoint_bounds_on_one_expression():
  h = rng(28, 1)
  assert gate_false(_and(lt(add(h, c(91)), c(93)), lt(c(-1), add(h, c(-2)))))      # h <= 1 and h >= 2
  assert not gate_false(_and(lt(add(h, c(91)), c(94)), lt(c(-1), add(h, c(-2)))))  # h == 2 fits


def test_simplify_given_folds_an_arange_read_inside_a_padded_window():
  """(h + kh - 1 + 112*r) % 111 where the padding's gate holds h + kh - 1 in [0, 55]: h + kh - 1 + r."""
  h, kh, r = rng(56, 0), rng(3, 1), rng(56, 2)
  e = add(add(add(h, kh), mul(r, c(112))), c(-1))
  value = lt(c(54), mod(e, c(111)))
  gate = _and(lt(c(-1), add(add(h, kh), c(-1))), lt(add(add(h, kh), c(-1)), c(56)))
  after = simplify_given(value, gate)
  assert Ops.MOD not in ops_in(after), after
  env = grid([value, gate])
  held = evaluate(gate, env)
  np.testing.assert_array_equal(np.broadcast_to(evaluate(after, env), held.shape)[held], evaluate(value, env)[held])
  assert not held.all()  # the gate excludes some (else the test would not need it)


# ---- end to end: tinygrad's backward passes -------------------------------------------------------------
tinygrad = pytest.importorskip("tinygrad")


def _grad(loss, t): return loss.gradient(t)[0]


PROGRAMS = {
  "conv_grad_x": (lambda x, w: _grad(x.conv2d(w, padding=1).square().sum(), x), [(2, 4, 6, 6), (5, 4, 3, 3)]),
  "maxpool_grad": (lambda x: _grad(x.max_pool2d(2).square().sum(), x), [(2, 3, 6, 8)]),
  "conv_s2_grad_x": (lambda x, w: _grad(x.conv2d(w, stride=2, padding=1).square().sum(), x), [(1, 3, 7, 7), (4, 3, 3, 3)]),
  "avgpool_grad": (lambda x: _grad(x.avg_pool2d(3, stride=1, padding=1).square().sum(), x), [(1, 2, 5, 5)]),
  "conv_dil_grad_x": (lambda x, w: _grad(x.conv2d(w, padding=2, dilation=2).square().sum(), x), [(1, 2, 7, 6), (3, 2, 3, 3)]),
  "conv5_grad_w": (lambda x, w: _grad(x.conv2d(w, padding=2).square().sum(), w), [(2, 2, 6, 5), (3, 2, 5, 5)]),
  "maxpool3s2_grad": (lambda x: _grad(x.max_pool2d(3, stride=2, padding=1).square().sum(), x), [(1, 2, 7, 9)]),
  "deconv_grad_x": (lambda x, w: _grad(x.conv_transpose2d(w, stride=2, padding=1).square().sum(), x), [(1, 3, 4, 5), (3, 2, 4, 4)]),
  "conv1d_grad_x": (lambda x, w: _grad(x.conv2d(w, padding=1).square().sum(), x), [(2, 3, 9), (4, 3, 3)]),
  # not a backward pass: an interleaved RoPE selects between even and odd lanes (the emulator checks every read's bounds)
  "rope_interleaved": (lambda x, w: (lambda a, b: (a * w - b).unsqueeze(-1).cat((a + b * w).unsqueeze(-1), dim=-1).flatten(-2))(
                       x[..., ::2], x[..., 1::2]), [(2, 3, 8), (3, 4)]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("target", ["c", "llvm", "cuda"])
def test_backward_passes_match_tinygrad(tmp_path, name, target):
  """On the CPU targets, and in the emulator of the CUDA target's kernels."""
  import uopc
  from tinygrad import Tensor
  from uopc.run import run_file
  fn, shapes = PROGRAMS[name]
  rng_ = np.random.default_rng(3)
  arrays = [rng_.standard_normal(s).astype(np.float32) for s in shapes]
  (tmp_path / "p.uop").write_text(uopc.export(fn, *[Tensor.empty(*s) for s in shapes], name=name))
  want = fn(*[Tensor(a) for a in arrays]).numpy()
  names = ["x", "w"][:len(shapes)]
  got = run_file(tmp_path / "p.uop", target=target, inputs=dict(zip(names, arrays)), emulated=target == "cuda").arrays["out"]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())  # sums in another order


def test_conv_input_gradient_is_one_reduction_over_three_taps(tmp_path):
  """The 4 x 4 window of the pool's backward is cut to the 3 x 3 taps the gate lets through, and the sum over
  output channels nested in it is lowered as more loops of the same reduction (one accumulator)."""
  import io
  import uopc
  from tinygrad import Tensor
  from uopc.driver import BuildOptions, build
  fn, shapes = PROGRAMS["conv_grad_x"]
  (tmp_path / "p.uop").write_text(uopc.export(fn, *[Tensor.empty(*s) for s in shapes], name="g"))
  printed = io.StringIO()
  build(tmp_path / "p.uop", BuildOptions("c", tmp_path / "out", print_after=("rangeify",), print_out=printed))
  kernels = printed.getvalue().split("# kernel ")[1:]
  grad = kernels[-1]
  sizes = sorted(int(line.split("RANGE(")[1].split(")")[0]) for line in grad.splitlines() if "AxisType.REDUCE" in line)
  assert sizes == [3, 3, 5], grad
  assert grad.count(": ptr<f32, reg, 1>") == 1, grad
