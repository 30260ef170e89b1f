"""Integer division of a vector by one constant in every lane (uopc/stages/isel.py `_vector_div`): on the C targets
a vector's `/` and `%` went lane by lane through the wrapping helpers; lanes of 32 bits or fewer now divide by
multiply-high and shift as vectors (FLOORDIV/FLOORMOD through their truncating forms and a sign correction).
Every result against Python's integers over edge and random dividends of each type, on c and llvm and in the
emulator with 64-byte vectors; the vectorised C kernel calls no division helper."""
from __future__ import annotations

import numpy as np
import pytest

from uopc.driver import BuildOptions, build
from uopc.run import run_file

N = 4096
OPS = {"IDIV": lambda a, d: _trunc_div(a, d), "MOD": lambda a, d: a - d * _trunc_div(a, d),
       "FLOORDIV": lambda a, d: a // d, "FLOORMOD": lambda a, d: a % d}


def _trunc_div(a: int, d: int) -> int: return -(-a // d) if (a < 0) != (d < 0) else a // d


def _program(dt: str, ops: list[tuple[str, int]]) -> str:
  lines = [f'  %a = PARAM([{N}]) {{(0, "a")}} : {dt}']
  for i, (op, d) in enumerate(ops):
    lines += [f'  %out{i} = PARAM([{N}]) {{({i + 1}, "out{i}")}} : {dt}', f"  %d{i} = CONST {{{d}}} : {dt}",
              f"  %r{i} = {op}(%a, %d{i})", f"  STORE(%out{i}, %r{i})"]
  return "func vdiv {\n" + "\n".join(lines) + "\n}\n"


CASES = [("i32", np.int32, [("FLOORMOD", 7), ("FLOORDIV", -5), ("IDIV", 3), ("MOD", 1000), ("FLOORMOD", -641), ("IDIV", -2**31)]),
         ("i16", np.int16, [("FLOORMOD", 7), ("FLOORDIV", 10), ("MOD", -3)]),
         ("u32", np.uint32, [("FLOORMOD", 7), ("IDIV", 641), ("MOD", 2**32 - 5)]),
         ("u8", np.uint8, [("IDIV", 3), ("MOD", 10)])]


def _dividends(npdt) -> np.ndarray:
  info = np.iinfo(npdt)
  edges = [info.min, info.min + 1, -1, 0, 1, info.max, info.max - 1, 6, 7, 8, -6, -7, -8]
  edges = [e for e in edges if info.min <= e <= info.max]
  rng = np.random.default_rng(11)
  rest = rng.integers(info.min, info.max, N - len(edges), dtype=np.int64, endpoint=True)
  return np.concatenate([np.array(edges, np.int64), rest]).astype(npdt)


@pytest.mark.parametrize("target,emulated,vector_bytes", [("c", False, None), ("llvm", False, None), ("c", True, 64)],
                         ids=["c", "llvm", "c-emulated-64-byte-vectors"])
@pytest.mark.parametrize("dt,npdt,ops", CASES, ids=[c[0] for c in CASES])
def test_vector_division_by_a_constant_is_exact(tmp_path, target, emulated, vector_bytes, dt, npdt, ops):
  path = tmp_path / "vdiv.uop"
  path.write_text(_program(dt, ops))
  a = _dividends(npdt)
  got = run_file(path, target=target, inputs={"a": a}, emulated=emulated, vector_bytes=vector_bytes).arrays
  bits = np.iinfo(npdt).bits
  for i, (op, d) in enumerate(ops):
    want = [OPS[op](int(x), d) % (1 << bits) for x in a]  # wraps as the type does (INT_MIN / -1)
    assert [int(v) % (1 << bits) for v in got[f"out{i}"]] == want, f"{op} by {d} ({dt}, {target})"


def test_the_vectorised_kernel_calls_no_division_helper(tmp_path):
  path = tmp_path / "vdiv.uop"
  path.write_text(_program("i32", CASES[0][2]))
  build(path, BuildOptions("c", tmp_path / "out", cpu="native", emit=("source",)))
  kernel = (tmp_path / "out" / "vdiv.c").read_text().split("void vdiv__vdiv_k0", 1)[1]
  assert "uopc_int32x" in kernel and "uopc_floormod_" not in kernel and "uopc_idiv_" not in kernel and "uopc_mod_" not in kernel
