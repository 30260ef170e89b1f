"""PTX of warpgroup MMAs (uopc/stages/warpgroup_mma.py): `wgmma.mma_async` on sm_90a, with its
descriptors, fences and waits.

A kernel with warpgroup WMMAs is written for `.target sm_90a` (PTX ISA 8.0); its LOCAL tiles are aligned
to 1024 bytes (so each tile's 8-row swizzle atoms start where wgmma's swizzle modes expect them), and
each wait for asynchronous copies is followed by `fence.proxy.async.shared::cta` before the barrier: the
copies wrote the tiles through the generic proxy, wgmma reads them through the async proxy.

The accumulators: a warpgroup WMMA works in place on the REG array's registers of its accumulator (the
LOAD feeding it makes no copy, the STORE of its result back to the same elements moves nothing), and a
chain of them stays in one `wgmma` group: `wgmma.fence` before the first, `wgmma.commit_group` and
`wgmma.wait_group 0` before any instruction that is not index arithmetic, a descriptor or another
warpgroup MMA (in particular before the loop's END and any BARRIER, so a tile is never overwritten
while a wgmma may still read it, and nothing reads an accumulator before its MMAs complete).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from uopc.dtype import dtypes
from uopc.ops import AxisType, GroupOp, Ops
from uopc.stages.warpgroup_mma import warpgroup_arg
from uopc.targets.cuda.ptx_types import _float_t
from uopc.uop import UOp

if TYPE_CHECKING:
  from uopc.targets.cuda.ptx import _Kernel

WGMMA_ARCH, WGMMA_PTX_VERSION = "sm_90a", "8.0"
WGMMA_ALIGN = 1024  # bytes: a 128-byte swizzle atom (8 rows of 128 bytes)
_MODES = {128: 1, 64: 2, 32: 3}  # the descriptor's swizzle field
_QUIET = frozenset({Ops.CONST, Ops.INDEX, Ops.AFTER, Ops.GROUP, Ops.NOOP, Ops.SINK})


def is_wgmma(u: UOp) -> bool: return u.op is Ops.WMMA and warpgroup_arg(u.arg) is not None


def accumulator_loads(uops) -> set[UOp]:
  """The REG LOADs that feed a warpgroup MMA's accumulator and nothing else (no copy is made of them: the
  MMA works on the REG array's registers in place, which another reader of the LOAD must not see)."""
  feeds = {u.src[2] for u in uops if is_wgmma(u) and u.src[2].op is Ops.LOAD}
  users: dict[UOp, int] = {}
  for u in uops:
    for s in set(u.src) & feeds: users[s] = users.get(s, 0) + 1
  return {x for x in feeds if users.get(x) == 1}


def _quiet(k: _Kernel, u: UOp) -> bool:
  """Does u leave an open wgmma group alone (module docstring)?"""
  if u.op in _QUIET or is_wgmma(u) or u in k.wgmma_accs: return True
  if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST): return (u.dtype.scalar.is_int() or u.dtype.scalar is dtypes.bool) and not any(is_wgmma(s) for s in u.src)
  return u.op is Ops.STORE and is_wgmma(u.src[1])  # back into the registers it worked in


def before(k: _Kernel, u: UOp) -> None:
  """Close the open wgmma group before an instruction that needs its results or its tiles; at the END
  of the reduction loop, leave the arg's `pending` groups running (their tiles are not overwritten in the
  next iteration, uopc.stages.tc_staging's lag) until the first instruction past the loop that is not quiet."""
  if _quiet(k, u): return
  if k.wgmma_open:
    k.emit("wgmma.commit_group.sync.aligned")
    k.wgmma_open = False
    loop_end = u.op is Ops.END and isinstance(u.src[1].arg, tuple) and AxisType.REDUCE in u.src[1].arg
    k.wgmma_pending = k.wgmma_last.pending if loop_end else 0
    k.emit(f"wgmma.wait_group.sync.aligned {k.wgmma_pending}")
  elif k.wgmma_pending:
    k.emit("wgmma.wait_group.sync.aligned 0")
    k.wgmma_pending = 0


def _descriptor(k: _Kernel, addr, mode: int, leading: int, stride: int) -> str:
  """A shared-memory matrix descriptor: the address's bits 4..17, the byte offsets / 16, the swizzle mode."""
  from uopc.targets.cuda.ptx_memory import _register
  start = k.op1("and.b64", dtypes.uint64, k.op1("shr.u64", dtypes.uint64, _register(k, addr), "4"), "16383")
  fixed = ((leading >> 4) << 16) | ((stride >> 4) << 32) | (_MODES[mode] << 62)
  return k.op1("or.b64", dtypes.uint64, start, str(fixed))


def render_wgmma(k: _Kernel, u: UOp) -> None:
  """wgmma.mma_async of the arg's shape: A and B through descriptors, D += A @ B in place."""
  spec = warpgroup_arg(u.arg)
  acc = u.src[2]
  if acc.op is Ops.LOAD and acc not in k.wgmma_accs or acc.op not in (Ops.LOAD, Ops.WMMA):
    raise k.fail(u, "a warpgroup MMA's accumulator must come from a REG array or another warpgroup MMA")
  d = k.lanes(acc)
  if len(d) != spec.n // 2: raise k.fail(u, f"wgmma {spec.shape}: {spec.n // 2} accumulators expected, got {len(d)}")
  da = _descriptor(k, k.r[u.src[0]], spec.a.swizzle, spec.a.leading, spec.a.stride)
  db = _descriptor(k, k.r[u.src[1]], spec.b.swizzle, spec.b.leading, spec.b.stride)
  scale = k.op1("setp.ne.b32", dtypes.bool, "1", "0")
  if not k.wgmma_open:
    k.emit("wgmma.fence.sync.aligned")
    k.wgmma_open = True
  t_in = _float_t(getattr(dtypes, spec.input))
  k.emit(f"wgmma.mma_async.sync.aligned.{spec.shape}.{_float_t(getattr(dtypes, spec.acc))}.{t_in}.{t_in} "
         f"{{{', '.join(d)}}}, {da}, {db}, {scale}, 1, 1, {int(spec.a.mn_major)}, {int(spec.b.mn_major)}")
  k.set_lanes(u, list(d))
  k.wgmma_last = spec
