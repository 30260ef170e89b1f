"""Reductions nested in reductions: a REDUCE over a PAD of another REDUCE, as tinygrad writes
`x.sum(1).pad(((2, 1),)).max(0)`. The inner reduction's accumulator is initialised inside the outer
reduce axis; when that axis is unrolled, each of its lanes must get its own inner accumulator (issue
26: the lanes shared one, so each lane read the sum of all lanes: 42 instead of 21). Every reduce
op, nesting depths 2 and 3, the heuristics' choices and pinned UNROLLs of the outer axes, on the CPU
targets and in the emulator for every GPU target; results against numpy."""
from __future__ import annotations

import io

import numpy as np
import pytest

from test_group_reduce import emulated
from test_optimize import LIB, build_lib, run_func
from test_tensor_programs import Func
from uopc.driver import BuildOptions, build
from uopc.run import run_file
from uopc.stages.optimize import parse_schedule

OPS = {"ADD": np.sum, "MAX": np.max, "MUL": np.prod}


def nested2(inner: str, outer: str) -> tuple[Func, callable]:
  """x[2, 3] -> inner over axis 1 -> padded to 5 (2 zeros before, 1 after) -> outer over axis 0."""
  f = Func(f"n2_{inner.lower()}_{outer.lower()}")
  x, out = f.param("x", (2, 3)), f.param("out", (1,), out=True)
  rows = f.reshape(f.reduce(x, inner, (1,)), (2,))
  f.store(out, f.reduce(f.pad(rows, (2,), (5,)), outer, (0,)))
  def want(a): return np.array([OPS[outer](np.pad(OPS[inner](a, axis=1), (2, 1)))], np.float32)
  return f, want


def nested3(ops: tuple[str, str, str]) -> tuple[Func, callable]:
  """Three levels: x[2, 3, 4] reduced over axis 2, padded, over axis 1, padded, over axis 0."""
  f = Func("n3_" + "_".join(o.lower() for o in ops))
  x, out = f.param("x", (2, 3, 4)), f.param("out", (1,), out=True)
  a = f.reshape(f.reduce(x, ops[0], (2,)), (2, 3))
  b = f.reshape(f.reduce(f.pad(a, (0, 1), (2, 5)), ops[1], (1,)), (2,))
  f.store(out, f.reduce(f.pad(b, (1,), (4,)), ops[2], (0,)))
  def want(v):
    r = np.pad(OPS[ops[0]](v, axis=2), ((0, 0), (1, 1)))
    return np.array([OPS[ops[2]](np.pad(OPS[ops[1]](r, axis=1), (1, 1)))], np.float32)
  return f, want


CASES = [nested2(i, o) for i in OPS for o in OPS] + [nested3(ops) for ops in (("ADD", "ADD", "ADD"), ("MAX", "ADD", "MAX"), ("ADD", "MAX", "ADD"))]


def _inputs(f: Func, seed: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {name: rng.uniform(0.5, 1.5, shape).astype(np.float32) for name, shape, _, out in f.args if not out}


def test_the_issue_reproducer_sums_to_21(tmp_path):
  f, _ = nested2("ADD", "ADD")
  (tmp_path / "n.uop").write_text(f.text())
  x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
  for target, on_emulator in (("c", False), ("llvm", False), ("cuda", True)):
    assert run_file(tmp_path / "n.uop", target=target, inputs={"x": x}, emulated=on_emulator).arrays["out"].tolist() == [21.0]


@pytest.mark.parametrize("target,on_emulator", [("c", False), ("llvm", False), ("cuda", True), ("amd", True), ("metal", True)])
def test_nested_reductions_match_numpy(tmp_path, target, on_emulator):
  for i, (f, want) in enumerate(CASES):
    (tmp_path / f"{f.name}.uop").write_text(f.text())
    x = _inputs(f, i)
    got = run_file(tmp_path / f"{f.name}.uop", target=target, inputs=x, emulated=on_emulator).arrays["out"]
    np.testing.assert_allclose(got, want(x["x"]), rtol=1e-6, err_msg=f"{f.name}\n{f.text()}")


@pytest.mark.parametrize("opts", ["SPLIT(0,5,r)", "SPLIT(0,5,r),SPLIT(1,3,r)", "SPLIT(1,3,r)"])
def test_pinned_unrolls_of_either_axis(tmp_path, monkeypatch, opts):
  """The outer axis (5), the inner one (3) or both unrolled whole: the same sums."""
  f, want = nested2("ADD", "MAX")
  lib = build_lib(tmp_path, f.text(), parse_schedule([f"{LIB}__{f.name}_k0:{opts}"]), "pinned")
  x = _inputs(f, 7)
  np.testing.assert_allclose(run_func(lib, f, x)["out"], want(x["x"]), rtol=1e-6)
  for target in ("cuda", "amd", "metal"):
    with monkeypatch.context() as m:
      np.testing.assert_allclose(emulated(tmp_path, m, f, x, opts, target)["out"], want(x["x"]), rtol=1e-6, err_msg=target)


def test_an_accumulator_initialised_inside_an_unrolled_axis_gets_one_element_per_lane(tmp_path):
  f, _ = nested2("ADD", "MAX")  # ops that differ: a sum of sums is lowered as one sum (merged loops)
  (tmp_path / "n.uop").write_text(f.text())
  printed = io.StringIO()
  build(tmp_path / "n.uop", BuildOptions("c", tmp_path / "out", name=LIB, print_after=("expand",), print_out=printed,
                                         schedule=parse_schedule([f"{LIB}__{f.name}_k0:SPLIT(0,5,r)"])))
  regs = [line for line in printed.getvalue().splitlines() if "BUFFER" in line and ", reg," in line]
  sizes = sorted(int(line.rsplit(",", 1)[1].rstrip(">").strip()) for line in regs)
  assert sizes == [1, 5], regs   # the inner sum: one per outer lane; the outer sum: one, its lanes contracted


def _kernels(tmp_path, text: str, target: str) -> list[str]:
  (tmp_path / "s.uop").write_text(text)
  printed = io.StringIO()
  build(tmp_path / "s.uop", BuildOptions(target, tmp_path / target, name=LIB, print_after=("rangeify",), print_out=printed,
                                         emit=("source",) if target == "c" else ("ptx",)))
  return printed.getvalue().split("# kernel ")[1:]


def test_a_sum_of_row_sums_is_one_reduction_rows_outermost(tmp_path):
  """x.sum(1).sum(0) on a CPU: one accumulator, the row loop around the column loop (so that what depends on
  the row alone is computed once per row); on a GPU the 1000-long row sums stay a kernel of their own, whose
  rows run side by side (merged, the 64000 elements would be one workgroup's)."""
  f = Func("rows")
  x, out = f.param("x", (64, 1000)), f.param("out", (1,), out=True)
  f.store(out, f.reshape(f.reduce(f.reshape(f.reduce(x, "ADD", (1,)), (64,)), "ADD", (0,)), (1,)))
  (cpu,) = _kernels(tmp_path, f.text(), "c")
  assert cpu.count(": ptr<f32, reg, 1>") == 1, cpu
  loops = [line.split("RANGE(")[1].split(")")[0] for line in cpu.splitlines() if "AxisType.REDUCE" in line]
  assert loops == ["64", "1000"], cpu
  assert len(_kernels(tmp_path, f.text(), "cuda")) == 2
  x_val = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
  got = run_file(tmp_path / "s.uop", target="c", inputs={"x": x_val}).arrays["out"]
  np.testing.assert_allclose(got, [x_val.astype(np.float64).sum()], rtol=1e-5, atol=1e-3)
