"""Register/Memory Plan (seed 000), for the GLOBAL intermediates of a tensor program.

Each intermediate buffer lives from the first launch that binds it to the last. Buffers whose
lifetimes do not overlap share storage: they are placed at offsets of one workspace, largest first,
each at the lowest aligned offset that no lifetime-overlapping buffer already occupies (first fit).
A symbolic size is planned at its DEFINE_VAR's maximum, so one workspace fits every allowed call.
The inputs and outputs of a collective (`KernelProgram.collectives`) live over all its launches, as a
launcher may run it as one operation (NCCL) in their place.

A multi-device program plans each device's intermediates apart, as one workspace per device: the
workspace is their concatenation, device by device in order of first appearance, `device_spans`
giving each device's (base offset, size) in it. A launcher with one memory (the C target) allocates
the whole; a GPU launcher allocates each device's span on that device (an offset minus the span's base
is the offset in that device's workspace).

The `Schedule` is what a launcher runs: the distinct kernels, the launches in run order (a kernel and
the buffer bound to each of its pointer PARAM slots), and for each intermediate its byte offset in a
workspace of `workspace_size` bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Any

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
  collectives: tuple = ()  # Collective, as KernelProgram's
  device_spans: tuple[tuple[Any, int, int], ...] = ()  # (device, base, size) of each device's workspace; () on one device

  @property
  def unshared_size(self) -> int: return sum(_aligned(p.nbytes) for p in self.placements)

  def format(self) -> str:
    lines = [f"workspace {self.workspace_size} bytes (unshared {self.unshared_size})"]
    lines += [f"  on {d}: {size} bytes from offset {base}" for d, base, size in self.device_spans]
    lines += [f"  slot {p.buffer.slot} {p.buffer.name}: {p.buffer.dtype}{format_shape(p.buffer.shape)} {p.nbytes} bytes "
              f"at offset {p.offset}, launches {p.first}..{p.last}" for p in self.placements]
    args = ", ".join(f"{b.name}@{b.slot}" for b in self.buffers if b.is_arg)
    lines.append(f"  arguments: {args}")
    return "\n".join(lines) + "\n"


def _aligned(n: int) -> int: return (n + ALIGN - 1) // ALIGN * ALIGN


def buffer_nbytes(b: BufferInfo) -> int:
  """The bytes a buffer needs (a symbolic size at its maximum)."""
  return prod(d if isinstance(d, int) else int(d.vmax) for d in b.shape) * b.dtype.itemsize


def _lifetimes(program: KernelProgram, slots: set[int]) -> dict[int, tuple[int, int]]:
  spans: dict[int, tuple[int, int]] = {}
  def live(slot: int, first: int, last: int) -> None:
    if slot not in slots: return
    a, b = spans.get(slot, (first, last))
    spans[slot] = (min(a, first), max(b, last))
  for i, launch in enumerate(program.launches):
    for _, b in launch.binds: live(b.slot, i, i)
  for c in program.collectives:
    for b in c.inputs + c.outputs: live(b.slot, c.first, c.end - 1)
  return spans


def _first_fit(size: int, busy: list[tuple[int, int]]) -> int:
  """The lowest offset where `size` bytes overlap none of the `busy` [start, end) byte ranges."""
  offset = 0
  for start, end in sorted(busy):
    if offset + size <= start: break
    offset = max(offset, _aligned(end))
  return offset


def _place(temps: list[BufferInfo], spans: dict[int, tuple[int, int]]) -> list[Placement]:
  """First fit, largest first, of `temps` in one workspace from offset 0."""
  placed: list[Placement] = []
  for b in sorted(temps, key=lambda b: (-buffer_nbytes(b), b.slot)):
    first, last = spans[b.slot]
    busy = [(p.offset, p.offset + p.nbytes) for p in placed if p.first <= last and first <= p.last]
    nbytes = buffer_nbytes(b)
    placed.append(Placement(b, _first_fit(nbytes, busy), nbytes, first, last))
  return placed


def plan(program: KernelProgram, kernels: tuple | None = None) -> Schedule:
  """Place `program`'s intermediates in one workspace (a span per device); `kernels` (default: the
  program's kernel SINKs) are what the schedule carries, e.g. the rendered kernels."""
  temps = {b.slot: b for b in program.intermediates}
  spans = _lifetimes(program, set(temps))
  devices = list(dict.fromkeys(b.device for b in program.buffers if b.slot in spans))
  multi = len({b.device for b in program.buffers} - {None}) > 1
  placed: list[Placement] = []
  device_spans = []
  for d in devices:
    mine = _place([temps[s] for s in spans if temps[s].device == d], spans)
    base = _aligned(max((p.offset + p.nbytes for p in placed), default=0))
    placed += [replace(p, offset=base + p.offset) for p in mine]
    device_spans.append((d, base, _aligned(max((p.offset + p.nbytes for p in mine), default=0))))
  placed.sort(key=lambda p: p.buffer.slot)
  size = _aligned(max((p.offset + p.nbytes for p in placed), default=0))
  return Schedule(program.kernels if kernels is None else tuple(kernels), program.launches, program.buffers, tuple(placed), size,
                  program.collectives, tuple(device_spans) if multi else ())
