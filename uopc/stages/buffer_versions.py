"""Which buffers a tensor program reads and writes, and which version of a buffer a read sees (Rangeify's
section 3, `uopc.stages.rangeify`): a PARAM or BUFFER read plainly is its value on entry, `AFTER(buf,
STORE(buf, ..))` the value that STORE wrote. `reads_before_writes` orders a program's roots so that reads
of a value on entry come before the STOREs that replace it where nothing orders them otherwise."""
from __future__ import annotations

from uopc.ops import GroupOp, Ops
from uopc.uop import UOp


def data_srcs(u: UOp) -> tuple[UOp, ...]:
  """The sources whose values `u` reads: not its shape operands, the target of a STORE (its buffer is
  kept, see `_Rangeify`), nor the body of a CALL (compiled on its own)."""
  if u.op in GroupOp.Buffers or u.op in (Ops.CONST, Ops.DEFINE_VAR): return ()
  if u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK): return u.src[:1]
  if u.op in (Ops.STORE, Ops.CALL): return u.src[1:]
  return u.src


def strip_after(u: UOp) -> UOp:
  while u.op is Ops.AFTER: u = u.src[0]
  return u


def version(u: UOp) -> UOp | None:
  """The version of a buffer that reading `u` (the buffer under AFTERs) sees: the last STORE to it among
  the dependencies of the outermost AFTER that has one (directly or in a GROUP); None: its value on entry."""
  base = strip_after(u)
  while u.op is Ops.AFTER:
    deps = [s for d in u.src[1:] for s in (d.src if d.op is Ops.GROUP else (d,))]
    if writes := [d for d in deps if d.op is Ops.STORE and strip_after(d.src[0]) is base]: return writes[-1]
    u = u.src[0]
  return None


def _plain_reads(nodes) -> set[UOp]:
  """The PARAMs and BUFFERs that these nodes read as they were on entry: not through an AFTER (a version),
  not as a STORE's target."""
  return {s for u in nodes for s in (u.src[1:] if u.op is Ops.AFTER else data_srcs(u)) if s.op in GroupOp.Buffers}


def _writes(nodes) -> set[UOp]:
  return {strip_after(u.src[0]) for u in nodes if u.op is Ops.STORE}


def reads_before_writes(sink: UOp) -> UOp:
  """`sink` with its roots reordered so that a root reading a buffer's value on entry comes before a root
  that overwrites the buffer (it then reads the buffer itself, no snapshot): roots keep their order
  otherwise, each stays after the roots it depends on, and two roots writing one buffer keep theirs.
  Unchanged when no order satisfies all that (x = y and y = x need a snapshot)."""
  whole = sink.toposort()
  if not _plain_reads(whole) & _writes(whole): return sink
  roots = sink.src
  reach = [set(r.toposort()) for r in roots]
  writes, reads = [_writes(n) for n in reach], [_plain_reads(n) for n in reach]
  def first(i: int, j: int) -> bool:  # must roots[i] come before roots[j]?
    if roots[i] in reach[j]: return True
    if roots[j] in reach[i]: return False
    return bool(i < j and writes[i] & writes[j] or reads[i] & writes[j])
  after = [{i for i in range(len(roots)) if i != j and first(i, j)} for j in range(len(roots))]
  placed: list[int] = []
  while len(placed) < len(roots):
    ready = [j for j in range(len(roots)) if j not in placed and after[j] <= set(placed)]
    if not ready: return sink
    placed.append(ready[0])
  return sink.replace(src=tuple(roots[j] for j in placed))
