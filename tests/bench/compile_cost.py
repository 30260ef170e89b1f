"""Compile cost of a long elementwise chain: wall time and peak memory of `uopc check` and `uopc build`
for 5k/10k/20k/40k ops (results in tests/bench/RESULTS.md, "Compile cost").

  python tests/bench/compile_cost.py [--sizes 5000,10000,20000,40000] [--targets c,source,llvm,ptx]

`chain(n)` is the program: one input x[1024] f32, then n elementwise ops, each using the one before
(ADD a constant, MUL by a constant, in turn), stored into an output. Each command runs in its own
process; its peak memory is the largest resident set of it and of what it runs (the C compiler), as
the kernel reports it to wait4, like /usr/bin/time's maximum resident set size. Cost should grow
linearly: each row's time and memory per op about the same as the row before.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS = ("ADD({prev}, 1.5)", "MUL({prev}, 0.75)")
# what each target column runs after `uopc`: the target's whole build, or (source) -t c's C file only
COMMANDS = {"c": ["build", "-t", "c"], "source": ["build", "-t", "c", "--emit", "source"],
            "llvm": ["build", "-t", "llvm"], "ptx": ["build", "-t", "cuda", "--emit", "ptx"]}


def chain(n: int, size: int = 1024) -> str:
  """The `.uop` text of an n-op chain over x[size] f32 (a `func` entry named `chain`)."""
  lines = ["func chain {", f"  %x = PARAM([{size}]) {{(1, \"x\")}} : f32"]
  prev = "%x"
  for i in range(1, n + 1):
    lines.append(f"  %a{i} = {OPS[(i - 1) % len(OPS)].format(prev=prev)}")
    prev = f"%a{i}"
  lines += [f"  %out = PARAM([{size}]) {{(0, \"out\")}} : f32", f"  STORE(%out, {prev})", "}", ""]
  return "\n".join(lines)


def uopc() -> list[str]:
  exe = Path(sys.executable).with_name("uopc")
  return [str(exe)] if exe.exists() else [sys.executable, "-m", "uopc"]


def measure(cmd: list[str], cwd: Path) -> tuple[float, float]:
  """(wall seconds, peak resident MB of the command and its children); raises if it fails."""
  start = time.perf_counter()
  proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  _, status, usage = os.wait4(proc.pid, 0)
  wall = time.perf_counter() - start
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()}")
  return wall, usage.ru_maxrss / 1024


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--sizes", default="5000,10000,20000,40000")
  ap.add_argument("--targets", default="c,source", help=f"comma-separated, of {', '.join(COMMANDS)}")
  args = ap.parse_args()
  sizes, targets = [int(s) for s in args.sizes.split(",")], args.targets.split(",")
  print("| ops | check s | check MB | " + " | ".join(f"{t} s | {t} MB | {t} us/op" for t in targets) + " |")
  print("|---:" * (3 + 3 * len(targets)) + "|")
  with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp)
    for n in sizes:
      src = work / f"chain{n}.uop"
      src.write_text(chain(n))
      row = [str(n), *(f"{x:.2f}" if i == 0 else f"{x:.0f}" for i, x in enumerate(measure(uopc() + ["check", src.name], work)))]
      for t in targets:
        wall, mb = measure(uopc() + COMMANDS[t] + [src.name, "-o", f"out-{t}-{n}"], work)
        row += [f"{wall:.2f}", f"{mb:.0f}", f"{wall / n * 1e6:.0f}"]
      print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
  main()
