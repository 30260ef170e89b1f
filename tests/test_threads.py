"""THREAD axes on the CPU targets (`-t c`, `-t llvm`: the same launcher): the kernel computes one task
per call, the launcher runs the tasks on worker threads started and joined per launch; every worker
count gives the unthreaded result bit for bit; the library is clean under ThreadSanitizer and
AddressSanitizer (concurrent callers included)."""
from __future__ import annotations

import ctypes
import io
import os
import re
import subprocess

import numpy as np
import pytest

from c_harness import have
from test_optimize import LIB, elementwise, program, random_inputs, run_func
from test_tensor_programs import gemm
from uopc.driver import BuildOptions, build
from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.linearize import linearize
from uopc.targets.c.threads import POOL_C, TASK_PARAM, thread_tasks
from uopc.uop import UOp

M, K, N = 24, 16, 20
FUNCS = [gemm(M, K, N), elementwise(48, 8)]
PINNED = {f"{LIB}__gemm_k0": "SPLIT(1,4,u),SPLIT(0,6,t,top)", f"{LIB}__ew_k0": "SPLIT(0,8,t,top)"}


def _schedule(pins: dict[str, str]):
  from uopc.stages.optimize import parse_schedule
  return parse_schedule([f"{k}:{v}" for k, v in pins.items()])


def build_lib(tmp, text: str, schedule, tag: str, target: str) -> ctypes.CDLL:
  (tmp / f"{tag}.uop").write_text(text)
  build(tmp / f"{tag}.uop", BuildOptions(target, tmp / tag, name=LIB, schedule=schedule, print_out=io.StringIO()))
  return ctypes.CDLL(str(tmp / tag / f"lib{LIB}.so"))


@pytest.fixture(scope="module", params=["c", "llvm"])
def libs(request, tmp_path_factory):
  target = request.param
  tmp = tmp_path_factory.mktemp(f"threads_{target}")
  text = program(FUNCS)
  plain = build_lib(tmp, text, _schedule({k: "" for k in PINNED}), "plain", target)
  threaded = build_lib(tmp, text, _schedule(PINNED), "threaded", target)
  return tmp, plain, threaded


def test_a_thread_axis_becomes_the_task_argument():
  out = UOp(Ops.PARAM, dtypes.float32.ptr(), (), (0, "out"))
  t = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), (0, AxisType.THREAD))
  g = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 8),), (1, AxisType.GLOBAL))
  at = UOp(Ops.INDEX, out.dtype, (out, t.alu(Ops.MUL, UOp.const(dtypes.index, 8)).alu(Ops.ADD, g)))
  st = UOp(Ops.STORE, dtypes.void, (at, UOp.const(dtypes.float32, 1.0)))
  linear = thread_tasks(linearize(UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (UOp(Ops.END, dtypes.void, (st, g)), t)),))))
  assert not [u for u in linear.src if u.op is Ops.RANGE and u.arg[1] is AxisType.THREAD]
  assert [u.arg for u in linear.src if u.op is Ops.DEFINE_VAR] == [(TASK_PARAM, 0, 3)]
  assert [u.src[1].arg for u in linear.src if u.op is Ops.END] == [(1, AxisType.GLOBAL)]


def test_every_worker_count_gives_the_unthreaded_result(libs):
  tmp, plain, threaded = libs
  assert "int num_threads" in (tmp / "threaded" / f"{LIB}.h").read_text()
  assert "_with_threads" not in (tmp / "plain" / f"{LIB}.h").read_text()
  for i, f in enumerate(FUNCS):
    inputs = random_inputs(f, i)
    want = run_func(plain, f, inputs)
    for n in (0, 1, 2, 3, 5, 64):
      got = run_func(threaded, f, inputs, "_with_threads", (n,))
      for name in want: np.testing.assert_array_equal(got[name], want[name], err_msg=f"{f.name} with {n} threads")


def test_the_environment_sets_the_default_worker_count(libs, monkeypatch):
  _, plain, threaded = libs
  inputs = random_inputs(FUNCS[0], 0)
  want = run_func(plain, FUNCS[0], inputs)
  for value in ("1", "3", "junk", "-2", ""):
    monkeypatch.setenv("UOPC_NUM_THREADS", value)
    np.testing.assert_array_equal(run_func(threaded, FUNCS[0], inputs)["c"], want["c"])


def test_the_pool_is_the_only_global_state(libs):
  tmp, _, _ = libs
  source = (tmp / "threaded" / f"{LIB}.c").read_text()
  file_scope = [line for line in source.splitlines() if re.match(r"(static\s+)?[A-Za-z_][\w\s\*]*\s\w+\s*(\[[^\]]*\])?\s*(=|;)", line)]
  mutable = [line for line in file_scope if "const" not in line and not line.startswith("typedef")]
  assert len(mutable) == 1 and mutable[0].startswith("static uopc_pool uopc_the_pool = "), mutable


def _threads() -> int: return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_workers_are_started_once_and_kept(libs):
  _, _, threaded = libs
  inputs = random_inputs(FUNCS[0], 0)
  run_func(threaded, FUNCS[0], inputs, "_with_threads", (3,))
  before = _threads()
  for n in (3, 2, 3, 1):
    run_func(threaded, FUNCS[0], inputs, "_with_threads", (n,))
    assert _threads() == before, f"a launch with {n} threads started or ended threads"


DRIVER = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "t.h"
enum { M = %(M)d, K = %(K)d, N = %(N)d };
static float a[M * K], b[K * N], ref[M * N];
typedef struct { float* out; int threads; int status; } job;
static void* call(void* p) {
  job* j = (job*)p;
  j->status = t_gemm_with_threads(a, b, j->out, j->threads);
  return NULL;
}
int main(void) {
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) %% 13) - 6.0f;
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) %% 11) * 0.25f;
  if (t_gemm_with_threads(a, b, ref, 1) != 0) return 2;
  job jobs[3];
  pthread_t callers[3];
  for (int i = 0; i < 3; i++) {
    jobs[i].out = (float*)malloc(sizeof(ref));
    jobs[i].threads = i + 2;
    pthread_create(&callers[i], NULL, call, &jobs[i]);
  }
  int bad = 0;
  for (int i = 0; i < 3; i++) {
    pthread_join(callers[i], NULL);
    bad |= jobs[i].status != 0 || memcmp(jobs[i].out, ref, sizeof(ref)) != 0;
    free(jobs[i].out);
  }
  float* out = (float*)malloc(sizeof(ref));
  bad |= t_gemm(a, b, out) != 0 || memcmp(out, ref, sizeof(ref)) != 0;
  free(out);
  printf(bad ? "MISMATCH\n" : "ok\n");
  return bad;
}
"""


@pytest.mark.parametrize("sanitizer", ["thread", "address,undefined"])
def test_sanitizers_see_no_race_leak_or_overflow(libs, sanitizer):
  if not have("gcc"): pytest.skip("gcc is not installed")
  tmp, _, _ = libs
  d = tmp / "threaded"
  (d / "driver.c").write_text(DRIVER % {"M": M, "K": K, "N": N})
  exe = d / f"driver_{sanitizer.split(',')[0]}"
  kernels = [str(d / f"{LIB}.o")] if (d / f"{LIB}.o").is_file() else []  # -t llvm: the launcher's kernels, compiled by LLVM
  cmd = ["gcc", "-O1", "-g", "-pthread", f"-fsanitize={sanitizer}", "-fno-sanitize-recover=all", "-ffp-contract=off",
         "-I", str(d), "-o", str(exe), str(d / "driver.c"), str(d / f"{LIB}.c"), *kernels, "-lm"]
  res = subprocess.run(cmd, capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66", ASAN_OPTIONS="detect_leaks=1", UOPC_NUM_THREADS="4")
  run = subprocess.run([str(exe)], capture_output=True, text=True, env=env)
  assert run.returncode == 0 and run.stdout == "ok\n", run.stdout + run.stderr
  assert "Sanitizer" not in run.stderr, run.stderr


LIFECYCLE = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
enum { M = %(M)d, K = %(K)d, N = %(N)d };
typedef int (*gemm_fn)(const float*, const float*, float*, int);
static float a[M * K], b[K * N], ref[M * N], out[M * N];
static int same(gemm_fn f, int threads) {
  memset(out, 0, sizeof(out));
  return f(a, b, out, threads) == 0 && memcmp(out, ref, sizeof(ref)) == 0;
}
int main(int argc, char** argv) {
  (void)argc;
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) %% 13) - 6.0f;
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) %% 11) * 0.25f;
  for (int round = 0; round < 3; round++) {
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) { printf("dlopen: %%s\n", dlerror()); return 2; }
    gemm_fn f = (gemm_fn)dlsym(lib, "t_gemm_with_threads");
    if (round == 0 && f(a, b, ref, 1) != 0) return 3;
    if (!same(f, 3)) { printf("parent\n"); return 4; }
    pid_t child = fork();
    if (child == 0) _exit(same(f, 3) && same(f, 2) ? 0 : 5);  /* the parent's workers do not exist here */
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { printf("child %%d\n", status); return 6; }
    if (!same(f, 3)) { printf("after fork\n"); return 7; }
    if (dlclose(lib) != 0) return 8;  /* the workers stop before the code they run goes away */
    usleep(2000);
  }
  printf("ok\n");
  return 0;
}
"""


def test_a_fork_child_and_dlclose_are_safe(libs):
  if not have("gcc"): pytest.skip("gcc is not installed")
  tmp, _, _ = libs
  d = tmp / "threaded"
  (d / "lifecycle.c").write_text(LIFECYCLE % {"M": M, "K": K, "N": N})
  exe = d / "lifecycle"
  res = subprocess.run(["gcc", "-O1", "-o", str(exe), str(d / "lifecycle.c"), "-ldl"], capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  run = subprocess.run([str(exe), str(d / f"lib{LIB}.so")], capture_output=True, text=True, timeout=60)
  assert run.returncode == 0 and run.stdout == "ok\n", (run.returncode, run.stdout, run.stderr)
