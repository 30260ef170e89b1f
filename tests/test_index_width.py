"""Index arithmetic in 32 bits on -t cuda and -t amd (uopc.stages.index_width): narrowed exactly where
every value fits in int32, kept 64-bit where one does not, and the kernels compute what the C target
computes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from test_cuda_ptx import needs_ptxas, ptxas_accepts
from uopc.driver import BuildOptions, build
from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.run import run_file
from uopc.stages.index_width import narrow_index
from uopc.uop import UOp

idx = dtypes.index
MODELS = Path(__file__).resolve().parents[1] / "samples" / "models"


def c(v: int) -> UOp: return UOp.const(idx, v)


def loop(n: int) -> UOp: return UOp(Ops.RANGE, idx, (c(n),), (0, AxisType.LOOP))


def stored(offset: UOp, value: UOp | None = None) -> UOp:
  """A kernel storing `value` (default: the offset as int64) at out[offset], inside offset's loop."""
  out = UOp(Ops.PARAM, dtypes.int64.ptr(), (), (0, "out"))
  value = value if value is not None else UOp(Ops.CAST, dtypes.int64, (offset,))
  rng = next(u for u in offset.toposort() if u.op is Ops.RANGE)
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, offset)), value))
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, rng)),))


def index_offset(sink: UOp) -> UOp: return next(u for u in sink.toposort() if u.op is Ops.INDEX).src[1]


def test_offsets_that_fit_are_computed_in_int32_and_the_loop_stays_as_it_is():
  r = loop(1000)
  out = narrow_index(stored(r.alu(Ops.MUL, c(4)).alu(Ops.ADD, c(3))))
  off = index_offset(out)
  assert off.dtype is dtypes.int32 and off.op is Ops.ADD
  assert {u.op for u in off.toposort() if u.dtype is dtypes.int32} == {Ops.ADD, Ops.MUL, Ops.CONST, Ops.CAST}
  assert r in out.toposort()  # the RANGE itself (its END, its counter) is untouched, read through a CAST


def test_a_value_outside_int32_keeps_its_node_and_every_user_of_it_in_64_bits():
  r = loop(1000)
  big = r.alu(Ops.MUL, c(1 << 22))            # up to 999 * 2**22 > 2**31
  back = big.alu(Ops.IDIV, c(1 << 22))  # fits again, but computed from a value that does not
  for offset in (big, back):
    off = index_offset(narrow_index(stored(offset)))
    assert off.dtype is idx and not any(u.dtype is dtypes.int32 for u in off.toposort() if u.op is Ops.MUL)


def test_negative_offsets_and_wide_runtime_sizes():
  r = loop(100)
  assert index_offset(narrow_index(stored(r.alu(Ops.ADD, c(-1))))).dtype is dtypes.int32
  n = UOp(Ops.DEFINE_VAR, idx, (), ("n", 1, 1 << 40))
  assert index_offset(narrow_index(stored(r.alu(Ops.MUL, n)))).dtype is idx
  m = UOp(Ops.DEFINE_VAR, idx, (), ("m", 1, 1 << 20))
  assert index_offset(narrow_index(stored(r.alu(Ops.MUL, m)))).dtype is dtypes.int32  # 99 * 2**20 fits


def test_a_narrowed_value_read_as_index_is_widened_and_comparisons_of_narrowed_values_stay_narrow():
  r = loop(1000)
  a, b = r.alu(Ops.MUL, c(3)), r.alu(Ops.ADD, c(500))
  sink = narrow_index(stored(r, UOp(Ops.WHERE, dtypes.int64, (a.alu(Ops.CMPLT, b), UOp(Ops.CAST, dtypes.int64, (a,)), UOp.const(dtypes.int64, 0)))))
  cmp = next(u for u in sink.toposort() if u.op is Ops.CMPLT)
  assert {s.dtype for s in cmp.src} == {dtypes.int32}
  casts = [u for u in sink.toposort() if u.op is Ops.CAST and u.dtype is dtypes.int64]
  assert casts and casts[0].src[0].dtype in (idx, dtypes.int32)


@needs_ptxas
def test_the_cumsum_window_is_32_bit_arithmetic_in_the_ptx(tmp_path):
  paths = build(MODELS / "cumsum.uop", BuildOptions(target="cuda", out_dir=tmp_path, emit=("ptx",)))
  ptx = next(p for p in paths if p.suffix == ".ptx").read_text()
  body = ptx[ptx.index(".entry cumsum__cumsum_k0"):]
  body = body[:body.index("\n}")]
  assert "mad.wide.s32" in body and "setp.lt.s32" in body
  assert body.split("$L1:")[1].count("add.s64") == 1  # in the loop only its counter (a RANGE stays 64-bit) steps in 64 bits
  for arch in ("sm_80", "sm_90"): ptxas_accepts(ptx, arch, tmp_path)


@pytest.mark.parametrize("target", ["cuda", "amd"])
@pytest.mark.parametrize("model", ["cumsum", "max_pool", "argmax", "embedding", "cross_entropy"])
def test_narrowed_kernels_compute_what_the_c_target_does_in_the_emulator(model, target):
  path = MODELS / f"{model}.uop"
  want = run_file(path, target="c", seed=1).arrays
  got = run_file(path, target=target, inputs={k: v for k, v in want.items() if k != "out"}, emulated=True).arrays
  np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6, atol=1e-6)


def test_a_shift_by_a_value_of_another_dtype_takes_that_values_range():
  """SHL of an index by an int32 amount: the amount's own range counts (999 << 30 leaves int32)."""
  r = loop(1000)
  big = UOp(Ops.SHL, idx, (r, UOp.const(dtypes.int32, 30)))
  small = UOp(Ops.SHL, idx, (r, UOp.const(dtypes.int32, 3)))
  for shifted, width in ((big, idx), (small, dtypes.int32)):
    sink = narrow_index(stored(r, UOp(Ops.CAST, dtypes.int64, (shifted,))))
    assert [u.dtype for u in sink.toposort() if u.op is Ops.SHL] == [width]
