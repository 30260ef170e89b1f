"""uopc's CPU kernels next to numpy and tinygrad's CPU backend: `make bench`, or
`.venv/bin/python tests/bench/bench_cpu.py [--filter gemm] [--budget 1] [--build-arg=-O2] [--output FILE]`.

Each workload (tests/bench/workloads.py) is built with `uopc build -t c` in a temporary directory
(the build is timed on its own), called through ctypes on numpy arrays, and run the ordinary way in
numpy and in tinygrad. Every column's result is checked against a float64 reference before it is
timed; a wrong result or a failed build is printed as such and makes the run exit 1. The report (a
Markdown table) records the machine the numbers come from. Not a test: nothing asserts a time.
The elementwise rows' uopc calls also alternate with the yardstick's (numpy's in-place add), and
a note gives their rate ratio: rows measured seconds apart see whatever memory bandwidth a shared
machine has left at the time.
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402
from runners import Numpy, Prepared, Tinygrad, Uopc, Unavailable  # noqa: E402
from workloads import Tolerance, Workload, all_workloads  # noqa: E402

from uopc.driver import CPU_LEVELS  # noqa: E402

COLUMNS = ("uopc", "numpy", "tinygrad")
MIN_RUNS = 3
PAIRS = 20  # alternating calls of an elementwise row's uopc entry and the yardstick (see paired_note)
YARDSTICK_N = 1 << 24
YARDSTICK_NAME = f"numpy in-place add {YARDSTICK_N >> 20}M (yardstick)"


class WrongResult(Exception):
  pass


@dataclass
class Cell:
  seconds: float | None = None
  runs: int = 0
  problem: str = ""  # "n/a", "WRONG", "FAILED"


@dataclass
class Row:
  group: str
  name: str
  work: float
  unit: str
  build_s: float | None = None
  cells: dict[str, Cell] = field(default_factory=dict)


# ---- timing ------------------------------------------------------------------------------------------------
def timed(call) -> float:
  start = time.perf_counter()
  call()
  return time.perf_counter() - start


def measure(p: Prepared, check, budget: float, max_runs: int) -> Cell:
  """Check the first call's result (an in-place workload's later calls go on updating it), warm up,
  then time at least MIN_RUNS runs (more while they fit in `budget` seconds, at most max_runs) and
  take the median. A warm-up slower than MIN_RUNS budgets stands as the single run: repeating a call
  of many seconds would only make the run long."""
  warm = timed(p.call)
  check(p.result())
  for _ in range(p.warmups - 1): warm = timed(p.call)
  if warm > MIN_RUNS * budget: return Cell(warm, 1)
  times = [timed(p.call)]
  times += [timed(p.call) for _ in range(min(max_runs, max(MIN_RUNS, int(budget / times[0]))) - 1)]
  return Cell(statistics.median(times), len(times))


def check_close(column: str, w: Workload, got: np.ndarray, want: np.ndarray, tol: Tolerance) -> None:
  got = np.asarray(got)
  if got.shape != want.shape: raise WrongResult(f"{column} {w.name}: shape {got.shape}, expected {want.shape}")
  err = np.abs(got.astype(np.float64) - want)
  allowed = tol.atol + tol.rtol * np.abs(want)
  if not np.all(err <= allowed):  # also catches NaN
    i = np.unravel_index(np.argmax(np.where(np.isnan(err), np.inf, err - allowed)), err.shape)
    raise WrongResult(f"{column} {w.name}: {np.count_nonzero(~(err <= allowed))} of {err.size} elements off; "
                      f"at {tuple(map(int, i))} got {got[i]!r}, expected {want[i]!r} (allowed error {np.broadcast_to(allowed, err.shape)[i]:.3g})")


# ---- the run -----------------------------------------------------------------------------------------------
def paired_note(w: Workload, uopc: Prepared, stick: Prepared) -> str:
  """uopc's rate over the yardstick's with their calls alternating, PAIRS times: both then see the
  same memory bandwidth, which on a shared machine can change by 2x within seconds (between the
  yardstick's row and this one). The median of the pairs' ratios."""
  ratios = []
  for _ in range(PAIRS):
    stick_s, uopc_s = timed(stick.call), timed(uopc.call)
    ratios.append(w.work / uopc_s / (3 * 4 * YARDSTICK_N / stick_s))
  return f"{w.name}: uopc at {statistics.median(ratios):.2f}x the yardstick's rate with their calls alternating " \
         f"({PAIRS} pairs, median; {min(ratios):.2f}-{max(ratios):.2f})"


def run_workload(w: Workload, seed: int, columns: dict, budget: float, max_runs: int, failures: list[str],
                 stick: Prepared | None = None, notes: list[str] | None = None) -> Row:
  """Measure every column of w; with `stick` (the yardstick's call), also the uopc call against it into `notes`."""
  inputs = w.inputs(np.random.default_rng(seed))
  want = w.reference(*inputs)
  tol = w.tolerance(*inputs)
  row = Row(w.group, w.name, w.work, w.unit)
  for name in COLUMNS:
    runner = columns.get(name)
    if runner is None:
      row.cells[name] = Cell(problem="n/a")
      continue
    try:
      prepared = runner.prepare(w, [x.copy() for x in inputs] if w.in_place else inputs)
      if prepared.build_s is not None: row.build_s = prepared.build_s
      row.cells[name] = measure(prepared, lambda got: check_close(name, w, got, want, tol), budget, max_runs)
      if name == "uopc" and stick is not None and notes is not None: notes.append(paired_note(w, prepared, stick))
    except WrongResult as e:
      failures.append(f"WRONG RESULT: {e}")
      row.cells[name] = Cell(problem="WRONG")
    except Exception as e:  # a failed build or call: reported with the rest, the run goes on
      failures.append(f"FAILED: {name} {w.name}: {type(e).__name__}: {e}")
      row.cells[name] = Cell(problem="FAILED")
    cell = row.cells[name]
    print(f"  {w.name:<28} {name:<9} {format_cell(cell, 1e3)}{' ms' if cell.seconds is not None else ''}", file=sys.stderr, flush=True)
  return row


def yardstick(budget: float, max_runs: int) -> tuple[Row, Prepared]:
  """numpy's in-place add on 16M float32: what this machine's memory gives one core. Its row, and its
  call (for paired_note)."""
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal(YARDSTICK_N, dtype=np.float32), rng.standard_normal(YARDSTICK_N, dtype=np.float32)
  want = x.astype(np.float64) + y
  p = Prepared(lambda: np.add(x, y, out=x), lambda: x)

  def check(got):  # only the first (warm-up) add is checked: later runs keep adding y
    if not np.array_equal(got, want.astype(np.float32)): raise WrongResult("numpy in-place add")
  return Row("elementwise", YARDSTICK_NAME, 3 * 4 * YARDSTICK_N, "GB/s", cells={"numpy": measure(p, check, budget, max_runs)}), p


# ---- the report --------------------------------------------------------------------------------------------
def number(x: float) -> str:
  """Three significant digits (more when the integer part has more), never in exponent form."""
  return np.format_float_positional(x, precision=3, unique=False, fractional=False, trim="-")


def format_cell(cell: Cell | None, scale: float) -> str:
  if cell is None: return "—"
  if cell.seconds is None: return cell.problem
  return number(cell.seconds * scale) + ("*" if cell.runs == 1 else "")


def rate(row: Row, col: str) -> str:
  cell = row.cells.get(col)
  if cell is None or cell.seconds is None: return "—"
  return number(row.work / cell.seconds / 1e9)


def speedup(row: Row, other: str) -> str:
  mine, theirs = row.cells.get("uopc"), row.cells.get(other)
  if mine is None or theirs is None or mine.seconds is None or theirs.seconds is None: return "—"
  return f"{theirs.seconds / mine.seconds:.2f}"


def table(rows: list[Row]) -> list[str]:
  head = ["workload", "uopc build s", *(f"{c} ms" for c in COLUMNS), "unit", *(f"{c} rate" for c in COLUMNS),
          "numpy/uopc", "tinygrad/uopc"]
  lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
  for r in rows:
    build = "—" if r.build_s is None else f"{r.build_s:.2f}"
    cells = [r.name, build, *(format_cell(r.cells.get(c), 1e3) for c in COLUMNS), r.unit,
             *(rate(r, c) for c in COLUMNS), speedup(r, "numpy"), speedup(r, "tinygrad")]
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def report(command: str, machine_rows, rows: list[Row], notes: list[str], failures: list[str], elapsed: float) -> str:
  lines = ["# uopc CPU benchmark", "", f"Command: `{command}`  ", f"Date: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}  ",
           f"Wall time: {elapsed:.0f} s", "", "## Machine", "", "| what | value |", "|---|---|",
           *(f"| {k} | {v} |" for k, v in machine_rows), f"| load average at end | {machine.load()} |", "", "## Results", "",
           f"Times are medians of at least {MIN_RUNS} runs after warm-up (`*`: the warm-up alone, a call slower than "
           f"{MIN_RUNS} times the budget of a cell); rates are GB/s "
           "(bytes each input is read plus bytes written, once) or GFLOP/s; `numpy/uopc` and `tinygrad/uopc` "
           "are time ratios: above 1, uopc is faster. Each column's result was checked against a float64 "
           "reference first.", "", *table(rows), ""]
  if notes: lines += ["Notes:", "", *(f"- {n}" for n in notes), ""]
  if failures: lines += ["FAILURES (these cells measure nothing):", "", *(f"- {f}" for f in failures), ""]
  return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--filter", action="append", default=[], help="run only workloads whose group or name contains this (repeatable)")
  ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per cell (default 1)")
  ap.add_argument("--max-runs", type=int, default=20, help="at most this many timed runs per cell (default 20)")
  ap.add_argument("--cpu", default="native", choices=CPU_LEVELS,
                  help="`uopc build --cpu` (default native: tinygrad's CPU backend compiles with clang -march=native too)")
  ap.add_argument("--build-arg", action="append", default=[], help="an extra argument of `uopc build` (repeatable), e.g. --build-arg=-O2")
  ap.add_argument("--no-tinygrad", action="store_true", help="leave the tinygrad column out")
  ap.add_argument("--output", type=Path, help="also write the report to this file")
  return ap.parse_args(argv)


def selected(filters: list[str], group: str, name: str) -> bool:
  return not filters or any(f in group or f in name for f in filters)


def make_columns(args, workdir: Path, env: dict[str, str], notes: list[str]) -> tuple[dict, str]:
  """The runners, and tinygrad's version or why it is missing (said once, in the notes)."""
  columns = {"uopc": Uopc(workdir, ("--cpu", args.cpu, *args.build_arg), env), "numpy": Numpy()}
  if args.no_tinygrad:
    notes.append("tinygrad: n/a (--no-tinygrad)")
    return columns, "not run (--no-tinygrad)"
  try:
    columns["tinygrad"] = Tinygrad()
    return columns, f"{Tinygrad.version()} (CPU device, clang backend, TinyJit, {Tinygrad.threads()} threads)"
  except Unavailable as e:
    notes.append(f"tinygrad: n/a: {e}")
    return columns, f"n/a: {e}"


def main(argv: list[str]) -> int:
  args = parse_args(argv)
  command = shlex.join(["python", "tests/bench/bench_cpu.py", *argv])
  start = time.perf_counter()
  notes: list[str] = []
  failures: list[str] = []
  workloads = [w for w in all_workloads() if selected(args.filter, w.group, w.name)]
  env = dict(os.environ)  # uopc builds with the caller's $CC and $CFLAGS (the tinygrad column sets CC=clang)
  with tempfile.TemporaryDirectory(prefix="uopc-bench-") as tmp:
    columns, tinygrad = make_columns(args, Path(tmp), env, notes)
    machine_rows = machine.describe(env, tinygrad, args.cpu)
    rows, stick = [], None
    if selected(args.filter, "elementwise", YARDSTICK_NAME):
      row, stick = yardstick(args.budget, args.max_runs)
      rows.append(row)
    for seed, w in enumerate(workloads):
      rows.append(run_workload(w, seed, columns, args.budget, args.max_runs, failures, stick if w.group == "elementwise" else None, notes))
  text = report(command, machine_rows, rows, notes, failures, time.perf_counter() - start)
  print(text)
  if args.output: args.output.write_text(text)
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
