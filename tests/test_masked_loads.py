"""Masked vector loads on CPUs (`-t c` with AVX2 or AVX-512 vectors): Expand makes a run of lanes whose gate
differs from lane to lane (a padded convolution's border taps) one vector LOAD with a bool vector as its gate,
where that gate does not move with a reduction loop; the C renderer makes it AVX-512's masked load (AVX2's
maskload and a blend), lane by lane where the build lacks them. The CPU heuristics then give a padded
convolution's image columns whole vectors (padded with overlapping tiles or masks). Checked here: the
heuristics' choices, where Expand makes the loads, the results bit for bit against the portable build (every
runnable --cpu level, gcc and clang, the intrinsics' and the lane-by-lane paths, ASan/UBSan) and in the
emulator."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from c_harness import Call, compile_c, have, run_calls
from test_cpu_levels import RUNNABLE, _build, _opts
from test_optimize import LIB, program, random_inputs, run_func
from test_tensor_programs import conv2d, np_conv2d
from uopc.driver import cpu_flags
from uopc.run import run_file

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "models"
# padded 3x3 convolutions whose images are 14, 7, 28, 56 and 12 wide: a vector's worth of columns padded with
# masks, half of one and two rows, overlapping tiles of one and of two vectors, no padding (12: too much waste)
def _conv(c: int, hw: int, o: int):
  f = conv2d(c, hw, hw, o, 3, 3, 1)
  f.name = f"conv{hw}"
  return f


CONVS = [_conv(3, 14, 16), _conv(2, 7, 16), _conv(2, 28, 8), _conv(2, 56, 8), _conv(3, 12, 16)]


def test_image_columns_take_whole_vectors_with_avx512():
  """ResNet's stages on AVX-512: 56 columns in 2 x 16 lanes (overlapping tiles, 64), 28 in 16 (32), 14 padded
  to 16 with masks, 7 to 8 plus two of the (padded) rows; output channels fill the 16 registers."""
  assert _opts(conv2d(64, 56, 56, 64, 3, 3, 1), 64) == ["PADTO(2,32,32),SPLIT(2,32,u),SPLIT(0,8,u),SPLIT(5,9,r),SPLIT(0,8,t,top)"]
  assert _opts(conv2d(128, 28, 28, 128, 3, 3, 1), 64) == ["PADTO(2,16,16),SPLIT(2,16,u),SPLIT(0,16,u),SPLIT(5,9,r),SPLIT(0,8,t,top)"]
  assert _opts(conv2d(256, 14, 14, 256, 3, 3, 1), 64) == ["PADTO(2,16),SPLIT(2,16,u),SPLIT(0,16,u),SPLIT(4,9,r),SPLIT(0,16,t,top)"]
  assert _opts(conv2d(512, 7, 7, 512, 3, 3, 1), 64) == [
    "PADTO(2,8),SPLIT(2,8,u),PADTO(1,8),SPLIT(1,2,u),SPLIT(0,16,u),SPLIT(5,9,r),SPLIT(0,32,t,top)"]


def test_avx2_takes_one_register_of_lanes_and_sse_loads_lane_by_lane():
  assert _opts(conv2d(128, 28, 28, 128, 3, 3, 1), 32) == ["PADTO(2,32,8),SPLIT(2,8,u),SPLIT(0,16,u),SPLIT(5,9,r),SPLIT(0,8,t,top)"]
  assert _opts(conv2d(64, 56, 56, 64, 3, 3, 1), 16) == ["SPLIT(2,8,u),SPLIT(0,8,u),SPLIT(5,9,r),SPLIT(0,8,t,top)"]  # as before


def test_a_window_of_two_axes_is_unrolled_whole():
  """tinygrad's conv2d (a window of 3 x 3 positions as two REDUCE axes, no STACK): both unrolled, so that the
  gates of the masked loads are computed once per tile, outside the loop over input channels."""
  text = (SAMPLES / "conv3x3.uop").read_text()
  from uopc.stages.optimize import heuristic_opts, target_caps
  from test_optimize import kernels_of
  caps = target_caps("c", 64)
  opts = [",".join(map(str, heuristic_opts(k, caps))) for k in kernels_of(text, caps).values()]
  assert opts == ["PADTO(2,16,16),SPLIT(2,16,u),SPLIT(0,16,u),SPLIT(7,3,r),SPLIT(6,3,r),SPLIT(0,4,t,top)"]


def _source(tmp_path: Path, text: str, tag: str, cpu: str) -> str:
  return (_build(tmp_path, text, tag, cpu, emit=("source",)) / f"{LIB}.c").read_text()


@pytest.mark.skipif("x86-64-v4" not in RUNNABLE, reason="needs a compiler that takes -march=x86-64-v4")
def test_masked_loads_only_where_gates_stay_out_of_reduction_loops(tmp_path):
  conv = _source(tmp_path, program(CONVS[:1]), "conv", "x86-64-v4")
  assert conv.count("uopc_mload_b4x16(uopc_float32x16") >= 3 and "#define uopc_mload(" in conv
  # a window sum over a padded row (tinygrad's cumsum): its gates move with the summed positions, a loop
  cumsum = _source(tmp_path, (SAMPLES / "cumsum.uop").read_text(), "cumsum", "x86-64-v4")
  assert "uopc_mload" not in cumsum  # no helpers either: files without masked loads are as they were
  assert "uopc_mload" not in _source(tmp_path, program(CONVS[:1]), "sse", "portable")  # SSE has no masked loads


@pytest.mark.parametrize("cc", [c for c in ("gcc", "clang") if have(c)])
@pytest.mark.parametrize("cpu", RUNNABLE)
def test_masked_loads_compute_what_the_portable_build_does(tmp_path, cpu, cc):
  text = program(CONVS)
  plain = ctypes.CDLL(str(_build(tmp_path, text, "plain", "portable", cc) / f"lib{LIB}.so"))
  wide = ctypes.CDLL(str(_build(tmp_path, text, "wide", cpu, cc, "-Wall -Wextra -Werror") / f"lib{LIB}.so"))
  for i, f in enumerate(CONVS):
    inputs = random_inputs(f, i)
    want, got = run_func(plain, f, inputs), run_func(wide, f, inputs)
    np.testing.assert_array_equal(got["out"], want["out"], err_msg=f"{f.name} ({cpu}, {cc})")
    np.testing.assert_allclose(got["out"], np_conv2d(*(inputs[k].astype(np.float64) for k in ("x", "w", "bias")), 1), rtol=1e-4, atol=1e-4)


def _sample_conv(lib, x: np.ndarray, w: np.ndarray) -> np.ndarray:
  out = np.full((1, 64, 28, 28), np.nan, np.float32)
  assert getattr(lib, f"{LIB}_conv3x3")(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, w, out))) == 0
  return out


@pytest.mark.skipif("x86-64-v4" not in RUNNABLE, reason="needs a CPU and compiler with AVX-512")
@pytest.mark.parametrize("cflags", ["", "-mno-avx512f", "-mno-avx"])
def test_each_path_of_the_helpers_computes_the_same(tmp_path, cflags):
  """The AVX-512 source built as it is, without AVX-512 (AVX2's maskload for 8 lanes, lane by lane for 16) and
  without AVX (lane by lane): tinygrad's conv2d (samples/models/conv3x3.uop) against the portable build."""
  text = (SAMPLES / "conv3x3.uop").read_text()
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((1, 64, 28, 28), np.float32), rng.standard_normal((64, 64, 3, 3), np.float32)
  plain = ctypes.CDLL(str(_build(tmp_path, text, "plain", "portable") / f"lib{LIB}.so"))
  wide = ctypes.CDLL(str(_build(tmp_path, text, "wide", "x86-64-v4", cflags=cflags) / f"lib{LIB}.so"))
  np.testing.assert_array_equal(_sample_conv(wide, x, w), _sample_conv(plain, x, w))


def test_masked_loads_are_clean_under_sanitizers(tmp_path):
  """Masked lanes point before the image (the first row's upper taps) and past it: ASan/UBSan see no access."""
  funcs = CONVS[:2]
  source = _source(tmp_path, program(funcs), "wide", "native")
  lib = compile_c(source, "gcc", sanitize=True, extra=(*cpu_flags("native"), "-fno-var-tracking-assignments"))  # big unrolled bodies
  calls = []
  for i, f in enumerate(funcs):
    inputs = random_inputs(f, i)
    calls.append(Call(f"{LIB}_{f.name}", tuple(np.full(shape, np.nan, np.float32) if out else inputs[name] for name, shape, _, out in f.args)))
  plain = ctypes.CDLL(str(_build(tmp_path, program(funcs), "plain", "portable") / f"lib{LIB}.so"))
  for i, (f, args) in enumerate(zip(funcs, run_calls(lib, calls, sanitize=True))):
    np.testing.assert_array_equal(args[-1], run_func(plain, f, random_inputs(f, i))["out"], err_msg=f.name)


@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_the_emulator_runs_masked_loads(tmp_path, vector_bytes):
  for i, f in enumerate(CONVS[:3]):
    (tmp_path / "c.uop").write_text(f.text())
    inputs = random_inputs(f, i)
    got = run_file(tmp_path / "c.uop", target="c", inputs=inputs, emulated=True, vector_bytes=vector_bytes).arrays["out"]
    want = run_file(tmp_path / "c.uop", target="c", inputs=inputs).arrays["out"]
    np.testing.assert_array_equal(got, want, err_msg=f.name)


def _strided_conv_text(c: int, hw: int, o: int) -> str:
  """tinygrad's conv2d with stride 2 and padding 1 (ResNet's downsampling 3x3), exported."""
  tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
  import uopc
  t = tinygrad.Tensor
  return uopc.export(lambda x, w: x.conv2d(w, stride=2, padding=1), t.empty(1, c, hw, hw), t.empty(o, c, 3, 3), name="conv")


def test_a_stride_2_convolution_loads_masked_windows():
  """Its taps read every other column: each vector of 16 columns is two masked loads of a window of 16 (the
  masks false on the columns between) and a shuffle; 14 output columns padded to 16, by 16 channels."""
  from uopc.stages.optimize import heuristic_opts, target_caps
  from test_optimize import kernels_of
  text = _strided_conv_text(128, 28, 256)
  caps = target_caps("c", 64)
  assert [",".join(map(str, heuristic_opts(k, caps))) for k in kernels_of(text, caps).values()] == [
    "PADTO(2,16),SPLIT(2,16,u),SPLIT(0,16,u),SPLIT(6,3,r),SPLIT(5,3,r),SPLIT(0,16,t,top)"]


@pytest.mark.parametrize("cpu", RUNNABLE)
def test_a_stride_2_convolution_computes_what_the_portable_build_does(tmp_path, cpu):
  text = _strided_conv_text(8, 14, 16)  # 7 output columns: padded to 8
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((1, 8, 14, 14), np.float32), rng.standard_normal((16, 8, 3, 3), np.float32)
  outs = []
  for tag, level in (("plain", "portable"), ("wide", cpu)):
    lib = ctypes.CDLL(str(_build(tmp_path, text, tag, level, cflags="-Wall -Wextra -Werror" if tag == "wide" else "") / f"lib{LIB}.so"))
    out = np.full((1, 16, 7, 7), np.nan, np.float32)
    assert lib.t_conv(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, w, out))) == 0
    outs.append(out)
  if cpu != "native" or "x86-64-v4" in RUNNABLE: assert "uopc_mload_b" in (tmp_path / "wide" / f"{LIB}.c").read_text()
  np.testing.assert_array_equal(outs[1], outs[0])
  xp = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
  want = sum(np.einsum("oc,chw->ohw", w[:, :, i, j].astype(np.float64), xp[:, i:i + 14:2, j:j + 14:2]) for i in range(3) for j in range(3))
  np.testing.assert_allclose(outs[0][0], want, rtol=1e-5, atol=1e-5)
  (tmp_path / "s.uop").write_text(text)
  emulated = run_file(tmp_path / "s.uop", target="c", inputs={"x": x, "w": w}, emulated=True, vector_bytes=64).arrays["out"]
  np.testing.assert_array_equal(emulated, outs[0])
