"""LLVM types and constants for uopc dtypes, per target.

Registers and memory differ for two dtypes: `bool` is `i1` in registers and `i8` in memory, and
`bfloat16` is a `float` holding an exactly representable bfloat16 value in registers and its 16
bits (`i16`) in memory. bfloat16 is computed in float32 and rounded once per op (SPEC-NOTES), and
LLVM's own `bfloat` lowers its conversions on x86 to libgcc's `__truncsfbf2`, which GCC 12's
libgcc lacks; so the rounding is ours (see `RoundBF16` in render.py). float16 is LLVM `half`: LLVM
promotes each op to float and rounds once, through libgcc/compiler-rt on hosts without F16C.
"""
from __future__ import annotations

import struct

import numpy as np
from ml_dtypes import bfloat16

from uopc.dtype import AddrSpace, DType, PtrDType, dtypes

_SCALAR = {
  "bool": "i1", "int8": "i8", "uint8": "i8", "int16": "i16", "uint16": "i16", "int32": "i32", "uint32": "i32",
  "int64": "i64", "uint64": "i64", "index": "i64", "float16": "half", "bfloat16": "float", "float32": "float",
  "float64": "double",
}
_MEMORY = {**_SCALAR, "bool": "i8", "bfloat16": "i16"}

# LLVM address spaces of the AMDGPU backend; the host has one flat space.
AMDGPU_ADDRSPACE = {AddrSpace.GLOBAL: 1, AddrSpace.LOCAL: 3, AddrSpace.REG: 5}


def _vector(scalar: str, count: int) -> str: return scalar if count == 1 else f"<{count} x {scalar}>"


def reg_type(dt: DType) -> str:
  """The type of a value of dtype `dt` in an SSA register."""
  return _vector(_SCALAR[dt.scalar.name], dt.count)


def mem_type(dt: DType) -> str:
  """The type of a value of dtype `dt` in memory."""
  return _vector(_MEMORY[dt.scalar.name], dt.count)


def ptr_type(dt: PtrDType, amdgpu: bool) -> str:
  if not amdgpu: return "ptr"
  return f"ptr addrspace({AMDGPU_ADDRSPACE[dt.addrspace]})"


def mangle(ty: str) -> str:
  """The overload suffix of an intrinsic: float -> f32, <4 x half> -> v4f16, i32 -> i32."""
  names = {"half": "f16", "float": "f32", "double": "f64"}
  if ty.startswith("<"):
    count, _, scalar = ty[1:-1].partition(" x ")
    return f"v{count}{mangle(scalar)}"
  return names.get(ty, ty)


def float_bits_literal(value: float, dt: DType) -> str:
  """An exact LLVM literal of a float constant: double-width hex for float/double (LLVM's format for
  both), 0xH for half. A bfloat16 register is a float holding the value rounded to bfloat16."""
  name = dt.scalar.name
  if name == "float16": return f"0xH{int(np.float16(value).view(np.uint16)):04X}"
  if name == "bfloat16": value = float(np.float32(bfloat16(value)))
  elif name == "float32":
    with np.errstate(over="ignore"): value = float(np.float32(value))
  return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def int_literal(value: int, dt: DType) -> str:
  """An integer constant as LLVM reads it: two's complement signed decimal of the type's width."""
  bits = 1 if dt.scalar is dtypes.bool else dt.scalar.itemsize * 8
  v = int(value) & ((1 << bits) - 1)
  if dt.scalar is dtypes.bool: return "true" if v else "false"
  return str(v - (1 << bits) if v >> (bits - 1) else v)


def scalar_literal(value, dt: DType) -> str:
  return float_bits_literal(float(value), dt) if dt.scalar.is_float() else int_literal(value, dt)


def const_literal(value, dt: DType) -> str:
  """A constant of dtype `dt`; a vector dtype gives a splat."""
  lit = scalar_literal(value, dt)
  if dt.count == 1: return lit
  elem = reg_type(dt.scalar)
  return "<" + ", ".join(f"{elem} {lit}" for _ in range(dt.count)) + ">"


def zero_of(dt: DType) -> str:
  return "zeroinitializer" if dt.count > 1 else scalar_literal(0, dt)


def is_signed(dt: DType) -> bool: return dt.scalar.kind in ("i", "index")


def bits_of(dt: DType) -> int: return 1 if dt.scalar is dtypes.bool else dt.scalar.itemsize * 8
