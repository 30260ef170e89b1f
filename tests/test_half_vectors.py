"""float16 arithmetic on CPUs, whole vectors: the C target widens float16 vectors to float32 with F16C
(AVX-512's conversions for 16 lanes), computes in float and rounds back once. Every lane must be what
numpy's float16 arithmetic gives (one correctly rounded result per op), on every CPU level this machine
runs, with gcc and clang, special values included (infinities, NaN, subnormals, overflow, -0.0)."""
from __future__ import annotations

import ctypes
import io
import os

import ml_dtypes
import numpy as np
import pytest

from c_harness import have
from test_cpu_levels import RUNNABLE
from test_tensor_programs import Func
from uopc.driver import BuildOptions, build
from uopc.dtype import dtypes
from uopc.frontend import parse_source
from uopc.ops import AxisType, Ops
from uopc.stages.callify import callify
from uopc.stages.rangeify import rangeify

LIB = "hv"
R, C = 37, 53  # no vector width divides either: every build has whole vectors and tails


def half_ops(dt: str = "f16") -> Func:
  f = Func(f"{dt}_ops")
  x, y = f.param("x", (R, C), dt), f.param("y", (R, C), dt)
  outs = {name: f.param(name, (R, C), dt, out=True) for name in ("add", "sub", "mul", "div", "neg")}
  wide = f.param("wide", (R, C), "f32", out=True)
  narrow = f.param("narrow", (R, C), dt, out=True)
  for name, op in (("add", "ADD"), ("sub", "SUB"), ("mul", "MUL"), ("div", "DIV")): f.store(outs[name], f.op(op, x, y))
  f.store(outs["neg"], f.op("NEG", x))
  f.store(wide, f.op("MUL", f.cast(x, "f32"), f.cast(y, "f32")))
  f.store(narrow, f.cast(f.op("MUL", f.cast(x, "f32"), f.const(1.75)), dt))
  return f


def half_matmul(m: int, k: int, n: int) -> Func:
  """float16 products rounded to float16, summed in float32 (tinygrad's `a.matmul(b, dtype=float)`)."""
  f = Func("half_mm")
  a, b = f.param("a", (m, k), "f16"), f.param("b", (k, n), "f16")
  out = f.param("out", (m, n), "f32", out=True)
  prod = f.op("MUL", f.expand(f.reshape(a, (m, k, 1)), (m, k, n)), f.expand(f.reshape(b, (1, k, n)), (m, k, n)))
  f.store(out, f.reshape(f.let(f"REDUCE({f.cast(prod, 'f32')}) {{(ADD, (1,))}}"), (m, n)))
  return f


def special_halves(rng, shape, dt=np.float16) -> np.ndarray:
  big = 6e4 if dt is np.float16 else 3e38
  with np.errstate(over="ignore"):  # some products overflow to infinity: wanted
    x = (rng.standard_normal(shape) * rng.choice([1e-6, 1e-3, 1, 300, big], shape)).astype(dt)
  flat = x.reshape(-1)
  tiny, top = (6e-8, 65504) if dt is np.float16 else (1e-40, 3.38e38)
  specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, tiny, -tiny, top, -top, tiny * 2], np.float64).astype(dt)
  flat[rng.choice(flat.size, 60, replace=False)] = rng.choice(specials, 60)
  return x


def build_and_call(tmp_path, f: Func, inputs: dict, cpu: str, cc: str) -> dict[str, np.ndarray]:
  tag = f"{f.name}_{cpu}_{cc}"
  (tmp_path / f"{tag}.uop").write_text(f.text())
  out_dir = tmp_path / tag
  build(tmp_path / f"{tag}.uop", BuildOptions("c", out_dir, name=LIB, print_out=io.StringIO(), cpu=cpu,
                                              env={**os.environ, "CC": cc, "CFLAGS": "-Wall -Wextra -Werror"}))
  lib = ctypes.CDLL(str(out_dir / f"lib{LIB}.so"))
  np_dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
  bufs = {name: (np.full(shape, np.nan, np_dt[dt]) if out else inputs[name].copy()) for name, shape, dt, out in f.args}
  assert getattr(lib, f"{LIB}_{f.name}")(*[bufs[name].ctypes.data_as(ctypes.c_void_p) for name, *_ in f.args]) == 0
  return {name: bufs[name] for name, _, _, out in f.args if out}


def assert_same_values(got: np.ndarray, want: np.ndarray, what: str) -> None:
  """Equal lane for lane: NaN where numpy has NaN (any payload), else the same bits (the sign of zero too)."""
  nan = np.isnan(want)
  assert np.array_equal(np.isnan(got), nan), what
  bits = {2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
  mismatch = (got.view(bits) != want.view(bits)) & ~nan
  assert not mismatch.any(), f"{what}: {mismatch.sum()} lanes differ, e.g. got {got[mismatch][:4]} want {want[mismatch][:4]}"


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("cc", [c for c in ("gcc", "clang") if have(c)])
@pytest.mark.parametrize("cpu", ["portable", *RUNNABLE])
def test_half_arithmetic_is_numpys_on_every_cpu_level(tmp_path, cpu, cc, dt):
  rng = np.random.default_rng(5)
  npdt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}[dt]
  x, y = special_halves(rng, (R, C), npdt), special_halves(rng, (R, C), npdt)
  got = build_and_call(tmp_path, half_ops(dt), {"x": x, "y": y}, cpu, cc)
  with np.errstate(all="ignore"):
    want = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y, "neg": -x,
            "wide": x.astype(np.float32) * y.astype(np.float32),
            "narrow": (x.astype(np.float32) * np.float32(1.75)).astype(npdt)}
  for name, w in want.items(): assert_same_values(got[name], w, f"{name} ({cpu}, {cc})")


@pytest.mark.parametrize("cpu", ["portable", *RUNNABLE])
def test_half_matmul_rounds_each_product_to_half(tmp_path, cpu):
  rng = np.random.default_rng(6)
  a, b = rng.standard_normal((24, 40)).astype(np.float16), rng.standard_normal((40, 48)).astype(np.float16)
  got = build_and_call(tmp_path, half_matmul(24, 40, 48), {"a": a, "b": b}, cpu, "cc")["out"]
  products = (a[:, :, None] * b[None, :, :]).astype(np.float64)  # each product rounded to half, then exact sums
  np.testing.assert_allclose(got, products.sum(1), rtol=1e-5, atol=1e-5)
  in_order = np.zeros((24, 48), np.float32)
  for k in range(40): in_order += (a[:, k, None] * b[None, k, :]).astype(np.float32)
  assert_same_values(got, in_order, f"half_matmul ({cpu})")  # the schedule adds along k in order: bit for bit


def _kernels(text: str, cpu: bool) -> list:
  return list(rangeify(callify(parse_source(text, "t.uop").entries[0].sink), cpu=cpu).kernels)


def _loads(kernel) -> set:
  """The dtypes a kernel loads from its buffers."""
  return {u.dtype for u in kernel.toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM}


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_a_half_gemm_converts_each_operand_once_on_cpus(dt):
  """On CPU targets each operand of a half-precision gemm is widened to float32 once, by a kernel of its
  own without a reduction; the gemm loads floats. GPU targets keep one kernel (the tensor cores take
  the 16-bit operands); an elementwise program keeps one kernel on CPUs too."""
  text = half_matmul(24, 40, 48).text().replace(": f16", f": {dt}")
  *widen, gemm = _kernels(text, cpu=True)
  half = {"f16": dtypes.float16, "bf16": dtypes.bfloat16}[dt]
  assert len(widen) == 2 and all(_loads(k) == {half} for k in widen) and _loads(gemm) == {dtypes.float32}
  assert not any(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for k in widen for u in k.toposort())
  assert len(_kernels(text, cpu=False)) == 1
  ew = Func("ew")
  x, y, out = ew.param("x", (R, C), dt), ew.param("y", (R, C), dt), ew.param("out", (R, C), dt, out=True)
  ew.store(out, ew.op("MUL", ew.op("ADD", x, y), x))
  assert len(_kernels(ew.text(), cpu=True)) == 1
