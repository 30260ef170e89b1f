"""Ragged axes: PADTO's overlapping tiles (uopc/stages/overlap_tiles.py) and the heuristics that use them (the
staged float32 gemms of uopc/stages/local_staging.py on GPUs, uopc/stages/cpu_schedule.py's register tiles on
CPUs), and the masked padding of a GPU reduction's long ragged contiguous axis (uopc/stages/ragged_axes.py).
Every padded kernel computes what the unpadded one does: the emulator, the C/LLVM libraries and the GPU
against numpy, random opts against the plain kernels bit for bit, ptxas on the staged ones."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import uopc.stages.gpu_schedule as gs
from test_cuda_gpu import gpu  # noqa: F401 (a fixture)
from test_cuda_ptx import needs_ptxas, ptxas_accepts
from test_group_reduce import emulated
from test_local_staging import NARROW, SMALL, _check_gemm, _heuristic, _inputs
from test_optimize import GPU
from test_tensor_programs import Func, conv2d, gemm
from uopc.diagnostics import CompileError
from uopc.ops import AxisType, Ops
from uopc.run import run_file
from uopc.stages.optimize import Opt, OptError, OptOp, apply_opt, apply_opts, axis_size, kernel_axes, target_caps
from uopc.stages.opts import parse_opts


def test_a_long_ragged_contiguous_axis_is_padded():
  """Where the staged schedule does not take the gemm (too few workgroups), PADTO masks the padded columns."""
  axes, opts = _heuristic(gemm(8, 768, 50257))
  assert opts.startswith("PADTO(1,64),") and "STAGE" not in opts
  assert _heuristic(gemm(64, 768, 1031))[1].startswith("PADTO(1,64),")  # 1031 -> 1088: 5.5% more columns


def test_staged_gemms_overlap_their_ragged_tiles():
  """A float32 gemm that the staged schedule's tiles do not divide gets overlapping tiles (PADTO's third
  argument, no gated loads) and is staged; the runs are those whose padded work and last wave cost least."""
  for shape, pads, axes in [((197, 768, 3072), "PADTO(0,32,32),", "g7 l8 u4 g48 l16 u4 R96 r8"),  # ViT's 197 tokens
                            ((1024, 768, 1031), "PADTO(1,64,64),", "g32 l8 u4 g17 l16 u4 R96 r8"),  # 544 of 32 x 64, not 144 of 64 x 128
                            ((64, 768, 50257), "PADTO(1,128,128),", "u2 l8 u4 g393 u2 l16 u4 R96 r8"),  # GPT-2's logits
                            ((128, 768, 50257), "PADTO(1,128,128),", "g2 u2 l8 u4 g393 u2 l16 u4 R96 r8"),  # 786 of 2 x 2, not 394 of 2 x 4
                            ((1000, 768, 1000), "PADTO(0,64,64),PADTO(1,128,128),", "g16 u2 l8 u4 g8 u2 l16 u4 R96 r8"),
                            ((16, 768, 50257), "PADTO(1,128,128),", "l8 u2 g393 u2 l16 u4 R96 r8")]:  # 16 x 128 workgroups
    got_axes, opts = _heuristic(gemm(*shape))
    assert opts.startswith(pads) and opts.endswith(",STAGE(2)") and got_axes == axes, shape
  assert _heuristic(gemm(2048, 2048, 2048))[1].startswith("SPLIT(")  # divisible: no padding
  assert _heuristic(gemm(197, 3072, 768))[1].startswith("PADTO(0,32,32),")  # 24 workgroups of 64 x 128: 32 x 64 instead
  assert "STAGE" not in _heuristic(gemm(64, 3072, 768))[1]            # 24 workgroups of 32 x 64 and of 16 x 128: too few


def test_other_axes_are_left_alone():
  assert "PADTO" not in _heuristic(gemm(64, 768, 1000))[1]    # 1000 = 8 x 125
  assert "PADTO" not in _heuristic(gemm(64, 768, 997))[1]     # shorter than RAGGED_MIN
  assert "PADTO" not in _heuristic(conv2d(64, 28, 28, 64, 3, 3, 1))[1]


def test_a_padded_gemm_runs_correctly(tmp_path, monkeypatch):
  """8 x 16 x 1031 (1031 is prime): padded to 1040 columns, masked; the emulator against numpy."""
  monkeypatch.setattr(gs, "GPU_MIN_THREADS", 64)
  f, x = gemm(8, 16, 1031), _inputs(8, 16, 1031)
  assert _heuristic(f)[1].startswith("PADTO(1,")
  (tmp_path / f"{f.name}.uop").write_text(f.text())
  got = run_file(tmp_path / f"{f.name}.uop", target="cuda", inputs=x, emulated=True).arrays["c"]
  _check_gemm(got, x["a"], x["b"])
  assert np.isfinite(got).all()


# ---- overlapping tiles (PADTO's third argument) --------------------------------------------------------------

STAGED_197 = "PADTO(0,64,64),SPLIT(2,8,r),SPLIT(1,4,u),SPLIT(1,16,l),SPLIT(0,4,u),SPLIT(0,8,l),SPLIT(0,2,u)"


@pytest.mark.parametrize("m,opts", [
  (197, STAGED_197 + ",STAGE(2)"),            # 4 row tiles of 64, the last moved back to rows 133..196, staged
  (197, STAGED_197),                          # the same register tiles, unstaged
  (70, "PADTO(0,32,16),SPLIT(0,4,u),SPLIT(0,4,l)"),  # tiles of 16 inside a padding of 32: 96 rows, two tiles moved back
  (37, "PADTO(0,8,20)"),                      # 40 in tiles of 20: the second moved back to 17..36
  (70, "PADTO(0,32,32)," + SMALL + ",STAGE(2)"),   # the staged 32 x 64 workgroups: 96 rows, the third tile at 38..69
  (37, "PADTO(0,16,16)," + NARROW + ",STAGE(2)"),  # the staged 16 x 128 workgroups: 48 rows, the third tile at 21..36
], ids=["staged", "unstaged", "small-tiles", "two-tiles", "staged-32x64", "staged-16x128"])
def test_overlapping_tiles_compute_the_unpadded_gemm(tmp_path, monkeypatch, m, opts):
  """Iterations past the end repeat earlier ones (no gates); every row of c is still a's row times b."""
  f, x = gemm(m, 32, 256), _inputs(m, 32, 256)
  got = emulated(tmp_path, monkeypatch, f, x, opts)["c"]
  _check_gemm(got, x["a"], x["b"])


def batched_gemm(h: int, m: int, k: int, n: int) -> Func:
  """c[i] = a[i] @ b[i] for each of h heads (attention's products)."""
  f = Func("bgemm")
  a, b, c = f.param("a", (h, m, k)), f.param("b", (h, k, n)), f.param("c", (h, m, n), out=True)
  prod = f.op("MUL", f.reshape(a, (h, m, k, 1)), f.reshape(b, (h, 1, k, n)))
  f.store(c, f.reshape(f.reduce(prod, "ADD", (2,)), (h, m, n)))
  return f


def test_overlapping_tiles_of_a_batched_gemm(tmp_path, monkeypatch):
  """Three heads of 37 x 32 @ 32 x 256, staged in 16 x 128 workgroups with the rows' last tile moved back
  (each head's own rows): the emulator against numpy, head by head."""
  rng = np.random.default_rng(5)
  x = {"a": rng.standard_normal((3, 37, 32)).astype(np.float32), "b": rng.standard_normal((3, 32, 256)).astype(np.float32)}
  opts = "PADTO(1,16,16),SPLIT(3,8,r),SPLIT(2,4,u),SPLIT(2,16,l),SPLIT(2,2,u),SPLIT(1,2,u),SPLIT(1,8,l),STAGE(2)"
  got = emulated(tmp_path, monkeypatch, batched_gemm(3, 37, 32, 256), x, opts)["c"].reshape(3, 37, 256)
  for i in range(3): _check_gemm(got[i], x["a"][i], x["b"][i])


def gemm_bias(m: int, k: int, n: int) -> Func:
  """c = a @ b + bias: a Linear layer, whose epilogue loads the bias after the reduction."""
  f = Func("linear")
  a, b, bias, c = f.param("a", (m, k)), f.param("b", (k, n)), f.param("bias", (1, n)), f.param("c", (m, n), out=True)
  f.store(c, f.op("ADD", f.matmul(a, b, m, k, n), f.expand(bias, (m, n))))
  return f


def test_a_gemm_with_an_epilogue_is_staged(tmp_path, monkeypatch):
  """The bias load after the reduction does not keep a gemm from the staged schedule (GPT-2's QKV: 64 x 768 x
  2304); pinned on 37 rows with overlapping tiles, the emulator against numpy."""
  assert _heuristic(gemm_bias(64, 768, 2304))[1] == SMALL + ",STAGE(2)"
  rng = np.random.default_rng(6)
  x = {"a": rng.standard_normal((37, 32)).astype(np.float32), "b": rng.standard_normal((32, 256)).astype(np.float32),
       "bias": rng.standard_normal((1, 256)).astype(np.float32)}
  got = emulated(tmp_path, monkeypatch, gemm_bias(37, 32, 256), x, "PADTO(0,32,32)," + SMALL + ",STAGE(2)")["c"]
  a64, b64, bias64 = (x[n].astype(np.float64) for n in ("a", "b", "bias"))
  want = a64 @ b64 + bias64  # the sum's bound, and one more rounding for the bias's add
  bound = 33 * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64) + np.abs(bias64))
  assert np.all(np.abs(got.reshape(37, 256) - want) <= bound)


def test_overlapping_tiles_leave_the_loads_ungated():
  from test_local_staging import _typed
  kernel = apply_opts(_typed(gemm(197, 32, 256)), parse_opts(STAGED_197), GPU, "k")
  mem = [u for u in kernel.toposort() if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX]
  assert mem and all(len(u.src) == (1 if u.op is Ops.LOAD else 2) for u in mem)


@pytest.mark.parametrize("f,opts,why", [
  (gemm(197, 32, 256), "PADTO(0,64,256)", "the overlap tile must be at most the axis.s size 197"),
  (gemm(197, 32, 256), "PADTO(0,64,48)", "divide its padded size 256"),
  (gemm(197, 32, 256), "PADTO(2,64,16)", "only a GLOBAL axis"),
], ids=["tile-too-big", "tile-not-dividing", "reduce-axis"])
def test_overlapping_tiles_are_refused_where_they_would_change_results(f, opts, why):
  from test_local_staging import _typed
  with pytest.raises(CompileError, match=why): apply_opts(_typed(f), parse_opts(opts), GPU, "k")


def test_an_in_place_kernel_cannot_overlap():
  """A kernel that reads what it stores would read a repeated tile's new values: refused."""
  from test_local_staging import _typed
  f = Func("inplace")
  x, y = f.param("x", (197, 48), out=True), f.param("y", (48,))
  f.store(x, f.op("ADD", f.op("MUL", x, f.expand(f.reshape(y, (1, 48)), (197, 48))), x))
  with pytest.raises(CompileError, match="must not read a global buffer it stores to"):
    apply_opts(_typed(f), parse_opts("PADTO(0,64,64)"), GPU, "k")


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_overlapping_staged_gemms(tmp_path, arch):
  """The heuristics' staged gemms, with overlapping tiles: rows (197), unaligned columns (1031: 4-byte copies)."""
  from test_optimize import program
  from uopc.driver import BuildOptions, build
  funcs = [gemm(197, 768, 3072), gemm(1024, 768, 1031), gemm(64, 768, 2304)]  # 16 x 128, 64 x 128, 32 x 64 workgroups
  for i, f in enumerate(funcs): f.name = f"gemm{i}"
  (tmp_path / "r.uop").write_text(program(funcs))
  build(tmp_path / "r.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", emit=("ptx",)))
  ptx = (tmp_path / "out" / "r.ptx").read_text()
  for needed in ("cp.async.cg.shared.global", "cp.async.ca.shared.global [%r", "max.s32", "bar.sync"):
    assert needed in ptx, needed
  ptxas_accepts(ptx, arch, tmp_path)


@pytest.mark.gpu
def test_overlapping_tiles_on_a_cuda_gpu(gpu, tmp_path):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  """The heuristics' staged gemms with overlapping tiles (ViT's 197 rows, GPT-2's 50257 logits, both axes of
  1000 x 1000, unaligned rows of b: 1031), each workgroup shape of STAGED_TILES among them, against numpy on
  the GPU; compute-sanitizer runs this in the notes."""
  import ctypes
  from gpu_samples import call
  from test_optimize import program
  from uopc.driver import BuildOptions, build
  from uopc.frontend import load_module
  from uopc.pipeline import compile_module
  shapes = {"a": (197, 768, 3072), "b": (64, 768, 50257), "c": (1000, 768, 1000), "d": (1024, 768, 1031), "e": (16, 768, 50257),
            "f": (197, 3072, 768), "g": (64, 768, 2304)}
  funcs = []
  for name, shape in shapes.items():
    f = gemm(*shape)
    f.name = f"g{name}"
    funcs.append(f)
  (tmp_path / "r.uop").write_text(program(funcs))
  paths = build(tmp_path / "r.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out"))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  entries = {e.name: e for e in compile_module(load_module(str(tmp_path / "r.uop")), "cuda", "r")}
  for name, (m, k, n) in shapes.items():
    x = _inputs(m, k, n)
    got = call(gpu, lib, "r", entries[f"g{name}"], [x["a"], x["b"], np.zeros((m, n), np.float32)])[2]
    _check_gemm(got, x["a"], x["b"])


@st.composite
def _gpu_opts(draw, kernel, caps=GPU):
  """Random opts for a kernel (GPU caps: LOCAL splits too), overlapping PADTOs among them (illegal draws are dropped)."""
  opts = []
  for _ in range(draw(st.integers(1, 5))):
    axes = kernel_axes(kernel)
    i = draw(st.integers(0, len(axes) - 1))
    size = axis_size(axes[i])
    kind = draw(st.sampled_from(("overlap", "overlap", "split", "split", "padto")))
    if kind == "overlap" and isinstance(size, int):
      opt = Opt(OptOp.PADTO, i, (draw(st.sampled_from((2, 4, 8, 16))), draw(st.integers(1, max(1, size)))))
    elif kind == "padto": opt = Opt(OptOp.PADTO, i, draw(st.sampled_from((2, 4, 8))))
    else: opt = Opt(OptOp.SPLIT, i, (draw(st.sampled_from((2, 3, 4))), draw(st.sampled_from((AxisType.UPCAST, AxisType.LOCAL, AxisType.UNROLL))), False))
    try:
      kernel = apply_opt(kernel, opt, caps, first=not opts)
    except OptError:
      continue
    opts.append(opt)
  return ",".join(map(str, opts))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(dims=st.tuples(*[st.sampled_from((3, 5, 6, 7, 9, 12)) for _ in range(3)]), which=st.integers(0, 5),
       target=st.sampled_from(("cuda", "c", "llvm")), data=st.data())
def test_random_overlapping_tiles_compute_what_the_plain_kernel_does(tmp_path_factory, monkeypatch, dims, which, target, data):
  """Random programs of test_optimize (elementwise, reductions, gemm, softmax, padded borders) under random
  opts with overlapping PADTOs: the results (the emulator's for -t cuda, the library's for -t c and -t llvm)
  equal the unoptimised kernel's, bit for bit (with the IR's two roundings: which products fuse into a
  multiply-add, -t cuda's default, depends on the schedule, e.g. on whether a reduction is unrolled)."""
  from test_optimize import C, equivalence_programs, kernels_of, random_inputs
  f = equivalence_programs(*dims)[which]
  caps = GPU if target == "cuda" else C if target == "c" else target_caps(target)
  kernel = next(iter(kernels_of(f.text(), caps).values()))
  opts = data.draw(_gpu_opts(kernel, caps), label="opts")
  inputs = random_inputs(f, which)
  plain, opt = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("opt")
  want, got = (emulated(d, monkeypatch, f, inputs, o, target, fp_contract=False) for d, o in ((plain, ""), (opt, opts)))
  for name in want: np.testing.assert_array_equal(got[name], want[name], err_msg=f"{f.name}: {opts}")


def test_an_overlap_the_kernel_cannot_take_is_a_build_error(tmp_path):
  """`uopc build --opts` with overlapping tiles the kernel cannot take: exit 1 with the reason, no traceback."""
  from click.testing import CliRunner
  from uopc.cli import cli
  (tmp_path / "p.uop").write_text(gemm(37, 8, 16).text())
  for target, opts, why in (("c", "PADTO(2,16,4)", "only a GLOBAL axis's tiles overlap, not REDUCE"),
                            ("cuda", "PADTO(0,8,3)", "the overlap tile must be at most the axis's size 37 and divide its padded size 40")):
    res = CliRunner().invoke(cli, ["build", str(tmp_path / "p.uop"), "-t", target, "-o", str(tmp_path / target), "--opts", f"p__gemm_k0:{opts}"])
    assert res.exit_code == 1 and f"kernel p__gemm_k0: cannot apply {opts}: {why}" in res.output, res.output
    assert "Traceback" not in res.output


def test_cpu_gemms_pad_their_ragged_axes(tmp_path):
  """On CPUs a ragged output axis (odd, or with fewer factors of two than half the tile) of a reduction gets
  overlapping tiles too, so that it has its lanes and tile rows; the library's results against numpy."""
  from test_optimize import kernels_of
  from uopc.stages.optimize import heuristic_opts, target_caps
  avx512 = target_caps("c", vector_bytes=64)
  for shape, opts in [((197, 768, 3072), "SPLIT(1,32,u),PADTO(0,8,8),"), ((64, 768, 50257), "PADTO(1,128,32),SPLIT(1,32,u),"),
                      ((1000, 768, 1000), "PADTO(1,128,32),SPLIT(1,32,u),")]:
    kernel = next(iter(kernels_of(gemm(*shape).text(), avx512).values()))
    assert ",".join(map(str, heuristic_opts(kernel, avx512))).startswith(opts), shape
  for shape, opts in [((1, 768, 3072), "SPLIT(0,256,u),"), ((1, 3072, 768), "SPLIT(0,128,u),"),  # one row: 16 registers, 6 blocks
                      ((1, 768, 50257), "PADTO(0,1024,256),SPLIT(0,256,u),")]:
    kernel = next(iter(kernels_of(gemm(*shape).text(), avx512).values()))
    assert ",".join(map(str, heuristic_opts(kernel, avx512))).startswith(opts), shape
  kernel = next(iter(kernels_of(batched_gemm(12, 197, 64, 197).text(), avx512).values()))  # heads: no reuse; rows padded
  assert ",".join(map(str, heuristic_opts(kernel, avx512))).startswith("PADTO(2,32,32),SPLIT(2,32,u),PADTO(1,8,8),SPLIT(1,8,u),")
  kernel = next(iter(kernels_of(gemm(196, 768, 768).text(), avx512).values()))
  assert "PADTO" not in ",".join(map(str, heuristic_opts(kernel, avx512)))  # 196 rows: tiles of 4
  f, x = gemm(37, 16, 45), _inputs(37, 16, 45)  # the portable build: 45 columns -> 48 (8 lanes), 37 rows -> 40 (8 rows)
  (tmp_path / "g.uop").write_text(f.text())
  kernel = next(iter(kernels_of(f.text(), target_caps("c")).values()))
  assert ",".join(map(str, heuristic_opts(kernel, target_caps("c")))).startswith("PADTO(1,8,8),SPLIT(1,8,u),PADTO(0,8,8),")
  _check_gemm(run_file(tmp_path / "g.uop", target="c", inputs=x).arrays["c"], x["a"], x["b"])


def _scale(n: int, m: int) -> Func:
  f = Func("scale")
  x, out = f.param("x", (n, m)), f.param("out", (n, m), out=True)
  f.store(out, f.op("MUL", x, f.const(0.5)))
  return f


def test_a_ragged_elementwise_axis_is_padded_for_its_workgroups(tmp_path, monkeypatch):
  """An elementwise kernel over 50257 columns (a softmax's division once its reductions are their own kernels)
  had no divisor for its workgroup: one thread each. Padded to a multiple of 256: 64 threads of 4 lanes,
  the padded ones masked; 1000 columns (4 lanes x 250) and 4096 keep their own divisors (no PADTO)."""
  axes, opts = _heuristic(_scale(2, 50257))
  assert opts == "PADTO(1,256),SPLIT(1,4,u),SPLIT(1,64,l)", opts
  assert "PADTO" not in _heuristic(_scale(2, 4096))[1] and "PADTO" not in _heuristic(_scale(2, 997))[1]
  x = np.random.default_rng(1).standard_normal((2, 1289)).astype(np.float32)  # 1289 -> 1536: 19% more, masked
  assert _heuristic(_scale(2, 1289))[1].startswith("PADTO(1,256),")
  np.testing.assert_array_equal(emulated(tmp_path, monkeypatch, _scale(2, 1289), {"x": x}, None)["out"], x * np.float32(0.5))
