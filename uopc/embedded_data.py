"""Constant data embedded in a library: the BINARY data of a tensor program (model weights exported with
`constants="embed"`), as every target's launcher holds it.

Rangeify makes each distinct constant (a BINARY, or a BITCAST view of one) a read-only buffer of the
program (`BufferInfo.data`); its kernels read it through a pointer PARAM like any other buffer, so no
renderer knows about it. The launcher binds that pointer:
- `-t c`, `-t llvm`: a `static const` array of the library (`c_array`), 64-byte aligned;
- `-t cuda`, `-t amd`: the same array, copied to device memory once per context (CUDA) or device
  (HIP) when the library loads its module there, and kept as long as the module;
- `-t metal`: an MTLBuffer made from the array once per MTLDevice, kept on the device object.

Invariants: the bytes are the BINARY's, in order, so a multi-byte element is read little-endian (every
target uopc builds for is little-endian); a constant is never an argument of the entry (its slot is
internal, like a workspace buffer's) and never written; equal data is stored once per library
(`data_table`), whatever the number of entries, kernels or dtypes that read it.
"""
from __future__ import annotations

from typing import Any, Sequence

ALIGN = 64  # bytes: a cache line, and enough for any vector load of the targets


def data_table(entries: Sequence[Any]) -> tuple[bytes, ...]:
  """The distinct constant data of `entries` (EntryKernels), in order of first use."""
  return tuple(dict.fromkeys(data for e in entries for _, data in e.constants))


def slot_data(entry: Any, table: Sequence[bytes]) -> dict[int, int]:
  """Kernel buffer slot -> index in `table` of the data bound there, for one entry."""
  index = {data: i for i, data in enumerate(table)}
  return {slot: index[data] for slot, data in entry.constants}


def c_bytes(data: bytes, indent: str = "  ", per_line: int = 24) -> str:
  """The bytes as the body of a C initializer list, `per_line` a line."""
  rows = [", ".join(str(b) for b in data[j:j + per_line]) for j in range(0, len(data), per_line)]
  return indent + f",\n{indent}".join(rows) if rows else indent + "0"


def c_array(name: str, data: bytes) -> str:
  """A `static const` byte array holding `data`, 64-byte aligned (a zero-length array is not C: an empty
  constant gets one unused byte)."""
  return f"static const unsigned char {name}[{max(1, len(data))}] __attribute__((aligned({ALIGN}))) = {{\n{c_bytes(data)}\n}};"


def c_arrays(prefix: str, table: Sequence[bytes], tables: bool = False) -> str:
  """Every constant of a library as `PREFIX__data<i>`; with `tables`, then the size table
  `PREFIX__data_sizes` and the pointer table `PREFIX__datas` the GPU launchers upload from. Empty when
  there is no constant."""
  if not table: return ""
  arrays = "\n".join(c_array(f"{prefix}__data{i}", d) for i, d in enumerate(table))
  if not tables: return arrays
  sizes = ", ".join(str(len(d)) for d in table)
  pointers = ", ".join(f"{prefix}__data{i}" for i in range(len(table)))
  return (f"{arrays}\nstatic const size_t {prefix}__data_sizes[{len(table)}] = {{{sizes}}};\n"
          f"static const unsigned char* const {prefix}__datas[{len(table)}] = {{{pointers}}};")
