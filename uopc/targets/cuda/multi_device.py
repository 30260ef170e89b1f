"""The CUDA launcher's multi-device entries (`uopc/targets/cuda/launcher.py` renders the rest).

A multi-device entry (its launches on more than one device, `uopc.stages.multi_device`) takes, after its
device buffer pointers and sizes, one `CUstream stream_<i>` per device, in the order in which its buffer
arguments first name the devices (the header comment lists them). Each launch runs on its device's
stream in that stream's context (`cuStreamGetCtx`, pushed around the launch), with the library's module
loaded there. Invariants:
- Program order: the launches run one after the other across the streams: a launch on another stream
  than the previous one first makes its stream wait for an event recorded on the previous one (events
  are created per call and destroyed once waited on). So copies (kernels of the destination device
  reading the source device's buffer) and the reuse of workspace memory keep the schedule's order.
- Copies read peer memory: peer access is enabled between every two distinct contexts of the call
  (`cuCtxEnablePeerAccess`, "already enabled" is no error). Two logical devices may be one GPU (the
  same stream or context twice): then nothing is enabled and no event is needed between equal streams.
- The workspace (intermediates of every device) is allocated on the first device's stream before any
  launch and freed there after the last one. The entry's work is done when all its streams are.
"""
from __future__ import annotations

from typing import Any

from uopc.launcher import EntryArg, EntryKernels

CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CU_EVENT_DISABLE_TIMING = 2
DRIVER_FUNCTIONS = (  # (field, symbol, signature): loaded only by libraries with a multi-device entry
  ("StreamGetCtx", "cuStreamGetCtx", "CUresult (*{})(CUstream, CUcontext*)"),
  ("CtxPushCurrent", "cuCtxPushCurrent_v2", "CUresult (*{})(CUcontext)"),
  ("CtxPopCurrent", "cuCtxPopCurrent_v2", "CUresult (*{})(CUcontext*)"),
  ("CtxEnablePeerAccess", "cuCtxEnablePeerAccess", "CUresult (*{})(CUcontext, unsigned)"),
  ("EventCreate", "cuEventCreate", "CUresult (*{})(CUevent*, unsigned)"),
  ("EventRecord", "cuEventRecord", "CUresult (*{})(CUevent, CUstream)"),
  ("EventDestroy", "cuEventDestroy_v2", "CUresult (*{})(CUevent)"),
  ("StreamWaitEvent", "cuStreamWaitEvent", "CUresult (*{})(CUstream, CUevent, unsigned)"),
)


def entry_devices(entry: EntryKernels) -> tuple[Any, ...]:
  """The devices of a multi-device entry, in the order its buffers (by slot), then its launches, name
  them; () for an entry on one device."""
  buffers = sorted({b.slot: b for ln in entry.launches or () for _, b in ln.binds}.values(), key=lambda b: b.slot)
  found = [b.device for b in buffers] + [ln.device for ln in entry.launches or ()]
  devices = tuple(dict.fromkeys(d for d in found if d is not None))
  return devices if len(devices) > 1 else ()


def stream_params(entry: EntryKernels) -> list[str]:
  return [f"CUstream stream_{i}" for i in range(len(entry_devices(entry)))]


def stream_note(entry: EntryKernels) -> str:
  devices = entry_devices(entry)
  return ", ".join(f"stream_{i} runs {d}" for i, d in enumerate(devices))


def runtime(p: str) -> str:
  """The helpers of multi-device entries: contexts of the streams, modules and peer access; ordering."""
  return f"""/* the context of each stream, the library's functions there, and peer access between distinct contexts */
static int {p}__devices(int n, const CUstream* streams, CUcontext* ctxs, CUfunction** functions) {{
  pthread_once(&{p}__cu_once, {p}__load_cuda);
  if (!{p}__cu.loaded) return UOPC_CUDA_ERR_NO_DRIVER;
  for (int i = 0; i < n; i++) {{
    CUresult err = {p}__cu.StreamGetCtx(streams[i], &ctxs[i]);
    if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
    if (ctxs[i] == NULL) return UOPC_CUDA_ERR_NO_CONTEXT;
    int status = {p}__functions_of(ctxs[i], &functions[i]);
    if (status != UOPC_OK) return status;
  }}
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {{
      if (ctxs[i] == ctxs[j]) continue;
      CUcontext popped;
      CUresult err = {p}__cu.CtxPushCurrent(ctxs[i]);
      if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
      err = {p}__cu.CtxEnablePeerAccess(ctxs[j], 0);
      {p}__cu.CtxPopCurrent(&popped);
      if (err != 0 && err != {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED}) return UOPC_CUDA_ERR_DRIVER + err;
    }}
  return UOPC_OK;
}}

/* stream `to` waits for what is queued on stream `from` so far (nothing to do on one stream) */
static int {p}__follow(const CUstream* streams, const CUcontext* ctxs, int from, int to) {{
  if (from == to || streams[from] == streams[to]) return UOPC_OK;
  CUevent event = NULL;
  CUcontext popped;
  CUresult err = {p}__cu.CtxPushCurrent(ctxs[from]);
  if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
  if ((err = {p}__cu.EventCreate(&event, {CU_EVENT_DISABLE_TIMING})) == 0) {{
    if ((err = {p}__cu.EventRecord(event, streams[from])) == 0) err = {p}__cu.StreamWaitEvent(streams[to], event, 0);
    {p}__cu.EventDestroy(event);  /* released once the wait is done */
  }}
  {p}__cu.CtxPopCurrent(&popped);
  return err == 0 ? UOPC_OK : UOPC_CUDA_ERR_DRIVER + err;
}}"""


def wrapper(p: str, entry: EntryKernels, args: list[EntryArg], prototype: str, checks: list[str], launch_lines) -> str:
  """The entry function: `launch_lines(i)` gives the launch block of the entry's i-th launch, which uses
  the locals `stream` and `functions` (set here to its device's) and breaks out on failure."""
  from uopc.targets.cuda.launcher import CUDA_ERROR_OUT_OF_MEMORY
  devices = entry_devices(entry)
  n = len(devices)
  body = []
  prev = 0
  for i, ln in enumerate(entry.launches):
    j = devices.index(ln.device) if ln.device in devices else 0
    body += [f"    /* launch {i} on {ln.device}{' (a copy)' if ln.peers else ''} */",
             f"    if ((status = {p}__follow(streams, ctxs, {prev}, {j})) != UOPC_OK) break;",
             f"    if ((err = {p}__cu.CtxPushCurrent(ctxs[{j}])) != 0) {{ status = UOPC_CUDA_ERR_DRIVER + err; break; }}",
             "    do {  /* a failed launch breaks out of this loop only: the context is popped */",
             f"      CUstream stream = streams[{j}];", f"      CUfunction* functions = fns[{j}];",
             *["  " + line for line in launch_lines(i)], "    } while (0);",
             f"    {p}__cu.CtxPopCurrent(&popped);", "    if (status != UOPC_OK) break;"]
    prev = j
  alloc, free = [], []
  if entry.workspace is not None:
    alloc = ["  CUdeviceptr workspace = 0;", f"  {p}__cu.CtxPushCurrent(ctxs[0]);",
             f"  err = {p}__cu.MemAllocAsync(&workspace, {entry.workspace.size}, streams[0]);",
             f"  {p}__cu.CtxPopCurrent(&popped);",
             f"  if (err != 0) return err == {CUDA_ERROR_OUT_OF_MEMORY} ? UOPC_ERR_NO_MEMORY : UOPC_CUDA_ERR_DRIVER + err;"]
    free = [f"  int after = {p}__follow(streams, ctxs, {prev}, 0);  /* the workspace is freed after the last launch */",
            f"  {p}__cu.CtxPushCurrent(ctxs[0]);", f"  err = {p}__cu.MemFreeAsync(workspace, streams[0]);",
            f"  {p}__cu.CtxPopCurrent(&popped);",
            "  if (status == UOPC_OK) status = after != UOPC_OK ? after : err != 0 ? UOPC_CUDA_ERR_DRIVER + err : UOPC_OK;"]
  streams = ", ".join(f"stream_{i}" for i in range(n))
  return "\n".join([f"{prototype} {{", *checks, f"  CUstream streams[{n}] = {{{streams}}};", f"  CUcontext ctxs[{n}];",
                    f"  CUfunction* fns[{n}];", "  CUcontext popped;", "  CUresult err = 0;",
                    f"  int status = {p}__devices({n}, streams, ctxs, fns);", "  if (status != UOPC_OK) return status;",
                    *alloc, "  do {", *body, "  } while (0);", *free, "  (void)err; (void)popped;", "  return status;", "}"])
