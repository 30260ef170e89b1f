"""`-t amd`: AMDGPU kernels as LLVM IR, compiled by llvmlite to AMD ISA per arch and linked by ld.lld
into HSA code objects, with a HIP launcher library (see build.py).

Per-arch artifacts are named `asm.<arch>`, `object.<arch>` and `hsaco.<arch>` for each arch built
(--arch; default all three), e.g. `--arch gfx90a --emit asm.gfx90a,hsaco.gfx90a,header,so`."""
from __future__ import annotations

from pathlib import Path

from uopc.diagnostics import CompileError, error
from uopc.targets import BuildRequest, Target
from uopc.targets.llvm.render import AMD_ARCHS


def _render(linear, name: str, loc_of, fast_math: bool = False):
  from uopc.targets.amd.render import render_kernel
  return render_kernel(linear, name, loc_of)


def artifacts(name: str, archs: tuple[str, ...] = AMD_ARCHS) -> dict[str, str]:
  per_arch = {f"{kind}.{arch}": f"{name}.{arch}.{ext}" for arch in archs
              for kind, ext in (("asm", "s"), ("object", "o"), ("hsaco", "hsaco"))}
  return {**per_arch, "source": f"{name}_hip.c", "so": f"lib{name}.so", "header": f"{name}.h"}


def _check_linker(req: BuildRequest) -> None:
  """Without ld.lld there are no code objects, hence no launcher: say so before building anything."""
  from uopc.targets.amd.codeobj import find_linker, missing_linker
  needs_link = [k for k in req.emit if k.startswith("hsaco.") or k in ("source", "so")]
  if needs_link and find_linker(req.env) is None:
    raise CompileError([error(None, f"{missing_linker(req.env)}: cannot link {', '.join(needs_link)}",
                              "without a linker, --emit " + ",".join(f"asm.{a},object.{a}" for a in req.archs) +
                              ",header writes the AMD ISA and objects")])


def build(req: BuildRequest) -> dict[str, Path]:
  from uopc.targets.amd.build import build_artifacts
  _check_linker(req)
  return build_artifacts(req.out_dir, req.name, req.entries, req.archs, req.opt_level, req.env)


TARGET = Target("amd", "AMD GPUs: AMD ISA and HSA code objects per arch (llvmlite, ld.lld), with a HIP launcher library",
                _render, artifacts, build, default_archs=AMD_ARCHS, fp_contract=True)
