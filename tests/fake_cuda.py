"""A fake CUDA driver and a fake NCCL, for testing the CUDA launcher's multi-device entries without a GPU.

`libcuda.so.1` and `libnccl.so.2` are small C libraries built here (in a test's tmp dir, each with its real
soname) and loaded RTLD_GLOBAL in a child process before the uopc library, whose dlopen then finds them,
so no other test meets them. "Device memory" is host memory: the child passes numpy arrays as device
pointers, the fake cuMemAllocAsync mallocs, cuMemcpyPeerAsync / cuMemcpyDtoDAsync copy for real and
the fake ncclAllReduce reduces for real at ncclGroupEnd (sum, product, max, min of int32, int64,
float32, float64), so an entry that runs only copies and NCCL computes its result. Kernels cannot run:
cuLaunchKernel only records. Everything is recorded in one log, in call order:
  ["launch", kernel, stream, context depth], ["copy", "peer", dst, dst_ctx, src, src_ctx, bytes, stream],
  ["copy", "dtod", dst, src, bytes, stream], ["wait", stream, stream the event was recorded on],
  ["peer", ctx], ["alloc", stream, current ctx, bytes, pointer(, pool)], ["free", stream, current ctx],
  ["pool", pool, current ctx, allocation type, location type, device], ["pool_attr", pool, attribute, value],
  ["nccl_init", device...], ["group_start"], ["allreduce", device, count, dtype, op, stream, send, recv],
  ["group_end"], ["nccl_destroy", device], ["attribute", kernel, attribute, value] (cuFuncSetAttribute),
  ["shared", kernel, bytes] (after the launch of a kernel given dynamic shared memory), ["stream_create", stream,
  flags, ctx], ["capture_begin", stream, mode], ["capture_end", stream, graph], ["instantiate", exec, graph],
  ["graph_launch", exec, stream], ["graph_destroy", graph], ["exec_destroy", exec] (a graph's launches are logged
  as they are captured; its replays only as graph_launch).
A stream s lives in context 100 + s, on device s % 10 (so streams 1 and 11: one GPU, two contexts);
cuCtxGetDevice answers for the context on top of the stack the fake keeps. FAKE_NCCL_FAIL=r makes
ncclAllReduce return r; FAKE_CC=XY makes every device of compute capability X.Y (default 8.0), FAKE_LOAD_FAIL=r the first cuModuleLoadData return r; FAKE_SHARED_MAX=n makes cuFuncSetAttribute refuse (CUDA_ERROR_INVALID_VALUE) more
dynamic shared memory than n bytes, FAKE_CAPTURING=s has cuStreamIsCapturing answer that stream s is being
captured, FAKE_INSTANTIATE_FAIL=r makes cuGraphInstantiateWithFlags return r.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

CUDA = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
typedef void* P;
static char names[4096][128]; static int n_names;
static char log_[1 << 20]; static int len_;
static P stack[64]; static int depth; static P base = (P)1;
void stub_log(const char* line) { len_ += snprintf(log_ + len_, sizeof log_ - len_, "%s,", line); }
#define LOG(...) do { char line_[512]; snprintf(line_, sizeof line_, __VA_ARGS__); stub_log(line_); } while (0)
const char* stub_log_text(void) { return log_; }
int stub_depth(void) { return depth; }
long stub_current(void) { return (long)(depth ? stack[depth - 1] : base); }
CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuCtxGetCurrent(P* c) { *c = (P)stub_current(); return 0; }
CUresult cuCtxSetCurrent(P c) { if (depth) stack[depth - 1] = c; else base = c; return 0; }
CUresult cuCtxGetDevice(int* d) { *d = (int)((stub_current() - 100) % 10); return 0; }
static int loads;
CUresult cuModuleLoadData(P* m, const void* image) {  /* FAKE_LOAD_FAIL=r: the first load answers r */
  const char* fail = getenv("FAKE_LOAD_FAIL"); (void)image;
  if (fail != NULL && loads++ == 0) return atoi(fail);
  *m = (P)1; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attribute, int dev) {  /* compute capability FAKE_CC (default 80) */
  const char* cc = getenv("FAKE_CC"); int n = cc != NULL ? atoi(cc) : 80; (void)dev;
  *v = attribute == 75 ? n / 10 : attribute == 76 ? n % 10 : 0; return 0; }
CUresult cuModuleGetFunction(P* f, P m, const char* name) {
  (void)m; strncpy(names[n_names], name, 127); *f = (P)(long)(++n_names); return 0; }
CUresult cuLaunchKernel(P f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                        P stream, void** args, void** extra) {
  (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)args; (void)extra;
  LOG("[\"launch\", \"%s\", %ld, %d]", names[(long)f - 1], (long)stream, depth);
  if (shm) LOG("[\"shared\", \"%s\", %u]", names[(long)f - 1], shm);
  return 0; }
CUresult cuFuncSetAttribute(P f, int attribute, int value) {
  LOG("[\"attribute\", \"%s\", %d, %d]", names[(long)f - 1], attribute, value);
  const char* max = getenv("FAKE_SHARED_MAX");
  return attribute == 8 && max != NULL && value > atoi(max) ? 1 : 0; }
CUresult cuMemAllocAsync(unsigned long long* p, size_t n, P s) {
  *p = (unsigned long long)malloc(n); LOG("[\"alloc\", %ld, %ld, %zu, %llu]", (long)s, stub_current(), n, *p); return 0; }
CUresult cuMemFreeAsync(unsigned long long p, P s) { free((void*)p); LOG("[\"free\", %ld, %ld]", (long)s, stub_current()); return 0; }
typedef struct { int allocType, handleTypes, locationType, locationId; P win32; unsigned char rest[64]; } PoolProps;
static long n_pools;
CUresult cuMemPoolCreate(P* pool, const PoolProps* props) {
  *pool = (P)(++n_pools);
  LOG("[\"pool\", %ld, %ld, %d, %d, %d]", n_pools, stub_current(), props->allocType, props->locationType, props->locationId); return 0; }
CUresult cuMemPoolSetAttribute(P pool, int attr, void* value) {
  LOG("[\"pool_attr\", %ld, %d, %llu]", (long)pool, attr, *(unsigned long long*)value); return 0; }
CUresult cuMemAllocFromPoolAsync(unsigned long long* p, size_t n, P pool, P s) {
  *p = (unsigned long long)malloc(n); LOG("[\"alloc\", %ld, %ld, %zu, %llu, %ld]", (long)s, stub_current(), n, *p, (long)pool); return 0; }
CUresult cuGetErrorString(CUresult e, const char** m) { (void)e; *m = "stub"; return 0; }
CUresult cuStreamGetCtx(P s, P* c) { *c = (P)(100 + (long)s); return 0; }
CUresult cuCtxPushCurrent_v2(P c) { stack[depth++] = c; return 0; }
CUresult cuCtxPopCurrent_v2(P* c) { *c = stack[--depth]; return 0; }
CUresult cuCtxEnablePeerAccess(P c, unsigned f) { (void)f; LOG("[\"peer\", %ld]", (long)c); return 0; }
static long recorded[4096]; static int n_events;
CUresult cuEventCreate(P* e, unsigned f) { (void)f; *e = (P)(long)(++n_events); return 0; }
CUresult cuEventRecord(P e, P s) { recorded[(long)e] = (long)s; return 0; }
CUresult cuEventDestroy_v2(P e) { (void)e; return 0; }
CUresult cuStreamWaitEvent(P s, P e, unsigned f) { (void)f; LOG("[\"wait\", %ld, %ld]", (long)s, recorded[(long)e]); return 0; }
CUresult cuMemcpyPeerAsync(unsigned long long dst, P dctx, unsigned long long src, P sctx, size_t n, P s) {
  memcpy((void*)dst, (const void*)src, n);
  LOG("[\"copy\", \"peer\", %llu, %ld, %llu, %ld, %zu, %ld]", dst, (long)dctx, src, (long)sctx, n, (long)s); return 0; }
static long capturing = -1; static long n_created, n_graphs, n_execs;
CUresult cuStreamIsCapturing(P s, int* status) {  /* FAKE_CAPTURING=s: the application captures stream s */
  const char* app = getenv("FAKE_CAPTURING");
  *status = (long)s == capturing || (app != NULL && atol(app) == (long)s); return 0; }
CUresult cuStreamCreate(P* s, unsigned f) { *s = (P)(1000 + ++n_created); LOG("[\"stream_create\", %ld, %u, %ld]", (long)*s, f, stub_current()); return 0; }
CUresult cuStreamBeginCapture_v2(P s, int mode) { capturing = (long)s; LOG("[\"capture_begin\", %ld, %d]", (long)s, mode); return 0; }
CUresult cuStreamEndCapture(P s, P* g) { capturing = -1; *g = (P)(++n_graphs); LOG("[\"capture_end\", %ld, %ld]", (long)s, n_graphs); return 0; }
CUresult cuGraphInstantiateWithFlags(P* e, P g, unsigned long long f) {  /* FAKE_INSTANTIATE_FAIL=r: answers r */
  const char* fail = getenv("FAKE_INSTANTIATE_FAIL"); (void)f;
  if (fail != NULL) return atoi(fail);
  *e = (P)(++n_execs); LOG("[\"instantiate\", %ld, %ld]", n_execs, (long)g); return 0; }
CUresult cuGraphLaunch(P e, P s) { LOG("[\"graph_launch\", %ld, %ld]", (long)e, (long)s); return 0; }
CUresult cuGraphDestroy(P g) { LOG("[\"graph_destroy\", %ld]", (long)g); return 0; }
CUresult cuGraphExecDestroy(P e) { LOG("[\"exec_destroy\", %ld]", (long)e); return 0; }
CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, P s) {
  memcpy((void*)dst, (const void*)src, n); LOG("[\"copy\", \"dtod\", %llu, %llu, %zu, %ld]", dst, src, n, (long)s); return 0; }
"""

NCCL = r"""
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
void stub_log(const char* line);
#define LOG(...) do { char line_[512]; snprintf(line_, sizeof line_, __VA_ARGS__); stub_log(line_); } while (0)
typedef struct { int dev; } comm;
static comm store[256]; static int n_store;
static struct { const void* send; void* recv; size_t count; int dt, op; comm* c; } pending[64];
static int n_pending, in_group;
int ncclCommInitAll(comm** comms, int n, const int* devs) {
  char line[256]; int k = snprintf(line, sizeof line, "[\"nccl_init\"");
  for (int i = 0; i < n; i++) { store[n_store].dev = devs[i]; comms[i] = &store[n_store++]; k += snprintf(line + k, sizeof line - k, ", %d", devs[i]); }
  snprintf(line + k, sizeof line - k, "]"); stub_log(line); return 0; }
int ncclCommDestroy(comm* c) { LOG("[\"nccl_destroy\", %d]", c->dev); return 0; }
int ncclGroupStart(void) { in_group++; LOG("[\"group_start\"]"); return 0; }
int ncclAllReduce(const void* s, void* r, size_t count, int dt, int op, comm* c, void* stream) {
  LOG("[\"allreduce\", %d, %zu, %d, %d, %ld, %lu, %lu]", c->dev, count, dt, op, (long)stream, (unsigned long)s, (unsigned long)r);
  const char* fail = getenv("FAKE_NCCL_FAIL");
  if (fail != NULL) return atoi(fail);
  if (!in_group) return 5;  /* ncclInvalidUsage: one process driving several GPUs must group */
  pending[n_pending].send = s; pending[n_pending].recv = r; pending[n_pending].count = count;
  pending[n_pending].dt = dt; pending[n_pending].op = op; pending[n_pending++].c = c; return 0; }
#define REDUCE(T) { T* acc = calloc(n, sizeof(T)); \
  for (size_t e = 0; e < n; e++) { acc[e] = ((const T*)pending[0].send)[e]; \
    for (int k = 1; k < n_pending; k++) { T v = ((const T*)pending[k].send)[e]; \
      acc[e] = op == 0 ? acc[e] + v : op == 1 ? acc[e] * v : op == 2 ? (v > acc[e] ? v : acc[e]) : (v < acc[e] ? v : acc[e]); } } \
  for (int k = 0; k < n_pending; k++) memcpy(pending[k].recv, acc, n * sizeof(T)); free(acc); }
int ncclGroupEnd(void) {
  LOG("[\"group_end\"]");
  if (--in_group > 0 || n_pending == 0) return 0;
  size_t n = pending[0].count; int op = pending[0].op, dt = pending[0].dt;
  if (dt == 2) REDUCE(int) else if (dt == 4) REDUCE(long long) else if (dt == 7) REDUCE(float) else if (dt == 8) REDUCE(double) else return 4;
  n_pending = 0; return 0; }
const char* ncclGetErrorString(int r) { (void)r; return "fake NCCL error"; }
"""

CHILD = r"""
import ctypes, json, os, sys
import numpy as np
spec = json.loads(sys.argv[1])
cuda = ctypes.CDLL(spec["cuda"], mode=ctypes.RTLD_GLOBAL)
if spec.get("nccl"): ctypes.CDLL(spec["nccl"], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(spec["lib"])
p = spec["prefix"]
out = {}
if spec.get("init") is not None:
  devs = (ctypes.c_int * len(spec["init"]))(*spec["init"])
  out["init"] = getattr(lib, p + "_nccl_init")(len(spec["init"]), devs)
  out["num_devices"] = getattr(lib, p + "_nccl_num_devices")()
arrays = [np.array(a, dtype=t) for a, t in spec["args"]]
fn = getattr(lib, p + "_" + spec["entry"])
for streams in spec.get("calls") or [spec["streams"]] * spec.get("repeat", 1):
  status = fn(*[ctypes.c_void_p(a.ctypes.data) for a in arrays], *[ctypes.c_void_p(s) for s in streams])
getattr(lib, p + "_strerror").restype = ctypes.c_char_p
if spec.get("teardown"): getattr(lib, p + "_nccl_teardown")()
cuda.stub_log_text.restype = ctypes.c_char_p
out.update(status=status, message=getattr(lib, p + "_strerror")(status).decode(), depth=cuda.stub_depth(),
           current=cuda.stub_current(), pointers=[a.ctypes.data for a in arrays], arrays=[a.tolist() for a in arrays],
           log=json.loads("[" + cuda.stub_log_text().decode().rstrip(",") + "]"))
print(json.dumps(out))
"""


def build_fakes(d: pathlib.Path) -> dict[str, str]:
  """libcuda.so.1 and libnccl.so.2 in `d`: {"cuda": path, "nccl": path}."""
  out = {}
  for name, src, soname in (("cuda", CUDA, "libcuda.so.1"), ("nccl", NCCL, "libnccl.so.2")):
    (d / f"fake_{name}.c").write_text(src)
    subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(d / soname), str(d / f"fake_{name}.c")], check=True)
    out[name] = str(d / soname)
  return out


def call(fakes: dict[str, str], lib: pathlib.Path, prefix: str, entry: str, args, streams: list[int], nccl: bool = True,
         init: list[int] | None = None, env: dict[str, str] | None = None, teardown: bool = False, repeat: int = 1,
         calls: list[list[int]] | None = None) -> dict:
  """Call `entry` of `lib` in a child process with the fakes loaded (the fake NCCL when `nccl`); `args`:
  (values, numpy dtype name) per buffer argument; `init`: devices for PREFIX_nccl_init first. Returns the
  status, its message, the context depth and current context after, the argument pointers and values after,
  and the log; `repeat`: how many times the entry is called (the status is the last call's); `calls`: instead,
  the streams of each call."""
  import os
  spec = {"cuda": fakes["cuda"], "nccl": fakes["nccl"] if nccl else None, "lib": str(lib), "prefix": prefix, "entry": entry,
          "args": [[list(map(float if "float" in t else int, v)), t] for v, t in args], "streams": streams, "init": init,
          "teardown": teardown, "repeat": repeat, "calls": calls}
  done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True, env={**os.environ, **(env or {})})
  assert done.returncode == 0, done.stderr
  return json.loads(done.stdout)
