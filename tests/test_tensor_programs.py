"""Tensor programs end to end: `func` text at many shapes -> `uopc build -t c` -> run through ctypes,
checked against numpy formulas written here (float32 to 1e-5 relative, integers exactly).

The programs are written by a small generator (`Func`), one builder per program; each records its
buffers in slot order. `python tests/test_tensor_programs.py` rewrites the samples
samples/{softmax,layernorm,conv2d,attention,mlp}.uop from it.
"""
from __future__ import annotations

import ctypes
import math
import pathlib

import numpy as np
import pytest

LOG2E = 1.4426950408889634


class Func:
  """Writes one `func` entry, one statement per call."""

  def __init__(self, name: str):
    self.name, self.lines, self.args, self.n = name, [], [], 0

  def let(self, text: str, name: str | None = None) -> str:
    name = name or f"v{self.n}"
    self.n += 1
    self.lines.append(f"  %{name} = {text}")
    return f"%{name}"

  def param(self, name: str, shape, dtype: str = "f32", out: bool = False) -> str:
    self.args.append((name, tuple(shape), dtype, out))
    return self.let(f'PARAM({list(shape)}) {{({len(self.args) - 1}, "{name}")}} : {dtype}', name)

  def op(self, op: str, *xs: str) -> str: return self.let(f"{op}({', '.join(xs)})")
  def const(self, v) -> str: return self.let(f"CONST {{{v!r}}}")
  def reshape(self, x: str, shape) -> str: return self.let(f"RESHAPE({x}, {list(shape)})")
  def expand(self, x: str, shape) -> str: return self.let(f"EXPAND({x}, {list(shape)})")
  def pad(self, x: str, offs, shape) -> str: return self.let(f"PAD({x}, {list(offs)}, {list(shape)})")
  def shrink(self, x: str, offs, shape) -> str: return self.let(f"SHRINK({x}, {list(offs)}, {list(shape)})")
  def permute(self, x: str, order) -> str: return self.let(f"PERMUTE({x}) {{{tuple(order)!r}}}")
  def reduce(self, x: str, op: str, axes) -> str: return self.let(f"REDUCE({x}) {{({op}, {tuple(axes)!r})}}")
  def cast(self, x: str, dtype: str) -> str: return self.let(f"CAST({x}) : {dtype}")
  def store(self, buf: str, value: str) -> None: self.lines.append(f"  STORE({buf}, {value})")

  def exp(self, x: str) -> str: return self.op("EXP2", self.op("MUL", x, self.const(LOG2E)))

  def matmul(self, a: str, b: str, m: int, k: int, n: int) -> str:
    """(m, k) @ (k, n) as seed 000's gemm: broadcast multiply, then sum over k."""
    prod = self.op("MUL", self.reshape(a, (m, k, 1)), self.reshape(b, (1, k, n)))
    return self.reshape(self.reduce(prod, "ADD", (1,)), (m, n))

  def softmax(self, x: str, n: int, m: int) -> str:
    """Softmax over the last axis of an (n, m) value."""
    mx = self.expand(self.reduce(x, "MAX", (1,)), (n, m))
    e = self.exp(self.op("SUB", x, mx))
    return self.op("DIV", e, self.reduce(e, "ADD", (1,)))  # the (n, 1) sum broadcasts

  def text(self) -> str: return f"func {self.name} {{\n" + "\n".join(self.lines) + "\n}\n"


def softmax(n: int, m: int):
  f = Func("softmax")
  x, out = f.param("x", (n, m)), f.param("out", (n, m), out=True)
  f.store(out, f.softmax(x, n, m))
  return f


def layernorm(n: int, d: int, eps: float = 1e-5):
  f = Func("layernorm")
  x, g, b, out = f.param("x", (n, d)), f.param("gamma", (d,)), f.param("beta", (d,)), f.param("out", (n, d), out=True)
  mean = f.op("MUL", f.reduce(x, "ADD", (1,)), f.const(1.0 / d))
  xc = f.op("SUB", x, mean)
  var = f.op("MUL", f.reduce(f.op("MUL", xc, xc), "ADD", (1,)), f.const(1.0 / d))
  inv = f.op("RECIP", f.op("SQRT", f.op("ADD", var, f.const(eps))))
  f.store(out, f.op("ADD", f.op("MUL", f.op("MUL", xc, inv), g), b))
  return f


def conv2d(c: int, h: int, w: int, o: int, kh: int, kw: int, p: int):
  """Cross-correlation of x (c, h, w) with weights (o, c, kh, kw), zero padding p, stride 1, plus bias."""
  f = Func("conv2d")
  x, wt, bias = f.param("x", (c, h, w)), f.param("w", (o, c, kh, kw)), f.param("bias", (o,))
  oh, ow = h + 2 * p - kh + 1, w + 2 * p - kw + 1
  out = f.param("out", (o, oh, ow), out=True)
  xp = f.pad(x, (0, p, p), (c, h + 2 * p, w + 2 * p)) if p else x
  patches = f.op("STACK", *[f.shrink(xp, (0, i, j), (c, oh, ow)) for i in range(kh) for j in range(kw)])
  wk = f.reshape(f.permute(f.reshape(wt, (o, c, kh * kw)), (0, 2, 1)), (o, kh * kw, c, 1, 1))
  prod = f.op("MUL", wk, f.reshape(patches, (1, kh * kw, c, oh, ow)))
  conv = f.reshape(f.reduce(prod, "ADD", (1, 2)), (o, oh, ow))
  f.store(out, f.op("ADD", conv, f.reshape(bias, (o, 1, 1))))
  return f


def attention(t: int, e: int, d: int):
  """softmax((x wq)(x wk)^T / sqrt(d)) (x wv)."""
  f = Func("attention")
  x, wq, wk, wv = f.param("x", (t, e)), f.param("wq", (e, d)), f.param("wk", (e, d)), f.param("wv", (e, d))
  out = f.param("out", (t, d), out=True)
  q, k, v = f.matmul(x, wq, t, e, d), f.matmul(x, wk, t, e, d), f.matmul(x, wv, t, e, d)
  scores = f.op("MUL", f.matmul(q, f.permute(k, (1, 0)), t, d, t), f.const(1.0 / math.sqrt(d)))
  f.store(out, f.matmul(f.softmax(scores, t, t), v, t, t, d))
  return f


def mlp(b: int, i: int, h: int, o: int):
  """A 2-layer classifier: softmax(relu(x w1 + b1) w2 + b2)."""
  f = Func("mlp")
  x, w1, b1 = f.param("x", (b, i)), f.param("w1", (i, h)), f.param("b1", (h,))
  w2, b2, out = f.param("w2", (h, o)), f.param("b2", (o,)), f.param("out", (b, o), out=True)
  hidden = f.op("MAX", f.op("ADD", f.matmul(x, w1, b, i, h), b1), f.const(0.0))
  logits = f.op("ADD", f.matmul(hidden, w2, b, h, o), b2)
  f.store(out, f.softmax(logits, b, o))
  return f


def gemm(m: int, k: int, n: int):
  f = Func("gemm")
  a, b, c = f.param("a", (m, k)), f.param("b", (k, n)), f.param("c", (m, n), out=True)
  f.store(c, f.matmul(a, b, m, k, n))
  return f


def _prefix_sum(f: Func, t: str, n: int) -> str:
  """seed 000's prefix_sum: pad, tile, trim, window, sum."""
  x = f.reshape(f.pad(t, (n - 1,), (2 * n - 1,)), (1, 2 * n - 1))
  x = f.reshape(f.expand(x, (n + 1, 2 * n - 1)), ((n + 1) * (2 * n - 1),))
  x = f.shrink(f.reshape(f.shrink(x, (0,), (2 * n * n,)), (n, 2 * n)), (0, 0), (n, n))
  return f.reshape(f.reduce(x, "ADD", (1,)), (n,))


def _arange(f: Func, n: int) -> str:
  return f.op("SUB", _prefix_sum(f, f.expand(f.reshape(f.const(1), (1,)), (n,)), n), f.const(1))


def prefix_sum(n: int, dtype: str = "f32"):
  f = Func("prefix_sum")
  t, out = f.param("t", (n,), dtype), f.param("out", (n,), dtype, out=True)
  f.store(out, _prefix_sum(f, t, n))
  return f


def arange(n: int):
  f = Func("arange")
  out = f.param("out", (n,), "i32", out=True)
  f.store(out, _arange(f, n))
  return f


def _one_hot(f: Func, idx: str, k: int, d: int) -> str:
  """(k, d) mask: [pos == idx[j]] as f32."""
  hit = f.op("CMPEQ", f.reshape(_arange(f, k), (k, 1)), f.reshape(idx, (1, d)))
  return f.cast(hit, "f32")


def gather(k: int, d: int):
  f = Func("gather")
  t, idx, out = f.param("t", (k,)), f.param("idx", (d,), "i32"), f.param("out", (d,), out=True)
  picked = f.op("MUL", f.reshape(t, (k, 1)), _one_hot(f, idx, k, d))
  f.store(out, f.reshape(f.reduce(picked, "ADD", (0,)), (d,)))
  return f


def scatter_add(k: int, d: int):
  f = Func("scatter_add")
  t, idx, val = f.param("t", (k,)), f.param("idx", (d,), "i32"), f.param("val", (d,))
  out = f.param("out", (k,), out=True)
  added = f.reduce(f.op("MUL", _one_hot(f, idx, k, d), f.reshape(val, (1, d))), "ADD", (1,))
  f.store(out, f.op("ADD", t, f.reshape(added, (k,))))
  return f


SAMPLES = {"softmax": softmax(4, 10), "layernorm": layernorm(3, 8), "conv2d": conv2d(2, 5, 6, 3, 3, 3, 1),
           "attention": attention(5, 8, 4), "mlp": mlp(2, 6, 8, 3)}

# ---- numpy formulas (float64), independent of the compiler ----------------------------------------------
def np_softmax(x): return (e := np.exp(x - x.max(-1, keepdims=True))) / e.sum(-1, keepdims=True)


def np_conv2d(x, w, bias, p):
  xp = np.pad(x, ((0, 0), (p, p), (p, p)))
  o, c, kh, kw = w.shape
  oh, ow = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
  out = np.zeros((o, oh, ow))
  for i in range(kh):
    for j in range(kw): out += np.einsum("oc,chw->ohw", w[:, :, i, j], xp[:, i:i + oh, j:j + ow])
  return out + bias[:, None, None]


def np_layernorm(x, g, b, eps=1e-5):
  xc = x - x.mean(1, keepdims=True)
  return xc / np.sqrt((xc * xc).mean(1, keepdims=True) + eps) * g + b


def np_attention(x, wq, wk, wv):
  q, k, v = x @ wq, x @ wk, x @ wv
  return np_softmax(q @ k.T / math.sqrt(wq.shape[1])) @ v


def np_mlp(x, w1, b1, w2, b2): return np_softmax(np.maximum(x @ w1 + b1, 0) @ w2 + b2)


def np_scatter_add(t, idx, val):
  out = t.astype(np.float64)
  np.add.at(out, idx, val)
  return out


CASES = [  # (builder, shape args, numpy formula of the output from the inputs in slot order)
  *[(softmax, s, np_softmax) for s in [(4, 10), (3, 7), (1, 1), (5, 1), (1, 13)]],
  *[(layernorm, s, np_layernorm) for s in [(3, 8), (1, 5), (4, 1), (2, 13)]],
  *[(conv2d, s, lambda x, w, b, p=s[-1]: np_conv2d(x, w, b, p)) for s in
    [(2, 5, 6, 3, 3, 3, 1), (1, 4, 4, 1, 1, 1, 0), (3, 7, 5, 2, 2, 3, 0), (1, 1, 1, 2, 3, 3, 1)]],
  *[(attention, s, np_attention) for s in [(5, 8, 4), (1, 3, 2), (7, 5, 3)]],
  *[(mlp, s, np_mlp) for s in [(2, 6, 8, 3), (1, 1, 1, 1), (3, 5, 7, 4)]],
  *[(gemm, s, lambda a, b: a @ b) for s in [(4, 3, 2), (1, 1, 1), (5, 7, 3), (3, 1, 6)]],
  *[(prefix_sum, s, np.cumsum) for s in [(1,), (4,), (9,)]],
  *[(arange, s, lambda n=s[0]: np.arange(n)) for s in [(1,), (5,), (12,)]],
  *[(gather, s, lambda t, idx: t[idx]) for s in [(4, 3), (1, 1), (7, 10)]],
  *[(scatter_add, s, np_scatter_add) for s in [(4, 3), (1, 2), (6, 9)]],
]

NP = {"f32": np.float32, "i32": np.int32}


def random_inputs(f: Func, rng) -> list[np.ndarray]:
  """Inputs in slot order; i32 inputs are indices into the leading axis of the first buffer."""
  bound = f.args[0][1][0]
  return [rng.integers(0, bound, shape).astype(np.int32) if dt == "i32" else rng.standard_normal(shape).astype(np.float32)
          for _, shape, dt, out in f.args if not out]


def build_and_run(f: Func, inputs: list[np.ndarray], tmp_path) -> np.ndarray:
  """Compile f with the -t c pipeline and call its entry on `inputs`; returns the output buffer."""
  from uopc.driver import BuildOptions, build
  src = tmp_path / f"{f.name}.uop"
  src.write_text(f.text())
  build(src, BuildOptions(out_dir=tmp_path, opt_level=1))
  lib = ctypes.CDLL(str(tmp_path / f"lib{f.name}.so"))
  name, shape, dt, _ = next(a for a in f.args if a[3])
  out = np.zeros(shape, NP[dt])
  it = iter(inputs)
  bufs = [out if a[3] else np.ascontiguousarray(next(it)) for a in f.args]
  assert getattr(lib, f"{f.name}_{f.name}")(*[b.ctypes.data_as(ctypes.c_void_p) for b in bufs]) == 0
  return out


@pytest.mark.parametrize("builder,shape,formula", CASES, ids=[f"{c[0].__name__}{list(c[1])}" for c in CASES])
def test_matches_numpy(builder, shape, formula, tmp_path):
  f = builder(*shape)
  inputs = random_inputs(f, np.random.default_rng(sum(shape)))
  got = build_and_run(f, inputs, tmp_path)
  want = formula(*[i.astype(np.float64) if i.dtype == np.float32 else i for i in inputs])
  if got.dtype == np.int32: np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# softmax and layernorm fuse their row reductions into one kernel, scatter_add and gather their arange (a closed form,
# reduce_collapse); attention and mlp realize their
# matmuls (read inside the next reduction's loop) and fuse their softmax
KERNEL_COUNTS = [(softmax(4, 10), 1), (layernorm(3, 8), 1), (conv2d(2, 5, 6, 3, 3, 3, 1), 1), (attention(5, 8, 4), 5),
                 (mlp(2, 6, 8, 3), 3), (gemm(4, 3, 2), 1), (prefix_sum(5), 1), (arange(5), 1), (gather(4, 3), 1),
                 (scatter_add(4, 3), 1)]


def elementwise_chain():
  f = Func("chain")
  x, y, out = f.param("x", (3, 5)), f.param("y", (5,)), f.param("out", (3, 5), out=True)
  f.store(out, f.op("MAX", f.op("ADD", f.op("MUL", x, y), f.const(1.0)), f.op("NEG", y)))
  return f


@pytest.mark.parametrize("f,n", KERNEL_COUNTS + [(elementwise_chain(), 1)], ids=[c[0].name for c in KERNEL_COUNTS] + ["chain"])
def test_print_after_rangeify_shows_the_kernel_split(f, n, tmp_path):
  import io

  from uopc.driver import BuildOptions, build
  src = tmp_path / f"{f.name}.uop"
  src.write_text(f.text())
  printed = io.StringIO()
  build(src, BuildOptions(out_dir=tmp_path, emit=("source",), print_after=("rangeify",), print_out=printed))
  text = printed.getvalue()
  assert f"# {n} kernel(s)" in text and text.count("# kernel ") == n


SEED_SAMPLES = {  # the parser's samples of seed 000's compositions: inputs by name, numpy formula
  "gemm": lambda a: a["A"] @ a["B"], "prefix_sum": lambda a: np.cumsum(a["T"]), "arange": None,
  "gather": lambda a: a["T"][a["idx"]], "scatter_add": lambda a: np_scatter_add(a["T"], a["idx"], a["val"]),
}


@pytest.mark.parametrize("name", sorted(SEED_SAMPLES))
def test_seed_composition_samples(name, tmp_path):
  from uopc.driver import BuildOptions, build
  from uopc.frontend import load_module
  path = pathlib.Path(__file__).resolve().parent.parent / "samples" / f"{name}.uop"
  entry = load_module(str(path)).entries[0]
  params = sorted((u for u in entry.sink.toposort() if u.op.name == "PARAM"), key=lambda u: u.arg[0])
  written = {u.src[0] for u in entry.sink.toposort() if u.op.name == "STORE"}
  rng = np.random.default_rng(7)
  bound = params[0].shape[0]
  arrays = {p.arg[1]: np.zeros(p.shape, NP[str(p.dtype)]) if p in written else
            (rng.integers(0, bound, p.shape).astype(np.int32) if str(p.dtype) == "i32" else rng.standard_normal(p.shape).astype(np.float32))
            for p in params}
  build(path, BuildOptions(out_dir=tmp_path, opt_level=1))
  lib = ctypes.CDLL(str(tmp_path / f"lib{name}.so"))
  assert getattr(lib, f"{name}_{entry.name}")(*[arrays[p.arg[1]].ctypes.data_as(ctypes.c_void_p) for p in params]) == 0
  out = arrays[next(p for p in params if p in written).arg[1]]
  want = np.arange(out.shape[0]) if SEED_SAMPLES[name] is None else SEED_SAMPLES[name]({k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in arrays.items()})
  if out.dtype == np.int32: np.testing.assert_array_equal(out, want)
  else: np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stmt,message", [
  ("%v = ADD(%x, %y)", "do not broadcast"),
  ("%v = REDUCE(%x) {(ADD, (2,))}", "out of range"),
  ("%v = RESHAPE(%x, [5, 7])", "35 elements"),
])
def test_invalid_programs_fail_in_the_verifier_with_a_location(stmt, message, tmp_path):
  from uopc.diagnostics import CompileError
  from uopc.driver import BuildOptions, build
  src = tmp_path / "bad.uop"
  src.write_text(f"""func bad {{
  %x = PARAM([4, 8]) {{(0, "x")}} : f32
  %y = PARAM([4, 7]) {{(1, "y")}} : f32
  %out = PARAM([4, 8]) {{(2, "out")}} : f32
  {stmt}
  STORE(%out, %v)
}}
""")
  with pytest.raises(CompileError) as e:
    build(src, BuildOptions(out_dir=tmp_path))
  first = e.value.diagnostics[0]
  assert message in first.message and first.loc is not None and first.loc.line == 5


if __name__ == "__main__":
  import subprocess
  import sys
  root = pathlib.Path(__file__).resolve().parent.parent
  for name, f in SAMPLES.items():
    path = root / "samples" / f"{name}.uop"
    path.write_text(f.text())
    subprocess.run([sys.executable, "-m", "uopc", "fmt", "-i", str(path)], check=True)
