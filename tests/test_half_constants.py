"""A float16/bfloat16 CONST means its dtype's value: `CONST {0.7978845608} : bf16` is 0.796875, whatever
digits the text (or tinygrad's exporter, which writes a weak float's Python value) gives. Instruction
Selection computes half-precision ops in float32 through CASTs of their operands, and folding such a CAST
of a constant kept the unrounded digits: GELU, tanh, sigmoid and log in bfloat16 came out one ULP off in
10-40% of their elements. Checked on every target against ml_dtypes' arithmetic (one rounding per op)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from uopc.dtype import dtypes
from uopc.run import run_file
from uopc.symbolic import exec_cast

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
CONSTANTS = [0.7978845608, 1.4426950408889634, 0.6931471805599453, 0.044715, 1e-3, 3.14159265, 300.7]


def program(dt: str, n: int) -> str:
  lines = [f'  %x = PARAM([{n}]) {{(0, "x")}} : {dt}']
  for i, c in enumerate(CONSTANTS):
    lines += [f'  %m{i} = PARAM([{n}]) {{({2 * i + 1}, "m{i}")}} : {dt}', f'  %w{i} = PARAM([{n}]) {{({2 * i + 2}, "w{i}")}} : f32',
              f"  %c{i} = CONST {{{c!r}}} : {dt}", f"  %r{i} = RESHAPE(%c{i}, [1])", f"  %b{i} = EXPAND(%r{i}, [{n}])",
              f"  %p{i} = MUL(%x, %b{i})", f"  STORE(%m{i}, %p{i})",  # a half product: computed in float32, rounded once
              f"  %xf{i} = CAST(%x) : f32", f"  %bf{i} = CAST(%b{i}) : f32",  # the constant widened: exactly its half value
              f"  %s{i} = ADD(%xf{i}, %bf{i})", f"  STORE(%w{i}, %s{i})"]
  return "func hc {\n" + "\n".join(lines) + "\n}\n"


def test_folding_a_cast_of_a_half_constant_rounds_it_to_its_dtype_first():
  for c in CONSTANTS:
    assert exec_cast(c, dtypes.bfloat16, dtypes.float32) == float(ml_dtypes.bfloat16(c))
    assert exec_cast(c, dtypes.float16, dtypes.float32) == float(np.float16(c))
  assert exec_cast(2.9999, dtypes.float16, dtypes.int32) == 3  # float16(2.9999) is 3.0


@pytest.mark.parametrize("target,emulated", [("c", False), ("llvm", False), ("cuda", True), ("amd", True), ("metal", True)])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_constants_are_their_dtypes_values_on_every_target(tmp_path, target, emulated, dt):
  n = 301
  path = tmp_path / "hc.uop"
  path.write_text(program(dt, n))
  x = (np.random.default_rng(5).standard_normal(n) * 3).astype(NP[dt])
  arrays = run_file(path, target=target, inputs={"x": x}, emulated=emulated).arrays
  for i, c in enumerate(CONSTANTS):
    k = NP[dt](c)
    with np.errstate(over="ignore"):
      want_mul = (x.astype(np.float32) * np.float32(k)).astype(NP[dt])  # exact in float32, rounded once
    np.testing.assert_array_equal(arrays[f"m{i}"].astype(np.float32), want_mul.astype(np.float32), err_msg=f"{c} * x")
    np.testing.assert_array_equal(arrays[f"w{i}"], x.astype(np.float32) + np.float32(k), err_msg=f"x + widened {c}")
