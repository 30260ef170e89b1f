"""`uopc build -t c --cpu LEVEL`: the instruction set of the library (the compiler flags), the vector
width the heuristics size their register tiles by (from the compiler's macros for those flags), and
libraries built for wider vectors computing bit for bit what the portable build computes, warning-free
under gcc and clang and clean under ASan/UBSan."""
from __future__ import annotations

import ctypes
import io
import os
import platform
import stat
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from c_harness import Call, compile_c, have, run_calls
from test_group_reduce import row_reduce
from test_optimize import LIB, elementwise, equivalence_programs, kernels_of, program, random_inputs, reduction, run_func
from test_partials import total
from test_tensor_programs import conv2d, gemm, softmax
from uopc.cli import cli
from uopc.driver import CPU_LEVELS, BuildOptions, build, cpu_flags, cpu_vector_bytes
from uopc.stages.optimize import heuristic_opts, target_caps


def _cpu_has(*flags: str) -> bool:
  info = Path("/proc/cpuinfo")
  if platform.machine() not in ("x86_64", "AMD64") or not info.exists(): return False
  line = next((x for x in info.read_text().splitlines() if x.startswith("flags")), "")
  return set(flags) <= set(line.split(":", 1)[-1].split())


def _compiler_takes(cc: str, level: str) -> bool:
  try:
    cpu_vector_bytes(level, {"CC": cc})
  except Exception:
    return False
  return True


# the levels this machine can run: native always, the x86-64 levels where the CPU has their instructions
RUNNABLE = ["native"] + [lv for lv, flags in (("x86-64-v3", ("avx2",)), ("x86-64-v4", ("avx512f", "avx512bw", "avx512vl")))
                         if _cpu_has(*flags) and _compiler_takes("cc", lv)]


def test_levels_are_compiler_flags():
  assert cpu_flags("portable") == ()
  assert cpu_flags("x86-64-v3") == ("-march=x86-64-v3",) and cpu_flags("x86-64-v4") == ("-march=x86-64-v4",)
  assert cpu_flags("native", "x86_64") == ("-march=native",)
  assert cpu_flags("native", "aarch64") == ("-mcpu=native",)  # arm compilers spell the host CPU -mcpu
  assert tuple(next(p for p in cli.commands["build"].params if p.name == "cpu").type.choices) == CPU_LEVELS


def _fake_cc(tmp_path: Path, macros: dict[str, str]) -> str:
  """A 'compiler' that prints the predefined macros of each -march it is given (and fails for others)."""
  script = tmp_path / "fakecc"
  cases = "".join(f'  *"{flag}"*) printf "%s\\n" {" ".join(repr(f"#define {m} 1") for m in ms.split())} ;;\n' for flag, ms in macros.items())
  script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) echo "fakecc: unknown flags: $*" >&2; exit 1 ;;\nesac\n')
  script.chmod(script.stat().st_mode | stat.S_IEXEC)
  return str(script)


def test_vector_width_comes_from_the_compilers_macros(tmp_path):
  cc = _fake_cc(tmp_path, {"-march=x86-64-v4": "__SSE2__ __AVX__ __AVX2__ __AVX512F__", "-march=x86-64-v3": "__SSE2__ __AVX__ __AVX2__",
                           "-march=x86-64-v2": "__SSE2__ __SSE4_2__", "-march=native": "__SSE2__ __AVX__"})
  env = {"CC": cc}
  assert [cpu_vector_bytes(lv, env) for lv in ("x86-64-v4", "x86-64-v3", "x86-64-v2", "native")] == [64, 32, 16, 32]
  assert cpu_vector_bytes("portable", {"CC": "false"}) == 16  # the baseline needs no compiler to ask
  assert [target_caps("c", b).vector_width for b in (None, 16, 32, 64)] == [4, 4, 8, 16]
  assert target_caps("llvm", 64).vector_width == 4  # -t llvm builds for the generic CPU whatever it is told


def test_a_compiler_without_the_flags_and_other_targets_are_errors(tmp_path):
  saxpy = Path(__file__).resolve().parent.parent / "samples" / "c-app" / "saxpy.uop"
  res = CliRunner(env={"CC": _fake_cc(tmp_path, {})}).invoke(cli, ["build", str(saxpy), "-o", str(tmp_path / "o"), "--cpu", "native"])
  assert res.exit_code == 1 and "--cpu native: the C compiler does not take -march=native" in res.output
  assert "fakecc: unknown flags" in res.output and not (tmp_path / "o" / "libsaxpy.so").exists()
  res = CliRunner().invoke(cli, ["build", str(saxpy), "-t", "llvm", "-o", str(tmp_path / "o"), "--cpu", "x86-64-v3"])
  assert res.exit_code == 1 and "--cpu x86-64-v3 is for -t c" in res.output
  res = CliRunner().invoke(cli, ["build", str(saxpy), "-o", str(tmp_path / "o"), "--cpu", "pentium"])
  assert res.exit_code == 1 and "Invalid value for '--cpu'" in res.output


def _opts(f, vector_bytes: int | None) -> list[str]:
  caps = target_caps("c", vector_bytes)
  return [",".join(map(str, heuristic_opts(k, caps))) for k in kernels_of(f.text(), caps).values()]


def test_register_tiles_follow_the_vector_width():
  g = gemm(1024, 1024, 1024)
  assert _opts(g, 16) == ["SPLIT(1,8,u),SPLIT(0,8,u),SPLIT(4,2,r),SWAP(0,2),SPLIT(0,32,t,top),STAGE"]   # SSE: 2 x 4 lanes by 8 rows
  assert _opts(g, 32) == ["SPLIT(1,16,u),SPLIT(0,8,u),SPLIT(4,2,r),SWAP(0,2),SPLIT(0,32,t,top),STAGE"]  # AVX2: 2 x 8 lanes
  assert _opts(g, 64) == ["SPLIT(1,32,u),SPLIT(0,8,u),SPLIT(4,2,r),SWAP(0,2),SPLIT(0,32,t,top),STAGE"]  # AVX-512: 2 x 16 lanes
  assert _opts(elementwise(64, 256), 64)[0].startswith("SPLIT(1,32,u)")
  # a row sum's output axis reads its rows with a stride: 8 rows at a time, whatever the width; a row of 256
  # or more gets 32 partial sums instead, whatever the width too (tests/test_partials.py)
  assert _opts(reduction(4096, 128, "ADD", 1), 64)[0].startswith("SPLIT(0,8,u)")
  assert _opts(reduction(4096, 512, "ADD", 1), 64)[0].startswith("SPLIT(1,32,G)")
  # a padded 3x3 convolution: its output channels fill 16 registers, not its rows (their border-gated loads
  # would be gathered lane by lane), no swap, and its 9 window positions (axis 5, selecting among the STACKed
  # shifts) unrolled whole; the columns get 2 x 16 lanes with AVX-512 (masked vector loads of the borders; 56
  # padded with overlapping tiles, see tests/test_masked_loads.py), 8 lane-by-lane loads with SSE
  c = conv2d(64, 56, 56, 64, 3, 3, 1)
  assert _opts(c, 64) == ["PADTO(2,32,32),SPLIT(2,32,u),SPLIT(0,8,u),SPLIT(5,9,r),SPLIT(0,8,t,top)"]
  assert _opts(c, 16) == ["SPLIT(2,8,u),SPLIT(0,8,u),SPLIT(5,9,r),SPLIT(0,8,t,top)"]
  # a reduction whose contiguous axis takes fewer lanes (100 columns: one register of 16, the axis padded to 112
  # with overlapping tiles) gets more rows for the same registers
  assert _opts(softmax(4096, 100), 64)[0].startswith("PADTO(1,16,16),SPLIT(1,16,u),SPLIT(0,16,u)")


def _build(tmp_path: Path, text: str, tag: str, cpu: str, cc: str = "cc", cflags: str = "", emit=None) -> Path:
  (tmp_path / f"{tag}.uop").write_text(text)
  out = tmp_path / tag
  build(tmp_path / f"{tag}.uop", BuildOptions("c", out, emit=emit, name=LIB, print_out=io.StringIO(), cpu=cpu,
                                              env={**os.environ, "CC": cc, "CFLAGS": cflags}))
  return out


# programs of distinct entry names per library: odd sizes (no tile divides them), tiles, THREAD axes,
# long reductions split into partials
CHUNKS = [equivalence_programs(64, 48, 32), equivalence_programs(5, 7, 9),
          [gemm(96, 64, 160), softmax(40, 96), elementwise(33, 200), conv2d(5, 9, 24, 64, 3, 3, 1), total(4096), row_reduce(3, 2048, "ADD")]]


@pytest.mark.parametrize("cc", [c for c in ("gcc", "clang") if have(c)])
@pytest.mark.parametrize("cpu", RUNNABLE)
def test_wide_builds_compute_what_the_portable_build_does(tmp_path, cpu, cc):
  for n, funcs in enumerate(CHUNKS):
    text = program(funcs)
    plain = ctypes.CDLL(str(_build(tmp_path, text, f"plain{n}", "portable", cc) / f"lib{LIB}.so"))
    wide = ctypes.CDLL(str(_build(tmp_path, text, f"wide{n}", cpu, cc, "-Wall -Wextra -Werror") / f"lib{LIB}.so"))
    for i, f in enumerate(funcs):
      inputs = random_inputs(f, i)
      want, got = run_func(plain, f, inputs), run_func(wide, f, inputs)
      for name in want: np.testing.assert_array_equal(got[name], want[name], err_msg=f"{f.name} ({cpu}, {cc})")


def test_wide_source_is_clean_under_sanitizers(tmp_path):
  """The C a wide build writes, compiled with -march=native under ASan/UBSan (and -Wall -Wextra -Werror)."""
  funcs = [gemm(48, 40, 64), softmax(8, 96), reduction(33, 80, "ADD", 1), elementwise(9, 70)]
  out = _build(tmp_path, program(funcs), "wide", "native", emit=("source",))
  source = (out / f"{LIB}.c").read_text()
  lib = compile_c(source, "gcc", sanitize=True, extra=cpu_flags("native"))
  calls, wants = [], []
  for i, f in enumerate(funcs):
    inputs = random_inputs(f, i)
    bufs = [np.full(shape, np.nan, np.float32) if is_out else inputs[name] for name, shape, _, is_out in f.args]
    calls.append(Call(f"{LIB}_{f.name}", tuple(bufs)))
    wants.append(f)
  results = run_calls(lib, calls, sanitize=True)
  plain = ctypes.CDLL(str(_build(tmp_path, program(funcs), "plain", "portable") / f"lib{LIB}.so"))
  for i, (f, args) in enumerate(zip(wants, results)):
    want = run_func(plain, f, random_inputs(f, i))
    for (name, _, _, is_out), got in zip(f.args, args):
      if is_out: np.testing.assert_array_equal(got, want[name], err_msg=f.name)


def test_native_builds_are_byte_identical(tmp_path):
  text = program(CHUNKS[2])
  a, b = (_build(tmp_path, text, tag, "native") for tag in ("a", "b"))
  for f in (f"{LIB}.c", f"lib{LIB}.so", f"{LIB}.h"): assert (a / f).read_bytes() == (b / f).read_bytes(), f


# a constant tensor stored as 32-byte vectors: GCC 12.2 at -O3 with AVX-512 turned the memcpy of each into a 256-bit
# integer move and stored {3, 3, 0, 0}-like constants as {3, 3, 3, 3} (found by tests/test_differential.py with
# --cpu native); the C stores whole vectors through a vector type instead (uopc_vstore)
CONSTANT_ROWS = """func pattern {
  %c = CONST {3} : i32
  %r = RESHAPE(%c, [1])
  %e = EXPAND(%r, [3])
  %p = PAD(%e, [2], [5])
  %row = RESHAPE(%p, [1, 5])
  %rows = EXPAND(%row, [4, 5])
  %flat = RESHAPE(%rows, [20])
  %f = CAST(%flat) : f64
  %out = PARAM([20]) {(0, "out")} : f64
  %st = STORE(%out, %f)
  SINK(%st)
}
"""


@pytest.mark.parametrize("cc", [c for c in ("gcc", "clang") if have(c)])
@pytest.mark.parametrize("cpu", ["portable", *RUNNABLE])
def test_constant_vectors_are_stored_as_they_are(tmp_path, cpu, cc):
  lib = ctypes.CDLL(str(_build(tmp_path, CONSTANT_ROWS, "rows", cpu, cc) / f"lib{LIB}.so"))
  out = np.full(20, np.nan)
  assert lib.t_pattern(out.ctypes.data_as(ctypes.c_void_p)) == 0
  np.testing.assert_array_equal(out, np.tile([0, 0, 3, 3, 3], 4).astype(np.float64))


def test_a_pointwise_convolution_tiles_its_output_channels(tmp_path):
  """A 1x1 convolution 128 -> 256 on 40 x 40: its rows (y) and its output channels (o) each leave an input
  unmoved, but only the channels share the image's vectors (the rows share a broadcast weight): the tile's
  rows are output channels (4.5 -> 0.67 ms with AVX-512 on 2 cores; tinygrad 3.2). Results as numpy's."""
  from uopc.run import run_file
  f = conv2d(128, 40, 40, 256, 1, 1, 0)
  (opts,) = _opts(f, 64)
  assert opts.startswith("SPLIT(2,8,u),SPLIT(0,32,u),"), opts
  rng = np.random.default_rng(3)
  x, w, b = rng.standard_normal((128, 40, 40), np.float32), rng.standard_normal((256, 128, 1, 1), np.float32), rng.standard_normal(256, np.float32)
  (tmp_path / "c.uop").write_text(f.text())
  got = run_file(tmp_path / "c.uop", target="c", inputs={"x": x, "w": w, "bias": b}).arrays["out"]
  want = np.einsum("oc,cyx->oyx", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64)) + b[:, None, None]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
