"""`-t amd`: AMDGPU kernels as LLVM IR, compiled by llvmlite to AMD ISA per arch and linked by ld.lld
into HSA code objects, with a HIP launcher library (see build.py).

Per-arch artifacts are named `asm.<arch>`, `object.<arch>` and `hsaco.<arch>` for each arch built
(--arch; default all three), e.g. `--arch gfx90a --emit asm.gfx90a,hsaco.gfx90a,header,so`."""
from __future__ import annotations

from pathlib import Path

from uopc.diagnostics import CompileError, error
from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.targets import BuildRequest, Target
from uopc.targets.capabilities import ALL, SIMPLE, Capabilities
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


# LLVM for AMDGPU: sqrt and fdiv are correctly rounded, exp2/log2 of 16/32-bit floats are v_exp/v_log (1 ULP); sin
# (v_sin_f32 is far off at large |x|, and the renderer does not emit it) and pow are decomposed, also under --fast-math.
_F16_F32_ONLY = frozenset({dtypes.float16, dtypes.float32})
OPS = Capabilities({**{op: ALL for op in SIMPLE + (Ops.SQRT, Ops.FLOORDIV, Ops.FLOORMOD, Ops.THREEFRY)},
                    Ops.EXP2: _F16_F32_ONLY, Ops.LOG2: _F16_F32_ONLY}, {}, int_division=False, fused_mulacc=True, index32=True)

TARGET = Target("amd", "AMD GPUs: AMD ISA and HSA code objects per arch (llvmlite, ld.lld), with a HIP launcher library",
                _render, artifacts, build, default_archs=AMD_ARCHS, fp_contract=True,
                ops=OPS, gpu=True)
