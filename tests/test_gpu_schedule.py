"""GPU schedules of reductions over output axes (uopc.stages.gpu_schedule): which opts the heuristics
pick (register tiles, unrolls, multi-axis workgroups, shared reductions for small kernels), that the
kernels they make compute the same as -t c in the emulator (which also reports races and missing
BARRIERs), with the tiles the heuristics give large kernels forced onto small ones, and that the PTX
keeps a register tile's accumulators in registers and assembles for sm_80 and sm_90."""
from __future__ import annotations

import math
import numpy as np
import pytest

import uopc.stages.gpu_schedule as gs
from test_cuda_ptx import PTXAS, needs_ptxas, ptxas_accepts
from test_optimize import GPU, kernels_of
from test_tensor_programs import Func, attention, conv2d, gemm, mlp
from uopc.driver import BuildOptions, build
from uopc.run import run_file
from uopc.stages.optimize import apply_opts, format_axes, heuristic_opts


def schedule(f: Func) -> list[str]:
  """Each kernel's axes after the heuristics' opts, as --print-after optimize shows them."""
  return [format_axes(apply_opts(k, heuristic_opts(k, GPU), GPU, "k")) for k in kernels_of(f.text(), GPU).values()]


@pytest.fixture
def unstaged(monkeypatch):
  """No staged float32 gemms (uopc.stages.local_staging, which takes gemm 1024 since it fills the SMs): the
  register tiles of this module for every gemm."""
  import uopc.stages.local_staging as ls
  monkeypatch.setattr(ls, "STAGED_TILES", ())


def test_a_large_gemm_gets_a_register_tile_a_two_axis_workgroup_and_an_unrolled_reduction(unstaged):
  # rows u8 (a's values serve 8 columns), columns u8 (two 16-byte loads of b and stores of c), 4 x 16 threads
  assert schedule(gemm(1024, 1024, 1024)) == ["g32 l4 u8 g8 l16 u8 R256 r4"]


def test_a_convolution_unrolls_its_window_and_tiles_its_output_channels_not_its_padded_rows():
  # 64 x 28 x 28 outputs over a 4 x 8 tile leave 1568 threads: enough for a tile along both axes of 32
  # accumulators (GPU_SMALL_TILE_THREADS), with 8 threads sharing each reduction
  assert schedule(conv2d(64, 28, 28, 64, 3, 3, 1)) == ["g4 l2 u8 g28 l7 u4 r9 G8 R2 r4"]


def test_a_small_kernel_keeps_the_gpu_busy_before_it_tiles():
  # 64 x 64 outputs: 2 per thread, 32 threads sharing each reduction of 1024 as its inner part (a is
  # read along k: the group's threads read 32 consecutive elements each iteration), unrolled by 4
  assert schedule(gemm(64, 1024, 64)) == ["g64 g8 l4 u2 R8 r4 G32"]


def test_a_shared_reduction_is_blocked_where_no_input_reads_along_it_or_the_tile_is_large(unstaged):
  # a^T @ b: neither input is contiguous along k, so each of 8 threads sums its own run (top, unrolled)
  f = Func("gemm_tn")
  a, b = f.param("a", (1024, 64)), f.param("b", (1024, 64))
  out = f.param("out", (64, 64), out=True)
  f.store(out, f.matmul(f.permute(a, (1, 0)), b, 64, 1024, 64))
  [axes] = schedule(f)
  assert "G" in axes and axes.index("G") < axes.index("R") and axes.endswith("r4")
  # an 8 x 8 tile (64 accumulators) keeps the blocked split: the coalesced one's partials cost more
  [axes] = schedule(gemm(64, 768, 3072))
  assert "u8" in axes and axes.index("G") < axes.index("R")


def test_sibling_reductions_share_threads_and_keep_the_tile_within_the_accumulator_budget():
  f = Func("swiglu")
  x, a, b = f.param("x", (32, 256)), f.param("a", (256, 512)), f.param("b", (256, 512))
  out = f.param("out", (32, 512), out=True)
  f.store(out, f.op("MUL", f.matmul(x, a, 32, 256, 512), f.matmul(x, b, 32, 256, 512)))
  [axes] = schedule(f)
  assert axes.count("G") in (0, 2)  # both reductions or neither
  assert "u8" not in axes           # 2 accumulators per tile element: at most 4 x 4


def emulated_matches_c(f: Func, tmp_path, monkeypatch, out: str = "out") -> None:
  """f's kernels with big tiles forced onto small shapes (the thread floors lowered), emulated as -t cuda
  lowers them (with the IR's two roundings, as -t c computes), against the -t c build on the same inputs."""
  monkeypatch.setattr(gs, "GPU_MIN_THREADS", 64)
  monkeypatch.setattr(gs, "GPU_TILE_THREADS", 16)
  path = tmp_path / f"{f.name}.uop"
  path.write_text(f.text())
  want = run_file(path, target="c", seed=1).arrays
  got = run_file(path, target="cuda", inputs={k: v for k, v in want.items() if k != out}, emulated=True, fp_contract=False).arrays[out]
  np.testing.assert_allclose(got, want[out], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("f, out", [(gemm(32, 64, 64), "c"), (conv2d(8, 12, 12, 16, 3, 3, 1), "out"), (mlp(8, 64, 128, 16), "out"),
                                    (attention(16, 32, 8), "out")], ids=["gemm", "conv", "mlp", "attention"])
def test_tiled_kernels_compute_what_the_c_target_does_in_the_emulator(f, out, tmp_path, monkeypatch):
  emulated_matches_c(f, tmp_path, monkeypatch, out)


def test_shared_reductions_beside_other_workgroup_axes_combine_each_threads_own_partials(tmp_path, monkeypatch):
  """GROUP_REDUCE threads with LOCAL threads along the outputs: each output's partials in their own row
  of the LOCAL buffer (the emulator reports two threads writing one element as a missing BARRIER)."""
  monkeypatch.setattr(gs, "GPU_MIN_THREADS", 1 << 14)
  monkeypatch.setattr(gs, "GPU_TILE_THREADS", 1 << 12)
  f = gemm(16, 512, 32)
  assert "G" in schedule(f)[0] and "l" in schedule(f)[0]
  path = tmp_path / "gemm.uop"
  path.write_text(f.text())
  want = run_file(path, target="c", seed=2).arrays
  got = run_file(path, target="cuda", inputs={k: v for k, v in want.items() if k != "c"}, emulated=True).arrays["c"]
  np.testing.assert_allclose(got, want["c"], rtol=1e-5, atol=1e-5)


@needs_ptxas
def test_a_register_tile_stays_in_registers_and_assembles(tmp_path, unstaged):
  path = tmp_path / "gemm.uop"
  path.write_text(gemm(1024, 1024, 1024).text())
  build(path, BuildOptions(target="cuda", out_dir=tmp_path, emit=("ptx",)))
  ptx = (tmp_path / "gemm.ptx").read_text()
  assert ".local" not in ptx and "ld.global.v4.f32" in ptx  # 32 accumulators as registers; b read 16 bytes at a time
  for arch in ("sm_80", "sm_90"): ptxas_accepts(ptx, arch, tmp_path)
  assert PTXAS is not None


def test_a_coalesced_shared_reduction_computes_what_c_does(tmp_path):
  # the heuristics' own schedule (no thresholds changed): 16 threads share each sum as the inner part, each
  # keeping 32 steps (as many as threads share them; 32 threads would keep 16)
  f = gemm(64, 512, 64)
  assert schedule(f)[0] == "g64 g4 l8 u2 R8 r4 G16"
  path = tmp_path / "gemm.uop"
  path.write_text(f.text())
  want = run_file(path, target="c", seed=3).arrays
  got = run_file(path, target="cuda", inputs={k: v for k, v in want.items() if k != "c"}, emulated=True).arrays["c"]
  np.testing.assert_allclose(got, want["c"], rtol=1e-5, atol=1e-4)


def test_a_batched_convolution_unrolls_only_what_its_registers_hold():
  """tinygrad's conv2d of 32 x 64 x 56 x 56 to 64 channels: 6.4M outputs take the 16 x 8 tile (16 output
  channels by 8 columns, 128 accumulators), which loads 24 values a copy of the body, so one axis of the
  3 x 3 window is unrolled (72 values), not the whole window and 4 channels as an 8 x 8 tile once did (576:
  ptxas spilled 1.4 KiB a thread; on an H100 2.06 ms, then 8 x 8 within the budget 0.66 ms, this 0.60 ms)."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  t = tinygrad.Tensor
  f = Func("conv")
  f.text = lambda: uopc.export(lambda x, w, b: x.conv2d(w, b, padding=1), t.empty(32, 64, 56, 56), t.empty(64, 64, 3, 3), t.empty(64),  # type: ignore[method-assign]
                               name="conv")
  [axes] = schedule(f)
  assert axes.endswith("R64 R3 r3") and "u16" in axes and "u8" in axes


def _tinygrad_conv(n: int, c: int, hw: int, o: int) -> Func:
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  t = tinygrad.Tensor
  f = Func("conv")
  f.text = lambda: uopc.export(lambda x, w, b: x.conv2d(w, b, padding=1), t.empty(n, c, hw, hw), t.empty(o, c, 3, 3), t.empty(o),  # type: ignore[method-assign]
                               name="conv")
  return f


def test_a_batch_of_small_images_tiles_its_images_and_output_channels():
  """8 x 512 x 7 x 7 (ResNet's last stage, batch 8): no tile divides the 7 columns, so the tile's first axis is the
  batch (the weights serve every image) by 8 output channels, the columns threads; batches of one and of four keep
  one output a thread."""
  [axes] = schedule(_tinygrad_conv(8, 512, 7, 512))
  assert axes.startswith("u8 g64 u8 g7 l7") and "G" in axes
  assert schedule(_tinygrad_conv(1, 512, 7, 512)) == ["g64 l8 g7 l7 R128 r4 r3 r3"]
  assert schedule(_tinygrad_conv(4, 512, 7, 512)) == ["g4 g32 l16 g7 l7 R128 r4 r3 r3"]


def test_a_batch_of_small_images_computes_what_the_c_target_does_in_the_emulator(tmp_path, monkeypatch):
  f = _tinygrad_conv(8, 8, 7, 16)
  emulated_matches_c(f, tmp_path, monkeypatch)
  assert schedule(f)[0].startswith("u8 l2 u8 g7 l7")  # with the floors emulated_matches_c lowers: the images' tile


def column_sums(rows: int, cols: int) -> Func:
  f = Func("colsum")
  x, out = f.param("x", (rows, cols)), f.param("out", (1, cols), out=True)
  f.store(out, f.reduce(x, "ADD", (0,)))
  return f


def test_few_columns_of_long_columns_take_up_to_64_threads_each():
  """256 column sums of 4096 rows: 16 threads a column would leave 4096 threads (a quarter of GPU_MIN_THREADS):
  64 (GPU_WIDE_GROUPS); 768 columns keep 16 (12288 threads, more than half: a matrix-vector product's shape,
  which ran slower with 32)."""
  [axes] = schedule(column_sums(4096, 256))
  assert "G64" in axes
  [axes] = schedule(column_sums(3072, 768))
  assert "G16" in axes


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_wide_shared_column_sums_compute_what_numpy_does(tmp_path, target):
  x = np.random.default_rng(5).standard_normal((4096, 64)).astype(np.float32)
  (tmp_path / "colsum.uop").write_text(column_sums(4096, 64).text())
  got = run_file(tmp_path / "colsum.uop", target=target, inputs={"x": x}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, x.astype(np.float64).sum(0, keepdims=True), rtol=1e-4, atol=1e-3)


def _patchify(n: int, c: int, hw: int, o: int, k: int) -> Func:
  """tinygrad's conv2d with stride = kernel size: a ViT's patch embedding."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  t = tinygrad.Tensor
  f = Func("patch")
  f.text = lambda: uopc.export(lambda x, w: x.conv2d(w, stride=k), t.empty(n, c, hw, hw), t.empty(o, c, k, k), name="patch")  # type: ignore[method-assign]
  return f


def _scores(h: int, n: int, d: int) -> Func:
  """Attention's scores q @ k^T: out[h, i, j] = sum over d of q[h, i, d] * k[h, j, d] (k read along d)."""
  f = Func("scores")
  q, k = f.param("q", (h, n, d)), f.param("k", (h, n, d))
  out = f.param("out", (h, n, n), out=True)
  prod = f.op("MUL", f.expand(f.reshape(q, (h, n, 1, d)), (h, n, n, d)), f.expand(f.reshape(k, (h, 1, n, d)), (h, n, n, d)))
  f.store(out, f.reshape(f.reduce(prod, "ADD", (3,)), (h, n, n)))
  return f


def test_inputs_read_strided_along_the_outputs_share_the_reduction_along_their_rows():
  """A ViT patch embedding (x[c, 16 oy + ky, 16 ox + kx] along the patches ox) and attention's scores (k[j, d]
  along the keys j) read a line a thread along their contiguous output axis: the reduction is shared along kx
  and d, where both inputs are contiguous, although the outputs give threads enough (H200: 0.186 -> 0.035-0.040
  ms; GQA's two products 0.034 -> 0.025), and the patches take a 2 x 4 tile (2 patches by 4 channels)."""
  assert schedule(_patchify(1, 3, 224, 768, 16)) == ["g192 u4 g14 l7 u2 r3 R4 r4 G16"]
  assert schedule(_scores(32, 64, 64)) == ["g32 g16 l2 u2 l16 u4 R4 r4 G4"]
  # a 3x3 convolution reads x along its columns contiguously: no sharing, the 2 x 1 tile
  assert "G" not in schedule(_tinygrad_conv(1, 256, 14, 256))[0]


@pytest.mark.parametrize("f", [lambda: _patchify(1, 3, 32, 16, 4), lambda: _scores(4, 16, 32)], ids=["patchify", "scores"])
def test_strided_shared_reductions_compute_what_c_does(f, tmp_path):
  f = f()
  assert "G" in schedule(f)[0]  # the heuristics' own schedule, thresholds as they are
  path = tmp_path / f"{f.name}.uop"
  path.write_text(f.text())
  want = run_file(path, target="c", seed=4).arrays
  got = run_file(path, target="cuda", inputs={k: v for k, v in want.items() if k != "out"}, emulated=True).arrays["out"]
  np.testing.assert_allclose(got, want["out"], rtol=1e-5, atol=1e-5)


def test_a_short_shared_reduction_keeps_half_the_threads_a_large_gpu_needs():
  """LeNet's second convolution (64 x 16 x 8 x 8 outputs of 6 x 5 x 5 products): the reduction's two runs of
  GPU_GROUP_MIN can double the threads at most, so the register tile leaves at least GPU_MIN_THREADS / 4 (a 4 x 8
  tile had left 2048, 4096 shared: 0.069 ms for the whole LeNet on an H200, 0.054 with 4 x 4)."""
  tinygrad = pytest.importorskip("tinygrad")
  import uopc
  from test_gpu_rows import optimized_text
  from uopc.stages.gpu_schedule import GPU_MIN_THREADS
  text = uopc.export(lambda x, w: x.conv2d(w), tinygrad.Tensor.empty(64, 6, 12, 12), tinygrad.Tensor.empty(16, 6, 5, 5), name="c")
  [(axes, _)] = optimized_text(text)
  threads = math.prod(int(t[1:]) for t in axes.split() if t[0] in "glG")
  assert threads >= GPU_MIN_THREADS // 2, axes


def test_a_weight_gradient_shares_its_rows_of_28_among_28_threads(tmp_path):
  """A 3x3 convolution's weight gradient (outputs 64x64x3x3, each a sum over 8 x 28 x 28 positions read along
  their rows): the coalesced split takes a divisor of the 28-wide rows (28 threads), where the powers of two
  gave 4 (48 workgroups of 96 threads: 0.86 ms on an H200, 0.13 with 28). Small, in the emulator: numpy's."""
  tinygrad = pytest.importorskip("tinygrad")
  import uopc
  from test_gpu_rows import optimized_text
  def grad_w(x, w): return x.conv2d(w, padding=1).square().sum().gradient(w)[0]
  text = uopc.export(grad_w, tinygrad.Tensor.empty(8, 64, 28, 28), tinygrad.Tensor.empty(64, 64, 3, 3), name="g")
  axes = [a for a, _ in optimized_text(text)]
  assert "G28" in axes[-1], axes
  small = uopc.export(grad_w, tinygrad.Tensor.empty(1, 2, 28, 28), tinygrad.Tensor.empty(3, 2, 3, 3), name="g")
  (tmp_path / "g.uop").write_text(small)
  rng = np.random.default_rng(5)
  x, w = rng.standard_normal((1, 2, 28, 28)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
  got = run_file(tmp_path / "g.uop", target="cuda", inputs={"x": x, "w": w}, emulated=True).arrays["out"]
  want = grad_w(tinygrad.Tensor(x), tinygrad.Tensor(w)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_an_embedding_gradient_keeps_as_many_steps_a_thread_as_threads_share_them(tmp_path):
  """An embedding's gradient (1000 x 64 outputs, each a one-hot sum over 512 looked-up rows): the coalesced
  split leaves each thread at least as many steps as the group has threads, whose partials it combines: 16
  threads of 32 steps, not 32 of 16 (on an H100 0.023 against 0.039 ms). Small, in the emulator: tinygrad's."""
  tinygrad = pytest.importorskip("tinygrad")
  import uopc
  from test_gpu_rows import optimized_text
  def grad_table(idx, table): return table[idx].square().sum().gradient(table)[0]
  text = uopc.export(grad_table, tinygrad.Tensor.empty(32, 16, dtype=tinygrad.dtypes.int32), tinygrad.Tensor.empty(1000, 64), name="g")
  axes = [a for a, _ in optimized_text(text)]
  assert "G16" in axes[-1] and "R8 r4" in axes[-1], axes
  small = uopc.export(grad_table, tinygrad.Tensor.empty(4, 5, dtype=tinygrad.dtypes.int32), tinygrad.Tensor.empty(10, 8), name="g")
  (tmp_path / "g.uop").write_text(small)
  rng = np.random.default_rng(6)
  idx, table = rng.integers(0, 10, (4, 5)).astype(np.int32), rng.standard_normal((10, 8)).astype(np.float32)
  got = run_file(tmp_path / "g.uop", target="cuda", inputs={"idx": idx, "table": table}, emulated=True).arrays["out"]
  want = grad_table(tinygrad.Tensor(idx), tinygrad.Tensor(table)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
