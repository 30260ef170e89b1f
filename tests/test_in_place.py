"""Programs that store into a buffer they also read, built and run by every back end (`uopc run`),
checked against numpy: an elementwise update runs in place, other reads of the target come from a
snapshot (Rangeify's module docstring, part 3). The sizes give the C and LLVM kernels their THREAD
and UPCAST axes; the emulated GPU kernels get their grid and workgroup axes."""
import numpy as np
import pytest
from click.testing import CliRunner

from test_tensor_programs import Func
from uopc.cli import cli

MODES = [("c", False), ("llvm", False), ("c", True), ("cuda", True)]


def update(r: int, c: int) -> Func:
  """x = x * y + x, y a row broadcast over x's rows."""
  f = Func("update")
  x, y = f.param("x", (r, c)), f.param("y", (c,))
  f.store(x, f.op("ADD", f.op("MUL", x, f.expand(f.reshape(y, (1, c)), (r, c))), x))
  return f


def transpose_add(n: int, _: int) -> Func:
  """x = x.T + x: each element reads another that an earlier one overwrites."""
  f = Func("transpose_add")
  x = f.param("x", (n, n))
  f.store(x, f.op("ADD", f.permute(x, (1, 0)), x))
  return f


def softmax_rows(r: int, c: int) -> Func:
  f = Func("softmax_rows")
  x = f.param("x", (r, c))
  f.store(x, f.softmax(x, r, c))
  return f


def bump_then_square(r: int, c: int) -> Func:
  """x = x + 1, then y = x * x of the x on entry (a plain read)."""
  f = Func("bump_then_square")
  x, y = f.param("x", (r, c)), f.param("y", (r, c))
  f.store(x, f.op("ADD", x, f.const(1.0)))
  f.store(y, f.op("MUL", x, x))
  return f


def np_softmax(x):
  e = np.exp(x - x.max(1, keepdims=True))
  return e / e.sum(1, keepdims=True)


CASES = [
  (update, lambda x, y: {"x": x * y + x}),
  (transpose_add, lambda x: {"x": x.T + x}),
  (softmax_rows, lambda x: {"x": np_softmax(x)}),
  (bump_then_square, lambda x, y: {"x": x + 1, "y": x * x}),
]


@pytest.mark.parametrize("target,emulate", MODES, ids=[f"{t}{'-emulate' if e else ''}" for t, e in MODES])
@pytest.mark.parametrize("builder,formula", CASES, ids=[c[0].__name__ for c in CASES])
def test_store_into_a_read_buffer_matches_numpy(builder, formula, target, emulate, tmp_path):
  r, c = (16, 40) if emulate else (96, 1024)
  f = builder(r, r if builder is transpose_add else c)
  src = tmp_path / f"{f.name}.uop"
  src.write_text(f.text())
  rng = np.random.default_rng(0)
  inputs = {name: rng.standard_normal(shape).astype(np.float32) for name, shape, _, _ in f.args}
  args = ["run", str(src), "-t", target, *(["--emulate"] if emulate else [])]
  for name, a in inputs.items():
    np.save(tmp_path / f"{name}.npy", a)
    args += ["--input", f"{name}={tmp_path / name}.npy", "--output", f"{name}={tmp_path / name}.out.npy"]
  res = CliRunner().invoke(cli, args)
  assert res.exit_code == 0, res.output
  for name, want in formula(*(inputs[n].astype(np.float64) for n, *_ in f.args)).items():
    np.testing.assert_allclose(np.load(tmp_path / f"{name}.out.npy"), want, rtol=1e-5, atol=1e-6)
