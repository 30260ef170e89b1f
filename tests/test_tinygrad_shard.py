"""Export of sharded tinygrad tensors (`Tensor.shard` over tinygrad's virtual CPU devices "CPU:0", "CPU:1",
...): the exported multi-device programs built with -t c and -t llvm (and a GPU target's emulator) give
what tinygrad computes on its own multi-device CPU backend; sharded inputs, weights and outputs are one
argument per device shard; what uopc cannot run on several devices is refused at the user's line."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor, nn  # noqa: E402

import uopc  # noqa: E402
from uopc.diagnostics import CompileError  # noqa: E402
from uopc.frontend.tinygrad import trace  # noqa: E402
from uopc.frontend.tinygrad_constants import Constants  # noqa: E402
from uopc.run import run_file  # noqa: E402

D2 = ("CPU:0", "CPU:1")
D4 = tuple(f"CPU:{i}" for i in range(4))
RNG = np.random.default_rng(5)
def f32(*shape): return RNG.standard_normal(shape).astype(np.float32)


def arguments(param, whole: np.ndarray) -> dict[str, np.ndarray]:
  """The entry's arguments for one PARAM holding `whole`: a sharded one takes each device's shard."""
  if not isinstance(param.devices, tuple): return {param.name: whole}
  parts = np.split(whole, len(param.devices), axis=param.axis)
  return {f"{param.name}_dev{j}": np.ascontiguousarray(p) for j, p in enumerate(parts)}


def result(param, arrays: dict[str, np.ndarray]) -> np.ndarray:
  if not isinstance(param.devices, tuple): return arrays[param.name]
  return np.concatenate([arrays[f"{param.name}_dev{j}"] for j in range(len(param.devices))], axis=param.axis)


def run_exported(fn, examples, arrays, tmp_path, weight_values=(), target="c", emulated=False, **kw) -> list[np.ndarray]:
  """Export `fn` traced on `examples` (`kw` as for uopc.export), run it on `arrays` and the values of the
  weights that stay PARAMs, and give its outputs whole."""
  t = trace(fn, examples, weights=kw.get("weights"), constants=Constants(kw.get("constants", "param")))
  path = tmp_path / f"{fn.__name__ if hasattr(fn, '__name__') else 'model'}.uop"
  path.write_text(uopc.export(fn, *examples, **kw))
  inputs = {}
  for p, a in zip(t.inputs, arrays): inputs.update(arguments(p, a))
  for (p, _), a in zip(t.weights, weight_values): inputs.update(arguments(p, a))
  got = run_file(path, target=target, inputs=inputs, emulated=emulated).arrays
  return [result(p, got) for p in t.outputs]


def close(got, want):
  assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(float(np.max(np.abs(want))), 1e-30))


def tinygrad_outputs(fn, tensors) -> list[np.ndarray]:
  ret = fn(*tensors)
  return [t.numpy() for t in (ret if isinstance(ret, tuple) else (ret,))]


def elementwise(x): return (x * 2 + 1).relu(), x.exp() - x
def reductions(x): return x.sum(0), x.max(0), x.sum(1), x.mean()
def softmax(x): return x.softmax(-1)
def gathered(x): return (x + 1).to("CPU")


CASES = [  # (fn, whole input shape, devices, shard axis)
  (elementwise, (4, 6), D2, 0), (elementwise, (4, 6), D2, 1), (reductions, (4, 6), D2, 0),
  (reductions, (4, 6), D2, 1), (softmax, (2, 3, 8), D4, 2), (softmax, (4, 3, 8), D4, 0), (gathered, (4, 6), D2, 1),
]


@pytest.mark.parametrize("target,emulated", [("c", False), ("llvm", False), ("cuda", True)])
@pytest.mark.parametrize("fn,shape,devices,axis", CASES, ids=[f"{f.__name__}-{len(d)}dev-axis{a}" for f, _, d, a in CASES])
def test_sharded_inputs_match_tinygrad(tmp_path, fn, shape, devices, axis, target, emulated):
  x = f32(*shape)
  want = tinygrad_outputs(fn, [Tensor(x).shard(devices, axis=axis)])
  got = run_exported(fn, [Tensor.empty(*shape).shard(devices, axis=axis)], [x], tmp_path, target=target, emulated=emulated)
  for g, w in zip(got, want): close(g, w)


def test_sharded_parameters_are_one_argument_per_device(tmp_path):
  t = trace(reductions, [Tensor.empty(4, 6).shard(D2, axis=1)])
  x = t.inputs[0]
  assert (x.name, x.shape, x.devices, x.axis) == ("x", (8, 3), D2, 1)  # device j holds x[:, 3j:3j+3], row-major
  assert [(p.name, p.shape, p.devices, p.axis) for p in t.outputs] == [
    ("out0", (6,), D2, 0), ("out1", (6,), D2, 0), ("out2", (4,), "CPU:0", None), ("out3", (), "CPU:0", None)]
  path = tmp_path / "r.uop"
  path.write_text(uopc.export(reductions, Tensor.empty(4, 6).shard(D2, axis=1)))
  assert '%x = PARAM([8, 3]) {(0, "x", ("CPU:0", "CPU:1"))} : f32' in path.read_text()
  from uopc.driver import BuildOptions, build
  build(path, BuildOptions(target="c", out_dir=tmp_path / "out"))
  header = (tmp_path / "out" / "r.h").read_text()
  assert "int r_reductions(const float* x_dev0, const float* x_dev1, float* out0_dev0, float* out0_dev1," in header


def test_shard_inside_the_function_and_replicated_inputs(tmp_path):
  def scatter(x, y): return x.shard(D2, axis=1) * y.shard(D2), (x.shard(D2, axis=0) + 1).sum(1)
  x, y = f32(4, 6), f32(4, 6)
  want = tinygrad_outputs(scatter, [Tensor(x), Tensor(y)])
  got = run_exported(scatter, [Tensor.empty(4, 6), Tensor.empty(4, 6)], [x, y], tmp_path)
  for g, w in zip(got, want): close(g, w)
  def replicated(x): return x.exp().sum(0)
  want = tinygrad_outputs(replicated, [Tensor(x).shard(D2)])
  t = trace(replicated, [Tensor.empty(4, 6).shard(D2)])
  assert t.inputs[0].devices is None  # a whole copy on each device: one argument, copied to each
  close(run_exported(replicated, [Tensor.empty(4, 6).shard(D2)], [x], tmp_path)[0], want[0])


class TensorParallelMLP:
  """tinygrad's tensor-parallel style: the first layer's weight and bias split by output feature, the
  second layer's weight by input feature (its matmul sums over the shard axis: an allreduce), its bias
  replicated."""
  def __init__(self, devices):
    self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)
    self.l1.weight.shard_(devices, axis=0)
    self.l1.bias.shard_(devices, axis=0)
    self.l2.weight.shard_(devices, axis=1)
    self.l2.bias.shard_(devices)
    self.devices = devices
    Tensor.realize(*nn.state.get_parameters(self))
  def __call__(self, x): return self.l2(self.l1(x.shard(self.devices)).gelu())


@pytest.mark.parametrize("devices", [D2, D4], ids=["2dev", "4dev"])
def test_tensor_parallel_mlp_matches_tinygrad(tmp_path, devices):
  model = TensorParallelMLP(devices)
  t = trace(model, [Tensor.empty(3, 8)], weights=model)
  assert [(p.name, p.devices, p.axis) for p, _ in t.weights] == [
    ("l1_weight", devices, 0), ("l1_bias", devices, 0), ("l2_weight", devices, 1), ("l2_bias", None, None)]
  state = nn.state.get_state_dict(model)
  weights = [state[p.name.replace("_", ".")].numpy() for p, _ in t.weights]
  x = f32(3, 8)
  want = model(Tensor(x)).numpy()
  for target in ("c", "llvm"):
    (got,) = run_exported(model, [Tensor.empty(3, 8)], [x], tmp_path, weights, target=target, weights=model)
    close(got, want)


def test_tensor_parallel_mlp_with_embedded_constants(tmp_path, capsys):
  model = TensorParallelMLP(D2)
  t = trace(model, [Tensor.empty(3, 8)], weights=model, constants=Constants("embed"))
  assert [p.name for p, _ in t.weights] == ["l1_weight", "l1_bias", "l2_weight"]  # the replicated bias is embedded
  text = uopc.export(model, Tensor.empty(3, 8), weights=model, constants="embed")
  assert text.count("= BINARY {") == 1
  err = capsys.readouterr().err
  assert "note: the constant 'l1_weight' (f32[16, 8]) stays a PARAM: it is sharded over 2 devices" in err
  state = nn.state.get_state_dict(model)
  x = f32(3, 8)
  (got,) = run_exported(model, [Tensor.empty(3, 8)], [x], tmp_path, [state[p.name.replace("_", ".")].numpy() for p, _ in t.weights],
                        weights=model, constants="embed")
  close(got, model(Tensor(x)).numpy())


def test_what_uopc_cannot_run_on_several_devices_is_refused_at_the_users_line():
  def shrunk(x):
    y = x * 2
    return y[1:3]  # MARK-SHRINK
  with pytest.raises(CompileError) as e:
    uopc.export(shrunk, Tensor.empty(4, 6).shard(D2, axis=0))
  text = e.value.format()
  line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if s.strip().endswith("# MARK-SHRINK"))
  assert f"{__file__}:{line}:5: error: in shrunk: uopc cannot run this on several devices: SHRINK of the shard axis 0" in text
  assert "return y[1:3]" in text and "^" in text
  def moved(x): return x.reshape(2, 12)  # MARK-RESHAPE
  with pytest.raises(CompileError) as e:
    uopc.export(moved, Tensor.empty(4, 6).shard(D2, axis=1))
  line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if s.strip().endswith("# MARK-RESHAPE"))
  assert f"{__file__}:{line}:" in e.value.format() and "moved items between shards" in e.value.format()


MODEL_PY = """
import numpy as np
from tinygrad import Tensor
D = ("CPU:0", "CPU:1")
w1 = Tensor(np.arange(48, dtype=np.float32).reshape(8, 6) / 10).shard(D, axis=1).realize()
w2 = Tensor(np.arange(24, dtype=np.float32).reshape(6, 4) / 10).shard(D, axis=0).realize()
def mlp(x):
  return (x.shard(D) @ w1).relu() @ w2
def bad(x):
  return x.shard(D, axis=0)[1:]
"""


def test_cli_exports_a_sharded_model(tmp_path):
  (tmp_path / "model.py").write_text(MODEL_PY)
  r = subprocess.run([sys.executable, "-m", "uopc", "export", "model.py:mlp", "-i", "x=3x8", "-o", "mlp.uop"],
                     cwd=tmp_path, capture_output=True, text=True)
  assert r.returncode == 0, r.stderr
  w1 = np.arange(48, dtype=np.float32).reshape(8, 6) / 10
  w2 = np.arange(24, dtype=np.float32).reshape(6, 4) / 10
  x = f32(3, 8)
  inputs = {"x": x, "w0_dev0": np.ascontiguousarray(w1[:, :3]), "w0_dev1": np.ascontiguousarray(w1[:, 3:]),
            "w1_dev0": w2[:3], "w1_dev1": w2[3:]}
  close(run_file(tmp_path / "mlp.uop", inputs=inputs).arrays["out"], np.maximum(x @ w1, 0) @ w2)
  r = subprocess.run([sys.executable, "-m", "uopc", "export", "model.py:bad", "-i", "x=4x8", "-o", "bad.uop"],
                     cwd=tmp_path, capture_output=True, text=True)
  assert r.returncode == 1 and "model.py:10:3: error: in bad: uopc cannot run this on several devices: SHRINK" in r.stderr
  assert "Traceback" not in r.stderr and not (tmp_path / "bad.uop").exists()
