"""The Metal launcher: `NAME.h` and `NAME_launcher.m` (Objective-C, ARC), built into `libNAME.dylib`.

The C API has the shape of the C target's (uopc/launcher.py), with Metal objects passed as opaque
pointers (`(__bridge void*)` of the Objective-C object):
- `int PREFIX_ENTRY(void* queue, void* data0, const void* data1, ..., int64_t n)`: `queue` is an
  `id<MTLCommandQueue>`, each buffer an `id<MTLBuffer>` (by slot, `const` when only read), each
  DEFINE_VAR an `int64_t` (by name). The kernels are encoded into one command buffer, in order, and
  committed: the call returns before the GPU finishes, like a launch on a CUDA stream.
  `PREFIX_synchronize(queue)` waits for everything committed to `queue` so far.
- The same argument checks and status codes as the C target, plus PREFIX_ERR_METAL when Metal fails
  (the library does not compile, a pipeline cannot be made, the command buffer fails).
- The MSL source is embedded; it is compiled (without fast math) once per MTLDevice and the
  pipelines are kept on the device object itself (an associated object), so the library has no
  mutable global state and calls from several threads are safe.
- The metadata functions (PREFIX_num_entries, PREFIX_entry_info, PREFIX_find_entry, PREFIX_strerror)
  and tables are those of the C target.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

from uopc.embedded_data import c_arrays, data_table, slot_data
from uopc.launcher import (EntryKernels, header_file, arg_checks, c_identifier, c_string, entry_accessors, entry_args,
                           launched, metadata_tables, strerror_function)
from uopc.targets.geometry import size_expr
from uopc.targets.metal.render import MetalKernel
from uopc.tools import run_tool

ERR_METAL = 64  # outside the shared uopc_status range, so it never collides with a future shared code


def _metal_args(kernel: MetalKernel, by_key: dict, offsets: dict[int, int], datas: dict[int, int]) -> list[str]:
  """Bind each kernel parameter at its position in the signature (the argument table index); an
  intermediate buffer is the workspace at its planned offset, a constant its buffer on the device."""
  lines = []
  for i, p in enumerate(kernel.params):
    if p.kind == "buffer" and p.slot in offsets:
      lines.append(f"    [enc setBuffer:ws offset:{offsets[p.slot]} atIndex:{i}];")
    elif p.kind == "buffer" and p.slot in datas:
      lines.append(f"    [enc setBuffer:(id<MTLBuffer>)[datas objectAtIndex:{datas[p.slot]}] offset:0 atIndex:{i}];")
    elif p.kind == "buffer":
      a = by_key[("buffer", p.slot)]
      lines.append(f"    [enc setBuffer:(__bridge id<MTLBuffer>)(void*){a.c_name} offset:0 atIndex:{i}];")
    else:
      a = by_key[("var", p.name)]
      lines.append(f"    {{ int32_t v = (int32_t){a.c_name}; [enc setBytes:&v length:sizeof(v) atIndex:{i}]; }}")
  return lines


def _dispatch(kernel: MetalKernel, var_names: dict[str, str], pipeline: str) -> str:
  size = lambda dims: "MTLSizeMake(" + ", ".join(f"(NSUInteger){size_expr(d, var_names)}" for d in dims) + ")"  # noqa: E731
  if kernel.dispatch == "groups":
    return f"    [enc dispatchThreadgroups:{size(kernel.grid)} threadsPerThreadgroup:{size(kernel.threads)}];"
  x = size_expr(kernel.grid[0], var_names)
  group = f"MTLSizeMake(MIN({pipeline}.maxTotalThreadsPerThreadgroup, (NSUInteger){x}), 1, 1)"
  return f"    [enc dispatchThreads:{size(kernel.grid)} threadsPerThreadgroup:{group}];"


def _workspace(entry: EntryKernels) -> list[str]:
  """A private MTLBuffer per call for the intermediates (the command buffer keeps it alive until the
  GPU is done), so concurrent calls never share one."""
  if entry.workspace is None: return []
  return [f"    id<MTLBuffer> ws = [q.device newBufferWithLength:{entry.workspace.size} options:MTLResourceStorageModePrivate];",
          "    if (ws == nil) return UOPC_ERR_NO_MEMORY;"]


def _entry_function(prefix: str, entry: EntryKernels, first_kernel: int, table) -> str:
  offsets = dict(entry.workspace.offsets) if entry.workspace else {}
  datas = slot_data(entry, table)
  args = entry_args(entry)
  by_key = {(a.kind, a.key): a for a in args}
  var_names = {a.key: a.c_name for a in args if a.kind == "var"}
  body = []
  for i, k in launched(entry):
    pipeline = f"((id<MTLComputePipelineState>)[pipelines objectAtIndex:{first_kernel + i}])"
    body += [f"    [enc setComputePipelineState:{pipeline}];", *_metal_args(k, by_key, offsets, datas), _dispatch(k, var_names, pipeline)]
  constants = [f"    NSArray* datas = {prefix}__data_buffers(q.device);", f"    if (datas == nil) return {prefix}_ERR_METAL;"] if datas else []
  return "\n".join([f"{_prototype(prefix, entry, args)} {{", *arg_checks(args),
                    "  @autoreleasepool {",
                    "    id<MTLCommandQueue> q = (__bridge id<MTLCommandQueue>)queue;",
                    "    if (q == nil) return UOPC_ERR_NULL_POINTER;",
                    f"    NSArray* pipelines = {prefix}__pipelines(q.device);",
                    f"    if (pipelines == nil) return {prefix}_ERR_METAL;", *constants, *_workspace(entry),
                    "    id<MTLCommandBuffer> cb = [q commandBuffer];",
                    "    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];", *body,
                    "    [enc endEncoding];", "    [cb commit];", "  }", "  return UOPC_OK;", "}"])


def _c_param(a) -> str:
  if a.kind == "var": return f"int64_t {a.c_name}"
  return f"{'' if a.written else 'const '}void* {a.c_name}"


def _prototype(prefix: str, entry: EntryKernels, args) -> str:
  return f"int {prefix}_{entry.name}({', '.join(['void* queue'] + [_c_param(a) for a in args])})"


def render_header(name: str, entries: Sequence[EntryKernels]) -> str:
  """NAME.h: C99 and C++11; Metal objects are `void*` so that C callers need no Objective-C."""
  prefix = c_identifier(name)
  guard = f"UOPC_{prefix.upper()}_METAL_H"
  protos = "\n".join(f"{_prototype(prefix, e, entry_args(e))};" for e in entries)
  comment = f"""/* {name}.h: generated by uopc (-t metal); do not edit.

   Every entry is `int {prefix}_ENTRY(void* queue, buffers..., sizes...)`: queue is an
   id<MTLCommandQueue>, each buffer an id<MTLBuffer> (by slot; const when only read), each size
   (DEFINE_VAR) an int64_t (by name), all Objective-C objects passed as (__bridge void*). The call
   encodes the kernels and commits them without waiting; {prefix}_synchronize(queue) waits. It returns
   UOPC_OK (0), the uopc_status of the first failed argument check (nothing runs then), or
   {prefix}_ERR_METAL when Metal fails. Link with -l{name} (lib{name}.dylib). */"""
  declarations = f"""#define {prefix}_ERR_METAL {ERR_METAL} /* Metal failed: library compile, pipeline creation or command buffer */

/* The entries. */
{protos}
int {prefix}_synchronize(void* queue);"""
  return header_file(prefix, comment, guard, declarations)


def _pipelines(prefix: str, kernel_names: list[str]) -> str:
  names = ", ".join(c_string(n) for n in kernel_names)
  return f"""static const char {prefix}__kernel_names[{len(kernel_names)}][{max(map(len, kernel_names)) + 1}] = {{{names}}};
static const char {prefix}__pipelines_key = 0; /* its address keys the pipelines on each MTLDevice */

/* The pipelines of every kernel for `device`, made on first use and kept on the device object. */
static NSArray* {prefix}__pipelines(id<MTLDevice> device) {{
  @synchronized (device) {{
    NSArray* cached = objc_getAssociatedObject(device, &{prefix}__pipelines_key);
    if (cached != nil) return cached;
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    options.fastMathEnabled = NO;
    NSError* err = nil;
    id<MTLLibrary> library = [device newLibraryWithSource:[NSString stringWithUTF8String:{prefix}__metal_source]
                                                  options:options error:&err];
    if (library == nil) return nil;
    NSMutableArray* made = [NSMutableArray arrayWithCapacity:{len(kernel_names)}];
    for (int i = 0; i < {len(kernel_names)}; i++) {{
      id<MTLFunction> fn = [library newFunctionWithName:[NSString stringWithUTF8String:{prefix}__kernel_names[i]]];
      id<MTLComputePipelineState> p = fn == nil ? nil : [device newComputePipelineStateWithFunction:fn error:&err];
      if (p == nil) return nil;
      [made addObject:p];
    }}
    objc_setAssociatedObject(device, &{prefix}__pipelines_key, made, OBJC_ASSOCIATION_RETAIN);
    return made;
  }}
}}"""


def _data_buffers(prefix: str, table) -> str:
  """The constant data, and its MTLBuffers for `device`, made on first use and kept on the device object
  (as the pipelines are)."""
  if not table: return ""
  return f"""{c_arrays(prefix, table, tables=True)}
static const char {prefix}__data_key = 0; /* its address keys the constant data's buffers on each MTLDevice */

/* The MTLBuffers holding the constant data on `device`, made on first use and kept on the device object. */
static NSArray* {prefix}__data_buffers(id<MTLDevice> device) {{
  @synchronized (device) {{
    NSArray* cached = objc_getAssociatedObject(device, &{prefix}__data_key);
    if (cached != nil) return cached;
    NSMutableArray* made = [NSMutableArray arrayWithCapacity:{len(table)}];
    for (int i = 0; i < {len(table)}; i++) {{
      id<MTLBuffer> b = [device newBufferWithBytes:{prefix}__datas[i] length:{prefix}__data_sizes[i]
                                           options:MTLResourceStorageModeShared];
      if (b == nil) return nil;
      [made addObject:b];
    }}
    objc_setAssociatedObject(device, &{prefix}__data_key, made, OBJC_ASSOCIATION_RETAIN);
    return made;
  }}
}}
"""


def _c_source_literal(text: str) -> str:
  """The MSL text as C string literals, one per line, readable in the .m file."""
  escaped = (line.replace("\\", "\\\\").replace('"', '\\"') for line in text.splitlines())
  return "\n".join(f'"{line}\\n"' for line in escaped)


def _accessors(prefix: str, n: int) -> str:
  return f"""int {prefix}_synchronize(void* queue) {{
  if (queue == NULL) return UOPC_ERR_NULL_POINTER;
  @autoreleasepool {{
    id<MTLCommandBuffer> cb = [(__bridge id<MTLCommandQueue>)queue commandBuffer];
    [cb commit];
    [cb waitUntilCompleted]; /* a queue runs its command buffers in order */
    return cb.status == MTLCommandBufferStatusCompleted ? UOPC_OK : {prefix}_ERR_METAL;
  }}
}}
""" + strerror_function(prefix, [(f"{prefix}_ERR_METAL", "Metal failed (library compile, pipeline creation or command buffer)")]) \
    + "\n" + entry_accessors(prefix, n)


def render_launcher(name: str, entries: Sequence[EntryKernels], metal_source: str) -> str:
  """NAME_launcher.m: the entry functions over the embedded MSL module `metal_source`."""
  prefix = c_identifier(name)
  kernel_names = [k.name for e in entries for k in e.kernels]
  starts = [sum(len(e.kernels) for e in entries[:i]) for i in range(len(entries))]
  table = data_table(entries)
  functions = "\n\n".join(_entry_function(prefix, e, s, table) for e, s in zip(entries, starts))
  return f"""/* {name}_launcher.m: generated by uopc (-t metal); do not edit.
   Build: clang -fobjc-arc -shared -framework Metal -framework Foundation {name}_launcher.m -o lib{name}.dylib */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <objc/runtime.h>
#include <string.h>
#include "{name}.h"

static const char {prefix}__metal_source[] =
{_c_source_literal(metal_source)};

{_pipelines(prefix, kernel_names)}
{_data_buffers(prefix, table)}

{metadata_tables(prefix, entries)}

#pragma GCC visibility push(default)
{functions}

{_accessors(prefix, len(entries))}
#pragma GCC visibility pop
"""


def build_macos(out_dir: Path, name: str) -> list[Path]:
  """NAME.metallib and libNAME.dylib from NAME.metal and NAME_launcher.m in out_dir, where Xcode's
  tools exist (`xcrun`); elsewhere nothing is built and [] is returned."""
  if shutil.which("xcrun") is None: return []
  steps = [["xcrun", "-sdk", "macosx", "metal", "-fno-fast-math", "-c", f"{name}.metal", "-o", f"{name}.air"],
           ["xcrun", "-sdk", "macosx", "metallib", f"{name}.air", "-o", f"{name}.metallib"],
           ["xcrun", "-sdk", "macosx", "clang", "-fobjc-arc", "-O2", "-shared", "-fvisibility=hidden", "-framework", "Metal",
            "-framework", "Foundation", f"{name}_launcher.m", "-o", f"lib{name}.dylib"]]
  for cmd in steps:
    done = run_tool(cmd, out_dir)
    if done.returncode != 0:
      raise RuntimeError(f"{' '.join(cmd)} failed (exit {done.returncode}) on generated code:\n{done.stdout}{done.stderr}")
  (out_dir / f"{name}.air").unlink()
  return [out_dir / f"{name}.metallib", out_dir / f"lib{name}.dylib"]
