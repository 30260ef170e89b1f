"""GROUP_REDUCE on GPU targets: a reduce axis shared by a workgroup's threads, their partials combined
through LOCAL memory. The lowered kernels run in the reference emulator (workgroups in lock step,
missing BARRIERs and uninitialised LOCAL reads are errors), and the targets' tools accept them.

Results: integer ADD and float MAX must equal numpy's exactly (their order does not matter); float
ADD within float32 tolerance of a float64 sum, since the threads' partials change the order of the
additions (thread t sums elements t, t + k, ... then the partials are added in thread order)."""
from __future__ import annotations

import ctypes
import functools
import subprocess
from pathlib import Path

import numpy as np
import pytest

import uopc.pipeline
import uopc.stages.optimize
from uopc.stages.optimize import optimize as real_optimize
from test_amd_codeobj import LLVM_MC, needs_llvm_mc
from gpu_samples import call
from test_cuda_gpu import gpu  # noqa: F401 (a fixture)
from test_cuda_ptx import needs_ptxas, ptxas_accepts
from test_metal import metal_syntax_errors, needs_clang
from test_optimize import GPU, C, kernels_of, program, reduction
from test_tensor_programs import Func, gemm, layernorm, softmax
from uopc.diagnostics import CompileError
from uopc.driver import BuildOptions, build
from uopc.dtype import AddrSpace
from uopc.frontend import load_module
from uopc.ops import AxisType, Ops
from uopc.pipeline import compile_module
from uopc.run import run_file
from uopc.stages.expand import expand
from uopc.stages.optimize import KernelSchedule, apply_opts, heuristic_opts, parse_opts, parse_schedule, target_caps
from uopc.targets.amd.codeobj import code_object


def row_reduce(rows: int, n: int, op: str, dtype: str = "f32") -> Func:
  f = Func(f"rows_{op.lower()}")
  x, out = f.param("x", (rows, n), dtype), f.param("out", (rows, 1), dtype, out=True)
  f.store(out, f.reduce(x, op, (1,)))
  return f


def emulated(tmp_path, monkeypatch, f: Func, inputs: dict[str, np.ndarray], opts: str | None, target: str = "cuda",
             fp_contract: bool | None = None) -> dict:
  """f's buffers after its kernels ran in the emulator as -t target lowers them, with `opts` pinned on
  its first kernel (None: the heuristics); `fp_contract` as `uopc run --fp-contract` (None: the target's default)."""
  schedule = parse_schedule([f"{f.name}_k0:{opts}"]) if opts is not None else None
  used = []
  def optimize(sink, name, caps, pinned=None, relocate=lambda old, new: None):
    used.append(pinned)
    return real_optimize(sink, name, caps, pinned, relocate)
  monkeypatch.setattr(uopc.pipeline, "pipeline", functools.partial(uopc.pipeline.pipeline, schedule=schedule))
  monkeypatch.setattr(uopc.stages.optimize, "optimize", optimize)
  path = tmp_path / f"{f.name}.uop"
  path.write_text(f.text())
  arrays = run_file(path, target=target, inputs=inputs, emulated=True, fp_contract=fp_contract).arrays
  assert schedule is None or used[0] == schedule[f"{f.name}_k0"], "the pinned opts did not reach the kernel"
  return arrays


def lowered(f: Func, opts: str, caps=GPU):
  kernel = next(iter(kernels_of(f.text(), caps).values()))
  parsed = parse_opts(opts)
  return expand(KernelSchedule(apply_opts(kernel, parsed, caps, "k"), parsed, caps))


# ---- the heuristics --------------------------------------------------------------------------------------


def _heuristics(f: Func, caps=GPU) -> list[str]:
  return [",".join(map(str, heuristic_opts(k, caps))) for k in kernels_of(f.text(), caps).values()]


def test_gpu_heuristics_share_long_row_reductions_across_a_workgroup():
  assert _heuristics(row_reduce(4096, 4096, "ADD")) == ["SPLIT(1,4,r),SPLIT(1,256,G)"]  # runs of 4: one 16-byte load
  # shorter rows: as many threads as read one 16-byte run each (fewer partials, one load per thread)
  assert _heuristics(row_reduce(64, 512, "MAX")) == ["SPLIT(1,4,r),SPLIT(1,128,G)"]
  assert _heuristics(row_reduce(64, 256, "MAX")) == ["SPLIT(1,4,r),SPLIT(1,64,G)"]
  # fused softmax (axes g4096 L4096 R4096 R4096): its max and sum loops and its division loop share the threads
  fused = "SPLIT(3,4,r),SPLIT(3,256,G),SPLIT(2,4,r),SPLIT(2,256,G),SPLIT(1,4,u),SPLIT(1,256,l)"
  assert _heuristics(softmax(4096, 4096)) == [fused]
  assert _heuristics(layernorm(64, 1024)) == [fused]


def test_gpu_heuristics_keep_threads_per_output_where_outputs_read_contiguously_or_reductions_are_short():
  # 4096 outputs are too few threads for the GPU, so 32 threads share each output's reduction
  # (uopc.stages.gpu_schedule: split-k), not a workgroup per row; a is read along k, so the 32 are the
  # split's inner part (consecutive elements of a each iteration), 4 threads along n
  assert _heuristics(gemm(64, 1024, 64)) == ["SPLIT(1,2,u),SPLIT(3,32,G),SPLIT(1,4,l),SPLIT(4,4,r)"]
  # column max: threads along the columns (coalesced), 16 of them sharing each column's 1024 rows in blocks
  assert _heuristics(reduction(1024, 512, "MAX", 0)) == ["SPLIT(1,16,G,top),SPLIT(0,8,l),SPLIT(3,4,r)"]
  # too short for a workgroup per row; 64 outputs are few threads and nothing is tiled, so 16 share each
  # row, 8 consecutive elements (two 16-byte loads) each, 8 rows a workgroup
  assert _heuristics(row_reduce(64, 128, "ADD")) == ["SPLIT(1,16,G,top),SPLIT(0,8,l),SPLIT(3,4,r)"]


# ---- the opt and its refusals --------------------------------------------------------------------------


@pytest.mark.parametrize("opts, caps, message", [
  ("SPLIT(1,8,G),SPLIT(1,2,G)", C, "axis 1 is nested with a GROUP_REDUCE axis"),  # CPU lanes: tests/test_partials.py
  ("SPLIT(0,2,G)", GPU, "GROUP_REDUCE (G) cannot be split from GLOBAL (g); only from R"),
  ("SPLIT(1,8,G),SPLIT(1,2,G)", GPU, "axis 1 is nested with a GROUP_REDUCE axis"),
  ("SPLIT(0,128,l),SPLIT(2,4,G)", GPU, "more than 256 threads in a workgroup"),
  ("SPLIT(1,128,G),SPLIT(0,4,l)", GPU, "more than 256 threads in a workgroup"),
])
def test_group_reduce_refusals_name_kernel_and_opt(opts, caps, message):
  kernel = next(iter(kernels_of(row_reduce(512, 512, "ADD").text(), caps).values()))
  with pytest.raises(CompileError) as e:
    apply_opts(kernel, parse_opts(opts), caps, "t__rows_add_k0")
  msg = e.value.diagnostics[0].message
  assert msg.startswith("kernel t__rows_add_k0: cannot apply ") and message in msg, msg


def test_lowering_combines_partials_through_local_memory_in_two_rounds():
  out = lowered(row_reduce(8, 512, "ADD"), "SPLIT(1,64,G)")
  nodes = out.toposort()
  assert sorted(u.arg for u in nodes if u.op is Ops.SPECIAL) == ["gidx0", "lidx0"]
  local = [u for u in nodes if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.LOCAL]
  assert sorted(b.dtype.size for b in local) == [8, 64]            # one partial per thread, one per group of 8
  assert sum(u.op is Ops.BARRIER for u in nodes) == 3
  assert not [u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.GROUP_REDUCE]
  stores = [u for u in nodes if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM]
  assert len(stores) == 1 and len(stores[0].src) == 3              # the row's sum: stored by thread 0 alone


def test_upcast_outputs_share_one_local_buffer_lane_by_lane():
  out = lowered(row_reduce(8, 512, "ADD"), "SPLIT(1,32,G),SPLIT(0,4,u)")
  local = [u for u in out.toposort() if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.LOCAL]
  assert sorted(b.dtype.size for b in local) == [4 * 8, 4 * 32]  # the partials, then 8 groups of 4 threads
  assert {u.src[1].dtype.count for u in out.toposort() if u.op is Ops.STORE and u.src[0].src[0] in local} == {4}  # one vector store


# ---- results in the emulator --------------------------------------------------------------------------

OPTS = [None, "SPLIT(1,32,G)", "SPLIT(1,32,G,top)", "SPLIT(1,16,G),SPLIT(0,4,u)", "SPLIT(1,16,G),SPLIT(1,4,r)",
        "SPLIT(1,64,G),SPLIT(2,2,r)", "SPLIT(1,8,G),SPLIT(0,2,l)", "SPLIT(1,256,G)"]


@pytest.mark.parametrize("opts", OPTS)
def test_integer_sums_are_exact(tmp_path, monkeypatch, opts):
  x = np.random.default_rng(0).integers(-2**20, 2**20, (8, 512)).astype(np.int32)
  got = emulated(tmp_path, monkeypatch, row_reduce(8, 512, "ADD", "i32"), {"x": x}, opts)["out"]
  np.testing.assert_array_equal(got, x.sum(1, dtype=np.int32, keepdims=True))


@pytest.mark.parametrize("opts", OPTS)
def test_float_max_is_exact(tmp_path, monkeypatch, opts):
  x = np.random.default_rng(1).standard_normal((8, 512)).astype(np.float32)
  x[3] = -np.inf
  x[5, 17] = 1e30
  got = emulated(tmp_path, monkeypatch, row_reduce(8, 512, "MAX"), {"x": x}, opts)["out"]
  np.testing.assert_array_equal(got, x.max(1, keepdims=True))


@pytest.mark.parametrize("opts", OPTS[:4])
def test_float_sums_agree_within_float_tolerance(tmp_path, monkeypatch, opts):
  x = np.random.default_rng(2).standard_normal((8, 512)).astype(np.float32)
  got = emulated(tmp_path, monkeypatch, row_reduce(8, 512, "ADD"), {"x": x}, opts)["out"]
  np.testing.assert_allclose(got, x.astype(np.float64).sum(1, keepdims=True), rtol=0, atol=512 * 4 * np.finfo(np.float32).eps)


@pytest.mark.parametrize("target", ["cuda", "amd", "metal"])
def test_softmax_and_layernorm_with_the_heuristics_run_clean(tmp_path, monkeypatch, target):
  rng = np.random.default_rng(3)
  x = rng.standard_normal((4, 1024)).astype(np.float32)
  got = emulated(tmp_path, monkeypatch, softmax(4, 1024), {"x": x}, None, target)["out"]
  e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
  np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-9)
  g, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
  got = emulated(tmp_path, monkeypatch, layernorm(4, 1024), {"x": x, "gamma": g, "beta": b}, None, target)["out"]
  x64 = x.astype(np.float64)
  want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + b
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ---- the targets' tools accept the kernels -------------------------------------------------------------

WORKLOADS = program([softmax(64, 4096), row_reduce(64, 1024, "MAX", "i32"), row_reduce(16, 4096, "ADD", "f16")])


def _build(tmp_path, target: str, **kw) -> Path:
  (tmp_path / "g.uop").write_text(WORKLOADS)
  build(tmp_path / "g.uop", BuildOptions(target=target, out_dir=tmp_path / "out", **kw))
  return tmp_path / "out"


def test_workloads_use_group_reduce():
  text = "\n".join(_heuristics(f)[0] for f in (softmax(64, 4096), row_reduce(64, 1024, "MAX", "i32"), row_reduce(16, 4096, "ADD", "f16")))
  assert text.count("G)") == 4  # softmax: its max and its sum


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_group_reductions(tmp_path, arch):
  ptx = (_build(tmp_path, "cuda", emit=("ptx",)) / "g.ptx").read_text()
  assert "bar.sync" in ptx and ".shared" in ptx
  ptxas_accepts(ptx, arch, tmp_path)


@needs_llvm_mc
def test_llvm_mc_assembles_amd_group_reductions(tmp_path):
  (tmp_path / "g.uop").write_text(WORKLOADS)
  kernels = [k for e in compile_module(load_module(str(tmp_path / "g.uop")), "amd", "g") for k in e.kernels]
  asm, _ = code_object(kernels, "gfx90a", "g", 3)
  assert "s_barrier" in asm and "ds_" in asm
  done = subprocess.run([LLVM_MC.path, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx90a", "-filetype=obj", "-o", str(tmp_path / "k.o"), "-"],
                        input=asm, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[:4000]


@needs_clang
def test_metal_group_reductions_pass_clang(tmp_path):
  source = (_build(tmp_path, "metal", emit=("source",)) / "g.metal").read_text()
  assert "threadgroup_barrier" in source and "threadgroup " in source
  assert metal_syntax_errors(source) == ""


# ---- on an NVIDIA GPU (skips without one) ----------------------------------------------------------------


@pytest.mark.gpu
def test_group_reductions_on_a_cuda_gpu(gpu, tmp_path):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  (tmp_path / "g.uop").write_text(WORKLOADS)
  paths = build(tmp_path / "g.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out"))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  entries = {e.name: e for e in compile_module(load_module(str(tmp_path / "g.uop")), "cuda", "g")}
  rng = np.random.default_rng(4)
  x = rng.standard_normal((64, 4096)).astype(np.float32)
  got = call(gpu, lib, "g", entries["softmax"], [x, np.zeros_like(x)])[1]
  e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
  np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-9)
  xi = rng.integers(-2**31, 2**31 - 1, (64, 1024)).astype(np.int32)
  np.testing.assert_array_equal(call(gpu, lib, "g", entries["rows_max"], [xi, np.zeros((64, 1), np.int32)])[1], xi.max(1, keepdims=True))
  xh = rng.standard_normal((16, 4096)).astype(np.float16)
  got = call(gpu, lib, "g", entries["rows_add"], [xh, np.zeros((16, 1), np.float16)])[1]
  np.testing.assert_array_equal(got, _grouped_sum(xh, 256, 16, 4))  # runs of 4, 16 groups of 16 threads


def _fold_columns(x: np.ndarray) -> np.ndarray:
  total = x[:, :1]
  for t in range(1, x.shape[1]): total = total + x[:, t:t + 1]
  return total


def _grouped_sum(x: np.ndarray, k: int, b: int, run: int) -> np.ndarray:
  """Row sums in GROUP_REDUCE's order, each addition rounded to x's dtype: thread t adds its runs of
  `run` consecutive elements, those at (i * k + t) * run, for i = 0, 1, ..., in turn; the k partials,
  in groups of b consecutive threads, are added in thread order within each group, then the group
  sums in order."""
  runs = x.reshape(x.shape[0], -1, k, run)
  partial = np.zeros((x.shape[0], k), x.dtype)
  for i in range(runs.shape[1]):
    for r in range(run): partial = partial + runs[:, i, :, r]
  return _fold_columns(np.concatenate([_fold_columns(partial[:, g:g + b]) for g in range(0, k, b)], axis=1))


@pytest.mark.parametrize("op,n,opts", [("MAX", 1000, "SPLIT(0,4,r),SPLIT(0,250,G)"), ("ADD", 999, "SPLIT(0,111,G)"),
                                        ("MAX", 4093, "PADTO(0,1024),SPLIT(0,4,r),SPLIT(0,256,G)"), ("ADD", 1021, "PADTO(0,1024),SPLIT(0,4,r),SPLIT(0,256,G)"),
                                        ("ADD", 1018, "PADTO(0,1024),SPLIT(0,4,r),SPLIT(0,256,G)")])
def test_a_whole_tensor_reduction_of_odd_size_is_shared_by_a_workgroup(tmp_path, op, n, opts):
  """No output axis: the workgroup takes a divisor of the size (1000: 250 threads of one 16-byte run,
  999: 111 threads of 9 elements); a size with none from a warp up (a prime, twice a prime) is padded to
  one (PADTO) instead of running on one thread; the masked iterations leave the accumulator alone
  (all-negative values: a MAX must not see 0)."""
  from uopc.run import run_file
  from uopc.stages.optimize import heuristic_opts, target_caps
  text = (f'func r {{\n  %x = PARAM([{n}]) {{(0, "x")}} : f32\n  %out = PARAM([1]) {{(1, "out")}} : f32\n'
          f'  %s = REDUCE(%x) {{({op}, (0,))}}\n  STORE(%out, %s)\n}}\n')
  (tmp_path / "r.uop").write_text(text)
  x = -np.abs(np.random.default_rng(n).standard_normal(n).astype(np.float32)) - 1
  want = x.max() if op == "MAX" else x.astype(np.float64).sum()
  for target in ("cuda", "amd", "metal"):
    got = run_file(tmp_path / "r.uop", target=target, inputs={"x": x}, emulated=True).arrays["out"][0]
    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=target)
  from test_optimize import kernels_of
  (k,) = kernels_of(text, target_caps("cuda")).values()
  assert ",".join(map(str, heuristic_opts(k, target_caps("cuda")))) == opts
