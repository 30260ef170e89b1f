"""The C launcher: `NAME.h` (the ABI a C or C++ program codes against) and `NAME.c` (prelude, rendered
kernels, argument-checking wrappers and run-time metadata), built into `libNAME.so` by the driver.

ABI (also in the generated header's comment and the README):
- Every C symbol starts with PREFIX, which is NAME with each character outside [A-Za-z0-9_] replaced
  by `_` (and a leading `u` when it would start with a digit).
- One function per entry: `int PREFIX_ENTRY(buffers by slot..., DEFINE_VARs by name...)`. Buffers are
  pointers to the element type (`const` when the entry only reads them; float16 and bfloat16 are
  passed as `uint16_t` bit patterns, bool as `bool`); a DEFINE_VAR is an `int64_t`.
- The return value is a `uopc_status`: 0 on success, else the first failed check (a NULL buffer, a
  written buffer passed again as another argument, a DEFINE_VAR outside its [min, max]);
  `PREFIX_strerror(code)` describes a code. Nothing is run when a check fails.
- No global mutable state but the worker pool of THREAD kernels (uopc.targets.c.threads): entries may run
  concurrently from several threads on distinct outputs.
- Metadata: `PREFIX_num_entries()`, `PREFIX_entry_info(i)`, `PREFIX_find_entry(name)` return
  constant tables (`uopc_entry_info`, `uopc_arg_info`): argument names, kinds, dtypes (enum and name),
  whether written, shapes when known (ndim -1 otherwise) and DEFINE_VAR ranges.
The shared types are guarded by `UOPC_ABI_V1`, so headers of several uopc libraries can be included
in one translation unit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

from uopc.dtype import DType, dtypes
from uopc.embedded_data import c_arrays, data_table, slot_data
from uopc.ops import Ops
from uopc.targets import param_name
from uopc.targets.c.threads import POOL_C, TASK_PARAM, is_threaded, task_call, trampoline
from uopc.uop import shape_values

ABI_VERSION = 1

# The dtype enum is part of the ABI: values never change, new dtypes get new numbers.
DTYPE_ENUM: dict[DType, tuple[str, int]] = {
  dtypes.bool: ("UOPC_DTYPE_BOOL", 0), dtypes.int8: ("UOPC_DTYPE_INT8", 1), dtypes.int16: ("UOPC_DTYPE_INT16", 2),
  dtypes.int32: ("UOPC_DTYPE_INT32", 3), dtypes.int64: ("UOPC_DTYPE_INT64", 4), dtypes.uint8: ("UOPC_DTYPE_UINT8", 5),
  dtypes.uint16: ("UOPC_DTYPE_UINT16", 6), dtypes.uint32: ("UOPC_DTYPE_UINT32", 7),
  dtypes.uint64: ("UOPC_DTYPE_UINT64", 8), dtypes.float16: ("UOPC_DTYPE_FLOAT16", 9),
  dtypes.bfloat16: ("UOPC_DTYPE_BFLOAT16", 10), dtypes.float32: ("UOPC_DTYPE_FLOAT32", 11),
  dtypes.float64: ("UOPC_DTYPE_FLOAT64", 12), dtypes.index: ("UOPC_DTYPE_INDEX", 13),
}

# The C type a caller uses for one element. Half-precision floats travel as their bit pattern
# because C99 and C++11 have no portable 16-bit float type.
C_TYPES: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "int8_t", dtypes.int16: "int16_t", dtypes.int32: "int32_t",
  dtypes.int64: "int64_t", dtypes.uint8: "uint8_t", dtypes.uint16: "uint16_t", dtypes.uint32: "uint32_t",
  dtypes.uint64: "uint64_t", dtypes.float16: "uint16_t", dtypes.bfloat16: "uint16_t", dtypes.float32: "float",
  dtypes.float64: "double", dtypes.index: "int64_t",
}

STATUS = (("UOPC_OK", "success"), ("UOPC_ERR_NULL_POINTER", "a buffer argument is NULL"),
          ("UOPC_ERR_VAR_RANGE", "a size argument is outside the [min, max] range the program declares"),
          ("UOPC_ERR_ALIASED", "a written buffer is also passed as another buffer argument"),
          ("UOPC_ERR_NO_MEMORY", "the workspace could not be allocated"))

# names a parameter may not take in a header that must compile as C and as C++
_RESERVED = frozenset("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t
  char32_t class compl const constexpr const_cast continue decltype default delete do double dynamic_cast else
  enum explicit export extern false float for friend goto if inline int long mutable namespace new noexcept not
  not_eq nullptr operator or or_eq private protected public register reinterpret_cast restrict return short
  signed sizeof static static_assert static_cast struct switch template this thread_local throw true try
  typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq NULL""".split())


@dataclass(frozen=True)
class Workspace:
  """The intermediate buffers of a multi-kernel entry (from the memory plan): each is the kernel
  buffer slot `slot`, placed at byte `offset` of one workspace of `size` bytes. A multi-device entry's
  workspace is one span per device (`devices`: (device, base, size)), which a GPU launcher allocates
  on each device (`uopc.stages.plan`)."""
  size: int
  offsets: tuple[tuple[int, int], ...]  # (slot, offset)
  devices: tuple[tuple[Any, int, int], ...] = ()


@dataclass(frozen=True)
class EntryKernels:
  """One exported entry and its distinct kernels. A kernel is RenderedKernel-shaped: `.name`, `.source`
  (C defining `void NAME(...)`) and `.params` (KernelParam-shaped, in signature order). `launches`
  (Launch-shaped, see uopc.stages.rangeify) run the kernels in order, each binding a kernel's buffer
  slots to the entry's buffers; without them, each kernel runs once on the buffers of its own slots.
  With a workspace, the entry also gets `_with_workspace` and `_workspace_size` variants."""
  name: str
  kernels: tuple[Any, ...]
  workspace: Workspace | None = None
  launches: tuple[Any, ...] | None = None
  unused: tuple[Any, ...] = ()  # the PARAMs and DEFINE_VARs the entry declares and never reads: arguments still
  shapes: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (slot, shape) a func entry declares for its buffers
  notes: tuple[str, ...] = ()  # how a multi-device entry's arguments hold its sharded buffers (the header says it)
  constants: tuple[tuple[int, bytes], ...] = ()  # (kernel buffer slot, data): embedded constant data (uopc.embedded_data)
  collectives: tuple[Any, ...] = ()  # Collective-shaped (uopc.stages.kernel_program): launches a launcher may replace
  variants: tuple[tuple[Any, ...], ...] = ()  # the kernels of each arch variant of the build (uopc.pipeline.ArchVariant), in
  # kernel order: a kernel of the build's own where the variant has none of its own (the same object)


@dataclass(frozen=True)
class BoundKernel:
  """A kernel as one launch runs it: its buffer params carry the slot and name of the entry buffer the
  launch binds them to; every other attribute is the kernel's own (whatever its target's type)."""
  kernel: Any
  params: tuple[Any, ...]

  def __getattr__(self, name: str) -> Any: return getattr(self.kernel, name)


def launched(entry: EntryKernels) -> list[tuple[int, Any]]:
  """(kernel index, kernel bound to the launch's buffers) per launch, in run order."""
  if entry.launches is None: return list(enumerate(entry.kernels))
  return [(ln.kernel, _bound(entry.kernels[ln.kernel], ln)) for ln in entry.launches]


def _bound(kernel, launch) -> BoundKernel:
  def bind(p):
    if p.kind != "buffer": return p
    b = launch.buffer(p.slot)
    return replace(p, slot=b.slot, name=b.name)
  return BoundKernel(kernel, tuple(bind(p) for p in kernel.params))


@dataclass(frozen=True)
class EntryArg:
  """One argument of an entry's C function: a buffer (by slot) or a DEFINE_VAR (by name)."""
  name: str                     # as the program names it (metadata)
  c_name: str                   # the C identifier in the prototype
  kind: str                     # "buffer" | "var"
  key: Any                      # the slot of a buffer, the name of a DEFINE_VAR
  dtype: DType                  # element dtype of a buffer, index for a DEFINE_VAR
  written: bool
  shape: tuple[int, ...] | None
  vmin: int
  vmax: int


def c_identifier(name: str) -> str:
  """NAME -> the C prefix: characters outside [A-Za-z0-9_] become `_`; a leading digit gets a `u`."""
  ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or "u"
  return "u" + ident if ident[0].isdigit() else ident


# ---- arguments -------------------------------------------------------------------------------------------
def _buffer_dtype_and_shape(dt: DType) -> tuple[DType, tuple[int, ...] | None]:
  if dt.is_ptr(): return dt.base.scalar, ((dt.size,) if dt.size >= 0 else None)
  return dt.scalar, None


def _merge(prev: EntryArg | None, new: EntryArg) -> EntryArg:
  """The same slot or DEFINE_VAR seen by several kernels: written by any, the tightest range, a known shape."""
  if prev is None: return new
  if prev.dtype is not new.dtype: raise ValueError(f"argument {new.name!r} has dtypes {prev.dtype} and {new.dtype}")
  return EntryArg(prev.name, prev.c_name, prev.kind, prev.key, prev.dtype, prev.written or new.written,
                  prev.shape or new.shape, max(prev.vmin, new.vmin), min(prev.vmax, new.vmax))


def _arg_of(p) -> EntryArg:
  if p.kind == "buffer":
    dt, shape = _buffer_dtype_and_shape(p.dtype)
    return EntryArg(p.name, "", "buffer", p.slot, dt, bool(p.written), shape, 0, 0)
  return EntryArg(p.name, "", "var", p.name, dtypes.index, False, None, int(p.vmin), int(p.vmax))


def _declared_arg(u) -> EntryArg:
  """The argument of a PARAM or DEFINE_VAR no kernel reads (see EntryKernels.unused)."""
  if u.op is Ops.DEFINE_VAR: return EntryArg(u.arg[0], "", "var", u.arg[0], dtypes.index, False, None, int(u.arg[1]), int(u.arg[2]))
  if u.src: dt, shape = u.dtype.scalar, tuple(shape_values(u.src[0]))
  else: dt, shape = _buffer_dtype_and_shape(u.dtype)
  return EntryArg(param_name(u), "", "buffer", u.arg[0], dt, False, shape, 0, 0)


def entry_args(entry: EntryKernels) -> list[EntryArg]:
  """The entry's C arguments: every buffer slot of its kernels by slot, then every DEFINE_VAR by name."""
  merged: dict[tuple, EntryArg] = {}
  internal = {slot for slot, _ in entry.workspace.offsets} if entry.workspace else set()
  internal |= {slot for slot, _ in entry.constants}
  for _, k in launched(entry):
    for p in k.params:
      if p.kind == "buffer" and p.slot in internal: continue
      if p.kind == "var" and p.name == TASK_PARAM: continue  # the worker pool passes it (targets/c/threads.py)
      a = _arg_of(p)
      merged[(a.kind, a.key)] = _merge(merged.get((a.kind, a.key)), a)
  for u in entry.unused:
    a = _declared_arg(u)
    merged.setdefault((a.kind, a.key), a)
  declared = dict(entry.shapes)
  for key, a in merged.items():  # a tensor program's buffers: the shape it declares, not the flat pointer its kernels see
    if a.kind == "buffer" and a.key in declared: merged[key] = replace(a, shape=declared[a.key])
  ordered = sorted((a for a in merged.values() if a.kind == "buffer"), key=lambda a: a.key) + \
            sorted((a for a in merged.values() if a.kind == "var"), key=lambda a: a.key)
  return _name_arguments(ordered)


# Names an entry function's scope already has (every target's launcher): its own parameters and
# locals, Objective-C's implicit names, and the C library functions the bodies call. Types (`..._t`, CamelCase), macros (upper case) and the
# library's own symbols (PREFIX_..., uopc_...) are kept out by the form a kept name must have.
_LAUNCHER_NAMES = frozenset("""stream queue workspace num_threads err status functions args grid block q pipelines cb enc
  id self nil super malloc free memcpy memset""".split())
_PLAIN_NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


def _name_arguments(args: list[EntryArg]) -> list[EntryArg]:
  """Give each argument a distinct C identifier that cannot collide with anything in its entry
  function's scope: a name of lower-case words joined by single underscores, not ending in `_t`, no
  keyword of C, C++ or Objective-C and none of the launchers' own names, is kept as it is; any other
  becomes arg<i>_<it as an identifier>. The program's own name stays in the metadata."""
  used: set[str] = set()
  out = []
  for i, a in enumerate(args):
    c_name = c_identifier(a.name)
    if not _PLAIN_NAME.fullmatch(c_name) or c_name.endswith("_t") or c_name in _RESERVED | _LAUNCHER_NAMES or c_name in used \
        or c_name.startswith("uopc"):
      c_name = f"arg{i}_{c_name}"[:64]
    while c_name in used: c_name += "_"
    used.add(c_name)
    out.append(EntryArg(a.name, c_name, a.kind, a.key, a.dtype, a.written, a.shape, a.vmin, a.vmax))
  return out


def c_param(a: EntryArg) -> str:
  if a.kind == "var": return f"int64_t {a.c_name}"
  return f"{'' if a.written else 'const '}{C_TYPES[a.dtype]}* {a.c_name}"


def _prototype(prefix: str, entry: EntryKernels, args: list[EntryArg], suffix: str = "", extra: tuple[str, ...] = ()) -> str:
  return f"int {prefix}_{entry.name}{suffix}({', '.join([c_param(a) for a in args] + list(extra)) or 'void'})"


_WS_PARAM = "void* workspace"
_THREADS_PARAM = "int num_threads"


def _threaded(entry: EntryKernels) -> bool: return any(is_threaded(k) for k in entry.kernels)


def _prototypes(prefix: str, entry: EntryKernels) -> list[str]:
  """The entry's public declarations: with a workspace, also the caller-provided-workspace variant
  (WORKSPACE must hold PREFIX_ENTRY_workspace_size() bytes, 64-byte aligned) and the size query; with
  THREAD axes, also the variant taking the worker count (<= 0: $UOPC_NUM_THREADS, else the cores)."""
  args = entry_args(entry)
  threads = [_prototype(prefix, entry, args, "_with_threads", (_THREADS_PARAM,))] if _threaded(entry) else []
  if entry.workspace is None: return [_prototype(prefix, entry, args)] + threads
  return [_prototype(prefix, entry, args), _prototype(prefix, entry, args, "_with_workspace", (_WS_PARAM,)),
          f"size_t {prefix}_{entry.name}_workspace_size(void)"] + threads


# ---- the header ------------------------------------------------------------------------------------------
def abi_types() -> str:
  dtype_lines = ",\n".join(f"  {enum} = {value}" for enum, value in DTYPE_ENUM.values())
  status_lines = ",\n".join(f"  {name} = {i}" for i, (name, _) in enumerate(STATUS))
  return f"""#ifndef UOPC_ABI_V1
#define UOPC_ABI_V1
#define UOPC_ABI_VERSION {ABI_VERSION}
/* Return codes of every entry function. */
typedef enum uopc_status {{
{status_lines}
}} uopc_status;
/* Element dtypes, as uopc_arg_info.dtype. */
typedef enum uopc_dtype {{
{dtype_lines}
}} uopc_dtype;
typedef enum uopc_arg_kind {{ UOPC_ARG_BUFFER = 0, UOPC_ARG_VAR = 1 }} uopc_arg_kind;
/* One argument of an entry, in call order. */
typedef struct uopc_arg_info {{
  const char* name;        /* as the program names it */
  int32_t kind;            /* uopc_arg_kind */
  int32_t dtype;           /* uopc_dtype: the element dtype of a buffer, UOPC_DTYPE_INDEX for a size */
  const char* dtype_name;  /* "float32", "int8", ... */
  int32_t written;         /* 1 when the entry writes this buffer */
  int32_t ndim;            /* number of dims in shape; -1 when not known at compile time */
  const int64_t* shape;    /* ndim sizes in elements, or NULL */
  int64_t min, max;        /* the accepted range of a size argument; 0, 0 for buffers */
}} uopc_arg_info;
typedef struct uopc_entry_info {{
  const char* name;        /* the function is PREFIX_<name> */
  int32_t num_args;
  const uopc_arg_info* args;
}} uopc_entry_info;
#endif /* UOPC_ABI_V1 */"""


def _header_comment(name: str, prefix: str) -> str:
  return f"""/* {name}.h: generated by uopc; do not edit.

   ABI version {ABI_VERSION}. Every entry is `int {prefix}_ENTRY(...)`: buffer pointers by slot (const when
   only read; float16/bfloat16 elements as uint16_t bits), then int64_t sizes (DEFINE_VARs) by name.
   It returns UOPC_OK (0) or the uopc_status of the first failed check (NULL buffer, a written buffer
   passed twice, a size outside its [min, max]); nothing runs then. {prefix}_strerror(code) describes
   a code. Buffers must hold the elements the program indexes (the shape, when known) and must not
   overlap. Calls are thread-safe when their written buffers are distinct (the one mutable global
   state is the worker pool of threaded entries, used by one call at a time). {prefix}_num_entries, {prefix}_entry_info and {prefix}_find_entry describe
   the entries at run time. Link with -l{name} (lib{name}.so). */"""


def render_header(name: str, entries: Sequence[EntryKernels]) -> str:
  """NAME.h: valid C99 and C++11, parsable by pycparser after preprocessing."""
  prefix = c_identifier(name)
  protos = "\n".join(entry_notes(e) + "\n".join(f"{p};" for p in _prototypes(prefix, e)) for e in entries)
  return header_file(prefix, _header_comment(name, prefix), f"UOPC_{prefix.upper()}_H", f"/* The entries. */\n{protos}")


def comment_text(text: str) -> str:
  """`text` (names from the program) made safe inside a C block comment on one line."""
  return " ".join(text.replace("*/", "* /").replace("\0", " ").splitlines())


def entry_notes(entry: EntryKernels) -> str:
  """A comment before an entry's prototypes saying how its arguments hold its sharded buffers (a
  multi-device entry takes one pointer per device shard); empty for other entries."""
  if not entry.notes: return ""
  lines = [f"/* {entry.name}: a multi-device program; each device shard is its own buffer argument."]
  lines += [f"   {comment_text(n)}" for n in entry.notes]
  return "\n".join(lines) + " */\n"


def header_file(prefix: str, comment: str, guard: str, declarations: str) -> str:
  """A target's NAME.h around its `declarations`: C99 and C++11, the shared ABI types, and the metadata
  and message functions every uopc library exports."""
  return f"""{comment}
#ifndef {guard}
#define {guard}
#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#ifdef __cplusplus
extern "C" {{
#endif

{abi_types()}

{declarations}

/* Run-time metadata and messages. */
const char* {prefix}_strerror(int code);
int {prefix}_num_entries(void);
const uopc_entry_info* {prefix}_entry_info(int i);  /* NULL when i is out of range */
int {prefix}_find_entry(const char* name);          /* the index of an entry, or -1 */

#ifdef __cplusplus
}}
#endif
#endif /* {guard} */
"""


# ---- the library source ----------------------------------------------------------------------------------
def kernel_name(prefix: str, entry: str, i: int) -> str:
  """The C name of an entry's i-th kernel; hidden in the .so, distinct from the public names."""
  return f"{prefix}__{entry}_k{i}"


def arg_checks(args: list[EntryArg]) -> list[str]:
  bufs = [a for a in args if a.kind == "buffer"]
  lines = [f"  if ({a.c_name} == NULL) return UOPC_ERR_NULL_POINTER;" for a in bufs]
  lines += [f"  if ((const void*){w.c_name} == (const void*){o.c_name}) return UOPC_ERR_ALIASED;"
            for w in bufs if w.written for o in bufs if o is not w and (not o.written or o.key > w.key)]
  lines += [f"  if ({a.c_name} < INT64_C({a.vmin}) || {a.c_name} > INT64_C({a.vmax})) return UOPC_ERR_VAR_RANGE;"
            for a in args if a.kind == "var"]
  return lines


def _kernel_call(kname: str, kernel, by_key: dict[tuple, EntryArg], offsets: dict[int, int], datas: dict[int, str]) -> str:
  """Pointers go through void* so the wrapper need not spell the renderer's element types;
  an intermediate buffer is its offset into the workspace, a constant its embedded array."""
  actual = []
  for p in kernel.params:
    if p.kind == "var" and p.name == TASK_PARAM:
      actual.append("task")
      continue
    if p.kind == "buffer" and p.slot in offsets:
      actual.append(f"(void*)((unsigned char*)workspace + {offsets[p.slot]})")
      continue
    if p.kind == "buffer" and p.slot in datas:
      actual.append(f"(const void*){datas[p.slot]}")
      continue
    a = by_key[("buffer", p.slot) if p.kind == "buffer" else ("var", p.name)]
    actual.append(a.c_name if a.kind == "var" else f"({'' if p.written else 'const '}void*){a.c_name}")
  if is_threaded(kernel): return task_call(kname, kernel, actual)
  return f"  {kname}({', '.join(actual)});"


def _wrapper(prefix: str, entry: EntryKernels, table: Sequence[bytes]) -> str:
  args = entry_args(entry)
  by_key = {(a.kind, a.key): a for a in args}
  offsets = dict(entry.workspace.offsets) if entry.workspace else {}
  datas = {slot: f"{prefix}__data{i}" for slot, i in slot_data(entry, table).items()}
  calls = [_kernel_call(kernel_name(prefix, entry.name, i), k, by_key, offsets, datas) for i, k in launched(entry)]
  if _threaded(entry): return _threaded_wrapper(prefix, entry, args, calls)
  if entry.workspace is None:
    return "\n".join([f"{_prototype(prefix, entry, args)} {{", *arg_checks(args), *calls, "  return UOPC_OK;", "}"])
  fn, size = f"{prefix}_{entry.name}", entry.workspace.size
  forward = ", ".join([a.c_name for a in args] + ["workspace"])
  return "\n".join([
    f"size_t {fn}_workspace_size(void) {{ return {size}; }}",
    f"{_prototype(prefix, entry, args, '_with_workspace', (_WS_PARAM,))} {{", *arg_checks(args),
    "  if (workspace == NULL) return UOPC_ERR_NULL_POINTER;", *calls, "  return UOPC_OK;", "}",
    f"{_prototype(prefix, entry, args)} {{",
    f"  void* workspace = malloc({size});",  # a fresh workspace per call keeps concurrent calls apart
    "  if (workspace == NULL) return UOPC_ERR_NO_MEMORY;",
    f"  int status = {fn}_with_workspace({forward});",
    "  free(workspace);", "  return status;", "}"])


def _threaded_wrapper(prefix: str, entry: EntryKernels, args: list[EntryArg], calls: list[str]) -> str:
  """An entry whose kernels run THREAD axes: the body takes the worker count; the plain entry passes 0."""
  fn = f"{prefix}_{entry.name}"
  names = [a.c_name for a in args]
  plain = f"{_prototype(prefix, entry, args)} {{ return {fn}_with_threads({', '.join(names + ['0'])}); }}"
  with_threads = _prototype(prefix, entry, args, "_with_threads", (_THREADS_PARAM,))
  if entry.workspace is None:
    return "\n".join([f"{with_threads} {{", *arg_checks(args), *calls, "  return UOPC_OK;", "}", plain])
  run, size = f"{prefix}__{entry.name}_run", entry.workspace.size
  return "\n".join([
    f"size_t {fn}_workspace_size(void) {{ return {size}; }}",
    f"static int {run}({', '.join([c_param(a) for a in args] + [_WS_PARAM, _THREADS_PARAM])}) {{", *arg_checks(args),
    "  if (workspace == NULL) return UOPC_ERR_NULL_POINTER;", *calls, "  return UOPC_OK;", "}",
    f"{_prototype(prefix, entry, args, '_with_workspace', (_WS_PARAM,))} {{ return {run}({', '.join(names + ['workspace', '0'])}); }}",
    f"{with_threads} {{",
    f"  void* workspace = malloc({size});",
    "  if (workspace == NULL) return UOPC_ERR_NO_MEMORY;",
    f"  int status = {run}({', '.join(names + ['workspace', 'num_threads'])});",
    "  free(workspace);", "  return status;", "}", plain])


def c_string(s: str) -> str:
  safe = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,[]()+*/:<>=")
  return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in s.encode()) + '"'


def metadata_tables(prefix: str, entries: Sequence[EntryKernels]) -> str:
  out = []
  for e in entries:
    rows = []
    for i, a in enumerate(entry_args(e)):
      shape = "NULL"
      if a.shape:
        shape = f"{prefix}__{e.name}_shape{i}"
        out.append(f"static const int64_t {shape}[] = {{{', '.join(f'INT64_C({d})' for d in a.shape)}}};")
      rows.append(f"  {{{c_string(a.name)}, {'UOPC_ARG_VAR' if a.kind == 'var' else 'UOPC_ARG_BUFFER'}, "
                  f"{DTYPE_ENUM[a.dtype][0]}, {c_string(a.dtype.name)}, {int(a.written)}, "
                  f"{len(a.shape) if a.shape is not None else -1}, {shape}, INT64_C({a.vmin}), INT64_C({a.vmax})}},")
    table = f"{prefix}__{e.name}_args"
    out.append(f"static const uopc_arg_info {table}[] = {{\n" + "\n".join(rows or ["  {NULL, 0, 0, NULL, 0, 0, NULL, 0, 0},"]) + "\n};")
  out.append(f"static const uopc_entry_info {prefix}__entries[] = {{\n" + "\n".join(
    f"  {{{c_string(e.name)}, {len(entry_args(e))}, {prefix}__{e.name}_args}}," for e in entries) + "\n};")
  return "\n".join(out)


def strerror_function(prefix: str, extra: Sequence[tuple[str, str]] = (), before_switch: str = "") -> str:
  """PREFIX_strerror over the shared status codes plus a target's own (name, message) cases;
  `before_switch` is C that handles a range of codes a target maps to its driver's messages."""
  cases = "\n".join(f"  case {name}: return {c_string(msg)};" for name, msg in (*STATUS, *extra))
  return f"""const char* {prefix}_strerror(int code) {{
{before_switch}  switch (code) {{
{cases}
  default: return "unknown uopc status code";
  }}
}}"""


def entry_accessors(prefix: str, n: int) -> str:
  """The metadata functions every target's library exports over its `PREFIX__entries` table."""
  return f"""int {prefix}_num_entries(void) {{ return {n}; }}
const uopc_entry_info* {prefix}_entry_info(int i) {{ return i >= 0 && i < {n} ? &{prefix}__entries[i] : NULL; }}
int {prefix}_find_entry(const char* name) {{
  for (int i = 0; name != NULL && i < {n}; i++)
    if (strcmp({prefix}__entries[i].name, name) == 0) return i;
  return -1;
}}"""


def _check_names(prefix: str, entries: Sequence[EntryKernels]) -> None:
  """Entry names become C identifiers; two entries, or an entry and a kernel, must not share one."""
  public = [f"{prefix}_{e.name}{v}" for e in entries for v in ("", "_with_workspace", "_workspace_size", "_with_threads")] + [f"{prefix}_{f}" for f in ("strerror", "num_entries", "entry_info", "find_entry")]
  private = [kernel_name(prefix, e.name, i) for e in entries for i in range(len(e.kernels))]
  names = public + private
  bad = [e.name for e in entries if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", e.name)]
  if bad or len(set(names)) != len(names) or not entries:
    raise ValueError(f"entries {[e.name for e in entries]} do not give distinct C identifiers")


def render_source(name: str, entries: Sequence[EntryKernels], prelude: str) -> str:
  """NAME.c: self-contained (it carries the header's declarations), built with -fvisibility=hidden;
  only the functions between the visibility pragmas are exported."""
  prefix = c_identifier(name)
  _check_names(prefix, entries)
  kernels = "\n\n".join(k.source.strip() for e in entries for k in e.kernels)
  threaded = [(kernel_name(prefix, e.name, i), k) for e in entries for i, k in enumerate(e.kernels) if is_threaded(k)]
  if threaded: kernels = "\n\n".join([POOL_C.strip(), kernels] + [trampoline(n, k) for n, k in threaded])
  table = data_table(entries)
  wrappers = "\n\n".join(_wrapper(prefix, e, table) for e in entries)
  return f"""/* {name}.c: generated by uopc; do not edit. Build: cc -O3 -fPIC -shared -fvisibility=hidden {name}.c -o lib{name}.so */
{render_header(name, entries)}
#include <stdlib.h>
#include <string.h>

{prelude.strip()}

{c_arrays(prefix, table)}

{kernels}

{metadata_tables(prefix, entries)}

#pragma GCC visibility push(default)
{wrappers}

{strerror_function(prefix)}
{entry_accessors(prefix, len(entries))}
#pragma GCC visibility pop
"""
