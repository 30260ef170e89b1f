"""The schedule of multi-device programs, below what the collectives compute (test_multi_device.py checks
that): an allreduce is recorded as one collective over its launches with its inputs and outputs, writes a
stored output argument directly, keeps its inputs and outputs alive over all its launches in the memory
plan; each device's intermediates are planned in that device's own span of the workspace; copies of one
contiguous range are recognized (and only those)."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from multi_programs import collectives, tp_mlp  # noqa: E402

from uopc.dtype import dtypes  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.ops import AxisType, Ops  # noqa: E402
from uopc.stages.contiguous_copy import contiguous_copy  # noqa: E402
from uopc.stages.multi_device import lower_entry  # noqa: E402
from uopc.stages.plan import plan  # noqa: E402
from uopc.stages.rangeify import rangeify  # noqa: E402
from uopc.uop import UOp  # noqa: E402


def _program(prog):
  module = parse_source(prog.text(), f"{prog.name}.uop")
  entry, _ = lower_entry(module.entries[0], module)
  return rangeify(entry.sink)


def _by_name(n: int, name: str):
  return next(p for p in collectives(n, 2 * n) if p.name == name)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_an_allreduce_is_one_collective_writing_its_stored_outputs(n):
  program = _program(_by_name(n, "allreduce_op"))
  (c,) = program.collectives
  assert (c.kind, c.op, c.count) == ("allreduce", "ADD", 2 * n)
  assert [b.name for b in c.inputs] == [f"x_dev{j}" for j in range(n)]
  assert [b.name for b in c.outputs] == [f"out_dev{j}" for j in range(n)]  # forwarded: no store kernel after it
  assert (c.first, c.end) == (0, len(program.launches))
  assert [b.device for b in c.outputs] == [f"CPU:{j}" for j in range(n)]


def test_the_mlp_allreduce_keeps_its_buffers_alive_over_the_collective():
  program = _program(tp_mlp(2))
  (c,) = program.collectives
  assert all(not b.is_arg for b in c.inputs + c.outputs) and 0 < c.first < c.end < len(program.launches)
  assert [b.device for b in c.inputs] == ["CPU:0", "CPU:1"] == [b.device for b in c.outputs]
  placed = {p.buffer.slot: p for p in plan(program).placements}
  for b in c.inputs + c.outputs:
    assert placed[b.slot].first <= c.first and placed[b.slot].last >= c.end - 1, b.name


def test_a_copy_between_devices_is_not_a_collective():
  assert not _program(_by_name(2, "gather")).collectives
  assert not _program(_by_name(2, "allreduce")).collectives  # seed 000's composition as written: copies and sums


@pytest.mark.parametrize("prog", [tp_mlp(2), tp_mlp(3, hidden=6), _by_name(4, "allreduce_op"), _by_name(3, "reduce_scatter")],
                         ids=["mlp2", "mlp3", "allreduce4", "reduce_scatter3"])
def test_each_device_plans_its_intermediates_in_its_own_span(prog):
  s = plan(_program(prog))
  spans = {d: (base, size) for d, base, size in s.device_spans}
  assert set(spans) == {p.buffer.device for p in s.placements} and len(spans) == prog.n
  ends = sorted((base, base + size) for base, size in spans.values())
  assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:])) and ends[-1][1] <= s.workspace_size
  for p in s.placements:
    base, size = spans[p.buffer.device]
    assert base <= p.offset and p.offset + p.nbytes <= base + size, p


def test_copies_of_contiguous_ranges_are_recognized():
  program = _program(_by_name(2, "allreduce_op"))
  copies = [(ln.buffer(ln.copy.src).name, ln.copy.offset, ln.copy.count, ln.buffer(ln.copy.dst).device) for ln in program.launches if ln.peers]
  # reduce_scatter: each device fetches its chunk of the other's shard; allgather: the other's reduced chunk
  assert copies[:2] == [("x_dev1", 0, 2, "CPU:0"), ("x_dev0", 2, 2, "CPU:1")] and len(copies) == 4
  assert all(ln.copy is None for ln in program.launches if not ln.peers)


def test_a_permuted_copy_is_a_kernel():
  text = """func t {
  %x = PARAM([2, 3]) {(0, "x", "CPU:0")} : f32
  %out = PARAM([3, 2]) {(1, "out", "CPU:1")} : f32
  %p = PERMUTE(%x) {(1, 0)}
  %c = COPY(%p) {"CPU:1"}
  STORE(%out, %c)
}
"""
  module = parse_source(text, "t.uop")
  entry, _ = lower_entry(module.entries[0], module)
  program = rangeify(entry.sink)
  copies = [ln for ln in program.launches if ln.peers]
  assert copies and all(ln.copy is None for ln in copies)


def _copy_kernel(n: int, src_index) -> UOp:
  """out[i] = src[src_index(i)] for i < n, as Rangeify writes a copy kernel."""
  idx = lambda x: x if isinstance(x, UOp) else UOp.const(dtypes.index, x)  # noqa: E731
  r = UOp(Ops.RANGE, dtypes.index, (idx(n),), (0, AxisType.LOOP))
  out = UOp(Ops.PARAM, dtypes.float32.ptr(), (), (1, "out"))
  src = UOp(Ops.PARAM, dtypes.float32.ptr(), (), (0, "src"))
  e = src_index(r, idx)
  load = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, src.dtype, (src, e)),))
  st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, r)), load))
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (st, r)),))


def _binary(op):
  return lambda a, b: UOp(op, dtypes.index, (a, b))


ADD, MUL, IDIV, MOD = (_binary(o) for o in (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD))
INDEXES = [  # (src index of i, the offset when it is i + c for every i < 1000, else None)
  (lambda r, c: ADD(r, c(6)), 6),
  (lambda r, c: ADD(MOD(ADD(r, c(2)), c(4)), MUL(IDIV(ADD(r, c(6)), c(4)), c(4))), 6),  # (i+2)%4 + (i+6)//4*4: i + 6
  (lambda r, c: ADD(MOD(r, c(4)), MUL(IDIV(ADD(r, c(6)), c(4)), c(4))), None),  # i%4 + (i+6)//4*4: not i + 6
  (lambda r, c: ADD(MOD(r, c(999)), c(1)), None),  # equal to i + 1 except at i = 999
  (lambda r, c: MUL(r, c(2)), None),
  (lambda r, c: MUL(r, r), None),
]


@pytest.mark.parametrize("index, offset", INDEXES, ids=[str(i) for i in range(len(INDEXES))])
def test_a_source_index_is_proven_an_offset_of_the_output_index(index, offset):
  got = contiguous_copy(_copy_kernel(1000, index))
  assert (got.offset if got else None) == offset
  if got: assert (got.dst, got.src, got.count) == (1, 0, 1000)


def test_a_large_copy_is_proven_without_visiting_every_element():
  c = (1 << 27) + 2  # (i+2)%4 + (i+c)//4*4 is i + c, as c % 4 == 2
  got = contiguous_copy(_copy_kernel(1 << 28, lambda r, k: ADD(MOD(ADD(r, k(2)), k(4)), MUL(IDIV(ADD(r, k(c)), k(4)), k(4)))))
  assert got is not None and (got.offset, got.count) == (c, 1 << 28)
