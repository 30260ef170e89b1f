"""CUDA graphs for the CUDA launcher's multi-kernel entries (`uopc/targets/cuda/launcher.py`).

An entry of several launches pays the host's launch gap before each kernel (2-4 us on an H100, more
than many of its kernels run). Called again with the same arguments, such an entry replays a CUDA graph
of its launches instead: one `cuGraphLaunch`, with the kernels back to back on the GPU.

Invariants:
- What a call computes never depends on the path: the graph holds exactly the launches (and the workspace
  allocation and free, as the graph's own memory nodes) that the direct path queues, with the same
  arguments, captured on a private stream of the context; replayed on the call's stream, it runs after
  what was queued there before and before what is queued after, as the direct launches do.
- A graph is keyed by everything its launches depend on: the context (its function table), the call's
  stream, and every argument (pointers and sizes). Each entry keeps GRAPH_SLOTS keys; a key's first call
  launches directly, its second captures and replays, later ones replay; a new key replaces the oldest
  (its graph is freed when its launches finish: cuGraphExecDestroy). A program that passes new buffers
  at every call therefore never captures.
- One graph is never shared by two streams, so graphs add no ordering between streams.
- A call on a stream that is itself being captured (the application's own graph) launches directly, so
  that its capture records the kernels.
- Graphs are off when the driver lacks a function they need, when UOPC_CUDA_GRAPHS=0 is set in the
  environment at first use, and for the rest of the process after the driver refuses a capture or an
  instantiation (that call then launches directly). A failed argument check or grid check is reported
  as on the direct path; the key is forgotten.
- The cache and captures are under one lock; the lookup and cuGraphLaunch of a replay are too.
"""
from __future__ import annotations

from typing import Sequence

from uopc.launcher import EntryArg, EntryKernels, c_param, launched
from uopc.targets.cuda import multi_device

GRAPH_SLOTS = 4
MIN_LAUNCHES = 2
GRAPH_FUNCTIONS = (  # optional: without any of them (a driver before CUDA 11.4), entries launch directly
  ("StreamIsCapturing", "cuStreamIsCapturing", "CUresult (*{})(CUstream, int*)"),
  ("StreamCreate", "cuStreamCreate", "CUresult (*{})(CUstream*, unsigned)"),
  ("StreamBeginCapture", "cuStreamBeginCapture_v2", "CUresult (*{})(CUstream, int)"),
  ("StreamEndCapture", "cuStreamEndCapture", "CUresult (*{})(CUstream, CUgraph*)"),
  ("GraphInstantiate", "cuGraphInstantiateWithFlags", "CUresult (*{})(CUgraphExec*, CUgraph, unsigned long long)"),
  ("GraphLaunch", "cuGraphLaunch", "CUresult (*{})(CUgraphExec, CUstream)"),
  ("GraphDestroy", "cuGraphDestroy", "CUresult (*{})(CUgraph)"),
  ("GraphExecDestroy", "cuGraphExecDestroy", "CUresult (*{})(CUgraphExec)"),
)
CU_STREAM_NON_BLOCKING, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1, 1


def uses_graph(entry: EntryKernels) -> bool:
  """Whether `entry` replays graphs: a single-device entry of at least MIN_LAUNCHES launches."""
  return not multi_device.entry_devices(entry) and len(launched(entry)) >= MIN_LAUNCHES


def runtime(p: str) -> str:
  """C: the graph driver functions, their loader `PREFIX__load_graphs(lib)` (called by the driver loader),
  the per-context capture streams and `PREFIX__graph_call`, through which each graphed entry runs."""
  fields = "\n".join(f"  {sig.format(field)};" for field, _, sig in GRAPH_FUNCTIONS)
  loads = "\n".join(f'  *(void**)&{p}__cug.{field} = dlsym(lib, "{symbol}");' for field, symbol, _ in GRAPH_FUNCTIONS)
  all_loaded = " && ".join(f"{p}__cug.{field}" for field, _, _ in GRAPH_FUNCTIONS)
  return f"""#include <stdlib.h>
/* CUDA graphs of multi-kernel entries (uopc/targets/cuda/graphs.py): a key's first call launches directly,
   its second captures the launches on the context's capture stream, and later calls replay the graph */
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
enum {{ {p}__GRAPH_SLOTS = {GRAPH_SLOTS} }};
typedef struct {{
  uint64_t* keys;                          /* GRAPH_SLOTS keys of n words: context, stream, arguments */
  int n;
  int state[{p}__GRAPH_SLOTS];             /* 0: free, 1: called once (launched directly), 2: exec[i] replays it */
  CUgraphExec exec[{p}__GRAPH_SLOTS];
  int next;                                /* the slot a new key takes */
}} {p}__graph_cache;
typedef int (*{p}__run_fn)(CUfunction* functions, const void* call, CUstream stream);
static struct {{
{fields}
  int on;
}} {p}__cug;
static pthread_mutex_t {p}__graph_lock = PTHREAD_MUTEX_INITIALIZER;
static CUstream {p}__capture_streams[{p}__MAX_CONTEXTS];

static void {p}__load_graphs(void* lib) {{
  const char* env = getenv("UOPC_CUDA_GRAPHS");
{loads}
  {p}__cug.on = {all_loaded} && !(env != NULL && strcmp(env, "0") == 0);
}}

/* the graph of run(functions, call, .) captured on `capture`: 0, or -1 where the driver refused (*status: run's) */
static int {p}__graph_capture(CUfunction* functions, CUstream capture, {p}__run_fn run, const void* call, CUgraphExec* exec, int* status) {{
  CUgraph graph = NULL;
  if ({p}__cug.StreamBeginCapture(capture, {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL} /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */) != 0) return -1;
  *status = run(functions, call, capture);
  CUresult err = {p}__cug.StreamEndCapture(capture, &graph);
  if (err == 0 && *status == UOPC_OK) err = {p}__cug.GraphInstantiate(exec, graph, 0);
  if (graph != NULL) {p}__cug.GraphDestroy(graph);
  return err == 0 ? 0 : -1;
}}

static int {p}__graph_call({p}__graph_cache* g, const uint64_t* key, CUfunction* functions, CUstream stream, {p}__run_fn run, const void* call) {{
  int capturing = 0, s = 0, status = UOPC_OK;
  if ({p}__cug.StreamIsCapturing == NULL || {p}__cug.StreamIsCapturing(stream, &capturing) != 0 || capturing != 0)
    return run(functions, call, stream);
  pthread_mutex_lock(&{p}__graph_lock);
  if (!{p}__cug.on) {{ pthread_mutex_unlock(&{p}__graph_lock); return run(functions, call, stream); }}
  while (s < {p}__GRAPH_SLOTS && !(g->state[s] != 0 && memcmp(g->keys + s * g->n, key, g->n * sizeof *key) == 0)) s++;
  if (s == {p}__GRAPH_SLOTS) {{  /* a new key: kept, launched directly */
    s = g->next;
    g->next = (s + 1) % {p}__GRAPH_SLOTS;
    if (g->state[s] == 2) {p}__cug.GraphExecDestroy(g->exec[s]);  /* freed when its launches finish */
    memcpy(g->keys + s * g->n, key, g->n * sizeof *key);
    g->state[s] = 1;
    pthread_mutex_unlock(&{p}__graph_lock);
    return run(functions, call, stream);
  }}
  if (g->state[s] == 1) {{  /* the key's second call: capture its launches */
    CUstream* capture = &{p}__capture_streams[((const char*)functions - (const char*){p}__functions) / sizeof({p}__functions[0])];
    int failed = *capture == NULL && {p}__cug.StreamCreate(capture, {CU_STREAM_NON_BLOCKING} /* CU_STREAM_NON_BLOCKING */) != 0;
    if (failed) *capture = NULL;
    else failed = {p}__graph_capture(functions, *capture, run, call, &g->exec[s], &status) != 0;
    if (failed || status != UOPC_OK) {{  /* the driver refused (graphs off from now on) or a check failed: launch directly */
      if (status == UOPC_OK || status >= UOPC_CUDA_ERR_DRIVER) {p}__cug.on = 0;
      g->state[s] = 0;
      pthread_mutex_unlock(&{p}__graph_lock);
      return run(functions, call, stream);
    }}
    g->state[s] = 2;
  }}
  CUresult err = {p}__cug.GraphLaunch(g->exec[s], stream);
  pthread_mutex_unlock(&{p}__graph_lock);
  return err == 0 ? UOPC_OK : UOPC_CUDA_ERR_DRIVER + err;
}}"""


def wrapper(prefix: str, entry: EntryKernels, args: Sequence[EntryArg], prototype: str, checks: Sequence[str],
            body: Sequence[str]) -> str:
  """C: the entry as a run function (`body`: the statements that set `status` launching its kernels on
  `stream`, with `functions` and the arguments in scope) over a struct of its arguments, and the entry
  itself: `checks`, the context's functions, then the run through `PREFIX__graph_call`."""
  p, e = prefix, entry.name
  fields = "".join(f" {c_param(a)};" for a in args)
  unpack = [f"  {c_param(a)} = uopc_args->{a.c_name};" for a in args] + [f"  (void){a.c_name};" for a in args]
  key = ["(uint64_t)(uintptr_t)functions", "(uint64_t)(uintptr_t)stream",
         *(f"(uint64_t)(uintptr_t){a.c_name}" if a.kind == "buffer" else f"(uint64_t){a.c_name}" for a in args)]
  call = ", ".join(a.c_name for a in args) or "0"
  return "\n".join([
    f"struct {p}__call_{e} {{{fields or ' int none;'} }};",
    f"static uint64_t {p}__graph_keys_{e}[{p}__GRAPH_SLOTS * {len(key)}];",
    f"static {p}__graph_cache {p}__graphs_{e} = {{{p}__graph_keys_{e}, {len(key)}, {{0}}, {{0}}, 0}};",
    f"static int {p}__run_{e}(CUfunction* functions, const void* uopc_call, CUstream stream) {{",
    f"  const struct {p}__call_{e}* uopc_args = (const struct {p}__call_{e}*)uopc_call;", "  (void)uopc_args;", *unpack, "  int status = UOPC_OK;",
    *body, "  return status;", "}", "",
    f"{prototype} {{", *checks, "  CUfunction* functions = NULL;",
    f"  int status = {p}__functions_of_context(&functions);", "  if (status != UOPC_OK) return status;",
    f"  const struct {p}__call_{e} uopc_call = {{{call}}};",
    f"  const uint64_t uopc_key[{len(key)}] = {{{', '.join(key)}}};",
    f"  return {p}__graph_call(&{p}__graphs_{e}, uopc_key, functions, stream, {p}__run_{e}, &uopc_call);", "}"])
