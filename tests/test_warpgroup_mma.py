"""Warpgroup MMAs (uopc/stages/warpgroup_mma.py, uopc/targets/cuda/ptx_wgmma.py): a build whose every arch
is sm_90a puts large half-precision gemms on TC's warpgroup tile and replaces each block's WMMAs of a k
step by one `wgmma.mma_async` that reads the staged LOCAL tiles through matrix descriptors; other builds
and kernels that do not fit keep mma.sync. Here: which kernels get them, the PTX (FileCheck) and ptxas
for sm_90a; on an NVIDIA Hopper GPU the results against numpy (skipped elsewhere: the emulator runs the
mma.sync form of the same tile, test_staged_warpgroup_tile_in_the_emulator)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpu_samples import call
from test_cuda_gpu import gpu  # noqa: F401 (a fixture)
from test_cuda_ptx import filecheck, needs_ptxas, ptxas_accepts
from test_group_reduce import emulated
from test_optimize import kernels_of, program
from test_tc_staging import transposed_a
from test_tensor_cores import assert_gemm_relu, gemm_relu, inputs
from uopc.driver import BuildOptions, build
from uopc.frontend import load_module
from uopc.dtype import AddrSpace
from uopc.ops import Ops
from uopc.pipeline import compile_module
from uopc.stages.optimize import optimize, parse_opts, parse_schedule, target_caps
from uopc.stages.warpgroup_mma import warpgroup_arg

HOPPER = target_caps("cuda", None, ("sm_90a",))
WARPGROUP = "TC(2,-1,1,9)"  # TC's warpgroup tile, staged


def _wmmas(f, caps=HOPPER, opts: str | None = None) -> list:
  kernel = next(iter(kernels_of(f.text(), caps).values()))
  sink = optimize(kernel, "k", caps, pinned=parse_opts(opts) if opts else None).sink
  return [u for u in sink.toposort() if u.op is Ops.WMMA]


def test_caps_need_every_arch_sm_90a():
  assert HOPPER.warpgroup_mma
  assert not any(target_caps("cuda", None, archs).warpgroup_mma for archs in ((), ("sm_90",), ("sm_90a", "sm_80"), ("sm_100a",)))


def test_large_gemm_gets_one_warpgroup_mma_per_block_and_k_step():
  """2048 x 2048: 128 x 128 workgroup tiles (256 of them), 2 blocks of 64 rows x 4 k steps of 16 an iteration."""
  wmmas = _wmmas(gemm_relu(2048, 256, 2048, "f16"))
  specs = {warpgroup_arg(u.arg) for u in wmmas}
  assert len(wmmas) == 8 and None not in specs and len(specs) == 1
  spec = specs.pop()
  assert spec.pending == 0  # 3 stages of 32 KiB: two workgroups a multiprocessor
  # a: K-major rows of 64 halves (128-byte swizzle, 8 rows 1024 bytes apart); b: N-major, 2 panels of 64 columns
  assert (spec.shape, spec.a.mn_major, spec.a.swizzle, spec.a.stride) == ("m64n128k16", False, 128, 1024)
  assert (spec.b.mn_major, spec.b.swizzle, spec.b.leading, spec.b.stride) == (True, 128, 64 * 128, 1024)
  assert all(u.dtype.count == 64 for u in wmmas)


def test_the_largest_gemms_get_two_warpgroups_of_64_x_256():
  """4096 x 4096: 512 workgroup tiles of 128 x 256 (tile 10), 4 stages of 48 KiB (one workgroup a
  multiprocessor), whose MMAs may still run while the next iteration starts."""
  from uopc.stages.optimize import format_axes
  kernel = next(iter(kernels_of(gemm_relu(4096, 256, 4096, "f16").text(), HOPPER).values()))
  schedule = optimize(kernel, "k", HOPPER)
  wmmas = [u for u in schedule.sink.toposort() if u.op is Ops.WMMA]
  assert format_axes(schedule.sink) == "g32 l8 g16 R4 w32" and str(schedule.opts[0]) == "TC(2,-1,1,10)"
  assert {(warpgroup_arg(u.arg).shape, warpgroup_arg(u.arg).pending) for u in wmmas} == {("m64n256k16", 1)} and len(wmmas) == 4
  local = [u.dtype.size for u in schedule.sink.toposort() if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.LOCAL]
  assert sum(local) * 2 == 4 * 48 * 1024


@pytest.mark.parametrize("f, why", [(gemm_relu(256, 64, 256, "f16"), "4 workgroup tiles: too few"),
                                    (gemm_relu(2048, 64, 2048, "f16"), "not sm_90a")])
def test_other_gemms_keep_mma_sync(f, why):
  caps = target_caps("cuda", None, ("sm_90",)) if why == "not sm_90a" else HOPPER
  assert all(warpgroup_arg(u.arg) is None for u in _wmmas(f, caps)), why


@pytest.mark.parametrize("m, k, n, wgmma", [(512, 4096, 4096, True),    # 128 workgroups x 64 iterations
                                             (256, 4096, 4096, True),    # 64 x 64
                                             (1024, 1024, 1024, False),  # 64 x 16: too short
                                             (2048, 256, 1024, False),   # 128 x 4
                                             (256, 8192, 2048, False)])  # 32 workgroups: too few
def test_fewer_workgroups_take_the_warpgroup_tile_where_their_reductions_are_long(m, k, n, wgmma):
  """Below 132 workgroup tiles, tile 9 where at least 64 workgroups of at least 2048 iterations in all."""
  specs = [warpgroup_arg(u.arg) for u in _wmmas(gemm_relu(m, k, n, "f16"))]
  assert specs and all((s is not None) == wgmma for s in specs)
  if wgmma: assert {s.shape for s in specs} == {"m64n128k16"}


def test_the_warpgroup_tile_without_staging_keeps_mma_sync():
  assert all(warpgroup_arg(u.arg) is None for u in _wmmas(gemm_relu(128, 64, 128, "f16"), HOPPER, "TC(2,-1,0,9)"))


@pytest.mark.parametrize("layout", ["row", "a-transposed"])
def test_staged_warpgroup_tile_in_the_emulator(tmp_path, monkeypatch, layout):
  """The tile's mma.sync form (any arch but sm_90a) is the same arithmetic as the wgmma one: bit for bit
  equal to the unstaged kernel, within the float32-sum bound of numpy."""
  m, k, n = 128, 64, 256
  f = gemm_relu(m, k, n, "f16") if layout == "row" else transposed_a(m, k, n, "f16")
  x = inputs(m, k, n, "f16")
  if layout != "row": x["a"] = np.ascontiguousarray(x["a"].T)
  (tmp_path / "a").mkdir(); (tmp_path / "b").mkdir()  # noqa: E702
  staged = emulated(tmp_path / "a", monkeypatch, f, x, WARPGROUP)["out"]
  plain = emulated(tmp_path / "b", monkeypatch, f, x, "TC(2,-1,0,9)")["out"]
  assert np.array_equal(staged.view(np.uint32), plain.view(np.uint32))
  if layout != "row": x["a"] = np.ascontiguousarray(x["a"].T)
  assert_gemm_relu(staged, x)


def _program() -> str:
  return program([gemm_relu(128, 64, 256, "f16"), gemm_relu(256, 96, 128, "bf16"), transposed_a(128, 64, 128, "f16")])


def _schedule() -> dict:
  return parse_schedule([f"wg__{name}_k0:{WARPGROUP}" for name in ("tc_f16", "tc_bf16", "tct_f16")])


@needs_ptxas
def test_ptxas_accepts_sm_90a_kernels(tmp_path):
  (tmp_path / "wg.uop").write_text(_program())
  build(tmp_path / "wg.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", emit=("ptx",), archs=("sm_90a",), schedule=_schedule()))
  ptx = (tmp_path / "out" / "wg.ptx").read_text()
  filecheck(ptx, """
    CHECK: .version 8.0
    CHECK-NEXT: .target sm_90a
    CHECK: .shared .align 1024 .b8
    CHECK: cp.async.wait_group {{[0-9]+}}
    CHECK-NEXT: fence.proxy.async.shared::cta
    CHECK-NEXT: bar.sync 0
    CHECK: wgmma.fence.sync.aligned
    CHECK-NEXT: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%f{{[0-9]+}},
    CHECK-SAME: }, %rd{{[0-9]+}}, %rd{{[0-9]+}}, %p{{[0-9]+}}, 1, 1, 0, 1
    CHECK: wgmma.commit_group.sync.aligned
    CHECK-NEXT: wgmma.wait_group.sync.aligned 0
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{.*}}, 1, 1, 1, 1
    """, tmp_path)
  ptxas_accepts(ptx, "sm_90a", tmp_path)


TWO_GROUPS = "TC(2,-1,3,10)"  # two warpgroups of 64 x 256, 3 stages of 48 KiB: the MMAs run into the next iteration


@pytest.mark.gpu
@pytest.mark.parametrize("tile", ["one warpgroup", "two warpgroups"])
def test_warpgroup_mma_gemms_on_a_hopper_gpu(gpu, tmp_path, tile):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  if gpu.compute_capability() != (9, 0): pytest.skip("wgmma needs an sm_90 GPU")
  if tile == "one warpgroup":
    text, schedule, lib_name = _program(), _schedule(), "wg"
    cases = (("tc_f16", (128, 64, 256), "f16"), ("tc_bf16", (256, 96, 128), "bf16"), ("tct_f16", (128, 64, 128), "f16"))
  else:
    text, lib_name = program([gemm_relu(128, 256, 256, "f16"), gemm_relu(256, 320, 256, "bf16")]), "wg2"
    schedule = parse_schedule([f"wg2__tc_{d}_k0:{TWO_GROUPS}" for d in ("f16", "bf16")])
    cases = (("tc_f16", (128, 256, 256), "f16"), ("tc_bf16", (256, 320, 256), "bf16"))
  (tmp_path / f"{lib_name}.uop").write_text(text)
  paths = build(tmp_path / f"{lib_name}.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", archs=("sm_90a",), schedule=schedule))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  module = load_module(str(tmp_path / f"{lib_name}.uop"))
  entries = {e.name: e for e in compile_module(module, "cuda", lib_name, archs=("sm_90a",), schedule=schedule)}
  assert all(k.wgmma and "wgmma.mma_async" in k.source for e in entries.values() for k in e.kernels)
  for name, (m, k, n), dtype in cases:
    x = inputs(m, k, n, dtype, seed=2)
    a = np.ascontiguousarray(x["a"].T) if name == "tct_f16" else x["a"]
    got = call(gpu, lib, lib_name, entries[name], [a, x["b"], x["bias"], np.zeros((m, n), np.float32)])[3]
    assert_gemm_relu(got, x)


SWEEP = [("f16", (2048, 512, 2048), False), ("bf16", (4096, 256, 4096), False), ("f16", (1536, 1024, 2048), False),
         ("f16", (4096, 512, 4096), True), ("bf16", (2048, 96, 4096), False), ("f16", (1024, 256, 1024), False)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, shape, transposed", SWEEP)
def test_sm_90a_heuristics_on_a_hopper_gpu(gpu, tmp_path, dtype, shape, transposed):  # noqa: F811
  """The sm_90a heuristics' own choice (tile 10, tile 9, or mma.sync for the 64 workgroups of 1024 x 1024)."""
  if gpu.compute_capability() != (9, 0): pytest.skip("wgmma needs an sm_90 GPU")
  m, k, n = shape
  f = transposed_a(m, k, n, dtype) if transposed else gemm_relu(m, k, n, dtype)
  (tmp_path / "s.uop").write_text(program([f]))
  paths = build(tmp_path / "s.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", archs=("sm_90a",)))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  entry = next(e for e in compile_module(load_module(str(tmp_path / "s.uop")), "cuda", "s", archs=("sm_90a",)) if e.name == f.name)
  assert any(k.wgmma for k in entry.kernels) == (m * n >= 132 * 128 * 128)  # SWEEP's: 64 workgroups of 4 iterations keep mma.sync
  x = inputs(m, k, n, dtype, seed=5)
  a = np.ascontiguousarray(x["a"].T) if transposed else x["a"]
  assert_gemm_relu(call(gpu, lib, "s", entry, [a, x["b"], x["bias"], np.zeros((m, n), np.float32)])[3], x)
