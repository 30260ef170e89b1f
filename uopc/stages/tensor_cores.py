"""Tensor cores: the warp-wide matrix multiply-accumulates a target has, and how a warp holds their operands.

A `TensorCore` computes D = A @ B + C for an M x K matrix A, a K x N matrix B and an M x N accumulator
C/D, spread over the 32 lanes of a warp: each lane holds a few elements of every operand (its
*fragment*). Optimize's TC opt (uopc/stages/optimize.py) builds the fragments from the kernel's loads,
the WMMA op (arg: `TensorCore.arg`) does the multiply-accumulate, the renderer emits the instruction and
the emulator (uopc/emulator.py) computes it from the same layout. One table serves all three.

Layout of lane `l` (g = l // 4, t = l % 4, as PTX's mma.sync defines it): element i of a fragment
sits at (g + offset, s t + offset) of its matrix, s the tensor core's `k_lanes` step along K (2 for the
16-bit inputs of m16n8k16, 1 for m16n8k8's tf32), the offsets in the `a`, `b`, `c` tables:
A (M x K, row major): (row g + a[i][0], column s t + a[i][1]);
B (K x N): (row s t + b[j][0], column g + b[j][1]);
C and D (M x 8): (row g + c[n][0], column 2t + c[n][1]).

Fragments may also come from LOCAL memory through a warp-wide matrix load, PTX's `ldmatrix`: a LOAD with
arg (LDMATRIX, trans) and a vector dtype of 2m 16-bit lanes reads m 8 x 8 matrices; lane l gives the
address of row l % 8 of matrix l // 8 (lanes past 8m give unused addresses) and receives two elements
of each matrix (`ldmatrix_sources`): without trans row l // 4, columns 2 (l % 4) and + 1 (an A or C
fragment's pair); with trans rows 2 (l % 4) and + 1 of column l // 4 (a B fragment's pair).
"""
from __future__ import annotations

from dataclasses import dataclass

from uopc.dtype import DType, dtypes

WARP_SIZE = 32
LDMATRIX = "ldmatrix"  # the LOAD arg (LDMATRIX, trans) of a warp-wide matrix load (module docstring)
# Asynchronous copies into LOCAL memory (PTX cp.async, sm_80+), which feed the tensor cores' staged tiles:
# STORE(INDEX(local, i), LOAD(INDEX(global, j)[, zeros, gate]), arg=(ASYNC, commit)) starts a copy of the
# LOAD's 4, 8 or 16 bytes (zeros, reading nothing, where the gate is false); `commit` ends a group of
# copies. The copies of a group land at some time before a BARRIER with arg (ASYNC, n) that the thread
# reaches with at most n groups committed after theirs; until then their LOCAL elements are undefined.
ASYNC = "async"


@dataclass(frozen=True)
class TensorCore:
  name: str                    # the instruction shape, as PTX names it
  dims: tuple[int, int, int]   # M, N, K
  input: DType                 # A's and B's elements
  acc: DType                   # C's and D's elements
  a: tuple[tuple[int, int], ...]  # fragment offsets, see the module docstring
  b: tuple[tuple[int, int], ...]
  c: tuple[tuple[int, int], ...]
  k_lanes: int = 2             # a lane's step along K in the A and B fragments (s in the module docstring)

  @property
  def arg(self) -> tuple[str, str, str]:
    """The WMMA op's arg: (shape, input dtype, accumulator dtype)."""
    return (self.name, self.input.name, self.acc.name)

  def __str__(self) -> str: return f"{self.name} {self.input.name}->{self.acc.name}"


def _m16n8k16(input_dt: DType) -> TensorCore:
  return TensorCore("m16n8k16", (16, 8, 16), input_dt, dtypes.float32,
                    a=tuple((8 * ((i >> 1) & 1), (i & 1) + 8 * (i >> 2)) for i in range(8)),
                    b=tuple(((j & 1) + 8 * (j >> 1), 0) for j in range(4)),
                    c=tuple((8 * (n >> 1), n & 1) for n in range(4)))


# mma.sync.aligned.m16n8k16 with float32 accumulation: sm_80 and later (the PTX target's oldest arch)
CUDA_TENSOR_CORES = (_m16n8k16(dtypes.float16), _m16n8k16(dtypes.bfloat16))
# m16n8k8 of float32 inputs read as tf32 (10-bit mantissas, rounded to nearest by cvt.rna.tf32.f32), only
# where the build allows it (`uopc build --allow-tf32`): its products are not float32's
TF32_TENSOR_CORE = TensorCore("m16n8k8", (16, 8, 8), dtypes.float32, dtypes.float32,
                              a=((0, 0), (8, 0), (0, 4), (8, 4)), b=((0, 0), (4, 0)),
                              c=tuple((8 * (n >> 1), n & 1) for n in range(4)), k_lanes=1)


def by_arg(arg: tuple) -> TensorCore | None:
  """The tensor core a WMMA's arg names (None for an arg no target has)."""
  return next((tc for tc in (*CUDA_TENSOR_CORES, TF32_TENSOR_CORE) if tc.arg == tuple(arg)), None)


def ldmatrix_sources(lane: int, count: int, trans: bool) -> list[tuple[int, int]]:
  """For each of the `count` elements lane `lane` receives from an ldmatrix (module docstring): the lane
  whose address names the row it is read from, and its element within that row."""
  return [((8 * j + 2 * (lane % 4) + e, lane // 4) if trans else (8 * j + lane // 4, 2 * (lane % 4) + e))
          for j in range(count // 2) for e in range(2)]
