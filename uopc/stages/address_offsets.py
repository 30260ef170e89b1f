"""Address offsets as a shared base plus a constant: a step of Instruction Selection.

After Expand every lane of an unrolled or upcast load has its own offset expression, and the
constant that tells the lanes apart sits deep inside it: a convolution's read of x[c, y + ky - 1,
x + kx] is `((x0 + 3) + (y0 + ky + -1) * 56) + c * 3136` for one lane, the same with `+ 4` for the
next. The PTX renderer computed each such offset in full and widened it into its own 64-bit address
(three to five integer instructions per load), so a batched 3x3 convolution issued 440 integer
instructions per 768 float ones in its loop.

`split_offsets` rewrites the offset of every INDEX into GLOBAL or LOCAL memory into the canonical form
`ADD(base, CONST c)`:

- the offset is opened into its linear form (uopc.symbolic.linear_form: ADDs, and MULs by constants,
  distributed), `sum(k_i * atom_i) + c`;
- `base` is the sum of the terms in loop order: terms that depend on no RANGE first (thread ids,
  parameters), then by the innermost loop they depend on (RANGE axis id, the order Linearize nests
  loops in), ties in the form's order; each partial sum is then computed in the outermost block it can
  be (Linearize places a node by its sources), so only the last terms of a base are inside a loop;
- the lanes of one access differ in `c` only, so they share one `base` node (UOps are hash-consed);
  the renderer computes its address once and folds `c` into each load's or store's displacement
  (`ld [addr+c*size]`, uopc/targets/cuda/ptx_memory.py).

On targets whose own compiler forms addresses (C, LLVM, AMD through LLVM, Metal; `every_offset=False`)
only gated loads are rewritten so, offset and gate: their window lanes that read one element still become
one LOAD, which those compilers do not find themselves (the C target's 3x3 convolution: 12 gated loads of x
an iteration to 6, 0.53 -> 0.49 ms on two cores), while other offsets keep the shape the compiler's own
address selection works from (re-associating every offset made a GPT-2 MLP's C code 15% slower).

Index narrowing (uopc.stages.index_width) runs after this and sees the new sums with their own ranges:
a base that fits int32 is computed in 32 bits, one that may not stays 64-bit.

Invariants: every address is the same integer as before (integer linear algebra on index values,
which are mathematical integers: no wrap-around is assumed away, as interval ranges decide the width
later); only INDEX offsets and the gates of loads and stores change, each to an equal value, so other
users of the old expressions keep them; a displacement that would not fit PTX's 32-bit immediate stays
in the base.
"""
from __future__ import annotations

from uopc.dtype import AddrSpace, PtrDType, dtypes
from uopc.ops import Ops
from uopc.symbolic import linear_form
from uopc.uop import UOp

MAX_DISPLACEMENT = 1 << 30   # bytes; PTX's immediate offset is a signed 32-bit value
_LANEWISE = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL,
                       Ops.SHR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE})
_COMPARE = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)


def _loop_key(atom: UOp) -> int:
  """The innermost loop an atom depends on: -2 none (a parameter, a constant expression), -1 thread ids
  only (SPECIAL), else the largest RANGE axis id (Linearize nests RANGEs by axis id)."""
  key = -2
  for x in atom.toposort():
    if x.op is Ops.SPECIAL: key = max(key, -1)
    elif x.op is Ops.RANGE: key = max(key, x.arg[0] if isinstance(x.arg, tuple) and isinstance(x.arg[0], int) else 0)
  return key


def _lane(e: UOp, i: int, memo: dict) -> UOp:
  """Lane i of vector index arithmetic `e` as scalar arithmetic: Expand computes the offsets of an
  access's lanes as vectors (STACKs of the lanes' constants added to broadcast bases) and reads each
  lane with a GEP, behind which the lane's constant is hidden. STACK, GEP, CONST and lane-wise ALU ops are
  opened; anything else stays a GEP of it."""
  if (e, i) in memo: return memo[(e, i)]
  if e.dtype.count == 1: out = e
  elif e.op is Ops.STACK: out = _stack_lane(e, i, memo)
  elif e.op is Ops.GEP: out = _lane(e.src[0], e.arg[i], memo)
  elif e.op is Ops.CONST: out = UOp.const(e.dtype.scalar, e.arg[i] if isinstance(e.arg, tuple) else e.arg)
  elif e.op in _LANEWISE: out = UOp(e.op, e.dtype.scalar, tuple(_lane(s, i, memo) for s in e.src), e.arg)
  else: out = UOp(Ops.GEP, e.dtype.scalar, (e,), (i,))
  memo[(e, i)] = out
  return out


def _stack_lane(e: UOp, i: int, memo: dict) -> UOp:
  """Lane i of a STACK, whose sources may be vectors themselves (lanes counted across them)."""
  for s in e.src:
    if i < s.dtype.count: return _lane(s, i, memo)
    i -= s.dtype.count
  raise ValueError(f"lane {i} past a STACK of {e.dtype}")


def _scalar(off: UOp, memo: dict) -> UOp:
  """An offset that is one lane of vector arithmetic, as that lane's own scalar arithmetic."""
  if off.op is Ops.GEP and len(off.arg) == 1 and off.src[0].dtype.count > 1: return _lane(off.src[0], off.arg[0], memo)
  return off


def _term(atom: UOp, k: int) -> UOp:
  return atom if k == 1 else atom.alu(Ops.MUL, UOp.const(dtypes.index, k))


def _sum(form: dict) -> UOp | None:
  """The non-constant terms of a linear form summed in loop order (None: there are none)."""
  terms = [(a, k) for a, k in form.items() if a is not None and k != 0]
  if not terms: return None
  order = sorted(range(len(terms)), key=lambda i: (_loop_key(terms[i][0]), i))
  base = _term(*terms[order[0]])
  for i in order[1:]: base = base.alu(Ops.ADD, _term(*terms[i]))
  return base


def canonical_offset(off: UOp, itemsize: int, memo: dict | None = None) -> UOp:
  """`off` as ADD(base, CONST c) (see the module docstring), or as it is when there is nothing to split."""
  form = linear_form(_scalar(off, {} if memo is None else memo))
  c = form.get(None, 0)
  if (base := _sum(form)) is None or abs(c * itemsize) >= MAX_DISPLACEMENT: return off
  return base.alu(Ops.ADD, UOp.const(dtypes.index, c)) if c else base


def _canonical_index(e: UOp) -> UOp:
  form = linear_form(e)
  c, base = form.get(None, 0), _sum(form)
  if base is None: return UOp.const(e.dtype, c)
  return base.alu(Ops.ADD, UOp.const(dtypes.index, c)) if c else base


def canonical_gate(g: UOp, memo: dict) -> UOp:
  """A load's or store's gate (and ANDs, ORs and comparisons of index values under it) with each lane's
  own scalar arithmetic, its index operands in canonical form: lanes of an unrolled window that read
  the same element then have the same gate, so their LOADs are one node."""
  g = _scalar(g, memo)
  if g.op in (Ops.AND, Ops.OR) and g.dtype is dtypes.bool: return g.replace(src=tuple(canonical_gate(s, memo) for s in g.src))
  if g.op in _COMPARE and all(s.dtype is dtypes.index for s in g.src): return g.replace(src=tuple(_canonical_index(s) for s in g.src))
  return g


def _splittable(u: UOp) -> bool:
  return (u.op is Ops.INDEX and len(u.src) >= 2 and isinstance(u.dtype, PtrDType)
          and u.dtype.addrspace in (AddrSpace.GLOBAL, AddrSpace.LOCAL)
          and u.src[1].dtype is dtypes.index and u.src[1].op is not Ops.CONST)


def split_offsets(sink: UOp, every_offset: bool = True) -> UOp:
  """`sink` with every GLOBAL/LOCAL INDEX offset in the form ADD(base, CONST c), and gated loads' gates
  canonical (module docstring); without `every_offset` only the offsets of gated loads (the window reads
  that become one LOAD where they read the same element)."""
  done: dict[UOp, UOp] = {}
  memo: dict = {}
  def split(idx: UOp) -> UOp: return idx.replace(src=(idx.src[0], canonical_offset(idx.src[1], idx.dtype.base.itemsize, memo), *idx.src[2:]))
  for u in sink.toposort():
    n = u.replace(src=tuple(done[s] for s in u.src)) if u.src else u
    if every_offset and _splittable(n): n = split(n)
    elif n.op is Ops.LOAD and len(n.src) == 3 and n.dtype.count == 1:
      idx = n.src[0] if every_offset or not _splittable(n.src[0]) else split(n.src[0])
      n = n.replace(src=(idx, _scalar(n.src[1], memo), canonical_gate(n.src[2], memo)))
    elif n.op is Ops.STORE and len(n.src) == 3 and n.src[1].dtype.count == 1: n = n.replace(src=(*n.src[:2], canonical_gate(n.src[2], memo)))
    done[u] = n
  return done[sink]
