"""Inputs of a float32 reduction staged in LOCAL memory (uopc/stages/local_staging.py, the STAGE opt):
the staged kernel's shape (a transposed tile for a gemm's a, 4-byte copies of it and 16-byte copies of
b, one barrier an iteration), its results in the emulator (which models LOCAL memory, barriers and
asynchronous copies, and reports races and reads of copies not waited for) bit for bit equal to the
same schedule unstaged and within the float32-sum bound of numpy's float64 gemm, for several shapes and
both layouts of each input; kernels the analysis cannot stage (left unchanged, or refused with why when
STAGE is pinned); the heuristic that picks it; the tuner's space; and ptxas for sm_80 and sm_90."""
from __future__ import annotations

import io

import numpy as np
import pytest

import uopc.stages.gpu_schedule as gs
from test_cuda_gpu import gpu  # noqa: F401 (a fixture)
from test_cuda_ptx import needs_ptxas, ptxas_accepts
from test_group_reduce import emulated
from test_optimize import GPU, kernels_of, program
from test_tensor_cores import gemm_relu
from test_tensor_programs import Func, conv2d, gemm
from uopc.diagnostics import CompileError
from uopc.driver import BuildOptions, build
from uopc.dtype import AddrSpace
from uopc.ops import Ops
from uopc.frontend import parse_source
from uopc.pipeline import PrintOptions, compile_module
from uopc.run import run_file
from uopc.stages.local_staging import stage_reduction
from uopc.stages.optimize import OptOp, apply_opts, format_axes, heuristic_opts, optimize, parse_opts, parse_schedule, target_caps, type_axes
from uopc.stages.tensor_cores import ASYNC

# the heuristic's staged schedule on a gemm of M x N (multiples of 64 x 128): 8 x 16 threads, 2 x 2 runs of 4, K depth 8
STAGED = "SPLIT(2,8,r),SPLIT(1,4,u),SPLIT(1,16,l),SPLIT(1,2,u),SPLIT(0,4,u),SPLIT(0,8,l),SPLIT(0,2,u)"
# the default tile's shape (8 x 8 consecutive outputs a thread), K depth 8 or 4
# ... and its wider tile, 2 x 4 runs (8 x 16 outputs a thread, 64 x 256 a workgroup), where that leaves 256 workgroups
WIDE = STAGED.replace("SPLIT(1,16,l),SPLIT(1,2,u)", "SPLIT(1,16,l),SPLIT(1,4,u)")
# ... and its small tiles for gemms with few rows: 32 x 64 outputs a workgroup (4 x 4 a thread), 16 x 128 (2 x 8)
SMALL = "SPLIT(2,8,r),SPLIT(1,4,u),SPLIT(1,16,l),SPLIT(0,4,u),SPLIT(0,8,l)"
NARROW = "SPLIT(2,8,r),SPLIT(1,4,u),SPLIT(1,16,l),SPLIT(1,2,u),SPLIT(0,2,u),SPLIT(0,8,l)"
PLAIN8 = "SPLIT(2,8,r),SPLIT(1,8,u),SPLIT(0,8,u),SPLIT(2,16,l),SPLIT(0,8,l)"


def _typed(f: Func):
  return type_axes(next(iter(kernels_of(f.text(), GPU).values())), GPU)


def _staged(f: Func, opts: str):
  return optimize(next(iter(kernels_of(f.text(), GPU).values())), "k", GPU, pinned=parse_opts(opts)).sink


def _locals(sink) -> list:
  return [u for u in sink.toposort() if u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.LOCAL]


def gemm_t(m: int, k: int, n: int, a_t: bool, b_t: bool) -> Func:
  """c = a @ b with a stored K x M (a_t) and/or b stored N x K (b_t)."""
  f = Func("gemmt")
  a = f.param("a", (k, m) if a_t else (m, k))
  b = f.param("b", (n, k) if b_t else (k, n))
  c = f.param("c", (m, n), out=True)
  f.store(c, f.matmul(f.permute(a, (1, 0)) if a_t else a, f.permute(b, (1, 0)) if b_t else b, m, k, n))
  return f


def _inputs(m: int, k: int, n: int, a_t: bool = False, b_t: bool = False) -> dict:
  rng = np.random.default_rng(m * 7 + k * 3 + n)
  a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  return {"a": np.ascontiguousarray(a.T) if a_t else a, "b": np.ascontiguousarray(b.T) if b_t else b}


def _check_gemm(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
  """Within the float32 sum's bound: k * eps * |a| @ |b| of numpy's float64 product."""
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  bound = a.shape[1] * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64))
  assert np.all(np.abs(got.reshape(a.shape[0], b.shape[1]) - a64 @ b64) <= bound)


def row_sum(m: int, k: int) -> Func:
  f = Func("rowsum")
  a, out = f.param("a", (m, k)), f.param("out", (m, 1), out=True)
  f.store(out, f.reduce(a, "ADD", (1,)))
  return f


def _same_as_unstaged(tmp_path, monkeypatch, f: Func, x: dict, opts: str, out: str = "c") -> np.ndarray:
  (tmp_path / "staged").mkdir(); (tmp_path / "plain").mkdir()  # noqa: E702
  staged = emulated(tmp_path / "staged", monkeypatch, f, x, opts)[out]
  plain = emulated(tmp_path / "plain", monkeypatch, f, x, opts.rsplit(",", 1)[0])[out]
  assert np.array_equal(staged.view(np.uint32), plain.view(np.uint32))
  return staged


# ---- the staged kernel -------------------------------------------------------------------------------------


def test_a_gemm_stages_a_transposed_and_b_by_rows_with_one_barrier_an_iteration():
  sink = _staged(gemm(128, 64, 256), STAGED + ",STAGE")
  nodes = sink.toposort()
  tiles = _locals(sink)
  # 3 stages: a's 64 rows x 8 k stored by columns (8 lines of 64 + 4 pad), b's 8 k x 128 columns by rows (unpadded)
  assert sorted(t.dtype.size for t in tiles) == [3 * 8 * 68, 3 * 8 * 128]
  copies = [u for u in nodes if u.op is Ops.STORE and isinstance(u.arg, tuple) and u.arg[0] == ASYNC]
  sizes = sorted(c.src[1].dtype.count for c in copies)
  # a: 512 elements / 128 threads = 4 element copies a thread; b: 256 16-byte chunks = 2; the prologue's 2 stages and the loop's
  assert sizes == [1] * 12 + [4] * 6 and sum(c.arg[1] for c in copies) == 3
  assert [u.arg for u in nodes if u.op is Ops.BARRIER] == [(ASYNC, 1)]
  assert not any(u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM and u.src[0].src[0].arg[1] in ("a", "b") and len(u.src) == 1
                 and not any(c.src[1] is u for c in copies) for u in nodes)  # every read of a and b is a copy


def test_the_staged_reads_are_16_byte_vectors_after_expand():
  from uopc.stages.expand import expand
  opts = parse_opts(STAGED + ",STAGE")
  kernel = next(iter(kernels_of(gemm(128, 64, 256).text(), GPU).values()))
  sink = expand(optimize(kernel, "k", GPU, pinned=opts))
  reads = [u for u in sink.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].dtype.addrspace is AddrSpace.LOCAL]
  # 8 k a thread an iteration, 2 vectors of a and 2 of b each; the copies keep their async arg through Expand
  assert len(reads) == 32 and all(r.dtype.count == 4 for r in reads)
  assert sum(u.op is Ops.STORE and isinstance(u.arg, tuple) and u.arg[0] == ASYNC for u in sink.toposort()) == 18


@pytest.mark.parametrize("m, k, n, opts, stages, sizes", [
  (128, 64, 256, STAGED + ",STAGE", 3, [8 * 68, 8 * 128]),   # a: 8 lines of 64 + 4 (transposed), b: 8 rows of 128
  (128, 64, 256, STAGED.replace("2,8,r", "2,4,r") + ",STAGE", 3, [4 * 68, 4 * 128]),  # the heuristics' K depth 4
  (64, 48, 128, STAGED + ",STAGE(2)", 2, [8 * 68, 8 * 128]),  # 6 iterations, 2 stages
  (128, 16, 256, STAGED + ",STAGE(3)", 3, [8 * 68, 8 * 128]),  # 2 iterations: the third stage's copies read nothing
  (64, 64, 128, PLAIN8 + ",STAGE", 3, [8 * 68, 8 * 128]),     # 8 consecutive outputs a thread along each axis
  (96, 40, 160, "SPLIT(2,8,r),SPLIT(1,4,u),SPLIT(1,8,l),SPLIT(0,4,u),SPLIT(0,8,l),STAGE", 3, [8 * 36, 8 * 32]),  # not powers of two
  # K depth 4: b's 4 x 32 tile is 32 16-byte copies for 64 threads: the other 32 copy its last chunk into 32 x 4 of slack
  (96, 40, 160, "SPLIT(2,4,r),SPLIT(1,4,u),SPLIT(1,8,l),SPLIT(0,4,u),SPLIT(0,8,l),STAGE", 3, [4 * 36, 4 * 32 + 32 * 4]),
  # 3 rows a thread (scalar reads of a: 48 + 4 a line); b's 8 x 16 tile is 32 copies for 128 threads: 96 x 4 of slack
  (48, 24, 80, "SPLIT(2,8,r),SPLIT(1,2,u),SPLIT(1,8,l),SPLIT(0,3,u),SPLIT(0,16,l),STAGE", 3, [8 * 52, 8 * 16 + 96 * 4]),
], ids=["staged", "heuristic-depth", "2-stages", "3-stages-2-iterations", "plain-tile", "odd-sizes", "spare-copies", "odd-lanes"])
def test_staged_gemms_equal_unstaged_and_numpy(tmp_path, monkeypatch, m, k, n, opts, stages, sizes):
  x = _inputs(m, k, n)
  assert sorted(t.dtype.size for t in _locals(_staged(gemm(m, k, n), opts))) == sorted(stages * z for z in sizes)
  _check_gemm(_same_as_unstaged(tmp_path, monkeypatch, gemm(m, k, n), x, opts), x["a"], x["b"])


@pytest.mark.parametrize("a_t, b_t", [(True, False), (False, True), (True, True)], ids=["a-kxm", "b-nxk", "both"])
def test_each_layout_of_the_inputs(tmp_path, monkeypatch, a_t, b_t):
  """a stored K x M is read along its rows (stored by rows), b stored N x K down its columns (transposed)."""
  m, k, n = 64, 32, 128
  f, x = gemm_t(m, k, n, a_t, b_t), _inputs(m, k, n, a_t, b_t)
  tiles = _locals(_staged(f, STAGED + ",STAGE"))
  pitches = sorted(t.dtype.size // 3 for t in tiles)  # a: 64 x 8, b: 8 x 128; + 4 a line where transposed
  assert pitches == sorted([8 * 68 if not a_t else 8 * 64, 8 * 128 if not b_t else 8 * 132])
  got = _same_as_unstaged(tmp_path, monkeypatch, f, x, STAGED + ",STAGE")
  _check_gemm(got, x["a"].T if a_t else x["a"], x["b"].T if b_t else x["b"])


def test_a_transposed_output_swaps_the_roles(tmp_path, monkeypatch):
  """c stored N x M: m is the contiguous output axis, so the heuristics' n role (16 threads, runs of 4)
  goes to m; a is still read down its columns (transposed: 8 lines of 128 + 4, K depth 8) and b along its
  rows, 512 floats: 128 16-byte copies, one a thread."""
  m, k, n = 128, 32, 64
  f = Func("gct")
  a, b, c = f.param("a", (m, k)), f.param("b", (k, n)), f.param("c", (n, m), out=True)
  f.store(c, f.permute(f.matmul(a, b, m, k, n), (1, 0)))
  big = Func("gct")
  a2, b2, c2 = big.param("a", (2048, 256)), big.param("b", (256, 1024)), big.param("c", (1024, 2048), out=True)
  big.store(c2, big.permute(big.matmul(a2, b2, 2048, 256, 1024), (1, 0)))
  axes, opts = _heuristic(big)
  assert axes == "g16 u2 l8 u4 g16 u2 l16 u4 R32 r8" and opts.endswith(",STAGE(2)")
  assert sorted(t.dtype.size // 2 for t in _locals(_staged(f, opts))) == [16 * 32, 8 * 132]
  x = _inputs(m, k, n)
  got = _same_as_unstaged(tmp_path, monkeypatch, f, x, opts)
  _check_gemm(np.ascontiguousarray(got.reshape(n, m).T), x["a"], x["b"])


@pytest.mark.parametrize("dtype, np_dtype", [("f64", np.float64), ("f16", np.float16), ("i32", np.int32)])
def test_other_dtypes_stage_too(tmp_path, monkeypatch, dtype, np_dtype):
  """float64 (8-byte element copies of a), float16 (a by rows: cp.async moves no 2-byte element; b's
  64 chunks of 8 halves for 128 threads, the rest into slack), int32: the same bits as unstaged."""
  m, k, n = 64, 32, 128
  f = Func(f"g{dtype}")
  a, b, c = f.param("a", (m, k), dtype), f.param("b", (k, n), dtype), f.param("c", (m, n), dtype, out=True)
  f.store(c, f.matmul(a, b, m, k, n))
  rng = np.random.default_rng(5)
  x = {"a": (rng.standard_normal((m, k)) * 4).astype(np_dtype), "b": (rng.standard_normal((k, n)) * 4).astype(np_dtype)}
  assert len(_locals(_staged(f, STAGED + ",STAGE"))) == 2
  got = _same_as_unstaged(tmp_path, monkeypatch, f, x, STAGED + ",STAGE")
  if dtype == "i32": np.testing.assert_array_equal(got.reshape(m, n), x["a"] @ x["b"])


def test_a_convolution_stages_its_weights_and_image(tmp_path, monkeypatch):
  """conv 3x3 without padding, the heuristics' schedule: the weights (read by every output position) are
  a dense tile of 32 output channels x (4 input channels x 9 window elements), stored transposed (a
  thread's 8 channels are its fastest lane), 1152 element copies for 32 threads; the image's tile is 4
  channels x 6 rows x 10 columns (the 4 x 8 outputs' windows), 60 16-byte copies, the last round's spare
  threads copying into slack."""
  f = conv2d(8, 10, 10, 32, 3, 3, 0)
  opts = "SPLIT(2,4,u),SPLIT(0,8,u),SPLIT(3,2,l),SPLIT(0,4,l),SPLIT(2,4,l),SPLIT(7,4,r),SPLIT(6,9,r),STAGE"  # the heuristics' + STAGE
  sink = _staged(f, opts)
  assert sorted(t.dtype.size for t in _locals(sink)) == [3 * (4 * 60 + 4 * 4), 3 * 36 * 36]
  rng = np.random.default_rng(3)
  x = {"x": rng.standard_normal((8, 10, 10)).astype(np.float32), "w": rng.standard_normal((32, 8, 3, 3)).astype(np.float32),
       "bias": rng.standard_normal(32).astype(np.float32)}
  got = _same_as_unstaged(tmp_path, monkeypatch, f, x, opts, "out")
  want = np.zeros((32, 8, 8))
  for i in range(3):
    for j in range(3): want += np.einsum("oc,chw->ohw", x["w"][:, :, i, j].astype(np.float64), x["x"][:, i:i + 8, j:j + 8].astype(np.float64))
  np.testing.assert_allclose(got.reshape(32, 8, 8), want + x["bias"][:, None, None], rtol=1e-4, atol=1e-4)


def test_emulator_reports_reads_of_copies_not_waited_for(tmp_path, monkeypatch):
  import uopc.stages.local_staging as ls
  from uopc.rewrite import substitute
  real = ls._stage
  def no_wait(sink, stages):
    out = real(sink, stages)
    return substitute(out, {u: u.replace(arg=(ASYNC, 99)) for u in out.toposort() if u.op is Ops.BARRIER})
  monkeypatch.setattr(ls, "_stage", no_wait)
  with pytest.raises(Exception, match="which an asynchronous copy has not been waited for"):
    emulated(tmp_path, monkeypatch, gemm(64, 32, 128), _inputs(64, 32, 128), STAGED + ",STAGE")


# ---- what is not staged ------------------------------------------------------------------------------------


@pytest.mark.parametrize("f, opts, why", [
  (gemm(64, 32, 128), "SPLIT(2,8,r),SPLIT(1,8,u),SPLIT(0,8,u)", "needs LOCAL axes"),
  (gemm(256, 64, 256), "SPLIT(2,32,r),SPLIT(1,8,u),SPLIT(1,16,l),SPLIT(0,8,u),SPLIT(0,16,l)",
   "2 stages of its tiles .33280 bytes a stage. do not fit 49152 bytes"),
  (gemm(64, 32, 128), "PADTO(2,40),SPLIT(2,8,r),SPLIT(1,4,u),SPLIT(1,16,l),SPLIT(0,4,u),SPLIT(0,8,l)", "no global input is read"),
  (gemm(64, 32, 128), "SPLIT(2,8,G),SPLIT(1,16,l)", "GROUP_REDUCE"),
  (row_sum(64, 256), "SPLIT(1,8,r),SPLIT(0,16,l)", "no global input is read"),  # each row read by one thread
], ids=["no-locals", "too-big", "gated", "group-reduce", "no-reuse"])
def test_unstageable_kernels_are_unchanged_and_a_pinned_stage_says_why(f, opts, why):
  typed = _typed(f)
  sink = apply_opts(typed, parse_opts(opts), GPU, "k")
  assert stage_reduction(sink) is sink
  with pytest.raises(CompileError, match=why):
    apply_opts(typed, parse_opts(opts + ",STAGE"), GPU, "k")


def test_elementwise_and_other_targets_and_order_are_refused():
  f = Func("add")
  a, out = f.param("a", (64, 64)), f.param("out", (64, 64), out=True)
  f.store(out, f.op("ADD", a, a))
  sink = apply_opts(_typed(f), parse_opts("SPLIT(1,16,l)"), GPU, "k")
  assert stage_reduction(sink) is sink
  with pytest.raises(CompileError, match="one REDUCE axis"):
    apply_opts(_typed(f), parse_opts("SPLIT(1,16,l),STAGE"), GPU, "k")
  amd = target_caps("amd")
  kernel = type_axes(next(iter(kernels_of(gemm(64, 32, 128).text(), amd).values())), amd)
  with pytest.raises(CompileError, match="STAGE needs asynchronous copies"):
    apply_opts(kernel, parse_opts(STAGED + ",STAGE"), amd, "k")
  with pytest.raises(CompileError, match="STAGE must be the last opt"):
    apply_opts(_typed(gemm(64, 32, 128)), parse_opts(STAGED + ",STAGE,SPLIT(0,2,u)"), GPU, "k")
  with pytest.raises(CompileError, match="TC stages its operands itself"):
    apply_opts(_typed(gemm_relu(64, 32, 128, "f16")), parse_opts("TC(2),STAGE"), GPU, "k")


def test_stage_opts_parse_and_print_back():
  assert [str(o) for o in parse_opts("STAGE,STAGE(1),STAGE(2),stage(3)")] == ["STAGE", "STAGE", "STAGE(2)", "STAGE(3)"]
  assert all(o.op is OptOp.STAGE and o.axis is None for o in parse_opts("STAGE(2)"))
  for bad in ("STAGE(4)", "STAGE(0)", "STAGE(1,2)", "STAGE(x)"):
    with pytest.raises(CompileError, match="STAGE"):
      parse_opts(bad)


# ---- the heuristic, the tuner, ptxas ----------------------------------------------------------------------


def _heuristic(f: Func) -> tuple[str, str]:
  typed = _typed(f)
  opts = heuristic_opts(typed, GPU)
  return format_axes(apply_opts(typed, opts, GPU, "k")), ",".join(map(str, opts))


def test_the_heuristics_stage_large_float32_gemms_only():
  axes, opts = _heuristic(gemm(2048, 2048, 2048))
  assert (axes, opts) == ("g32 u2 l8 u4 g8 u4 l16 u4 R256 r8", WIDE + ",STAGE(2)")  # K depth 8
  for flags in ({}, {"fp_contract": True}, {"fp_contract": False}, {"fast_math": True}):  # the arithmetic does not change the tiles
    out = io.StringIO()
    compile_module(parse_source(gemm(2048, 2048, 2048).text(), "t.uop"), "cuda", "t", PrintOptions(after=frozenset({"optimize"}), out=out), **flags)
    assert f"# opts: {WIDE},STAGE(2)" in out.getvalue().splitlines(), flags
  assert _heuristic(gemm(2048, 2048, 1152)) == ("g32 u2 l8 u4 g9 u2 l16 u4 R256 r8", STAGED + ",STAGE(2)")  # 1152: no 256 columns
  assert _heuristic(gemm_t(2048, 512, 1024, True, True))[1].endswith(",STAGE(2)")   # 256 workgroups, both inputs transposed
  assert _heuristic(gemm(1024, 1024, 1024))[1] == STAGED + ",STAGE(2)"  # 128 workgroups of 2 x 2 runs: one an SM
  assert _heuristic(gemm(512, 1024, 1024))[1] == SMALL + ",STAGE(2)"  # 64 x 128: 64 workgroups, too few; 32 x 64: 256
  assert _heuristic(gemm(16, 768, 50304))[1] == NARROW + ",STAGE(2)"  # 16 rows: 16 x 128 workgroups
  assert _heuristic(gemm(2000, 2048, 2000))[1] == "PADTO(0,64,64),PADTO(1,256,256)," + WIDE + ",STAGE(2)"  # overlapping tiles
  assert "STAGE" not in _heuristic(gemm(40, 2048, 1100))[1]       # 40 rows: shorter than the workgroup's 64
  assert "STAGE" not in _heuristic(conv2d(64, 56, 56, 64, 3, 3, 1))[1]


def test_the_tuner_tries_stage_last():
  from uopc.tune.space import actions, children
  typed = _typed(gemm(128, 64, 256))
  opts = parse_opts(STAGED)
  sink = apply_opts(typed, opts, GPU, "k")
  kids = {str(o[-1]): s for o, s in children(sink, opts, GPU) if o[-1].op is OptOp.STAGE}
  assert sorted(kids) == ["STAGE(2)", "STAGE(3)"] and all(_locals(s) for s in kids.values())
  assert actions(kids["STAGE(2)"], opts + parse_opts("STAGE(2)"), GPU) == []
  assert [str(o) for o in actions(typed, (), target_caps("c")) if o.op is OptOp.STAGE] == ["STAGE"]  # a CPU's copy: no stages


def test_non_multiple_sizes_run_correctly_with_the_heuristics(tmp_path, monkeypatch):
  """100 x 100 x 100: padded or smaller tiles, unstaged; the emulator against numpy (the thread floors lowered
  so that the tiles of a large gemm apply)."""
  monkeypatch.setattr(gs, "GPU_MIN_THREADS", 64)
  monkeypatch.setattr(gs, "GPU_TILE_THREADS", 16)
  f, x = gemm(100, 100, 100), _inputs(100, 100, 100)
  assert "STAGE" not in _heuristic(f)[1]
  (tmp_path / f"{f.name}.uop").write_text(f.text())
  _check_gemm(run_file(tmp_path / f"{f.name}.uop", target="cuda", inputs=x, emulated=True).arrays["c"], x["a"], x["b"])


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_staged_gemms(tmp_path, arch):
  """The heuristics' 2048 gemm (staged), a pinned 2-stage one with both inputs transposed, and a
  convolution whose image tile has spare copies."""
  (tmp_path / "g.uop").write_text(program([gemm(2048, 2048, 2048), gemm_t(256, 64, 256, True, True), conv2d(8, 10, 10, 32, 3, 3, 0)]))
  conv = "SPLIT(2,4,u),SPLIT(0,8,u),SPLIT(3,2,l),SPLIT(0,4,l),SPLIT(2,4,l),SPLIT(7,4,r),SPLIT(6,9,r),STAGE"
  schedule = parse_schedule([f"g__gemmt_k0:{STAGED},STAGE(2)", f"g__conv2d_k0:{conv}"])
  build(tmp_path / "g.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", emit=("ptx",), schedule=schedule))
  ptx = (tmp_path / "out" / "g.ptx").read_text()
  for needed in ("cp.async.ca.shared.global", "cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group 1",
                 "cp.async.wait_group 0", "ld.shared.v4.f32", "bar.sync"):
    assert needed in ptx, needed
  ptxas_accepts(ptx, arch, tmp_path)


# ---- on an NVIDIA GPU (skips without one) ----------------------------------------------------------------------


@pytest.mark.gpu
def test_staged_gemms_on_a_cuda_gpu(gpu, tmp_path):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  """The heuristics' staged 2048 gemm, and pinned 2-stage ones with both inputs transposed, against numpy."""
  import ctypes
  from gpu_samples import call
  from uopc.frontend import load_module
  from uopc.pipeline import compile_module
  (tmp_path / "g.uop").write_text(program([gemm(2048, 2048, 2048), gemm_t(192, 72, 384, True, True)]))
  schedule = parse_schedule([f"g__gemmt_k0:{STAGED},STAGE(2)"])
  paths = build(tmp_path / "g.uop", BuildOptions(target="cuda", out_dir=tmp_path / "out", schedule=schedule))
  lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  entries = {e.name: e for e in compile_module(load_module(str(tmp_path / "g.uop")), "cuda", "g")}
  for name, (m, k, n), t in (("gemm", (2048, 2048, 2048), False), ("gemmt", (192, 72, 384), True)):
    x = _inputs(m, k, n, t, t)
    got = call(gpu, lib, "g", entries[name], [x["a"], x["b"], np.zeros((m, n), np.float32)])[2]
    _check_gemm(got, x["a"].T if t else x["a"], x["b"].T if t else x["b"])
