"""Strided reads on the CPU targets: a 3x3 stride-2 max pooling (tinygrad's max_pool2d as uopc.export
writes it, 27 output columns). Its output columns, which no vector width divides, are upcast whole
(16 + 11 lanes with AVX-512: the chunks are cut per row of that axis, never across two window taps),
and each chunk's stride-2 taps are one or two vector loads of the row and a shuffle (UOPC_SHUFFLE)
instead of a load per lane. Checked against numpy bit for bit (a maximum is exact), NaN included, for
float32, float64 and float16, portable, AVX2 and AVX-512 builds, gcc and clang."""
from __future__ import annotations

import ctypes
import io
import shutil
import subprocess

import numpy as np
import pytest

from test_cpu_levels import _compiler_takes, _cpu_has
from uopc.driver import BuildOptions, build
from uopc.stages.optimize import parse_schedule

C, S = 3, 56
DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16}


def _windows(src: str, c: int, n: int, out: int) -> str:
  """The lines after `src` (1 x c x n x n) of tinygrad's 3 x 3 stride-2 max_pool2d as uopc.export writes it:
  the image tiled 4 x 4, cut into windows, the max of each; out x out results, stored."""
  return f"""  %5 = RESHAPE({src}, [1, 1, 1, {c}, {n}, {n}])
  %6 = EXPAND(%5, [4, 4, 1, {c}, {n}, {n}])
  %7 = PERMUTE(%6) {{(2, 3, 0, 4, 1, 5)}}
  %8 = RESHAPE(%7, [1, {c}, {4 * n}, {4 * n}])
  %9 = SHRINK(%8, [0, 0, 0, 0], [1, {c}, {3 * n + 3}, {3 * n + 3}])
  %10 = RESHAPE(%9, [1, {c}, 3, {n + 1}, 3, {n + 1}])
  %11 = SHRINK(%10, [0, 0, 0, 0, 0, 0], [1, {c}, 3, {2 * out}, 3, {2 * out}])
  %12 = RESHAPE(%11, [1, {c}, 3, {out}, 2, 3, {out}, 2])
  %13 = SHRINK(%12, [0, 0, 0, 0, 0, 0, 0, 0], [1, {c}, 3, {out}, 1, 3, {out}, 1])
  %14 = RESHAPE(%13, [1, {c}, 3, {out}, 3, {out}])
  %15 = PERMUTE(%14) {{(0, 1, 3, 5, 2, 4)}}
  %16 = PERMUTE(%15) {{(4, 5, 0, 1, 2, 3)}}
  %17 = REDUCE(%16) {{(MAX, (0, 1))}}
  %18 = RESHAPE(%17, [1, {c}, {out}, {out}])
  %19 = STORE(%out, %18)
  SINK(%19)
}}
"""


def program(dt: str) -> str:
  return f"""func pool {{
  %out = PARAM([1, {C}, 27, 27]) {{(1, "out")}} : {dt}
  %x = PARAM([1, {C}, {S}, {S}]) {{(0, "x")}} : {dt}
""" + _windows("%x", C, S, 27)


def reference(x: np.ndarray) -> np.ndarray:
  taps = [x[:, :, i:i + 53:2, j:j + 53:2] for i in range(3) for j in range(3)]
  out = taps[0]
  for t in taps[1:]: out = np.where(np.isnan(out) | np.isnan(t), np.nan, np.maximum(out, t)).astype(x.dtype)
  return out


def build_pool(tmp, dt: str, cpu: str, opts: str | None = None, cc: str | None = None):
  (tmp / "pool.uop").write_text(program(dt))
  printed = io.StringIO()
  env = None if cc is None else {**__import__("os").environ, "CC": cc}
  schedule = parse_schedule([f"pool__pool_k0:{opts}"]) if opts is not None else None
  build(tmp / "pool.uop", BuildOptions("c", tmp / "out", cpu=cpu, schedule=schedule, print_after=("optimize",), print_out=printed,
                                       **({"env": env} if env else {})))
  return ctypes.CDLL(str(tmp / "out" / "libpool.so")), (tmp / "out" / "pool.c").read_text(), printed.getvalue()


def run(lib, x: np.ndarray) -> np.ndarray:
  out = np.full((1, C, 27, 27), 7, x.dtype)
  assert lib.pool_pool(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data)) == 0
  return out


def inputs(dt: str) -> np.ndarray:
  x = np.random.default_rng(5).standard_normal((1, C, S, S)).astype(DTYPES[dt])
  x[0, 0, 10, 20] = x[0, 1, 0, 0] = x[0, 2, 55, 33] = np.nan  # NaN propagates through each window holding it
  x[0, 1, 7, 8:12] = np.inf
  x[0, 2, 30, 40:44] = -np.inf
  return x


def _native_avx512() -> bool: return _cpu_has("avx512f") and _compiler_takes("cc", "x86-64-v4")


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("cpu", ["portable", "x86-64-v3", "x86-64-v4"])
def test_pooling_matches_numpy(tmp_path, dt, cpu):
  """Also MAX's NaN rule through the prelude's uopc_vmax_* (AVX's max and blend, AVX-512's max and masked add)."""
  if cpu == "x86-64-v3" and not (_cpu_has("avx2") and _compiler_takes("cc", cpu)): pytest.skip("needs an AVX2 CPU")
  if cpu == "x86-64-v4" and not _native_avx512(): pytest.skip("needs an AVX-512 CPU and a compiler for x86-64-v4")
  lib, source, printed = build_pool(tmp_path, dt, cpu)
  x = inputs(dt)
  np.testing.assert_array_equal(run(lib, x), reference(x))
  if cpu == "x86-64-v4" and dt != "f64":  # 16 float32 lanes: the 27 columns are upcast whole, their taps are windows
    assert " u27" in printed and "UOPC_SHUFFLE(" in source, printed


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_pinned_windows_on_every_compiler(tmp_path, cc):
  """The whole-axis upcast pinned on the portable build (4 lanes: seven chunks a row, windows of 4 lanes)."""
  if shutil.which(cc) is None: pytest.skip(f"{cc} is not installed")
  lib, source, _ = build_pool(tmp_path, "f32", "portable", "SPLIT(2,27,u),SPLIT(4,3,r),SPLIT(3,3,r)", cc)
  assert "UOPC_SHUFFLE(" in source
  x = inputs("f32")
  np.testing.assert_array_equal(run(lib, x), reference(x))
  levels = ["x86-64-v3", "x86-64-v4"] if _compiler_takes(cc, "x86-64-v4") else []
  for flags in [[]] + [[f"-march={m}"] for m in levels]:  # warning-free: the lanes only shuffles use are not variables
    done = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", *flags, str(tmp_path / "out" / "pool.c")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:2000]


def padded_program(c: int) -> str:
  """ResNet's first max pooling, as tinygrad's max_pool2d((3, 3), stride=2, padding=1) exports it: the border
  padded with -inf through a WHERE of a padded mask, 112 x 112 -> 56 x 56."""
  return f"""func pool {{
  %out = PARAM([1, {c}, 56, 56]) {{(1, "out")}} : f32
  %0 = CONST {{True}}
  %1 = RESHAPE(%0, [1, 1, 1, 1])
  %2 = EXPAND(%1, [1, {c}, 112, 112])
  %3 = PAD(%2, [0, 0, 1, 1], [1, {c}, 114, 114])
  %x = PARAM([1, {c}, 112, 112]) {{(0, "x")}} : f32
  %4 = PAD(%x, [0, 0, 1, 1], [1, {c}, 114, 114])
  %mask = CONST {{-inf}}
  %padded = WHERE(%3, %4, %mask)
""" + _windows("%padded", c, 114, 56)


def test_padded_pooling_takes_half_a_vector_and_few_channels():
  """With AVX-512 the 56 output columns (stride-2 taps: masked windows of one register) take 8 lanes in 7
  blocks, not 16 in 4 overlapping tiles, and the tile's rows are at most 4 channels: each channel reads its
  own image, so more rows share nothing but index arithmetic (0.47 -> 0.21 ms on 2 Zen 5 cores). A gemm-like
  kernel, whose rows share the loads of b, keeps its 8 rows (test_cpu_levels)."""
  from test_cpu_levels import _opts

  class Text:
    def __init__(self, text): self._text = text
    def text(self): return self._text
  (opts,) = _opts(Text(padded_program(64)), 64)
  assert opts.startswith("SPLIT(2,8,u),SPLIT(0,4,u),"), opts
  assert "PADTO" not in opts


@pytest.mark.parametrize("cpu", ["portable", "x86-64-v3", "x86-64-v4"])
def test_padded_pooling_matches_numpy(tmp_path, cpu):
  if cpu == "x86-64-v3" and not (_cpu_has("avx2") and _compiler_takes("cc", cpu)): pytest.skip("needs an AVX2 CPU")
  if cpu == "x86-64-v4" and not _native_avx512(): pytest.skip("needs an AVX-512 CPU and a compiler for x86-64-v4")
  c = 8
  (tmp_path / "pool.uop").write_text(padded_program(c))
  build(tmp_path / "pool.uop", BuildOptions("c", tmp_path / "out", cpu=cpu))
  lib = ctypes.CDLL(str(tmp_path / "out" / "libpool.so"))
  x = np.random.default_rng(7).standard_normal((1, c, 112, 112)).astype(np.float32)
  x[0, 1, 0, :] = x[0, 2, :, 0] = x[0, 3, 111, :] = -np.inf  # a border row or column of -inf: the padding must not win
  out = np.full((1, c, 56, 56), 7, np.float32)
  assert lib.pool_pool(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data)) == 0
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  want = np.max([padded[:, :, i:i + 112:2, j:j + 112:2] for i in range(3) for j in range(3)], axis=0)
  np.testing.assert_array_equal(out, want)


def test_overlapping_tiles_simplify_the_gates_too(tmp_path):
  """Pinned 16 lanes in overlapping tiles (PADTO's third argument): the padded border's gates, like the
  addresses, lose the shift's (w // 16) once the SPLIT makes w = g * 16 + lane (no division per lane)."""
  (tmp_path / "pool.uop").write_text(padded_program(8))
  printed = io.StringIO()
  opts = "PADTO(2,64,16),SPLIT(2,16,u),SPLIT(0,8,u),SPLIT(5,3,r),SPLIT(4,3,r)"
  build(tmp_path / "pool.uop", BuildOptions("c", tmp_path / "out", schedule=parse_schedule([f"pool__pool_k0:{opts}"]),
                                            print_after=("optimize",), print_out=printed))
  ir = printed.getvalue()
  assert "PADTO(2,64,16)" in ir and "IDIV" not in ir and "CONST {True}" not in ir, ir
