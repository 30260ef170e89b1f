"""A program's kernels as Optimize receives them, and the key under which the tuning database files each.

A kernel is identified by what it computes, not by its name: the key hashes the kernel's IR after
Rangeify (before Optimize: the printer's text, without the user's %names), the target, the arch (a
GPU's, or the CPU level of `-t c --cpu`) and the version of the search space (uopc.tune.space). So
a kernel that changes gets a new key and its old entry goes stale, two kernels that compute the same
thing (a model's repeated layers) share one entry, and renaming the library changes nothing.

Invariant: `program_kernels` lowers exactly as `uopc build` does up to Optimize (the same stages on
the same sinks), so the names it gives are those `--opts` pins and the sinks are those Optimize gets.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from uopc.diagnostics import CompileError
from uopc.module import Module
from uopc.uop import UOp

KEY_CHARS = 32  # hex digits of the sha256 kept: 128 bits


@dataclass(frozen=True)
class Kernel:
  """One kernel of a program: its C name (what --opts pins), its sink before Optimize, and its key."""
  name: str
  sink: UOp
  key: str
  sizes: tuple[tuple[int, int], ...] = ()  # (PARAM slot, elements) of the entry's buffers of known shape


def load_checked(path: str) -> Module:
  """Parse and verify a .uop file as `uopc build` does: errors are the build's errors."""
  from uopc.frontend import load_module
  from uopc.verify import verify_module
  module = load_module(path)
  if errors := [d for d in verify_module(module) if d.severity == "error"]: raise CompileError(errors, {module.path: module.text})
  return module


def kernel_key(sink: UOp, target: str, arch: str, space: int) -> str:
  from uopc.frontend import print_uops
  text = f"uopc-tuning\nspace {space}\ntarget {target}\narch {arch}\n{print_uops(sink)}"
  return hashlib.sha256(text.encode()).hexdigest()[:KEY_CHARS]


def program_kernels(module: Module, target: str, lib: str, arch: str, space: int) -> list[Kernel]:
  """Every kernel of every entry, in build order (a repeated kernel once per name)."""
  from uopc.launcher import c_identifier, kernel_name
  from uopc.pipeline import TENSOR_STAGES, PrintOptions, _declared_shapes, _with_unused_params, pipeline, run_kernel_stages
  stages = [s for s in pipeline(target) if s.name in TENSOR_STAGES]
  prefix = c_identifier(lib)
  out = []
  for e in module.entries:
    sinks = run_kernel_stages(stages, _with_unused_params(e), e.name, PrintOptions()).kernels if e.kind == "func" else (e.sink,)
    sizes = tuple((slot, math.prod(shape)) for slot, shape in _declared_shapes(e)) if e.kind == "func" else ()
    out += [Kernel(kernel_name(prefix, e.name, i), s, kernel_key(s, target, arch, space), sizes) for i, s in enumerate(sinks)]
  return out


def key_arch(target: str, cpu: str, archs: tuple[str, ...], modes: tuple[str, ...] = ()) -> str:
  """The arch part of a key: -t c's CPU level, the host for -t llvm, else the GPU arch; then `+mode`
  for each numeric mode of the build (`numeric_modes`), so that kernels tuned under other arithmetic
  (fused multiply-adds, tf32 tensor cores) are never taken for these."""
  base = cpu if target == "c" else "host" if target == "llvm" else ",".join(archs)
  return base + "".join(f"+{m}" for m in modes)


def numeric_modes(fp_contract: bool, allow_tf32: bool) -> tuple[str, ...]:
  """The build flags that change a kernel's arithmetic, as key_arch spells them."""
  return (("contract",) if fp_contract else ()) + (("tf32",) if allow_tf32 else ())
