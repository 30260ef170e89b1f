"""STAGE on the CPU targets (uopc.stages.cpu_staging): a gemm's block of b copied to a contiguous array.

The staged kernels must compute bit for bit what the same opts without STAGE compute (natively at every
runnable level, with -t llvm, and in the emulator, which also checks that no element of the array is read
before the copy wrote it); the heuristics stage where eight or more row tiles read a block again; STAGE
is refused, with why, where nothing is read again.
"""
from __future__ import annotations

import ctypes
import io
import re
from pathlib import Path

import numpy as np
import pytest

from test_cpu_levels import RUNNABLE, _opts
from test_optimize import LIB, kernels_of, program, random_inputs, run_func
from test_ragged_axes import batched_gemm as batched
from test_tensor_programs import Func, conv2d, gemm
from uopc.diagnostics import CompileError
from uopc.dtype import AddrSpace
from uopc.driver import BuildOptions, build
from uopc.ops import Ops
from uopc.run import run_file
from uopc.stages.cpu_staging import reuse
from uopc.stages.optimize import Opt, OptOp, apply_opts, heuristic_opts, parse_opts, target_caps
from uopc.stages.opts import STAGE_AUTO


def gemm_bt(m: int, k: int, n: int) -> Func:
  """a @ b.T with b stored (n, k): the tile's rows are b's columns."""
  f = Func("gemm_bt")
  a, b, c = f.param("a", (m, k)), f.param("b", (n, k)), f.param("c", (m, n), out=True)
  f.store(c, f.matmul(a, f.permute(b, (1, 0)), m, k, n))
  return f


def gated(m: int, k: int, n: int) -> Func:
  """(a @ g) * (a @ u): a SwiGLU's two products in one kernel, two REDUCE loops, each staging its own block."""
  f = Func("gated")
  a, g, u, c = f.param("a", (m, k)), f.param("g", (k, n)), f.param("u", (k, n)), f.param("c", (m, n), out=True)
  f.store(c, f.op("MUL", f.matmul(a, g, m, k, n), f.matmul(a, u, m, k, n)))
  return f


def named(f: Func, name: str) -> Func:
  f.name = name
  return f


# staged by the heuristics with AVX-512 (vector_bytes 64): rows >= 8 tiles of 8; 200 rows padded with overlapping tiles
STAGED = [gemm(64, 48, 96), named(gemm(200, 40, 64), "gemm200"), batched(3, 64, 16, 64), gated(64, 40, 96)]


def test_heuristics_stage_where_eight_row_tiles_read_a_block():
  for f in STAGED: assert all(o.endswith(",STAGE") for o in _opts(f, 64)), f.name
  assert _opts(gemm(64, 768, 3072), 16)[0].endswith(",STAGE")  # every level
  assert not _opts(gemm(32, 768, 768), 64)[0].endswith("STAGE")  # 4 row tiles: the copy costs more than it saves
  assert _opts(gemm(32, 2048, 2048), 64)[0].endswith(",STAGE")     # ... unless b's rows conflict in the cache (8 KiB apart)
  assert not _opts(gemm(16, 2048, 2048), 64)[0].endswith("STAGE")  # 2 row tiles
  assert not _opts(gemm(1, 768, 3072), 64)[0].endswith("STAGE")  # one row: nothing read again
  assert not any(o.endswith("STAGE") for o in _opts(conv2d(8, 16, 16, 64, 3, 3, 1), 64))  # gated loads
  assert not _opts(gemm_bt(64, 48, 96), 64)[0].endswith("STAGE")  # a @ b.T: the block of b is contiguous already
  caps = target_caps("c", 64)
  k = next(iter(kernels_of(gated(64, 40, 96).text(), caps).values()))
  assert sum(u.op is Ops.BUFFER and u.dtype.addrspace is AddrSpace.LOCAL for u in apply_opts(k, heuristic_opts(k, caps), caps, "k").toposort()) == 2
  k = next(iter(kernels_of(gemm(64, 768, 3072).text(), caps).values()))
  assert reuse(apply_opts(k, heuristic_opts(k, caps)[:-1], caps, "k")) == (8, True)  # 3072 floats apart: 16 L2 sets
  k = next(iter(kernels_of(gemm(32, 768, 768).text(), caps).values()))
  assert reuse(apply_opts(k, heuristic_opts(k, caps), caps, "k")) == (4, False)  # 768 floats apart: 64 sets hold it


def _without_stage(f: Func, vector_bytes: int | None) -> dict[str, tuple]:
  caps = target_caps("c", vector_bytes)
  return {name: tuple(o for o in heuristic_opts(k, caps) if o.op is not OptOp.STAGE) for name, k in kernels_of(f.text(), caps).items()}


def _lib(tmp_path: Path, text: str, tag: str, target: str, cpu: str, schedule=None) -> ctypes.CDLL:
  (tmp_path / f"{tag}.uop").write_text(text)
  out = tmp_path / tag
  build(tmp_path / f"{tag}.uop", BuildOptions(target, out, ("so",), name=LIB, print_out=io.StringIO(), cpu=cpu, schedule=schedule))
  return ctypes.CDLL(str(out / f"lib{LIB}.so"))


@pytest.mark.parametrize("target, cpu", [("c", c) for c in RUNNABLE] + [("c", "portable"), ("llvm", "portable")])
def test_staged_kernels_compute_what_unstaged_ones_do(tmp_path, target, cpu):
  funcs = STAGED + [named(gemm(64, 768, 256), "gemm768"), gemm_bt(64, 48, 96)]
  text = program(funcs)
  vector_bytes = None if cpu == "portable" else 64
  # the heuristics of this level, then the same opts less STAGE
  schedule = {}
  for f in funcs: schedule.update(_without_stage(f, vector_bytes))
  staged = _lib(tmp_path, text, "staged", target, cpu)
  plain = _lib(tmp_path, text, "plain", target, cpu, schedule)
  for i, f in enumerate(funcs):
    inputs = random_inputs(f, i)
    want, got = run_func(plain, f, inputs), run_func(staged, f, inputs)
    for name in want: np.testing.assert_array_equal(got[name], want[name], err_msg=f"{f.name} ({target}, {cpu})")


def test_the_copy_runs_once_per_block_before_the_row_tiles(tmp_path):
  (tmp_path / "g.uop").write_text(gemm(64, 768, 3072).text())
  out = io.StringIO()
  build(tmp_path / "g.uop", BuildOptions("c", tmp_path / "o", ("source",), name=LIB, print_out=out, cpu="native",
                                         print_after=("optimize",), schedule={f"{LIB}__gemm_k0": parse_opts(
                                             "SPLIT(1,32,u),SPLIT(0,8,u),SPLIT(4,2,r),SWAP(0,2),SPLIT(0,32,t,top),STAGE")}))
  assert "# axes: t32 g3 u8 g8 u32 R384 r2 L768 u32" in out.getvalue()
  source = (tmp_path / "o" / f"{LIB}.c").read_text()
  body = source[source.index(f"void {LIB}__gemm_k0("):]
  assert "float temp0[24576];" in body  # 768 rows of 32 floats
  loops = re.findall(r"for \(int64_t ridx\d+ = 0; ridx\d+ < (\d+);", body)
  assert loops[:4] == ["3", "768", "8", "384"]  # the task's column blocks, the copy of a block, its row tiles, k


def test_the_emulator_runs_staged_kernels(tmp_path):
  f = gemm(64, 24, 64)
  (tmp_path / "g.uop").write_text(f.text())
  inputs = random_inputs(f, 0)
  got = run_file(tmp_path / "g.uop", target="c", inputs=inputs, emulated=True, vector_bytes=64)
  np.testing.assert_array_equal(got.arrays["c"], run_file(tmp_path / "g.uop", target="c", inputs=inputs).arrays["c"])
  assert _opts(f, 64)[0].endswith(",STAGE")


@pytest.mark.parametrize("opts, message", [
  ("SPLIT(1,4,u),STAGE(2)", "STAGE takes no stage count on a CPU"),
  ("SPLIT(1,32,u),SPLIT(0,8,u),STAGE", "no input is read again by a loop around the reduction"),  # one row tile
  ("SPLIT(1,32,u),SPLIT(0,8,u),SWAP(0,2),STAGE", None),  # 8 row tiles
  ("SPLIT(1,32,u),SPLIT(0,8,u),SWAP(0,2),STAGE,SPLIT(0,2,u)", "STAGE must be the last opt"),
])
def test_stage_is_refused_with_why(opts, message):
  caps = target_caps("c", 64)
  k = next(iter(kernels_of(gemm(8 if "SWAP" not in opts else 64, 16, 64).text(), caps).values()))
  if message is None:
    apply_opts(k, parse_opts(opts), caps, "k")
    return
  with pytest.raises(CompileError, match=re.escape(message)):
    apply_opts(k, parse_opts(opts), caps, "k")


def test_stage_needs_a_reduction():
  caps = target_caps("c", 64)
  f = Func("ew")
  x, out = f.param("x", (8, 64)), f.param("out", (8, 64), out=True)
  f.store(out, f.op("ADD", x, x))
  k = next(iter(kernels_of(f.text(), caps).values()))
  with pytest.raises(CompileError, match="the kernel has no REDUCE axis"):
    apply_opts(k, (Opt(OptOp.STAGE, None, STAGE_AUTO),), caps, "k")


@pytest.mark.parametrize("target, cpu", [("c", "native"), ("llvm", "portable")])
def test_large_tiles_do_not_live_on_the_callers_stack(tmp_path, target, cpu):
  """A 384 KiB tile (3072 rows of 32 floats) in a thread with a 256 KiB stack, all tasks on that thread: the
  array is thread-local storage, not a stack array (which would overflow that stack)."""
  import threading
  f = gemm(64, 3072, 96)
  assert _opts(f, 64)[0].endswith(",STAGE")
  lib = _lib(tmp_path, f.text(), "big", target, cpu)
  inputs, out = random_inputs(f, 0), {}

  def call():
    out.update(run_func(lib, f, inputs, "_with_threads", (ctypes.c_int(1),)))
  old = threading.stack_size(256 << 10)
  try:
    t = threading.Thread(target=call)
    t.start()
    t.join()
  finally:
    threading.stack_size(old)
  want = inputs["a"].astype(np.float64) @ inputs["b"]
  np.testing.assert_allclose(out["c"], want, rtol=1e-4, atol=1e-3)
