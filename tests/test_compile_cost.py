"""Compile cost grows linearly with program size (issue 23, item 6), checked by counting work, not by
timing: the Python function calls of lowering a 1,000-op and a 4,000-op chain (tests/bench/
compile_cost.py's program) through every stage of -t c, and the exceptions raised on the way (CPython
searches the chain of running generators on each raise: one exception per node cost time proportional
to the recursion depth, quadratic in a chain). Plus the two rules that keep a long kernel's C cheap to
compile: one register of output lanes, and GCC's linear-time register allocator.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))
from compile_cost import chain  # noqa: E402
from test_optimize import C, kernels_of  # noqa: E402
from uopc.cli import run_with_deep_stack
from uopc.frontend import load_module
from uopc.pipeline import compile_module
from uopc.stages.cpu_schedule import CPU_LONG_BODY
from uopc.stages.optimize import apply_opts, format_axes, heuristic_opts
from uopc.targets.c import render


def _work(path: Path) -> dict[str, int]:
  """Python calls and raised exceptions while compiling `path` for -t c (parsing excluded)."""
  counts = {"call": 0, "exception": 0}

  def tracer(frame, event, arg):
    if event in counts: counts[event] += 1
    return tracer if event == "call" else None

  def compile_traced():
    module = load_module(path)
    sys.settrace(tracer)
    try:
      compile_module(module, "c", "chain")
    finally:
      sys.settrace(None)
  run_with_deep_stack(compile_traced)  # as the CLI runs it: the recursion is as deep as the chain
  return counts


def test_work_grows_linearly_with_the_chain(tmp_path):
  paths = {}
  for n in (50, 1000, 4000):
    paths[n] = tmp_path / f"chain{n}.uop"
    paths[n].write_text(chain(n))
  _work(paths[50])  # first imports and caches
  small, large = _work(paths[1000]), _work(paths[4000])
  # linear: at most 4x the calls for 4x the ops (fixed costs make it less); quadratic would be ~16x
  assert large["call"] < 4.4 * small["call"], (small, large)
  assert large["exception"] <= small["exception"] + 10, (small, large)


def _lanes(n: int) -> str:
  (kernel,) = kernels_of(chain(n)).values()
  return format_axes(apply_opts(kernel, heuristic_opts(kernel, C), C, "k"))


def test_a_long_body_gets_one_register_of_output_lanes():
  assert C.vector_width == 4
  assert _lanes(8) == "g128 u8"  # two registers' worth
  assert _lanes(CPU_LONG_BODY + 1) == "g256 u4"


def test_a_long_kernel_gets_gccs_linear_register_allocator(tmp_path, monkeypatch):
  path = tmp_path / "chain.uop"
  path.write_text(chain(40))
  def source() -> str:
    ((kernel,),) = [e.kernels for e in compile_module(load_module(path), "c", "t")]
    return kernel.source
  assert "ira-algorithm" not in source()
  monkeypatch.setattr(render, "LONG_KERNEL_LINES", 30)
  text = source()
  assert text.startswith("#if defined(__GNUC__) && !defined(__clang__)\n__attribute__((optimize(\"ira-algorithm=priority\")))")
  assert "\n#endif\nvoid t__chain_k0(" in text


@pytest.mark.parametrize("n", [20000])
def test_a_long_chain_compiles(tmp_path, n):
  """The whole 20,000-op chain through -t c's stages, as a smoke test of deep graphs (no timing)."""
  path = tmp_path / "chain.uop"
  path.write_text(chain(n))
  out = []
  run_with_deep_stack(lambda: out.extend(compile_module(load_module(path), "c", "t")))
  ((kernel,),) = [e.kernels for e in out]
  assert kernel.source.count(" = (alu") >= n - 1


def _gemm_epilogue(exp2s: int) -> str:
  """A gemm whose epilogue is a chain of EXP2s (each some 24 ops once decomposed), as a recurrent cell's gates are."""
  lines = ['  %x = PARAM([16, 128]) {(0, "x")} : f32', '  %w = PARAM([128, 128]) {(1, "w")} : f32',
           '  %out = PARAM([16, 128]) {(2, "out")} : f32', "  %xr = RESHAPE(%x, [16, 128, 1])", "  %wr = RESHAPE(%w, [1, 128, 128])",
           "  %m = MUL(%xr, %wr)", "  %s = REDUCE(%m) {(ADD, (1,))}", "  %v0 = RESHAPE(%s, [16, 128])"]
  lines += [f"  %v{t + 1} = EXP2(%v{t})" for t in range(exp2s)] + [f"  STORE(%out, %v{exp2s})"]
  return "func epi {\n" + "\n".join(lines) + "\n}\n"


def test_a_tile_keeps_its_copies_of_a_long_body_within_the_code_budget():
  """The register tile's rows shrink so that rows x vectors x body ops stay within CPU_CODE_BUDGET (an LSTM of four
  steps took gcc 97 s for one kernel's 10,000 lines of C: 8 rows of 2 vectors of a 475-op body); a short body keeps
  its 8 rows."""
  from uopc.stages.cpu_schedule import CPU_CODE_BUDGET, _body_ops
  def tile(exp2s: int) -> tuple[str, int, int]:
    ((kernel,),) = [kernels_of(_gemm_epilogue(exp2s)).values()]
    axes = format_axes(apply_opts(kernel, heuristic_opts(kernel, C), C, "k"))
    lanes = [int(a[1:]) for a in axes.split() if a.startswith("u")]
    return axes, _body_ops(kernel), lanes[0] * lanes[1] // C.vector_width if len(lanes) > 1 else 1
  axes, _, vectors = tile(1)
  assert vectors == 16, axes  # 8 rows of 2 vectors
  axes, body, vectors = tile(20)
  assert 1 < vectors < 16 and vectors * body <= CPU_CODE_BUDGET and body >= 20 * 24, (axes, body)
