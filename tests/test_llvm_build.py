"""`uopc build -t llvm` end to end, on the C target's own end-to-end cases: the seeds' programs linked
into a C program give the results the seeds state (tests/test_build.py's table), and the tensor
programs at many shapes match numpy (tests/test_tensor_programs.py's table); plus the artifacts and a
byte-identical rebuild."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from test_build import SEED_CASES, entry_name, run_c, uopc
from test_tensor_programs import CASES, NP, random_inputs
from uopc.driver import BuildOptions, build


@pytest.mark.parametrize("case", sorted(SEED_CASES))
def test_seed_programs_build_and_run(tmp_path, case):
  listing, decls, call, show, expected = SEED_CASES[case]
  src = tmp_path / f"{case}.uop"
  src.write_text(listing)
  out = tmp_path / "out"
  r = uopc(src, "-t", "llvm", "-o", out)
  assert r.exit_code == 0, r.output
  assert sorted(p.name for p in out.iterdir()) == sorted([f"{case}.ll", f"{case}.o", f"{case}.c", f"lib{case}.so", f"{case}.h"])
  body = f'  {decls}\n  int rc = {case}_{entry_name(src)}({call});\n  if (rc != UOPC_OK) return 10 + rc;\n  {show}'
  assert run_c(tmp_path, out, case, body) == expected


def build_and_run(f, inputs: list[np.ndarray], tmp_path) -> np.ndarray:
  src = tmp_path / f"{f.name}.uop"
  src.write_text(f.text())
  build(src, BuildOptions(target="llvm", out_dir=tmp_path, opt_level=1))
  lib = ctypes.CDLL(str(tmp_path / f"lib{f.name}.so"))
  _, shape, dt, _ = next(a for a in f.args if a[3])
  out = np.zeros(shape, NP[dt])
  it = iter(inputs)
  bufs = [out if a[3] else np.ascontiguousarray(next(it)) for a in f.args]
  assert getattr(lib, f"{f.name}_{f.name}")(*[b.ctypes.data_as(ctypes.c_void_p) for b in bufs]) == 0
  return out


@pytest.mark.parametrize("builder,shape,formula", CASES, ids=[f"{c[0].__name__}{list(c[1])}" for c in CASES])
def test_tensor_programs_match_numpy(builder, shape, formula, tmp_path):
  f = builder(*shape)
  inputs = random_inputs(f, np.random.default_rng(sum(shape)))
  got = build_and_run(f, inputs, tmp_path)
  want = formula(*[i.astype(np.float64) if i.dtype == np.float32 else i for i in inputs])
  if got.dtype == np.int32: np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_two_builds_are_byte_identical(tmp_path):
  src = SEED_CASES["seed002_add_lidx"][0]
  (tmp_path / "p.uop").write_text(src)
  for run in ("a", "b"): assert uopc(tmp_path / "p.uop", "-t", "llvm", "-o", tmp_path / run).exit_code == 0
  for p in (tmp_path / "a").iterdir(): assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name
