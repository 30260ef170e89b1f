"""Compilation targets, one folder each: the renderer, the artifact builder and the launcher.

A target is data (`Target`): how it renders one linearized kernel, which artifacts it writes for a
library NAME, how it builds them into a staging directory, and what it can do (the ops it renders,
`uopc.targets.capabilities`; whether it is a GPU, its tensor cores, ...). The driver resolves `-t` into
this object once; the stages read its fields and never branch on the target's name, so adding one means
adding a folder with a `target.py` that defines `TARGET` and naming it in `TARGET_MODULES`. Targets load
lazily: `uopc build -t c` never imports llvmlite.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from uopc.diagnostics import Loc
from uopc.targets.capabilities import RENDERS_EVERYTHING, Capabilities

TARGET_MODULES: dict[str, str] = {
  "c": "uopc.targets.c.target",
  "llvm": "uopc.targets.llvm.target",
  "cuda": "uopc.targets.cuda.target",
  "amd": "uopc.targets.amd.target",
  "metal": "uopc.targets.metal.target",
}


@dataclass(frozen=True)
class BuildRequest:
  """What a target's `build` gets: the lowered entries, where to write, and the user's knobs."""
  out_dir: Path                  # the staging directory: write every artifact here
  name: str                      # NAME of the outputs
  entries: Sequence[Any]         # launcher.EntryKernels, each with its rendered kernels
  emit: tuple[str, ...]          # the artifact kinds the user asked for
  opt_level: int = 3
  archs: tuple[str, ...] = ()    # GPU architectures (--arch); () means the target's defaults
  env: Mapping[str, str] = field(default_factory=lambda: os.environ)
  cpu_flags: tuple[str, ...] = ()  # -t c: the compiler flags of --cpu (uopc.driver.cpu_flags)
  variants: tuple[tuple[str, ...], ...] = ()  # the archs of each arch variant whose kernels the entries' `variants` hold


@dataclass(frozen=True)
class Target:
  name: str
  summary: str
  render: Callable[..., Any]                      # render(linear, kernel_name, loc_of, fast_math) -> RenderedKernel
  artifacts: Callable[[str, tuple[str, ...]], dict[str, str]]  # (NAME, archs) -> {kind: file name}, in --help's order
  build: Callable[[BuildRequest], dict[str, Path]]  # writes the requested kinds, returns {kind: path}
  default_archs: tuple[str, ...] = ()
  local_bytes: Callable[[str], int] | None = None  # GPU: the LOCAL (shared) memory a workgroup may use on an arch (None: 48 KiB)
  # GPU: the groups of a build's archs that get kernels of their own where a kernel can use what only they have
  # (uopc.pipeline.ArchVariant; the build's own kernels serve the other archs); None: one kernel for all archs
  arch_variants: Callable[[tuple[str, ...]], tuple[tuple[str, ...], ...]] | None = None
  # float ADD(MUL) becomes one fused multiply-add unless the user says --fp-contract=off: the GPU targets, as nvcc, nvrtc
  # (so tinygrad's CUDA backend) and hipcc do by default; the CPU targets keep the IR's two roundings by default
  fp_contract: bool = False
  ops: Capabilities = RENDERS_EVERYTHING  # the ops it renders itself (Instruction Selection lowers the others)
  gpu: bool = False              # kernels run as workgroups of threads on a device; else on the host's CPU, THREAD axes on
                                 # the launcher's worker pool
  cpu_levels: bool = False       # builds for a --cpu level (its vector width: Optimize's register tiles, masked loads)
  tensor_cores: tuple[Any, ...] = ()  # the TensorCores the TC opt may use (uopc.stages.tensor_cores)
  tf32_tensor_core: Any = None   # the one --allow-tf32 adds for float32 gemms
  warpgroup_archs: tuple[str, ...] = ()  # archs with warpgroup MMAs: a build whose archs are all among them takes their tiles
  async_copies: bool = False     # asynchronous copies into shared memory (the STAGE opt, staged gemms)
  ilp_small_launches: bool = False  # small launches' instructions ordered for instruction-level parallelism (uopc.stages.linearize)

  def contract(self, asked: bool | None) -> bool:
    """Whether a build fuses float multiply-adds: what --fp-contract asked (None: not given), else this target's default."""
    return self.fp_contract if asked is None else asked

  def render_stage(self, loc_of: Callable[[Any], Loc | None], fast_math: bool = False) -> Callable[[Any, str], Any]:
    return lambda linear, kernel_name: self.render(linear, kernel_name, loc_of, fast_math)


def param_name(param) -> str:
  """The name a kernel-level PARAM has in every target's header and metadata: the program's own
  (`PARAM {(slot, "name")}`), else `data<slot>`. Renderers may name it differently inside a kernel."""
  arg = param.arg
  if isinstance(arg, tuple) and len(arg) > 1 and isinstance(arg[1], str): return arg[1]
  return f"data{arg[0] if isinstance(arg, tuple) else arg}"


class UnknownTargetError(ValueError):
  pass


def target_names() -> tuple[str, ...]: return tuple(TARGET_MODULES)


def get_target(name: str) -> Target:
  """The Target named `name` (the driver resolves a build's -t once; stages take the object)."""
  if name not in TARGET_MODULES:
    raise UnknownTargetError(f"unknown target '{name}'; targets: {', '.join(TARGET_MODULES)}")
  return importlib.import_module(TARGET_MODULES[name]).TARGET


def as_target(target: "str | Target") -> Target:
  """`target` itself, or the Target it names: lower-level entry points (tests, the tuner) may pass a name."""
  return target if isinstance(target, Target) else get_target(target)
