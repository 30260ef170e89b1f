"""The lowering pipeline of seed 000 as data: an ordered list of named stages per target.

Seed 000's stages, in order, are callify, rangeify, optimize, expand, isel, linearize, plan and
render. Only the stages that exist are listed; a stage joins its target's list when it lands.
Tensor-level stages (callify, rangeify, and plan, which places the intermediates of a whole
program) run on `func` entries only; `kernel` entries start at the first kernel-level stage. Every kernel-level stage maps one kernel to one kernel: `run(value, name)`,
where `name` is the C name the kernel gets, and the value is a UOp until render makes it a
RenderedKernel.

A build may have arch variants (`ArchVariant`, `Target.arch_variants`): for each, every kernel goes through
Optimize again under the variant's capabilities, and only a kernel that becomes arch-specific there runs the
later stages a second time; the others are shared, so a build without such kernels costs one Optimize more.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence, TextIO

from uopc import progress
from uopc.diagnostics import CompileError, error
from uopc.launcher import EntryKernels, c_identifier, kernel_name
from uopc.module import Entry, Module
from uopc.ops import Ops
from uopc.targets import Target, as_target
from uopc.uop import UOp

SEED_STAGES = ("callify", "rangeify", "optimize", "expand", "isel", "linearize", "plan", "render")
TENSOR_STAGES = frozenset({"callify", "rangeify", "plan"})


@dataclass(frozen=True)
class Stage:
  name: str
  run: Callable[[Any, str], Any]


# Stages import their modules when they run, so that listing the pipeline (for --help and option
# checking) does not load every pass.
def _callify(sink: UOp, name: str) -> UOp:
  from uopc.stages.callify import callify
  return callify(sink)


def _rangeify(target: Target, fast_math: bool = False) -> Callable[[UOp, str], Any]:
  """Rangeify; on the CPU targets, with their rewrites (uopc.stages.cpu_graph: long full reductions split
  into chunks for THREAD tasks, half-precision operands converted once); on the GPU targets, long
  reductions nested in another reduction's loop get kernels of their own (see uopc.stages.rangeify)."""
  def run(sink: UOp, name: str):
    from uopc.stages.rangeify import rangeify
    return rangeify(sink, cpu=not target.gpu, fast_math=fast_math)
  return run


def _plan(program, name: str):
  from uopc.stages.plan import plan
  return plan(program)


def _optimize(target: Target, schedule: Mapping[str, tuple] | None, relocate: Callable[[UOp, UOp], None],
              vector_bytes: int | None, archs: tuple[str, ...], tf32: bool = False) -> Callable[[UOp, str], Any]:
  """Optimize with the opts --opts pins for a kernel, the target's heuristics for the others (the
  target's capabilities computed once, for every kernel)."""
  caps = None
  def run(sink: UOp, name: str):
    nonlocal caps
    from uopc.stages.optimize import optimize, target_caps
    caps = caps or target_caps(target, vector_bytes, archs, tf32)
    return optimize(sink, name, caps, schedule.get(name) if schedule is not None else None, relocate)
  return run


def _expand(relocate: Callable[[UOp, UOp], None]) -> Callable[[Any, str], UOp]:
  def run(kernel_schedule, name: str) -> UOp:
    from uopc.stages.expand import expand
    return expand(kernel_schedule, relocate)
  return run


def _isel(target: Target, fast_math: bool, contract: bool = False) -> Callable[[UOp, str], UOp]:
  """Lower the ops `target` lacks (decompositions, transcendentals, division by constants)."""
  def run(sink: UOp, name: str) -> UOp:
    from uopc.stages.isel import isel
    return isel(sink, target.ops, fast_math, contract)
  return run


def _linearize(target: Target) -> Callable[[UOp, str], UOp]:
  """Order each kernel; on the CPU targets, and on -t cuda in small launches, interleaving independent
  chains (uopc.stages.linearize)."""
  def run(sink: UOp, name: str) -> UOp:
    from uopc.stages.linearize import linearize
    return linearize(sink, interleave=not target.gpu, gpu=target.ilp_small_launches)
  return run


def pipeline(target: str | Target, loc_of: Callable[[UOp], Any] = lambda u: None, schedule: Mapping[str, tuple] | None = None,
             relocate: Callable[[UOp, UOp], None] = lambda old, new: None, fast_math: bool = False,
             vector_bytes: int | None = None, archs: tuple[str, ...] = (), fp_contract: bool | None = None,
             allow_tf32: bool = False) -> tuple[Stage, ...]:
  """`target`'s stages in seed 000's order (a Target, or its name, resolved here once); `loc_of` lets a renderer point a refusal (an op the target
  lacks) at the source; `schedule` maps kernel names to the opts --opts pins for them; `relocate(old,
  new)` (Module.relocate) keeps a node's source location on what a stage replaces it with; `fast_math`
  lets Rangeify keep widened half-precision products exact (uopc.stages.fast_math) and Instruction Selection and
  the renderer use the target's approximate instructions; `vector_bytes`
  is the width of the CPU's vector registers that -t c builds for (`--cpu`; None: the portable one);
  `archs` the GPU archs of the build (--arch; (): the target's defaults), whose limits Optimize meets;
  `fp_contract` (--fp-contract) lets Instruction Selection fuse a float ADD(MUL) into one multiply-add (None: the
  target's default, Target.contract); `allow_tf32` (--allow-tf32) lets float32 gemms take the tf32 tensor cores."""
  t = as_target(target)
  fp_contract = t.contract(fp_contract)
  return (Stage("callify", _callify), Stage("rangeify", _rangeify(t, fast_math)), Stage("optimize", _optimize(t, schedule, relocate, vector_bytes, archs, allow_tf32)),
          Stage("expand", _expand(relocate)), Stage("isel", _isel(t, fast_math, fp_contract)), Stage("linearize", _linearize(t)),
          Stage("plan", _plan), Stage("render", t.render_stage(loc_of, fast_math)))


class UnknownStageError(ValueError):
  """A --print-before/--print-after name that is not a stage of the target; the CLI makes it a usage error."""


def stage_names(target: str | Target) -> tuple[str, ...]: return tuple(s.name for s in pipeline(target))


def check_stage_name(target: str | Target, name: str) -> None:
  valid = stage_names(target)
  if name not in valid:
    raise UnknownStageError(f"unknown stage '{name}' for target {as_target(target).name}; valid stages: {', '.join(valid)}")


@dataclass(frozen=True)
class PrintOptions:
  """Which stages' IR to print and where: `before`/`after` hold stage names; `names` are the user's
  %names, so printed IR reads like the source."""
  before: frozenset[str] = frozenset()
  after: frozenset[str] = frozenset()
  out: TextIO | None = None
  names: Mapping[UOp, str] = field(default_factory=dict)


def _show(value: Any, names: Mapping[UOp, str]) -> str:
  if isinstance(value, UOp):
    from uopc.frontend import print_uops
    return print_uops(value, dict(names))
  if hasattr(value, "format"): return value.format()  # a KernelProgram or a Schedule
  return value.source  # a RenderedKernel


def _print(opts: PrintOptions, when: str, stage: str, kernel: str, value: Any) -> None:
  if opts.out is None: return
  text = _show(value, opts.names)
  opts.out.write(f"# *** IR {when} {stage}: {kernel} ***\n{text}{'' if text.endswith(chr(10)) else chr(10)}")


def run_kernel_stages(stages: Sequence[Stage], sink: UOp, name: str, opts: PrintOptions, shown: str | None = None) -> Any:
  """Run the kernel-level stages on one kernel, printing where asked (as `shown`, default `name`); returns
  the last stage's value."""
  value, shown = sink, shown or name
  for stage in stages:
    if stage.name in opts.before: _print(opts, "before", stage.name, shown, value)
    value = stage.run(value, name)
    if stage.name in opts.after: _print(opts, "after", stage.name, shown, value)
  return value


@dataclass(frozen=True)
class ArchVariant:
  """Archs of a build whose kernels may differ from the other archs' (`Target.arch_variants`: sm_90a's
  warpgroup MMAs where a build mixes sm_90a with other archs). A kernel gets a variant of its own only where
  Optimize, for these archs, makes it use what only they have (`KernelSchedule.arch_specific`); every other
  kernel of the variant is the build's own (the same object). `schedule`: the opts pinned for these archs
  (--opts, a tuning database's entries for them); the other kernels get the heuristics."""
  archs: tuple[str, ...]
  schedule: Mapping[str, tuple] | None = None

  @property
  def label(self) -> str: return ",".join(self.archs)


def compile_module(module: Module, target: str | Target, lib_name: str, opts: PrintOptions = PrintOptions(),
                   schedule: Mapping[str, tuple] | None = None, fast_math: bool = False,
                   vector_bytes: int | None = None, archs: tuple[str, ...] = (), fp_contract: bool | None = None,
                   allow_tf32: bool = False, variants: Sequence[ArchVariant] = ()) -> list[EntryKernels]:
  """Every entry of `module` lowered through `target`'s pipeline to its rendered kernels; `schedule`
  pins the opts of the kernels it names (see uopc.stages.optimize.parse_schedule); `vector_bytes` and
  `archs`: see `pipeline`. Each entry's `variants` holds its kernels for each of `variants` (ArchVariant),
  in order."""
  if not module.entries: raise CompileError([error(None, f"{module.path} has no entries: nothing to build")])
  stages = pipeline(target, module.loc_of, schedule, module.relocate, fast_math, vector_bytes, archs, fp_contract, allow_tf32)
  kernel_stages = [s for s in stages if s.name not in TENSOR_STAGES]
  lower = _Lowering(kernel_stages, tuple((v.label, [s for s in pipeline(target, module.loc_of, v.schedule, module.relocate, fast_math, vector_bytes,
                                                                              v.archs, fp_contract, allow_tf32) if s.name not in TENSOR_STAGES])
                                         for v in variants), replace(opts, names=module.names))
  prefix = c_identifier(lib_name)
  progress.expect(len(module.entries))
  entries = [_compile_entry(stages, lower, module, e, prefix) for e in module.entries]
  _check_scheduled(schedule or {}, [k.name for e in entries for k in e.kernels])
  return entries


@dataclass(frozen=True)
class _Lowering:
  """The kernel-level stages of a build and of each of its arch variants (label, stages), and what to print."""
  stages: Sequence[Stage]
  variants: tuple[tuple[str, Sequence[Stage]], ...]
  opts: PrintOptions

  def kernel(self, sink: UOp, name: str) -> tuple[Any, tuple[Any, ...]]:
    """Kernel `name` lowered from `sink`, and its kernel in each variant."""
    done = run_kernel_stages(self.stages, sink, name, self.opts)
    return done, tuple(self._variant(stages, sink, name, done, label) for label, stages in self.variants)

  def _variant(self, stages: Sequence[Stage], sink: UOp, name: str, done: Any, label: str) -> Any:
    """The variant's own kernel where Optimize makes it arch-specific (printed as `name [label]`), else `done`."""
    optimize, rest = stages[0], stages[1:]
    assert optimize.name == "optimize", "the kernel-level stages start at optimize"
    scheduled = optimize.run(sink, name)
    if not scheduled.arch_specific: return done
    shown = f"{name} [{label}]"
    if optimize.name in self.opts.before: _print(self.opts, "before", optimize.name, shown, sink)
    if optimize.name in self.opts.after: _print(self.opts, "after", optimize.name, shown, scheduled)
    return run_kernel_stages(rest, scheduled, name, self.opts, shown)


def _compile_entry(stages: Sequence[Stage], lower: _Lowering, module: Module, e: Entry, prefix: str) -> EntryKernels:
  if e.kind == "func": done = _compile_func_entry(stages, lower, module, e, prefix)
  else:
    kernel, variants = lower.kernel(e.sink, kernel_name(prefix, e.name, 0))
    done = EntryKernels(e.name, (kernel,), unused=e.unused, variants=tuple((v,) for v in variants))
  progress.step(e.name)
  return done


def _counted(kernel, name: str):
  progress.step(name)
  return kernel


def _compile_func_entry(stages: Sequence[Stage], lower: _Lowering, module: Module, e: Entry, prefix: str) -> EntryKernels:
  """A tensor program, first lowered to one program per device when it runs on tuples of devices."""
  from uopc.stages.multi_device import lower_entry
  e, notes = lower_entry(e, module)
  entry = _compile_tensor_entry(stages, lower, _with_unused_params(e), prefix, e.name)
  return replace(entry, unused=e.unused, shapes=_declared_shapes(e), notes=notes)


def _with_unused_params(e: Entry) -> UOp:
  """A func entry's sink with its unread PARAMs too: Rangeify gives them their slots (its intermediates
  take the slots after every declared one) and no kernel."""
  unused = tuple(u for u in e.unused if u.op is Ops.PARAM)
  return e.sink.replace(src=e.sink.src + unused) if unused else e.sink


def _declared_shapes(e: Entry) -> tuple[tuple[int, tuple[int, ...]], ...]:
  """(slot, shape) of the entry's own PARAMs (not the formals of a FUNCTION or CALL body) whose shape is
  known at compile time: the launcher's metadata states them."""
  def outer(u: UOp) -> tuple[UOp, ...]: return u.src[1:] if u.op in (Ops.FUNCTION, Ops.CALL) else u.src
  params = [u for u in e.sink.toposort(outer) if u.op is Ops.PARAM and u.src] + [u for u in e.unused if u.op is Ops.PARAM and u.src]
  shapes = {p.arg[0]: p.shape for p in params}
  return tuple(sorted((slot, shape) for slot, shape in shapes.items() if shape is not None and all(isinstance(d, int) for d in shape)))


def _check_scheduled(schedule: Mapping[str, tuple], kernels: list[str]) -> None:
  if unknown := sorted(set(schedule) - set(kernels)):
    raise CompileError([error(None, f"--opts names kernel {k}, which this build does not have", f"kernels: {', '.join(kernels)}")
                        for k in unknown])


def _compile_tensor_entry(stages: Sequence[Stage], lower: _Lowering, sink: UOp, prefix: str, entry: str) -> EntryKernels:
  """callify, rangeify and plan on the whole program, the kernel-level stages on each of its distinct
  kernels (a CALL's body compiles once, whatever the number of call sites)."""
  from uopc.launcher import Workspace
  schedule = run_kernel_stages([s for s in stages if s.name in TENSOR_STAGES], sink, entry, lower.opts)
  progress.expect(len(schedule.kernels))
  done = [_counted(lower.kernel(k, kernel_name(prefix, entry, i)), kernel_name(prefix, entry, i)) for i, k in enumerate(schedule.kernels)]
  kernels = tuple(k for k, _ in done)
  variants = tuple(tuple(v[j] for _, v in done) for j in range(len(lower.variants)))
  workspace = Workspace(schedule.workspace_size, tuple((p.buffer.slot, p.offset) for p in schedule.placements), schedule.device_spans)
  bound = {b.slot for ln in schedule.launches for _, b in ln.binds}
  constants = tuple((b.slot, b.data) for b in schedule.buffers if b.data is not None and b.slot in bound)
  return EntryKernels(entry, kernels, workspace if schedule.placements else None, schedule.launches, constants=constants,
                      collectives=schedule.collectives, variants=variants)
