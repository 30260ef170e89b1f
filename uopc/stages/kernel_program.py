"""What Rangeify makes of a tensor program: its kernels, its buffers (arguments and intermediates), its
run-time sizes and the launches that run the kernels in order on those buffers."""
from __future__ import annotations

from dataclasses import dataclass
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
class Launch:
  """One run of `kernels[kernel]`, with `binds[i] = (kernel slot, buffer)`: the program buffer its pointer
  PARAM of that slot reads or writes. A kernel of the entry itself uses the buffers' own slots; a
  CALL body's kernel uses the body's slots, and each call site binds them to its own buffers."""
  kernel: int
  binds: tuple[tuple[int, BufferInfo], ...]
  device: Any = None         # the device of the buffers it writes: where it runs
  peers: tuple[Any, ...] = ()  # the other devices it reads from: a copy between devices

  def describe(self) -> str:
    if self.device is None: return ""
    return f" on {self.device}" + (f", copying from {', '.join(map(str, self.peers))}" if self.peers else "")

  def buffer(self, kernel_slot: int) -> BufferInfo: return next(b for s, b in self.binds if s == kernel_slot)


@dataclass(frozen=True)
class KernelProgram:
  kernels: tuple[UOp, ...]     # the distinct kernel-level SINKs
  buffers: tuple[BufferInfo, ...]
  variables: tuple[UOp, ...]   # the DEFINE_VARs: run-time sizes, passed to every kernel that uses them
  launches: tuple[Launch, ...]  # in run order

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
    for i, k in enumerate(self.kernels): lines += [f"# kernel {i}", print_uops(k).rstrip("\n")]
    return "\n".join(lines) + "\n"
