"""Fusion checks that realize a value whose fused form repeats work (uopc/stages/fusion_checks.py), on programs
written with tinygrad's own methods, checked against tinygrad on the CPU targets and an emulated GPU:

- check_reread: a product read at several indices of one kernel (an LSTM cell's four gates are column slices
  of `x @ wx + h @ wh + b`) is realized once with the elementwise sum above it, instead of its loops running
  again per gate inside the elementwise kernel (H100: 0.915 -> 0.036 ms, 2 cores: 4.2 -> 1.7 ms);
- check_reread, however short the loop: a reduction lowered at more than REREAD_MAX indices of one kernel (CTC's
  alpha recursion reads each step's logsumexp at three shifts of the next: 240 reductions of 3 in one kernel
  after 8 steps, 2m20s to compile) is realized (15 kernels, 9 s);
- check_fanout: an elementwise value lowered at more than FANOUT_MAX indices of one kernel (a sorting network's
  stages, each read at two indices of the next, and again in its backward pass) is realized;
- check_repeats on a CPU: an expensive value broadcast over an output loop outside the loops it depends on
  (RoPE's cos and sin of position x frequency, the same for every head) is computed once into a table
  (2 cores: 1.14 -> 0.20 ms); a GPU recomputes it in its threads rather than launch a kernel for the table."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor  # noqa: E402

import uopc  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.pipeline import compile_module  # noqa: E402
from uopc.run import run_file  # noqa: E402


def lstm_cell(x, h, c, wx, wh, b):
  i, f, g, o = (x @ wx + h @ wh + b).chunk(4, dim=-1)
  c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
  return (o.sigmoid() * c2.tanh()).cat(c2, dim=-1)


def rope(x):
  heads, t, d = x.shape
  freqs = 1.0 / (10000 ** (Tensor.arange(0, d, 2)[: d // 2] / d))
  ang = Tensor.arange(t).reshape(t, 1) * freqs.reshape(1, -1)
  x1, x2 = x[..., : d // 2], x[..., d // 2:]
  return (x1 * ang.cos() - x2 * ang.sin()).cat(x2 * ang.cos() + x1 * ang.sin(), dim=-1)


def _kernels(text: str, target: str) -> int:
  (entry,) = compile_module(parse_source(text, "t.uop"), target, "t")
  return len(entry.kernels)


def _check(tmp_path, fn, shapes, name):
  rng = np.random.default_rng(2)
  arrays = [(rng.standard_normal(s) / np.sqrt(s[0] if n.startswith("w") else 1)).astype(np.float32) for n, s in shapes]
  text = uopc.export(fn, *[Tensor.empty(*s) for _, s in shapes], name=name)
  path = tmp_path / f"{name}.uop"
  path.write_text(text)
  want = fn(*[Tensor(a) for a in arrays]).numpy()
  for target, emulated in (("c", False), ("llvm", False), ("cuda", True)):
    got = run_file(path, target=target, inputs={n: a for (n, _), a in zip(shapes, arrays)}, emulated=emulated).arrays["out"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} on {target}")
  return text


def test_an_lstm_cell_computes_its_gates_product_once(tmp_path):
  e = 128  # each gate reads the product at its own columns: 3 more runs of a 128-long reduction per output
  shapes = [("x", (4, e)), ("h", (4, e)), ("c", (4, e // 4)), ("wx", (e, e)), ("wh", (e, e)), ("b", (e,))]
  text = _check(tmp_path, lstm_cell, shapes, "lstm")
  assert _kernels(text, "c") == 2 and _kernels(text, "cuda") == 2  # x @ wx + h @ wh + b, then the cell


def test_a_short_product_read_at_several_columns_stays_fused(tmp_path):
  e = 32  # 3 more runs of a 32-long reduction per output: cheaper than a kernel of its own
  shapes = [("x", (4, e)), ("h", (4, e)), ("c", (4, e // 4)), ("wx", (e, e)), ("wh", (e, e)), ("b", (e,))]
  text = _check(tmp_path, lstm_cell, shapes, "lstm")
  assert _kernels(text, "c") == 1 and _kernels(text, "cuda") == 1


def test_rope_tables_are_computed_once_on_a_cpu(tmp_path):
  text = _check(tmp_path, rope, [("x", (6, 16, 8))], "rope")
  assert _kernels(text, "c") == 4  # the frequencies, the cos and sin tables, then the rotation of every head
  assert _kernels(text, "cuda") == 1


def ctc_forward(x):
  lp = x.log_softmax(-1)
  alpha = lp[0]
  for t in range(1, 8):
    s1 = alpha.pad(((0, 0), (1, 0)), value=-float("inf"))[:, :-1]
    s2 = alpha.pad(((0, 0), (2, 0)), value=-float("inf"))[:, :-2]
    alpha = Tensor.stack(alpha, s1, s2).logsumexp(0) + lp[t]
  return alpha


def test_a_short_reduction_read_at_many_indices_is_realized(tmp_path):
  from uopc.stages.fusion_checks import REREAD_MAX
  text = _check(tmp_path, ctc_forward, [("x", (8, 2, 12))], "ctc")
  import io
  from uopc.pipeline import PrintOptions
  for target in ("c", "cuda"):
    out = io.StringIO()
    compile_module(parse_source(text, "t.uop"), target, "t", PrintOptions(after=frozenset({"optimize"}), out=out))
    for axes in (x[len("# axes: "):].split() for x in out.getvalue().splitlines() if x.startswith("# axes: ")):
      assert sum(a[0] in "rRG" for a in axes) <= 3 * REREAD_MAX, (target, axes)  # 240 in one kernel before


def topk_grad(x): return x.topk(3)[0].square().sum().gradient(x)[0]


def test_a_compare_exchange_networks_backward_realizes_its_stages(tmp_path):
  """check_fanout: tinygrad's topk is a bitonic sort (10 stages of compare-exchanges for 16 elements), each stage
  reading the one before at two indices; its backward pass reads them again, so fused, the first stage was lowered
  at some 2^10 indices of one kernel (more than 10 minutes to build a 3 x 12 topk's gradient). An elementwise value
  lowered at more than FANOUT_MAX indices of a kernel is realized; the gradient (2x at the top 3, 0 elsewhere)
  matches numpy."""
  x = np.random.default_rng(4).permutation(36).reshape(3, 12).astype(np.float32) - 17.5  # distinct: no ties
  path = tmp_path / "tk.uop"
  path.write_text(uopc.export(topk_grad, Tensor.empty(3, 12), name="tk"))
  assert _kernels(path.read_text(), "c") > 8, "the network's stages are realized"
  want = np.where(x >= np.sort(x, axis=1)[:, -3:-2], 2 * x, 0).astype(np.float32)
  for target in ("c", "llvm"):
    np.testing.assert_array_equal(run_file(path, target=target, inputs={"x": x}).arrays["out"], want)
