"""The CUDA launcher's multi-device entries (`uopc/targets/cuda/launcher.py` renders the rest).

A multi-device entry (its launches on more than one device, `uopc.stages.multi_device`) takes, after its
device buffer pointers and sizes, one `CUstream stream_<i>` per device, in the order in which its buffer
arguments first name the devices (the header comment lists them). Each launch runs on its device's
stream in that stream's context (`cuStreamGetCtx`, pushed around the launch), with the library's module
loaded there. Invariants:
- Program order: the launches run one after the other across the streams: an operation on another
  stream than the previous one first makes its stream wait for an event recorded on the previous one
  (events are created per call and destroyed once waited on); after a collective run by NCCL (on every
  stream), the next operation waits for every stream. So copies and the reuse of workspace memory keep
  the schedule's order.
- Copies between devices: a launch that copies one contiguous range (`Launch.copy`) is a
  `cuMemcpyPeerAsync` between the two contexts on the destination's stream, a `cuMemcpyDtoDAsync`
  within one context; any other copy is a kernel of the destination device reading the source's memory.
  Peer access is enabled between every two distinct contexts of the call (`cuCtxEnablePeerAccess`,
  "already enabled" is no error). Two logical devices may be one GPU (the same stream or context twice):
  then nothing is enabled and no event is needed between equal streams.
- Workspaces: each device's intermediates live in that device's own workspace (its span of the plan,
  `Workspace.devices`), allocated on its stream in its context before any launch and freed there after
  the last one; when NCCL runs the collectives, only up to the last intermediate still used.
- Collectives (`EntryKernels.collectives`): one NCCL call in place of their launches when the call's
  devices allow it (`uopc/targets/cuda/nccl.py`), else their launches.
The entry's work is done when all its streams are.
"""
from __future__ import annotations

from typing import Any

from uopc.launcher import EntryArg, EntryKernels, comment_text, launched
from uopc.stages.plan import ALIGN, buffer_nbytes
from uopc.targets.cuda import nccl
from uopc.targets.geometry import launch_block

CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CU_EVENT_DISABLE_TIMING = 2
CUDA_ERROR_OUT_OF_MEMORY = 2
DRIVER_FUNCTIONS = (  # (field, symbol, signature): loaded only by libraries with a multi-device entry
  ("StreamGetCtx", "cuStreamGetCtx", "CUresult (*{})(CUstream, CUcontext*)"),
  ("CtxPushCurrent", "cuCtxPushCurrent_v2", "CUresult (*{})(CUcontext)"),
  ("CtxPopCurrent", "cuCtxPopCurrent_v2", "CUresult (*{})(CUcontext*)"),
  ("CtxSetCurrent", "cuCtxSetCurrent", "CUresult (*{})(CUcontext)"),
  ("CtxGetDevice", "cuCtxGetDevice", "CUresult (*{})(int*)"),
  ("CtxEnablePeerAccess", "cuCtxEnablePeerAccess", "CUresult (*{})(CUcontext, unsigned)"),
  ("EventCreate", "cuEventCreate", "CUresult (*{})(CUevent*, unsigned)"),
  ("EventRecord", "cuEventRecord", "CUresult (*{})(CUevent, CUstream)"),
  ("EventDestroy", "cuEventDestroy_v2", "CUresult (*{})(CUevent)"),
  ("StreamWaitEvent", "cuStreamWaitEvent", "CUresult (*{})(CUstream, CUevent, unsigned)"),
  ("MemcpyPeerAsync", "cuMemcpyPeerAsync", "CUresult (*{})(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream)"),
  ("MemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2", "CUresult (*{})(CUdeviceptr, CUdeviceptr, size_t, CUstream)"),
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
  return comment_text(", ".join(f"stream_{i} runs {d}" for i, d in enumerate(devices)))


def _nccl_collectives(entry: EntryKernels) -> list:
  """The collectives NCCL may run: a dtype and op it has, over every device of the entry."""
  n = len(entry_devices(entry))
  return [c for c in entry.collectives if nccl.supported(c) and len({b.device for b in c.inputs}) == n == len(c.inputs)]


def collective_note(entry: EntryKernels) -> str:
  """What the header says about an entry's collectives."""
  m, k = len(entry.collectives), len(_nccl_collectives(entry))
  if not m: return ""
  if not k: return f"Its {m} allreduce(s) run as copies and reductions (NCCL has not their dtype or op)."
  return (f"{k} of its {m} allreduce(s) run through NCCL when PREFIX_nccl_init set up a communicator per GPU of\n"
          "   the streams (all distinct GPUs), else as copies and reductions.")


def runtime(p: str) -> str:
  """The helpers of multi-device entries: contexts of the streams, modules and peer access; ordering;
  workspaces and copies."""
  return f"""/* the context of each stream, the library's functions there, and peer access between distinct contexts */
static int {p}__devices(int n, const CUstream* streams, CUcontext* ctxs, CUfunction** functions) {{
  pthread_once(&{p}__cu_once, {p}__load_cuda);
  if (!{p}__cu.loaded) return UOPC_CUDA_ERR_NO_DRIVER;
  for (int i = 0; i < n; i++) {{
    CUresult err = {p}__cu.StreamGetCtx(streams[i], &ctxs[i]);
    if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
    if (ctxs[i] == NULL) return UOPC_CUDA_ERR_NO_CONTEXT;
    CUcontext popped;  /* the module (and its constant data) is loaded into the current context: make it the stream's */
    if ((err = {p}__cu.CtxPushCurrent(ctxs[i])) != 0) return UOPC_CUDA_ERR_DRIVER + err;
    int status = {p}__functions_of(ctxs[i], &functions[i]);
    {p}__cu.CtxPopCurrent(&popped);
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
static int {p}__follow1(const CUstream* streams, const CUcontext* ctxs, int from, int to) {{
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
}}

/* stream `to` waits for stream `from`, or for all n streams when `from` is -1 (after a collective) */
static int {p}__follow(const CUstream* streams, const CUcontext* ctxs, int n, int from, int to) {{
  if (from >= 0) return {p}__follow1(streams, ctxs, from, to);
  for (int k = 0; k < n; k++) {{
    int status = {p}__follow1(streams, ctxs, k, to);
    if (status != UOPC_OK) return status;
  }}
  return UOPC_OK;
}}

/* `size` bytes of workspace on a device's stream, in its context */
static int {p}__alloc(CUcontext ctx, CUstream stream, size_t size, CUdeviceptr* out) {{
  CUcontext popped;
  CUresult err = {p}__cu.CtxPushCurrent(ctx);
  if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
  err = {p}__cu.MemAllocAsync(out, size, stream);
  {p}__cu.CtxPopCurrent(&popped);
  if (err != 0) {{ *out = 0; return err == {CUDA_ERROR_OUT_OF_MEMORY} ? UOPC_ERR_NO_MEMORY : UOPC_CUDA_ERR_DRIVER + err; }}
  return UOPC_OK;
}}

/* `size` bytes from `src` (in `src_ctx`) to `dst` (in `dst_ctx`, current) on `stream`: peer to peer between
   two contexts, device to device within one */
static int {p}__copy(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t size, CUstream stream) {{
  if (size == 0) return UOPC_OK;
  CUresult err = dst_ctx == src_ctx ? {p}__cu.MemcpyDtoDAsync(dst, src, size, stream)
                                    : {p}__cu.MemcpyPeerAsync(dst, dst_ctx, src, src_ctx, size, stream);
  return err == 0 ? UOPC_OK : UOPC_CUDA_ERR_DRIVER + err;
}}

{nccl.runtime(p)}"""


class _Entry:
  """What the wrapper of one multi-device entry needs: its devices, arguments and workspace spans."""

  def __init__(self, p: str, entry: EntryKernels, args: list[EntryArg], first: int, datas: dict[int, int] | None = None,
               data_local: str = ""):
    self.p, self.entry, self.first, self.datas, self.data_local = p, entry, first, datas or {}, data_local
    self.devices = entry_devices(entry)
    self.by_key = {(a.kind, a.key): a for a in args}
    ws = entry.workspace
    self.offsets = dict(ws.offsets) if ws else {}
    # workspace s: (device, base, size), a span of the plan; a plan without spans is one, on the first device
    self.spans = [t for t in ws.devices if t[2]] if ws and ws.devices else [(self.devices[0], 0, ws.size)] if ws else []
    self.span_of = {slot: next(s for s, (_, base, size) in enumerate(self.spans) if base <= off < base + size)
                    for slot, off in self.offsets.items()}
    self.nccl_sizes = self._sizes_without(self._interior(_nccl_collectives(entry)))

  def _interior(self, collectives) -> set[int]:
    """The workspace slots only the launches of these collectives use (unused when NCCL runs them)."""
    inside = {i for c in collectives for i in range(c.first, c.end)}
    kept = {b.slot for c in collectives for b in c.inputs + c.outputs}
    kept |= {b.slot for i, ln in enumerate(self.entry.launches) if i not in inside for _, b in ln.binds}
    return {b.slot for i in inside for _, b in self.entry.launches[i].binds if b.slot in self.offsets and b.slot not in kept}

  def _sizes_without(self, unused: set[int]) -> list[int]:
    """Each workspace's size when the `unused` slots need no room: up to the end of the last one used."""
    buffers = {b.slot: b for ln in self.entry.launches for _, b in ln.binds}
    ends = [0] * len(self.spans)
    for slot, off in self.offsets.items():
      if slot not in unused:
        s = self.span_of[slot]
        ends[s] = max(ends[s], off - self.spans[s][1] + buffer_nbytes(buffers[slot]))
    return [(e + ALIGN - 1) // ALIGN * ALIGN for e in ends]

  def index(self, device) -> int: return self.devices.index(device) if device in self.devices else 0

  def pointer(self, slot: int) -> str:
    """A buffer's device pointer as a C expression: an argument, or an offset into its device's workspace."""
    if slot not in self.offsets: return f"(CUdeviceptr)(uintptr_t){self.by_key[('buffer', slot)].c_name}"
    s = self.span_of[slot]
    return f"workspaces[{s}] + {self.offsets[slot] - self.spans[s][1]}"

  def launch(self, i: int) -> list[str]:
    """The statements of launch i (in its device's pushed context, `stream` and `functions` its device's)."""
    ln = self.entry.launches[i]
    k, kernel = launched(self.entry)[i]
    if ln.copy is None:
      offsets = {s: self.pointer(s) for s in self.offsets}
      return launch_block(self.p, self.first + k, kernel, self.by_key, offsets, "CUdeviceptr ws{i} = {offset};", "break", "    ",
                          self.datas, self.data_local, shared=True)
    dst, src = ln.buffer(ln.copy.dst), ln.buffer(ln.copy.src)
    size = src.dtype.itemsize
    return [f"      status = {self.p}__copy({self.pointer(dst.slot)}, ctxs[{self.index(dst.device)}], {self.pointer(src.slot)} + "
            f"{ln.copy.offset * size}, ctxs[{self.index(src.device)}], {ln.copy.count * size}, stream);",
            "      if (status != UOPC_OK) break;"]


def _launch_lines(e: _Entry, i: int) -> list[str]:
  ln, p = e.entry.launches[i], e.p
  j = e.index(ln.device)
  what = " (a copy, memory to memory)" if ln.copy else " (a copy)" if ln.peers else ""
  return [f"    /* launch {i} on {comment_text(str(ln.device))}{what} */",
          f"    if ((status = {p}__follow(streams, ctxs, {len(e.devices)}, prev, {j})) != UOPC_OK) break;", f"    prev = {j};",
          f"    if ((err = {p}__cu.CtxPushCurrent(ctxs[{j}])) != 0) {{ status = UOPC_CUDA_ERR_DRIVER + err; break; }}",
          "    do {  /* a failed launch breaks out of this loop only: the context is popped */",
          f"      CUstream stream = streams[{j}];", *([] if ln.copy else [f"      CUfunction* functions = fns[{j}];"]),
          *e.launch(i), "    } while (0);", f"    {p}__cu.CtxPopCurrent(&popped);", "    if (status != UOPC_OK) break;"]


def _collective_lines(e: _Entry, c, composed: list[str]) -> list[str]:
  """NCCL in place of the collective's launches when `nccl` says so, else the launches (`composed`)."""
  p, n, m = e.p, len(e.devices), len(c.inputs)
  ranks = [e.index(b.device) for b in c.inputs]
  return [f"    if (nccl) {{  /* {comment_text(c.describe())}: through NCCL */",
          f"      const CUdeviceptr in[{m}] = {{{', '.join(e.pointer(b.slot) for b in c.inputs)}}};",
          f"      const CUdeviceptr out[{m}] = {{{', '.join(e.pointer(b.slot) for b in c.outputs)}}};",
          f"      const CUstream ranks[{m}] = {{{', '.join(f'streams[{k}]' for k in ranks)}}};",
          f"      const ncclComm_t comm[{m}] = {{{', '.join(f'comms[{k}]' for k in ranks)}}};",
          f"      for (int k = 0; k < {n} && status == UOPC_OK; k++) status = {p}__follow(streams, ctxs, {n}, prev, k);",
          "      if (status != UOPC_OK) break;",
          f"      if ((status = {p}__nccl_allreduce({m}, in, out, {c.count}, {nccl.DTYPES[c.inputs[0].dtype.scalar]}, "
          f"{nccl.OPS[c.op]}, comm, ranks)) != UOPC_OK) break;",
          "      prev = -1;", "    } else {", *["  " + line for line in composed], "    }"]


def _body(e: _Entry) -> list[str]:
  through = {c.first: c for c in _nccl_collectives(e.entry)}
  body, i = [], 0
  while i < len(e.entry.launches):
    if (c := through.get(i)) is not None:
      body += _collective_lines(e, c, [line for j in range(c.first, c.end) for line in _launch_lines(e, j)])
      i = c.end
    else:
      body += _launch_lines(e, i)
      i += 1
  return body


def wrapper(p: str, entry: EntryKernels, args: list[EntryArg], prototype: str, checks: list[str], first: int,
            datas: dict[int, int] | None = None, data_local: str = "") -> str:
  """The entry function (`first`: the index of its first kernel in the library's function table; `datas`,
  `data_local`: its kernels' constant data, as `launch_block` takes them)."""
  e = _Entry(p, entry, args, first, datas, data_local)
  n = len(e.devices)
  uses_nccl = bool(_nccl_collectives(entry))
  nccl_setup = [f"  ncclComm_t comms[{n}];", "  int nccl = 0;  /* 1: NCCL runs the collectives */",
                f"  if ((status = {p}__nccl_comms({n}, ctxs, comms, &nccl)) != UOPC_OK) return status;"] if uses_nccl else []
  spans = [(s, e.index(d), size) for s, (d, _, size) in enumerate(e.spans)]
  def alloc_line(s: int, k: int, full: int, device) -> str:  # what NCCL leaves unused is not allocated when it runs
    size, when = str(full), ""
    if uses_nccl and e.nccl_sizes[s] == 0: when = " && !nccl"
    elif uses_nccl and e.nccl_sizes[s] != full: size = f"(nccl ? {e.nccl_sizes[s]} : {full})"
    return f"  if (status == UOPC_OK{when}) status = {p}__alloc(ctxs[{k}], streams[{k}], {size}, &workspaces[{s}]);  /* on {comment_text(str(device))} */"
  alloc = [alloc_line(s, k, full, d) for (s, k, full), (d, _, _) in zip(spans, e.spans)]
  join = [f"  for (int k = 0; k < {n}; k++) {{  /* every stream waits for the last operation: syncing any one waits for all */",
          f"    int after = {p}__follow(streams, ctxs, {n}, prev, k);", "    if (status == UOPC_OK) status = after;", "  }"]
  free = [line for s, k, _ in spans for line in (
          f"  if (workspaces[{s}] != 0) {{  /* freed on its device's stream, after the last operation */",
          f"    {p}__cu.CtxPushCurrent(ctxs[{k}]);", f"    err = {p}__cu.MemFreeAsync(workspaces[{s}], streams[{k}]);",
          f"    {p}__cu.CtxPopCurrent(&popped);", "    if (status == UOPC_OK && err != 0) status = UOPC_CUDA_ERR_DRIVER + err;", "  }")]
  streams = ", ".join(f"stream_{i}" for i in range(n))
  return "\n".join([f"{prototype} {{", *checks, f"  CUstream streams[{n}] = {{{streams}}};", f"  CUcontext ctxs[{n}];",
                    f"  CUfunction* fns[{n}];", f"  CUdeviceptr workspaces[{max(len(spans), 1)}] = {{0}};", "  CUcontext popped;",
                    "  CUresult err = 0;", "  int prev = -1;  /* the stream of the last operation queued; -1: every stream (the work before the call) */",
                    f"  int status = {p}__devices({n}, streams, ctxs, fns);", "  if (status != UOPC_OK) return status;",
                    *nccl_setup, *alloc, "  if (status == UOPC_OK) do {", *_body(e), "  } while (0);", *join, *free,
                    "  (void)err; (void)popped; (void)workspaces;", "  return status;", "}"])
