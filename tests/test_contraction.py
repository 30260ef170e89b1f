"""Contraction order (uopc/stages/contraction.py): a sum of a product over several axes is summed one factor
group at a time. A chain of products as one einsum (tinygrad's form: the broadcast product of all operands,
one REDUCE) becomes a chain of matrix products, each inner sum realized; a plain matrix product, a sum of
an elementwise product and a small bilinear form (nothing to gain) are left as they are; on a CPU a bilinear
form whose inner matrix product saves a quarter of the operations is split (not on a GPU). Results: floats against
float64 numpy, integers exactly (wrapping int32 arithmetic distributes), on every target."""
from __future__ import annotations

import numpy as np
import pytest

from uopc.frontend import parse_source
from uopc.ops import Ops
from uopc.pipeline import compile_module
from uopc.run import run_file
from uopc.stages.contraction import contraction_order

DT = {"f32": np.float32, "i32": np.int32}


def einsum3(i: int, j: int, k: int, m: int, dt: str = "f32") -> str:
  """einsum("ij,jk,kl->il") as tinygrad exports it: the product over (i, j, k, l), permuted, reduced over (j, k)."""
  return f"""func e3 {{
  %out = PARAM([{i}, {m}]) {{(3, "out")}} : {dt}
  %a = PARAM([{i}, {j}]) {{(0, "a")}} : {dt}
  %0 = RESHAPE(%a, [{i}, {j}, 1, 1])
  %w1 = PARAM([{j}, {k}]) {{(1, "w1")}} : {dt}
  %1 = RESHAPE(%w1, [1, {j}, {k}, 1])
  %2 = MUL(%0, %1)
  %w2 = PARAM([{k}, {m}]) {{(2, "w2")}} : {dt}
  %3 = RESHAPE(%w2, [1, 1, {k}, {m}])
  %4 = MUL(%2, %3)
  %5 = PERMUTE(%4) {{(1, 2, 0, 3)}}
  %6 = REDUCE(%5) {{(ADD, (0, 1))}}
  %7 = RESHAPE(%6, [{i}, {m}])
  STORE(%out, %7)
}}
"""


def chain4(dims: tuple[int, ...], dt: str = "f32") -> str:
  """einsum("ij,jk,kl,lm->im") without a PERMUTE: the product over (i, j, k, l, m), reduced over (j, k, l)."""
  n = len(dims)
  lines = [f'  %out = PARAM([{dims[0]}, {dims[-1]}]) {{({n - 1}, "out")}} : {dt}']
  for f in range(n - 1):
    view = ", ".join(str(d) if a in (f, f + 1) else "1" for a, d in enumerate(dims))
    lines += [f'  %x{f} = PARAM([{dims[f]}, {dims[f + 1]}]) {{({f}, "x{f}")}} : {dt}', f"  %v{f} = RESHAPE(%x{f}, [{view}])"]
  prod = "%v0"
  for f in range(1, n - 1):
    lines.append(f"  %p{f} = MUL({prod}, %v{f})")
    prod = f"%p{f}"
  lines += [f"  %r = REDUCE({prod}) {{(ADD, ({', '.join(map(str, range(1, n - 1)))}))}}", f"  %o = RESHAPE(%r, [{dims[0]}, {dims[-1]}])",
            "  STORE(%out, %o)"]
  return "func chain {\n" + "\n".join(lines) + "\n}\n"


def _kernels(text: str) -> int:
  (entry,) = compile_module(parse_source(text, "t.uop"), "c", "t")
  return len(entry.kernels)


def test_a_chain_einsum_becomes_a_chain_of_matrix_products():
  assert _kernels(einsum3(8, 16, 16, 8)) == 2      # the inner sum over j realized, then the sum over k
  assert _kernels(chain4((4, 8, 8, 8, 4))) == 3    # two inner sums, then the last


@pytest.mark.parametrize("text", [
  # a matrix product: one reduced axis
  'func mm {\n  %out = PARAM([4, 5]) {(2, "out")} : f32\n  %a = PARAM([4, 6]) {(0, "a")} : f32\n  %b = PARAM([6, 5]) {(1, "b")} : f32\n'
  '  %x = RESHAPE(%a, [4, 6, 1])\n  %y = PERMUTE(%b) {(1, 0)}\n  %z = RESHAPE(%y, [1, 6, 5])\n  %p = MUL(%x, %z)\n'
  '  %s = REDUCE(%p) {(ADD, (1,))}\n  %o = RESHAPE(%s, [4, 5])\n  STORE(%out, %o)\n}\n',
  # sum(x * y) over both axes: every factor spans every axis
  'func dot {\n  %out = PARAM([1]) {(2, "out")} : f32\n  %a = PARAM([6, 7]) {(0, "a")} : f32\n  %b = PARAM([6, 7]) {(1, "b")} : f32\n'
  '  %p = MUL(%a, %b)\n  %s = REDUCE(%p) {(ADD, (0, 1))}\n  %o = RESHAPE(%s, [1])\n  STORE(%out, %o)\n}\n',
  # a bilinear form x^T W y per row b: splitting saves too little
  'func bil {\n  %out = PARAM([3]) {(3, "out")} : f32\n  %x = PARAM([3, 6]) {(0, "x")} : f32\n  %w = PARAM([6, 7]) {(1, "w")} : f32\n'
  '  %y = PARAM([3, 7]) {(2, "y")} : f32\n  %xv = RESHAPE(%x, [3, 6, 1])\n  %wv = RESHAPE(%w, [1, 6, 7])\n  %yv = RESHAPE(%y, [3, 1, 7])\n'
  '  %p = MUL(%xv, %wv)\n  %q = MUL(%p, %yv)\n  %s = REDUCE(%q) {(ADD, (1, 2))}\n  %o = RESHAPE(%s, [3])\n  STORE(%out, %o)\n}\n',
], ids=["matmul", "dot", "bilinear"])
def test_products_with_nothing_to_gain_are_left_as_they_are(text):
  (entry,) = parse_source(text, "t.uop").entries
  sink = entry.sink
  assert contraction_order(sink) is sink


TARGETS = [("c", False), ("llvm", False), ("cuda", True), ("amd", True), ("metal", True)]


@pytest.mark.parametrize("target,emulated", TARGETS, ids=[t for t, _ in TARGETS])
def test_contracted_floats_match_float64(tmp_path, target, emulated):
  rng = np.random.default_rng(3)
  path = tmp_path / "e3.uop"
  path.write_text(einsum3(5, 9, 7, 6) + chain4((3, 5, 4, 6, 2)))
  a, w1, w2 = rng.standard_normal((5, 9)), rng.standard_normal((9, 7)), rng.standard_normal((7, 6))
  xs = [rng.standard_normal(s) for s in ((3, 5), (5, 4), (4, 6), (6, 2))]
  got = run_file(path, target=target, inputs={"a": a.astype(np.float32), "w1": w1.astype(np.float32), "w2": w2.astype(np.float32)},
                 entry="e3", emulated=emulated).arrays["out"]
  np.testing.assert_allclose(got, a @ w1 @ w2, rtol=1e-5, atol=1e-5)
  got = run_file(path, target=target, inputs={f"x{i}": x.astype(np.float32) for i, x in enumerate(xs)}, entry="chain",
                 emulated=emulated).arrays["out"]
  np.testing.assert_allclose(got, xs[0] @ xs[1] @ xs[2] @ xs[3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target,emulated", TARGETS, ids=[t for t, _ in TARGETS])
def test_contracted_integers_are_exact_with_wrapping(tmp_path, target, emulated):
  rng = np.random.default_rng(4)
  path = tmp_path / "e3i.uop"
  path.write_text(einsum3(4, 6, 5, 3, "i32"))
  a, w1, w2 = (rng.integers(-2 ** 20, 2 ** 20, s).astype(np.int32) for s in ((4, 6), (6, 5), (5, 3)))
  got = run_file(path, target=target, inputs={"a": a, "w1": w1, "w2": w2}, emulated=emulated).arrays["out"]
  want = ((a.astype(np.int64) @ w1.astype(np.int64)).astype(np.int32).astype(np.int64) @ w2.astype(np.int64)).astype(np.int32)
  np.testing.assert_array_equal(got, want)  # int32 products and sums wrap: any grouping gives the same bits


def test_expanded_factors_are_contracted_and_an_expanded_sum_keeps_its_copies(tmp_path):
  """Factors written as EXPANDs (not left to the MULs' broadcast) are contracted as the views they expand; an
  axis that only an EXPAND gives sums copies, so its factors keep their EXPANDs (the result counts them)."""
  text = einsum3(5, 9, 7, 6)
  for v, shape in (("%0", "[5, 9, 7, 6]"), ("%1", "[5, 9, 7, 6]"), ("%3", "[5, 9, 7, 6]")):
    text = text.replace(f"MUL({v}, ", f"MUL({v}e, ").replace(f", {v})", f", {v}e)")
    text = text.replace(f"  {v} = RESHAPE", f"  {v}e = EXPAND({v}, {shape})\n  {v} = RESHAPE", 1)
  # each view is defined before its EXPAND: move every EXPAND after the line that defines its view
  lines = text.splitlines()
  for v in ("%0", "%1", "%3"):
    i = next(n for n, ln in enumerate(lines) if ln.startswith(f"  {v}e = EXPAND"))
    lines.insert(i + 1, lines.pop(i))
  text = "\n".join(lines) + "\n"
  assert _kernels(text) == 2
  path = tmp_path / "e.uop"
  path.write_text(text)
  rng = np.random.default_rng(6)
  a, w1, w2 = rng.standard_normal((5, 9)), rng.standard_normal((9, 7)), rng.standard_normal((7, 6))
  got = run_file(path, inputs={"a": a.astype(np.float32), "w1": w1.astype(np.float32), "w2": w2.astype(np.float32)}).arrays["out"]
  np.testing.assert_allclose(got, a @ w1 @ w2, rtol=1e-5, atol=1e-5)
  copies = ('func cp {\n  %out = PARAM([4]) {(2, "out")} : f32\n  %a = PARAM([4, 6]) {(0, "a")} : f32\n  %b = PARAM([4, 6]) {(1, "b")} : f32\n'
            '  %av = RESHAPE(%a, [4, 6, 1])\n  %ae = EXPAND(%av, [4, 6, 3])\n  %bv = RESHAPE(%b, [4, 6, 1])\n  %be = EXPAND(%bv, [4, 6, 3])\n'
            '  %p = MUL(%ae, %be)\n  %s = REDUCE(%p) {(ADD, (1, 2))}\n  %o = RESHAPE(%s, [4])\n  STORE(%out, %o)\n}\n')
  path.write_text(copies)
  a, b = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
  got = run_file(path, inputs={"a": a, "b": b}).arrays["out"]
  np.testing.assert_allclose(got, 3 * (a.astype(np.float64) * b).sum(1), rtol=1e-5)


def bilinear(b: int, i: int, j: int) -> str:
  """einsum("bi,ij,bj->b", x, w, y) as tinygrad exports it: x[b, i] * w[i, j] * y[b, j] summed over (i, j)."""
  return f"""func bil {{
  %out = PARAM([{b}]) {{(3, "out")}} : f32
  %x = PARAM([{b}, {i}]) {{(0, "x")}} : f32
  %w = PARAM([{i}, {j}]) {{(1, "w")}} : f32
  %y = PARAM([{b}, {j}]) {{(2, "y")}} : f32
  %xv = RESHAPE(%x, [{b}, {i}, 1])
  %wv = RESHAPE(%w, [1, {i}, {j}])
  %yv = RESHAPE(%y, [{b}, 1, {j}])
  %p = MUL(%xv, %wv)
  %q = MUL(%p, %yv)
  %s = REDUCE(%q) {{(ADD, (1, 2))}}
  %o = RESHAPE(%s, [{b}])
  STORE(%out, %o)
}}
"""


def test_a_cpu_splits_a_bilinear_form_into_a_matrix_product_and_row_sums(tmp_path):
  """x @ w first (a tiled matrix product), then each row of it times y summed: 2 operations per term instead of
  3 (2 cores, 128 x 256 operands: 2.8 -> 0.21 ms); a GPU keeps the one kernel (launch-bound at such sizes)."""
  text = bilinear(16, 32, 24)
  (entry,) = compile_module(parse_source(text, "t.uop"), "c", "t")
  assert len(entry.kernels) == 2
  (entry,) = compile_module(parse_source(text, "t.uop"), "cuda", "t")
  assert len(entry.kernels) == 1
  rng = np.random.default_rng(5)
  x, w, y = rng.standard_normal((16, 32)), rng.standard_normal((32, 24)), rng.standard_normal((16, 24))
  path = tmp_path / "bil.uop"
  path.write_text(text)
  for target, emulated in (("c", False), ("llvm", False), ("cuda", True)):
    got = run_file(path, target=target, inputs={"x": x.astype(np.float32), "w": w.astype(np.float32), "y": y.astype(np.float32)},
                   emulated=emulated).arrays["out"]
    np.testing.assert_allclose(got, np.einsum("bi,ij,bj->b", x, w, y), rtol=1e-4, atol=1e-4)
