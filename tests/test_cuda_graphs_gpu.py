"""CUDA graph replay of multi-kernel entries on a real GPU (marker `gpu`; `make test-gpu`;
uopc/targets/cuda/graphs.py). Every sample entry that replays graphs is called several times on the same
device buffers, its inputs (and outputs) written anew before each call: the direct first call, the capturing
second and the replays must give bit for bit what a direct call on new buffers gives for the inputs of
that call (the kernels' results themselves are checked against the C target and tinygrad elsewhere:
tests/test_cuda_gpu.py, tests/bench/bench_models_cuda.py). A call on another stream
and a call captured into the application's own graph (replayed twice) must give the C target's results. Skips cleanly without
libcuda.so.1 or a device; the launch and capture protocol itself is tested without a GPU
(tests/test_cuda_graphs.py)."""
from __future__ import annotations

import ctypes
import pathlib

import numpy as np
import pytest

from gpu_samples import SAMPLES, assert_matches, c_target_runs
from test_cuda_gpu import gpu  # noqa: F401 - the fixture
from uopc.driver import BuildOptions, build
from uopc.frontend import load_module
from uopc.launcher import c_identifier, entry_args
from uopc.pipeline import compile_module
from uopc.targets.cuda.graphs import uses_graph

pytestmark = pytest.mark.gpu
ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = sorted(f"models/{p.name}" for p in (ROOT / "samples" / "models").glob("*.uop"))


def _write(gpu, ptr: int, host: np.ndarray) -> None:
  if host.nbytes:
    gpu.check(gpu.cu.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), np.ascontiguousarray(host).ctypes.data_as(ctypes.c_void_p),
                                     ctypes.c_size_t(host.nbytes)), "cuMemcpyHtoD")


def _graphed(sample: str, tmp_path: pathlib.Path):
  """The C target's runs of the sample's graphed entries, the CUDA library and its prefix."""
  path = ROOT / "samples" / sample
  cuda = {e.name: e for e in compile_module(load_module(str(path)), "cuda", path.stem)}
  if not any(map(uses_graph, cuda.values())): pytest.skip("no entry of several launches")
  runs = [r for r in c_target_runs(sample, tmp_path / "c") if uses_graph(cuda[r.entry.name])]
  so = next(p for p in build(path, BuildOptions(target="cuda", out_dir=tmp_path / "cuda")) if p.suffix == ".so")
  return runs, ctypes.CDLL(str(so)), c_identifier(path.stem)


def _entry(lib, prefix: str, run):
  args = entry_args(run.entry)
  fn = getattr(lib, f"{prefix}_{run.entry.name}")
  n = sum(a.kind == "buffer" for a in args)
  fn.argtypes = [ctypes.c_void_p] * n + [ctypes.c_int64] * (len(args) - n) + [ctypes.c_void_p]
  return fn, [run.variables[a.key] for a in args if a.kind == "var"]


@pytest.mark.parametrize("sample", SAMPLES + MODELS)
def test_replays_match_direct_launches_on_fresh_inputs(gpu, sample, tmp_path):  # noqa: F811
  runs, lib, prefix = _graphed(sample, tmp_path)
  rng = np.random.default_rng(5)
  for run in runs:
    fn, variables = _entry(lib, prefix, run)
    ptrs, direct = [gpu.upload(a) for a in run.arrays], []
    for i in range(4):  # direct, capture and replay, replay, replay
      arrays = run.arrays if i == 0 else _fresh(run.arrays, rng)
      for p, a in zip(ptrs, arrays): _write(gpu, p, a)  # new values in the same buffers: a replay reads them
      assert fn(*ptrs, *variables, None) == 0
      got = [gpu.download(p, a) for p, a in zip(ptrs, arrays)]
      direct.append([gpu.upload(a) for a in arrays])  # new buffers (kept: their addresses stay new keys) launch directly
      assert fn(*direct[-1], *variables, None) == 0
      want = [gpu.download(p, a) for p, a in zip(direct[-1], arrays)]
      for g, w in zip(got, want): np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=f"call {i}")
    for p in ptrs + [p for ps in direct for p in ps]: gpu.free(p)


def _fresh(arrays: list[np.ndarray], rng) -> list[np.ndarray]:
  """New float values of the same distribution; integers (safe indices) kept."""
  return [rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" else a for a in arrays]


def test_another_stream_and_the_applications_own_capture(gpu, tmp_path):  # noqa: F811
  runs, lib, prefix = _graphed("models/cross_entropy.uop", tmp_path)
  (run,) = runs
  fn, variables = _entry(lib, prefix, run)
  cu, c = gpu.cu, ctypes
  stream, graph, exe = c.c_void_p(), c.c_void_p(), c.c_void_p()
  gpu.check(cu.cuStreamCreate(c.byref(stream), 1), "cuStreamCreate")
  ptrs = [gpu.upload(a) for a in run.arrays]
  for _ in range(3):  # the same arguments on the default stream, then on another: each stream its own graph
    for s in (None, stream):
      for p, a in zip(ptrs, run.arrays): _write(gpu, p, a)  # the output too: a call that did nothing would fail
      assert fn(*ptrs, *variables, s) == 0
      gpu.check(cu.cuStreamSynchronize(s), "cuStreamSynchronize")
      assert_matches(run, [gpu.download(p, a) for p, a in zip(ptrs, run.arrays)])
  gpu.check(cu.cuStreamBeginCapture_v2(stream, 0), "cuStreamBeginCapture")  # CU_STREAM_CAPTURE_MODE_GLOBAL
  status = fn(*ptrs, *variables, stream)
  gpu.check(cu.cuStreamEndCapture(stream, c.byref(graph)), "cuStreamEndCapture")
  assert status == 0
  gpu.check(cu.cuGraphInstantiateWithFlags(c.byref(exe), graph, c.c_ulonglong(0)), "cuGraphInstantiate")
  for _ in range(2):
    _write(gpu, ptrs[-1], run.arrays[-1])
    gpu.check(cu.cuGraphLaunch(exe, stream), "cuGraphLaunch")
    gpu.check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
    assert_matches(run, [gpu.download(p, a) for p, a in zip(ptrs, run.arrays)])
  for p in ptrs: gpu.free(p)
