"""The CUDA launcher of `-t cuda`: NAME.h and NAME_cuda.c, built into libNAME.so without the CUDA SDK.

The C API has the shape of the C target's (`uopc/launcher.py`: the same ABI types, argument order,
const-correctness, status codes and metadata accessors) plus a last `CUstream stream` argument (an
opaque typedef, the same type as the runtime's cudaStream_t: no CUDA header is needed), or one stream
per device for a multi-device entry (`uopc/targets/cuda/multi_device.py`); buffers are device pointers. The library embeds the fatbin (or, without one, the PTX text) and at first use
loads `libcuda.so.1` with dlopen (pthread_once) and calls `cuInit`. The module is loaded into the
calling thread's current context (`cuCtxGetCurrent`) once per context, under a mutex, and its
functions kept. A library with an arch variant's image (sm_90a's, uopc/targets/cuda/target.py) loads it
in a context whose device has its compute capability (cuDeviceGetAttribute), its own image elsewhere
(and where the driver cannot load the variant: the own image's PTX then runs), and launches each kernel with the geometry and shared memory of the image its context loaded. Each launch's grid and block come from the kernel's SPECIALs (the same geometry
the PTX assumes); symbolic sizes are computed from the DEFINE_VAR arguments, an empty grid launches
nothing. A kernel with dynamic shared memory (past 48 KiB, `CudaKernel.shared_bytes`) has it opted in
once per function when its module is loaded (cuFuncSetAttribute, MAX_DYNAMIC_SHARED_SIZE_BYTES) and
passes it to each launch; a library without such kernels has neither. An entry whose kernels pass
intermediate buffers allocates one workspace per call on the stream and frees it on the stream after
its kernels (`cuMemFreeAsync`), so concurrent calls never share one; it comes from the library's own
memory pool on the context's device (`cuMemPoolCreate` when the module is loaded there,
`cuMemAllocFromPoolAsync`), which keeps freed memory for reuse (no release threshold: it holds the
most that calls in flight together used), so that a call after a synchronization reuses the memory of
the one before instead of mapping new memory (the device's default pool gives freed memory back at
every synchronization: 50-80 us more a call on an H100 for a small model); the application's default
pool is untouched. An entry of several launches replays a CUDA graph of them when called again with the
same context, stream and arguments (`uopc/targets/cuda/graphs.py`; UOPC_CUDA_GRAPHS=0 turns it off).

Return codes: the C target's `uopc_status` for argument checks (UOPC_ERR_NO_MEMORY when the workspace
cannot be had), and UOPC_CUDA_ERR_NO_DRIVER (libcuda.so.1 or a function missing),
UOPC_CUDA_ERR_NO_CONTEXT (no current context), UOPC_CUDA_ERR_LAUNCH_SIZE (a grid dimension out of
range), UOPC_CUDA_ERR_CONTEXTS (more contexts than the library keeps modules for),
UOPC_CUDA_ERR_SHARED_MEMORY (the GPU cannot give a kernel its shared memory),
UOPC_CUDA_ERR_NO_NCCL (PREFIX_nccl_init where NCCL is off), UOPC_CUDA_ERR_DRIVER + e for a CUresult e,
or UOPC_CUDA_ERR_NCCL + r for an ncclResult_t r (`uopc/targets/cuda/nccl.py`); PREFIX_strerror(code)
describes each, through cuGetErrorString / ncclGetErrorString for the driver's and NCCL's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from uopc.embedded_data import c_arrays, data_table, slot_data
from uopc.launcher import (EntryArg, EntryKernels, header_file, arg_checks, c_identifier, c_param, c_string, entry_accessors, entry_notes,
                           entry_args, strerror_function)
from uopc.targets.cuda import graphs, multi_device, nccl
from uopc.targets.gpu_launcher import data_of, entry_launches, launcher_source

CUDA_STATUS = (("UOPC_CUDA_ERR_NO_DRIVER", 100, "libcuda.so.1 (the CUDA driver) or one of its functions was not found"),
               ("UOPC_CUDA_ERR_NO_CONTEXT", 101, "the calling thread has no current CUDA context"),
               ("UOPC_CUDA_ERR_LAUNCH_SIZE", 102, "a grid dimension is outside what a CUDA launch accepts"),
               ("UOPC_CUDA_ERR_CONTEXTS", 103, "more CUDA contexts used this library than it keeps modules for"),
               *nccl.STATUS,
               ("UOPC_CUDA_ERR_SHARED_MEMORY", 105, "a kernel needs more shared memory per workgroup than this GPU gives "
                                                    "(build it for this GPU's --arch)"),
               ("UOPC_CUDA_ERR_DRIVER", 1000, "the CUDA driver reported an error"))
MAX_CONTEXTS = 64
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76


@dataclass(frozen=True)
class Image:
  """Device code the library embeds: a fatbin, or PTX text ending in NUL, with the library's kernels in order.
  The first image is the library's own; each other one is an arch variant's (uopc.pipeline.ArchVariant,
  `label` its archs), loaded instead on GPUs of its `compute_capability` (major * 10 + minor). `files`: the
  artifacts it was made from (the build's concern)."""
  data: bytes
  kernels: tuple[Any, ...]
  files: tuple[Path, ...] = ()
  label: str = ""
  compute_capability: int = 0
_DRIVER_FUNCTIONS = (  # (field, symbol, signature)
  ("Init", "cuInit", "CUresult (*{})(unsigned)"),
  ("CtxGetCurrent", "cuCtxGetCurrent", "CUresult (*{})(CUcontext*)"),
  ("ModuleLoadData", "cuModuleLoadData", "CUresult (*{})(CUmodule*, const void*)"),
  ("ModuleGetFunction", "cuModuleGetFunction", "CUresult (*{})(CUfunction*, CUmodule, const char*)"),
  ("LaunchKernel", "cuLaunchKernel", "CUresult (*{})(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, "
                                     "unsigned, CUstream, void**, void**)"),
  ("MemAllocAsync", "cuMemAllocAsync", "CUresult (*{})(CUdeviceptr*, size_t, CUstream)"),
  ("MemFreeAsync", "cuMemFreeAsync", "CUresult (*{})(CUdeviceptr, CUstream)"),
  ("GetErrorString", "cuGetErrorString", "CUresult (*{})(CUresult, const char**)"),
)
POOL_FUNCTIONS = (  # loaded only by libraries whose single-device entries have workspaces
  ("CtxGetDevice", "cuCtxGetDevice", "CUresult (*{})(int*)"),
  ("MemPoolCreate", "cuMemPoolCreate", "CUresult (*{})(CUmemoryPool*, const CUmemPoolProps*)"),
  ("MemPoolSetAttribute", "cuMemPoolSetAttribute", "CUresult (*{})(CUmemoryPool, int, void*)"),
  ("MemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", "CUresult (*{})(CUdeviceptr*, size_t, CUmemoryPool, CUstream)"),
)
POOL_TYPES = """typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef struct {  /* CUmemPoolProps: 88 bytes in every CUDA since 11.2, zero but for these */
  int allocType, handleTypes;      /* CU_MEM_ALLOCATION_TYPE_PINNED, no handles */
  int locationType, locationId;    /* CU_MEM_LOCATION_TYPE_DEVICE, the device */
  void* win32SecurityAttributes;
  unsigned char rest[64];
} CUmemPoolProps;"""


def _pool(p: str, workspace: int) -> tuple[str, str]:
  """The per-context workspace pools (declarations, and `pool_of(fns)`, found as `data_of` finds a
  context's data), made only where some entry has a `workspace`, and the statements of `load_module(c)`
  that make context c's: on its device, keeping what is freed (release threshold: all of it; a
  threshold of the workspace's size would still give back the pool's 2 MiB chunks)."""
  if not workspace: return "", ""
  decls = f"""static CUmemoryPool {p}__pools[{p}__MAX_CONTEXTS];
static CUmemoryPool {p}__pool_of(const void* fns) {{
  return {p}__pools[((const char*)fns - (const char*){p}__functions) / sizeof({p}__functions[0])];
}}
"""
  load = f"""  {{  /* the workspace pool, once per context */
    CUmemPoolProps props;
    unsigned long long keep = ~0ULL;  /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: keep every freed byte */
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.locationType = 1;
    err = {p}__cu.CtxGetDevice(&props.locationId);
    if (err == 0) err = {p}__cu.MemPoolCreate(&{p}__pools[c], &props);
    if (err == 0) err = {p}__cu.MemPoolSetAttribute({p}__pools[c], 4, &keep);
    if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
  }}
"""
  return decls, load


def _header_types() -> str:
  codes = "\n".join(f"#define {name} {value}" for name, value, _ in (*CUDA_STATUS, nccl.NCCL_ERROR_BASE))
  return f"""#ifndef UOPC_CUDA_V1
#define UOPC_CUDA_V1
/* The stream a launch is queued on (NULL: the legacy default stream). The driver's own type, the same
   as the runtime's cudaStream_t, declared opaquely so that no CUDA header is needed. */
#ifndef __cuda_cuda_h__
typedef struct CUstream_st* CUstream;
#endif
/* Return codes beyond uopc_status: UOPC_CUDA_ERR_DRIVER + e is CUresult e, UOPC_CUDA_ERR_NCCL + r ncclResult_t r. */
{codes}
#endif /* UOPC_CUDA_V1 */"""


def _prototype(prefix: str, entry: EntryKernels, args: list[EntryArg]) -> str:
  streams = multi_device.stream_params(entry) or ["CUstream stream"]  # a multi-device entry: one per device
  return f"int {prefix}_{entry.name}({', '.join([*map(c_param, args), *streams])})"


def _notes(prefix: str, entry: EntryKernels) -> str:
  if not (streams := multi_device.stream_note(entry)): return entry_notes(entry)
  collectives = multi_device.collective_note(entry).replace("PREFIX", prefix)
  return entry_notes(entry)[:-4] + f"\n   Streams, one per device: {streams}." + (f"\n   {collectives}" if collectives else "") + " */\n"


_MULTI_DOC = """

   A multi-device entry (the comment above it says which) takes one device pointer per device shard
   (NAME_dev0, NAME_dev1, ...: each on its device's GPU) and, last, one CUstream per device (stream_0,
   stream_1, ...), each in the context of the GPU that device is; two devices may be one GPU. Its work
   starts after what was queued on every stream before the call, and syncing any one stream waits for
   all of it. Copies between GPUs are peer to peer (cuMemcpyPeerAsync; peer access is enabled), each
   device's intermediates live on its own GPU. Its collectives (allreduce) run through NCCL when
   libnccl.so.2 loads at run time, UOPC_NCCL is not 0, and {prefix}_nccl_init set up one communicator
   per GPU of the call's streams (all distinct GPUs, streams of the GPUs' primary contexts as the CUDA
   runtime makes them); otherwise, and always when two devices are one GPU, as copies and reductions.
   Calls that use NCCL must not run concurrently from several threads."""


def render_header(name: str, entries: Sequence[EntryKernels]) -> str:
  """NAME.h: C99 and C++11."""
  prefix = c_identifier(name)
  guard = f"UOPC_{prefix.upper()}_CUDA_H"
  protos = "\n".join(_notes(prefix, e) + f"{_prototype(prefix, e, entry_args(e))};" for e in entries)
  multi = any(multi_device.entry_devices(e) for e in entries)
  comment = f"""/* {name}.h: generated by uopc for NVIDIA GPUs (CUDA); do not edit.

   Every entry is `int {prefix}_ENTRY(...)`: device buffer pointers by slot (const when only read;
   float16/bfloat16 elements as uint16_t bits), then int64_t sizes (DEFINE_VARs) by name, then the
   CUstream (or cudaStream_t) to queue the kernels on. It returns 0 when the kernels were queued, else a
   uopc_status (a failed argument check: nothing is queued) or a UOPC_CUDA_ERR_* code;
   {prefix}_strerror(code) describes it. The CUDA driver (libcuda.so.1) is loaded at first use; the
   kernels run in the calling thread's current context (the runtime's current device), where the
   library loads its module once (on H100/H200, its sm_90a kernels where it has them). An entry of several
   kernels, called again with the same arguments and stream, replays a CUDA graph of its launches
   (UOPC_CUDA_GRAPHS=0 in the environment: never). Link with -l{name} -ldl -lpthread.{_MULTI_DOC.format(prefix=prefix) if multi else ""} */"""
  declarations = f"""{_header_types()}

/* The entries. */
{protos}""" + (f"\n\n{nccl.header_declarations(prefix)}" if multi else "")
  return header_file(prefix, comment, guard, declarations)


def _image(prefix: str, image: bytes, i: int = 0) -> str:
  """The C array of image i (`PREFIX__image`, then `PREFIX__image_1`, ...)."""
  rows = [", ".join(str(b) for b in image[j:j + 24]) for j in range(0, len(image), 24)]
  return f"static const unsigned char {prefix}__image{f'_{i}' if i else ''}[] __attribute__((aligned(16))) = {{\n  " + ",\n  ".join(rows) + "\n};"


VARIANT_FUNCTIONS = (  # loaded only by libraries with arch variants, which pick the image by the context's device
  ("CtxGetDevice", "cuCtxGetDevice", "CUresult (*{})(int*)"),
  ("DeviceGetAttribute", "cuDeviceGetAttribute", "CUresult (*{})(int*, int, int)"),
)


def _images(p: str, images: Sequence[Image]) -> tuple[str, str]:
  """The embedded images (declarations), and the statements of `load_module(c)` that load context c's: the
  arch variant made for its device's compute capability, else the library's own (image 0)."""
  arrays = "\n".join(_image(p, image.data, i) for i, image in enumerate(images))
  if len(images) == 1: return arrays, f"  CUresult err = {p}__cu.ModuleLoadData(&module, {p}__image);\n"
  names = ", ".join(f"{p}__image{f'_{i}' if i else ''}" for i in range(len(images)))
  decls = f"""{arrays}
/* the images: the library's own, then each arch variant's ({', '.join(i.label for i in images[1:])}), loaded on a GPU of
   its compute capability (major * 10 + minor) */
enum {{ {p}__NUM_IMAGES = {len(images)} }};
static const unsigned char* const {p}__images[{p}__NUM_IMAGES] = {{{names}}};
static const int {p}__image_capability[{p}__NUM_IMAGES] = {{{', '.join(str(i.compute_capability) for i in images)}}};"""
  load = f"""  int device = 0, major = 0, minor = 0, v = 0;  /* the image for this context's GPU */
  CUresult err = {p}__cu.CtxGetDevice(&device);
  if (err == 0) err = {p}__cu.DeviceGetAttribute(&major, {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR}, device);
  if (err == 0) err = {p}__cu.DeviceGetAttribute(&minor, {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR}, device);
  if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
  for (int i = 1; i < {p}__NUM_IMAGES; i++)
    if ({p}__image_capability[i] == major * 10 + minor) v = i;
  err = {p}__cu.ModuleLoadData(&module, {p}__images[v]);
  if (err != 0 && v != 0) {{  /* a driver that cannot load the variant (too old for its arch): the own image's PTX */
    v = 0;
    err = {p}__cu.ModuleLoadData(&module, {p}__images[0]);
  }}
  {p}__variants[c] = v;
"""
  return decls, load


def _variant_of(p: str) -> str:
  """C: `PREFIX__variants[N]`, the image each context loaded, and `PREFIX__variant_of(fns)`, that of the context
  whose function table row `fns` is."""
  return f"""static int {p}__variants[{p}__MAX_CONTEXTS];
static int {p}__variant_of(const void* fns) {{
  return {p}__variants[((const char*)fns - (const char*){p}__functions) / sizeof({p}__functions[0])];
}}
"""


SHARED_FUNCTIONS = (  # loaded only by libraries with kernels of dynamic shared memory
  ("FuncSetAttribute", "cuFuncSetAttribute", "CUresult (*{})(CUfunction, int, int)"),
)
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CUDA_ERROR_INVALID_VALUE = 1  # what cuFuncSetAttribute answers for more than the device's opt-in maximum


def _shared(p: str, shared: Sequence[Sequence[int]]) -> tuple[str, str]:
  """The dynamic shared memory of each kernel in each image (declarations), and the statements of
  `load_module(c)` that opt each kernel that has some in to it, once per function."""
  if not any(map(any, shared)): return "", ""
  if len(shared) == 1:
    decls, bytes_k = f"static const int {p}__shared_bytes[{p}__NUM_KERNELS] = {{{', '.join(map(str, shared[0]))}}};\n", f"{p}__shared_bytes[k]"
  else:
    rows = ", ".join(f"{{{', '.join(map(str, row))}}}" for row in shared)
    decls, bytes_k = f"static const int {p}__shared_bytes[{p}__NUM_IMAGES][{p}__NUM_KERNELS] = {{{rows}}};\n", f"{p}__shared_bytes[v][k]"
  load = f"""    if ({bytes_k} > 0) {{  /* more than the 48 KiB every GPU gives: opt in */
      err = {p}__cu.FuncSetAttribute({p}__functions[c][k], {CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES} /* MAX_DYNAMIC_SHARED_SIZE_BYTES */, {bytes_k});
      if (err != 0) return err == {CUDA_ERROR_INVALID_VALUE} /* CUDA_ERROR_INVALID_VALUE */ ? UOPC_CUDA_ERR_SHARED_MEMORY : UOPC_CUDA_ERR_DRIVER + err;
    }}
"""
  return decls, load


DATA_FUNCTIONS = (  # loaded only by libraries with constant data, which they copy to each context
  ("MemAlloc", "cuMemAlloc_v2", "CUresult (*{})(CUdeviceptr*, size_t)"),
  ("MemcpyHtoD", "cuMemcpyHtoD_v2", "CUresult (*{})(CUdeviceptr, const void*, size_t)"),
)


def _data(p: str, table: Sequence[bytes]) -> tuple[str, str]:
  """The constant data and its device copies per context (declarations), and the statements of
  `load_module(c)` that copy it there: it lives as long as the module, for the library's lifetime."""
  if not table: return "", ""
  decls = f"""{c_arrays(p, table, tables=True)}
enum {{ {p}__NUM_DATA = {len(table)} }};
{data_of(p, f"{p}__functions", "CUdeviceptr")}
"""
  load = f"""  for (int i = 0; i < {p}__NUM_DATA; i++) {{  /* the constant data, once per context */
    err = {p}__cu.MemAlloc(&{p}__device_data[c][i], {p}__data_sizes[i]);
    if (err == 0) err = {p}__cu.MemcpyHtoD({p}__device_data[c][i], {p}__datas[i], {p}__data_sizes[i]);
    if (err != 0) return err == {multi_device.CUDA_ERROR_OUT_OF_MEMORY} ? UOPC_ERR_NO_MEMORY : UOPC_CUDA_ERR_DRIVER + err;
  }}
"""
  return decls, load


def _runtime(prefix: str, images: Sequence[Image], kernels: list[str], multi: bool = False, single: bool = True,
             table: Sequence[bytes] = (), workspace: int = 0, graphed: bool = False) -> str:
  """The embedded images and the driver loader; `multi`/`single`: whether entries on several devices / on one exist;
  `table`: the library's constant data; `workspace`: the largest workspace of a single-device entry (0: none);
  `graphed`: whether some entry replays CUDA graphs (uopc/targets/cuda/graphs.py)."""
  p = prefix
  shared = [[k.shared_bytes for k in image.kernels] for image in images]
  functions = _DRIVER_FUNCTIONS + (multi_device.DRIVER_FUNCTIONS if multi else ()) + (DATA_FUNCTIONS if table else ()) + \
    (POOL_FUNCTIONS if workspace else ()) + (SHARED_FUNCTIONS if any(map(any, shared)) else ())
  functions += tuple(f for f in VARIANT_FUNCTIONS if len(images) > 1 and f[0] not in {g[0] for g in functions})
  image_decls, image_load = _images(p, images)
  data_decls, data_load = _data(p, table)
  pool_decls, pool_load = _pool(p, workspace)
  shared_decls, shared_load = _shared(p, shared)
  fields = "\n".join(f"  {sig.format(field)};" for field, _, sig in functions)
  loads = "\n".join(f'  *(void**)&{p}__cu.{field} = dlsym(lib, "{symbol}");' for field, symbol, _ in functions)
  all_loaded = " && ".join(f"{p}__cu.{field}" for field, _, _ in functions)
  current = _functions_of_current(p) if single else ""
  return f"""{image_decls}
static const char* const {p}__kernel_names[] = {{{', '.join(c_string(k) for k in kernels)}}};
enum {{ {p}__NUM_KERNELS = {len(kernels)}, {p}__MAX_CONTEXTS = {MAX_CONTEXTS} }};

typedef int CUresult;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef unsigned long long CUdeviceptr;{"" if not multi else chr(10) + "typedef struct CUevent_st* CUevent;"}{chr(10) + POOL_TYPES if workspace else ""}
static struct {{
{fields}
  int loaded;
}} {p}__cu;
static pthread_once_t {p}__cu_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t {p}__module_lock = PTHREAD_MUTEX_INITIALIZER;
/* per context that used the library: its functions (written once, under the lock) */
static CUcontext {p}__contexts[{p}__MAX_CONTEXTS];
static CUfunction {p}__functions[{p}__MAX_CONTEXTS][{p}__NUM_KERNELS];
static int {p}__num_contexts;
{_variant_of(p) if len(images) > 1 else ""}{shared_decls}{data_decls}{pool_decls}{graphs.runtime(p) + chr(10) if graphed else ""}
static void {p}__load_cuda(void) {{
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
{loads}{chr(10) + f"  {p}__load_graphs(lib);" if graphed else ""}
  {p}__cu.loaded = {all_loaded} && {p}__cu.Init(0) == 0;
}}

/* the module of the library in context slot c, with every kernel's function */
static int {p}__load_module(int c) {{
  CUmodule module;
{image_load}  if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
  for (int k = 0; k < {p}__NUM_KERNELS; k++) {{
    err = {p}__cu.ModuleGetFunction(&{p}__functions[c][k], module, {p}__kernel_names[k]);
    if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
{shared_load}  }}
{data_load}{pool_load}  return UOPC_OK;
}}

/* the functions of context `ctx`, loading the module there at first use */
static int {p}__functions_of(CUcontext ctx, CUfunction** out) {{
  int status = UOPC_OK;
  pthread_mutex_lock(&{p}__module_lock);
  int c = 0;
  while (c < {p}__num_contexts && {p}__contexts[c] != ctx) c++;
  if (c == {p}__num_contexts) {{
    if (c == {p}__MAX_CONTEXTS) status = UOPC_CUDA_ERR_CONTEXTS;
    else if ((status = {p}__load_module(c)) == UOPC_OK) {{ {p}__contexts[c] = ctx; {p}__num_contexts++; }}
  }}
  pthread_mutex_unlock(&{p}__module_lock);
  *out = {p}__functions[c < {p}__MAX_CONTEXTS ? c : 0];
  return status;
}}

{current}

static int {p}__launch(CUfunction fn, const int64_t grid[3], const int64_t block[3], unsigned shared, CUstream stream, void** args) {{
  const int64_t max_grid[3] = {{INT64_C(2147483647), INT64_C(65535), INT64_C(65535)}};
  for (int d = 0; d < 3; d++) {{
    if (grid[d] == 0) return UOPC_OK;  /* nothing to run */
    if (grid[d] < 0 || grid[d] > max_grid[d]) return UOPC_CUDA_ERR_LAUNCH_SIZE;
  }}
  CUresult err = {p}__cu.LaunchKernel(fn, (unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2],
    (unsigned)block[0], (unsigned)block[1], (unsigned)block[2], shared, stream, args, NULL);
  return err == 0 ? UOPC_OK : UOPC_CUDA_ERR_DRIVER + err;
}}"""


def _data_local(prefix: str) -> str:
  """A launch's local for constant data k: its copy in the context whose functions the launch uses."""
  return f"CUdeviceptr c{{i}} = {prefix}__data_of(functions)[{{k}}];"


def _multi_wrapper(prefix: str, entry: EntryKernels, first: int, table: Sequence[bytes]) -> str:
  args = entry_args(entry)
  return multi_device.wrapper(prefix, entry, args, _prototype(prefix, entry, args), arg_checks(args), first,
                              slot_data(entry, table), _data_local(prefix))


def _functions_of_current(p: str) -> str:
  return f"""/* the functions of the calling thread's current context */
static int {p}__functions_of_context(CUfunction** out) {{
  pthread_once(&{p}__cu_once, {p}__load_cuda);
  if (!{p}__cu.loaded) return UOPC_CUDA_ERR_NO_DRIVER;
  CUcontext ctx = NULL;
  CUresult err = {p}__cu.CtxGetCurrent(&ctx);
  if (err != 0) return UOPC_CUDA_ERR_DRIVER + err;
  if (ctx == NULL) return UOPC_CUDA_ERR_NO_CONTEXT;
  return {p}__functions_of(ctx, out);
}}"""


def _wrapper(prefix: str, entry: EntryKernels, first: int, table: Sequence[bytes], images: Sequence[Image] = ()) -> str:
  if multi_device.entry_devices(entry): return _multi_wrapper(prefix, entry, first, table)
  args = entry_args(entry)
  variants = [(f"{prefix}__variant_of(functions) == {v}", image.kernels[first:first + len(entry.kernels)])
              for v, image in enumerate(images) if v > 0]
  # the launches sit inside a do-while: a failed one breaks out, so that the workspace is still freed
  launches = entry_launches(prefix, entry, args, first, "CUdeviceptr ws{i} = workspace + {offset};", "break", "    ",
                            table, _data_local(prefix), shared=True, variants=variants)
  alloc, free = [], []
  if entry.workspace is not None:
    alloc = ["  CUdeviceptr workspace = 0;",
             f"  CUresult err = {prefix}__cu.MemAllocFromPoolAsync(&workspace, {entry.workspace.size}, {prefix}__pool_of(functions), stream);",
             f"  if (err != 0) return err == {multi_device.CUDA_ERROR_OUT_OF_MEMORY} ? UOPC_ERR_NO_MEMORY : UOPC_CUDA_ERR_DRIVER + err;"]
    free = [f"  err = {prefix}__cu.MemFreeAsync(workspace, stream);  /* after the kernels, in stream order */",
            "  if (status == UOPC_OK && err != 0) status = UOPC_CUDA_ERR_DRIVER + err;"]
  body = [*alloc, "  do {", *launches, "  } while (0);", *free]
  if graphs.uses_graph(entry): return graphs.wrapper(prefix, entry, args, _prototype(prefix, entry, args), arg_checks(args), body)
  return "\n".join([f"{_prototype(prefix, entry, args)} {{", *arg_checks(args), "  CUfunction* functions = NULL;",
                    f"  int status = {prefix}__functions_of_context(&functions);", "  if (status != UOPC_OK) return status;",
                    *body, "  return status;", "}"])


def _accessors(prefix: str, n: int, multi: bool) -> str:
  nccl_messages = nccl.strerror_cases(prefix) if multi else f"  if (code >= {nccl.NCCL_ERROR_BASE[0]}) return {c_string(nccl.NCCL_ERROR_BASE[2])};\n"
  driver_messages = nccl_messages + f"""  if (code >= UOPC_CUDA_ERR_DRIVER) {{
    const char* message = NULL;
    pthread_once(&{prefix}__cu_once, {prefix}__load_cuda);
    if ({prefix}__cu.loaded && {prefix}__cu.GetErrorString(code - UOPC_CUDA_ERR_DRIVER, &message) == 0 && message != NULL)
      return message;
    return {c_string(CUDA_STATUS[-1][2])};
  }}
"""
  own = [(name, msg) for name, _, msg in CUDA_STATUS[:-1]]
  return strerror_function(prefix, own, driver_messages) + "\n" + entry_accessors(prefix, n)


def render_source(name: str, entries: Sequence[EntryKernels], images: Sequence[Image] | bytes) -> str:
  """NAME_cuda.c: the embedded `images` (Image; bytes: the one image of `entries`' kernels, a fatbin or PTX text
  ending in NUL), the driver loader, the entries (argument checks, then one launch per kernel with its
  `.geometry`, per image where an arch variant's kernel differs) and the metadata. Kernels are CudaKernels
  (uopc/targets/cuda/ptx.py)."""
  prefix = c_identifier(name)
  kernels = [k.name for e in entries for k in e.kernels]
  if isinstance(images, bytes): images = [Image(images, tuple(k for e in entries for k in e.kernels))]
  for image in images[1:]:
    if [k.name for k in image.kernels] != kernels or any(k.params != o.params for k, o in zip(image.kernels, images[0].kernels)):
      raise ValueError(f"the {image.label} image's kernels are not the library's")  # an internal error
  multi = any(multi_device.entry_devices(e) for e in entries)
  single = not all(multi_device.entry_devices(e) for e in entries)
  table = data_table(entries)
  workspace = max((e.workspace.size for e in entries if e.workspace is not None and not multi_device.entry_devices(e)), default=0)
  graphed = any(graphs.uses_graph(e) for e in entries)
  runtime = _runtime(prefix, images, kernels, multi, single, table, workspace, graphed) + ("\n\n" + multi_device.runtime(prefix) if multi else "")
  return launcher_source(name, f"{name}_cuda.c", entries, render_header(name, entries), runtime,
                         lambda e, first: _wrapper(prefix, e, first, table, images), _accessors(prefix, len(entries), multi))
