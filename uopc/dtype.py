"""Data types of the UOp IR: scalars, vectors, pointers with an address space, `index` and `void`.

DTypes are interned (one object per distinct type) so they compare by identity and hash cheaply,
which the hash-consed UOp relies on.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import ClassVar


class AddrSpace(enum.Enum):
  GLOBAL = "global"
  LOCAL = "local"
  REG = "reg"

  def __repr__(self) -> str: return f"AddrSpace.{self.name}"


@dataclass(frozen=True, eq=False)
class DType:
  """A scalar (count == 1) or vector dtype. `kind` is one of b (bool), i, u, f, index, void."""
  name: str          # canonical long name of the scalar: float32, int8, ...
  short: str         # canonical short name used by the printer: f32, i8, ...
  kind: str
  itemsize: int      # bytes of the whole value (scalar size * count)
  count: int = 1
  _interned: ClassVar[dict] = {}

  @staticmethod
  def make(name: str, short: str, kind: str, itemsize: int, count: int = 1) -> "DType":
    key = ("s", name, count)
    if key not in DType._interned:
      DType._interned[key] = DType(name, short, kind, itemsize, count)
    return DType._interned[key]

  def __post_init__(self):
    # `scalar`, the element dtype (self for a scalar or a pointer), is a plain attribute set once: passes
    # read it for nearly every node, and a property would run Python code each time
    object.__setattr__(self, "scalar", self if self.count == 1 else _SCALARS[self.name])

  def vec(self, n: int) -> "DType":
    if self.count != 1 or n < 1: raise ValueError(f"cannot make a vector of {n} from {self}")
    if n == 1: return self
    return DType.make(self.name, self.short, self.kind, self.itemsize * n, n)
  def ptr(self, addrspace: AddrSpace = AddrSpace.GLOBAL, size: int = -1) -> "PtrDType":
    return PtrDType.make(self, addrspace, size)

  @property
  def bits(self) -> int: return self.scalar.itemsize * 8
  def is_float(self) -> bool: return self.kind == "f"
  def is_int(self) -> bool: return self.kind in ("i", "u", "index")
  def is_unsigned(self) -> bool: return self.kind == "u"
  def is_bool(self) -> bool: return self.kind == "b"
  def is_ptr(self) -> bool: return False

  def __str__(self) -> str: return self.short if self.count == 1 else f"{self.short}x{self.count}"
  def __repr__(self) -> str: return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"
  def __reduce__(self): return (parse_dtype, (str(self),))

  @property
  def min(self): return dtype_range(self)[0]
  @property
  def max(self): return dtype_range(self)[1]


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  """A pointer to `base` in `addrspace`; `size` is the element count when known, else -1."""
  base: DType = None  # type: ignore[assignment]
  addrspace: AddrSpace = AddrSpace.GLOBAL
  size: int = -1

  @staticmethod
  def make(base: DType, addrspace: AddrSpace = AddrSpace.GLOBAL, size: int = -1) -> "PtrDType":  # type: ignore[override]
    key = ("p", base, addrspace, size)
    if key not in DType._interned:
      DType._interned[key] = PtrDType("ptr", "ptr", "ptr", 8, 1, base, addrspace, size)
    return DType._interned[key]

  def is_ptr(self) -> bool: return True
  def __str__(self) -> str:
    parts = [str(self.base)] + ([self.addrspace.value] if self.addrspace is not AddrSpace.GLOBAL else [])
    return f"ptr<{', '.join(parts)}{f', {self.size}' if self.size >= 0 else ''}>"
  def __repr__(self) -> str: return str(self)


def _scalar(name: str, short: str, kind: str, size: int) -> DType: return DType.make(name, short, kind, size)


class dtypes:
  """The scalar dtypes by name (tinygrad-style namespace)."""
  bool = _scalar("bool", "bool", "b", 1)
  int8 = _scalar("int8", "i8", "i", 1)
  int16 = _scalar("int16", "i16", "i", 2)
  int32 = _scalar("int32", "i32", "i", 4)
  int64 = _scalar("int64", "i64", "i", 8)
  uint8 = _scalar("uint8", "u8", "u", 1)
  uint16 = _scalar("uint16", "u16", "u", 2)
  uint32 = _scalar("uint32", "u32", "u", 4)
  uint64 = _scalar("uint64", "u64", "u", 8)
  float16 = _scalar("float16", "f16", "f", 2)
  bfloat16 = _scalar("bfloat16", "bf16", "f", 2)
  float32 = _scalar("float32", "f32", "f", 4)
  float64 = _scalar("float64", "f64", "f", 8)
  index = _scalar("index", "index", "index", 8)
  void = _scalar("void", "void", "void", 0)


_SCALARS: dict[str, DType] = {d.name: d for d in vars(dtypes).values() if isinstance(d, DType)}
SCALARS: tuple[DType, ...] = tuple(_SCALARS.values())
INTS = tuple(d for d in SCALARS if d.kind in ("i", "u"))
FLOATS = tuple(d for d in SCALARS if d.kind == "f")

# every spelling accepted on input, mapped to the scalar dtype
ALIASES: dict[str, DType] = {**{d.name: d for d in SCALARS}, **{d.short: d for d in SCALARS},
  "char": dtypes.int8, "short": dtypes.int16, "int": dtypes.int32, "long": dtypes.int64,
  "uchar": dtypes.uint8, "ushort": dtypes.uint16, "uint": dtypes.uint32, "ulong": dtypes.uint64,
  "half": dtypes.float16, "float": dtypes.float32, "double": dtypes.float64, "default_float": dtypes.float32,
  "default_int": dtypes.int32}


def scalar_by_name(name: str) -> DType | None:
  """`float32`, `f32`, `dtypes.float`, `int` ... -> DType, or None when the name is unknown."""
  return ALIASES.get(name.removeprefix("dtypes."))


def parse_dtype(text: str) -> DType:
  """Parse the printed form of a dtype (the inverse of str()). Raises ValueError on unknown names."""
  text = text.strip()
  if text.startswith("ptr<") and text.endswith(">"):
    parts = [p.strip() for p in text[4:-1].split(",")]
    base, space, size = parse_dtype(parts[0]), AddrSpace.GLOBAL, -1
    for p in parts[1:]:
      if p.lstrip("-").isdigit(): size = int(p)
      else: space = AddrSpace(p)
    return PtrDType.make(base, space, size)
  if text.startswith("ptr."): return PtrDType.make(parse_dtype(text[4:]))
  if (d := scalar_by_name(text)) is not None: return d
  if "x" in text:
    head, _, n = text.rpartition("x")
    if n.isdigit() and (d := scalar_by_name(head)) is not None: return d.vec(int(n))
  raise ValueError(f"unknown dtype '{text}'")


def dtype_range(dt: DType) -> tuple:
  """[min, max] of the values a dtype can hold; vectors use their scalar's range."""
  dt = dt.scalar
  if dt.kind == "b": return (False, True)
  if dt.kind == "u": return (0, 2 ** dt.bits - 1)
  if dt.kind in ("i", "index"): return (-(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1)
  if dt.kind == "f": return (-math.inf, math.inf)
  return (None, None)


def truncate(value, dt: DType):
  """Wrap an int to `dt` (two's complement) or round a float to its precision; used by constant folding."""
  dt = dt.scalar
  if dt.kind == "b": return bool(value)
  if dt.kind in ("i", "u", "index"):
    v = int(value) & ((1 << dt.bits) - 1)
    return v - (1 << dt.bits) if dt.kind != "u" and v >= 1 << (dt.bits - 1) else v
  if dt.kind == "f":
    import numpy as np
    from ml_dtypes import bfloat16
    np_type = {"float16": np.float16, "bfloat16": bfloat16, "float32": np.float32, "float64": np.float64}[dt.name]
    with np.errstate(over="ignore"): return float(np_type(value))
  return value
