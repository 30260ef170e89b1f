"""Rewrite time against graph size: run `.venv/bin/python tests/bench_rewrite.py`.

Not a test (no timed assertion): it prints seconds and microseconds per node for graphs of 1k, 10k
and 100k nodes, so linear growth shows as a flat per-node column. Three workloads:
  engine   a wide DAG (index expressions over shared ranges) rewritten by a two-rule set, bottom-up;
  chain    a 100k-deep chain, top-down, every node rewritten (x+0 -> x);
  simplify symbolic simplification of the wide DAG.
"""
import time

from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.symbolic import simplify
from uopc.uop import UOp

I = dtypes.index


def c(v: int) -> UOp: return UOp.const(I, v)


def wide_dag(n: int) -> UOp:
  """About n nodes: per output k, ((r0 + r1*k) // 4 + k) % 8 over two shared ranges, all into one SINK."""
  r0, r1 = (UOp(Ops.RANGE, I, (c(16),), (i, AxisType.LOOP)) for i in range(2))
  outs = [r0.alu(Ops.ADD, r1.alu(Ops.MUL, c(k))).alu(Ops.IDIV, c(4)).alu(Ops.ADD, c(k)).alu(Ops.MOD, c(8))
          for k in range(n // 8)]
  return UOp(Ops.SINK, dtypes.void, tuple(outs))


def chain(n: int) -> UOp:
  u = UOp(Ops.DEFINE_VAR, I, (), ("x", 0, 10))
  for _ in range(n): u = u.alu(Ops.ADD, c(0))
  return u


ENGINE_RULES = Rules([(Pat.var("x") + Pat.const(I, 0), lambda x: x),
                      (Pat(Ops.MOD, src=(Pat.var("x"), Pat.cvar("m")), name="u"), lambda u, x, m: None)])


def timed(fn, graph: UOp) -> float:
  t = time.perf_counter()
  fn(graph)
  return time.perf_counter() - t


def main() -> None:
  workloads = [("engine", wide_dag, lambda g: graph_rewrite(g, ENGINE_RULES, bottom_up=True)),
               ("chain", chain, lambda g: graph_rewrite(g, ENGINE_RULES)),
               ("simplify", wide_dag, simplify)]
  print(f"{'workload':<10}{'nodes':>9}{'seconds':>10}{'us/node':>10}")
  for name, build, fn in workloads:
    for n in (1_000, 10_000, 100_000):
      g = build(n)
      nodes = len(g.toposort())
      s = timed(fn, g)
      print(f"{name:<10}{nodes:>9}{s:>10.3f}{s / nodes * 1e6:>10.1f}")


if __name__ == "__main__":
  main()
