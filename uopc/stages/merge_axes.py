"""Adjacent reduce loops that walk memory as one loop become one loop (Optimize's first step).

A reduction over several tensor axes arrives from Rangeify as nested REDUCE loops, one per axis: an
image's per-channel statistics over (batch, rows, columns), a batch norm's over (batch, 28, 28), an
instance norm's over (32, 32). Every loop is then short, so the heuristics find no long reduction to
split into partials (CPU) or to share among a workgroup's threads (GPU): 8 x 224 x 224 floats per
channel were summed one after the other (1.3 ms on two cores), 8 x 28 x 28 per channel of a batch norm
ran in 16 workgroups of an H100.

Two REDUCE loops a (outer, A iterations) and b (inner, B) merge into one loop m of A * B iterations
when
- b's loop is all that a's body holds (END(END(x, b), a): nothing runs between their iterations),
- every value that reads them reads the combination B * a + b only: each index, gate or value that
  depends on a or b is a sum of constant multiples in which a's coefficient is B times b's (a row-major
  walk over both axes), and no other node takes a or b apart;
- an AFTER that orders on one orders on the other.
Each such sum then has c * m in place of c * (B * a + b), the AFTERs and the END name m, and the merge
repeats until no pair is left (three adjacent axes become one).

On a GPU the output loops (LOOPs) merge the same way. Around a reduction, the positions of a 1x1 convolution or of a
linear layer whose output is permuted back to channels first (ConvNeXt's, MobileNet's pointwise layers: outputs (c, h,
w), inputs read at (h * W + w) * C + k) become the one long axis of a gemm, which the staged schedule takes
(uopc.stages.local_staging; its tiles did not fit a 28- or 56-wide axis): 1x256x28x28 -> 512 channels on an H200,
0.047 -> 0.022 ms, a ConvNeXt block 0.153 -> 0.086 ms. A padded window's gates read h alone, so its axes stay apart.
Beside a reduction (an instance
norm's 32 x 32 outputs beside its statistics over 32 x 32) a workgroup row (uopc.stages.gpu_rows) then shares them
with the merged reductions: the whole instance norm is one kernel of rows of 1024, like a layernorm's (4 x 64 x 32
x 32 on an H200: 0.0155 ms in three kernels before). In an elementwise kernel the workgroup gets one long axis
where it had short ones: a bitonic sort's stages over (64, 2, 2, ..., 2) (tinygrad's topk) ran workgroups of
2 x 2 x 2 threads, the grid's three dimensions (65 launches: 0.46 -> 0.25 ms on an H200).

Invariants: m visits the same (a, b) in the same order as the two loops did, so every value, float
reductions included, is bit for bit what the unmerged kernel computes; only REDUCE loops, and on GPUs LOOPs,
of constant size merge (on CPUs the output loops keep their shape, which cpu_schedule's vector and thread choices
were measured with); m takes a's axis id, so the axis order of everything else is unchanged.
"""
from __future__ import annotations

from uopc.ops import AxisType, Ops
from uopc.stages.optimize import axis_size, axis_type, is_axis, nested_with
from uopc.symbolic import linear_form, simplify
from uopc.uop import UOp

_AFFINE = (Ops.ADD, Ops.MUL)


def merge_reduce_axes(sink: UOp, beside: bool = False) -> UOp:
  """Every mergeable pair of adjacent REDUCE loops merged (module docstring); with `beside` (GPU targets) also
  adjacent LOOPs."""
  while (found := _mergeable(sink, beside)) is not None: sink = _merge(sink, *found)
  return sink


def _axis(r: UOp, t: AxisType) -> bool: return is_axis(r) and axis_type(r) is t and isinstance(axis_size(r), int)


def _mergeable(sink: UOp, beside: bool) -> tuple[UOp, UOp, UOp, frozenset[UOp]] | None:
  """(outer END, a, b, the sums to rewrite) of the first mergeable pair, else None."""
  nodes = sink.toposort()
  users: dict[UOp, int] = {}
  for u in nodes:
    for s in u.src: users[s] = users.get(s, 0) + 1
  reduces = {r for r in nodes if _axis(r, AxisType.REDUCE)}
  near = nested_with(sink) if beside else {}
  def beside_loop(r: UOp) -> bool: return beside and _axis(r, AxisType.LOOP)
  for u in nodes:
    if u.op is not Ops.END or len(u.src) != 2 or u.src[0].op is not Ops.END or len(u.src[0].src) != 2: continue
    a, b = u.src[1], u.src[0].src[1]
    if not ((a in reduces and b in reduces) or (beside_loop(a) and beside_loop(b))) or users.get(u.src[0], 0) != 1: continue
    if (sums := _reads_as_one(nodes, u, a, b)) is not None: return u, a, b, sums
  return None


def _reads_as_one(nodes: list[UOp], end: UOp, a: UOp, b: UOp) -> frozenset[UOp] | None:
  """The sums (ADD/MUL expressions over a and b that other nodes read) when each holds them as c * (B * a + b)
  and nothing else reads a or b; None otherwise."""
  size, direct = axis_size(b), {a, b}  # a, b and the ADD/MUL expressions built on them
  for u in nodes:
    if u.op in _AFFINE and any(s in direct for s in u.src): direct.add(u)
  sums: set[UOp] = set()
  for u in nodes:
    if u in direct or not any(s in direct for s in u.src): continue
    if u.op is Ops.END:
      if u is end or u is end.src[0]: continue
      return None
    if u.op is Ops.AFTER:
      if (a in u.src) != (b in u.src) or any(s in direct and s not in (a, b) for s in u.src): return None
      continue
    for s in (s for s in u.src if s in direct):
      form = linear_form(s)
      if any(t is not None and t not in (a, b) and t in direct for t in form): return None  # a product of them: MUL(a, x)
      if form.get(a, 0) == 0 or form.get(a, 0) != size * form.get(b, 0): return None
      sums.add(s)
  return frozenset(sums)


def _merge(sink: UOp, end: UOp, a: UOp, b: UOp, sums: frozenset[UOp]) -> UOp:
  m = UOp(Ops.RANGE, b.dtype, (UOp.const(b.src[0].dtype, axis_size(a) * axis_size(b)),), a.arg)
  zero = UOp.const(a.dtype, 0)
  memo: dict[UOp, UOp] = {a: zero, b: m}
  for u in sink.toposort():
    if u in memo: continue
    if u is end: memo[u] = memo[u.src[0]]; continue  # noqa: E702  the inner END, now END(x, m), closes both
    if u.op is Ops.AFTER: src = tuple(memo[s] for s in u.src if s is not a)
    else: src = tuple(memo[s] for s in u.src)
    new = u if src == u.src else u.replace(src=src)
    memo[u] = simplify(new) if u in sums else new
  return memo[sink]
