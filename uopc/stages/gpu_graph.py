"""Tensor-level rewrites for the GPU targets (cuda, amd, metal), run by Rangeify before it splits the program.

Long reductions to few values. A GPU runs one output's reduction in one workgroup at most (a row of
uopc.stages.gpu_rows, or a tile's GROUP_REDUCE threads), so a REDUCE with fewer than SPLIT_OUTPUTS
values, each of SPLIT_ROW x 4 elements or more, would leave most of the GPU idle: a loss's mean over a
whole tensor ran in one workgroup (1M floats: 0.052 ms on an H100, tinygrad 0.020), an image
normalization's per-channel statistics over 8 x 224 x 224 in one workgroup of 48 threads (0.66 ms,
tinygrad 0.034). Such a REDUCE becomes two: the reductions of P parts of each value (realized, P x values
rows that fill the GPU), then the reduction of those partials. The parts are taken from the reduced axes
outermost first (whole axes while they fit, then a divisor of the next one), so each part reads whole
inner rows: P is the most that leaves SPLIT_ROW elements or more a part and SPLIT_PARTIALS rows or fewer
in all; a sum whose outer axis has no such divisor is padded with zeros to one (`_parts`). The split changes the
order of a float reduction's operations, in a way fixed by the shapes alone
(the same on every GPU); integer and MAX reductions give the same values.
"""
from __future__ import annotations

from math import prod

from uopc.ops import Ops
from uopc.uop import UOp

SPLIT_OUTPUTS = 256    # a REDUCE to fewer values than this may be split ...
SPLIT_ROW = 4096       # ... where each value reduces 4 x this many elements or more; a part keeps this many at least
                       # (shorter rows, 64 x 4096 of a softmax, pay less in one workgroup each than in more launches)
SPLIT_PARTIALS = 1024  # partial values in all (parts x values) at most: the first kernel's rows


def gpu_graph(sink: UOp) -> UOp:
  """Every long REDUCE to few values split in two (module docstring)."""
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo[s] for s in u.src)
    new = u if src == u.src else u.replace(src=src)
    if u.op is Ops.REDUCE and len(u.src) == 1 and (split := _split(new)) is not None: new = split
    memo[u] = new
  return memo[sink]


def _parts(dims: tuple[int, ...], axes: tuple[int, ...], most: int, pad: bool = False) -> tuple[dict[int, int], dict[int, int]]:
  """How many parts each reduced axis gives (outermost first: whole axes while they fit in `most`, then the
  largest divisor of the next that does; axes not listed give none), and the axes padded for it: with `pad` (a sum,
  whose padding adds zeros), an axis whose divisors would leave fewer than half the parts `most` allows (123 rows:
  3 parts of 41 x 457 where 13 fit) is padded to a multiple of the parts that fit (130 rows, 13 parts)."""
  parts: dict[int, int] = {}
  for a in sorted(axes):
    room = most // prod(parts.values())
    if dims[a] <= room: parts[a] = dims[a]; continue  # noqa: E702
    d = max(k for k in range(1, room + 1) if dims[a] % k == 0)
    if pad and 2 * d < room: return {**parts, a: room}, {a: -(-dims[a] // room) * room}
    if d > 1: parts[a] = d
    break
  return parts, {}


def _split(u: UOp) -> UOp | None:
  op, axes = u.arg
  src = u.src[0]
  dims = src.shape
  if not all(isinstance(d, int) for d in dims) or not all(isinstance(d, int) for d in u.shape): return None
  values, length = prod(u.shape), prod(dims) // max(1, prod(u.shape))
  if values >= SPLIT_OUTPUTS or length < 4 * SPLIT_ROW: return None
  parts, padded = _parts(dims, axes, min(SPLIT_PARTIALS // values, length // SPLIT_ROW), pad=op is Ops.ADD)
  if prod(parts.values()) < 2: return None
  if padded:
    sizes = tuple(padded.get(a, d) for a, d in enumerate(dims))
    src, dims = UOp(Ops.PAD, src.dtype, (src, UOp.shape_of((0,) * len(dims)), UOp.shape_of(sizes))), sizes
  # dims with each partly split axis a as (parts, rest); the first REDUCE keeps the parts, the second sums them
  shape: list[int] = []
  first: list[int] = []
  second: list[int] = []
  for a, d in enumerate(dims):
    p = parts.get(a, 1)
    if a in parts and p < d:
      second.append(len(shape)); shape.append(p)
      first.append(len(shape)); shape.append(d // p)
    else:
      (second if a in parts else first if a in axes else []).append(len(shape))
      shape.append(d)
  view = UOp(Ops.RESHAPE, src.dtype, (src, UOp.shape_of(tuple(shape))))
  partials = UOp(Ops.CONTIGUOUS, u.dtype, (UOp(Ops.REDUCE, u.dtype, (view,), (op, tuple(first))),))
  total = UOp(Ops.REDUCE, u.dtype, (partials,), (op, tuple(second)))
  return UOp(Ops.RESHAPE, u.dtype, (total, UOp.shape_of(u.shape)))
