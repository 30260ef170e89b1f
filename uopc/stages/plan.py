"""Register/Memory Plan (seed 000), for the GLOBAL intermediates of a tensor program.

Each intermediate buffer lives from the first launch that binds it to the last. Buffers whose
lifetimes do not overlap share storage: they are placed at offsets of one workspace, largest first,
each at the lowest aligned offset that no lifetime-overlapping buffer already occupies (first fit).
A symbolic size is planned at its DEFINE_VAR's maximum, so one workspace fits every allowed call.

The `Schedule` is what a launcher runs: the distinct kernels, the launches in run order (a kernel and
the buffer bound to each of its pointer PARAM slots), and for each intermediate its byte offset in a
workspace of `workspace_size` bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from uopc.stages.kernel_program import BufferInfo, KernelProgram, Launch, format_shape

ALIGN = 64  # bytes; a cache line, and enough for any vector load of the targets


@dataclass(frozen=True)
class Placement:
  buffer: BufferInfo
  offset: int  # bytes into the workspace
  nbytes: int
  first: int   # the first and last launch (index in run order) that bind the buffer
  last: int


@dataclass(frozen=True)
class Schedule:
  kernels: tuple          # per distinct kernel: whatever the kernel stages made of it
  launches: tuple[Launch, ...]
  buffers: tuple[BufferInfo, ...]
  placements: tuple[Placement, ...]
  workspace_size: int

  @property
  def unshared_size(self) -> int: return sum(_aligned(p.nbytes) for p in self.placements)

  def format(self) -> str:
    lines = [f"workspace {self.workspace_size} bytes (unshared {self.unshared_size})"]
    lines += [f"  slot {p.buffer.slot} {p.buffer.name}: {p.buffer.dtype}{format_shape(p.buffer.shape)} {p.nbytes} bytes "
              f"at offset {p.offset}, launches {p.first}..{p.last}" for p in self.placements]
    args = ", ".join(f"{b.name}@{b.slot}" for b in self.buffers if b.is_arg)
    lines.append(f"  arguments: {args}")
    return "\n".join(lines) + "\n"


def _aligned(n: int) -> int: return (n + ALIGN - 1) // ALIGN * ALIGN


def _nbytes(b: BufferInfo) -> int:
  return prod(d if isinstance(d, int) else int(d.vmax) for d in b.shape) * b.dtype.itemsize


def _lifetimes(launches: tuple[Launch, ...], slots: set[int]) -> dict[int, tuple[int, int]]:
  spans: dict[int, tuple[int, int]] = {}
  for i, launch in enumerate(launches):
    for _, b in launch.binds:
      if b.slot in slots:
        first, _ = spans.get(b.slot, (i, i))
        spans[b.slot] = (first, i)
  return spans


def _first_fit(size: int, busy: list[tuple[int, int]]) -> int:
  """The lowest offset where `size` bytes overlap none of the `busy` [start, end) byte ranges."""
  offset = 0
  for start, end in sorted(busy):
    if offset + size <= start: break
    offset = max(offset, _aligned(end))
  return offset


def plan(program: KernelProgram, kernels: tuple | None = None) -> Schedule:
  """Place `program`'s intermediates in one workspace; `kernels` (default: the program's kernel
  SINKs) are what the schedule carries, e.g. the rendered kernels."""
  temps = {b.slot: b for b in program.intermediates}
  spans = _lifetimes(program.launches, set(temps))
  placed: list[Placement] = []
  for slot in sorted(spans, key=lambda s: (-_nbytes(temps[s]), s)):
    first, last = spans[slot]
    busy = [(p.offset, p.offset + p.nbytes) for p in placed if p.first <= last and first <= p.last]
    nbytes = _nbytes(temps[slot])
    placed.append(Placement(temps[slot], _first_fit(nbytes, busy), nbytes, first, last))
  placed.sort(key=lambda p: p.buffer.slot)
  size = _aligned(max((p.offset + p.nbytes for p in placed), default=0))
  return Schedule(program.kernels if kernels is None else tuple(kernels), program.launches, program.buffers, tuple(placed), size)
