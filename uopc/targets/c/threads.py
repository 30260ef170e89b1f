"""THREAD axes on the CPU targets (c, llvm): each kernel with a THREAD axis runs its tasks on worker threads.

A kernel's THREAD RANGE (the outer part of a GLOBAL axis, see uopc.stages.optimize) becomes its
last-but-one kind of argument: `int64_t _uopc_task`, the iteration of that axis one call computes
(`thread_tasks`). The launcher calls the kernel once per task through `uopc_parallel_for`.

Threads: joined per call. `uopc_parallel_for` starts the workers for one kernel launch and joins
them before it returns, so no thread, pool or lock outlives a call and the library keeps no global
mutable state (calls from several threads stay independent). The calling thread works too; a worker
that cannot be started leaves its share to the others, so a launch never fails for lack of threads.
Each thread takes the next task from a counter shared by the launch (an atomic fetch-and-add), so a
thread that a busy core slows down takes fewer tasks instead of holding up the launch's end.

The worker count: the `num_threads` argument of `PREFIX_ENTRY_with_threads` when it is > 0, else the
environment variable UOPC_NUM_THREADS when it holds a positive number (read at each call), else the
number of online cores; never more than the kernel's tasks.
"""
from __future__ import annotations

from uopc.diagnostics import CompileError, error
from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.uop import UOp

TASK_PARAM = "_uopc_task"  # not a name a program can give a DEFINE_VAR of its own: see thread_tasks

POOL_C = r"""
#include <pthread.h>
#include <unistd.h>
typedef void (*uopc_task_fn)(const void* args, int64_t task);
typedef struct uopc_task_queue { uopc_task_fn fn; const void* args; int64_t ntasks, next; } uopc_task_queue;
#define UOPC_MAX_WORKERS 256

/* Run the launch's tasks until none is left; the thread join publishes what they wrote. */
static void* uopc_run_tasks(void* p) {
  uopc_task_queue* q = (uopc_task_queue*)p;
  for (int64_t t; (t = __atomic_fetch_add(&q->next, 1, __ATOMIC_RELAXED)) < q->ntasks;) q->fn(q->args, t);
  return NULL;
}

/* num_threads when > 0, else $UOPC_NUM_THREADS when it is a positive number, else the online cores */
static int64_t uopc_worker_count(int num_threads) {
  if (num_threads > 0) return num_threads;
  const char* env = getenv("UOPC_NUM_THREADS");
  if (env != NULL) {
    char* end = NULL;
    long n = strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0) return n;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? cores : 1;
}

/* Run tasks 0..ntasks-1 of fn on up to the worker count of threads, started here and joined here. */
static void uopc_parallel_for(int num_threads, int64_t ntasks, uopc_task_fn fn, const void* args) {
  int64_t n = uopc_worker_count(num_threads);
  if (n > ntasks) n = ntasks;
  if (n > UOPC_MAX_WORKERS) n = UOPC_MAX_WORKERS;
  uopc_task_queue queue = {fn, args, ntasks, 0};
  pthread_t threads[UOPC_MAX_WORKERS];
  int started[UOPC_MAX_WORKERS];
  for (int64_t w = 1; w < n; w++) started[w] = pthread_create(&threads[w], NULL, uopc_run_tasks, &queue) == 0;
  uopc_run_tasks(&queue);
  for (int64_t w = 1; w < n; w++)
    if (started[w]) pthread_join(threads[w], NULL);
}
"""


def thread_tasks(linear: UOp) -> UOp:
  """The kernel's THREAD RANGE becomes the DEFINE_VAR `_uopc_task` in [0, bound-1] and its END goes:
  one call of the kernel computes one iteration of that axis."""
  threads = [u for u in linear.src if u.op is Ops.RANGE and isinstance(u.arg, tuple) and len(u.arg) == 2 and u.arg[1] is AxisType.THREAD]
  if not threads: return linear
  if len(threads) > 1 or threads[0].src[0].op is not Ops.CONST:
    raise CompileError([error(None, "CPU targets: a kernel runs at most one THREAD axis, of a size known at compile time")])
  if any(u.op is Ops.DEFINE_VAR and u.arg[0] == TASK_PARAM for u in linear.src):
    raise CompileError([error(None, f"CPU targets: the DEFINE_VAR name {TASK_PARAM} is reserved for THREAD axes")])
  r = threads[0]
  memo = {r: UOp(Ops.DEFINE_VAR, dtypes.index, (), (TASK_PARAM, 0, r.src[0].arg - 1))}
  out = []
  for u in linear.src:
    if u.op is Ops.END and u.src[1] is r:
      memo[u] = memo.get(u.src[0], u.src[0])
      continue
    if u is not r: memo[u] = u.replace(src=tuple(memo.get(s, s) for s in u.src)) if any(s in memo for s in u.src) else u
    out.append(memo[u])
  return UOp(Ops.LINEAR, src=tuple(out))


# ---- the launcher's side ---------------------------------------------------------------------------------


def task_param(kernel):
  return next((p for p in kernel.params if p.kind == "var" and p.name == TASK_PARAM), None)


def is_threaded(kernel) -> bool: return task_param(kernel) is not None


def trampoline(kname: str, kernel) -> str:
  """`KNAME_args` (the kernel's other arguments) and `KNAME_task(args, task)`, which calls the kernel."""
  fields, actual = [], []
  for i, p in enumerate(kernel.params):
    if p is task_param(kernel):
      actual.append("task")
      continue
    fields.append(f"int64_t a{i};" if p.kind == "var" else f"{'' if p.written else 'const '}void* a{i};")
    actual.append(f"a->a{i}")
  fields = fields or ["char unused;"]
  return (f"typedef struct {kname}_args {{ {' '.join(fields)} }} {kname}_args;\n"
          f"static void {kname}_task(const void* args, int64_t task) {{\n"
          f"  const {kname}_args* a = (const {kname}_args*)args;\n  (void)a;\n  {kname}({', '.join(actual)});\n}}")


def task_call(kname: str, kernel, actual: list[str]) -> str:
  """The launcher's statement running every task of the kernel; `actual` has one C argument per kernel
  parameter (the task's is ignored)."""
  values = [a for p, a in zip(kernel.params, actual) if p is not task_param(kernel)] or ["0"]
  ntasks = task_param(kernel).vmax + 1
  return f"  {{ {kname}_args uopc_task_args = {{{', '.join(values)}}}; uopc_parallel_for(num_threads, {ntasks}, {kname}_task, &uopc_task_args); }}"
