"""What Rangeify makes of a tensor program: its kernels, its buffers (arguments and intermediates), its
run-time sizes and the launches that run the kernels in order on those buffers."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from uopc.dtype import DType
from uopc.ops import Ops
from uopc.uop import UOp, sint


@dataclass(frozen=True)
class BufferInfo:
  """A buffer of the program. Entry arguments keep their PARAM slot; intermediates get the slots
  after the last argument's. A kernel's pointer PARAM carries the slot of the buffer it is bound to."""
  name: str
  dtype: DType
  shape: tuple[sint, ...]
  slot: int
  is_arg: bool
  device: Any = None  # the device it lives on (a multi-device program's buffers are each on one)
  data: bytes | None = None  # constant data (a BINARY, or a BITCAST view of one): read-only, embedded in the library


def format_shape(shape: tuple[sint, ...]) -> str:
  """`[4, n]`: known sizes as numbers, a DEFINE_VAR by its name, other symbolic sizes as `?`."""
  return "[" + ", ".join(str(d) if isinstance(d, int) else d.arg[0] if d.op is Ops.DEFINE_VAR else "?" for d in shape) + "]"


def _kind(b: BufferInfo) -> str:
  if b.data is not None: return f"constant ({len(b.data)} bytes, embedded)"
  return "argument" if b.is_arg else "intermediate"


@dataclass(frozen=True)
class ContiguousCopy:
  """A copy kernel that moves elements [offset, offset + count) of the buffer at kernel slot `src` into the
  whole buffer at kernel slot `dst` (`uopc.stages.contiguous_copy`): a launcher may copy the memory instead."""
  dst: int
  src: int
  offset: int  # elements
  count: int


@dataclass(frozen=True)
class Collective:
  """A collective the schedule runs as launches `first` .. `end - 1` (a CALL site of a collective body,
  `uopc.stages.device_copies.allreduce`): `op` ("ADD", "MUL", "MAX") over `inputs` (one buffer per
  device, `count` elements each) into `outputs` (each device's result), which a launcher may run
  another way (NCCL) instead of those launches. The memory plan keeps the inputs and outputs alive
  over all of them."""
  kind: str  # "allreduce"
  op: str
  inputs: tuple[BufferInfo, ...]
  outputs: tuple[BufferInfo, ...]
  first: int
  end: int

  @property
  def count(self) -> int: return prod(self.inputs[0].shape)

  def describe(self) -> str:
    return (f"{self.kind} ({self.op}) of {', '.join(b.name for b in self.inputs)} into {', '.join(b.name for b in self.outputs)}: "
            f"launches {self.first}..{self.end - 1}")


@dataclass(frozen=True)
class Launch:
  """One run of `kernels[kernel]`, with `binds[i] = (kernel slot, buffer)`: the program buffer its pointer
  PARAM of that slot reads or writes. A kernel of the entry itself uses the buffers' own slots; a
  CALL body's kernel uses the body's slots, and each call site binds them to its own buffers."""
  kernel: int
  binds: tuple[tuple[int, BufferInfo], ...]
  device: Any = None         # the device of the buffers it writes: where it runs
  peers: tuple[Any, ...] = ()  # the other devices it reads from: a copy between devices
  copy: ContiguousCopy | None = None  # a copy between devices of one contiguous range (kernel slots)

  def describe(self) -> str:
    if self.device is None: return ""
    if not self.peers: return f" on {self.device}"
    whole = f" ({self.buffer(self.copy.src).name}[{self.copy.offset}:{self.copy.offset + self.copy.count}], contiguous)" if self.copy else ""
    return f" on {self.device}, copying from {', '.join(map(str, self.peers))}{whole}"

  def buffer(self, kernel_slot: int) -> BufferInfo: return next(b for s, b in self.binds if s == kernel_slot)


@dataclass(frozen=True)
class KernelProgram:
  kernels: tuple[UOp, ...]     # the distinct kernel-level SINKs
  buffers: tuple[BufferInfo, ...]
  variables: tuple[UOp, ...]   # the DEFINE_VARs: run-time sizes, passed to every kernel that uses them
  launches: tuple[Launch, ...]  # in run order
  collectives: tuple[Collective, ...] = ()

  def buffer(self, name: str) -> BufferInfo: return next(b for b in self.buffers if b.name == name)
  @property
  def intermediates(self) -> tuple[BufferInfo, ...]: return tuple(b for b in self.buffers if not b.is_arg and b.data is None)

  def format(self) -> str:
    """The kernel split, for `--print-after rangeify`: the buffers, then each kernel's IR."""
    from uopc.frontend import print_uops
    multi = len({b.device for b in self.buffers}) > 1  # a multi-device program: say where each thing is
    lines = [f"# {len(self.kernels)} kernel(s), {len(self.launches)} launch(es)"]
    lines += [f"# slot {b.slot} {b.name}: {b.dtype}{format_shape(b.shape)} {_kind(b)}"
              + (f" on {b.device}" if multi else "") for b in self.buffers]
    lines += [f"# launch {i}: kernel {ln.kernel}(" + ", ".join(f"{s}={b.name}" for s, b in ln.binds) + ")" + (ln.describe() if multi else "")
              for i, ln in enumerate(self.launches)]
    lines += [f"# collective: {c.describe()}" for c in self.collectives]
    for i, k in enumerate(self.kernels): lines += [f"# kernel {i}", print_uops(k).rstrip("\n")]
    return "\n".join(lines) + "\n"
