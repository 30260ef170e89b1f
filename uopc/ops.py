"""The op set of the UOp IR (seed 000), the legacy names of seeds 001-003 and the axis types.

Ops are grouped by what they are, because passes and the verifier reason in groups
("every elementwise binary op", "every movement op") rather than op by op.
"""
from __future__ import annotations

import enum


FUSED = "fused"  # MULACC {"fused"}: a * b + c rounded once (a fused multiply-add); no arg: rounded twice, as ADD(MUL)


class Ops(enum.Enum):
  # source ops
  PARAM = enum.auto(); BUFFER = enum.auto(); CONST = enum.auto(); BINARY = enum.auto()  # noqa: E702
  DEFINE_VAR = enum.auto(); BIND = enum.auto()  # noqa: E702
  # movement ops
  PERMUTE = enum.auto(); FLIP = enum.auto(); RESHAPE = enum.auto(); EXPAND = enum.auto()  # noqa: E702
  PAD = enum.auto(); SHRINK = enum.auto(); INDEX = enum.auto(); STACK = enum.auto(); BITCAST = enum.auto()  # noqa: E702
  # reduce
  REDUCE = enum.auto()
  # call ops
  FUNCTION = enum.auto(); CALL = enum.auto(); TUPLE = enum.auto(); GETTUPLE = enum.auto()  # noqa: E702
  # memory
  LOAD = enum.auto(); STORE = enum.auto()  # noqa: E702
  # ordering
  RANGE = enum.auto(); END = enum.auto(); AFTER = enum.auto(); GROUP = enum.auto()  # noqa: E702
  SINK = enum.auto(); LINEAR = enum.auto()  # noqa: E702
  # elementwise primitives
  RECIP = enum.auto(); TRUNC = enum.auto(); CAST = enum.auto()  # noqa: E702
  ADD = enum.auto(); MUL = enum.auto(); MAX = enum.auto(); MOD = enum.auto(); IDIV = enum.auto()  # noqa: E702
  CMPLT = enum.auto(); CMPNE = enum.auto()  # noqa: E702
  XOR = enum.auto(); OR = enum.auto(); AND = enum.auto(); SHR = enum.auto(); SHL = enum.auto()  # noqa: E702
  WHERE = enum.auto()
  # decomposed elementwise ops (lowered by Instruction Selection where a target lacks them)
  NEG = enum.auto(); SUB = enum.auto(); DIV = enum.auto()  # noqa: E702
  CMPGT = enum.auto(); CMPGE = enum.auto(); CMPLE = enum.auto(); CMPEQ = enum.auto(); NOT = enum.auto()  # noqa: E702
  EXP2 = enum.auto(); LOG2 = enum.auto(); SIN = enum.auto(); SQRT = enum.auto(); POW = enum.auto()  # noqa: E702
  MULACC = enum.auto(); THREEFRY = enum.auto(); FLOORDIV = enum.auto(); FLOORMOD = enum.auto()  # noqa: E702
  # markers (identity on data)
  CONTIGUOUS = enum.auto(); CONTIGUOUSBACKWARD = enum.auto(); DETACH = enum.auto()  # noqa: E702
  # multi-device: MULTI(shard_0, ...) {axis} is one tensor whose shard on device i is shard_i (axis None: each
  # device holds a whole copy); MSELECT picks one device's shard, ALLREDUCE reduces across the devices,
  # REPLICATED is seed 000's `.replicated(k)` (k: a shard axis of one row per device, dropped)
  MULTI = enum.auto(); MSELECT = enum.auto(); ALLREDUCE = enum.auto(); REPLICATED = enum.auto()  # noqa: E702
  # codegen ops
  BARRIER = enum.auto(); INS = enum.auto(); SPECIAL = enum.auto(); IF = enum.auto(); ENDIF = enum.auto()  # noqa: E702
  WMMA = enum.auto(); CUSTOM = enum.auto(); CUSTOMI = enum.auto(); ATOMICADD = enum.auto()  # noqa: E702
  CUSTOMFUNCTION = enum.auto(); PROGRAM = enum.auto(); SOURCE = enum.auto()  # noqa: E702
  GEP = enum.auto(); CONTRACT = enum.auto(); UNROLL = enum.auto(); NOOP = enum.auto()  # noqa: E702

  def __repr__(self) -> str: return f"Ops.{self.name}"
  # identity hashing in C: Enum's own __hash__ is Python code (hash of the name), and every `op in
  # GroupOp.X` and dict keyed by op runs it; members are singletons, so identity is equality
  __hash__ = object.__hash__


class GroupOp:
  Unary = frozenset({Ops.RECIP, Ops.TRUNC, Ops.NEG, Ops.NOT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})
  Binary = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MOD, Ops.IDIV, Ops.CMPLT, Ops.CMPNE, Ops.XOR, Ops.OR, Ops.AND,
                      Ops.SHR, Ops.SHL, Ops.SUB, Ops.DIV, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.POW,
                      Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD})
  Ternary = frozenset({Ops.WHERE, Ops.MULACC})
  ALU = Unary | Binary | Ternary
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR})
  Bitwise = frozenset({Ops.XOR, Ops.OR, Ops.AND, Ops.SHR, Ops.SHL})
  IntOnly = frozenset({Ops.MOD, Ops.IDIV, Ops.SHR, Ops.SHL, Ops.FLOORDIV, Ops.FLOORMOD, Ops.THREEFRY})
  FloatOnly = frozenset({Ops.RECIP, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.DIV})
  Decomposed = frozenset({Ops.NEG, Ops.SUB, Ops.DIV, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.NOT, Ops.EXP2,
                          Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.MULACC, Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD})
  Movement = frozenset({Ops.PERMUTE, Ops.FLIP, Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK})
  Markers = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUSBACKWARD, Ops.DETACH})
  Buffers = frozenset({Ops.PARAM, Ops.BUFFER})
  # ops whose value is void: they exist for their effect or to order others
  Void = frozenset({Ops.STORE, Ops.END, Ops.GROUP, Ops.SINK, Ops.BARRIER, Ops.IF, Ops.ENDIF, Ops.LINEAR, Ops.NOOP})


class AxisType(enum.Enum):
  """The role of a RANGE axis (seed 000 OptOps table); the letter is how `--print-after optimize` shows it."""
  GLOBAL = "g"; LOCAL = "l"; WARP = "w"; THREAD = "t"; LOOP = "L"; REDUCE = "R"  # noqa: E702
  GROUP_REDUCE = "G"; UPCAST = "u"; UNROLL = "r"  # noqa: E702

  def __repr__(self) -> str: return f"AxisType.{self.name}"
  @property
  def letter(self) -> str: return self.value


# Legacy op names of seeds 001-003 whose meaning is a plain rename. Structural legacy forms
# (DEFINE_GLOBAL's arg, ASSIGN, VCONST, LOOP's start, old-style LOAD/STORE) live in frontend/legacy.py.
OP_ALIASES: dict[str, Ops] = {
  "LOOP": Ops.RANGE, "ENDLOOP": Ops.END, "ENDRANGE": Ops.END, "REDUCE_AXIS": Ops.REDUCE,
  "VECTORIZE": Ops.STACK, "RECIPROCAL": Ops.RECIP, "CDIV": Ops.IDIV, "CMOD": Ops.MOD, "FDIV": Ops.DIV,
  "CONTIGUOUS_BACKWARD": Ops.CONTIGUOUSBACKWARD, "COPY": Ops.LOAD,
  "MSTACK": Ops.MULTI,  # tinygrad 0.14's per-device stack: a MULTI without a shard axis
}
# legacy names that need more than a rename; the front end rewrites them to modern IR
LEGACY_STRUCTURAL = frozenset({"DEFINE_GLOBAL", "DEFINE_LOCAL", "DEFINE_ACC", "ASSIGN", "VCONST", "ALU"})


def op_by_name(name: str) -> Ops | None:
  """`ADD`, `Ops.ADD`, `UOps.ADD`, `BinaryOps.ADD`, `LOOP` ... -> Ops (structural legacy names excluded)."""
  for prefix in ("UOps.", "Ops.", "BinaryOps.", "UnaryOps.", "TernaryOps.", "ReduceOps."):
    name = name.removeprefix(prefix)
  if name in Ops.__members__: return Ops[name]
  return OP_ALIASES.get(name)
