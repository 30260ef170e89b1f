"""Address offsets as a shared base plus a constant displacement on -t cuda (uopc.stages.address_offsets
and the PTX renderer's `[reg+disp]` accesses): the offsets are the same integers, lanes that differ by a
constant share one base, lanes of a window that read the same element are one LOAD, and the kernels
compute what the C target computes."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from test_cuda_ptx import needs_ptxas, ptxas_accepts
from uopc.driver import BuildOptions, build
from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.run import run_file
from uopc.stages.address_offsets import MAX_DISPLACEMENT, canonical_gate, canonical_offset, split_offsets
from uopc.symbolic import linear_form
from uopc.uop import UOp

idx = dtypes.index
MODELS = Path(__file__).resolve().parents[1] / "samples" / "models"


def c(v: int) -> UOp: return UOp.const(idx, v)
def rng(n: int, axis: int) -> UOp: return UOp(Ops.RANGE, idx, (c(n),), (axis, AxisType.REDUCE))
def thread(n: int) -> UOp: return UOp(Ops.SPECIAL, idx, (c(n),), "lidx0")
def vec(*xs: UOp) -> UOp: return UOp(Ops.STACK, idx.vec(len(xs)), xs)
def lane(v: UOp, i: int) -> UOp: return UOp(Ops.GEP, idx, (v,), (i,))


def value(e: UOp, env: dict[UOp, int]) -> int:
  form = linear_form(e)
  return form.get(None, 0) + sum(k * env[a] for a, k in form.items() if a is not None)


def test_the_constant_moves_out_and_the_terms_go_outer_loops_first():
  t, outer, inner = thread(7), rng(64, 7), rng(3, 8)
  off = ((t.alu(Ops.MUL, c(8)).alu(Ops.ADD, c(3))).alu(Ops.ADD, inner.alu(Ops.ADD, c(-1)).alu(Ops.MUL, c(56)))
         ).alu(Ops.ADD, outer.alu(Ops.MUL, c(3136)))
  out = canonical_offset(off, 4)
  assert out.op is Ops.ADD and out.src[1].op is Ops.CONST and out.src[1].arg == 3 - 56
  base, terms = out.src[0], []
  while base.op is Ops.ADD: base, terms = base.src[0], [base.src[1], *terms]
  terms = [base, *terms]
  assert [next(x for x in s.toposort() if x.op in (Ops.SPECIAL, Ops.RANGE)) for s in terms] == [t, outer, inner]
  for env in ({t: 0, outer: 0, inner: 0}, {t: 6, outer: 63, inner: 2}, {t: 3, outer: 10, inner: 1}):
    assert value(out, env) == value(off, env)


def test_lanes_of_vector_offsets_share_one_base():
  t = thread(16)
  offsets = t.alu(Ops.MUL, c(4))
  v = UOp(Ops.ADD, idx.vec(4), (vec(offsets, offsets, offsets, offsets), vec(c(0), c(1), c(2), c(3))))
  outs = [canonical_offset(lane(v, i), 4) for i in range(4)]
  assert outs[0] is offsets and all(o.src[0] is offsets and o.src[1].arg == i for i, o in enumerate(outs) if i)


def test_a_displacement_too_large_for_an_immediate_stays_in_the_offset():
  t = thread(16)
  off = t.alu(Ops.ADD, c(MAX_DISPLACEMENT))
  assert canonical_offset(off, 4) is off
  assert canonical_offset(t.alu(Ops.ADD, c(8)), 4).src[1].arg == 8


def test_window_lanes_that_read_the_same_element_become_one_load():
  """Lane (u=1, kx=0) and lane (u=0, kx=1) of an upcast window read x[t*8 + 1], gated by 0 <= t*8 + 1 - 1 < 56:
  Expand wrote their offsets and gates as different trees, split_offsets makes them one LOAD."""
  t = thread(7)
  x = UOp(Ops.PARAM, dtypes.float32.ptr(), (), (0, "x"))
  out = UOp(Ops.PARAM, dtypes.float32.ptr(), (), (1, "out"))
  base = t.alu(Ops.MUL, c(8))
  def read(u: int, kx: int) -> UOp:
    pos = base.alu(Ops.ADD, c(u)).alu(Ops.ADD, c(kx))
    gate = c(0).alu(Ops.CMPLT, pos).alu(Ops.AND, pos.alu(Ops.CMPLT, c(57)))
    return UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, x.dtype, (x, pos.alu(Ops.ADD, c(-1)))), UOp.const(dtypes.float32, 0.0), gate))
  a, b = read(1, 0), read(0, 1)
  assert a is not b
  total = a.alu(Ops.ADD, b)
  sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, t)), total)),))
  loads = [u for u in split_offsets(sink).toposort() if u.op is Ops.LOAD]
  assert len(loads) == 1 and loads[0].src[0].src[1] is base


def test_a_gate_of_vector_lanes_is_read_lane_by_lane():
  t = thread(7)
  v = UOp(Ops.ADD, idx.vec(2), (vec(t, t), vec(c(0), c(1))))
  g = UOp(Ops.CMPLT, dtypes.bool.vec(2), (v, vec(c(5), c(5))))
  lane1 = canonical_gate(UOp(Ops.GEP, dtypes.bool, (g,), (1,)), {})
  assert lane1.op is Ops.CMPLT and lane1.src[0] is t.alu(Ops.ADD, c(1)) and lane1.src[1] is c(5)


@needs_ptxas
def test_the_convolution_reads_through_two_address_registers(tmp_path):
  paths = build(MODELS / "conv3x3.uop", BuildOptions(target="cuda", out_dir=tmp_path, emit=("ptx",)))
  ptx = next(p for p in paths if p.suffix == ".ptx").read_text()
  loads = re.findall(r"ld\.global\S* [^,]+, \[(%rd\d+)(?:\+-?\d+)?\]", ptx)
  assert len(loads) > 20 and len(set(loads)) <= 3  # x's window and w's taps: one base each (and the bias)
  assert re.search(r"ld\.global\S* [^,]+, \[%rd\d+\+-\d+\]", ptx)  # a window's left tap: a negative displacement
  for arch in ("sm_80", "sm_90"): ptxas_accepts(ptx, arch, tmp_path)


@pytest.mark.parametrize("model", ["conv3x3", "max_pool", "gpt2_layernorm"])
def test_split_kernels_compute_what_the_c_target_does_in_the_emulator(model):
  path = MODELS / f"{model}.uop"
  want = run_file(path, target="c", seed=2).arrays
  got = run_file(path, target="cuda", inputs={k: v for k, v in want.items() if k != "out"}, emulated=True).arrays
  np.testing.assert_allclose(got["out"], want["out"], rtol=1e-5, atol=2e-4)  # sums of 576 products in another order


def test_other_targets_read_each_window_element_once():
  """-t c (every target but cuda) rewrites only gated loads: conv3x3 with a row of 4 outputs a thread
  and the 3 taps of kx unrolled reads 4 + 3 - 1 = 6 elements of x an iteration, not 4 x 3."""
  import io
  from uopc.frontend import parse_source
  from uopc.pipeline import PrintOptions, compile_module
  from uopc.stages.optimize import parse_schedule
  path = MODELS / "conv3x3.uop"
  schedule = parse_schedule(["conv3x3__conv3x3_k0:SPLIT(2,4,u),SPLIT(0,32,u),SPLIT(7,3,r),SPLIT(0,2,t,top)"])
  out = io.StringIO()
  compile_module(parse_source(path.read_text(), str(path)), "c", "conv3x3", PrintOptions(after=frozenset({"isel"}), out=out), schedule, vector_bytes=64)
  gated = [line for line in out.getvalue().splitlines() if re.search(r"= LOAD\(%\d+, %\d+, %\d+\)", line)]
  assert len(gated) == 6


def test_a_stack_of_vectors_is_read_lane_by_lane_across_its_sources():
  t = thread(7)
  two = UOp(Ops.ADD, idx.vec(2), (vec(t, t), vec(c(4), c(5))))
  cat = UOp(Ops.STACK, idx.vec(3), (c(9).alu(Ops.ADD, t), two))
  assert [canonical_offset(lane(cat, i), 4).src[1].arg for i in range(3)] == [9, 4, 5]
