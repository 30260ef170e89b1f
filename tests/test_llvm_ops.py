"""Per op x per dtype numeric tests of `-t llvm`: the C target's case table (tests/test_c_ops.py: the
same kernels, inputs and numpy / ml_dtypes / hand-computed expectations) rendered to LLVM IR, compiled
by llvmlite for the host, linked with the C launcher into one library and run through ctypes.

Seed 000 defines CMPGE as CMPNE(CMPLT(a, b), 1) and CMPLE as CMPNE(CMPLT(b, a), 1), which are true
when an operand is NaN (unlike numpy's >= and <=); `seed_comparisons` derives the expectation of
their float cases from that definition, whatever the table says (the GPU targets' tests use it too).
"""
from __future__ import annotations

import ctypes
from dataclasses import replace

import numpy as np
import pytest

from test_c_ops import CASES, NP, mismatches
from uopc.dtype import dtypes
from uopc.launcher import EntryKernels, c_identifier, kernel_name
from uopc.ops import Ops
from uopc.stages.linearize import linearize
from uopc.targets.llvm.host import build_artifacts
from uopc.targets.llvm.render import render_kernel

LIB = "llvmops"


def seed_comparisons(case):
  """The float CMPGE/CMPLE cases with the expectation of seed 000's decomposition: NOT of a CMPLT."""
  op = case.sink.src[0].src[0].src[1]
  if op.op not in (Ops.CMPGE, Ops.CMPLE) or not op.src[0].dtype.is_float(): return case
  a, b = (x.astype(np.float64) for x in case.inputs)
  expected = ~(a < b) if op.op is Ops.CMPGE else ~(b < a)
  return replace(case, expected=expected.astype(NP[dtypes.bool]))


@pytest.fixture(scope="module")
def library(tmp_path_factory):
  entries = [EntryKernels(c.name, (render_kernel(linearize(c.sink), kernel_name(c_identifier(LIB), c.name, 0)),))
             for c in CASES.values()]
  out = tmp_path_factory.mktemp("llvm_ops")
  return ctypes.CDLL(str(build_artifacts(out, LIB, entries)["so"]))


def run_case(lib, case) -> np.ndarray:
  out = np.zeros(len(case.expected), case.expected.dtype)
  args = [out, *(np.ascontiguousarray(x).copy() for x in case.inputs)]
  fn = getattr(lib, f"{LIB}_{case.name}")
  fn.argtypes = [ctypes.c_void_p] * len(args)
  assert fn(*(a.ctypes.data for a in args)) == 0
  return out


def test_every_op_and_dtype_matches_numpy(library):
  failures = []
  for case in map(seed_comparisons, CASES.values()):
    got = run_case(library, case)
    if bad := mismatches(case, got):
      i = bad[0]
      failures.append(f"{case.name}: {len(bad)} wrong, e.g. inputs {[x[i] for x in case.inputs]} -> {got[i]!r}, expected {case.expected[i]!r}")
  assert not failures, "\n".join(failures)


def test_cmpge_is_not_cmplt_on_nan(library):
  """Seed 000: CMPGE(a, b) = NOT(a < b), so NaN >= 1 is true; CMPLE likewise."""
  case = seed_comparisons(CASES["k_cmpge_float32"])
  got = run_case(library, case)
  nan_rows = np.isnan(case.inputs[0].astype(np.float64)) | np.isnan(case.inputs[1].astype(np.float64))
  assert nan_rows.any() and got[nan_rows].all()
