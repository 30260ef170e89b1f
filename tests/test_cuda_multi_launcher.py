"""The CUDA launcher's multi-device entries without a GPU: the library runs against a stub `libcuda.so.1`
(written here, in C, loaded in a child process so no other test meets it) that records what it is asked:
each launch's kernel and stream, the events recorded and waited for, peer access, the context stack.
Checked: every launch runs on its device's stream, in the schedule's order across streams, copies on
the destination's stream after the source's work, contexts pushed and popped in pairs, and two logical
devices given one stream need no event and no peer access."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from multi_programs import collectives  # noqa: E402

from uopc.driver import BuildOptions, build  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.pipeline import compile_module  # noqa: E402

STUB = r"""
#include <stdio.h>
#include <string.h>
typedef int CUresult;
typedef void* P;
static char names[4096][128]; static int n_names;
static char log_[1 << 16]; static int len_;
static int depth;
#define LOG(...) (len_ += snprintf(log_ + len_, sizeof log_ - len_, __VA_ARGS__))
const char* stub_log(void) { return log_; }
int stub_depth(void) { return depth; }
CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuCtxGetCurrent(P* c) { *c = (P)1; return 0; }
CUresult cuModuleLoadData(P* m, const void* image) { (void)image; *m = (P)1; return 0; }
CUresult cuModuleGetFunction(P* f, P m, const char* name) {
  (void)m; strncpy(names[n_names], name, 127); *f = (P)(long)(++n_names); return 0; }
CUresult cuLaunchKernel(P f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                        P stream, void** args, void** extra) {
  (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)args; (void)extra;
  LOG("[\"launch\", \"%s\", %ld, %d],", names[(long)f - 1], (long)stream, depth); return 0; }
CUresult cuMemAllocAsync(unsigned long long* p, size_t n, P s) { (void)n; *p = 4096; LOG("[\"alloc\", %ld],", (long)s); return 0; }
CUresult cuMemFreeAsync(unsigned long long p, P s) { (void)p; LOG("[\"free\", %ld],", (long)s); return 0; }
CUresult cuGetErrorString(CUresult e, const char** m) { (void)e; *m = "stub"; return 0; }
CUresult cuStreamGetCtx(P s, P* c) { *c = (P)(100 + (long)s); return 0; }
CUresult cuCtxPushCurrent_v2(P c) { (void)c; depth++; return 0; }
CUresult cuCtxPopCurrent_v2(P* c) { *c = NULL; depth--; return 0; }
CUresult cuCtxEnablePeerAccess(P c, unsigned f) { (void)f; LOG("[\"peer\", %ld],", (long)c - 100); return 0; }
static long recorded[4096]; static int n_events;
CUresult cuEventCreate(P* e, unsigned f) { (void)f; *e = (P)(long)(++n_events); return 0; }
CUresult cuEventRecord(P e, P s) { recorded[(long)e] = (long)s; return 0; }
CUresult cuEventDestroy_v2(P e) { (void)e; return 0; }
CUresult cuStreamWaitEvent(P s, P e, unsigned f) { (void)f; LOG("[\"wait\", %ld, %ld],", (long)s, recorded[(long)e]); return 0; }
"""

CHILD = r"""
import ctypes, json, sys
stub = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(sys.argv[2])
fn = getattr(lib, "multi_" + sys.argv[3])
nbuf, streams = int(sys.argv[4]), [int(s) for s in sys.argv[5:]]
status = fn(*[ctypes.c_void_p(4096 * (i + 1)) for i in range(nbuf)], *[ctypes.c_void_p(s) for s in streams])
stub.stub_log.restype = ctypes.c_char_p
print(json.dumps({"status": status, "depth": stub.stub_depth(), "log": json.loads("[" + stub.stub_log().decode().rstrip(",") + "]")}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  d = tmp_path_factory.mktemp("cuda_multi")
  (d / "stub.c").write_text(STUB)
  subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(d / "libcuda.so.1"), str(d / "stub.c")], check=True)
  progs = collectives(2, 4)
  path = d / "multi.uop"
  path.write_text("".join(p.text() for p in progs))
  build(path, BuildOptions(target="cuda", out_dir=d / "out"))
  entries = {e.name: e for e in compile_module(parse_source(path.read_text(), str(path)), "cuda", "multi")}
  return d, entries


def run(built, entry: str, streams: list[int]) -> dict:
  d, entries = built
  nbuf = len({b.slot for ln in entries[entry].launches for _, b in ln.binds if b.is_arg})
  done = subprocess.run([sys.executable, "-c", CHILD, str(d / "libcuda.so.1"), str(d / "out" / "libmulti.so"), entry, str(nbuf),
                         *map(str, streams)], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  return json.loads(done.stdout)


@pytest.mark.parametrize("entry", ["gather", "reduce_scatter", "allreduce"])
def test_launches_run_on_their_devices_stream_in_schedule_order(built, entry):
  _, entries = built
  got = run(built, entry, [1, 2])
  assert got["status"] == 0 and got["depth"] == 0
  assert ["peer", 2] in got["log"] and ["peer", 1] in got["log"]  # the two contexts see each other's memory
  launches = [x for x in got["log"] if x[0] == "launch"]
  schedule = entries[entry].launches
  assert len(launches) == len(schedule)
  stream_of = {"CPU:0": 1, "CPU:1": 2}
  prev = 1 if entries[entry].workspace else None
  log = got["log"]
  for ln, launch in zip(schedule, launches):
    assert launch[2] == stream_of[ln.device] and launch[3] == 1  # its device's stream, in its pushed context
    if prev is not None and prev != launch[2]:  # a switch of stream waits for the previous stream's work
      assert log[log.index(launch) - 1] == ["wait", launch[2], prev]
    prev = launch[2]
  assert any(ln.peers for ln in schedule)  # the schedule has copies, run on the destination's stream


def test_two_logical_devices_on_one_stream_need_no_events(built):
  got = run(built, "allreduce", [7, 7])
  assert got["status"] == 0 and got["depth"] == 0
  assert not [x for x in got["log"] if x[0] in ("wait", "peer")]
  assert {x[2] for x in got["log"] if x[0] == "launch"} == {7}
