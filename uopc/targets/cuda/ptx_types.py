"""PTX types of uopc dtypes, shared by the PTX renderer's modules (uopc/targets/cuda/ptx.py and
ptx_memory.py): each scalar dtype's register class, its arithmetic and memory types, and immediates.
int64, uint64, index and addresses are 64-bit (`%rd`); 8/16-bit integers are held in 32 bits; float16
and bfloat16 as 16-bit bits (`%h`); bool as predicates.
"""
from __future__ import annotations

import struct
from typing import Any

import ml_dtypes
import numpy as np

from uopc.dtype import DType, dtypes
from uopc.ops import Ops
from uopc.uop import UOp

# register class of a scalar dtype: (register prefix, declaration type)
_CLASSES = {"pred": ("%p", ".pred"), "b16": ("%h", ".b16"), "b32": ("%r", ".b32"), "b64": ("%rd", ".b64"),
            "f32": ("%f", ".f32"), "f64": ("%fd", ".f64")}
_HALF = (dtypes.float16, dtypes.bfloat16)
_SMALL_INTS = (dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16)


def reg_class(dt: DType) -> str:
  dt = dt.scalar
  if dt.is_ptr(): return "b64"
  if dt is dtypes.bool: return "pred"
  if dt in _HALF: return "b16"
  if dt is dtypes.float32: return "f32"
  if dt is dtypes.float64: return "f64"
  if dt.is_int(): return "b64" if dt.itemsize == 8 else "b32"
  raise ValueError(f"no PTX register for {dt}")


def int_type(dt: DType) -> str:
  """The PTX type integer arithmetic on dt uses (8/16-bit values are computed in 32 bits)."""
  return ("u" if dt.is_unsigned() else "s") + ("64" if dt.itemsize == 8 else "32")


def mem_type(dt: DType) -> str:
  """The PTX type of one element of dt in memory."""
  if dt is dtypes.bool: return "u8"
  if dt in _HALF: return "b16"
  if dt.is_float(): return f"f{dt.bits}"
  return ("u" if dt.is_unsigned() else "s") + str(dt.bits)


def _float_t(dt: DType) -> str: return {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}.get(dt, f"f{dt.bits}")


def const_bits(value: Any, dt: DType) -> str:
  """An immediate holding exactly `value` in scalar dtype dt's register (ints canonical, floats as bits)."""
  if dt.is_int():
    v = int(value) & ((1 << (64 if dt.itemsize == 8 else 32)) - 1)  # narrow signed ints sign-extended to 32 bits
    return f"0x{v:016X}" if dt.itemsize == 8 else f"0x{v:08X}"
  with np.errstate(over="ignore"):
    if dt is dtypes.float16: return f"0x{int(np.array(value, np.float16).view(np.uint16)):04X}"
    if dt is dtypes.bfloat16: return f"0x{int(np.array(value, ml_dtypes.bfloat16).view(np.uint16)):04X}"
    if dt is dtypes.float32: return f"0f{struct.unpack('<I', struct.pack('<f', np.float32(value)))[0]:08X}"
  return f"0d{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X}"



def _root(u: UOp) -> UOp:
  while u.op in (Ops.INDEX, Ops.AFTER): u = u.src[0]
  return u


def _mov_type(dt: DType) -> str:
  cls = reg_class(dt)
  return cls if cls in ("f32", "f64") else "b" + cls[1:]
