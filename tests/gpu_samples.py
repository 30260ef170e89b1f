"""What every GPU target's tests share: calling an entry of a built library on device copies of numpy
arrays (`call`), and the sample comparison (each sample's entries run on the C target's library, on
random inputs, give the expected buffers that the GPU library must reproduce)."""
from __future__ import annotations

import ctypes
import pathlib
from dataclasses import dataclass

import numpy as np

from test_c_ops import NP
from uopc.driver import BuildOptions, build
from uopc.frontend import load_module
from uopc.launcher import EntryKernels, c_identifier, entry_args
from uopc.pipeline import compile_module

ROOT = pathlib.Path(__file__).resolve().parent.parent
# seed 001's SPECIAL example stores data1[g] + data2[g] from all 10 threads into data0[0]: which thread's
# value lands is unspecified on a GPU (on a CPU the loop's last iteration wins), so no result can be compared
RACY_SAMPLES = {"seed001_special.uop"}
SAMPLES = sorted(p.name for p in (ROOT / "samples").glob("*.uop") if p.name not in RACY_SAMPLES)


def call(device, lib: ctypes.CDLL, lib_name: str, entry: EntryKernels, arrays: list[np.ndarray],
         variables: dict[str, int] | None = None) -> list[np.ndarray]:
  """Run `entry` on device copies of `arrays` (its buffers by slot) and return them as they come back.
  `device` uploads, downloads and frees (the CUDA driver's or HIP's test wrapper); the last argument,
  the stream, is the default one."""
  args = entry_args(entry)
  bufs = [a for a in args if a.kind == "buffer"]
  assert len(bufs) == len(arrays)
  ptrs = [device.upload(a) for a in arrays]
  values = [ctypes.c_void_p(p) for p in ptrs] + [ctypes.c_int64(variables[a.key]) for a in args if a.kind == "var"]
  fn = getattr(lib, f"{c_identifier(lib_name)}_{entry.name}")
  fn.argtypes = [ctypes.c_void_p] * len(bufs) + [ctypes.c_int64] * (len(args) - len(bufs)) + [ctypes.c_void_p]
  status = fn(*values, None)
  strerror = getattr(lib, f"{c_identifier(lib_name)}_strerror")
  strerror.restype = ctypes.c_char_p
  assert status == 0, strerror(status).decode()
  results = [device.download(p, a) for p, a in zip(ptrs, arrays)]
  for p in ptrs: device.free(p)
  return results


@dataclass
class SampleRun:
  entry: EntryKernels
  arrays: list[np.ndarray]        # the inputs, one array per buffer argument
  variables: dict[str, int]       # the DEFINE_VAR values
  expected: list[np.ndarray]      # the buffers after the C target's run


def _inputs(args, rng) -> list[np.ndarray]:
  """Arrays for the buffers: floats normal, integers 0 or 1 (safe as indices), 4096 elements when the size is not known."""
  out = []
  for a in (a for a in args if a.kind == "buffer"):
    n = int(np.prod(a.shape)) if a.shape else 4096
    t = NP[a.dtype]
    out.append(rng.standard_normal(n).astype(t) if a.dtype.is_float() else rng.integers(0, 2, n).astype(t))
  return out


def c_target_runs(sample: str, out_dir: pathlib.Path) -> list[SampleRun]:
  """Every entry of `sample` run through `uopc build -t c`'s library on seeded random inputs."""
  path = ROOT / "samples" / sample
  c_paths = build(path, BuildOptions(target="c", out_dir=out_dir))
  c_lib = ctypes.CDLL(str(next(p for p in c_paths if p.suffix == ".so")))
  rng, runs = np.random.default_rng(11), []
  for entry in compile_module(load_module(str(path)), "c", path.stem):
    args = entry_args(entry)
    arrays = _inputs(args, rng)
    variables = {a.key: min(a.vmax, max(a.vmin, 16)) for a in args if a.kind == "var"}
    expected = [x.copy() for x in arrays]
    fn = getattr(c_lib, f"{c_identifier(path.stem)}_{entry.name}")
    fn.argtypes = [ctypes.c_void_p] * len(arrays) + [ctypes.c_int64] * len(variables)
    assert fn(*(x.ctypes.data for x in expected), *variables.values()) == 0
    runs.append(SampleRun(entry, arrays, variables, expected))
  return runs


def assert_matches(run: SampleRun, got: list[np.ndarray]) -> None:
  for a, g, e in zip((a for a in entry_args(run.entry) if a.kind == "buffer"), got, run.expected):
    np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-5, atol=1e-6, err_msg=f"{run.entry.name}: {a.name}")
