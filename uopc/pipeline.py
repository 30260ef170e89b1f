"""The lowering pipeline of seed 000 as data: an ordered list of named stages per target.

Seed 000's stages, in order, are callify, rangeify, optimize, expand, isel, linearize, plan and
render. Only the stages that exist are listed; a stage joins its target's list when it lands.
Tensor-level stages (callify, rangeify, and plan, which places the intermediates of a whole
program) run on `func` entries only; `kernel` entries start at the first kernel-level stage. Every kernel-level stage maps one kernel to one kernel: `run(value, name)`,
where `name` is the C name the kernel gets, and the value is a UOp until render makes it a
RenderedKernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence, TextIO

from uopc.diagnostics import CompileError, error
from uopc.launcher import EntryKernels, c_identifier, kernel_name
from uopc.module import Module
from uopc.targets import get_target
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


def _rangeify(sink: UOp, name: str):
  from uopc.stages.rangeify import rangeify
  return rangeify(sink)


def _plan(program, name: str):
  from uopc.stages.plan import plan
  return plan(program)


def _linearize(sink: UOp, name: str) -> UOp:
  from uopc.stages.linearize import linearize
  return linearize(sink)


# The stages every target shares, in seed 000's order; each target appends its own Render.
SHARED_STAGES: tuple[Stage, ...] = (Stage("callify", _callify), Stage("rangeify", _rangeify), Stage("linearize", _linearize),
                                    Stage("plan", _plan))


def pipeline(target: str, loc_of: Callable[[UOp], Any] = lambda u: None) -> tuple[Stage, ...]:
  """`target`'s stages; `loc_of` lets a renderer point a refusal (an op the target lacks) at the source."""
  return SHARED_STAGES + (Stage("render", get_target(target).render_stage(loc_of)),)


class UnknownStageError(ValueError):
  """A --print-before/--print-after name that is not a stage of the target; the CLI makes it a usage error."""


def stage_names(target: str) -> tuple[str, ...]: return tuple(s.name for s in pipeline(target))


def check_stage_name(target: str, name: str) -> None:
  valid = stage_names(target)
  if name not in valid:
    raise UnknownStageError(f"unknown stage '{name}' for target {target}; valid stages: {', '.join(valid)}")


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


def run_kernel_stages(stages: Sequence[Stage], sink: UOp, name: str, opts: PrintOptions) -> Any:
  """Run the kernel-level stages on one kernel, printing where asked; returns the last stage's value."""
  value = sink
  for stage in stages:
    if stage.name in opts.before: _print(opts, "before", stage.name, name, value)
    value = stage.run(value, name)
    if stage.name in opts.after: _print(opts, "after", stage.name, name, value)
  return value


def compile_module(module: Module, target: str, lib_name: str, opts: PrintOptions = PrintOptions()) -> list[EntryKernels]:
  """Every entry of `module` lowered through `target`'s pipeline to its rendered kernels."""
  if not module.entries: raise CompileError([error(None, f"{module.path} has no entries: nothing to build")])
  stages = pipeline(target, module.loc_of)
  kernel_stages = [s for s in stages if s.name not in TENSOR_STAGES]
  prefix = c_identifier(lib_name)
  opts = replace(opts, names=module.names)
  return [_compile_tensor_entry(stages, e.sink, prefix, e.name, opts) if e.kind == "func" else
          EntryKernels(e.name, (run_kernel_stages(kernel_stages, e.sink, kernel_name(prefix, e.name, 0), opts),))
          for e in module.entries]


def _compile_tensor_entry(stages: Sequence[Stage], sink: UOp, prefix: str, entry: str, opts: PrintOptions) -> EntryKernels:
  """callify, rangeify and plan on the whole program, the kernel-level stages on each of its kernels."""
  from uopc.launcher import Workspace
  schedule = run_kernel_stages([s for s in stages if s.name in TENSOR_STAGES], sink, entry, opts)
  kernel_stages = [s for s in stages if s.name not in TENSOR_STAGES]
  kernels = tuple(run_kernel_stages(kernel_stages, k, kernel_name(prefix, entry, i), opts) for i, k in enumerate(schedule.kernels))
  workspace = Workspace(schedule.workspace_size, tuple((p.buffer.slot, p.offset) for p in schedule.placements))
  return EntryKernels(entry, kernels, workspace if schedule.placements else None)
