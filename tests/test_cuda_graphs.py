"""CUDA graph replay of the CUDA launcher's multi-kernel entries (uopc/targets/cuda/graphs.py), without a GPU:
against the fake libcuda.so.1 of tests/fake_cuda.py, which logs every launch, capture and graph launch.
Checked: a key's first call launches directly, its second captures on the context's own non-blocking
stream (workspace allocation, every kernel, free) and replays on the call's stream, later calls replay
only; each stream has its own graph; a new key evicts the oldest of GRAPH_SLOTS; a stream the application
captures, UOPC_CUDA_GRAPHS=0 and a single-kernel entry launch directly; a refused instantiation turns
graphs off for the process with every call still launched. The GPU results of replays are checked by
tests/test_cuda_graphs_gpu.py."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from fake_cuda import build_fakes, call  # noqa: E402

from uopc.driver import BuildOptions, build  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.pipeline import compile_module  # noqa: E402
from uopc.targets.cuda.graphs import GRAPH_SLOTS, uses_graph  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
ONE_KERNEL = """func scale {
  %x = PARAM([64]) {(0, "x")} : f32
  %out = PARAM([64]) {(1, "out")} : f32
  %two = CONST {2.0} : f32
  %m = MUL(%x, %two)
  STORE(%out, %m)
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
  """cross_entropy (five kernels through a workspace) and a one-kernel entry, in one CUDA library."""
  d = tmp_path_factory.mktemp("cuda_graphs")
  path = d / "two.uop"
  path.write_text(ROOT.joinpath("samples", "models", "cross_entropy.uop").read_text() + ONE_KERNEL)
  build(path, BuildOptions(target="cuda", out_dir=d / "out"))
  entries = {e.name: e for e in compile_module(parse_source(path.read_text(), str(path)), "cuda", "two")}
  return {"dir": d, "fakes": build_fakes(d), "so": d / "out" / "libtwo.so", "source": d / "out" / "two_cuda.c", "entries": entries}


ARGS = [(np.zeros(1), "float32"), (np.zeros(1), "int32"), (np.zeros(1), "float32")]  # kernels only record: any pointer


def run(lib, calls, entry="cross_entropy", args=ARGS, **env) -> list:
  got = call(lib["fakes"], lib["so"], "two", entry, args, calls[0], nccl=False, calls=calls, env=env)
  assert got["status"] == 0, got["message"]
  return [x for x in got["log"] if x[0] not in ("pool", "pool_attr")]


def kinds(log: list) -> list[str]: return [x[0] for x in log]


def test_a_keys_second_call_captures_and_later_calls_replay(lib):
  entry = lib["entries"]["cross_entropy"]
  assert uses_graph(entry) and not uses_graph(lib["entries"]["scale"])
  log = run(lib, [[7]] * 4)
  n = len(entry.kernels)
  first, rest = log[:n + 2], log[n + 2:]
  assert kinds(first) == ["alloc", *["launch"] * n, "free"] and all(x[1] == 7 for x in first if x[0] != "launch") \
    and all(x[2] == 7 for x in first if x[0] == "launch")
  create, begin = rest[0], rest[1]
  assert create[0] == "stream_create" and create[2] == 1  # the context's own stream, non-blocking
  capture = create[1]
  assert begin == ["capture_begin", capture, 1]  # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
  captured = rest[2:2 + n + 2]
  assert kinds(captured) == ["alloc", *["launch"] * n, "free"]  # the same launches, workspace and all, on the capture stream
  assert [x[1] for x in captured if x[0] != "launch"] == [capture, capture] and all(x[2] == capture for x in captured if x[0] == "launch")
  assert [x[1] for x in captured if x[0] == "launch"] == [x[1] for x in first if x[0] == "launch"]  # the same kernels in order
  end, inst, destroy, *replays = rest[2 + n + 2:]
  assert end[0] == "capture_end" and inst == ["instantiate", inst[1], end[2]] and destroy == ["graph_destroy", end[2]]
  assert replays == [["graph_launch", inst[1], 7]] * 3  # the second call's replay, then the third's and fourth's


def test_each_stream_has_its_own_graph_and_new_keys_evict_the_oldest(lib):
  log = run(lib, [[7], [8], [7], [8], [7], [8]])
  launches = [x for x in log if x[0] == "graph_launch"]
  assert [x[2] for x in launches] == [7, 8, 7, 8] and launches[0][1] != launches[1][1]
  assert launches[2][1] == launches[0][1] and launches[3][1] == launches[1][1]
  assert sum(x[0] == "stream_create" for x in log) == 1  # one capture stream for the context
  streams = [[s] for s in range(20, 20 + GRAPH_SLOTS)]
  log = run(lib, [[7], [7], *streams, [7]])  # 7's graph, then GRAPH_SLOTS new keys: 7 is evicted and called anew
  assert kinds(log).count("exec_destroy") == 1 and kinds(log).count("instantiate") == 1
  assert kinds(log)[-1] == "free" and log[-2][2] == 7  # the last call launched directly again


@pytest.mark.parametrize("env", [{"FAKE_CAPTURING": "7"}, {"UOPC_CUDA_GRAPHS": "0"}], ids=["app-captures", "graphs-off"])
def test_direct_launches_where_graphs_must_not_be_used(lib, env):
  log = run(lib, [[7]] * 3, **env)
  n = len(lib["entries"]["cross_entropy"].kernels)
  assert kinds(log) == ["alloc", *["launch"] * n, "free"] * 3


def test_a_single_kernel_entry_launches_directly(lib):
  log = run(lib, [[7]] * 3, entry="scale", args=[(np.zeros(1), "float32")] * 2)
  assert kinds(log) == ["launch"] * 3


def test_a_refused_instantiation_turns_graphs_off_and_still_launches(lib):
  log = run(lib, [[7]] * 4, FAKE_INSTANTIATE_FAIL="801")  # CUDA_ERROR_NOT_SUPPORTED
  n = len(lib["entries"]["cross_entropy"].kernels)
  body = ["alloc", *["launch"] * n, "free"]
  assert kinds(log) == [*body, "stream_create", "capture_begin", *body, "capture_end", "graph_destroy", *body, *body, *body]
  assert all(x[1] == 7 for x in log[-3 * len(body):] if x[0] in ("alloc", "free"))


def test_the_graph_launcher_compiles_cleanly(lib):
  for std in ("c99", "c11"):
    done = subprocess.run(["cc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-fPIC", "-shared", "-fvisibility=hidden",
                           str(lib["source"]), "-o", str(lib["dir"] / f"check_{std}.so"), "-ldl", "-lpthread"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:4000]
