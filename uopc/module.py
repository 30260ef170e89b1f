"""A parsed translation unit: named entry points (kernels and tensor functions) over the UOp graph.

UOps are hash-consed and carry no location, so source positions live here, in a side table keyed
by UOp; passes that replace a node hand its location to the replacement (see `Module.relocate`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from uopc.diagnostics import Loc
from uopc.uop import UOp


@dataclass
class Entry:
  """One exported entry point. kind 'kernel': already at kernel level (pointers, RANGE, INDEX);
  kind 'func': a tensor program (shaped PARAM/BUFFER, movement ops, REDUCE) that Rangeify splits.
  `unused`: the PARAMs and DEFINE_VARs the entry declares but its graph never reaches. They are
  arguments all the same: the declared slots are the entry's ABI, so a program edited to stop
  reading an input keeps every later argument where it was."""
  name: str
  kind: str
  sink: UOp
  loc: Loc | None = None
  unused: tuple[UOp, ...] = ()


@dataclass
class Module:
  path: str
  text: str
  entries: list[Entry] = field(default_factory=list)
  locs: dict[UOp, Loc] = field(default_factory=dict)    # where each node was written
  names: dict[UOp, str] = field(default_factory=dict)   # the user's %names, kept for printing

  def loc_of(self, u: UOp) -> Loc | None: return self.locs.get(u)
  def relocate(self, old: UOp, new: UOp) -> None:
    """Give `new` the location of `old` unless it has one: diagnostics after a rewrite still point at the source."""
    if old in self.locs and new not in self.locs: self.locs[new] = self.locs[old]
  def entry(self, name: str) -> Entry:
    for e in self.entries:
      if e.name == name: return e
    raise KeyError(name)
