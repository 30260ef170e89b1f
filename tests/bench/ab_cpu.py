"""A/B timing of one .uop program on the CPU: builds of the same entry by two uopc trees, or with pinned opts,
called alternately in one process so that every variant sees the same machine and load.

Variant 0 is this tree's build with its heuristics; `--tree PATH` adds the build of the uopc checkout at PATH
(e.g. a `git worktree` of an older revision), `--opts KERNEL:OPTS` this tree's build with those opts pinned
(as `uopc build --opts`; repeatable within one variant by separating with ';'). Every variant's outputs are
compared bit for bit with variant 0's before anything is timed (a difference is reported, not fatal: pinned
opts may reorder a float sum). Then the calls alternate, `--pairs` rounds; the report gives each variant's
median and its ratio to variant 0's.

  python tests/bench/ab_cpu.py FILE.uop [--entry NAME] [--tree PATH] [--opts 'K:OPTS'] [--pairs 200]
                               [-t c|llvm] [--cpu native] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402

from uopc.frontend import load_module  # noqa: E402
from uopc.run import call_entry, entry_arguments, pick_entry, prepare_arrays  # noqa: E402


def build(path: Path, out: Path, tree: Path, target: str, cpu: str | None, opts: list[str]) -> ctypes.CDLL:
  cmd = [sys.executable, "-m", "uopc", "build", str(path.resolve()), "-t", target, "-o", str(out.resolve()), "--emit", "so,header"]
  if cpu: cmd += ["--cpu", cpu]
  for o in opts: cmd += ["--opts", o]
  # from the tree itself: `python -m` puts the working directory first on sys.path, before PYTHONPATH
  subprocess.run(cmd, check=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree.resolve())})
  return ctypes.CDLL(str(out / f"lib{path.stem}.so"))


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("file", type=Path)
  p.add_argument("--entry", default=None)
  p.add_argument("--tree", action="append", default=[], type=Path, help="another uopc checkout to build with")
  p.add_argument("--opts", action="append", default=[], help="KERNEL:OPTS pinned in a variant of this tree (';' joins several)")
  p.add_argument("--pairs", type=int, default=200)
  p.add_argument("-t", "--target", default="c", choices=("c", "llvm"))
  p.add_argument("--cpu", default=None, help="uopc build --cpu (-t c; default: the portable build)")
  p.add_argument("--workdir", type=Path, default=None, help="where the builds go (default: a temporary directory, removed after)")
  args = p.parse_args(argv)
  variants = [("heuristics", ROOT, [])] + [(f"tree {t}", t, []) for t in args.tree] + [(f"opts {o}", ROOT, o.split(";")) for o in args.opts]
  module = load_module(str(args.file))
  entry = pick_entry(module, args.entry)
  arguments = entry_arguments(entry)
  prefix = "".join(c if c.isalnum() or c == "_" else "_" for c in args.file.stem)
  with tempfile.TemporaryDirectory(prefix="uopc-ab-") if args.workdir is None else contextlib.nullcontext(args.workdir) as tmp:
    libs = [build(args.file, Path(tmp) / f"v{i}", tree, args.target, args.cpu, opts) for i, (_, tree, opts) in enumerate(variants)]
    arrays = [prepare_arrays(module, arguments, {}, {}, 0) for _ in libs]
    for lib, a in zip(libs, arrays): call_entry(lib, prefix, entry.name, arguments, a, {})
    for (name, _, _), a in zip(variants[1:], arrays[1:]):
      for k in a:
        if not np.array_equal(a[k], arrays[0][k], equal_nan=True): print(f"note: {name}: buffer {k} differs from the heuristics' build")
    times: list[list[float]] = [[] for _ in libs]
    for _ in range(args.pairs):
      for i, lib in enumerate(libs):
        t = time.perf_counter()
        call_entry(lib, prefix, entry.name, arguments, arrays[i], {})
        times[i].append(time.perf_counter() - t)
  base = statistics.median(times[0])
  for (name, _, _), t in zip(variants, times):
    print(f"{statistics.median(t) * 1e3:10.3f} ms  {statistics.median(t) / base:6.3f}x  {name}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
