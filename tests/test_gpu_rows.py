"""GPU row reductions with few rows (uopc.stages.gpu_rows, and Rangeify's realized nested reductions):
the threads per row the heuristics choose from the row's length (a divisor, runs of 4 first), the
sibling output loops split the same way (none run whole by every thread), prime lengths padded, and a
long reduction nested in another reduction's loop moved into a kernel of its own on GPUs. Each schedule
is pinned (opts and kernel count, as `--print-after optimize` prints them), run in the emulator
(which reports races and missing BARRIERs) against numpy, and assembled by ptxas for sm_80 and sm_90."""
from __future__ import annotations

import io

import numpy as np
import pytest

from test_cuda_ptx import needs_ptxas, ptxas_accepts
from test_group_reduce import row_reduce
from test_tensor_programs import Func, layernorm, np_layernorm, np_softmax, softmax
from uopc.driver import BuildOptions, build
from uopc.dtype import dtypes
from uopc.frontend import parse_source
from uopc.ops import AxisType, Ops
from uopc.pipeline import PrintOptions, compile_module
from uopc.run import run_file
from uopc.stages.gpu_rows import row_threads
from uopc.stages.optimize import injective_in
from uopc.uop import UOp


def optimized(f: Func, target: str = "cuda") -> list[tuple[str, str]]:
  """Each kernel's (axes, opts) after Optimize on `target`, as --print-after optimize shows them."""
  return optimized_text(f.text(), target)


def optimized_text(text: str, target: str = "cuda") -> list[tuple[str, str]]:
  """`optimized` of a program's text."""
  out = io.StringIO()
  compile_module(parse_source(text, "t.uop"), target, "t", PrintOptions(after=frozenset({"optimize"}), out=out))
  lines = out.getvalue().splitlines()
  axes = [x[len("# axes: "):] for x in lines if x.startswith("# axes: ")]
  return list(zip(axes, [x[len("# opts: "):] for x in lines if x.startswith("# opts: ")]))


def emulated(f: Func, tmp_path, inputs: dict[str, np.ndarray], target: str = "cuda") -> np.ndarray:
  (tmp_path / f"{f.name}.uop").write_text(f.text())
  return run_file(tmp_path / f"{f.name}.uop", target=target, inputs=inputs, emulated=True).arrays["out"]


def nested_loss(rows: int, n: int) -> Func:
  """sum over rows of log2(sum over columns of exp(x)): each row's sum is read inside the loop over rows."""
  f = Func("loss")
  x, out = f.param("x", (rows, n)), f.param("out", (1, 1), out=True)
  f.store(out, f.reduce(f.op("LOG2", f.reduce(f.exp(x), "ADD", (1,))), "ADD", (0,)))
  return f


@pytest.mark.parametrize("sizes, want", [
  ([4096, 4096, 4096], (4, 256)),   # long rows: the most threads, several 16-byte runs each
  ([768, 768, 768], (4, 192)),      # GPT-2's layernorm: one 16-byte run per thread
  ([1000, 1000], (4, 250)),         # 1000 classes: 250 threads, not a power of two
  ([512], (4, 128)), ([256], (4, 64)),
  ([999], (1, 111)),                # odd: single elements, 9 each
  ([1021], (1, 0)), ([1018], (1, 0)),  # a prime, twice a prime: no divisor from a warp up (padded instead)
])
def test_threads_per_row_divide_every_shared_size(sizes, want):
  assert row_threads(sizes, 256) == want


def test_few_long_rows_of_layernorm_use_one_16_byte_run_per_thread_in_every_loop():
  """64 x 768: 192 threads per row share the mean's and the variance's reductions and the output loop
  (before: 256 threads, each running the whole 768-wide output loop); one kernel."""
  assert optimized(layernorm(64, 768)) == [("g64 l192 u4 G192 r4 G192 r4",
                                            "SPLIT(3,4,r),SPLIT(3,192,G),SPLIT(2,4,r),SPLIT(2,192,G),SPLIT(1,4,u),SPLIT(1,192,l)")]


def test_rows_of_1000_get_250_threads_and_many_long_rows_keep_their_schedule():
  assert optimized(softmax(256, 1000)) == [("g256 l250 u4 G250 r4 G250 r4",
                                            "SPLIT(3,4,r),SPLIT(3,250,G),SPLIT(2,4,r),SPLIT(2,250,G),SPLIT(1,4,u),SPLIT(1,250,l)")]
  # 4096 x 4096 (bench_cuda.py, at 77-81% of the H100's copy bandwidth): as before
  assert optimized(softmax(4096, 4096)) == [("g4096 L4 l256 u4 R4 G256 r4 R4 G256 r4",
                                             "SPLIT(3,4,r),SPLIT(3,256,G),SPLIT(2,4,r),SPLIT(2,256,G),SPLIT(1,4,u),SPLIT(1,256,l)")]


def test_a_prime_row_length_is_padded_in_its_reductions_and_its_output_loop():
  [(axes, opts)] = optimized(softmax(8, 1021))
  assert opts.startswith("PADTO(1,1024),PADTO(2,1024),PADTO(3,1024),") and axes == "g8 l256 u4 G256 r4 G256 r4"


@pytest.mark.parametrize("target", ["cuda", "amd", "metal"])
@pytest.mark.parametrize("rows, n", [(6, 768), (5, 1000), (3, 1021), (4, 999)])
def test_emulated_rows_match_numpy(tmp_path, target, rows, n):
  rng = np.random.default_rng(rows * n)
  x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
  np.testing.assert_allclose(emulated(softmax(rows, n), tmp_path, {"x": x}, target), np_softmax(x.astype(np.float64)), rtol=1e-5, atol=1e-9)
  g, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
  got = emulated(layernorm(rows, n), tmp_path, {"x": x, "gamma": g, "beta": b}, target)
  np.testing.assert_allclose(got, np_layernorm(x.astype(np.float64), g, b), rtol=1e-4, atol=1e-5)


def test_a_long_reduction_nested_in_another_gets_its_own_kernel_on_gpus_only():
  """The row sums run side by side (a workgroup of 250 threads per row) and the loss over rows reads
  them, instead of one workgroup combining each row's partials in turn; CPUs keep one kernel."""
  f = nested_loss(32, 1000)
  assert optimized(f) == [("g32 G250 r4", "SPLIT(1,4,r),SPLIT(1,250,G)"), ("R32", "(none)")]
  assert len(optimized(f, "c")) == 1
  # short rows too, where their steps add up to fusion_checks.NESTED_MIN in a kernel of few outputs (the loss's
  # one thread would walk all 3200); 8 rows of 16 (128 steps) stay nested
  assert len(optimized(nested_loss(32, 100))) == 2 and len(optimized(nested_loss(8, 16))) == 1


@pytest.mark.parametrize("target", ["c", "cuda", "amd", "metal"])
def test_nested_loss_matches_numpy(tmp_path, target):
  x = np.random.default_rng(7).standard_normal((32, 1000)).astype(np.float32)
  (tmp_path / "loss.uop").write_text(nested_loss(32, 1000).text())
  got = run_file(tmp_path / "loss.uop", target=target, inputs={"x": x}, emulated=target != "c").arrays["out"]
  np.testing.assert_allclose(got, [[np.log2(np.exp(x.astype(np.float64)).sum(1)).sum()]], rtol=1e-5)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_the_row_kernels(tmp_path, arch):
  funcs = [layernorm(64, 768), softmax(256, 1000), softmax(8, 1021), nested_loss(32, 1000), row_reduce(768, 64, "MAX")]
  funcs[2].name = "softmax_prime"
  (tmp_path / "rows.uop").write_text("".join(f.text() for f in funcs))
  build(tmp_path / "rows.uop", BuildOptions(target="cuda", out_dir=tmp_path, emit=("ptx",)))
  ptx = (tmp_path / "rows.ptx").read_text()
  assert ptx.count("ld.global.v4.f32") >= 3 and "bar.sync" in ptx
  ptxas_accepts(ptx, arch, tmp_path)


def test_a_padded_output_loop_stays_parallel_through_its_gate():
  """out[g * 1021 + 4 * L + u] with L < 256, u < 4 (1024 positions) is written only where 4 * L + u <
  1021: one to one there (so the loop may be split into threads), not with a looser gate or none."""
  def rng(n, i): return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (i, AxisType.LOOP))
  def c(v): return UOp.const(dtypes.index, v)
  g, loop, u = rng(8, 0), rng(256, 1), rng(4, 2)
  inner = loop.alu(Ops.MUL, c(4)).alu(Ops.ADD, u)
  address = g.alu(Ops.MUL, c(1021)).alu(Ops.ADD, inner)
  def gate(n): return (UOp(Ops.CMPLT, dtypes.bool, (inner, c(n))),)
  assert all(injective_in(address, r, gate(1021)) for r in (g, loop, u))
  assert not any(injective_in(address, r, gate(1022)) for r in (g, loop, u))
  assert not injective_in(address, g) and not injective_in(address, loop)
  assert injective_in(inner, u) and injective_in(inner, loop)


# ---- short rows and window sums (uopc.stages.gpu_schedule) ------------------------------------------------


def test_few_short_rows_are_shared_by_threads_of_one_16_byte_run_each():
  """768 rows of 64 (attention's softmax over 64 keys, 12 heads x 64 queries): 16 threads per row, 8
  rows a workgroup (was one thread per row, 768 threads); 16384 rows keep a thread per row."""
  assert optimized(row_reduce(768, 64, "MAX")) == [("g96 l8 G16 r4", "SPLIT(1,16,G,top),SPLIT(0,8,l),SPLIT(3,4,r)")]
  assert optimized(row_reduce(16384, 64, "MAX")) == [("g1024 l16 R16 r4", "SPLIT(0,16,l),SPLIT(2,4,r)")]


@pytest.mark.parametrize("target", ["cuda", "amd", "metal"])
def test_short_rows_match_numpy(tmp_path, target):
  x = np.random.default_rng(11).standard_normal((96, 64)).astype(np.float32)
  np.testing.assert_allclose(emulated(row_reduce(96, 64, "ADD"), tmp_path, {"x": x}, target), x.astype(np.float64).sum(1, keepdims=True),
                             rtol=1e-5, atol=1e-5)
  x[5] = -np.inf
  np.testing.assert_array_equal(emulated(row_reduce(96, 64, "MAX"), tmp_path, {"x": x}, target), x.max(1, keepdims=True))


def _exported(name: str, fn, rows: int, n: int) -> Func:
  """`fn` of a rows x n tensor written with tinygrad's methods, exported."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  f = Func(name)
  f.text = lambda: uopc.export(fn, tinygrad.Tensor.empty(rows, n), name=name)  # type: ignore[method-assign]
  return f


def _cumsum(rows: int, n: int) -> Func:
  """tinygrad's cumsum, exported: a window sum over blocks of 256 of the padded row, then the blocks' offsets."""
  return _exported("cumsum", lambda x: x.cumsum(-1), rows, n)


def test_a_window_sum_over_a_padded_row_takes_a_thread_per_output():
  """tinygrad's cumsum of 64 x 1000: each output's 256-wide window is gated lane by lane, so a 4-wide
  tile along the row saves no load; threads along the row instead, 128 of them, each taking 2 rows (the
  gate depends on the position in the row only: computed once for both) and 16 window elements at once."""
  kernels = optimized(_cumsum(64, 1000))
  assert kernels[0][0] == "g32 u2 g4 g2 l128 R16 r16"
  # the blocks' offsets read the row only in blocks of 256 ((i + 24) // 256: `_block_reads`): 2 consecutive outputs of
  # a row a thread share those loads (H200: 0.0148 -> 0.0133 ms for the cumsum, against 2 rows a thread)
  assert kernels[1][0] == "g16 l4 g50 l10 u2 r4"


@pytest.mark.parametrize("target", ["cuda", "metal"])
def test_cumsum_matches_numpy(tmp_path, target):
  x = np.random.default_rng(12).standard_normal((4, 600)).astype(np.float32)
  np.testing.assert_allclose(emulated(_cumsum(4, 600), tmp_path, {"x": x}, target), np.cumsum(x.astype(np.float64), 1), rtol=1e-4, atol=1e-4)


def test_short_rows_of_a_fused_softmax_get_a_warp_each():
  """A softmax over rows of 128 (attention's, 128 tokens): too short for GROUP_MIN, and its output loop beside
  the reductions keeps the register tiles off; a warp per row (4 elements a thread), not one thread per row
  alone in a workgroup of one."""
  assert optimized(softmax(128, 128)) == [("g128 l32 u4 G32 r4 G32 r4",
                                           "SPLIT(3,4,r),SPLIT(3,32,G),SPLIT(2,4,r),SPLIT(2,32,G),SPLIT(1,4,u),SPLIT(1,32,l)")]
  assert optimized(softmax(16, 64))[0][0] == "g16 L2 l32 R2 G32 R2 G32"  # 64: 2 elements a thread
  assert optimized(softmax(16, 32))[0][1] == "(none)"  # a warp would leave each thread one element


def causal_softmax(n: int) -> str:
  """tinygrad's x.masked_fill(~causal, -inf).softmax(-1) as uopc.export writes it: the mask compares two
  aranges, each a count of ones in a window cut from a padded, tiled row (a REDUCE that Rangeify collapses)."""
  return f"""func masked {{
  %out = PARAM([{n}, {n}]) {{(1, "out")}} : f32
  %0 = CONST {{1}}
  %1 = RESHAPE(%0, [1])
  %4 = EXPAND(%1, [{n}])
  %5 = PAD(%4, [{n - 1}], [{2 * n - 1}])
  %8 = RESHAPE(%5, [1, {2 * n - 1}])
  %9 = EXPAND(%8, [{n + 1}, {2 * n - 1}])
  %10 = RESHAPE(%9, [{(n + 1) * (2 * n - 1)}])
  %11 = SHRINK(%10, [0], [{2 * n * n}])
  %12 = RESHAPE(%11, [{n}, {2 * n}])
  %13 = SHRINK(%12, [0, 0], [{n}, {n}])
  %18 = REDUCE(%13) {{(ADD, (1,))}}
  %19 = RESHAPE(%18, [{n}])
  %20 = CONST {{-1}}
  %21 = ADD(%19, %20)
  %22 = RESHAPE(%21, [{n}, 1])
  %23 = RESHAPE(%21, [1, {n}])
  %24 = CMPLT(%22, %23)
  %25 = CONST {{True}}
  %26 = CMPNE(%24, %25)
  %x = PARAM([{n}, {n}]) {{(0, "x")}} : f32
  %27 = CONST {{-inf}}
  %28 = WHERE(%26, %x, %27)
  %30 = REDUCE(%28) {{(MAX, (1,))}}
  %32 = RESHAPE(%30, [{n}, 1])
  %33 = CONST {{-1.0}}
  %34 = MUL(%32, %33)
  %35 = ADD(%28, %34)
  %36 = CONST {{1.4426950408889634}}
  %37 = MUL(%35, %36)
  %38 = EXP2(%37)
  %40 = REDUCE(%38) {{(ADD, (1,))}}
  %42 = RESHAPE(%40, [{n}, 1])
  %43 = RECIP(%42)
  %44 = MUL(%38, %43)
  %45 = STORE(%out, %44)
  SINK(%45)
}}
"""


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_a_causal_softmax_is_one_kernel_as_its_mask_folds(tmp_path, target):
  """The mask's aranges collapse to index expressions: no loop of their own beside the row's reductions
  (fusion_checks.check_beside realized the max and the sum in two kernels of their own when it counted
  them: three launches for a 128 x 128 softmax)."""
  text = causal_softmax(64)
  out = io.StringIO()
  compile_module(parse_source(text, "t.uop"), target, "t", PrintOptions(after=frozenset({"optimize"}), out=out))
  assert out.getvalue().count("# opts: ") == 1
  (tmp_path / "masked.uop").write_text(text)
  x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
  want = np_softmax(np.where(np.tril(np.ones((64, 64), bool)), x.astype(np.float64), -np.inf))
  got = run_file(tmp_path / "masked.uop", target=target, inputs={"x": x}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)


def test_a_gather_read_contiguously_along_an_output_axis_is_no_row():
  """An embedding's gradient (tinygrad: a one-hot sum over the 512 looked-up rows for each of 1000 x 64 outputs)
  reads table[idx[n]] * 64 + d: its reduction over n is not a row a workgroup shares (one per output: 64000
  workgroups of 128 threads took 7x tinygrad's time on an H200) but a tiled reduction, the d axis its contiguous
  one; in the emulator it computes the scatter-add numpy computes."""
  tinygrad = pytest.importorskip("tinygrad")
  import uopc
  def emb_grad(idx, table): return table[idx].square().sum().gradient(table)[0]
  text = uopc.export(emb_grad, tinygrad.Tensor.empty(32, 16, dtype=tinygrad.dtypes.int32), tinygrad.Tensor.empty(1000, 64), name="e")
  (schedule,) = optimized_text(text)
  assert "G128" not in schedule[0] and "u4" in schedule[0], schedule


def _t5_bias_softmax(x, table):
  """T5's relative-position bias (bidirectional buckets from |k - q| of aranges, a log for the far ones) added to
  attention scores, then their softmax over k: the bias is a gather table[bucket(q, k)] * heads + h."""
  import math
  from tinygrad import Tensor, dtypes
  h, q, k = x.shape
  rel = Tensor.arange(k)[None, :] - Tensor.arange(q)[:, None]
  n = rel.abs()
  large = (8 + ((n.maximum(1).float() / 8).log() / math.log(16) * 8).cast(dtypes.int32)).minimum(15)
  bucket = (rel > 0).cast(dtypes.int32) * 16 + (n < 8).where(n, large)
  return (x + table[bucket].permute(2, 0, 1)).softmax(-1)


def test_a_gather_along_fewer_outputs_than_a_warp_is_still_a_row(tmp_path):
  """T5's bias reads table[bucket(q, k)] * 8 + h: h is contiguous in it, but 8 heads are no coalesced warp, so the
  softmax rows over k still get their warp (one thread per (h, q) walked its row alone: 11x tinygrad's time on
  an H100); in the emulator it computes what tinygrad computes."""
  tinygrad = pytest.importorskip("tinygrad")
  import uopc
  text = uopc.export(_t5_bias_softmax, tinygrad.Tensor.empty(8, 128, 128), tinygrad.Tensor.empty(32, 8), name="t5")
  (schedule,) = optimized_text(text)
  assert ",32,G)" in schedule[1], schedule
  (tmp_path / "t5.uop").write_text(uopc.export(_t5_bias_softmax, tinygrad.Tensor.empty(4, 16, 64), tinygrad.Tensor.empty(32, 4), name="t5"))
  rng = np.random.default_rng(2)
  x, table = rng.standard_normal((4, 16, 64)).astype(np.float32), rng.standard_normal((32, 4)).astype(np.float32)
  got = run_file(tmp_path / "t5.uop", target="cuda", inputs={"x": x, "table": table}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, _t5_bias_softmax(tinygrad.Tensor(x), tinygrad.Tensor(table)).numpy(), rtol=1e-5, atol=1e-6)


def test_an_embedding_gradient_matches_numpy_in_the_emulator(tmp_path):
  tinygrad = pytest.importorskip("tinygrad")
  import uopc
  def emb_grad(idx, table): return table[idx].square().sum().gradient(table)[0]
  (tmp_path / "e.uop").write_text(uopc.export(emb_grad, tinygrad.Tensor.empty(4, 6, dtype=tinygrad.dtypes.int32),
                                              tinygrad.Tensor.empty(50, 8), name="e"))
  rng = np.random.default_rng(1)
  idx, table = rng.integers(0, 50, (4, 6)).astype(np.int32), rng.standard_normal((50, 8)).astype(np.float32)
  want = np.zeros_like(table)
  np.add.at(want, idx.ravel(), 2 * table[idx.ravel()])
  got = run_file(tmp_path / "e.uop", target="cuda", inputs={"idx": idx, "table": table}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, want, rtol=1e-6)


def _einsum3(i: int, j: int, k: int, l: int) -> str:  # noqa: E741
  from test_contraction import einsum3  # tinygrad's export of einsum("ij,jk,kl->il")
  return einsum3(i, j, k, l)


def test_a_reduction_over_two_axes_reading_along_the_output_rows_is_tiled_not_a_row(monkeypatch):
  """tinygrad's einsum("ij,jk,kl->il"): one reduction over j and k of a[i, j] * w1[j, k] * w2[k, l]. j alone
  reads no output axis contiguously, but k reads w2 along l: a gemm, register tiles over (i, l) (one output a
  thread with j shared as a row's reduction took 4.77 ms on an H100 at 128 x 256 x 256 x 128, tinygrad 0.076).
  The contraction order (uopc.stages.contraction) makes this einsum two matrix products; it is turned off here
  to schedule the two-axis reduction as written, as one the contraction leaves alone would be."""
  import uopc.stages.rangeify as rangeify
  monkeypatch.setattr(rangeify, "contraction_order", lambda sink, **_: sink)
  [(axes, opts)] = optimized_text(_einsum3(128, 256, 256, 128))
  assert opts.count(",u)") == 2 and not any(a.startswith("G") for a in axes.split()[:1]), (axes, opts)


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_the_three_operand_einsum_matches_numpy(tmp_path, target):
  rng = np.random.default_rng(4)
  a, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((32, 64), (64, 32), (32, 16)))
  (tmp_path / "e.uop").write_text(_einsum3(32, 64, 32, 16))
  got = run_file(tmp_path / "e.uop", target=target, inputs={"a": a, "w1": w1, "w2": w2}, emulated=True).arrays["out"]
  want = np.einsum("ij,jk,kl->il", a.astype(np.float64), w1.astype(np.float64), w2.astype(np.float64))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def _logcumsumexp(rows: int, n: int) -> Func: return _exported("lcse", lambda x: x.logcumsumexp(-1), rows, n)


def test_a_reduction_beside_the_rows_is_shared_by_its_threads_too():
  """tinygrad's logcumsumexp: a window max (read along the output's positions: no row axis by itself) beside the
  row's sum of exponentials. Both are shared by the row's threads; the max was run whole by each of its 64 threads
  (H100, 32 x 256: 0.104 ms, tinygrad's kernels 0.027)."""
  [(axes, _)] = optimized(_logcumsumexp(32, 256))
  assert axes.split().count("G64") == 2, axes


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_the_shared_logcumsumexp_matches_numpy(tmp_path, target):
  x = np.random.default_rng(1).standard_normal((2, 256)).astype(np.float32)
  want = np.logaddexp.accumulate(x.astype(np.float64), axis=1)
  np.testing.assert_allclose(emulated(_logcumsumexp(2, 256), tmp_path, {"x": x}, target), want, rtol=1e-5, atol=1e-5)


def _conv1d_stride2(c: int, n: int) -> Func:
  """A wav2vec feature encoder's layer: a 1-D convolution of c -> c channels, kernel 3, stride 2, padding 1."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  f = Func("conv1d")
  f.text = lambda: uopc.export(lambda x, w: x.conv2d(w, stride=2, padding=1), tinygrad.Tensor.empty(1, c, n),  # type: ignore[method-assign]
                               tinygrad.Tensor.empty(c, c, 3), name="conv1d")
  return f


def test_a_strided_convolution_is_tiled_not_a_row():
  """x[c, 2t + k] moves by 2 along the output samples t, w[o, c, k] not at all: a gemm over (o, t) whose operands
  serve a register tile, not a row reduction over its 768-long (c, k) with a workgroup per output (H100, 256
  channels over 4000 samples: 2.01 -> 0.198 ms; tinygrad's kernel 0.43)."""
  [(axes, opts)] = optimized(_conv1d_stride2(256, 4000))
  assert opts.count(",u)") == 2 and axes.split()[0].startswith("g"), (axes, opts)


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_the_strided_convolution_matches_numpy(tmp_path, target):
  rng = np.random.default_rng(6)
  x, w = rng.standard_normal((1, 256, 64)).astype(np.float32), (rng.standard_normal((256, 256, 3)) / 28).astype(np.float32)
  got = emulated(_conv1d_stride2(256, 64), tmp_path, {"x": x, "w": w}, target)
  xp = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1)))
  want = np.stack([np.einsum("ock,ck->o", w.astype(np.float64), xp[:, 2 * t:2 * t + 3]) for t in range(32)], 1)[None]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _conv_transpose1d(c: int, o: int, n: int) -> Func:
  """A vocoder's upsampling layer: a 1-D transposed convolution of c -> o channels, kernel 4, stride 2, padding 1."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  f = Func("deconv")
  fn = lambda x, w: x.unsqueeze(2).conv_transpose2d(w.unsqueeze(2), stride=(1, 2), padding=(0, 1)).squeeze(2)  # noqa: E731
  f.text = lambda: uopc.export(fn, tinygrad.Tensor.empty(1, c, n), tinygrad.Tensor.empty(c, o, 4), name="deconv")  # type: ignore[method-assign]
  return f


def test_a_transposed_convolution_is_tiled_not_a_row():
  """Its zero-stuffed input x[c, (t + k - 2) // 2] moves with the output samples t through a quotient by 2 (a warp
  along t reads one line), w[c, o, k] not at all: a gemm over (o, t), not a workgroup per output sharing its 1024
  (c, k) (H200, 256 -> 128 channels over 1000 samples: 1.72 -> 0.12 ms; tinygrad's kernel 0.08-0.09)."""
  [(axes, opts)] = optimized(_conv_transpose1d(256, 128, 1000))
  assert opts.count(",u)") == 2 and axes.split()[0].startswith("g"), (axes, opts)


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_the_transposed_convolution_matches_tinygrad(tmp_path, target, monkeypatch):
  import uopc.stages.gpu_schedule as gs
  from tinygrad import Tensor
  monkeypatch.setattr(gs, "GPU_MIN_THREADS", 64)  # the real shape's tile on a small one
  rng = np.random.default_rng(8)
  x, w = rng.standard_normal((1, 16, 40)).astype(np.float32), (rng.standard_normal((16, 8, 4)) / 8).astype(np.float32)
  want = Tensor(x).unsqueeze(2).conv_transpose2d(Tensor(w).unsqueeze(2), stride=(1, 2), padding=(0, 1)).squeeze(2).numpy()
  np.testing.assert_allclose(emulated(_conv_transpose1d(16, 8, 40), tmp_path, {"x": x, "w": w}, target), want, rtol=1e-4, atol=1e-5)


def test_a_product_with_a_transposed_weight_is_tiled_not_a_row():
  """tinygrad's nn.Linear: x.linear(weight.T) reads x[m, k] and weight[n, k], both along k, so no output axis reads
  a load contiguously; but each operand serves the output axis it does not depend on: a gemm, register tiles
  over (m, n), not a workgroup per output sharing k (H100, 64 x 512 @ (1024 x 512).T: 0.051 -> 0.017 ms, tinygrad
  0.052). Rows whose loads all move with every output axis stay rows (layernorm, softmax: the tests above)."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  text = uopc.export(lambda x, w: x.linear(w.T), tinygrad.Tensor.empty(64, 512), tinygrad.Tensor.empty(1024, 512), name="lin")
  [(axes, opts)] = optimized_text(text)
  assert opts.count(",u)") == 2 and axes.split()[0].startswith("g"), (axes, opts)


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_the_transposed_weight_product_matches_numpy(tmp_path, target):
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  rng = np.random.default_rng(8)
  x, w = rng.standard_normal((32, 256)).astype(np.float32), (rng.standard_normal((64, 256)) / 16).astype(np.float32)
  (tmp_path / "lin.uop").write_text(uopc.export(lambda x, w: x.linear(w.T), tinygrad.Tensor.empty(32, 256), tinygrad.Tensor.empty(64, 256),
                                                name="lin"))
  got = run_file(tmp_path / "lin.uop", target=target, inputs={"x": x, "w": w}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-4)
