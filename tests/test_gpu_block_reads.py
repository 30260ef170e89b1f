"""GPU register tiles where an output axis moves a load only in blocks, or moves the loads the contiguous axis moves too
(uopc.stages.gpu_schedule `_reuse_axis`, `_block_reads`, GPU_ODD_UNROLLS; uopc.stages.expand `block_quotient`), from
two real-model programs: a convolution over a reflect-padded (realized) image and a Swin window attention, whose
relative-position bias is gathered per head. Schedules as Optimize prints them, the PTX that the lanes of a head
share one softmax weight, and the emulated -t cuda kernels against tinygrad."""
from __future__ import annotations

import re

import numpy as np
import pytest

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor  # noqa: E402

import uopc  # noqa: E402
from test_cuda_ptx import needs_ptxas  # noqa: E402
from test_gpu_schedule import schedule  # noqa: E402
from test_tensor_programs import Func  # noqa: E402
from uopc.driver import BuildOptions, build  # noqa: E402
from uopc.run import run_file  # noqa: E402


def reflect_conv(x, w): return x.pad((1, 1, 1, 1), mode="reflect").conv2d(w)


def window_attention(x, w_qkv, table, rel_idx, heads: int = 3, win: int = 7):
  b, hh, ww, c = x.shape
  n = win * win
  xw = x.reshape(b, hh // win, win, ww // win, win, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
  q, k, v = (xw @ w_qkv).reshape(-1, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
  bias = table[rel_idx.reshape(-1)].reshape(n, n, heads).permute(2, 0, 1)
  att = ((q @ k.transpose(-1, -2)) * (c // heads) ** -0.5 + bias).softmax(-1)
  o = (att @ v).transpose(1, 2).reshape(-1, n, c)
  return o.reshape(b, hh // win, ww // win, win, win, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hh, ww, c)


def _func(name: str, fn, *examples) -> Func:
  f = Func(name)
  f.text = lambda: uopc.export(fn, *examples, name=name)  # type: ignore[method-assign]
  return f


def _swin(side: int = 28, channels: int = 96) -> Func:
  return _func("swin", window_attention, Tensor.empty(1, side, side, channels), Tensor.empty(channels, 3 * channels),
               Tensor.empty(169, 3), Tensor.empty(49, 49, dtype=tinygrad.dtypes.int32))


def test_a_convolution_over_a_padded_image_tiles_its_output_channels_not_its_rows():
  """The image's rows move the input with its columns (the contiguous axis), the output channels only the weights,
  which the columns do not move: 8 channels by 8 columns load 16 values a window tap, 8 rows by 8 columns loaded 64
  (H200: 0.090 -> 0.018 ms for 1x32x64x64 -> 32)."""
  pad, conv = schedule(_func("rc", reflect_conv, Tensor.empty(1, 32, 64, 64), Tensor.empty(32, 32, 3, 3)))
  assert conv.startswith("g2 l2 u8 g64 l8 u8"), conv  # channels u8 (first axis), columns u8, rows threads only
  assert "r3" in conv  # the window unrolled


def test_a_window_attentions_channels_share_their_heads_softmax_weight():
  """The output is stored un-windowed with the heads' channels merged (96 = 3 x 32): each load of the bias and of the
  row statistics reads the channel axis as channel // 32, so 4 upcast channels of a head share them (`_block_reads`)
  where it was one output a thread; the 49 keys of each row reduction are unrolled by 7."""
  axes = schedule(_swin())
  assert all("r7" in a for a in axes[2:]), axes  # max, sum and the weighted sum over the 49 keys
  assert axes[4].split()[-3] == "u4", axes[4]


@needs_ptxas
def test_the_lanes_of_a_head_compute_one_exponential(tmp_path):
  """Expand (`block_quotient`): (l*4 + u) // 32 is l // 8, so the bias load, the exponential and the scaling by the
  row's sum are scalars under the 4 lanes: one ex2 per unrolled key, not one per lane."""
  f = _swin()
  (tmp_path / "swin.uop").write_text(f.text())
  build(tmp_path / "swin.uop", BuildOptions("cuda", tmp_path / "out", emit=("ptx",)))
  ptx = (tmp_path / "out" / "swin.ptx").read_text()
  last = re.split(r"\.entry ", ptx)[-1]
  assert last.startswith("swin__swin_k4") and last.count("ex2.approx") == 7, last.count("ex2.approx")


@pytest.mark.parametrize("name", ["reflect_conv", "window_attention"])
def test_the_new_tiles_compute_what_tinygrad_does_in_the_emulator(name, tmp_path, monkeypatch):
  import uopc.stages.gpu_schedule as gs
  monkeypatch.setattr(gs, "GPU_MIN_THREADS", 64)  # the tiles of the real shapes on these small ones
  rng = np.random.default_rng(5)
  if name == "reflect_conv":
    fn, arrays = reflect_conv, [rng.standard_normal((1, 4, 9, 8)).astype(np.float32), rng.standard_normal((8, 4, 3, 3)).astype(np.float32)]
  else:
    fn = window_attention
    arrays = [rng.standard_normal((1, 14, 14, 96)).astype(np.float32), (rng.standard_normal((96, 288)) / 10).astype(np.float32),
              rng.standard_normal((169, 3)).astype(np.float32), rng.integers(0, 169, (49, 49)).astype(np.int32)]
  path = tmp_path / f"{name}.uop"
  path.write_text(uopc.export(fn, *[Tensor.empty(*a.shape, dtype=tinygrad.dtypes.int32 if a.dtype == np.int32 else tinygrad.dtypes.float32)
                                    for a in arrays], name=name))
  want = fn(*[Tensor(a) for a in arrays]).numpy()
  names = [p.name for p in __import__("inspect").signature(fn).parameters.values()][:len(arrays)]
  got = run_file(path, target="cuda", inputs=dict(zip(names, arrays)), emulated=True).arrays["out"]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
