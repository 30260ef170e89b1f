"""Tensor-core operands staged in LOCAL memory (uopc/stages/tc_staging.py): the staged kernel's shape
(LOCAL tiles of several stages filled by asynchronous 16-byte copies, one barrier per reduction
iteration, fragments as warp-wide matrix loads), its results in the
emulator (which reports races and missing barriers) bit for bit equal to the unstaged kernel's
(`...,NOLOCALS` keeps the same warps and WMMAs but reads the fragments from global memory) and
within the float32-sum bound of numpy's float64 gemm, for both operand layouts, and ptxas."""
from __future__ import annotations

import numpy as np
import pytest

from test_cuda_ptx import filecheck, needs_ptxas, ptxas_accepts
from test_group_reduce import emulated
from test_optimize import GPU, kernels_of, program
from test_tensor_cores import NP, assert_gemm_relu, gemm_relu, inputs
from test_tensor_programs import Func
from uopc.driver import BuildOptions, build
from uopc.dtype import AddrSpace
from uopc.ops import Ops
from uopc.stages.tensor_cores import ASYNC, LDMATRIX
from uopc.stages.optimize import heuristic_opts, optimize, parse_opts


WARPS = {(128, 128): "TC(2,-1),SPLIT(1,4,l),SPLIT(0,2,l)", (64, 96): "TC(2,-1),SPLIT(0,2,l)", (64, 64): "TC(2,-1),SPLIT(1,2,l)"}


def _staged(f: Func, opts: str | None = None):
  """The kernel optimized with `opts` (None: the heuristics)."""
  kernel = next(iter(kernels_of(f.text(), GPU).values()))
  return optimize(kernel, "k", GPU, pinned=parse_opts(opts) if opts else None)


def test_tensor_core_gemm_of_several_warps_stages_both_operands():
  schedule = _staged(gemm_relu(128, 64, 128, "f16"), WARPS[(128, 128)])
  nodes = schedule.sink.toposort()
  tiles = [u for u in nodes if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.LOCAL]
  # 3 stages of a: 64 rows (2 warps x 32) x 32 k (2 steps of 16); of b: 32 k x 128 columns (4 warps x 32); swizzled, unpadded
  assert sorted(t.dtype.size for t in tiles) == [3 * 64 * 32, 3 * 32 * 128]
  waits = [u for u in nodes if u.op is Ops.BARRIER]
  copies = [u for u in nodes if u.op is Ops.STORE and isinstance(u.arg, tuple) and u.arg[0] == ASYNC]
  # prologue: stages 0 and 1 (a: 1 copy a thread, b: 2), a commit group each; in the loop, one stage ahead
  # (zeros past the end); the wait leaves the next stage's group in flight
  assert len(copies) == 2 * 3 + 3 and [w.arg for w in waits] == [(ASYNC, 1)] and sum(c.arg[1] for c in copies) == 3
  assert all(c.src[1].op is Ops.LOAD and c.src[1].dtype.count == 8 and c.src[1].src[0].src[0].op is Ops.PARAM for c in copies)
  assert sum(len(c.src[1].src) == 3 for c in copies) == 3
  frag = {s for u in nodes if u.op is Ops.WMMA for s in u.src[:2]}
  # each fragment one warp-wide matrix load from its tile: LOAD(INDEX(AFTER(tile, barrier))), a's plain, b's transposed
  assert all(x.op is Ops.LOAD and x.arg[0] == LDMATRIX and x.src[0].src[0].src[0] in tiles for x in frag)
  a_tile = next(t for t in tiles if t.dtype.size == 3 * 64 * 32)
  assert {x.arg[1] for x in frag if x.src[0].src[0].src[0] is a_tile} == {False} and {x.arg[1] for x in frag if x.src[0].src[0].src[0] is not a_tile} == {True}


@pytest.mark.parametrize("text", ["TC(2,-1,0),SPLIT(1,4,l),SPLIT(0,2,l)", "TC(2,-1,0)", "TC(2),NOLOCALS"])
def test_stage_0_or_nolocals_keeps_operands_in_global_memory(text):
  kernel = next(iter(kernels_of(gemm_relu(128, 64, 128, "f16").text(), GPU).values()))
  sink = optimize(kernel, "k", GPU, pinned=parse_opts(text)).sink
  assert not any(u.op is Ops.BARRIER for u in sink.toposort())
  assert ",".join(map(str, parse_opts("TC(2,-1,1),TC(2,0,0)"))) == "TC(2,-1),TC(2,0,0)"


def transposed_a(m: int, k: int, n: int, dtype: str) -> Func:
  """out = max(float(at).T @ float(b) + bias, 0) with a stored k-major (at is K x M)."""
  f = Func(f"tct_{dtype}")
  at, b = f.param("a", (k, m), dtype), f.param("b", (k, n), dtype)
  bias, out = f.param("bias", (1, n)), f.param("out", (m, n), out=True)
  prod = f.matmul(f.cast(f.permute(at, (1, 0)), "f32"), f.cast(b, "f32"), m, k, n)
  f.store(out, f.op("MAX", f.op("ADD", prod, bias), f.const(0.0)))
  return f


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("layout", ["row", "a-transposed"])
@pytest.mark.parametrize("m, k, n", [(128, 64, 128), (64, 48, 96)], ids=["two-k-steps", "one-k-step"])
def test_staged_gemms_equal_unstaged_and_numpy(tmp_path, monkeypatch, dtype, layout, m, k, n):
  f = gemm_relu(m, k, n, dtype) if layout == "row" else transposed_a(m, k, n, dtype)
  x = inputs(m, k, n, dtype)
  if layout != "row": x["a"] = np.ascontiguousarray(x["a"].T)
  opts = WARPS[(m, n)]  # several warps per workgroup: they share the staged tiles
  (tmp_path / "staged").mkdir(); (tmp_path / "plain").mkdir()  # noqa: E702
  staged = emulated(tmp_path / "staged", monkeypatch, f, x, opts)["out"]
  plain = emulated(tmp_path / "plain", monkeypatch, f, x, opts.replace("TC(2,-1)", "TC(2,-1,0)"))["out"]
  assert np.array_equal(staged.view(np.uint32), plain.view(np.uint32))
  if layout != "row": x["a"] = np.ascontiguousarray(x["a"].T)
  assert_gemm_relu(staged, x)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_staged_kernels(tmp_path, arch):
  (tmp_path / "tc.uop").write_text(program([gemm_relu(128, 64, 128, "f16"), transposed_a(64, 64, 64, "bf16")]))
  build(tmp_path / "tc.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", emit=("ptx",)))
  ptx = (tmp_path / "out" / "tc.ptx").read_text()
  filecheck(ptx, """
    CHECK: .shared .align {{[0-9]+}} .b8
    CHECK: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16
    CHECK: cp.async.commit_group
    CHECK: cp.async.wait_group {{[0-9]+}}
    CHECK-NEXT: bar.sync 0
    CHECK: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16, %r{{[0-9]+}}
    CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, [%rd{{[0-9]+}}
    CHECK: ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r{{[0-9]+}}, %r{{[0-9]+}}}, [%rd{{[0-9]+}}
    CHECK: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
    """, tmp_path)
  ptxas_accepts(ptx, arch, tmp_path)


def test_small_gemms_keep_enough_workgroups():
  """Fewer warps per workgroup where 8 would leave fewer workgroups than the GPU has SMs."""
  from uopc.stages.optimize import format_axes
  assert format_axes(_staged(gemm_relu(256, 64, 256, "f16")).sink) == "g8 g8 R2 w32"  # 64 warp tiles: one warp each
  assert format_axes(_staged(gemm_relu(1024, 64, 1024, "f16")).sink) == "g32 g8 l4 R2 w32"  # 1024: 4 warps, 256 workgroups


def test_large_gemms_get_64x64_warp_tiles_and_2x2_warps():
  sink = _staged(gemm_relu(2048, 64, 2048, "f16")).sink
  from uopc.stages.optimize import format_axes
  assert format_axes(sink) == "g16 l2 g16 l2 R2 w32"  # 4 x 8 tiles of 16 x 8 per warp, 2 x 2 warps: 128 x 128 per workgroup
  assert sum(u.op is Ops.WMMA for u in sink.toposort()) == 64
  # 3 stages of 128 x 32 + 32 x 128 halves fill the 48 KiB; a thread copies 4 + 4 16-byte chunks per stage
  assert [u.arg for u in sink.toposort() if u.op is Ops.BARRIER] == [(ASYNC, 1)]


@pytest.mark.parametrize("archs, stages", [((), 4), (("sm_86",), 3)])
def test_long_reductions_get_4_stages_where_two_workgroups_still_fit(archs, stages):
  """The default archs (sm_80, sm_90: 163 KiB a workgroup at least) take 4 stages of the 128 x 128 tiles'
  16 KiB (64 KiB, dynamic shared memory), half of what the least arch gives; sm_86's 99 KiB does not hold
  two such workgroups, so the 3 stages that fit the static 48 KiB stay."""
  from uopc.stages.optimize import target_caps
  caps = target_caps("cuda", None, archs)
  kernel = next(iter(kernels_of(gemm_relu(2048, 256, 2048, "f16").text(), caps).values()))
  sink = optimize(kernel, "k", caps).sink
  assert [u.arg for u in sink.toposort() if u.op is Ops.BARRIER] == [(ASYNC, stages - 2)]
  local = [u.dtype.size for u in sink.toposort() if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.LOCAL]
  assert sum(local) * 2 == stages * 16 * 1024, local


def test_emulator_reports_reads_of_copies_not_waited_for(tmp_path, monkeypatch):
  """The same kernel with its wait leaving every copy in flight: the emulator refuses the fragment reads."""
  import uopc.stages.tc_staging as tc_staging
  from uopc.rewrite import substitute
  real = tc_staging.stage_operands
  def no_wait(sink, *args):
    out = real(sink, *args)
    return substitute(out, {u: u.replace(arg=(ASYNC, 99)) for u in out.toposort() if u.op is Ops.BARRIER})
  monkeypatch.setattr(tc_staging, "stage_operands", no_wait)
  with pytest.raises(Exception, match="which an asynchronous copy has not been waited for"):
    emulated(tmp_path, monkeypatch, gemm_relu(64, 64, 64, "f16"), inputs(64, 64, 64, "f16"), None)


@pytest.mark.parametrize("cols", [8, 16, 32, 64, 128, 256, 24])
@pytest.mark.parametrize("panels", [False, True])
def test_tile_layout_is_a_bijection_and_8_rows_of_a_chunk_hit_8_bank_groups(cols, panels):
  """Swizzled rows fill the tile densely; with panels (warpgroup MMAs) rows past 128 bytes are cut into
  128-byte panels stored one after the other, each 8 rows of a panel one 1024-byte block."""
  from uopc.dtype import dtypes
  from uopc.ops import AxisType
  from uopc.stages.tc_staging import _Layout, _value
  from uopc.uop import UOp
  rows = 16
  lay = _Layout(rows, cols, 8, 2, panels)
  r, c = (UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (i, AxisType.LOOP)) for i, n in enumerate((rows, cols)))
  at = lay.at(r, c)
  places = {(i, j): _value(at, {r: i, c: j}) for i in range(rows) for j in range(cols)}
  assert sorted(places.values()) == list(range(rows * cols)) if lay.swizzled else len(set(places.values())) == rows * cols
  assert lay.swizzled == (cols != 24) and lay.panels == (panels and cols > 64 and lay.swizzled)
  if lay.panels:
    assert all(places[(i, j)] // (64 * 8) == (j // 64) * rows // 8 + i // 8 for (i, j) in places)
  for r0 in range(rows - 7 if lay.swizzled else 0):
    for j in range(0, cols, 8):  # 16-byte chunks of f16: bank group = (byte address // 16) % 8
      assert len({places[(r0 + i, j)] * 2 // 16 % 8 for i in range(8)}) == 8


def test_stages_and_warp_tile_are_pinned_by_tc_arguments():
  """TC(axis, tc, stages, tile): 2 stages instead of the 3 that fit, a 1 x 1 warp tile instead of 2 x 4;
  a stage count that cannot fit, or a tile that does not divide, is refused with why."""
  import pytest as _pytest
  from uopc.diagnostics import CompileError
  from uopc.stages.optimize import format_axes
  f = gemm_relu(128, 64, 128, "f16")
  sink = _staged(f, "TC(2,-1,2,4)").sink
  assert format_axes(sink) == "g8 g16 R2 w32"  # 1 x 1 tiles of 16 x 8 a warp: 8 x 16 warps
  assert [u.arg for u in sink.toposort() if u.op is Ops.BARRIER] == [(ASYNC, 0)]  # 2 stages: nothing left in flight
  with _pytest.raises(CompileError, match="cannot be staged in 3 stages"):
    _staged(gemm_relu(64, 32, 64, "f16"), "TC(2,-1,3)")  # one iteration of 32: no room for 2 ahead
  with _pytest.raises(CompileError, match="tile 1 .4 x 8 tensor-core tiles a warp. does not divide M x N = 32 x 64"):
    _staged(gemm_relu(32, 32, 64, "f16"), "TC(2,-1,1,1)")


@pytest.mark.parametrize("opts", ["TC(2,-1,2,0)", "TC(2,-1,3,2)", "TC(2,-1,1,5)"])
def test_pinned_stages_and_tiles_compute_the_same_bits(tmp_path, monkeypatch, opts):
  f, x = gemm_relu(64, 96, 128, "f16"), inputs(64, 96, 128, "f16")
  (tmp_path / "a").mkdir(); (tmp_path / "b").mkdir()  # noqa: E702
  got = emulated(tmp_path / "a", monkeypatch, f, x, opts)["out"]
  ref = emulated(tmp_path / "b", monkeypatch, f, x, opts.split(",")[0] + ",-1,0," + opts.split(",")[3])["out"]
  assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
  assert_gemm_relu(got, x)


@needs_ptxas
def test_ptxas_accepts_pinned_stages_and_tiles(tmp_path):
  from uopc.stages.optimize import parse_schedule
  (tmp_path / "tc.uop").write_text(program([gemm_relu(128, 64, 128, "f16")]))
  for i, (opts, wait) in enumerate([("TC(2,-1,2,1)", "cp.async.wait_group 0"), ("TC(2,-1,3,5)", "cp.async.wait_group 1"), ("TC(2,-1,0,3)", None)]):
    out = tmp_path / f"out{i}"
    build(tmp_path / "tc.uop", BuildOptions(target="cuda", out_dir=out, emit=("ptx",), schedule=parse_schedule([f"tc__tc_f16_k0:{opts}"])))
    ptx = (out / "tc.ptx").read_text()
    assert (wait in ptx) if wait else "cp.async" not in ptx  # the pinned stages reached the kernel
    ptxas_accepts(ptx, "sm_90", tmp_path)
