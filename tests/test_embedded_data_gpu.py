"""Constant data in the GPU launchers, without a GPU: the CUDA and HIP libraries run against stub drivers
(written here, in C, loaded in a child process) whose device memory is host memory, so the test reads
what each launch's constant argument points at: the data's bytes, copied once per context (CUDA) or
device (HIP) and reused by later calls. The launcher sources compile with -Wall -Wextra -Werror, the
PTX passes ptxas where it is installed, the Metal launcher passes clang's Objective-C checks against
the stub SDK. (The kernels' results on constants are checked in the emulator: tests/test_embedded_data.py.)"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from uopc.driver import BuildOptions, build
from uopc.targets.amd.codeobj import find_linker, missing_linker

W = np.arange(6, dtype=np.float32) * 1.5 - 2
B = np.array([7, 9, 11], dtype=np.uint8)
PROGRAM = f"""func f {{
  %x = PARAM([2, 3]) {{(0, "x")}} : f32
  %o = PARAM([2, 3]) {{(1, "o")}} : f32
  %wb = BINARY {{x"{W.tobytes().hex()}"}}
  %wf = BITCAST(%wb) : f32
  %w = RESHAPE(%wf, [2, 3])
  %bb = BINARY {{x"{B.tobytes().hex()}"}}
  %bf = CAST(%bb) : f32
  %y = ADD(%x, %w)
  %z = MUL(%y, %bf)
  STORE(%o, %z)
}}
"""

CUDA_STUB = r"""
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
typedef int CUresult; typedef void* P;
static char log_[1 << 16]; static int len_;
#define LOG(...) (len_ += snprintf(log_ + len_, sizeof log_ - len_, __VA_ARGS__))
const char* stub_log(void) { return log_; }
long stub_context = 1; int stub_nargs;
CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuCtxGetCurrent(P* c) { *c = (P)stub_context; return 0; }
CUresult cuModuleLoadData(P* m, const void* image) { (void)image; *m = (P)1; LOG("[\"module\", %ld],", stub_context); return 0; }
CUresult cuModuleGetFunction(P* f, P m, const char* name) { (void)m; (void)name; *f = (P)1; return 0; }
CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) { *p = (unsigned long long)malloc(n); LOG("[\"alloc\", %zu],", n); return 0; }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* s, size_t n) { memcpy((void*)d, s, n); return 0; }
CUresult cuLaunchKernel(P f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                        P stream, void** args, void** extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)stream; (void)extra;
  LOG("[\"launch\"");
  for (int i = 0; i < stub_nargs; i++) LOG(", %llu", *(unsigned long long*)args[i]);
  LOG("],"); return 0; }
CUresult cuMemAllocAsync(unsigned long long* p, size_t n, P s) { (void)n; (void)s; *p = 0; return 0; }
CUresult cuMemFreeAsync(unsigned long long p, P s) { (void)p; (void)s; return 0; }
CUresult cuGetErrorString(CUresult e, const char** m) { (void)e; *m = "stub"; return 0; }
"""

HIP_STUB = r"""
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
typedef int hipError_t; typedef void* P;
static char log_[1 << 16]; static int len_;
#define LOG(...) (len_ += snprintf(log_ + len_, sizeof log_ - len_, __VA_ARGS__))
const char* stub_log(void) { return log_; }
long stub_context = 1; int stub_nargs;
hipError_t hipGetDevice(int* d) { *d = (int)stub_context; return 0; }
hipError_t hipModuleLoadData(P* m, const void* image) { (void)image; *m = (P)1; LOG("[\"module\", %ld],", stub_context); return 0; }
hipError_t hipModuleGetFunction(P* f, P m, const char* name) { (void)m; (void)name; *f = (P)1; return 0; }
hipError_t hipMalloc(void** p, size_t n) { *p = malloc(n); LOG("[\"alloc\", %zu],", n); return 0; }
hipError_t hipMemcpyHtoD(void* d, const void* s, size_t n) { memcpy(d, s, n); return 0; }
hipError_t hipModuleLaunchKernel(P f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                 P stream, void** args, void** extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)stream; (void)extra;
  LOG("[\"launch\"");
  for (int i = 0; i < stub_nargs; i++) LOG(", %llu", *(unsigned long long*)args[i]);
  LOG("],"); return 0; }
hipError_t hipMallocAsync(void** p, size_t n, P s) { (void)n; (void)s; *p = 0; return 0; }
hipError_t hipFreeAsync(void* p, P s) { (void)p; (void)s; return 0; }
const char* hipGetErrorString(hipError_t e) { (void)e; return "stub"; }
"""

# calls the entry twice in context (CUDA) / device (HIP) 1, then once in 2; prints the log and, per launch,
# the bytes its constant arguments (kernel arguments 2 and 3) point at
CHILD = r"""
import ctypes, json, sys
stub = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(sys.argv[2])
ctypes.c_int.in_dll(stub, "stub_nargs").value = 4
statuses = []
for ctx in (1, 1, 2):
  ctypes.c_long.in_dll(stub, "stub_context").value = ctx
  statuses.append(lib.lib_f(ctypes.c_void_p(4096), ctypes.c_void_p(8192), ctypes.c_void_p(0)))
stub.stub_log.restype = ctypes.c_char_p
log = json.loads("[" + stub.stub_log().decode().rstrip(",") + "]")
data = [[ctypes.string_at(e[3], 24).hex(), ctypes.string_at(e[4], 3).hex()] for e in log if e[0] == "launch"]
print(json.dumps({"statuses": statuses, "log": log, "data": data}))
"""


def _run_against_stub(tmp_path: Path, target: str, stub: str, soname: str, **build_opts) -> dict:
  (tmp_path / "lib.uop").write_text(PROGRAM)
  build(tmp_path / "lib.uop", BuildOptions(target=target, out_dir=tmp_path / "out", **build_opts))
  (tmp_path / "stub.c").write_text(stub)
  subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(tmp_path / soname), str(tmp_path / "stub.c")], check=True)
  done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / soname), str(tmp_path / "out" / "liblib.so")],
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  return json.loads(done.stdout)


def _check_uploads(got: dict) -> None:
  assert got["statuses"] == [0, 0, 0]
  log = got["log"]
  kinds = [e[0] if e[0] != "alloc" else ("alloc", e[1]) for e in log]
  # context 1: its module and one copy of each constant, reused by the second call; context 2: its own
  assert kinds == ["module", ("alloc", 24), ("alloc", 3), "launch", "launch", "module", ("alloc", 24), ("alloc", 3), "launch"]
  launches = [e for e in log if e[0] == "launch"]
  assert [e[1:3] for e in launches] == [[4096, 8192]] * 3  # the buffer arguments, as passed
  assert launches[0][3:] == launches[1][3:] != launches[2][3:]  # one copy per context
  assert got["data"] == [[W.tobytes().hex(), B.tobytes().hex()]] * 3  # the data's bytes, little-endian


def test_cuda_copies_constants_once_per_context(tmp_path):
  _check_uploads(_run_against_stub(tmp_path, "cuda", CUDA_STUB, "libcuda.so.1"))


@pytest.mark.skipif(find_linker() is None, reason=missing_linker())
def test_hip_copies_constants_once_per_device(tmp_path):
  _check_uploads(_run_against_stub(tmp_path, "amd", HIP_STUB, "libamdhip64.so", archs=("gfx90a",)))


@pytest.mark.parametrize("target,source", [("cuda", "lib_cuda.c"), ("amd", "lib_hip.c"), ("c", "lib.c")])
def test_launchers_with_constants_compile_cleanly(tmp_path, target, source):
  if target == "amd" and find_linker() is None: pytest.skip(missing_linker())
  (tmp_path / "lib.uop").write_text(PROGRAM)
  build(tmp_path / "lib.uop", BuildOptions(target=target, out_dir=tmp_path, emit=("source",) if target == "c" else None,
                                           archs=("gfx90a",) if target == "amd" else ()))
  done = subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", "-o", str(tmp_path / "x.o"), str(tmp_path / source)],
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr


def test_cuda_ptx_of_a_constant_reading_kernel_passes_ptxas(tmp_path):
  from uopc.targets.cuda.toolchain import find_tool
  if find_tool("ptxas") is None: pytest.skip("ptxas is not installed (pip install 'uopc[cuda]')")
  (tmp_path / "lib.uop").write_text(PROGRAM)
  build(tmp_path / "lib.uop", BuildOptions(target="cuda", out_dir=tmp_path))
  assert (tmp_path / "lib.fatbin").stat().st_size > 0  # ptxas and fatbinary ran on the PTX


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang is not installed (CI installs it)")
def test_metal_launcher_binds_constant_buffers(tmp_path):
  (tmp_path / "lib.uop").write_text(PROGRAM)
  build(tmp_path / "lib.uop", BuildOptions(target="metal", out_dir=tmp_path))
  launcher = (tmp_path / "lib_launcher.m").read_text()
  assert "newBufferWithBytes:lib__datas[i]" in launcher and "NSArray* datas = lib__data_buffers(q.device);" in launcher
  sdk = Path(__file__).parent / "metal" / "sdk"
  cmd = ["clang", "-x", "objective-c", "-fsyntax-only", "-fobjc-arc", "-fobjc-runtime=macosx-11.0", "-Wall", "-Werror",
         "-I", str(sdk), "-I", str(tmp_path), str(tmp_path / "lib_launcher.m")]
  done = subprocess.run(cmd, capture_output=True, text=True)
  assert done.returncode == 0, done.stdout + done.stderr
  if shutil.which("clang++") is not None:
    from test_metal import metal_syntax_errors
    assert metal_syntax_errors((tmp_path / "lib.metal").read_text()) == ""
