"""Optimize: axis typing (parallel axes proven), OptOps and their refusals, --opts and --print-after
optimize, and randomised opt sequences whose kernels must compute exactly what the unoptimised ones do.

No opt reorders arithmetic (UNROLL folds lanes in loop order, UPCAST/THREAD/PADTO/SWAP move whole
iterations), so optimised and unoptimised builds must agree bit for bit.
"""
from __future__ import annotations

import ctypes
import io
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from test_tensor_programs import Func, gemm, softmax
from uopc.diagnostics import CompileError
from uopc.driver import BuildOptions, build
from uopc.frontend import parse_source
from uopc.launcher import kernel_name
from uopc.ops import AxisType, Ops
from uopc.stages.callify import callify
from uopc.stages.optimize import (KernelSchedule, Opt, OptError, OptOp, apply_opt, apply_opts, format_axes, heuristic_opts, kernel_axes, parallel_axes,
                                  parse_opts, parse_schedule, target_caps, type_axes)
from uopc.stages.rangeify import rangeify

C = target_caps("c")
GPU = target_caps("cuda")
LIB = "t"


# ---- helpers shared with test_expand / test_threads --------------------------------------------------------


def kernels_of(text: str, caps=C) -> dict[str, object]:
  """Each kernel of `text` by its C name (library LIB), with its axes typed as Optimize types them."""
  module = parse_source(text, "t.uop")
  out = {}
  for e in module.entries:
    sinks = rangeify(callify(e.sink), cpu=not caps.gpu).kernels if e.kind == "func" else (e.sink,)
    for i, k in enumerate(sinks): out[kernel_name(LIB, e.name, i)] = type_axes(k, caps)
  return out


def build_lib(tmp_path, text: str, schedule, tag: str, env=None):
  (tmp_path / f"{tag}.uop").write_text(text)
  out = tmp_path / tag
  opts = BuildOptions("c", out, name=LIB, schedule=schedule, print_out=io.StringIO(), **({"env": env} if env else {}))
  build(tmp_path / f"{tag}.uop", opts)
  return ctypes.CDLL(str(out / f"lib{LIB}.so"))


def run_func(lib, f: Func, inputs: dict[str, np.ndarray], suffix: str = "", extra=()) -> dict[str, np.ndarray]:
  """Call entry f (buffers in slot order) on copies of `inputs`; the written buffers start as NaN."""
  bufs = {name: (np.full(shape, np.nan, np.float32) if out else inputs[name].copy()) for name, shape, _, out in f.args}
  ptrs = [bufs[name].ctypes.data_as(ctypes.c_void_p) for name, _, _, _ in f.args]
  assert getattr(lib, f"{LIB}_{f.name}{suffix}")(*ptrs, *extra) == 0
  return {name: bufs[name] for name, _, _, out in f.args if out}


def random_inputs(f: Func, seed: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {name: rng.standard_normal(shape).astype(np.float32) for name, shape, _, out in f.args if not out}


def elementwise(a: int, b: int) -> Func:
  f = Func("ew")
  x, y, out = f.param("x", (a, b)), f.param("y", (1, b)), f.param("out", (a, b), out=True)
  f.store(out, f.op("ADD", f.op("MUL", x, f.expand(y, (a, b))), f.const(1.5)))
  return f


def reduction(a: int, b: int, op: str, axis: int) -> Func:
  f = Func(f"red_{op.lower()}{axis}")
  shape = (a, 1) if axis == 1 else (1, b)
  x, out = f.param("x", (a, b)), f.param("out", shape, out=True)
  f.store(out, f.reduce(f.op("MUL", x, x) if op == "ADD" else x, op, (axis,)))
  return f


def padded(a: int, b: int) -> Func:
  """A 3-tap sum over a zero-padded row: gated loads at the borders."""
  f = Func("pad3")
  x, out = f.param("x", (a, b)), f.param("out", (a, b), out=True)
  xp = f.pad(x, (0, 1), (a, b + 2))
  f.store(out, f.op("ADD", f.op("ADD", f.shrink(xp, (0, 0), (a, b)), f.shrink(xp, (0, 1), (a, b))), f.shrink(xp, (0, 2), (a, b))))
  return f


def program(funcs: list[Func]) -> str: return "".join(f.text() for f in funcs)


# ---- parsing opts ------------------------------------------------------------------------------------------


def test_opts_parse_and_print_back():
  text = "SPLIT(0,4,u),SPLIT(1, 2, t, top),PADTO(2,8),SWAP(0,1),NOLOCALS,PADTO(1,64,32)"
  opts = parse_opts(text)
  assert opts == (Opt(OptOp.SPLIT, 0, (4, AxisType.UPCAST, False)), Opt(OptOp.SPLIT, 1, (2, AxisType.THREAD, True)),
                  Opt(OptOp.PADTO, 2, 8), Opt(OptOp.SWAP, 0, 1), Opt(OptOp.NOLOCALS), Opt(OptOp.PADTO, 1, (64, 32)))
  assert ",".join(map(str, opts)) == text.replace(" ", "")
  assert parse_opts("") == ()


@pytest.mark.parametrize("text, message", [
  ("SPLIT(0,4)", "expected SPLIT(axis, factor, type)"), ("SPLIT(0,4,q)", "unknown axis type 'q'"),
  ("SPLIT(a,4,u)", "expected integers"), ("FOO(1)", "unknown opt"), ("NOLOCALS(1)", "takes no arguments"),
  ("SPLIT(0,4,u) SWAP(0,1)", "expected an opt"), ("PADTO(1)", "expected PADTO(axis, multiple)")])
def test_bad_opts_are_diagnostics(text, message):
  with pytest.raises(CompileError) as e:
    parse_opts(text)
  assert message in e.value.diagnostics[0].message and "--opts" in e.value.diagnostics[0].message


def test_schedule_file_errors_point_at_the_line(tmp_path):
  f = tmp_path / "opts.txt"
  f.write_text("# a comment\nk0:SPLIT(0,4,u)\n\nk1:SPLIT(0,4,zz)\n")
  with pytest.raises(CompileError) as e:
    parse_schedule([f"@{f}"])
  d = e.value.diagnostics[0]
  assert (d.loc.file, d.loc.line) == (str(f), 4) and "unknown axis type 'zz'" in d.message
  f.write_text("k0:SPLIT(0,4,u)\nk1:\n")
  assert parse_schedule([f"@{f}", "k2:SWAP(0,1)"]) == {"k0": (Opt(OptOp.SPLIT, 0, (4, AxisType.UPCAST, False)),), "k1": (),
                                                       "k2": (Opt(OptOp.SWAP, 0, 1),)}
  with pytest.raises(CompileError, match="given opts twice"): parse_schedule(["k:", "k:SWAP(0,1)"])
  with pytest.raises(CompileError, match="cannot read"): parse_schedule([f"@{tmp_path / 'missing'}"])


# ---- typing -------------------------------------------------------------------------------------------------


def test_output_axes_of_rangeified_kernels_are_global():
  ks = kernels_of(program([gemm(4, 3, 2), softmax(4, 10)]))
  # softmax is one kernel: its division loop (g10) beside its max and sum loops
  assert [format_axes(k) for k in ks.values()] == ["g4 g2 R3", "g4 g10 R10 R10"]


KERNEL_TEXT = """kernel {name} {{
  %out = PARAM {{(0, "out")}} : ptr<f32>
  %x = PARAM {{(1, "x")}} : ptr<f32>
  %r = RANGE(8) {{(0, AxisType.LOOP)}} : index
  %xp = INDEX(%x, %r) : ptr<f32>
  %v = LOAD(%xp) : f32
  %two = CONST {{2}} : index
  %zero = CONST {{0}} : index
  %one = CONST {{1}} : index
  %a = {address} : index
  %i = INDEX({buf}, %a) : ptr<f32>
  %s = STORE(%i, %v)
  %e = END(%s, %r)
  SINK(%e)
}}
"""


@pytest.mark.parametrize("buf, address, parallel", [
  ("%out", "MUL(%r, %one)", True),
  ("%out", "IDIV(%r, %two)", False),    # two iterations write one element
  ("%out", "MUL(%r, %zero)", False),    # every iteration writes the same element
  ("%x", "ADD(%r, %one)", False),       # reads what another iteration writes
  ("%x", "MUL(%r, %one)", True),        # in place, element by element (the address simplifies to the load's)
])
def test_parallel_axes_are_proven(buf, address, parallel):
  k = next(iter(kernels_of(KERNEL_TEXT.format(name="k", buf=buf, address=address)).values()))
  assert format_axes(k) == ("g8" if parallel else "L8")
  assert bool(parallel_axes(k)) == parallel


# ---- applying and refusing opts -----------------------------------------------------------------------------


def _gemm_kernel():
  return kernels_of(gemm(8, 12, 16).text())[kernel_name(LIB, "gemm", 0)]


def test_split_types_and_order():
  k = _gemm_kernel()
  k = apply_opts(k, parse_opts("SPLIT(1,8,u),SPLIT(0,2,t,top),SPLIT(4,4,r),SWAP(1,2)"), C, "k")
  assert format_axes(k) == "t2 g2 g4 u8 R3 r4"
  ids = [r.arg[0] for r in kernel_axes(k)]
  assert ids == list(range(6))


@pytest.mark.parametrize("opts, loops", [("", [8, 16, 12]), ("SWAP(0,1)", [16, 8, 12])])
def test_swap_exchanges_the_loops_nesting(opts, loops):
  """SWAP reorders the loops themselves (the END chain rangeify built), not only the axis ids: after
  SWAP(0,1) a gemm's column loop encloses its row loop."""
  from uopc.stages.linearize import linearize
  k = apply_opts(_gemm_kernel(), parse_opts(opts), C, "k")
  ranges = [u for u in linearize(k).src if u.op is Ops.RANGE]
  assert [r.src[0].arg for r in ranges] == loops


def test_split_whole_axis_drops_the_size_one_part():
  k = apply_opts(_gemm_kernel(), parse_opts("SPLIT(2,12,r)"), C, "k")
  assert format_axes(k) == "g8 g16 r12"


def test_padto_masks_every_access_inside_the_axis():
  k = apply_opts(_gemm_kernel(), parse_opts("PADTO(2,8)"), C, "k")
  assert format_axes(k) == "g8 g16 R16"
  gated = [u for u in k.toposort() if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3 - (u.op is Ops.LOAD) + 1]
  assert gated, "the reduce loop's loads and accumulator update are gated"


@pytest.mark.parametrize("opts, caps, message", [
  ("SPLIT(0,3,u)", C, "3 does not divide the size 8 of axis 0"),
  ("SPLIT(1,4,l)", C, "LOCAL needs workgroups; target c is a CPU"),
  ("SPLIT(7,2,u)", C, "axis 7 does not exist (the kernel has 3 axes)"),
  ("SPLIT(2,3,u)", C, "UPCAST (u) cannot be split from REDUCE (R); only from L/g/l"),
  ("SPLIT(0,2,r)", C, "UNROLL (r) cannot be split from GLOBAL (g)"),
  ("SPLIT(0,2,t)", C, "THREAD is the outer part of a split (add 'top')"),
  ("SPLIT(0,2,u,top)", C, "UPCAST is the inner part of a split (drop 'top')"),
  ("SPLIT(0,2,t,top)", GPU, "target cuda has no CPU threads"),
  ("SPLIT(0,2,L)", C, "no axis is split into LOOP"),
  ("TC(2)", C, "target c has no tensor cores"),
  ("SPLIT(0,2,u),TC(0)", C, "TC must be the first opt"),
  ("SWAP(0,2)", C, "axes of different types (g, R) cannot swap"),
  ("SWAP(1,1)", C, "swaps an axis with itself"),
  ("NOLOCALS,SPLIT(1,4,l)", GPU, "LOCAL after NOLOCALS"),
  ("SPLIT(1,2,l),NOLOCALS", GPU, "the kernel already has LOCAL axes"),
  ("SPLIT(0,2,t,top),SPLIT(1,2,t,top)", C, "the kernel already has a THREAD axis"),
])
def test_invalid_opts_are_refused_naming_kernel_and_opt(opts, caps, message):
  with pytest.raises(CompileError) as e:
    apply_opts(_gemm_kernel(), parse_opts(opts), caps, "t__gemm_k0")
  msg = e.value.diagnostics[0].message
  assert msg.startswith("kernel t__gemm_k0: cannot apply ") and message in msg, msg


def test_gpu_grids_of_four_axes_fold_the_outer_ones_into_gidx2(tmp_path, monkeypatch):
  """Every parallel axis goes on the grid; Expand folds the outer ones of a 4-axis grid into gidx2 (its
  quotient and remainder), and the emulated kernel writes every element once, right."""
  from test_group_reduce import emulated
  from uopc.stages.expand import expand
  f = Func("wide")
  x, out = f.param("x", (2, 3, 4, 5)), f.param("out", (2, 3, 4, 5), out=True)
  f.store(out, f.op("ADD", x, x))
  kernel = next(iter(kernels_of(f.text(), GPU).values()))
  assert format_axes(kernel) == "g2 g3 g4 g5"
  lowered = expand(KernelSchedule(kernel, (), GPU))
  specials = {u.arg: u.src[0].arg for u in lowered.toposort() if u.op is Ops.SPECIAL}
  assert specials == {"gidx0": 5, "gidx1": 4, "gidx2": 6}
  data = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
  assert np.array_equal(emulated(tmp_path, monkeypatch, f, {"x": data}, "")["out"], 2 * data)


# ---- the CLI ------------------------------------------------------------------------------------------------


def _print_after_optimize(tmp_path, text: str, *opts: str) -> list[str]:
  from click.testing import CliRunner

  from uopc.cli import cli
  (tmp_path / "p.uop").write_text(text)
  res = CliRunner().invoke(cli, ["build", str(tmp_path / "p.uop"), "-o", str(tmp_path / "o"), "--emit", "source",
                                 "--print-after", "optimize", *[a for o in opts for a in ("--opts", o)]])
  assert res.exit_code == 0, res.output
  return [line for line in res.output.splitlines() if line.startswith("# ")]


def test_cpu_threads_only_over_an_axis_that_holds_every_reduction():
  def thread_splits(f: Func) -> list:
    k = list(kernels_of(f.text()).values())[-1]  # the output's kernel (a long max and sum are split into chunks first)
    return [o for o in heuristic_opts(k, C) if o.op is OptOp.SPLIT and o.arg[1] is AxisType.THREAD]
  assert len(thread_splits(softmax(64, 4096))) == 1  # tasks of rows, each with its max and sum loops
  assert thread_splits(softmax(1, 1 << 18)) == []    # tasks of the output loop would each redo the fused max and sum


def test_print_after_optimize_gemm_and_softmax(tmp_path):
  lines = _print_after_optimize(tmp_path, program([gemm(256, 64, 128), softmax(64, 100)]))
  assert lines == [
    "# *** IR after optimize: p__gemm_k0 ***", "# axes: t16 u8 g32 u8 R32 r2 L64 u8",  # L64 u8: the copy of b's block (STAGE)
    "# opts: SPLIT(1,8,u),SPLIT(0,8,u),SPLIT(4,2,r),SWAP(0,2),SPLIT(0,16,t,top),STAGE",
    "# *** IR after optimize: p__softmax_k0 ***", "# axes: t4 u16 g25 u4 R100 R50 r2",  # 16 rows x 4 lanes: 16 SSE registers
    "# opts: SPLIT(1,4,u),SPLIT(0,16,u),SPLIT(5,2,r),SPLIT(0,4,t,top)"]


def test_opts_pin_a_kernel_and_unknown_kernels_are_errors(tmp_path, capsys):
  lines = _print_after_optimize(tmp_path, gemm(8, 4, 8).text(), "p__gemm_k0:SPLIT(1,2,u),SWAP(0,1)")
  assert lines[1:] == ["# axes: g4 g8 u2 R4", "# opts: SPLIT(1,2,u),SWAP(0,1)"]
  assert _print_after_optimize(tmp_path, gemm(8, 4, 8).text(), "p__gemm_k0:")[1:] == ["# axes: g8 g8 R4", "# opts: (none)"]
  from click.testing import CliRunner

  from uopc.cli import cli
  res = CliRunner().invoke(cli, ["build", str(tmp_path / "p.uop"), "-o", str(tmp_path / "o"), "--opts", "p__nope_k0:SWAP(0,1)"])
  assert res.exit_code == 1 and "--opts names kernel p__nope_k0, which this build does not have" in res.output
  res = CliRunner().invoke(cli, ["build", str(tmp_path / "p.uop"), "-o", str(tmp_path / "o"), "--opts", "p__gemm_k0:SPLIT(0,3,u)"])
  assert res.exit_code == 1 and "kernel p__gemm_k0: cannot apply SPLIT(0,3,u): 3 does not divide the size 8 of axis 0" in res.output


# ---- randomised equivalence ---------------------------------------------------------------------------------

SPLIT_TYPES = (AxisType.UPCAST, AxisType.UNROLL, AxisType.THREAD, AxisType.LOCAL)


@st.composite
def opt_sequences(draw, kernel):
  """A random sequence of opts that apply to `kernel` (illegal draws are dropped)."""
  opts = []
  for _ in range(draw(st.integers(0, 4))):
    axes = len(kernel_axes(kernel))
    if not axes: break
    kind = draw(st.sampled_from(("split", "split", "split", "padto", "swap")))
    if kind == "split":
      t = draw(st.sampled_from(SPLIT_TYPES))
      opt = Opt(OptOp.SPLIT, draw(st.integers(0, axes - 1)), (draw(st.sampled_from((2, 3, 4, 8))), t, t is AxisType.THREAD))
    elif kind == "padto": opt = Opt(OptOp.PADTO, draw(st.integers(0, axes - 1)), draw(st.sampled_from((2, 4, 8))))
    else: opt = Opt(OptOp.SWAP, draw(st.integers(0, axes - 1)), draw(st.integers(0, axes - 1)))
    try:
      kernel = apply_opt(kernel, opt, C, first=not opts)
    except OptError:
      continue
    opts.append(opt)
  return tuple(opts)


def equivalence_programs(a: int, b: int, c: int) -> list[Func]:
  return [elementwise(a, b), reduction(a, b, "ADD", 1), reduction(a, b, "MAX", 0), gemm(a, b, c), softmax(a, c), padded(a, b)]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(dims=st.tuples(*[st.sampled_from((1, 2, 3, 4, 6, 8, 12, 16)) for _ in range(3)]), data=st.data())
def test_random_opts_compute_what_the_unoptimised_kernels_do(tmp_path_factory, dims, data):
  funcs = equivalence_programs(*dims)
  text = program(funcs)
  kernels = kernels_of(text)
  schedule = {name: data.draw(opt_sequences(k), label=name) for name, k in kernels.items()}
  tmp = tmp_path_factory.mktemp("eq")
  plain, optimised = build_lib(tmp, text, {name: () for name in kernels}, "plain"), build_lib(tmp, text, schedule, "opt")
  for i, f in enumerate(funcs):
    inputs = random_inputs(f, i)
    want, got = run_func(plain, f, inputs), run_func(optimised, f, inputs)
    for name in want: np.testing.assert_array_equal(got[name], want[name], err_msg=f"{f.name}: {schedule}")


def test_heuristic_builds_compute_what_the_unoptimised_kernels_do(tmp_path):
  funcs = [f for dims in ((64, 48, 32), (5, 7, 9)) for f in equivalence_programs(*dims)]
  for i, chunk in enumerate((funcs[:6], funcs[6:])):
    text = program(chunk)
    plain, heuristic = build_lib(tmp_path, text, {k: () for k in kernels_of(text)}, f"plain{i}"), build_lib(tmp_path, text, None, f"h{i}")
    for j, f in enumerate(chunk):
      inputs = random_inputs(f, j)
      want, got = run_func(plain, f, inputs), run_func(heuristic, f, inputs)
      for name in want: np.testing.assert_array_equal(got[name], want[name], err_msg=f.name)


def test_every_heuristic_opt_is_legal_on_many_shapes():
  for a, b, c in itertools.product((1, 3, 16, 96), (1, 5, 64), (2, 128)):
    for name, k in kernels_of(program(equivalence_programs(a, b, c))).items():
      from uopc.stages.optimize import heuristic_opts
      for caps in (C, GPU, target_caps("llvm")):
        apply_opts(type_axes(k, caps), heuristic_opts(type_axes(k, caps), caps), caps, name)


def test_elementwise_transcendentals_get_eight_registers_of_lanes():
  """A transcendental is a chain of ~30 dependent ops per element on CPUs: 8 registers' worth of lanes
  (their copies interleaved by Linearize); a short elementwise body keeps 2 registers' worth."""
  text = """func f {
  %o = PARAM([4, 1024]) {(1, "o")} : f32
  %x = PARAM([4, 1024]) {(0, "x")} : f32
  %e = EXP2(%x)
  %s = STORE(%o, %e)
  SINK(%s)
}
"""
  for caps in (target_caps("c", 16), target_caps("c", 32), target_caps("c", 64)):
    for program, registers in ((text, 8), (text.replace("EXP2(%x)", "ADD(%x, %x)"), 2)):
      kernel = next(iter(kernels_of(program, caps).values()))
      lanes = [o.arg[0] for o in heuristic_opts(kernel, caps) if o.op is OptOp.SPLIT and o.arg[1] is AxisType.UPCAST]
      assert lanes == [registers * caps.vector_width], (caps.vector_width, program)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_padto_divides_by_one_in_masked_iterations(tmp_path, target):
  """The sum of x // y over 1001 elements, its reduce axis padded to 1008: the masked iterations read x
  and y as 0 (gated loads), so they add 0 // 1 = 0, not 0 // 0 (undefined: it traps on a CPU). Run
  natively in a forked child."""
  from test_differential import in_child
  from uopc.run import call_entry, entry_arguments
  from uopc.frontend import load_module
  text = ('func q {\n  %x = PARAM([1001]) {(0, "x")} : i32\n  %y = PARAM([1001]) {(1, "y")} : i32\n  %d = IDIV(%x, %y)\n'
          '  %s = REDUCE(%d) {(ADD, (0,))}\n  %out = PARAM([1]) {(2, "out")} : i32\n  STORE(%out, %s)\n}\n')
  (tmp_path / "q.uop").write_text(text)
  options = BuildOptions(target, tmp_path / "b", ("so", "header"), name="prog", schedule=parse_schedule(["prog__q_k0:PADTO(0,8)"]),
                         opt_level=0)  # -O0: the division is not sunk into the gated accumulator update, as -O3 does
  so = next(p for p in build(tmp_path / "q.uop", options) if p.suffix == ".so")
  rng = np.random.default_rng(0)
  x, y = rng.integers(-1000, 1000, 1001).astype(np.int32), rng.choice([-7, -3, -1, 1, 2, 5, 9], 1001).astype(np.int32)
  def run():
    arrays = {"x": x, "y": y, "out": np.zeros(1, np.int32)}
    call_entry(ctypes.CDLL(str(so)), "prog", "q", entry_arguments(load_module(str(tmp_path / "q.uop")).entry("q")), arrays, {})
    assert int(arrays["out"][0]) == int(np.trunc(x / y).astype(np.int32).sum())
  assert in_child(run) is None
