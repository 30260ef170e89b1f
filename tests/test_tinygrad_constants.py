"""`uopc.export(..., constants="embed")` and `uopc export --constants embed`: model weights and other constant
tensors written into the program as BINARY data, built for the CPU targets (and a GPU target's emulator)
and compared with what tinygrad computes; the size limit and the notes of what stays a PARAM."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor, dtypes, nn  # noqa: E402

import uopc  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.ops import Ops  # noqa: E402
from uopc.run import run_file  # noqa: E402
from uopc.verify import verify_module  # noqa: E402

RNG = np.random.default_rng(11)
def f32(*shape): return RNG.standard_normal(shape).astype(np.float32)


def close(got, want, rtol=1e-5):
  assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
  if want.dtype.kind in "biu": np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got, want, rtol=0, atol=rtol * max(float(np.max(np.abs(want))), 1e-30))


def params_of(text: str) -> list[str]:
  module = parse_source(text, "t.uop")
  assert [d for d in verify_module(module) if d.severity == "error"] == []
  return sorted((u.arg[0], u.arg[1]) for e in module.entries for u in e.sink.toposort() if u.op is Ops.PARAM)


class MLP:
  def __init__(self):
    self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)
    Tensor.realize(*nn.state.get_parameters(self))
  def __call__(self, x): return self.l2(self.l1(x).gelu())


@pytest.mark.parametrize("target,emulated", [("c", False), ("llvm", False), ("cuda", True)])
def test_an_mlp_with_embedded_weights_matches_tinygrad(tmp_path, target, emulated):
  model = MLP()
  text = uopc.export(model, Tensor.empty(3, 8), name="mlp", constants="embed")
  assert params_of(text) == [(0, "x"), (1, "out")]  # the four weights are in the program, not arguments
  assert text.count("= BINARY {") == 4
  path = tmp_path / "mlp.uop"
  path.write_text(text)
  x = f32(3, 8)
  close(run_file(path, target=target, inputs={"x": x}, emulated=emulated).arrays["out"], model(Tensor(x)).numpy())


def test_constants_of_every_dtype_and_made_inside_the_function(tmp_path):
  half = Tensor(f32(4).astype(np.float16)).realize()
  table = Tensor(RNG.integers(-1000, 1000, (5, 4)).astype(np.int32)).realize()
  mask = Tensor(np.array([True, False, True, True])).realize()
  small = Tensor(np.array([3, 250, 7, 128], np.uint8)).realize()
  wide = Tensor(np.array([1.5, -2.0, 1e-300, 3.0], np.float64)).realize()
  def mixed(x, idx):
    rows = table[idx].float()                                           # a gather from an i32 table
    listed = Tensor([0.5, -1.0, 2.0, 4.0])                              # made from a list while tracing
    y = (x * half.float() + rows) * listed + small.float() + wide.float()
    return mask.where(y, -y), (x.cast(dtypes.float64) * wide).sum()
  x, idx = f32(3, 4), np.array([4, 0, 2], np.int32)
  text = uopc.export(mixed, Tensor.empty(3, 4), Tensor.empty(3, dtype=dtypes.int32), constants="embed")
  assert params_of(text) == [(0, "x"), (1, "idx"), (2, "out0"), (3, "out1")]
  path = tmp_path / "mixed.uop"
  path.write_text(text)
  want = mixed(Tensor(x), Tensor(idx))
  for target in ("c", "llvm"):
    got = run_file(path, target=target, inputs={"x": x, "idx": idx}).arrays
    close(got["out0"], want[0].numpy())
    close(got["out1"], want[1].numpy())


def test_a_constant_over_the_limit_stays_a_param_with_a_located_note(tmp_path, capsys):
  big = Tensor(f32(16, 8)).realize()     # 512 bytes
  empty = Tensor.empty(8)                # no data
  bias = Tensor(f32(8)).realize()        # 32 bytes
  def model(x):
    return x @ big + empty + bias  # MARK
  text = uopc.export(model, Tensor.empty(2, 16), constants="embed", max_constant_bytes=100)
  assert params_of(text) == [(0, "x"), (1, "w0"), (2, "w1"), (3, "out")]
  assert text.count("= BINARY {") == 1
  err = capsys.readouterr().err
  line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if s.strip().endswith("# MARK"))
  assert f"{__file__}:{line}:5: note: the constant 'w0' (f32[16, 8]) stays a PARAM: its 512 bytes are more than the 100" in err
  assert "the constant 'w1' (f32[8]) stays a PARAM: tinygrad holds no data for it (Tensor.empty, or not realized)" in err
  path = tmp_path / "m.uop"
  path.write_text(text)
  x, e = f32(2, 16), f32(8)
  got = run_file(path, inputs={"x": x, "w0": big.numpy(), "w1": e}).arrays["out"]
  close(got, x @ big.numpy() + e + bias.numpy())


def test_the_default_keeps_weights_as_params(capsys):
  model = MLP()
  text = uopc.export(model, Tensor.empty(3, 8), weights=model)
  assert [n for _, n in params_of(text)] == ["x", "l1_weight", "l1_bias", "l2_weight", "l2_bias", "out"]
  assert "BINARY" not in text and capsys.readouterr().err == ""


def test_equal_constants_of_two_entries_are_stored_once_in_the_library(tmp_path):
  from uopc.driver import BuildOptions, build
  w = Tensor(f32(4, 4)).realize()
  def a(x): return x @ w
  def b(x): return (x @ w).relu()
  text = uopc.export_module([(a, (Tensor.empty(2, 4),)), (b, (Tensor.empty(2, 4),))], constants="embed")
  assert text.count("= BINARY {") == 2  # one per entry in the text...
  path = tmp_path / "two.uop"
  path.write_text(text)
  build(path, BuildOptions(target="c", out_dir=tmp_path / "out"))
  assert (tmp_path / "out" / "two.c").read_text().count("static const unsigned char two__data") == 1  # ...one in the library
  x = f32(2, 4)
  close(run_file(path, entry="b", inputs={"x": x}).arrays["out"], np.maximum(x @ w.numpy(), 0))


MODEL_PY = """
import numpy as np
from tinygrad import Tensor
w = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 7).realize()
big = Tensor(np.ones((64, 4), np.float32)).realize()
def block(x):
  return (x @ w).relu()
def two(x):
  return x @ w + big[:3].sum(0)
"""


def uopc_cli(*args, cwd):
  return subprocess.run([sys.executable, "-m", "uopc", *args], cwd=cwd, capture_output=True, text=True)


def test_cli_export_embeds_constants(tmp_path):
  (tmp_path / "model.py").write_text(MODEL_PY)
  r = uopc_cli("export", "model.py:block", "-i", "x=2x3", "--constants", "embed", "-o", "block.uop", cwd=tmp_path)
  assert r.returncode == 0 and r.stderr == "", r.stderr
  assert params_of((tmp_path / "block.uop").read_text()) == [(0, "x"), (1, "out")]
  x = f32(2, 3)
  got = run_file(tmp_path / "block.uop", inputs={"x": x}).arrays["out"]
  close(got, np.maximum(x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 7), 0))
  r = uopc_cli("export", "model.py:two", "-i", "x=2x3", "--constants", "embed", "--max-constant-bytes", "100", cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  assert "model.py:9:3: note: the constant 'w0' (f32[64, 4]) stays a PARAM: its 1024 bytes are more than the 100" in r.stderr
  assert params_of(r.stdout) == [(0, "x"), (1, "w0"), (2, "out")]
  r = uopc_cli("export", "model.py:block", "-i", "x=2x3", "--constants", "inline", cwd=tmp_path)
  assert r.returncode != 0 and "'inline' is not one of 'param', 'embed'" in r.stderr
  r = uopc_cli("export", "--help", cwd=tmp_path)
  assert "--constants [param|embed]" in r.stdout and "--max-constant-bytes" in r.stdout
