"""llvmlite as the back end: target machines, parsing + verifying + optimising a module, and emitting
assembly or an object file for the host CPU or an AMDGPU arch."""
from __future__ import annotations

from functools import lru_cache

import llvmlite.binding as llvm

AMDGPU_TRIPLE = "amdgcn-amd-amdhsa"


@lru_cache(maxsize=None)
def _initialised() -> bool:
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()
  return True


@lru_cache(maxsize=None)
def target_machine(target: str = "host", arch: str | None = None, opt: int = 3):
  """The host: its triple with a generic CPU (the object must run on any machine of the triple, like
  the C target's portable flags). AMDGPU: the amdhsa triple and `arch` (default gfx1100)."""
  _initialised()
  if target == "host":
    triple = llvm.get_process_triple()
    return llvm.Target.from_triple(triple).create_target_machine(cpu="", features="", opt=opt, reloc="pic",
                                                                 codemodel="default")
  if target == "amdgcn":
    return llvm.Target.from_triple(AMDGPU_TRIPLE).create_target_machine(cpu=arch or "gfx1100", features="", opt=opt,
                                                                        reloc="pic", codemodel="default")
  raise ValueError(f"unknown LLVM target {target!r}")


class LLVMError(Exception):
  """LLVM rejected the IR we generated: a bug of the renderer, reported as an internal compiler error."""


def parse_and_verify(text: str):
  _initialised()
  try:
    module = llvm.parse_assembly(text)
    module.verify()
  except RuntimeError as e:
    raise LLVMError(f"LLVM rejected the generated IR: {e}") from e
  return module


def optimise(module, tm, level: int = 3) -> None:
  """The standard -O`level` pipeline of LLVM's new pass manager, tuned for `tm`."""
  tuning = llvm.PipelineTuningOptions(speed_level=level)
  tuning.loop_vectorization = level >= 2
  tuning.slp_vectorization = level >= 2
  builder = llvm.create_pass_builder(tm, tuning)
  builder.getModulePassManager().run(module, builder)


def compile_module(text: str, target: str = "host", arch: str | None = None, level: int = 3):
  """Parse, verify and optimise `text`; returns (module, target machine)."""
  tm = target_machine(target, arch, level)
  module = parse_and_verify(text)
  optimise(module, tm, level)
  return module, tm


def emit_object(text: str, target: str = "host", arch: str | None = None, level: int = 3) -> bytes:
  module, tm = compile_module(text, target, arch, level)
  return tm.emit_object(module)


def emit_assembly(text: str, target: str = "host", arch: str | None = None, level: int = 3) -> str:
  module, tm = compile_module(text, target, arch, level)
  return tm.emit_assembly(module)
