"""Dynamic shared memory on -t cuda, without a GPU: the tensor-core pipeline's pinned 4 stages and
workgroup tiles of 2 x 2, 2 x 4 and 4 x 2 warps (TC_TILES 6..8) need more than the 48 KiB of static
shared memory; the PTX renderer then puts the kernel's LOCAL buffers in the module's one `.extern
.shared` array (ptxas accepts it for sm_80 and sm_90), the launcher opts each such kernel in once
(cuFuncSetAttribute, checked against a fake driver that can refuse) and passes the bytes to
cuLaunchKernel; kernels within 48 KiB keep their static arrays and their launchers have neither. The
budget per arch comes from the cuda Target (the least of the build's archs); the emulator runs the
staged gemms bit for bit like their unstaged twins, within the float32-sum bound of numpy's."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from fake_cuda import build_fakes, call  # noqa: E402
from test_cuda_gpu import gpu  # noqa: E402,F401 (a fixture)
from test_cuda_ptx import needs_ptxas, ptxas_accepts  # noqa: E402
from test_group_reduce import emulated  # noqa: E402
from test_optimize import program  # noqa: E402
from test_tensor_cores import assert_gemm_relu, gemm_relu, inputs  # noqa: E402

from uopc.diagnostics import CompileError  # noqa: E402
from uopc.driver import BuildOptions, build  # noqa: E402
from uopc.stages.optimize import parse_opts, parse_schedule, target_caps  # noqa: E402

EXTERN = ".extern .shared .align 16 .b8 uopc_dynamic_shared[];"
KERNEL = "tc__tc_f16_k0"  # the gemm's kernel in a library named tc
M = K = N = 256
# opts: (the bytes of a's LOCAL buffer and of b's: stages x tile x 2, the wait that leaves stages - 2 groups in flight)
PINS = {"TC(2,-1,4,7)": (4 * 128 * 32 * 2, 4 * 32 * 256 * 2, 2), "TC(2,-1,4,8)": (4 * 256 * 32 * 2, 4 * 32 * 128 * 2, 2),
        "TC(2,-1,4,6)": (4 * 128 * 32 * 2, 4 * 32 * 128 * 2, 2), "TC(2,-1,3,7)": (3 * 128 * 32 * 2, 3 * 32 * 256 * 2, 1)}


def _build(tmp_path: pathlib.Path, opts: str | None, archs: tuple[str, ...] = (), emit=("ptx",), m: int = M, k: int = K, n: int = N):
  """The f16 gemm built with `opts` pinned (None: the heuristics): (its PTX, its launcher's C or None)."""
  tmp_path.mkdir(exist_ok=True)
  (tmp_path / "tc.uop").write_text(program([gemm_relu(m, k, n, "f16")]))
  out = tmp_path / "out"
  build(tmp_path / "tc.uop", BuildOptions(target="cuda", out_dir=out, emit=emit, archs=archs,
                                          schedule=parse_schedule([f"{KERNEL}:{opts}"]) if opts else None))
  source = out / "tc_cuda.c"
  return (out / "tc.ptx").read_text(), source.read_text() if source.exists() else None


def test_shared_memory_budget_is_the_least_of_the_builds_archs():
  kib = 1024
  assert target_caps("cuda", archs=("sm_80",)).local_bytes == 163 * kib
  assert target_caps("cuda", archs=("sm_90a",)).local_bytes == 227 * kib
  assert target_caps("cuda", archs=("sm_80", "sm_86")).local_bytes == 99 * kib
  assert target_caps("cuda", archs=("sm_89", "sm_90")).local_bytes == 99 * kib
  assert target_caps("cuda", archs=("sm_80", "sm_120")).local_bytes == 48 * kib  # an arch it does not know: the static 48 KiB
  assert target_caps("cuda").local_bytes == 163 * kib  # the default archs, sm_80 and sm_90a
  assert target_caps("amd").local_bytes == target_caps("c").local_bytes == 48 * kib


@pytest.mark.parametrize("opts", list(PINS))
def test_past_48_kib_the_local_buffers_are_one_dynamic_array(tmp_path, opts):
  ptx, _ = _build(tmp_path, opts)
  a_bytes, b_bytes, wait = PINS[opts]
  nbytes = a_bytes + b_bytes
  assert nbytes > 48 * 1024
  assert ptx.count(EXTERN) == 1 and ".shared .align 16 .b8 temp" not in ptx
  assert f"cp.async.wait_group {wait};" in ptx
  # a's buffer at offset 0, b's right after it; together the launch's bytes
  bases = re.findall(r"mov\.u64 (%rd\d+), uopc_dynamic_shared;\n(?:  add\.s64 %rd\d+, (%rd\d+), (\d+);)?", ptx)
  assert [(base == src if src else True, int(off or 0)) for base, src, off in bases] == [(True, 0), (True, a_bytes)]
  from uopc.frontend import parse_source
  from uopc.pipeline import compile_module
  module = parse_source((tmp_path / "tc.uop").read_text(), "tc.uop")
  (kernel,) = compile_module(module, "cuda", "tc", schedule=parse_schedule([f"{KERNEL}:{opts}"]))[0].kernels
  assert kernel.shared_bytes == nbytes


def test_within_48_kib_the_arrays_stay_static(tmp_path):
  """The heuristics' 128 x 128 workgroup tile in 3 stages fills exactly 48 KiB: static, as before."""
  ptx, _ = _build(tmp_path, None, m=2048, k=64, n=2048)
  assert "uopc_dynamic_shared" not in ptx and ".extern" not in ptx
  assert sorted(line.strip() for line in ptx.splitlines() if ".shared .align" in line) == \
    [".shared .align 16 .b8 temp0[24576];", ".shared .align 16 .b8 temp1[24576];"]


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("opts", ["TC(2,-1,4,7)", "TC(2,-1,4,8)"])
def test_ptxas_accepts_dynamic_shared_memory(tmp_path, arch, opts):
  ptx, _ = _build(tmp_path, opts, archs=(arch,))
  assert EXTERN in ptx and "ldmatrix.sync.aligned" in ptx and "cp.async.cg.shared.global" in ptx
  ptxas_accepts(ptx, arch, tmp_path)


def test_a_pin_past_the_archs_budget_is_refused_with_why(tmp_path):
  _build(tmp_path / "a", "TC(2,-1,4,7)", archs=("sm_86",))  # 96 KiB: within sm_86's 99
  with pytest.raises(CompileError, match="must fit 48 KiB of LOCAL memory, the least of the build's archs"):
    _build(tmp_path / "b", "TC(2,-1,4,6)", archs=("sm_80", "sm_120"))  # 64 KiB; sm_120 is not known to give more than 48


@pytest.mark.parametrize("opts", ["TC(2,-1,4,7)", "TC(2,-1,4,8)", "TC(2,-1,4,6)"])
def test_emulated_4_stage_workgroup_tiles_match_the_unstaged_gemm_and_numpy(tmp_path, monkeypatch, opts):
  m, k, n = 256, 160, 256  # 5 iterations of 32 along k: 4 stages have 3 in flight, the last ones read past the end (zeros)
  f, x = gemm_relu(m, k, n, "f16"), inputs(m, k, n, "f16")
  (tmp_path / "a").mkdir(); (tmp_path / "b").mkdir()  # noqa: E702
  got = emulated(tmp_path / "a", monkeypatch, f, x, opts)["out"]
  ref = emulated(tmp_path / "b", monkeypatch, f, x, opts.replace(",4,", ",0,"))["out"]  # the same warps, fragments from global memory
  assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
  assert_gemm_relu(got, x)


def test_emulated_4_stage_workgroup_tile_of_a_k_major_bfloat16_operand(tmp_path, monkeypatch):
  from test_tc_staging import transposed_a
  m, k, n = 256, 128, 256
  f, x = transposed_a(m, k, n, "bf16"), inputs(m, k, n, "bf16")
  at = dict(x, a=np.ascontiguousarray(x["a"].T))  # the program reads a stored k-major
  (tmp_path / "a").mkdir(); (tmp_path / "b").mkdir()  # noqa: E702
  got = emulated(tmp_path / "a", monkeypatch, f, at, "TC(2,-1,4,8)")["out"]
  ref = emulated(tmp_path / "b", monkeypatch, f, at, "TC(2,-1,0,8)")["out"]
  assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
  assert_gemm_relu(got, x)


def test_tc_pins_4_stages_and_workgroup_tiles():
  from uopc.stages.opts import TC_TILES, tile_name
  assert str(parse_opts("TC(2,-1,4,7)")[0]) == "TC(2,-1,4,7)"
  assert [tile_name(i) for i in (1, 6, 7, 8)] == ["4 x 8", "4 x 8 (2 x 2 warps)", "4 x 8 (2 x 4 warps)", "4 x 8 (4 x 2 warps)"]
  assert TC_TILES[7] == (4, 8, 2, 4) and TC_TILES[8] == (4, 8, 4, 2)
  from test_tc_staging import _staged
  from uopc.stages.optimize import format_axes
  # 2 x 4 warps of 64 x 64: a 128 x 256 workgroup tile, 256 threads; the same as TC's 4 x 8 tile with LOCAL splits
  assert format_axes(_staged(gemm_relu(256, 256, 512, "f16"), "TC(2,-1,4,7)").sink) == "g2 l2 g2 l4 R8 w32"
  assert format_axes(_staged(gemm_relu(256, 256, 512, "f16"), "TC(2,-1,4,1),SPLIT(1,4,l),SPLIT(0,2,l)").sink) == "g2 l2 g2 l4 R8 w32"
  assert format_axes(_staged(gemm_relu(512, 256, 256, "f16"), "TC(2,-1,4,8)").sink) == "g2 l4 g2 l2 R8 w32"
  with pytest.raises(CompileError, match=r"tile 7 \(4 x 8 tensor-core tiles a warp, 2 x 4 warps: 128 x 256 a workgroup\) does not divide"):
    _staged(gemm_relu(256, 64, 128, "f16"), "TC(2,-1,1,7)")


def test_tile_6_in_3_stages_is_the_heuristics_kernel(tmp_path):
  """TC's own 2 x 2 warps are the LOCAL splits the heuristics make: the same PTX, byte for byte."""
  pinned, _ = _build(tmp_path / "pinned", "TC(2,-1,3,6)", m=2048, k=64, n=2048)
  chosen, _ = _build(tmp_path / "chosen", None, m=2048, k=64, n=2048)
  assert pinned == chosen and ".shared .align 16 .b8 temp0[24576];" in pinned


def test_tune_space_has_4_stages_and_the_workgroup_tiles():
  from test_optimize import GPU, kernels_of
  from uopc.stages.optimize import type_axes
  from uopc.tune.space import actions
  kernel = type_axes(next(iter(kernels_of(gemm_relu(256, 256, 256, "f16").text(), GPU).values())), GPU)
  tcs = {str(o) for o in actions(kernel, (), GPU) if o.op.name == "TC"}
  assert {"TC(2,-1,4)", "TC(2,-1,1,7)", "TC(2,-1,1,8)", "TC(2,-1,4,7)", "TC(2,-1,3,8)", "TC(2,-1,4,6)"} <= tcs


# ---- the launcher ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
  """The gemm's launcher library with dynamic shared memory and without, and the fake driver."""
  d = tmp_path_factory.mktemp("dynamic_shared")
  out = {}
  for name, opts in (("dynamic", "TC(2,-1,4,7)"), ("static", "TC(2,-1,2,7)")):
    _, source = _build(d / name, opts, emit=("ptx", "source", "so", "header"))
    out[name] = (d / name / "out" / "libtc.so", source)
  return {"fakes": build_fakes(d), "dir": d, **out}


def _call(libraries, which: str, env: dict | None = None) -> dict:
  # the fake runs no kernel: one element stands for each buffer
  return call(libraries["fakes"], libraries[which][0], "tc", "tc_f16", [([0], "uint16"), ([0], "uint16"), ([0], "float32"), ([0], "float32")],
              [7], nccl=False, env=env)


def test_launcher_opts_in_once_and_passes_the_bytes_to_each_launch(libraries):
  source = libraries["dynamic"][1]
  assert source.count("cuFuncSetAttribute") == 1 and "tc__shared_bytes[tc__NUM_KERNELS] = {98304}" in source
  got = _call(libraries, "dynamic")
  assert got["status"] == 0, got["message"]
  log = [x for x in got["log"] if x[0] in ("attribute", "launch", "shared")]
  assert log == [["attribute", KERNEL, 8, 98304], ["launch", KERNEL, 7, 0], ["shared", KERNEL, 98304]]


def test_a_gpu_without_that_much_shared_memory_is_a_clear_error(libraries):
  got = _call(libraries, "dynamic", {"FAKE_SHARED_MAX": str(64 * 1024)})
  assert got["status"] == 105 and "more shared memory per workgroup than this GPU gives" in got["message"]
  assert not [x for x in got["log"] if x[0] == "launch"]


def test_static_kernels_launch_as_before(libraries):
  source = libraries["static"][1]
  assert "FuncSetAttribute" not in source and "shared_bytes" not in source
  assert "tc__launch(functions[0], grid, block, 0, stream, args)" in source
  got = _call(libraries, "static")
  assert got["status"] == 0 and [x[0] for x in got["log"] if x[0] in ("attribute", "launch", "shared")] == ["launch"]


@pytest.mark.parametrize("which", ["dynamic", "static"])
def test_the_launcher_compiles_cleanly(libraries, which):
  source = libraries["dir"] / which / "out" / "tc_cuda.c"
  for std in ("c99", "c11"):
    done = subprocess.run(["cc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-fPIC", "-shared", "-fvisibility=hidden",
                           str(source), "-o", str(source.parent / f"check_{std}.so"), "-ldl", "-lpthread"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:4000]


# ---- on an NVIDIA GPU (skips without one) ----------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("opts", ["TC(2,-1,4,7)", "TC(2,-1,4,8)", "TC(2,-1,4,6)", "TC(2,-1,2,7)"])
def test_dynamic_shared_gemms_on_a_cuda_gpu(gpu, tmp_path, opts):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  import ctypes
  from gpu_samples import call as gpu_call
  from uopc.frontend import load_module
  from uopc.pipeline import compile_module
  m, k, n = 512, 288, 512  # 9 iterations of 32: every stage is refilled, the last copies read past the end
  (tmp_path / "tc.uop").write_text(program([gemm_relu(m, k, n, "f16")]))
  schedule = parse_schedule([f"{KERNEL}:{opts}"])
  paths = build(tmp_path / "tc.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", schedule=schedule))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  (entry,) = compile_module(load_module(str(tmp_path / "tc.uop")), "cuda", "tc", schedule=schedule)
  x = inputs(m, k, n, "f16", seed=2)
  got = gpu_call(gpu, lib, "tc", entry, [x["a"], x["b"], x["bias"], np.zeros((m, n), np.float32)])[3]
  assert_gemm_relu(got, x)
