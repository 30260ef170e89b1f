"""NCCL in the CUDA launcher: the collectives of a multi-device entry (`KernelProgram.collectives`) through
`libnccl.so.2`, loaded with dlopen at run time like libcuda (no NCCL header or SDK at build time: the few
types, enums and functions used are declared here, as NCCL's nccl.h defines them).

A library with a multi-device entry exports (named in the header):
- `int PREFIX_nccl_init(int num_devices, const int* devices)`: one communicator per CUDA device ordinal
  given (ncclCommInitAll, a single process driving them all), kept by the library until
  `PREFIX_nccl_teardown()`; called again, it replaces them. It returns UOPC_CUDA_ERR_NO_NCCL when NCCL is
  off (libnccl.so.2 missing, a function missing, or UOPC_NCCL=0 in the environment when NCCL is first
  needed), else 0 or UOPC_CUDA_ERR_NCCL + the ncclResult_t.
- `void PREFIX_nccl_teardown(void)` (ncclCommDestroy of each) and `int PREFIX_nccl_num_devices(void)`.

Invariants of an entry call:
- NCCL runs its collectives when its devices (the CUDA devices of its streams' contexts) are distinct,
  as many as the communicators, and each has one; else (and for a collective NCCL has no dtype or op
  for) the composed copies and reductions run. So two logical devices on one GPU always compose: NCCL
  needs each rank on its own GPU.
- A collective through NCCL is one ncclGroupStart/End with a ncclAllReduce per device on that device's
  stream, after every stream has waited for the work before it; the calling thread's current context is
  restored after it (NCCL works through the runtime's current device).
- The communicators are shared state: the library's lock guards init, teardown and their lookup; NCCL
  itself wants the calls that use one communicator issued from one thread at a time.
"""
from __future__ import annotations

from uopc.dtype import dtypes

# ncclDataType_t and ncclRedOp_t values (nccl.h, stable since NCCL 2.10; bfloat16 is 9)
DTYPES = {dtypes.int8: 0, dtypes.uint8: 1, dtypes.int32: 2, dtypes.uint32: 3, dtypes.int64: 4, dtypes.uint64: 5,
          dtypes.float16: 6, dtypes.float32: 7, dtypes.float64: 8, dtypes.bfloat16: 9}
OPS = {"ADD": 0, "MUL": 1, "MAX": 2}  # ncclSum, ncclProd, ncclMax
MAX_DEVICES = 64
STATUS = (("UOPC_CUDA_ERR_NO_NCCL", 104, "NCCL is off: libnccl.so.2 or one of its functions was not found, or UOPC_NCCL=0"),)
NCCL_ERROR_BASE = ("UOPC_CUDA_ERR_NCCL", 2000, "NCCL reported an error")
PUBLIC = ("nccl_init", "nccl_teardown", "nccl_num_devices")
_FUNCTIONS = (  # (field, symbol, signature)
  ("CommInitAll", "ncclCommInitAll", "int (*{})(ncclComm_t*, int, const int*)"),
  ("CommDestroy", "ncclCommDestroy", "int (*{})(ncclComm_t)"),
  ("GroupStart", "ncclGroupStart", "int (*{})(void)"),
  ("GroupEnd", "ncclGroupEnd", "int (*{})(void)"),
  ("AllReduce", "ncclAllReduce", "int (*{})(const void*, void*, size_t, int, int, ncclComm_t, CUstream)"),
  ("GetErrorString", "ncclGetErrorString", "const char* (*{})(int)"),
)


def supported(collective) -> bool:
  """Whether NCCL has the collective's dtype and op (else it always runs composed)."""
  return collective.kind == "allreduce" and collective.op in OPS and collective.inputs[0].dtype.scalar in DTYPES


def header_declarations(prefix: str) -> str:
  return f"""/* NCCL for the collectives of multi-device entries (libnccl.so.2, loaded at first use; UOPC_NCCL=0 turns
   it off): communicators for these CUDA device ordinals, kept until teardown; 0, UOPC_CUDA_ERR_NO_NCCL when
   NCCL is off, or UOPC_CUDA_ERR_NCCL + ncclResult_t. num_devices: how many communicators are up (0: none). */
int {prefix}_nccl_init(int num_devices, const int* devices);
void {prefix}_nccl_teardown(void);
int {prefix}_nccl_num_devices(void);"""


def runtime(p: str) -> str:
  """The loader, the communicators and the per-call helpers (after the CUDA loader and `__devices`)."""
  fields = "\n".join(f"  {sig.format(field)};" for field, _, sig in _FUNCTIONS)
  loads = "\n".join(f'  *(void**)&{p}__nccl.{field} = dlsym(lib, "{symbol}");' for field, symbol, _ in _FUNCTIONS)
  all_loaded = " && ".join(f"{p}__nccl.{field}" for field, _, _ in _FUNCTIONS)
  code = NCCL_ERROR_BASE[0]
  return f"""#include <stdlib.h>
typedef struct ncclComm* ncclComm_t;
static struct {{
{fields}
  int loaded;
}} {p}__nccl;
static pthread_once_t {p}__nccl_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t {p}__nccl_lock = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t {p}__comms[{MAX_DEVICES}];
static int {p}__comm_devices[{MAX_DEVICES}];
static int {p}__num_comms;

static void {p}__load_nccl(void) {{
  const char* off = getenv("UOPC_NCCL");
  if (off != NULL && strcmp(off, "0") == 0) return;
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
{loads}
  {p}__nccl.loaded = {all_loaded};
}}

static int {p}__nccl_ready(void) {{
  pthread_once(&{p}__nccl_once, {p}__load_nccl);
  return {p}__nccl.loaded;
}}

static void {p}__destroy_comms(void) {{
  for (int i = 0; i < {p}__num_comms; i++) {p}__nccl.CommDestroy({p}__comms[i]);
  {p}__num_comms = 0;
}}

#pragma GCC visibility push(default)
int {p}_nccl_init(int num_devices, const int* devices) {{
  if (!{p}__nccl_ready()) return UOPC_CUDA_ERR_NO_NCCL;
  if (devices == NULL) return UOPC_ERR_NULL_POINTER;
  if (num_devices < 1 || num_devices > {MAX_DEVICES}) return {code} + 4;  /* ncclInvalidArgument */
  pthread_once(&{p}__cu_once, {p}__load_cuda);
  CUcontext current = NULL;
  if ({p}__cu.loaded) {p}__cu.CtxGetCurrent(&current);
  pthread_mutex_lock(&{p}__nccl_lock);
  {p}__destroy_comms();
  int r = {p}__nccl.CommInitAll({p}__comms, num_devices, devices);
  if (r == 0) {{
    for (int i = 0; i < num_devices; i++) {p}__comm_devices[i] = devices[i];
    {p}__num_comms = num_devices;
  }}
  pthread_mutex_unlock(&{p}__nccl_lock);
  if ({p}__cu.loaded) {p}__cu.CtxSetCurrent(current);  /* NCCL changes the runtime's current device */
  return r == 0 ? UOPC_OK : {code} + r;
}}

void {p}_nccl_teardown(void) {{
  if (!{p}__nccl_ready()) return;
  pthread_mutex_lock(&{p}__nccl_lock);
  {p}__destroy_comms();
  pthread_mutex_unlock(&{p}__nccl_lock);
}}

int {p}_nccl_num_devices(void) {{
  if (!{p}__nccl_ready()) return 0;
  pthread_mutex_lock(&{p}__nccl_lock);
  int n = {p}__num_comms;
  pthread_mutex_unlock(&{p}__nccl_lock);
  return n;
}}
#pragma GCC visibility pop

/* the communicator of each of a call's n devices (contexts); *use = 0 when NCCL cannot run its collectives:
   NCCL off, a device without a communicator, two devices on one GPU, or not as many devices as communicators */
static int {p}__nccl_comms(int n, const CUcontext* ctxs, ncclComm_t* comms, int* use) {{
  *use = 0;
  if (!{p}__nccl_ready()) return UOPC_OK;
  int ordinals[{MAX_DEVICES}];
  if (n > {MAX_DEVICES}) return UOPC_OK;
  for (int i = 0; i < n; i++) {{
    CUcontext popped;
    CUresult err = {p}__cu.CtxPushCurrent(ctxs[i]);
    if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
    err = {p}__cu.CtxGetDevice(&ordinals[i]);  /* a CUdevice is its ordinal, what ncclCommInitAll took */
    {p}__cu.CtxPopCurrent(&popped);
    if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
    for (int j = 0; j < i; j++) if (ordinals[j] == ordinals[i]) return UOPC_OK;  /* one GPU twice */
  }}
  pthread_mutex_lock(&{p}__nccl_lock);
  int found = n == {p}__num_comms;
  for (int i = 0; i < n && found; i++) {{
    int c = 0;
    while (c < {p}__num_comms && {p}__comm_devices[c] != ordinals[i]) c++;
    if (c == {p}__num_comms) found = 0;
    else comms[i] = {p}__comms[c];
  }}
  pthread_mutex_unlock(&{p}__nccl_lock);
  *use = found;
  return UOPC_OK;
}}

/* an allreduce of n device buffers through NCCL, rank k on streams[k]; the current context is kept */
static int {p}__nccl_allreduce(int n, const CUdeviceptr* in, const CUdeviceptr* out, size_t count, int dtype, int op,
                               const ncclComm_t* comms, const CUstream* streams) {{
  CUcontext current = NULL;
  {p}__cu.CtxGetCurrent(&current);
  int r = {p}__nccl.GroupStart();
  if (r == 0) {{
    for (int k = 0; k < n && r == 0; k++)
      r = {p}__nccl.AllReduce((const void*)(uintptr_t)in[k], (void*)(uintptr_t)out[k], count, dtype, op, comms[k], streams[k]);
    int end = {p}__nccl.GroupEnd();  /* the group is closed whatever happened in it */
    if (r == 0) r = end;
  }}
  {p}__cu.CtxSetCurrent(current);
  return r == 0 ? UOPC_OK : {code} + r;
}}"""


def strerror_cases(prefix: str) -> str:
  """C for PREFIX_strerror, before the driver's range: NCCL's codes through ncclGetErrorString."""
  name, _, message = NCCL_ERROR_BASE
  return f"""  if (code >= {name}) {{
    if ({prefix}__nccl_ready()) {{
      const char* m = {prefix}__nccl.GetErrorString(code - {name});
      if (m != NULL) return m;
    }}
    return "{message}";
  }}
"""
