"""`-t cuda`: PTX for NVIDIA GPUs, a fatbin with SASS per arch (ptxas, fatbinary) and a launcher
library that loads it through the CUDA driver; no GPU or CUDA SDK is needed to build. `--arch`
names the SASS archs (sm_80 or later; default sm_80 and sm_90); the PTX in the fatbin runs on
newer GPUs through the driver's JIT.

Shared memory: a kernel's LOCAL buffers are static `.shared` arrays up to STATIC_SHARED_BYTES (every
arch); beyond, up to what `shared_bytes(arch)` allows a workgroup on each of the build's archs (the
minimum over them: Optimize plans one kernel for all, its PTX is one), they are dynamic shared memory
that the launcher opts in to (uopc/targets/cuda/ptx_memory.py, launcher.py). A GPU newer than the archs
that gives less (JIT from the PTX) makes the launch fail with UOPC_CUDA_ERR_SHARED_MEMORY."""
from __future__ import annotations

import re
from pathlib import Path

from uopc.diagnostics import CompileError, error
from uopc.targets import BuildRequest, Target

DEFAULT_ARCHS = ("sm_80", "sm_90")
STATIC_SHARED_BYTES = 48 * 1024  # the static shared memory of a kernel on every arch
# shared memory per block with the opt-in (CUDA C Programming Guide, "Technical Specifications per
# Compute Capability"), by sm_XY's XY
SHARED_BYTES = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


def shared_bytes(arch: str) -> int:
  """The shared memory a workgroup may use on `arch` (sm_XY, sm_XYa, sm_XYf): SHARED_BYTES, else STATIC_SHARED_BYTES."""
  m = re.fullmatch(r"sm_(\d+)[af]?", arch)
  return SHARED_BYTES.get(int(m.group(1)), STATIC_SHARED_BYTES) if m else STATIC_SHARED_BYTES


def _render(linear, name: str, loc_of, fast_math: bool = False):
  from uopc.targets.cuda.ptx import render_kernel
  return render_kernel(linear, name, fast_math=fast_math, loc_of=loc_of)


def artifacts(name: str, archs: tuple[str, ...] = ()) -> dict[str, str]:
  return {"ptx": f"{name}.ptx", "fatbin": f"{name}.fatbin", "source": f"{name}_cuda.c", "so": f"lib{name}.so",
          "header": f"{name}.h"}


def build(req: BuildRequest) -> dict[str, Path]:
  from uopc.targets.cuda.launcher import render_header, render_source
  from uopc.targets.cuda.ptx import module_arch, render_module, supported_arch
  from uopc.targets.cuda.toolchain import build_fatbin
  if bad := [a for a in req.archs if not supported_arch(a)]:
    raise CompileError([error(None, f"cuda: arch {', '.join(bad)} is not supported", "the PTX needs sm_80 or later: "
                              "--arch sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, ...")])
  paths = {kind: req.out_dir / file for kind, file in artifacts(req.name).items()}
  ptx = render_module([k for e in req.entries for k in e.kernels])
  paths["ptx"].write_text(ptx)
  paths["header"].write_text(render_header(req.name, req.entries))
  fatbin = None
  if "fatbin" in req.emit or "so" in req.emit or "source" in req.emit:
    kernels = [k for e in req.entries for k in e.kernels]
    fatbin = build_fatbin(paths["ptx"], req.archs, paths["fatbin"], req.opt_level, req.env, module_arch(kernels))
  image = fatbin.read_bytes() if fatbin is not None else ptx.encode() + b"\0"
  paths["source"].write_text(render_source(req.name, req.entries, image))
  if "so" in req.emit: _compile(paths["source"], paths["so"], req)
  return {k: p for k, p in paths.items() if k != "fatbin" or fatbin is not None}


def _compile(source: Path, so: Path, req: BuildRequest) -> None:
  from uopc.driver import compile_shared
  compile_shared(source, so, req.opt_level, req.env, libs=("-ldl", "-lpthread"))


TARGET = Target("cuda", "NVIDIA GPUs: PTX and a fatbin of SASS per arch (ptxas, fatbinary), with a CUDA driver launcher library",
                _render, artifacts, build, default_archs=DEFAULT_ARCHS, local_bytes=shared_bytes)
