"""The tinygrad front end: `uopc.export` of programs written with tinygrad's own Tensor methods, built
for the CPU targets (and the emulator of a GPU target) and compared with what tinygrad computes on its
CPU backend for the same inputs; `uopc.function` as a reusable CALL; located refusals; `uopc export`."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor, dtypes, nn  # noqa: E402

import uopc  # noqa: E402
from uopc.diagnostics import CompileError  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.frontend.tinygrad import trace  # noqa: E402
from uopc.run import run_file  # noqa: E402
from uopc.verify import verify_module  # noqa: E402

RNG = np.random.default_rng(7)
def f32(*shape): return RNG.standard_normal(shape).astype(np.float32)


def layernorm(x, g, b): return x.layernorm() * g + b
def gelu_mlp(x, w1, w2): return (x @ w1).gelu() @ w2
def attention(q, k, v): return q.scaled_dot_product_attention(k, v, is_causal=True)
def conv_block(x, w): return x.conv2d(w, padding=1).relu().max_pool2d((2, 2))
def cross_entropy(logits, labels): return logits.sparse_categorical_crossentropy(labels)
def embedding(idx, table): return table[idx]
def argmax_cumsum(x): return x.argmax(1), x.cumsum(1)
def stats(x): return x.mean(0), x.std(1), x.max()
def pads(x): return x.pad(((1, 2), (0, 1)), value=1.5).flip(0)[1:4].sum(1, keepdim=True)
def int_ops(x): return (x * 10).cast(dtypes.int32) // 3 + (x * 10).int() % 4
def masks(x): return (x > 0.5), (x.sum() > 0)
def rms_swiglu(x, w1, w3):
  h = x * (x.square().mean(-1, keepdim=True) + 1e-6).rsqrt()
  return (h @ w1).silu() * (h @ w3)
def fills(x): return x + Tensor.ones(x.shape[-1], x.shape[-1]).triu(1) * -1e9 + Tensor.full_like(x, 0.5)
def scatter_sum(idx, y): return Tensor.zeros(4, 6).scatter_reduce(0, idx, y, reduce="sum")
def int_pow(a): return (a % 7) ** 3 + a ** 0  # integer POW: tinygrad's products (seed 000's POW is a float op)
def in_place(x):  # assignments to values computed in the function: nothing outside changes
  y = x * 2
  y += 1
  y *= 2
  return y


PROGRAMS = [
  (layernorm, lambda: (f32(4, 16), f32(16), f32(16))),
  (gelu_mlp, lambda: (f32(4, 12), f32(12, 24), f32(24, 12))),
  (attention, lambda: (f32(2, 5, 8), f32(2, 5, 8), f32(2, 5, 8))),
  (conv_block, lambda: (f32(1, 3, 8, 8), f32(4, 3, 3, 3))),
  (cross_entropy, lambda: (f32(4, 10), RNG.integers(0, 10, (4,)).astype(np.int32))),
  (embedding, lambda: (RNG.integers(0, 10, (5,)).astype(np.int32), f32(10, 3))),
  (argmax_cumsum, lambda: (f32(3, 7),)),
  (stats, lambda: (f32(4, 6),)),
  (pads, lambda: (f32(4, 6),)),
  (int_ops, lambda: (f32(4, 6),)),
  (masks, lambda: (f32(3, 4),)),
  (rms_swiglu, lambda: (f32(3, 8), f32(8, 5), f32(8, 5))),
  (fills, lambda: (f32(2, 5, 5),)),  # tinygrad 0.14's Tensor.full writes a fresh buffer: AFTER(buf, STORE(buf, value))
  (scatter_sum, lambda: (RNG.integers(0, 4, (7, 6)).astype(np.int32), f32(7, 6))),
  (in_place, lambda: (f32(3, 4),)),
  (int_pow, lambda: (RNG.integers(-50, 50, (9,)).astype(np.int32),)),
]


def tinygrad_outputs(fn, arrays) -> list[np.ndarray]:
  ret = fn(*[Tensor(a) for a in arrays])
  return [t.numpy() for t in (ret if isinstance(ret, tuple) else (ret,))]


def exported(fn, arrays, tmp_path, **kw):
  examples = [Tensor.empty(*a.shape, dtype=Tensor(a).dtype) for a in arrays]
  traced = trace(fn, examples, **kw)
  path = tmp_path / f"{fn.__name__}.uop"
  path.write_text(uopc.export(fn, *examples, **kw))
  return path, traced


def run_exported(fn, arrays, tmp_path, target="c", emulated=False, **kw) -> list[np.ndarray]:
  path, traced = exported(fn, arrays, tmp_path, **kw)
  inputs = {p.name: a for p, a in zip(traced.inputs, arrays)}
  result = run_file(path, target=target, inputs=inputs, emulated=emulated)
  return [result.arrays[p.name] for p in traced.outputs]


def assert_match(got, want, rtol=1e-5, what=""):
  assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
  if want.dtype.kind in "biu": np.testing.assert_array_equal(got, want, err_msg=what)
  else:
    scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale, err_msg=what)


@pytest.mark.parametrize("target,emulated", [("c", False), ("llvm", False), ("cuda", True)])
@pytest.mark.parametrize("fn,make", PROGRAMS, ids=[f.__name__ for f, _ in PROGRAMS])
def test_exported_programs_match_tinygrad(fn, make, target, emulated, tmp_path):
  arrays = make()
  want = tinygrad_outputs(fn, arrays)
  for i, (g, w) in enumerate(zip(run_exported(fn, arrays, tmp_path, target, emulated), want)):
    assert_match(g, w, what=f"{fn.__name__} output {i} on {target}")


def test_exported_text_is_canonical_and_verifies(tmp_path):
  path, _ = exported(gelu_mlp, (f32(4, 12), f32(12, 24), f32(24, 12)), tmp_path)
  text = path.read_text()
  module = parse_source(text, str(path))
  assert verify_module(module) == []
  assert subprocess.run([sys.executable, "-m", "uopc", "fmt", "--check", str(path)]).returncode == 0
  assert text.splitlines()[0] == "func gelu_mlp {"


def test_params_are_inputs_then_outputs_with_the_functions_argument_names(tmp_path):
  _, t = exported(stats, (f32(4, 6),), tmp_path)
  assert [(p.slot, p.name, p.shape) for p in t.inputs] == [(0, "x", (4, 6))]
  assert [(p.slot, p.name, p.shape) for p in t.outputs] == [(1, "out0", (6,)), (2, "out1", (4,)), (3, "out2", ())]
  _, t = exported(stats, (f32(4, 6),), tmp_path, name="s", input_names=["data"])
  assert t.inputs[0].name == "data" and t.text.startswith("func s {")


def test_float16_inputs_with_float32_sums_within_half_precision(tmp_path):
  def half_matmul(a, b): return a.matmul(b, dtype=dtypes.float)
  a, b = f32(8, 16).astype(np.float16), f32(16, 4).astype(np.float16)
  want = (a[:, :, None] * b[None, :, :]).astype(np.float32).sum(1)  # the graph: products in half, sums in float
  (got,) = run_exported(half_matmul, (a, b), tmp_path)
  assert_match(got, want)
  assert_match(got, tinygrad_outputs(half_matmul, (a, b))[0], rtol=2e-3)  # tinygrad multiplies in float


def test_model_weights_are_named_params_after_the_inputs(tmp_path):
  lin = nn.Linear(6, 3)
  Tensor.realize(*nn.state.get_parameters(lin))
  def model(x): return lin(x).relu()
  x = f32(4, 6)
  path, t = exported(model, (x,), tmp_path, weights=lin)
  assert [(p.slot, p.name, p.shape) for p, _ in t.weights] == [(1, "weight", (3, 6)), (2, "bias", (3,))]
  assert t.outputs[0].slot == 3
  inputs = {"x": x, "weight": lin.weight.numpy(), "bias": lin.bias.numpy()}
  got = run_file(path, target="c", inputs=inputs).arrays["out"]
  assert_match(got, model(Tensor(x)).numpy())


def test_a_function_called_twice_is_one_reusable_call_body(tmp_path):
  @uopc.function
  def pair(a, b): return a + b, a * b
  def twice(x, y):
    s, p = pair(x, y)
    return pair(s, p)[1]
  x, y = f32(3, 4), f32(3, 4)
  path, _ = exported(twice, (x, y), tmp_path)
  text = path.read_text()
  assert text.count("= TUPLE(") == 1 and text.count("= CALL(") == 2 and "FUNCTION(" not in text
  want = (x + y) * (x * y)
  for target in ("c", "llvm"):
    assert_match(run_exported(twice, (x, y), tmp_path, target)[0], want, what=target)


def test_an_inline_function_is_a_function_callify_inlines(tmp_path):
  @uopc.function(inline=True)
  def scale(a): return a * 3
  def twice(x): return scale(scale(x))
  x = f32(5)
  path, _ = exported(twice, (x,), tmp_path)
  assert "FUNCTION(" in path.read_text() and "CALL(" not in path.read_text()
  assert_match(run_exported(twice, (x,), tmp_path)[0], x * 9)


def test_an_unsupported_op_is_refused_at_the_users_line(tmp_path):
  def noisy(x):
    y = x * 2
    return y + Tensor.rand(3)  # MARK
  with pytest.raises(CompileError) as e:
    uopc.export(noisy, Tensor.empty(3))
  text = e.value.format()
  line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if s.strip().endswith("# MARK"))
  assert f"{__file__}:{line}:" in text and "tinygrad op AFTER" in text and "random numbers" in text
  assert "return y + Tensor.rand(3)" in text and "^" in text


def test_an_assignment_to_an_input_is_refused_not_dropped():
  def bump(x):
    x.assign(x + 1)  # MARK-ASSIGN
    return x * 2
  with pytest.raises(CompileError) as e:
    uopc.export(bump, Tensor.empty(3))
  text = e.value.format()
  line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if s.strip().endswith("# MARK-ASSIGN"))
  assert f"{__file__}:{line}:" in text and "assigns to example input 0" in text, text


def test_an_assignment_whose_old_value_is_read_elsewhere_or_to_a_view_of_an_input_is_refused():
  """tinygrad gives a reader built before `y -= 3` the value after it (12 where the program reads 15 for x = 1):
  schedule-dependent, refused; an assignment through a view of an input would write the input."""
  def aliased(x):
    y = x * 2
    y *= y
    z = y * 1
    y -= 3
    return y + z
  def through_view(x):
    y = x.reshape(2, 2)
    y += 1
    return y.reshape(4) * 1
  for fn in (aliased, through_view):
    with pytest.raises(CompileError) as e:
      uopc.export(fn, Tensor.empty(4))
    assert "tinygrad op AFTER" in e.value.format() and "reads before it" in e.value.format()


def test_realize_inside_the_function_keeps_the_graph_and_reading_values_is_refused(tmp_path):
  """`.realize()` changes no value: the export keeps computing from the input (it ran tinygrad on the empty example
  and exported its result as a weight PARAM before). Reading values into Python (`.item()`, `.numpy()`) would bake
  in what the empty examples gave: refused at the line."""
  def staged(x): return (x * 2).realize() + 1
  x = f32(5)
  (out,) = run_exported(staged, (x,), tmp_path)
  assert_match(out, x * 2 + 1)
  def branchy(x):
    if x.max().item() > 0: return x  # MARK-ITEM
    return -x
  with pytest.raises(CompileError) as e:
    uopc.export(branchy, Tensor.empty(3))
  line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if s.strip().endswith("# MARK-ITEM"))
  assert f"{__file__}:{line}:" in e.value.format() and "reads a tensor's values" in e.value.format()
  assert Tensor([1.0]).numpy().tolist() == [1.0]  # restored after the trace


def test_an_exception_in_the_traced_function_is_a_located_user_error():
  def broken(x): return x.reshape(7)
  with pytest.raises(CompileError) as e:
    uopc.export(broken, Tensor.empty(3))
  assert "raised" in e.value.format() and "return x.reshape(7)" in e.value.format()


MODEL_PY = """
from tinygrad import Tensor
def block(x, w):
  return (x @ w).relu().sum(1)
def noisy(x):
  return x + Tensor.rand(*x.shape)
"""


def uopc_cli(*args, cwd):
  return subprocess.run([sys.executable, "-m", "uopc", *args], cwd=cwd, capture_output=True, text=True)


def test_cli_export_writes_a_file_that_builds_and_matches(tmp_path):
  (tmp_path / "model.py").write_text(MODEL_PY)
  r = uopc_cli("export", "model.py:block", "-i", "x=2x3", "-i", "w=3x4:f32", "-o", "block.uop", cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  x, w = f32(2, 3), f32(3, 4)
  got = run_file(tmp_path / "block.uop", target="c", inputs={"x": x, "w": w}).arrays["out"]
  assert_match(got, np.maximum(x @ w, 0).sum(1))


@pytest.mark.parametrize("args,message", [
  (["model.py:noisy", "-i", "x=2x3"], "model.py:6:3: error: in noisy: tinygrad op AFTER"),
  (["model.py:nope", "-i", "x=2"], "has no function 'nope'"),
  (["model.py:block", "-i", "x=2y"], "bad --input 'x=2y'"),
  (["model.py:block", "-i", "x=2x3"], "missing 1 required positional argument"),
  (["model.py:block", "-i", "x=2x3:q7", "-i", "w=3x4"], "unknown dtype 'q7'"),
])
def test_cli_export_errors_are_diagnostics_with_exit_1(tmp_path, args, message):
  (tmp_path / "model.py").write_text(MODEL_PY)
  r = uopc_cli("export", *args, "-o", "out.uop", cwd=tmp_path)
  assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert not (tmp_path / "out.uop").exists()


def test_a_variable_size_is_a_define_var(tmp_path):
  from tinygrad import Variable
  n = Variable("n", 1, 10).bind(3)
  def rows(x): return (x * 2).sum(1), x.reshape(n * 4) + 1
  path = tmp_path / "rows.uop"
  path.write_text(uopc.export(rows, Tensor.empty(n, 4)))
  text = path.read_text()
  assert '%n = DEFINE_VAR {("n", 1, 10)}' in text and "PARAM([%n, 4])" in text
  for size in (1, 3, 7):
    x = f32(size, 4)
    for target in ("c", "llvm"):
      got = run_file(path, target=target, inputs={"x": x}, variables={"n": size}).arrays
      assert_match(got["out0"], (x * 2).sum(1), what=target)
      assert_match(got["out1"], x.reshape(-1) + 1, what=target)


def test_cli_export_with_a_symbolic_size(tmp_path):
  (tmp_path / "model.py").write_text(MODEL_PY)
  r = uopc_cli("export", "model.py:block", "-i", "x=Nx3", "-i", "w=3x4", "--var", "N=1..64", "-o", "b.uop", cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  assert '%N = DEFINE_VAR {("N", 1, 64)}' in (tmp_path / "b.uop").read_text()
  x, w = f32(5, 3), f32(3, 4)
  got = run_file(tmp_path / "b.uop", target="c", inputs={"x": x, "w": w}, variables={"N": 5}).arrays["out"]
  assert_match(got, np.maximum(x @ w, 0).sum(1))
  r = uopc_cli("export", "model.py:block", "-i", "x=Nx3", "-i", "w=3x4", cwd=tmp_path)
  assert r.returncode == 1 and "give its range with --var N=LO..HI" in r.stderr


def test_an_unsigned_constant_out_of_range_wraps_as_the_ir_wants(tmp_path):
  """x - 200 on uint8 is written by tinygrad as x + 200 * -1: the -1 is uint8's 255 (it was written as -1, which the
  verifier refuses). The result wraps (tinygrad's CPU backend computes it in int: 301 where uint8 gives 45)."""
  def sub(a): return (a.cast(dtypes.uint8) - 200).cast(dtypes.int32)
  a = RNG.integers(-300, 300, (16,)).astype(np.int32)
  (out,) = run_exported(sub, (a,), tmp_path)
  np.testing.assert_array_equal(out, (a.astype(np.uint8) - np.uint8(200)).astype(np.int32))


def test_an_assignment_to_a_weight_no_output_reads_is_a_note(capsys):
  """BatchNorm in training mode updates its running statistics (a side effect no output reads): the entry computes
  the outputs with the batch's statistics, and a note says the weights are not updated."""
  from tinygrad.helpers import Context
  bn = nn.BatchNorm2d(4)
  for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var): t.realize()
  with Context(TRAINING=1):
    uopc.export(lambda x: bn(x), Tensor.empty(2, 4, 3, 3), weights=bn)
  err = capsys.readouterr().err
  assert "note:" in err and "assigns to weight 'running_mean'" in err and "does not update it" in err, err
