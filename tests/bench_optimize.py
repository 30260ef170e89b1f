"""What the Optimize heuristics buy on this machine: each CPU benchmark workload (tests/bench/workloads.py)
built by `uopc build -t c` twice, with the heuristics and with every kernel pinned to no opts
(`--opts KERNEL:`), both checked against the float64 reference, then timed (best of a few runs).
Not a test: `.venv/bin/python tests/bench_optimize.py [--filter NAME] [--cpu portable]`; nothing asserts a time.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runners import Uopc  # noqa: E402
from workloads import all_workloads  # noqa: E402

from uopc.frontend import parse_source  # noqa: E402
from uopc.launcher import kernel_name  # noqa: E402
from uopc.stages.callify import callify  # noqa: E402
from uopc.stages.rangeify import rangeify  # noqa: E402


def unoptimised_args(w, workdir: Path) -> tuple[str, ...]:
  """--opts @FILE pinning every kernel of the workload's program to no opts."""
  f = w.program
  entry = parse_source(f.text(), "w.uop").entries[0]
  n = len(rangeify(callify(entry.sink)).kernels)
  pins = workdir / f"{f.name}_{abs(hash(w.name))}.opts"
  pins.write_text("".join(f"{kernel_name(f.name, f.name, i)}:\n" for i in range(n)))
  return ("--opts", f"@{pins}")


def best_time(call, runs: int) -> float:
  call()
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
  return min(times)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--filter", action="append", default=[], help="only workloads whose name contains this")
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--cpu", default="native", help="`uopc build --cpu` of both builds (default native, as make bench)")
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  print("| workload | no opts ms | heuristics ms | speedup |\n|---|---:|---:|---:|")
  with tempfile.TemporaryDirectory() as tmp:
    for i, w in enumerate(all_workloads()):
      if args.filter and not any(s in w.name for s in args.filter): continue
      inputs = w.inputs(rng)
      want, tol = w.reference(*inputs), w.tolerance(*inputs)
      times = []
      for tag, build_args in (("plain", unoptimised_args(w, Path(tmp))), ("heuristics", ())):
        prepared = Uopc(Path(tmp) / f"{tag}{i}", ("--cpu", args.cpu, *build_args)).prepare(w, inputs)
        prepared.call()
        got = prepared.result().astype(np.float64)
        if not np.all(np.abs(got - want) <= tol.atol + tol.rtol * np.abs(want)): raise SystemExit(f"{w.name} ({tag}): WRONG result")
        times.append(best_time(prepared.call, args.runs))
      print(f"| {w.name} | {times[0] * 1e3:.3g} | {times[1] * 1e3:.3g} | {times[0] / times[1]:.2f}x |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
