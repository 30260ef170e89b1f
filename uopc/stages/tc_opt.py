"""The TC opt (tensor cores) of Optimize, and the heuristics that choose it: a part of
uopc/stages/optimize.py, whose module docstring states what TC does to a kernel.

`tensor_core` turns a gemm-shaped kernel (acc += CAST(a[m, k]) * CAST(b[k, n]) over the REDUCE axis k)
into warp tiles of the target's tensor core (uopc/stages/tensor_cores.py): m and n become tile axes,
a WARP axis of 32 lanes joins them, each iteration of k takes TC_K_STEPS tensor-core K-steps, and
the epilogue runs once per accumulator element; `tensor_core_heuristics` applies it with the warps
per workgroup the gemm's size allows. Optimize then stages the operands in LOCAL memory
(uopc/stages/tc_staging.py). Invariant: a kernel TC does not fit is refused with an OptError saying
why, never rewritten into something else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from uopc.dtype import AddrSpace, dtypes
from uopc.ops import AxisType, Ops
from uopc.rewrite import substitute
from uopc.stages.opts import TC_AUTO_STAGES, TC_TILES, WARPGROUP_TILES
from uopc.stages.optimize import (Opt, OptError, OptOp, TargetCaps, Trace, _axis, _is_global, _memory_ops, _range,
                                  accumulator_update, apply_opt, axis_size, axis_type, kernel_axes, note, root_buffer, scopes)
from uopc.stages.planner import _Planner
from uopc.stages.tensor_cores import WARP_SIZE, TensorCore
from uopc.symbolic import simplify
from uopc.uop import UOp


@dataclass(frozen=True)
class _Gemm:
  """A kernel's reduction acc = acc + CAST(a[m, k]) * CAST(b[k, n]) (see TC in the module docstring)."""
  m: UOp; n: UOp; k: UOp  # noqa: E702
  a: UOp; b: UOp          # noqa: E702  the LOADs of a and b
  acc: UOp                # the REG accumulator
  init: UOp               # its initial value
  result: UOp             # the LOAD of the finished sum


def _gemm(sink: UOp, k: UOp) -> _Gemm:
  """The kernel as a gemm over the REDUCE axis k, or an OptError saying what does not fit."""
  axes = kernel_axes(sink)
  outputs = [r for r in axes if axis_type(r) is AxisType.GLOBAL]
  if axis_type(k) is not AxisType.REDUCE or len(outputs) != 2 or len(axes) != 3:
    raise OptError("TC needs a kernel of two GLOBAL output axes and one REDUCE axis (a gemm), the REDUCE axis named")
  scope = scopes(sink)
  stores = [u for u in _memory_ops(sink) if u.op is Ops.STORE]
  updates = [u for u in stores if k in scope[u]]
  if len(updates) != 1 or accumulator_update(updates[0]) is not Ops.ADD:
    raise OptError("TC needs the reduction to be one accumulator update acc = acc + v")
  update = updates[0]
  acc = root_buffer(update.src[0])
  product = next(s for s in update.src[1].src if not (s.op is Ops.LOAD and root_buffer(s.src[0]) is acc))
  def input_load(x: UOp) -> UOp | None:  # CAST(LOAD) of a narrower input, or a LOAD of the accumulator's dtype (tf32)
    ld = x.src[0] if x.op is Ops.CAST else x
    ok = ld.op is Ops.LOAD and len(ld.src) == 1 and _is_global(root_buffer(ld.src[0]))
    return ld if ok else None
  loads = [input_load(x) for x in product.src] if product.op is Ops.MUL else [None]
  if None in loads: raise OptError("TC needs acc + CAST(LOAD a) * CAST(LOAD b) (or LOADs of float32 for tf32), ungated loads of global buffers")
  def outputs_of(load: UOp) -> list[UOp]: return [r for r in outputs if r in load.toposort()]
  a, b = sorted(loads, key=lambda x: outputs_of(x) != [outputs[0]])
  if outputs_of(a) != [outputs[0]] or outputs_of(b) != [outputs[1]] or not all(k in x.toposort() for x in (a, b)):
    raise OptError("TC needs one operand to read along the first output axis and k, the other along the second and k")
  inits = [u for u in stores if root_buffer(u.src[0]) is acc and u is not update]
  results = [u for u in sink.toposort() if u.op is Ops.LOAD and root_buffer(u.src[0]) is acc and k not in scope[u] and u not in update.toposort()]
  if len(inits) != 1 or len(results) != 1: raise OptError("TC needs the accumulator initialised once and read once after the reduction")
  return _Gemm(outputs[0], outputs[1], k, a, b, acc, inits[0].src[1], results[0])


def _pick_tensor_core(g: _Gemm, caps: TargetCaps, choice: int) -> TensorCore:
  fits = [tc for tc in caps.tensor_cores if tc.input == g.a.dtype == g.b.dtype and tc.acc == g.acc.dtype.base]
  if choice != -1:
    if not 0 <= choice < len(caps.tensor_cores): raise OptError(f"tensor core {choice} does not exist; {caps.name} has {len(caps.tensor_cores)}")
    if caps.tensor_cores[choice] not in fits: raise OptError(f"tensor core {choice} ({caps.tensor_cores[choice]}) does not fit these dtypes")
    fits = [caps.tensor_cores[choice]]
  if not fits:
    have = ", ".join(map(str, caps.tensor_cores))
    raise OptError(f"no tensor core for {g.a.dtype.name} x {g.b.dtype.name} -> {g.acc.dtype.base.name}; {caps.name} has {have}")
  tc = fits[0]
  sizes, tiles = (axis_size(g.m), axis_size(g.n), axis_size(g.k)), tc.dims
  if not all(isinstance(s, int) and s % t == 0 for s, t in zip(sizes, tiles)):
    raise OptError(f"{tc}: the sizes M x N x K = {' x '.join(map(str, sizes))} must be multiples of {' x '.join(map(str, tiles))}")
  return tc


TC_WARP_TILES = ((2, 4), (2, 2), (1, 2), (1, 1))  # tensor-core tiles per warp (along m, n): the first that divides
TC_BIG_TILE = (4, 8)       # 64 x 64 outputs per warp (m16n8k16): each fragment serves 8 or 4 WMMAs ...
TC_BIG_TILE_WARPS = 512    # ... where the gemm still has this many warp tiles (about 4 per SM of an H100)
TC_K_STEPS = (2, 1)  # tensor-core K-steps per reduction iteration: the first that divides
WARPGROUP_K_STEPS = (4, 2, 1)  # ... for the warpgroup tile: 64 halves of K, 128-byte rows of a


def tc_warp_tile(m: int, n: int, tc: TensorCore) -> tuple[int, int]:
  """Tensor-core tiles per warp along m and n for an m x n output: TC_BIG_TILE where it divides and
  leaves TC_BIG_TILE_WARPS warps or more, else the first of TC_WARP_TILES that divides."""
  (tm, tn, _), (bm, bn) = tc.dims, TC_BIG_TILE
  if m % (tm * bm) == 0 and n % (tn * bn) == 0 and (m // (tm * bm)) * (n // (tn * bn)) >= TC_BIG_TILE_WARPS: return TC_BIG_TILE
  return next((a, b) for a, b in TC_WARP_TILES if m % (tm * a) == 0 and n % (tn * b) == 0)


def tensor_core(sink: UOp, opt: Opt, caps: TargetCaps, trace: Trace | None) -> UOp:
  """TC (module docstring): the gemm's warp tiles on the grid and the reduction as WMMAs of the warp's
  fragments. A warp computes up to 2 x 4 tensor-core tiles (TC_WARP_TILES), so that each fragment of a
  it loads serves 4 WMMAs and each of b serves 2; a reduction iteration takes TC_K_STEPS K-steps where
  they divide, each tile's WMMAs chained in k order (fewer, larger iterations: fewer barriers once the
  operands are staged in LOCAL memory, `uopc.stages.tc_staging`). A pinned tile (TC_TILES) sets the
  warp tile, and the warps per workgroup where it names more than one (LOCAL splits of the tile axes);
  a warpgroup tile (WARPGROUP_TILES) gives each group of 4 warps interleaved rows, so that a warpgroup's
  tiles of one tile row i and k step are one warpgroup MMA (`uopc.stages.warpgroup_mma`)."""
  if not caps.tensor_cores: raise OptError(f"target {caps.name} has no tensor cores")
  axes = kernel_axes(sink)
  g = _gemm(sink, _axis(axes, opt.axis))
  tc = _pick_tensor_core(g, caps, opt.arg[0])
  (tm, tn, tk), idx = tc.dims, dtypes.index
  pm = pn = 1  # warps per workgroup along m and n that TC makes
  if len(opt.arg) > 2 and opt.arg[2] >= 0:  # a pinned tile
    wm, wn, pm, pn = TC_TILES[opt.arg[2]]
    if axis_size(g.m) % (tm * wm * pm) or axis_size(g.n) % (tn * wn * pn):
      group = f", {pm} x {pn} warps: {tm * wm * pm} x {tn * wn * pn} a workgroup" if pm * pn > 1 else ""
      raise OptError(f"tile {opt.arg[2]} ({wm} x {wn} tensor-core tiles a warp{group}) does not divide M x N = {axis_size(g.m)} x {axis_size(g.n)}")
  else: wm, wn = tc_warp_tile(axis_size(g.m), axis_size(g.n), tc)
  interleaved = len(opt.arg) > 2 and opt.arg[2] in WARPGROUP_TILES
  ks = next(s for s in (WARPGROUP_K_STEPS if interleaved else TC_K_STEPS) if axis_size(g.k) % (tk * s) == 0)
  m, n, k = (_range(axis_size(r) // t, r.arg[0], axis_type(r)) for r, t in ((g.m, tm * wm), (g.n, tn * wn), (g.k, tk * ks)))
  lane = _range(WARP_SIZE, max(r.arg[0] for r in axes) + 1, AxisType.WARP)
  group, pair = lane.alu(Ops.IDIV, UOp.const(idx, 4)), lane.alu(Ops.MOD, UOp.const(idx, 4)).alu(Ops.MUL, UOp.const(idx, 2))
  kpair = pair if tc.k_lanes == 2 else lane.alu(Ops.MOD, UOp.const(idx, 4)).alu(Ops.MUL, UOp.const(idx, tc.k_lanes))  # along K
  def at(tile: UOp, size: int, part: UOp, offset: int) -> UOp:  # tile * size + part + offset
    return simplify(tile.alu(Ops.MUL, UOp.const(idx, size)).alu(Ops.ADD, part).alu(Ops.ADD, UOp.const(idx, offset)))
  def row(i: int, dm: int) -> UOp:
    if not interleaved: return at(m, tm * wm, group, tm * i + dm)
    # warpgroup tiles: warp w = m % pm of the workgroup's pm warps along m, warp w % 4 of warpgroup w // 4,
    # has rows tm (w % 4) + 4 tm i of its warpgroup's wm tile rows of 4 tm
    def k(v: int) -> UOp: return UOp.const(idx, v)
    w = m.alu(Ops.MOD, k(pm))
    slab = m.alu(Ops.IDIV, k(pm)).alu(Ops.MUL, k(tm * wm * pm)).alu(Ops.ADD, w.alu(Ops.IDIV, k(4)).alu(Ops.MUL, k(4 * tm * wm)))
    return simplify(slab.alu(Ops.ADD, w.alu(Ops.MOD, k(4)).alu(Ops.MUL, k(tm))).alu(Ops.ADD, group).alu(Ops.ADD, k(4 * tm * i + dm)))
  def fragment(load: UOp, places) -> UOp:
    return UOp(Ops.STACK, load.dtype.vec(len(places)), tuple(substitute(load, dict(p)) for p in places))
  a = [[fragment(g.a, [((g.m, row(i, dm)), (g.k, at(k, tk * ks, kpair, tk * s + dk))) for dm, dk in tc.a]) for i in range(wm)]
       for s in range(ks)]
  b = [[fragment(g.b, [((g.k, at(k, tk * ks, kpair, tk * s + dk)), (g.n, at(n, tn * wn, group, tn * j + dn))) for dk, dn in tc.b])
        for j in range(wn)] for s in range(ks)]
  tiles = [(i, j) for i in range(wm) for j in range(wn)]
  c, vec = len(tc.c), tc.acc.vec(len(tc.c))
  acc = UOp(Ops.BUFFER, tc.acc.ptr(AddrSpace.REG, c * len(tiles)), g.acc.src, g.acc.arg)
  def tile_of(buf: UOp, t: int) -> UOp: return UOp(Ops.INDEX, acc.dtype, (buf, UOp.const(idx, c * t)))
  init = UOp(Ops.GROUP, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (tile_of(UOp(Ops.AFTER, acc.dtype, (acc, m, n, lane)), t),
                                                                          UOp(Ops.STACK, vec, (g.init,) * c))) for t in range(len(tiles))))
  inside = UOp(Ops.AFTER, acc.dtype, (acc, init, k))
  def chain(t: int, i: int, j: int) -> UOp:  # the tile's WMMAs over the iteration's K-steps, in k order
    x = UOp(Ops.LOAD, vec, (tile_of(inside, t),))
    for s in range(ks): x = UOp(Ops.WMMA, vec, (a[s][i], b[s][j], x), tc.arg)
    return x
  mmas = [chain(t, i, j) for t, (i, j) in enumerate(tiles)]
  loop = UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (tile_of(acc, t), x))
                                                                      for t, x in enumerate(mmas))), k))
  done = UOp(Ops.AFTER, acc.dtype, (acc, loop))
  # the epilogue once per accumulator element, at that element's row and column
  ends = {u: u.src[0] for u in sink.toposort() if u.op is Ops.END and u.src[1] in (g.m, g.n)}
  body = _without_ends(sink, ends)
  def epilogue(t: int, e: int) -> tuple[UOp, ...]:
    (i, j), (dm, dn) = tiles[t], tc.c[e]
    total = UOp(Ops.LOAD, vec, (tile_of(done, t),))
    places = {g.result: UOp(Ops.GEP, tc.acc, (total,), e), g.m: row(i, dm), g.n: at(n, tn * wn, pair, tn * j + dn)}
    return substitute(body, places).src
  out = UOp(Ops.GROUP, dtypes.void, tuple(x for t in range(len(tiles)) for e in range(c) for x in epilogue(t, e)))
  for r in (lane, n, m): out = UOp(Ops.END, dtypes.void, (out, r))
  out = UOp(Ops.SINK, dtypes.void, (out,))
  if {g.m, g.n, g.k} & set(out.toposort()): raise OptError("TC could not move every use of the gemm's axes onto its tiles")
  note(trace, sink, out)
  return _workgroup_warps(out, kernel_axes(out).index(m), pm, kernel_axes(out).index(n), pn, caps, trace)


def _workgroup_warps(sink: UOp, im: int, pm: int, in_: int, pn: int, caps: TargetCaps, trace: Trace | None) -> UOp:
  """sink with pn warps along the n tile axis (at index in_) and pm along m (at im < in_), LOCAL splits as the
  heuristics make them: n's first, so that m's index still holds."""
  for i, k in ((in_, pn), (im, pm)):
    if k > 1: sink = apply_opt(sink, Opt(OptOp.SPLIT, i, (k, AxisType.LOCAL, False)), caps, first=False, trace=trace)
  return sink


def _without_ends(sink: UOp, ends: Mapping[UOp, UOp]) -> UOp:
  """sink with the ENDs in `ends` replaced by their bodies (the loops they close are rebuilt around)."""
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo[s] for s in u.src)
    memo[u] = memo[ends[u]] if u in ends else u if src == u.src else u.replace(src=src)
  return memo[sink]


# ---- heuristics ---------------------------------------------------------------------------------------------


TC_WARPS = ((1, (4, 2)), (0, (2,)))  # (tile axis after TC, LOCAL factors to try): warps per workgroup along n, then m
TC_BIG_WARPS = ((1, (2,)), (0, (2,)))  # the same for TC_BIG_TILE: 2 x 2 warps, a 128 x 128 workgroup tile
TC_MIN_WORKGROUPS = 132  # ... each only where the workgroups stay at least this many (one per SM of an H100)


# A one-warpgroup tile (128 x 128) also pays with fewer workgroups than TC_MIN_WORKGROUPS where each has a long
# reduction: at least WARPGROUP_MIN_WORKGROUPS of them, and workgroups x reduction iterations (of K 64) at least
# WARPGROUP_MIN_WORK. H100, float16 gemms M x K x N, wgmma tile 9 against the mma.sync heuristics: 512 x 4096 x 4096
# (128 workgroups x 64 iterations) 0.048 against 0.072 ms, 256 x 4096 x 4096 (64 x 64) 0.046 / 0.052, 512 x 2048 x
# 2048 (64 x 32) 0.029 / 0.032, 2048 x 1024 x 1024 (128 x 16) 0.023 / 0.027; but 64 x 16 (1024^3) 0.023 / 0.020,
# 128 x 4 (2048 x 256 x 1024) 0.019 / 0.017 and 32 x 128 (256 x 8192 x 2048) 0.075 / 0.067 (tests/bench/RESULTS.md).
WARPGROUP_MIN_WORKGROUPS, WARPGROUP_MIN_WORK = 64, 2048


def _warpgroup_fits(plan: _Planner, opt: Opt) -> bool:
  """A warpgroup tile (sm_90a builds) that applies and leaves at least TC_MIN_WORKGROUPS workgroups (their
  GLOBAL axes, batch axes included, all of known size), or for the one-warpgroup tile, enough long ones
  (WARPGROUP_MIN_WORKGROUPS, WARPGROUP_MIN_WORK)."""
  try:
    sink = apply_opt(plan.sink, opt, plan.caps, first=not plan.opts)
  except OptError:
    return False
  axes = kernel_axes(sink)
  sizes = [axis_size(r) for r in axes if axis_type(r) is AxisType.GLOBAL]
  iterations = [axis_size(r) for r in axes if axis_type(r) is AxisType.REDUCE]
  if not all(isinstance(s, int) for s in sizes + iterations): return False
  workgroups = math.prod(sizes)
  if workgroups >= TC_MIN_WORKGROUPS: return True
  return opt.arg[2] == WARPGROUP_TILES[0] and workgroups >= WARPGROUP_MIN_WORKGROUPS and workgroups * math.prod(iterations) >= WARPGROUP_MIN_WORK


def tensor_core_heuristics(plan: _Planner) -> bool:
  """TC on the kernel's one REDUCE axis where it fits (a half-precision gemm), with up to 8 warps per
  workgroup (4 for the big warp tile), whose operand tiles are staged in LOCAL memory; a small gemm
  keeps fewer warps per workgroup so that its workgroups still fill the GPU's SMs (TC_MIN_WORKGROUPS)."""
  reduces = plan.axes(AxisType.REDUCE)
  if not plan.caps.tensor_cores or len(reduces) != 1: return False
  for tile in WARPGROUP_TILES[::-1] if plan.caps.warpgroup_mma else ():  # 128 x 256 (two warpgroups), else 128 x 128
    opt = Opt(OptOp.TC, reduces[0], (-1, TC_AUTO_STAGES, tile))
    if _warpgroup_fits(plan, opt) and plan.apply(opt): return True
  if not plan.apply(Opt(OptOp.TC, reduces[0], (-1,))): return False
  big = sum(u.op is Ops.WMMA for u in plan.sink.toposort()) >= TC_BIG_TILE[0] * TC_BIG_TILE[1]
  groups = math.prod(s for i in (0, 1) if isinstance(s := plan.size(i), int))  # warp tiles: one warp each so far
  for axis, factors in TC_BIG_WARPS if big else TC_WARPS:
    groups //= plan.split_by_first(axis, [k for k in factors if groups // k >= TC_MIN_WORKGROUPS], AxisType.LOCAL) or 1
  return True
