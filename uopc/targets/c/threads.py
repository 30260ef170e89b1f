"""THREAD axes on the CPU targets (c, llvm): each kernel with a THREAD axis runs its tasks on worker threads.

A kernel's THREAD RANGE (the outer part of a GLOBAL axis, see uopc.stages.optimize) becomes its
last-but-one kind of argument: `int64_t _uopc_task`, the iteration of that axis one call computes
(`thread_tasks`). The launcher calls the kernel once per task through `uopc_parallel_for`.

Threads: a pool per library. The first threaded launch that needs workers starts them (n - 1 for n
threads: the calling thread works too) and the library keeps them, so that a later launch hands its
tasks over in well under a microsecond where starting and joining a thread costs 30 us or more (a
tenth of a 0.3 ms kernel, and more from a Python process): gelu 128x3072 with --cpu native on 2
cores, 0.20 -> 0.135 ms, max_pool 0.11 -> 0.056 ms (tests/bench/RESULTS.md, issue 19). An idle
worker polls for the next launch UOPC_SPIN times (512 pauses: about 12 us on the Zen 5 of the
benchmarks, a pause's length varies by CPU; not when the pool outnumbers the cores), then sleeps on a
condition variable. Only C99 and the pthread calls the per-launch threads used are needed (no clock,
no signal masks): the source still compiles with -std=c99.

The pool is the library's one mutable object: one call at a time uses it (a try-lock), and a call
that finds it in use by another thread starts and joins its own threads per launch as before, so
calls from several threads stay safe and independent. A fork's child starts its own workers (the
pool remembers the process id); the library's destructor (exit, dlclose) stops and joins them
before the code they run goes away. A worker that cannot be started leaves its share to the others,
so a launch never fails for lack of threads. Each thread takes the next task from a counter shared
by the launch (an atomic fetch-and-add), so a thread that a busy core slows down takes fewer tasks
instead of holding up the launch's end; a worker still asleep when the calling thread has run out
of tasks does not hold it up either (it joins a launch only while the launch is open).

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
#include <sched.h>
#include <unistd.h>
typedef void (*uopc_task_fn)(const void* args, int64_t task);
typedef struct uopc_task_queue { uopc_task_fn fn; const void* args; int64_t ntasks, next; } uopc_task_queue;
#define UOPC_MAX_WORKERS 256
#define UOPC_SPIN 512 /* pauses an idle pool worker polls for the next launch before it sleeps (about 12 us on Zen 5; 8192,
                         0.2 ms, kept a core spinning for one library while another ran: float32 gemm 256 0.13 -> 0.11 ms) */
#if defined(__x86_64__) || defined(__i386__)
#define UOPC_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define UOPC_PAUSE() __asm__ __volatile__("yield")
#else
#define UOPC_PAUSE() ((void)0)
#endif

/* Run the launch's tasks until none is left. */
static void uopc_run_queue(uopc_task_queue* q) {
  for (int64_t t; (t = __atomic_fetch_add(&q->next, 1, __ATOMIC_RELAXED)) < q->ntasks;) q->fn(q->args, t);
}
static void* uopc_run_tasks(void* p) { uopc_run_queue((uopc_task_queue*)p); return NULL; }

/* The online cores, asked once per process: sysconf reads /sys on every call (glibc), 30 us of a
   0.1 ms launch (a 4.8 MB copy on 2 cores: 0.093 -> 0.061 ms). */
static long uopc_online_cores(void) {
  static long cores;
  long n = __atomic_load_n(&cores, __ATOMIC_RELAXED);
  if (n == 0) {
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = -1;
    __atomic_store_n(&cores, n, __ATOMIC_RELAXED);
  }
  return n;
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
  long cores = uopc_online_cores();
  return cores > 0 ? cores : 1;
}

/* Threads started for one launch and joined before it returns: the launches of a call that finds the
   pool in use by another thread's call. A worker that cannot be started leaves its share to the others. */
static void uopc_spawn_launch(int64_t n, uopc_task_queue* queue) {
  pthread_t threads[UOPC_MAX_WORKERS];
  int started[UOPC_MAX_WORKERS];
  for (int64_t w = 1; w < n; w++) started[w] = pthread_create(&threads[w], NULL, uopc_run_tasks, queue) == 0;
  uopc_run_queue(queue);
  for (int64_t w = 1; w < n; w++)
    if (started[w]) pthread_join(threads[w], NULL);
}

/* The library's worker pool (the one mutable object of the library): workers started by the first
   threaded launch that needs them and kept, so that a launch hands its tasks over instead of starting
   threads. One call at a time uses it (`owner`); a launch is a generation of `launch`: worker i takes
   part when i < `wanted`, joining through `join` (generation << 32 | closed bit 31 | workers joined)
   until the owner, its own tasks done, closes it and waits for the joined workers (`left`). An idle
   worker polls `launch` UOPC_SPIN times (when the pool does not outnumber the cores), then sleeps
   on `wake`. A fork's child starts its own workers; the library's destructor (exit, dlclose) stops
   and joins them. */
typedef struct uopc_pool {
  pthread_mutex_t owner, sleep;
  pthread_cond_t wake;
  struct {
    int nthreads, spin, sleepers, stop;
    pthread_t threads[UOPC_MAX_WORKERS];
    uint32_t first[UOPC_MAX_WORKERS]; /* the generation each worker starts from */
    pid_t pid;
    uint32_t launch;
    int64_t wanted, left;
    uint64_t join;
    uopc_task_queue queue;
  } s;
} uopc_pool;
static uopc_pool uopc_the_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}};

/* The first generation after `seen`: polled, then waited for. */
static uint32_t uopc_await_launch(uopc_pool* p, uint32_t seen) {
  uint32_t now;
  if (__atomic_load_n(&p->s.spin, __ATOMIC_RELAXED))
    for (int i = 0; i < UOPC_SPIN; i++) {
      if ((now = __atomic_load_n(&p->s.launch, __ATOMIC_ACQUIRE)) != seen) return now;
      UOPC_PAUSE();
    }
  pthread_mutex_lock(&p->sleep);
  __atomic_fetch_add(&p->s.sleepers, 1, __ATOMIC_SEQ_CST);
  while ((now = __atomic_load_n(&p->s.launch, __ATOMIC_SEQ_CST)) == seen) pthread_cond_wait(&p->wake, &p->sleep);
  __atomic_fetch_sub(&p->s.sleepers, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&p->sleep);
  return now;
}

static void* uopc_pool_worker(void* arg) {
  uopc_pool* p = &uopc_the_pool;
  int64_t index = (int64_t)(intptr_t)arg;
  for (uint32_t seen = p->s.first[index];;) {
    seen = uopc_await_launch(p, seen);
    if (__atomic_load_n(&p->s.stop, __ATOMIC_ACQUIRE)) return NULL;
    if (index >= __atomic_load_n(&p->s.wanted, __ATOMIC_RELAXED)) continue;
    uint64_t j = __atomic_load_n(&p->s.join, __ATOMIC_ACQUIRE);
    int joined = 0;
    while (!joined && (uint32_t)(j >> 32) == seen && !(j & 0x80000000u))
      joined = __atomic_compare_exchange_n(&p->s.join, &j, j + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (!joined) continue;
    uopc_run_queue(&p->s.queue);
    __atomic_fetch_add(&p->s.left, 1, __ATOMIC_RELEASE);
  }
}

/* Publish a new generation of `launch` and wake the sleeping workers. */
static void uopc_pool_publish(uopc_pool* p, uint32_t launch) {
  __atomic_store_n(&p->s.launch, launch, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&p->s.sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&p->sleep);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->sleep);
  }
}

/* Workers up to n - 1 (the caller is the n-th); a fork's child forgets its parent's. */
static void uopc_pool_grow(uopc_pool* p, int64_t n) {
  if (p->s.pid != getpid()) {
    p->s.nthreads = 0;
    p->s.pid = getpid();
    pthread_mutex_init(&p->sleep, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->s.sleepers = 0;
  }
  if (p->s.nthreads >= n - 1) return;
  for (; p->s.nthreads < n - 1; p->s.nthreads++) {
    p->s.first[p->s.nthreads] = __atomic_load_n(&p->s.launch, __ATOMIC_RELAXED);
    if (pthread_create(&p->s.threads[p->s.nthreads], NULL, uopc_pool_worker, (void*)(intptr_t)p->s.nthreads) != 0) break;
  }
  long cores = uopc_online_cores();
  __atomic_store_n(&p->s.spin, cores < 1 || p->s.nthreads < cores, __ATOMIC_RELAXED);
}

/* One launch on the pool; 0 when another call holds it. */
static int uopc_pool_launch(int64_t n, uopc_task_queue* queue) {
  uopc_pool* p = &uopc_the_pool;
  if (pthread_mutex_trylock(&p->owner) != 0) return 0;
  uopc_pool_grow(p, n);
  p->s.queue = *queue;
  uint32_t launch = __atomic_load_n(&p->s.launch, __ATOMIC_RELAXED) + 1;
  __atomic_store_n(&p->s.wanted, n - 1, __ATOMIC_RELAXED);
  __atomic_store_n(&p->s.left, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&p->s.join, (uint64_t)launch << 32, __ATOMIC_RELAXED);
  uopc_pool_publish(p, launch);
  uopc_run_queue(&p->s.queue);
  int64_t joined = (int64_t)(__atomic_fetch_or(&p->s.join, 0x80000000u, __ATOMIC_ACQ_REL) & 0x7FFFFFFFu);
  for (unsigned i = 1; __atomic_load_n(&p->s.left, __ATOMIC_ACQUIRE) < joined; i++)
    if (i % 1024 == 0) sched_yield(); else UOPC_PAUSE();
  pthread_mutex_unlock(&p->owner);
  return 1;
}

__attribute__((destructor)) static void uopc_pool_stop(void) {
  uopc_pool* p = &uopc_the_pool;
  if (p->s.nthreads == 0 || p->s.pid != getpid()) return;
  pthread_mutex_lock(&p->owner); /* a call still running on another thread ends first */
  __atomic_store_n(&p->s.stop, 1, __ATOMIC_RELEASE);
  uopc_pool_publish(p, __atomic_load_n(&p->s.launch, __ATOMIC_RELAXED) + 1);
  for (int i = 0; i < p->s.nthreads; i++) pthread_join(p->s.threads[i], NULL);
  p->s.nthreads = 0;
  pthread_mutex_unlock(&p->owner);
}

/* Run tasks 0..ntasks-1 of fn on up to the worker count of threads, the calling thread one of them. */
static void uopc_parallel_for(int num_threads, int64_t ntasks, uopc_task_fn fn, const void* args) {
  int64_t n = uopc_worker_count(num_threads);
  if (n > ntasks) n = ntasks;
  if (n > UOPC_MAX_WORKERS) n = UOPC_MAX_WORKERS;
  uopc_task_queue queue = {fn, args, ntasks, 0};
  if (n <= 1) uopc_run_queue(&queue);
  else if (!uopc_pool_launch(n, &queue)) uopc_spawn_launch(n, &queue);
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
