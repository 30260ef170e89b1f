"""Linearize: blocks nest properly, ops sit in the innermost loop they depend on, invariants are
hoisted, missing ENDs/ENDIFs are added, and the order depends only on the graph."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from uopc.diagnostics import CompileError
from uopc.dtype import AddrSpace, dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.linearize import linearize
from uopc.uop import UOp

idx, f32, i32 = dtypes.index, dtypes.float32, dtypes.int32
OPEN = (Ops.RANGE, Ops.SPECIAL, Ops.IF)


def c(v, dt=idx): return UOp.const(dt, v)
def param(slot, dt=f32): return UOp(Ops.PARAM, dt.ptr(), (), (slot, f"data{slot}"))
def rng(n, axis): return UOp(Ops.RANGE, idx, (n if isinstance(n, UOp) else c(n),), (axis, AxisType.LOOP))
def ld(buf, off): return UOp(Ops.LOAD, buf.dtype.base, (UOp(Ops.INDEX, buf.dtype, (buf, off)),))
def st(buf, off, v, *gate): return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, off)), v, *gate))
def end(body, r): return UOp(Ops.END, dtypes.void, (body, r))
def sink(*xs): return UOp(Ops.SINK, dtypes.void, xs)


def blocks_at(linear: UOp) -> dict[UOp, tuple]:
  """Check the LINEAR is a toposort with properly nested blocks; map each instruction to the open blocks around it."""
  seen, stack, where = set(), [], {}
  for u in linear.src:
    assert all(s in seen for s in u.src), f"{u.op.name} comes before one of its sources"
    seen.add(u)
    if u.op in (Ops.END, Ops.ENDIF):
      closed = u.src[1] if u.op is Ops.END else u.src[0]
      assert stack and stack[-1] is closed, f"{u.op.name} does not close the innermost open block"
      stack.pop()
    where[u] = tuple(stack)
    if u.op in OPEN: stack.append(u)
  assert not stack, "a block is never closed"
  return where


def depends_on(u: UOp, block: UOp) -> bool:
  """u reads `block`'s value (the range index, the if) other than through the block's END/ENDIF."""
  todo, seen = [u], set()
  while todo:
    x = todo.pop()
    if x is block: return True
    if x in seen or (x.op in (Ops.END, Ops.ENDIF) and block in x.src): continue
    seen.add(x)
    todo.extend(x.src)
  return False


def assert_in_exactly_the_blocks_it_needs(linear: UOp) -> dict[UOp, tuple]:
  where = blocks_at(linear)
  for u, around in where.items():
    if u.op in (Ops.END, Ops.ENDIF): continue
    needed = [b for b in where if b.op in OPEN and b is not u and depends_on(u, b)]
    assert all(b in around for b in needed), f"{u.op.name} lies outside a block it depends on"
  return where


def matmul_like():
  """out[i] = sum_j a[i*4+j] * b[j] + bias[0] with the inner loop writing out[i] every step (no accumulator)."""
  out, a, b, bias = param(0), param(1), param(2), param(3)
  i, j = rng(3, 0), rng(4, 1)
  bias_v = ld(bias, c(0))
  row = i.alu(Ops.MUL, c(4))
  val = ld(a, row.alu(Ops.ADD, j)).alu(Ops.MUL, ld(b, j)).alu(Ops.ADD, bias_v)
  return sink(end(end(st(out, i, val), j), i)), dict(i=i, j=j, bias_v=bias_v, row=row, val=val)


def test_stores_inside_their_loops_and_invariants_hoisted():
  s, n = matmul_like()
  lin = linearize(s)
  where = assert_in_exactly_the_blocks_it_needs(lin)
  pos = {u: k for k, u in enumerate(lin.src)}
  assert where[n["bias_v"]] == ()  # depends on no loop: before both
  assert pos[n["bias_v"]] < pos[n["i"]]
  assert where[n["row"]] == (n["i"],)  # i*4 is invariant in j: computed once per i, outside the j loop
  assert pos[n["row"]] < pos[n["j"]]
  assert where[n["val"]] == (n["i"], n["j"])
  assert [u.op for u in lin.src[-2:]] == [Ops.END, Ops.END] and lin.src[-2].src[1] is n["j"]
  assert Ops.SINK not in [u.op for u in lin.src]


def test_range_without_end_gets_one_after_its_last_user():
  out, a = param(0), param(1)
  r = rng(5, 0)
  after = st(out, c(9), c(1.0, f32))  # independent of r: outside the loop
  lin = linearize(sink(st(out, r, ld(a, r)), after))
  where = assert_in_exactly_the_blocks_it_needs(lin)
  ends = [u for u in lin.src if u.op is Ops.END]
  assert len(ends) == 1 and ends[0].src[1] is r and where[after] == ()


def test_ranges_nest_by_axis_without_explicit_ends():
  out = param(0)
  r1, r0 = rng(3, 1), rng(2, 0)
  lin = linearize(sink(st(out, r0.alu(Ops.MUL, c(3)).alu(Ops.ADD, r1), c(0.0, f32))))
  assert_in_exactly_the_blocks_it_needs(lin)
  ranges = [u for u in lin.src if u.op is Ops.RANGE]
  assert ranges == [r0, r1]


def test_if_block_nesting_and_missing_endif():
  out, a = param(0), param(1)
  r = rng(8, 0)
  gate = r.alu(Ops.CMPLT, c(4))
  cond = UOp(Ops.IF, dtypes.void, (gate,))
  inner = st(out, r, ld(a, r), cond)
  invariant = ld(a, c(0))
  lin = linearize(sink(end(inner, r), st(out, c(50), invariant)))
  where = assert_in_exactly_the_blocks_it_needs(lin)
  assert where[inner] == (r, cond)
  endif = next(u for u in lin.src if u.op is Ops.ENDIF)
  assert where[endif] == (r,)
  assert where[invariant] == ()


def test_explicit_endif_closes_after_everything_in_the_if():
  out = param(0)
  r = rng(4, 0)
  cond = UOp(Ops.IF, dtypes.void, (r.alu(Ops.CMPNE, c(2)),))
  s1, s2 = st(out, r, c(1.0, f32), cond), st(out, r.alu(Ops.ADD, c(4)), c(2.0, f32), cond)
  lin = linearize(sink(end(UOp(Ops.ENDIF, dtypes.void, (cond, s1)), r), s2))
  where = assert_in_exactly_the_blocks_it_needs(lin)
  assert where[s1] == where[s2] == (r, cond)


def test_accumulator_load_after_the_loop_follows_its_end():
  acc = UOp(Ops.BUFFER, f32.ptr(AddrSpace.REG, 1), (), (0, "acc"))
  out, a = param(0), param(1)
  r = rng(4, 0)
  init = st(acc, c(0), c(0.0, f32))
  cur = UOp(Ops.AFTER, acc.dtype, (acc, init, r))
  loop = end(st(cur, c(0), ld(cur, c(0)).alu(Ops.ADD, ld(a, r))), r)
  final = ld(UOp(Ops.AFTER, acc.dtype, (acc, loop)), c(0))
  lin = linearize(sink(st(out, c(0), final)))
  where = assert_in_exactly_the_blocks_it_needs(lin)
  pos = {u: k for k, u in enumerate(lin.src)}
  assert where[init] == () and pos[init] < pos[r] < pos[loop] < pos[final] and where[final] == ()


def test_special_is_a_block_closed_by_an_end():
  out = param(0)
  g = UOp(Ops.SPECIAL, idx, (c(4),), "gidx0")
  lin = linearize(sink(st(out, g, c(1.0, f32))))
  assert_in_exactly_the_blocks_it_needs(lin)
  assert lin.src[-1].op is Ops.END and lin.src[-1].src[1] is g


def test_use_of_a_range_after_its_end_is_an_error():
  out = param(0)
  r = rng(4, 0)
  e = end(st(out, r, c(1.0, f32)), r)
  bad = st(UOp(Ops.AFTER, out.dtype, (out, e)), r, c(2.0, f32))
  with pytest.raises(CompileError, match="END"):
    linearize(sink(bad))


def test_same_graph_same_order():
  s, _ = matmul_like()
  assert linearize(s) is linearize(s)  # hash-consed: equal LINEARs are one object
  assert [u.op for u in linearize(s).src] == [u.op for u in linearize(matmul_like()[0]).src]


BUILD_SCRIPT = textwrap.dedent("""
  import sys
  from uopc.dtype import AddrSpace, dtypes
  from uopc.ops import AxisType, Ops
  from uopc.stages.linearize import linearize
  from uopc.targets.c.render import render_kernel
  from uopc.uop import UOp
  idx, f32 = dtypes.index, dtypes.float32
  reverse = sys.argv[1] == "reverse"
  junk = [object() for _ in range(int(sys.argv[2]))]  # shifts every id()
  order = [3, 2, 1, 0] if reverse else [0, 1, 2, 3]
  params = {k: UOp(Ops.PARAM, f32.ptr(), (), (k, f"data{k}")) for k in order}
  axes = {k: UOp(Ops.RANGE, idx, (UOp.const(idx, 3 + k),), (k, AxisType.LOOP)) for k in ([1, 0] if reverse else [0, 1])}
  i, j = axes[0], axes[1]
  def ld(b, o): return UOp(Ops.LOAD, f32, (UOp(Ops.INDEX, b.dtype, (b, o)),))
  loads = {k: ld(params[k], (i, j, UOp.const(idx, 0))[k - 1]) for k in order[:3] if k}
  loads |= {k: ld(params[k], (i, j, UOp.const(idx, 0))[k - 1]) for k in (1, 2, 3) if k not in loads}
  v = loads[1].alu(Ops.MUL, loads[2]).alu(Ops.ADD, loads[3])
  s = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, params[0].dtype, (params[0], i.alu(Ops.MUL, UOp.const(idx, 4)).alu(Ops.ADD, j))), v))
  print(render_kernel(linearize(UOp(Ops.SINK, dtypes.void, (s,))), "k").source)
""")


def test_order_does_not_depend_on_construction_order_ids_or_hash_seed():
  outputs = set()
  for mode, junk, seed in (("forward", "0", "1"), ("reverse", "977", "2"), ("reverse", "13", "3")):
    env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, mode, junk], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).parent.parent)
    assert res.returncode == 0, res.stderr
    outputs.add(res.stdout)
  assert len(outputs) == 1, "\n----\n".join(outputs)


def _two_chains(gated: bool = False, threads: int | None = None, registers: int = 0):
  """Two independent chains of 4 multiplications in one loop (an UPCAST's two register copies); with
  `threads`, inside a GPU thread index of that bound; with `registers`, beside a REG buffer of that size."""
  r = rng(8, 0) if threads is None else UOp(Ops.SPECIAL, idx, (c(threads),), "gidx0").alu(Ops.ADD, rng(8, 0))
  a, b, out = param(0), param(1), param(2)
  chains = []
  for k, buf in enumerate((a, b)):
    v = ld(buf, r) if not gated else UOp(Ops.LOAD, f32, (UOp(Ops.INDEX, buf.dtype, (buf, r)), c(0.0, f32), r.alu(Ops.CMPLT, c(4))))
    for i in range(4): v = v.alu(Ops.MUL, c(float(i + 2), f32))
    chains.append(st(out, r.alu(Ops.ADD, c(8 * k)), v))
  loop = r if r.op is Ops.RANGE else r.src[1]
  extra = (st(UOp(Ops.BUFFER, f32.ptr(AddrSpace.REG, registers), (), (9, "acc")), c(0), c(0.0, f32)),) if registers else ()
  return sink(end(UOp(Ops.GROUP, dtypes.void, tuple(chains) + extra), loop)), chains


def _mul_positions(linear: UOp) -> list[int]:
  """For each MUL in order, which chain (0 or 1) it belongs to: the chain whose load it descends from."""
  owner, out = {}, []
  for u in linear.src:
    if u.op is Ops.LOAD: owner[u] = u.src[0].src[0].arg[0]
    elif u.op is Ops.MUL and u.dtype == f32:
      owner[u] = owner[u.src[0]]
      out.append(owner[u])
  return out


def test_interleave_alternates_independent_chains():
  s, _ = _two_chains()
  blocks_at(linearize(s, interleave=True))
  assert _mul_positions(linearize(s)) == [0, 0, 0, 0, 1, 1, 1, 1]  # one chain after the other: the DFS order
  assert _mul_positions(linearize(s, interleave=True)) == [0, 1, 0, 1, 0, 1, 0, 1]  # step by step side by side


def test_interleave_leaves_kernels_with_gated_loads_alone():
  s, _ = _two_chains(gated=True)
  assert _mul_positions(linearize(s, interleave=True)) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_small_gpu_launch_or_a_small_register_tile_is_interleaved_a_large_tile_in_a_large_launch_not():
  """-t cuda: a launch of at most GPU_ILP_THREADS threads leaves warp slots empty, so loads go ahead of
  their uses (step 4's order), gated ones too; so they do in a larger launch whose threads keep few
  registers (fewer where loads are gated); a large launch of large register tiles keeps the source order."""
  from uopc.stages.linearize import GPU_ILP_ACCS, GPU_ILP_THREADS, launch_threads
  plain, gated = GPU_ILP_ACCS
  small, _ = _two_chains(gated=True, threads=GPU_ILP_THREADS, registers=4 * plain)
  assert launch_threads(small) == GPU_ILP_THREADS
  blocks_at(linearize(small, gpu=True))
  assert _mul_positions(linearize(small, gpu=True)) == [0, 1, 0, 1, 0, 1, 0, 1]
  for is_gated, accs in ((True, gated), (False, plain)):
    lean, _ = _two_chains(gated=is_gated, threads=GPU_ILP_THREADS * 2, registers=accs)
    tiled, _ = _two_chains(gated=is_gated, threads=GPU_ILP_THREADS * 2, registers=accs + 1)
    assert _mul_positions(linearize(lean, gpu=True)) == [0, 1, 0, 1, 0, 1, 0, 1]
    assert _mul_positions(linearize(tiled, gpu=True)) == [0, 0, 0, 0, 1, 1, 1, 1]
  assert gated < plain  # a gated tile of `plain` elements in a large launch keeps its order
  assert _mul_positions(linearize(_two_chains(gated=True, threads=GPU_ILP_THREADS * 2, registers=plain)[0], gpu=True)) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_gpu_kernel_with_asynchronous_copies_keeps_its_order():
  """Reads of a cp.async stage follow its wait by position only: such kernels are never reordered."""
  s, chains = _two_chains(threads=64)
  wait = UOp(Ops.BARRIER, dtypes.void, (), ("async", 0))
  s = sink(*s.src, wait)
  assert _mul_positions(linearize(s, gpu=True)) == [0, 0, 0, 0, 1, 1, 1, 1]
