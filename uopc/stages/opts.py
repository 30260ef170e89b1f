"""The OptOps of seed 000 as uopc takes them (`Opt`, `OptOp`) and their text form, the `--opts` syntax:
`SPLIT(axis,k,type[,top])`, `PADTO(axis,m[,t])`, `SWAP(axis,axis)`, `NOLOCALS`, `TC(axis[,tc[,stages[,tile]]])`,
`STAGE[(stages)]`, comma-separated, and `KERNEL:OPTS` lines (or `@FILE`) for a build's schedule. What each opt does to a
kernel is uopc/stages/optimize.py's. Invariant: `str(opt)` parses back to the same Opt, and a
malformed text is a located CompileError.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from uopc.diagnostics import CompileError, Loc, error
from uopc.ops import AxisType


TC_AUTO_STAGES = 1          # TC's stages argument: staged in LOCAL memory, as many stages as fit (the default)
TC_STAGE_COUNTS = (2, 3, 4)  # ... or exactly this many (more than 48 KiB: dynamic shared memory, where the archs have it)
STAGE_AUTO = 1              # STAGE's argument: inputs staged in LOCAL memory, as many stages as fit (the default) ...
STAGE_COUNTS = (2, 3)        # ... or exactly this many (uopc.stages.local_staging)
# TC's tile argument: (tensor-core tiles per warp along m, along n, warps per workgroup along m, along n);
# 1 x 1 warps: one warp a workgroup unless later SPLITs to LOCAL add some, more: TC makes those LOCAL axes
TC_TILES = ((2, 4, 1, 1), (4, 8, 1, 1), (2, 2, 1, 1), (1, 2, 1, 1), (1, 1, 1, 1), (4, 4, 1, 1),
            (4, 8, 2, 2), (4, 8, 2, 4), (4, 8, 4, 2), (2, 16, 4, 1), (1, 32, 8, 1))
# ... the last two are warpgroup tiles (groups of 4 warps): warp w of a warpgroup has rows 16 w + 64 i of its
# tile row i (a warpgroup of tile 9 interleaves its warps' rows, 128 x 128; tile 10 is 2 warpgroups of 64 x
# 256), so that each k step of a warpgroup's tiles is one warpgroup MMA (sm_90a wgmma; mma.sync elsewhere)
WARPGROUP_TILES = (len(TC_TILES) - 2, len(TC_TILES) - 1)
WARPGROUP_TILE = WARPGROUP_TILES[0]


def tile_name(i: int) -> str:
  """TC_TILES[i] as --help and errors show it: `4 x 8` or `4 x 8 (2 x 4 warps)`."""
  m, n, wm, wn = TC_TILES[i]
  groups = f", {wm * wn // 4} warpgroup{'s' if wm * wn > 4 else ''}" if i in WARPGROUP_TILES else ""
  return f"{m} x {n}" + (f" ({wm} x {wn} warps{groups})" if wm * wn > 1 else "")


class OptOp(enum.Enum):
  SPLIT = enum.auto(); PADTO = enum.auto(); SWAP = enum.auto(); NOLOCALS = enum.auto(); TC = enum.auto(); STAGE = enum.auto()  # noqa: E702


@dataclass(frozen=True)
class Opt:
  """One OptOp. SPLIT: arg (k, AxisType, top); PADTO: the multiple, or (multiple, overlap tile); SWAP: the other axis; TC: its args;
  STAGE: the stages (no axis)."""
  op: OptOp
  axis: int | None = None
  arg: Any = None

  def __str__(self) -> str:
    if self.op is OptOp.SPLIT:
      k, t, top = self.arg
      return f"SPLIT({self.axis},{k},{t.letter}{',top' if top else ''})"
    if self.op is OptOp.NOLOCALS: return "NOLOCALS"
    if self.op is OptOp.STAGE: return "STAGE" if self.arg == STAGE_AUTO else f"STAGE({self.arg})"
    if self.op is OptOp.TC: return f"TC({','.join(str(a) for a in (self.axis,) + tuple(self.arg))})"
    if self.op is OptOp.PADTO and isinstance(self.arg, tuple): return f"PADTO({self.axis},{self.arg[0]},{self.arg[1]})"
    return f"{self.op.name}({self.axis},{self.arg})"


_LETTERS = {t.letter: t for t in AxisType}
_OPT_RE = re.compile(r"\s*([A-Za-z_]+)\s*(?:\(([^()]*)\))?\s*(?:,|$)")


def parse_opts(text: str, loc: Loc | None = None) -> tuple[Opt, ...]:
  """`SPLIT(0,4,u),SWAP(0,1),NOLOCALS` -> Opts; an empty text is no opts."""
  opts, pos = [], 0
  while text[pos:].strip():
    m = _OPT_RE.match(text, pos)
    if m is None: raise _parse_error(loc, pos, f"expected an opt such as SPLIT(0,4,u) at '{text[pos:]}'")
    opts.append(_opt(m.group(1).upper(), [a.strip() for a in m.group(2).split(",")] if m.group(2) is not None else [], loc, m.start(1)))
    pos = m.end()
  return tuple(opts)


def _parse_error(loc: Loc | None, col: int, message: str) -> CompileError:
  where = Loc(loc.file, loc.line, loc.col + col) if loc else None
  return CompileError([error(where, message if loc else f"--opts: {message}")])


def _opt(name: str, args: list[str], loc: Loc | None, col: int) -> Opt:
  def fail(msg: str) -> CompileError: return _parse_error(loc, col, f"{name}: {msg}")
  def ints(xs: list[str]) -> list[int]:
    if not all(re.fullmatch(r"-?\d+", x) for x in xs): raise fail(f"expected integers, got ({', '.join(xs)})")
    return [int(x) for x in xs]
  if name not in OptOp.__members__: raise fail(f"unknown opt; opts are {', '.join(OptOp.__members__)}")
  op = OptOp[name]
  if op is OptOp.NOLOCALS:
    if args: raise fail("takes no arguments")
    return Opt(op)
  if op is OptOp.STAGE:
    stages = ints(args) if args else [STAGE_AUTO]
    if len(stages) != 1 or stages[0] not in (STAGE_AUTO, *STAGE_COUNTS):
      raise fail(f"expected STAGE or STAGE(stages), stages 1 (as many as fit: the default) or {' or '.join(map(str, STAGE_COUNTS))}")
    return Opt(op, None, stages[0])
  if op is OptOp.TC:
    if not 1 <= len(args) <= 4: raise fail("expected TC(axis[, tc[, stages[, tile]]])")
    axis, *rest = ints(args)
    choice = (rest + [-1, TC_AUTO_STAGES, -1][len(rest):])[:3]  # the defaults: any tensor core, stages and tile chosen
    if choice[1] not in (0, TC_AUTO_STAGES, *TC_STAGE_COUNTS):
      raise fail(f"stages must be 0 (fragments from global memory), 1 (staged in LOCAL memory, as many as fit: the default) "
                 f"or {' or '.join(map(str, TC_STAGE_COUNTS))}")
    if not -1 <= choice[2] < len(TC_TILES):
      raise fail(f"tile must be -1 (chosen by size) or 0..{len(TC_TILES) - 1}: " + ", ".join(f"{i} = {tile_name(i)}" for i in range(len(TC_TILES))))
    while len(choice) > 1 and choice[-1] == (-1, TC_AUTO_STAGES, -1)[len(choice) - 1]: choice.pop()  # printed without defaults
    return Opt(op, axis, tuple(choice))
  if op is OptOp.SPLIT:
    if len(args) not in (3, 4) or (len(args) == 4 and args[3] != "top"):
      raise fail("expected SPLIT(axis, factor, type) or SPLIT(axis, factor, type, top)")
    if args[2] not in _LETTERS: raise fail(f"unknown axis type '{args[2]}'; types are {' '.join(_LETTERS)}")
    axis, k = ints(args[:2])
    return Opt(op, axis, (k, _LETTERS[args[2]], len(args) == 4))
  if op is OptOp.PADTO:
    if len(args) not in (2, 3): raise fail("expected PADTO(axis, multiple) or PADTO(axis, multiple, overlap tile)")
    axis, *arg = ints(args)
    return Opt(op, axis, arg[0] if len(arg) == 1 else tuple(arg))
  if len(args) != 2: raise fail(f"expected {name}(axis, axis)")
  axis, arg = ints(args)
  return Opt(op, axis, arg)


_KERNEL_LINE = re.compile(r"\s*([A-Za-z0-9_]+)\s*:(.*)$")


def parse_schedule(specs: tuple[str, ...] | list[str]) -> dict[str, tuple[Opt, ...]]:
  """The `--opts` values: each `KERNEL:OPT,OPT,...`, or `@FILE` holding one such line per kernel
  (blank lines and lines starting with # are skipped). `KERNEL:` alone pins no opts at all."""
  out: dict[str, tuple[Opt, ...]] = {}
  for spec in specs:
    lines = _schedule_lines(spec)
    for text, loc in lines:
      m = _KERNEL_LINE.match(text)
      if m is None: raise _parse_error(loc, 0, f"expected KERNEL:OPTS, got '{text.strip()}'")
      if m.group(1) in out: raise _parse_error(loc, 0, f"kernel {m.group(1)} is given opts twice")
      out[m.group(1)] = parse_opts(m.group(2), Loc(loc.file, loc.line, m.start(2) + 1) if loc else None)
  return out


def _schedule_lines(spec: str) -> list[tuple[str, Loc | None]]:
  if not spec.startswith("@"): return [(spec, None)]
  path = spec[1:]
  try:
    with open(path) as f: text = f.read()
  except OSError as e:
    raise CompileError([error(None, f"--opts: cannot read {path}: {e.strerror}")]) from e
  return [(line, Loc(path, i + 1, 1)) for i, line in enumerate(text.splitlines()) if line.strip() and not line.lstrip().startswith("#")]
