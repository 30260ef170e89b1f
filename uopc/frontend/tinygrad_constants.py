"""`constants="embed"` of the tinygrad exporter: constant tensors written into the program as BINARY data.

A buffer the traced graph reads that is not an input (a model weight, a tensor made from a list or a
numpy array) is by default a PARAM the application passes. With `constants="embed"`, one whose data
tinygrad holds (realized, or made from Python or numpy data) and whose size is at most `max_bytes` is
written as its bytes instead: `BINARY {x"..."}`, viewed as the buffer's dtype by `BITCAST` (u8 data is
used as it is, bool data is `CAST` to bool) and reshaped to the tensor's shape. The bytes are tinygrad's
buffer as it holds it in memory: little-endian elements in row-major order.

Invariants:
- Exact: the embedded value is bit for bit the buffer's; nothing is converted or rounded.
- A buffer that is not embedded stays a PARAM, and a note at the user's line that made it says why
  (larger than `max_bytes`, no data: `Tensor.empty` or not realized, or sharded over several devices;
  a buffer replicated on several devices is embedded once, from its first device's copy).
- Embedding never changes the slots of the inputs; the PARAMs after them (weights that stay PARAMs,
  then the outputs) are numbered without the embedded ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from uopc.diagnostics import Loc, note

MODES = ("param", "embed")
DEFAULT_MAX_BYTES = 1 << 20  # 1 MiB: a weight larger than this stays a PARAM (its text would be 2 bytes per byte)


@dataclass
class Constants:
  """How the exporter writes the buffers a graph reads that are not inputs, and the notes it made."""
  mode: str = "param"
  max_bytes: int = DEFAULT_MAX_BYTES
  notes: list[tuple[tuple[str, int] | None, str]] = field(default_factory=list)  # (user site, message)

  def __post_init__(self):
    if self.mode not in MODES: raise ValueError(f"constants must be one of {', '.join(MODES)}, got {self.mode!r}")
    if not isinstance(self.max_bytes, int) or self.max_bytes < 0:
      raise ValueError(f"max_constant_bytes must be a size in bytes, got {self.max_bytes!r}")

  def embed(self, buf: Any, shape: tuple, dtype: str, let: Callable[[str], str], dims: Callable[[tuple], str],
            site: tuple[str, int] | None, name: str, sharded: bool = False) -> str | None:
    """The value of the statements that embed `buf` (a tinygrad BUFFER read as `shape`; `sharded`: its
    devices hold its shards), or None when it stays a PARAM named `name` (with a note saying why)."""
    if self.mode != "embed": return None
    data, why = buffer_data(buf, sharded)
    if data is not None and len(data) > self.max_bytes:
      data, why = None, f"its {len(data)} bytes are more than the {self.max_bytes} embedded at most (max_constant_bytes)"
    if data is None:
      self.notes.append((site, f"the constant '{name}' ({dtype}{list(shape)}) stays a PARAM: {why}"))
      return None
    value = let(f'BINARY {{x"{data.hex()}"}}')
    if dtype == "bool": value = let(f"CAST({value}) : bool")
    elif dtype != "u8": value = let(f"BITCAST({value}) : {dtype}")
    n = len(data) // _itemsize(dtype)
    return value if tuple(shape) == (n,) else let(f"RESHAPE({value}, {dims(shape)})")

  def report(self) -> None:
    """Write the notes (through the current reporter: the CLI's, or stderr for library use), each at
    the user's line that first used the constant."""
    from uopc.reporter import current
    for site, message in self.notes:
      loc, source = None, None
      if site is not None:
        try:
          with open(site[0]) as f: source = f.read()
        except OSError:
          pass
      if source is not None:
        lines = source.splitlines()
        line = lines[site[1] - 1] if 1 <= site[1] <= len(lines) else ""
        loc = Loc(site[0], site[1], len(line) - len(line.lstrip()) + 1)
      current().report(note(loc, message), source)


_SIZES = {"bool": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "f16": 2, "bf16": 2, "i32": 4, "u32": 4, "f32": 4,
          "i64": 8, "u64": 8, "f64": 8}


def _itemsize(dtype: str) -> int: return _SIZES[dtype]


def buffer_data(buf: Any, sharded: bool = False) -> tuple[bytes | None, str]:
  """The bytes tinygrad holds for BUFFER `buf` (its memory, copied out of its device; of a buffer
  replicated on several devices, the first device's copy), or None and why not."""
  from tinygrad.uop.ops import buffers
  if sharded: return None, f"it is sharded over {len(buf.arg.device)} devices"
  b = buffers.get(buf)
  if b is not None and isinstance(buf.arg.device, tuple): b = b.bufs[0]
  if b is None or not b.is_allocated(): return None, "tinygrad holds no data for it (Tensor.empty, or not realized)"
  return bytes(b.as_memoryview()), ""
