"""NCCL in the CUDA launcher without a GPU: a fake libnccl.so.2 and a fake libcuda.so.1 (tests/fake_cuda.py,
host memory as device memory, ncclAllReduce reducing for real) loaded in a child process.

Checked: after PREFIX_nccl_init with the streams' GPUs, an allreduce entry is one ncclGroupStart/End with
one ncclAllReduce per device (its stream, its input and output arguments, count, NCCL's dtype and op
enums) and no kernel, and its result matches numpy (sum, max of int32, product of float64, on 2, 3, 4
GPUs); every stream has waited for the others' earlier work first; the current context is restored.
The composed path runs instead (kernels and copies, no NCCL call) with UOPC_NCCL=0, without
libnccl.so.2, without init, with communicators for other GPUs, and when two devices are one GPU (two
contexts of it); init then says UOPC_CUDA_ERR_NO_NCCL where NCCL is off. An NCCL error is returned as
UOPC_CUDA_ERR_NCCL + r and PREFIX_strerror gives NCCL's message. In the MLP only the collective's
launches are replaced. Teardown destroys each communicator.
"""
from __future__ import annotations

import ctypes.util
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from fake_cuda import build_fakes, call  # noqa: E402
from multi_programs import allreduce_text, collectives, tp_mlp  # noqa: E402
from test_cuda_multi_launcher import arguments  # noqa: E402

from uopc.driver import BuildOptions, build  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.pipeline import compile_module  # noqa: E402

NO_NCCL, NCCL_ERR = 104, 2000
DTYPE = {"i32": ("int32", 2), "f32": ("float32", 7), "f64": ("float64", 8)}  # NCCL's ncclDataType_t (nccl.h)
OP = {"ADD": (np.sum, 0), "MUL": (np.prod, 1), "MAX": (np.max, 2)}         # ncclSum, ncclProd, ncclMax


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
  d = tmp_path_factory.mktemp("nccl")
  out = {"fakes": build_fakes(d), "dir": d}
  for n in (2, 3, 4):
    text = allreduce_text("sum", n, 6, "ADD", "f32") + allreduce_text("max", n, 6, "MAX", "i32") + allreduce_text("prod", n, 6, "MUL", "f64")
    text += tp_mlp(n, hidden=2 * n).text() + collectives(n, 2 * n)[-1].text()
    path = d / f"ar{n}.uop"
    path.write_text(text)
    build(path, BuildOptions(target="cuda", out_dir=d / f"out{n}"))
    module = parse_source(text, str(path))
    out[n] = {"lib": d / f"out{n}" / f"libar{n}.so", "module": module, "entries": {e.name: e for e in compile_module(module, "cuda", f"ar{n}")}}
  return out


def run_allreduce(libs, n: int, entry: str, dt: str, streams: list[int], **kw):
  rng = np.random.default_rng(n)
  np_dt = DTYPE[dt][0]
  x = (rng.integers(-4, 5, n * 6) if dt == "i32" else rng.uniform(0.5, 1.5, n * 6)).astype(np_dt)
  args = [(x[j * 6:(j + 1) * 6], np_dt) for j in range(n)] + [(np.zeros(6, np_dt), np_dt) for _ in range(n)]
  return x.reshape(n, 6), call(libs["fakes"], libs[n]["lib"], f"ar{n}", entry, args, streams, **kw)


def nccl_calls(log: list) -> list:
  return [x for x in log if x[0] in ("group_start", "allreduce", "group_end")]


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("entry, dt", [("sum", "f32"), ("max", "i32"), ("prod", "f64")])
def test_an_allreduce_runs_through_nccl_when_initialized(libs, n, entry, dt):
  streams = list(range(1, n + 1))  # stream s is on GPU s
  x, got = run_allreduce(libs, n, entry, dt, streams, init=streams)
  assert (got["init"], got["num_devices"], got["status"]) == (0, n, 0), got["message"]
  log, op = got["log"], {"sum": "ADD", "max": "MAX", "prod": "MUL"}[entry]
  assert not [e for e in log if e[0] in ("launch", "copy", "alloc")]  # no kernel, no copy, no workspace: NCCL did it all
  calls = nccl_calls(log)
  assert calls[0] == ["group_start"] and calls[-1] == ["group_end"] and len(calls) == n + 2
  for k, c in enumerate(calls[1:-1]):  # rank k: its GPU and stream, its shard in, its row of out
    assert c == ["allreduce", streams[k], 6, DTYPE[dt][1], OP[op][1], streams[k], got["pointers"][k], got["pointers"][n + k]]
  before = log[:log.index(calls[0])]
  assert all(["wait", s, t] in before for s in streams for t in streams if s != t)  # after every stream's earlier work
  assert got["depth"] == 0 and got["current"] == 1  # the caller's context is current again
  want = OP[op][0](x, axis=0)
  for k in range(n): np.testing.assert_allclose(np.array(got["arrays"][n + k], DTYPE[dt][0]), want, rtol=1e-6)


def test_the_composed_path_runs_without_nccl(libs, monkeypatch):
  composed = lambda got: got["status"] == 0 and not nccl_calls(got["log"]) and [e for e in got["log"] if e[0] == "launch"]  # noqa: E731
  _, off = run_allreduce(libs, 2, "sum", "f32", [1, 2], init=[1, 2], env={"UOPC_NCCL": "0"})
  assert off["init"] == NO_NCCL and off["num_devices"] == 0 and composed(off)
  _, no_init = run_allreduce(libs, 2, "sum", "f32", [1, 2])
  assert composed(no_init)
  _, others = run_allreduce(libs, 2, "sum", "f32", [1, 2], init=[1, 3])  # communicators for other GPUs
  assert others["init"] == 0 and composed(others)
  _, more = run_allreduce(libs, 2, "sum", "f32", [1, 2], init=[1, 2, 3])  # a communicator of 3 ranks cannot run 2
  assert composed(more)
  _, one_gpu = run_allreduce(libs, 2, "sum", "f32", [1, 11], init=[1])  # two contexts of GPU 1
  assert composed(one_gpu) and [e for e in one_gpu["log"] if e[:2] == ["copy", "peer"]]
  if ctypes.util.find_library("nccl") is None:  # a machine with a real libnccl would load it
    _, missing = run_allreduce(libs, 2, "sum", "f32", [1, 2], init=[1, 2], nccl=False)
    assert missing["init"] == NO_NCCL and composed(missing)


def test_an_nccl_error_is_returned_with_its_message(libs):
  _, got = run_allreduce(libs, 2, "sum", "f32", [1, 2], init=[1, 2], env={"FAKE_NCCL_FAIL": "3"})
  assert got["status"] == NCCL_ERR + 3 and got["message"] == "fake NCCL error"
  assert nccl_calls(got["log"])[-1] == ["group_end"] and got["depth"] == 0  # the group is closed, contexts popped


def test_teardown_destroys_the_communicators(libs):
  _, got = run_allreduce(libs, 3, "sum", "f32", [1, 2, 3], init=[1, 2, 3], teardown=True)
  assert [e for e in got["log"] if e[0] == "nccl_destroy"] == [["nccl_destroy", 1], ["nccl_destroy", 2], ["nccl_destroy", 3]]


@pytest.mark.parametrize("n", [2, 3])
def test_only_the_mlp_collective_is_replaced(libs, n):
  entry = libs[n]["entries"]["tp_mlp"]
  (c,) = entry.collectives
  names, arrays = arguments(libs[n]["module"], tp_mlp(n, hidden=2 * n))
  streams = list(range(1, n + 1))
  got = call(libs["fakes"], libs[n]["lib"], f"ar{n}", "tp_mlp", [(arrays[k].ravel(), arrays[k].dtype.name) for k in names], streams, init=streams)
  assert got["status"] == 0
  log = got["log"]
  ops = [e for e in log if e[0] in ("launch", "copy", "allreduce")]
  outside = [ln for i, ln in enumerate(entry.launches) if not c.first <= i < c.end]
  assert [e[0] for e in ops] == ["launch" if ln.copy is None else "copy" for ln in entry.launches[:c.first]] + ["allreduce"] * n + \
                                ["launch" if ln.copy is None else "copy" for ln in entry.launches[c.end:]]
  assert len(outside) == len(ops) - n and all(e[2] == c.count for e in ops if e[0] == "allreduce")
  allocs = {e[2]: e for e in log if e[0] == "alloc"}  # context -> its workspace allocation
  for e in (e for e in ops if e[0] == "allreduce"):  # inputs and outputs in the workspace of their own GPU
    _, _, _, size, base = allocs[100 + e[1]]
    assert base <= e[6] < base + size and base <= e[7] < base + size and e[6] != e[7]
  composed = call(libs["fakes"], libs[n]["lib"], f"ar{n}", "tp_mlp", [(arrays[k].ravel(), arrays[k].dtype.name) for k in names], streams)
  sizes = lambda got: sorted(e[3] for e in got["log"] if e[0] == "alloc")  # noqa: E731
  assert all(a <= b for a, b in zip(sizes(got), sizes(composed))) and sizes(got) != sizes(composed)  # NCCL needs less room


def test_the_header_documents_nccl(libs):
  header = (libs["dir"] / "out2" / "ar2.h").read_text()
  for text in ("int ar2_nccl_init(int num_devices, const int* devices);", "void ar2_nccl_teardown(void);",
               "int ar2_nccl_num_devices(void);", "UOPC_NCCL is not 0", "always when two devices are one GPU",
               "#define UOPC_CUDA_ERR_NO_NCCL 104", "#define UOPC_CUDA_ERR_NCCL 2000", "one CUstream per device",
               "1 of its 1 allreduce(s) run through NCCL"):
    assert text in header, text
