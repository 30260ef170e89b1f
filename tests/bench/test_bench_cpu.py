"""The CPU benchmark's harness at small sizes: every workload's uopc program and numpy code pass the
float64 check, a wrong result or a failed build is caught and reported, and the tolerances are
tight enough to reject a one-element error. (The benchmark itself is `make bench`, not a test.)"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu import MIN_RUNS, PAIRS, YARDSTICK_N, Row, WrongResult, check_close, main, measure, run_workload, table  # noqa: E402
from runners import Numpy, Prepared, Tinygrad, Uopc, tinygrad_problem  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_cc():
  """The tinygrad runner sets $CC=clang for tinygrad's compiler: undone after each test, so that later
  tests in this process build with the caller's compiler (test_build's CFLAGS test got clang, which only
  warns about an unknown -Werror=...)."""
  before = os.environ.get("CC")
  yield
  if before is None: os.environ.pop("CC", None)
  else: os.environ["CC"] = before
from workloads import Tolerance, convolutions, elementwise, gemms, reductions, rows  # noqa: E402

SMALL = [*elementwise(1000), *rows(5, 33), *reductions(1000, 7, 9), *gemms((17,)), *convolutions(3, 6, 2)]


def columns(tmp_path, with_tinygrad=False):
  cols = {"uopc": Uopc(tmp_path, env=None), "numpy": Numpy()}
  if with_tinygrad: cols["tinygrad"] = Tinygrad()
  return cols


@pytest.mark.parametrize("w", SMALL, ids=[w.name for w in SMALL])
def test_uopc_and_numpy_pass_the_check(w, tmp_path):
  failures = []
  row = run_workload(w, 0, columns(tmp_path), budget=0.0, max_runs=MIN_RUNS, failures=failures)
  assert failures == []
  assert row.cells["uopc"].seconds > 0 and row.cells["numpy"].runs == 1 and row.cells["tinygrad"].problem == "n/a"
  assert row.build_s > 0


@pytest.mark.skipif(tinygrad_problem() is not None, reason=str(tinygrad_problem()))
@pytest.mark.parametrize("w", SMALL, ids=[w.name for w in SMALL])
def test_tinygrad_passes_the_check(w, tmp_path):
  failures = []
  run_workload(w, 0, {"tinygrad": Tinygrad()}, budget=0.0, max_runs=MIN_RUNS, failures=failures)
  assert failures == []


class Off:
  """A column whose result is the right one with a single element moved by `delta`."""
  name = "off"

  def __init__(self, delta): self.delta = delta

  def prepare(self, w, inputs):
    out = np.array(w.reference(*inputs), np.float32)
    out.flat[out.size // 2] += self.delta
    return Prepared(lambda: None, lambda: out)


@pytest.mark.parametrize("w", SMALL, ids=[w.name for w in SMALL])
def test_an_element_off_by_a_thousandth_is_wrong(w):
  failures = []
  row = run_workload(w, 0, {"uopc": Off(1e-3)}, budget=0.0, max_runs=1, failures=failures)
  assert row.cells["uopc"].problem == "WRONG" and len(failures) == 1 and "1 of" in failures[0]


def test_check_close_rejects_nan_and_wrong_shapes():
  w = gemms((2,))[0]
  with pytest.raises(WrongResult, match="shape"): check_close("x", w, np.zeros(3), np.zeros(2), Tolerance(1, 1))
  with pytest.raises(WrongResult, match="1 of 2"): check_close("x", w, np.array([0.0, np.nan]), np.zeros(2), Tolerance(1, 1))
  check_close("x", w, np.array([1.0, 2.5]), np.array([1.0, 2.0]), Tolerance(atol=np.array([0.0, 0.5])))


def test_a_failed_build_is_reported(tmp_path):
  failures = []
  w = elementwise(8)[0]
  row = run_workload(w, 0, {"uopc": Uopc(tmp_path, ("--emit", "nothing"), env=None)}, budget=0.0, max_runs=1, failures=failures)
  assert row.cells["uopc"].problem == "FAILED" and "uopc build" in failures[0]


def test_measure_takes_the_median_of_at_least_min_runs():
  calls = []
  cell = measure(Prepared(lambda: calls.append(1), lambda: None, warmups=2), lambda got: None, budget=1.0, max_runs=MIN_RUNS)
  assert cell.runs == MIN_RUNS and len(calls) == 2 + MIN_RUNS


def test_a_warm_up_slower_than_the_budget_is_the_single_run():
  calls = []
  cell = measure(Prepared(lambda: calls.append(1), lambda: None, warmups=2), lambda got: None, budget=0.0, max_runs=10)
  assert cell.runs == 1 and len(calls) == 2


def test_table_ratios_are_other_time_over_uopc_time():
  from bench_cpu import Cell
  row = Row("g", "w", 4e9, "GB/s", 0.5, {"uopc": Cell(0.5, 3), "numpy": Cell(2.0, 3), "tinygrad": Cell(problem="n/a")})
  assert table([row])[2] == "| w | 0.50 | 500 | 2000 | n/a | GB/s | 8 | 2 | — | 4.00 | — |"


def test_main_writes_the_report_and_exits_0(tmp_path, monkeypatch, capsys):
  import bench_cpu
  monkeypatch.setattr(bench_cpu, "all_workloads", lambda: gemms((8,)))
  assert main(["--filter", "gemm", "--budget", "0", "--no-tinygrad", "--output", str(tmp_path / "r.md")]) == 0
  text = (tmp_path / "r.md").read_text()
  assert "| gemm 8 |" in text and "tinygrad: n/a (--no-tinygrad)" in text and "uopc revision" in text
  assert text in capsys.readouterr().out


def test_elementwise_rows_note_their_rate_against_the_yardstick_call_by_call(tmp_path, monkeypatch):
  import dataclasses

  import bench_cpu
  w = dataclasses.replace(elementwise(1000)[0], work=2 * 3 * 4 * YARDSTICK_N)  # twice the yardstick's bytes
  times = iter([4.0, 1.0, 2.0, 1.0] * PAIRS)  # each pair: the yardstick's call, then uopc's (4x, then 2x as fast)
  monkeypatch.setattr(bench_cpu, "timed", lambda call: (call(), next(times))[1])
  monkeypatch.setattr(bench_cpu, "measure", lambda p, check, budget, max_runs: bench_cpu.Cell(1.0, 1))
  calls, notes = [], []
  stick = Prepared(lambda: calls.append("stick"), lambda: None)
  run_workload(w, 0, {"uopc": Uopc(tmp_path, env=None)}, budget=0.0, max_runs=1, failures=[], stick=stick, notes=notes)
  assert calls == ["stick"] * PAIRS
  assert notes == [f"{w.name}: uopc at 6.00x the yardstick's rate with their calls alternating ({PAIRS} pairs, median; 4.00-8.00)"]
