"""`uopc run`: run one entry of a .uop file on numpy arrays and show what it wrote.

Natively (`-t c`, `-t llvm`) the file is built by the real driver into a temporary directory and
the entry is called through ctypes, with its arguments laid out by the library's own metadata
(`PREFIX_find_entry`, `PREFIX_entry_info`). With `--emulate`, the entry is lowered by the target's
pipeline up to Linearize and its kernels run in the reference emulator (uopc.emulator), in order,
with the intermediates of a tensor program at their memory-plan offsets in one workspace.

Buffers: an array given by name is checked against the program's dtype and size; a buffer with a
declared shape that is not given is zeros (or, with a seed, random when the entry reads it); a
bare kernel pointer has no size, so it must be given. DEFINE_VARs take their values from `variables`.
"""
from __future__ import annotations

import ctypes
import tempfile
from dataclasses import dataclass
from math import prod
from pathlib import Path

import numpy as np

from uopc.diagnostics import CompileError, Diagnostic, error
from uopc.dtype import DType
from uopc.emulator import EmulationError, emulate, np_dtype
from uopc.module import Entry, Module
from uopc.ops import GroupOp, Ops
from uopc.uop import UOp, shape_values

NATIVE_TARGETS = ("c", "llvm")
EMULATED_TARGETS = ("c", "llvm", "cuda", "amd", "metal")
_LIB = "prog"  # the name of the temporary library: fixed, so any file name works


@dataclass(frozen=True)
class Arg:
  """One argument of an entry, as the program declares it."""
  name: str
  kind: str                       # "buffer" | "var"
  key: int | str                  # a buffer's slot, a var's name
  dtype: DType                    # a buffer's element dtype; index for a var
  shape: tuple | None             # a buffer's declared shape (ints or DEFINE_VARs); None: a bare pointer
  written: bool
  read: bool                      # a buffer's contents on entry matter (it is not only written)
  node: UOp                       # the PARAM or DEFINE_VAR, for locations


@dataclass
class RunResult:
  entry: str
  args: list[Arg]
  arrays: dict[str, np.ndarray]   # every buffer by name, in its declared shape


# ---- what the entry takes -------------------------------------------------------------------------------
def _store_root(u: UOp) -> UOp:
  while u.op in (Ops.INDEX, Ops.AFTER) or u.op in GroupOp.Movement: u = u.src[0]
  return u


def _reads(u: UOp, users: dict[UOp, list[tuple[UOp, int]]]) -> bool:
  """Is `u` (a buffer, or a pointer or view of one) read anywhere, not only stored into?"""
  for user, i in users.get(u, ()):
    if user.op is Ops.STORE and i == 0: continue
    if i == 0 and (user.op in (Ops.INDEX, Ops.AFTER) or user.op in GroupOp.Movement):
      if _reads(user, users): return True
    else: return True
  return False


def entry_arguments(entry: Entry) -> list[Arg]:
  """The buffers (by slot) and DEFINE_VARs (by name) of an entry, as the launcher orders them (not the
  formals of a FUNCTION or CALL body: those are its arguments')."""
  graph = entry.sink.toposort(lambda u: u.src[1:] if u.op in (Ops.FUNCTION, Ops.CALL) else u.src)
  written = {_store_root(u.src[0]) for u in graph if u.op is Ops.STORE}
  users: dict[UOp, list[tuple[UOp, int]]] = {}
  for u in graph:
    for i, s in enumerate(u.src): users.setdefault(s, []).append((u, i))
  params = sorted((u for u in (*graph, *entry.unused) if u.op is Ops.PARAM), key=lambda u: u.arg[0])
  args = []
  for p in params:
    if p.src: dtype, shape = p.dtype, shape_values(p.src[0])
    else: dtype, shape = p.dtype.base, ((p.dtype.size,) if p.dtype.size >= 0 else None)
    args.append(Arg(str(p.arg[1]), "buffer", p.arg[0], dtype.scalar, shape, p in written, _reads(p, users), p))
  defvars = {u.arg[0]: u for u in (*entry.sink.toposort(), *entry.unused) if u.op is Ops.DEFINE_VAR}  # a body's sizes too
  args += [Arg(name, "var", name, u.dtype, None, False, True, u) for name, u in sorted(defvars.items())]
  return args


def pick_entry(module: Module, name: str | None) -> Entry:
  names = [e.name for e in module.entries]
  if name is None:
    if len(names) == 1: return module.entries[0]
    raise _error(module, None, f"{module.path} has {len(names)} entries: choose one with --entry", f"entries: {', '.join(names)}")
  if name not in names: raise _error(module, None, f"{module.path} has no entry '{name}'", f"entries: {', '.join(names) or 'none'}")
  return module.entry(name)


def _error(module: Module, node: UOp | None, message: str, *notes: str) -> CompileError:
  loc = module.loc_of(node) if node is not None else None
  return CompileError([error(loc, message, *notes)], {module.path: module.text})


# ---- inputs ---------------------------------------------------------------------------------------------
_SIZE_OPS = {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
             Ops.MAX: max, Ops.IDIV: lambda a, b: int(a / b), Ops.MOD: lambda a, b: a - b * int(a / b),
             Ops.FLOORDIV: lambda a, b: a // b, Ops.FLOORMOD: lambda a, b: a % b}


def _size_value(d: UOp, variables: dict[str, int]) -> int | None:
  """A symbolic size's value: DEFINE_VARs from `variables`, integer arithmetic over them; None if unknown."""
  if d.op is Ops.CONST: return int(d.arg)
  if d.op is Ops.DEFINE_VAR: return int(variables[d.arg[0]]) if d.arg[0] in variables else None
  if d.op is Ops.CAST and d.src: return _size_value(d.src[0], variables)
  if d.op not in _SIZE_OPS or len(d.src) != 2: return None
  a, b = (_size_value(s, variables) for s in d.src)
  return None if a is None or b is None else _SIZE_OPS[d.op](a, b)


def _resolve_shape(module: Module, arg: Arg, variables: dict[str, int]) -> tuple[int, ...] | None:
  if arg.shape is None: return None
  dims = []
  for d in arg.shape:
    if (v := d if isinstance(d, int) else _size_value(d, variables)) is not None: dims.append(v)
    else:
      missing = sorted({u.arg[0] for u in d.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] not in variables})
      raise _error(module, arg.node, f"the size of buffer '{arg.name}' needs a value for {', '.join(missing) or 'an expression'}",
                   "give it with --var NAME=VALUE")
  return tuple(dims)


def _random(rng: np.random.Generator, dt: DType, shape: tuple[int, ...]) -> np.ndarray:
  if dt.is_bool(): return rng.random(shape) < 0.5
  if dt.is_float(): return rng.standard_normal(shape).astype(np_dtype(dt))
  lo = 0 if dt.is_unsigned() else -10
  return rng.integers(lo, 10, shape, endpoint=True).astype(np_dtype(dt))


def _check_variables(module: Module, args: list[Arg], variables: dict[str, int]) -> None:
  known = {a.name for a in args if a.kind == "var"}
  for name in variables:
    if name not in known: raise _error(module, None, f"--var {name}: the entry has no DEFINE_VAR '{name}'",
                                       f"its sizes: {', '.join(sorted(known)) or 'none'}")
  for a in args:
    if a.kind != "var": continue
    _, lo, hi = a.node.arg
    if a.name not in variables: raise _error(module, a.node, f"size '{a.name}' needs a value: --var {a.name}=VALUE (in [{lo}, {hi}])")
    if not lo <= variables[a.name] <= hi:
      raise _error(module, a.node, f"--var {a.name}={variables[a.name]} is outside the range [{lo}, {hi}] the program declares")


def prepare_arrays(module: Module, args: list[Arg], inputs: dict[str, np.ndarray], variables: dict[str, int],
                   seed: int | None) -> dict[str, np.ndarray]:
  """One contiguous array per buffer argument, in its declared shape (1-D for a bare pointer)."""
  buffers = {a.name: a for a in args if a.kind == "buffer"}
  for name in inputs:
    if name not in buffers: raise _error(module, None, f"--input {name}: the entry has no buffer '{name}'",
                                         f"its buffers: {', '.join(buffers) or 'none'}")
  _check_variables(module, args, variables)
  rng = np.random.default_rng(seed) if seed is not None else None
  arrays = {}
  for name, a in buffers.items():
    shape = _resolve_shape(module, a, variables)
    if name in inputs: arrays[name] = _checked_input(module, a, inputs[name], shape)
    elif shape is None:
      raise _error(module, a.node, f"buffer '{name}' has no declared size: give it with --input {name}=FILE.npy")
    elif rng is not None and a.read: arrays[name] = _random(rng, a.dtype, shape)
    else: arrays[name] = np.zeros(shape, np_dtype(a.dtype))
  return arrays


def _checked_input(module: Module, a: Arg, given: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray:
  want = np_dtype(a.dtype)
  if given.dtype != want:
    raise _error(module, a.node, f"input '{a.name}' holds {given.dtype}, but buffer '{a.name}' is {a.dtype.name}")
  if shape is not None and given.size != prod(shape):
    raise _error(module, a.node, f"input '{a.name}' has {given.size} elements (shape {tuple(given.shape)}), "
                                 f"but buffer '{a.name}' has shape {shape} ({prod(shape)} elements)")
  return np.ascontiguousarray(given).reshape(shape if shape is not None else (-1,)).copy()


# ---- running --------------------------------------------------------------------------------------------
def run_file(path: str | Path, entry: str | None = None, target: str = "c", inputs: dict[str, np.ndarray] | None = None,
             variables: dict[str, int] | None = None, seed: int | None = None, emulated: bool = False,
             allow_tf32: bool = False, archs: tuple[str, ...] = (), vector_bytes: int | None = None,
             fp_contract: bool | None = None, fast_math: bool = False) -> RunResult:
  """Run one entry of the file at `path`; the arrays of the result hold every buffer afterwards
  (`allow_tf32` and `archs`: as `uopc build --allow-tf32` and `--arch`, for the emulated -t cuda kernels;
  `vector_bytes`: the vector registers of the emulated -t c kernels, as `--cpu` gives them; `fp_contract`:
  as `uopc build --fp-contract` for the emulated kernels, None: the target's default; `fast_math`: as
  `uopc build --fast-math`, native or emulated)."""
  from uopc.frontend import load_module
  from uopc.verify import verify_module
  module = load_module(str(path))
  diags = [d for d in verify_module(module) if d.severity == "error"]
  if diags: raise CompileError(diags, {module.path: module.text})
  from uopc.stages.multi_device import lower_entry
  chosen, _ = lower_entry(pick_entry(module, entry), module)  # a multi-device entry takes one buffer per device shard
  if not emulated and target not in NATIVE_TARGETS:
    raise CompileError([error(None, f"-t {target} runs on a device: use --emulate to run its kernels in the emulator",
                              f"targets that run natively: {', '.join(NATIVE_TARGETS)}")])
  args = entry_arguments(chosen)
  variables = dict(variables or {})
  arrays = prepare_arrays(module, args, dict(inputs or {}), variables, seed)
  if emulated: run_emulated(module, chosen, target, args, arrays, variables, allow_tf32, archs, vector_bytes, fp_contract, fast_math)
  else: run_native(Path(path), chosen, target, args, arrays, variables, fast_math)
  return RunResult(chosen.name, args, arrays)


def run_emulated(module: Module, entry: Entry, target: str, args: list[Arg], arrays: dict[str, np.ndarray],
                 variables: dict[str, int], allow_tf32: bool = False, archs: tuple[str, ...] = (), vector_bytes: int | None = None,
                 fp_contract: bool | None = None, fast_math: bool = False) -> None:
  """Lower `entry` with `target`'s pipeline (for the GPU `archs`; (): the target's defaults; `fp_contract` and
  `fast_math`: see `pipeline`) up to Linearize and emulate its kernels in order."""
  from uopc.driver import check_target
  from uopc.pipeline import TENSOR_STAGES, PrintOptions, pipeline, run_kernel_stages
  check_target(target)
  stages = pipeline(target, module.loc_of, relocate=module.relocate, archs=archs, allow_tf32=allow_tf32, vector_bytes=vector_bytes,
                    fp_contract=fp_contract, fast_math=fast_math)
  names = [s.name for s in stages]
  kernel_stages = [s for s in stages if s.name not in TENSOR_STAGES]
  kernel_stages = kernel_stages[:[s.name for s in kernel_stages].index("linearize") + 1]
  slots = {a.key: arrays[a.name].reshape(-1) for a in args if a.kind == "buffer"}
  if entry.kind == "func":
    if "rangeify" not in names: raise _error(module, None, f"entry '{entry.name}': -t {target} cannot lower tensor-level entries yet")
    schedule = run_kernel_stages([s for s in stages if s.name in TENSOR_STAGES], entry.sink, entry.name, PrintOptions())
    workspace = np.zeros(schedule.workspace_size, np.uint8)
    for p in schedule.placements:
      slots[p.buffer.slot] = workspace[p.offset:p.offset + p.nbytes].view(np_dtype(p.buffer.dtype))
    for b in schedule.buffers:  # embedded constant data: read-only, little-endian
      if b.data is not None: slots[b.slot] = np.frombuffer(b.data, np_dtype(b.dtype).newbyteorder("<"))
    linears = [run_kernel_stages(kernel_stages, k, f"{entry.name}_k{i}", PrintOptions()) for i, k in enumerate(schedule.kernels)]
    # a launch binds the kernel's slots to the program's buffers (a CALL body's kernel runs at each call site)
    runs = [(linears[ln.kernel], {s: slots[b.slot] for s, b in ln.binds}) for ln in schedule.launches]
  else: runs = [(run_kernel_stages(kernel_stages, entry.sink, f"{entry.name}_k0", PrintOptions()), slots)]
  for linear, bound in runs:
    try:
      emulate(linear, bound, variables, module.loc_of)
    except EmulationError as e:
      raise CompileError(e.diagnostics, {module.path: module.text}) from None


# ---- the native library, through ctypes -------------------------------------------------------------------
class _ArgInfo(ctypes.Structure):
  _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("dtype", ctypes.c_int32), ("dtype_name", ctypes.c_char_p),
              ("written", ctypes.c_int32), ("ndim", ctypes.c_int32), ("shape", ctypes.POINTER(ctypes.c_int64)),
              ("min", ctypes.c_int64), ("max", ctypes.c_int64)]


class _EntryInfo(ctypes.Structure):
  _fields_ = [("name", ctypes.c_char_p), ("num_args", ctypes.c_int32), ("args", ctypes.POINTER(_ArgInfo))]


_KIND_VAR = 1  # uopc_arg_kind UOPC_ARG_VAR


def build_library(path: Path, target: str, out_dir: Path, cpu: str = "portable", fast_math: bool = False) -> Path:
  from uopc.driver import BuildOptions, build, check_target
  check_target(target)
  build(path, BuildOptions(target, out_dir, ("so", "header"), name=_LIB, cpu=cpu, fast_math=fast_math))
  return out_dir / f"lib{_LIB}.so"


def run_native(path: Path, entry: Entry, target: str, args: list[Arg], arrays: dict[str, np.ndarray],
               variables: dict[str, int], fast_math: bool = False) -> None:
  with tempfile.TemporaryDirectory(prefix="uopc-run-") as tmp:
    lib = ctypes.CDLL(str(build_library(path, target, Path(tmp), fast_math=fast_math)))
    call_entry(lib, _LIB, entry.name, args, arrays, variables)


def call_entry(lib: ctypes.CDLL, prefix: str, entry: str, args: list[Arg], arrays: dict[str, np.ndarray],
               variables: dict[str, int]) -> None:
  """Call PREFIX_ENTRY with the arguments its metadata (PREFIX_entry_info) lists."""
  actual = [ctypes.c_int64(variables[a.name]) if a.kind == "var" else ctypes.c_void_p(arrays[a.name].ctypes.data)
            for a in library_arguments(lib, prefix, entry, args)]
  fn = getattr(lib, f"{prefix}_{entry}")
  fn.restype = ctypes.c_int
  status = fn(*actual)
  if status != 0:
    raise CompileError([error(None, f"entry '{entry}' refused its arguments: {entry_strerror(lib, prefix, status)}")])


def entry_strerror(lib: ctypes.CDLL, prefix: str, status: int) -> str:
  strerror = getattr(lib, f"{prefix}_strerror")
  strerror.restype = ctypes.c_char_p
  return strerror(status).decode()


def library_arguments(lib: ctypes.CDLL, prefix: str, entry: str, args: list[Arg]) -> list[Arg]:
  """The program's arguments in the order PREFIX_ENTRY takes them, by its metadata (PREFIX_entry_info)."""
  find_entry, entry_info = (getattr(lib, f"{prefix}_{f}") for f in ("find_entry", "entry_info"))
  find_entry.restype, entry_info.restype = ctypes.c_int, ctypes.POINTER(_EntryInfo)
  index = find_entry(entry.encode())
  if index < 0: raise RuntimeError(f"the library has no entry '{entry}'")
  info = entry_info(index).contents
  # the metadata names a buffer as the program does, or data<slot> when the PARAM has no name; a
  # buffer no kernel reads or writes is not an argument at all, so match by name, not by position
  buffers = {a.name: a for a in args if a.kind == "buffer"} | {f"data{a.key}": a for a in args if a.kind == "buffer"}
  variables = {a.name: a for a in args if a.kind == "var"}
  out = []
  for i in range(info.num_args):
    meta = info.args[i]
    name = meta.name.decode()
    a = variables.get(name) if meta.kind == _KIND_VAR else buffers.get(name)
    if a is None or (meta.kind != _KIND_VAR and meta.dtype_name.decode() != a.dtype.name):
      raise RuntimeError(f"library argument {i} ({name}, {meta.dtype_name.decode()}) is none of the program's arguments")
    out.append(a)
  return out


# ---- output ---------------------------------------------------------------------------------------------
def written_buffers(result: RunResult) -> list[Arg]:
  return [a for a in result.args if a.kind == "buffer" and a.written]


def format_result(result: RunResult) -> str:
  """Every written buffer, numpy style, under a `name: dtype[shape]` line."""
  out = []
  with np.printoptions(threshold=1000, linewidth=100):
    for a in written_buffers(result):
      arr = result.arrays[a.name]
      out.append(f"{a.name}: {a.dtype.name}[{', '.join(map(str, arr.shape))}]\n{np.array2string(arr, separator=' ')}")
  return "\n".join(out) + ("\n" if out else "")


def save_outputs(result: RunResult, outputs: dict[str, str]) -> None:
  for name, file in outputs.items():
    if name not in result.arrays:
      raise CompileError([error(None, f"--output {name}: entry '{result.entry}' has no buffer '{name}'",
                                f"its buffers: {', '.join(result.arrays) or 'none'}")])
    np.save(file, result.arrays[name])


def load_inputs(specs: dict[str, str]) -> dict[str, np.ndarray]:
  arrays, diags = {}, []
  for name, file in specs.items():
    try:
      arrays[name] = np.load(file, allow_pickle=False)
    except (OSError, ValueError) as e:
      diags.append(Diagnostic(None, f"cannot read --input {name}={file}: {e}"))
  if diags: raise CompileError(diags)
  return arrays
