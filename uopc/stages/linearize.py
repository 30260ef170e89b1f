"""Linearize: order a kernel's graph into one instruction list with properly nested blocks.

A block is opened by a RANGE, a SPECIAL (a loop on CPU targets) or an IF, and closed by its END or
ENDIF. The algorithm:

1. Scope. Walking sources before users, each node gets the set of blocks it lies inside: the union
   of what its sources are inside, where an opener adds itself for its users and a closer (END of a
   range, ENDIF of an if) removes its block for its users. So an op sits in exactly the loops it
   depends on; loop-invariant code depends on no loop and lands outside.
2. Nesting order. Blocks must nest, so the blocks of one scope form a chain. Hard constraints come
   from the graph: B lies inside A when B's header (its bound, its gate) or B's explicit closer is
   inside A. Blocks are ranked by a topological order of these constraints with a fixed tie-break
   (SPECIALs outermost, then RANGEs by axis id, then IFs; then the node's position in the DFS
   toposort of the sink). Two blocks that share an op nest by rank; the "encloses" relation is
   closed until every block's enclosers form a chain, which gives each block one parent.
3. Placement. An op goes in the innermost block of its scope (plus that block's enclosers); an
   opener goes in its parent block, its closer last in its own block.
4. Order. Inside each block, ops and child blocks are toposorted as units (a child block depends on
   whatever any op inside it reads from the enclosing block) and ties go to the earlier DFS
   position. With `interleave` (CPU targets), the unit of least depth (the longest chain of the
   block's units before it) goes first: the copies of an UPCAST wider than a register, or of an
   unrolled window, are emitted step by step side by side instead of one chain after the other, and
   C compilers keep that order (they schedule little before register allocation), so the CPU finds
   independent work within its window (one core: gelu 0.216 -> 0.198 ms, max_pool 0.102 -> 0.055,
   softmax 0.243 -> 0.204). Not in kernels with gated loads: their lanes load one by one, and hoisting
   all of them ahead of their selects made the 3x3 convolution 25% slower. On a GPU (`gpu`), the same
   order in kernels whose launch has at most GPU_ILP_THREADS threads, gated loads included: such a
   grid leaves most of the GPU's warp slots empty (an H100 holds 270336 threads), so no other warp
   hides a load's latency and only loads issued ahead of their uses do; ptxas keeps the order and
   spends the registers, which a small grid has to spare (H100: the ResNet block 0.029 -> 0.022 ms,
   a float16 matmul 256 0.0135 -> 0.0116, cumsum 0.0158 -> 0.0147). In larger launches too where a
   thread keeps at most GPU_ILP_ACCS register elements: 128 (a LLaMA SwiGLU's two 8 x 8 tiles: 0.398 ->
   0.326 ms), 64 where loads are gated (GPT-2's block 0.220 -> 0.206 ms; softmax and layernorm 4096 x
   4096 unchanged; a batched convolution's gated 8 x 16 tile is 2-3% slower in that order). Never in kernels that stage tiles by asynchronous copies:
   their reads of a stage follow its wait (BARRIER (ASYNC, n)) by position, not by a data dependence. Blocks are flattened to opener, body, closer. A block
   without a closer in the graph gets one synthesized after its last instruction: END(last, range) or
   ENDIF(if).

Only the graph's structure and source order decide the result (never ids, hashes or set order), so
the same graph gives the same LINEAR byte for byte however it was built. The SINK itself is not an
instruction and is left out.
"""
from __future__ import annotations

import heapq
import math

from uopc.diagnostics import CompileError, error
from uopc.dtype import AddrSpace
from uopc.ops import Ops
from uopc.uop import UOp

OPENERS = frozenset({Ops.RANGE, Ops.SPECIAL, Ops.IF})
CLOSERS = frozenset({Ops.END, Ops.ENDIF})
_KIND_RANK = {Ops.SPECIAL: 0, Ops.RANGE: 1, Ops.IF: 2}


GPU_ILP_THREADS = 1 << 15  # a GPU launch of at most this many threads is ordered for instruction-level parallelism,
GPU_ILP_ACCS = (128, 64)   # ... and so is a larger one whose threads keep at most this many register elements (without
                           # gated loads, with them: a gated load also holds its predicate and its alternative value)


def linearize(sink: UOp, interleave: bool = False, gpu: bool = False) -> UOp:
  """The LINEAR of a kernel SINK: every instruction once, blocks nested, loop invariants hoisted.
  `interleave` (the CPU targets): see step 4, unless the kernel has gated loads; `gpu` (-t cuda): step
  4's order where the launch has at most GPU_ILP_THREADS threads or its threads keep at most GPU_ILP_ACCS
  register elements, and it has no asynchronous copies."""
  gated = any(u.op is Ops.LOAD and len(u.src) == 3 for u in sink.toposort())
  if gpu:
    small = launch_threads(sink) <= GPU_ILP_THREADS or _register_elements(sink) <= GPU_ILP_ACCS[gated]
    return _Linearizer(sink, small and not _async_copies(sink)).run()
  return _Linearizer(sink, interleave and not gated).run()


def _async_copies(sink: UOp) -> bool:
  """Whether the kernel stages tiles by asynchronous copies (a BARRIER with an ASYNC arg): its reads of
  a stage follow the wait in source order, not by a data dependence, so its order is kept."""
  return any(u.op is Ops.BARRIER and isinstance(u.arg, tuple) for u in sink.toposort())


def _register_elements(sink: UOp) -> int:
  """Elements of the kernel's REG buffers (its accumulators): what a thread keeps in registers besides
  the values in flight."""
  return sum(u.dtype.size for u in sink.toposort() if u.op is Ops.BUFFER and getattr(u.dtype, "addrspace", None) is AddrSpace.REG)


def launch_threads(sink: UOp) -> int:
  """Threads a GPU kernel launches: the product of its SPECIALs' bounds (a bound not known at compile
  time counts as large)."""
  bounds = [u.src[0].arg if u.src and u.src[0].op is Ops.CONST else 1 << 31 for u in sink.toposort() if u.op is Ops.SPECIAL]
  return math.prod(int(b) for b in bounds)


def _fail(message: str) -> CompileError: return CompileError([error(None, f"linearize: {message}")])


def closed_block(u: UOp) -> UOp:
  """The opener a closer ends: END(body, range) ends src[1], ENDIF(if) ends src[0]."""
  if u.op is Ops.END:
    if len(u.src) != 2 or u.src[1].op not in (Ops.RANGE, Ops.SPECIAL): raise _fail("END must be END(body, range)")
    return u.src[1]
  if not u.src or u.src[0].op is not Ops.IF: raise _fail("ENDIF must have its IF as first source")
  return u.src[0]


class _Linearizer:
  def __init__(self, sink: UOp, interleave: bool = False):
    self.interleave = interleave
    self.nodes = [u for u in sink.toposort() if u is not sink]
    self.pos = {u: i for i, u in enumerate(self.nodes)}
    self.scope = self._scopes()
    self.openers = [u for u in self.nodes if u.op in OPENERS]
    self.closer = self._explicit_closers()
    self.rank = self._ranks()
    self.anc = self._enclosers()

  # ---- 1. scope --------------------------------------------------------------------------------------
  def _scopes(self) -> dict[UOp, frozenset]:
    scope: dict[UOp, frozenset] = {}
    inner: dict[UOp, frozenset] = {}
    ended: dict[UOp, frozenset] = {}  # the blocks whose closer u depends on: u must come after them
    for u in self.nodes:
      s = frozenset().union(*(inner[x] for x in u.src))
      ended[u] = frozenset().union(*(ended[x] for x in u.src))
      if stale := sorted(s & ended[u], key=self.pos.__getitem__):
        raise _fail(f"{u.op.name} uses {self._label(stale[0])} after its {'ENDIF' if stale[0].op is Ops.IF else 'END'}")
      if u.op in CLOSERS: ended[u] |= {closed_block(u)}
      scope[u] = s
      if u.op in OPENERS: inner[u] = s | {u}
      elif u.op in CLOSERS: inner[u] = self._outside(closed_block(u), s, scope)
      else: inner[u] = s
    return scope

  @staticmethod
  def _outside(b: UOp, blocks: frozenset, scope: dict) -> frozenset:
    """The blocks of `blocks` that stay open after b closes: not b, nor any block whose header lies in b."""
    return frozenset(a for a in blocks if a is not b and b not in scope[a])

  def _explicit_closers(self) -> dict[UOp, UOp]:
    closer: dict[UOp, UOp] = {}
    for u in self.nodes:
      if u.op in CLOSERS:
        b = closed_block(u)
        if b in closer: raise _fail(f"{b.op.name} {self._label(b)} is closed twice")
        closer[b] = u
    return closer

  # ---- 2. nesting order ------------------------------------------------------------------------------
  def _hard_enclosers(self, b: UOp) -> set:
    outer = set(self.scope[b])
    if b in self.closer: outer |= self._outside(b, self.scope[self.closer[b]], self.scope)
    return outer

  def _tie_key(self, b: UOp) -> tuple:
    if b.op is Ops.SPECIAL: sub = (str(b.arg), 0)
    elif b.op is Ops.RANGE and isinstance(b.arg, tuple) and b.arg and isinstance(b.arg[0], int): sub = ("", b.arg[0])
    else: sub = ("", 0)
    return (_KIND_RANK[b.op], sub, self.pos[b])

  def _ranks(self) -> dict[UOp, int]:
    """A topological order of the hard 'encloses' constraints, ties broken by _tie_key."""
    inside = {b: self._hard_enclosers(b) for b in self.openers}
    users: dict[UOp, list] = {b: [] for b in self.openers}
    for b in self.openers:
      for a in inside[b]: users[a].append(b)
    waiting = {b: len(inside[b]) for b in self.openers}
    ready = [(self._tie_key(b), b) for b in self.openers if waiting[b] == 0]
    heapq.heapify(ready)
    rank: dict[UOp, int] = {}
    while ready:
      _, b = heapq.heappop(ready)
      rank[b] = len(rank)
      for c in users[b]:
        waiting[c] -= 1
        if waiting[c] == 0: heapq.heappush(ready, (self._tie_key(c), c))
    if len(rank) != len(self.openers):
      stuck = sorted((b for b in self.openers if b not in rank), key=self.pos.__getitem__)
      raise _fail(f"blocks cannot be nested: {', '.join(self._label(b) for b in stuck)} enclose each other")
    return rank

  def _enclosers(self) -> dict[UOp, set]:
    """For each block, every block around it; closed so that these always form a chain."""
    anc = {b: {a for a in self._hard_enclosers(b)} for b in self.openers}
    for u in self.nodes:
      for lo, hi in self._pairs(self.scope[u]): anc[hi].add(lo)
    changed = True
    while changed:
      changed = False
      for b in self.openers:
        for lo, hi in self._pairs(anc[b]):
          if lo not in anc[hi]: anc[hi].add(lo); changed = True  # noqa: E702
        for a in list(anc[b]):
          if not anc[a] <= anc[b]: anc[b] |= anc[a]; changed = True  # noqa: E702
    return anc

  def _pairs(self, blocks) -> list[tuple[UOp, UOp]]:
    chain = sorted(blocks, key=self.rank.__getitem__)
    return [(lo, hi) for i, hi in enumerate(chain) for lo in chain[:i]]

  # ---- 3. placement ----------------------------------------------------------------------------------
  def _innermost(self, blocks) -> UOp | None:
    full = set(blocks).union(*(self.anc[b] for b in blocks))
    return max(full, key=self.rank.__getitem__) if full else None

  def _level(self, u: UOp) -> UOp | None:
    """The block whose body lists u (None: the kernel's top level)."""
    if u.op in OPENERS: return self._innermost(self.anc[u])
    if u.op in CLOSERS: return closed_block(u)
    return self._innermost(self.scope[u])

  def _chain(self, block: UOp | None) -> list:
    """[None, outermost, ..., block]: the blocks from the top level down to `block`."""
    if block is None: return [None]
    return [None] + sorted(self.anc[block], key=self.rank.__getitem__) + [block]

  # ---- 4. order --------------------------------------------------------------------------------------
  def run(self) -> UOp:
    level = {u: self._level(u) for u in self.nodes}
    body: dict[UOp | None, list] = {None: []} | {b: [] for b in self.openers}
    for u in self.nodes:
      if u.op not in CLOSERS: body[level[u]].append(u)
    out: list[UOp] = []
    self._emit(None, body, level, out)
    return UOp(Ops.LINEAR, src=tuple(out))

  def _item_at(self, u: UOp, block: UOp | None, level: dict) -> UOp | None:
    """What stands for u among the units of `block`: u itself, or the child block holding it."""
    chain = self._chain(level[u])
    if block not in chain: return None
    i = chain.index(block)
    return u if i == len(chain) - 1 else chain[i + 1]

  def _members(self, item: UOp, level: dict) -> list[UOp]:
    if item.op not in OPENERS: return [item]
    return [u for u in self.nodes if u is item or item in self._chain(level[u])]

  def _emit(self, block: UOp | None, body: dict, level: dict, out: list) -> None:
    items = body[block]
    deps: dict[UOp, set] = {it: set() for it in items}
    for it in items:
      for m in self._members(it, level):
        for s in m.src:
          if s is block or (dep := self._item_at(s, block, level)) is None: continue
          if dep is not it: deps[it].add(dep)
    for it in self._toposort_units(items, deps):
      out.append(it)
      if it.op in OPENERS:
        self._emit(it, body, level, out)
        out.append(self.closer.get(it) or self._synthesize_closer(it, out[-1]))

  def _toposort_units(self, items: list, deps: dict) -> list:
    users: dict[UOp, list] = {it: [] for it in items}
    for it in items:
      for d in deps[it]: users[d].append(it)
    waiting = {it: len(deps[it]) for it in items}
    depth = {it: 0 for it in items}
    ready = [(0, self.pos[it], it) for it in items if waiting[it] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
      _, _, it = heapq.heappop(ready)
      order.append(it)
      for u in users[it]:
        waiting[u] -= 1
        depth[u] = max(depth[u], depth[it] + 1)
        if waiting[u] == 0: heapq.heappush(ready, (depth[u] if self.interleave else 0, self.pos[u], u))
    if len(order) != len(items): raise _fail("the ops of a block depend on each other in a cycle across blocks")
    return order

  @staticmethod
  def _synthesize_closer(block: UOp, last: UOp) -> UOp:
    if block.op is Ops.IF: return UOp(Ops.ENDIF, src=(block,))
    return UOp(Ops.END, src=(last, block))

  @staticmethod
  def _label(b: UOp) -> str:
    return f"{b.op.name} {b.arg!r}" if b.arg is not None else b.op.name
