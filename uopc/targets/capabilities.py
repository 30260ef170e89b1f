"""What a target renders itself: the data Instruction Selection reads from `Target.ops`.

A target's `Capabilities` name the decomposed ops (seed 000) it renders natively within the SPEC-NOTES
accuracy bar, per dtype, and those it renders only approximately (used under --fast-math), plus the few
machine facts Instruction Selection needs (float64, a hardware integer divider, fused multiply-adds, 32-bit
index arithmetic, constant address displacements). Each target's table lives with its target
(`uopc/targets/<name>/target.py`); the one both CPU targets share is here. Invariant: no stage looks a
target's name up to decide what it can do; it reads this object (or `Target`'s other fields).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from uopc.dtype import DType, dtypes
from uopc.ops import Ops

ALL = None  # every dtype
F16_F32 = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32})
TRANSCENDENTAL = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW)
SIMPLE = (Ops.NEG, Ops.SUB, Ops.DIV, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.NOT, Ops.MULACC)


@dataclass(frozen=True)
class Capabilities:
  """What a target renders itself. `native`/`approximate` map a decomposed op to the scalar dtypes it is
  rendered for (ALL: every dtype); an op absent from both is always decomposed."""
  native: Mapping[Ops, frozenset[DType] | None] = field(default_factory=dict)
  approximate: Mapping[Ops, frozenset[DType] | None] = field(default_factory=dict)
  float64: bool = True         # has float64 arithmetic (POW of float32 computes in it)
  int_division: bool = True    # has a hardware integer divider; without one IDIV/MOD by constants are lowered
  fused_mulacc: bool = False   # renders MULACC {"fused"}: formed for ints, for floats under --fast-math or --fp-contract=fast
  index32: bool = False        # index arithmetic whose values fit in int32 is done in 32 bits (uopc.stages.index_width)
  displacement: bool = False   # every load/store offset as base + constant (uopc.stages.address_offsets; else gated loads' only)

  def renders(self, op: Ops, dt: DType, fast_math: bool) -> bool:
    tables = (self.native, self.approximate) if fast_math else (self.native,)
    return any(op in t and (t[op] is ALL or dt.scalar in t[op]) for t in tables)

  def without(self, *ops: Ops) -> "Capabilities":
    """These capabilities less `ops` (tests force the decompositions onto the C target with it)."""
    return replace(self, native={o: d for o, d in self.native.items() if o not in ops},
                   approximate={o: d for o, d in self.approximate.items() if o not in ops})


EVERYTHING = {op: ALL for op in SIMPLE + TRANSCENDENTAL + (Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD)}
RENDERS_EVERYTHING = Capabilities(EVERYTHING)  # a target without a table: its renderer refuses what it lacks

# The CPU targets (-t c, -t llvm). C: glibc's exp2/log2/sin/sqrt/pow are within 1 ULP; the prelude has THREEFRY
# and the floor divisions. LLVM on the host: the intrinsics become the same libm calls. float16/bfloat16/float32
# EXP2 and LOG2 take the decompositions (within 1 ULP, like libm): they are plain arithmetic the C compiler
# vectorises, where a libm call per element is not (softmax: 1.35x faster).
CPU = Capabilities({**EVERYTHING, Ops.EXP2: frozenset({dtypes.float64}), Ops.LOG2: frozenset({dtypes.float64})})
