"""`-t cuda`: PTX for NVIDIA GPUs, a fatbin with SASS per arch (ptxas, fatbinary) and a launcher
library that loads it through the CUDA driver; no GPU or CUDA SDK is needed to build. `--arch`
names the SASS archs (sm_80 or later; default sm_80 and sm_90a); the PTX in the fatbin runs on
newer GPUs through the driver's JIT.

Arch variants: where the archs mix sm_90a with others, the kernels that sm_90a's heuristics put on
warpgroup MMAs are also built for sm_90a alone (uopc.pipeline.ArchVariant), into a second image
(NAME.sm_90a.ptx, NAME.sm_90a.fatbin) that holds every kernel (the others are the library's own); the
launcher loads it on GPUs of compute capability 9.0 and the own image (SASS for the other archs, PTX)
elsewhere. Invariant: both images have the same kernels, names and parameters; only a variant's code,
launch geometry and shared memory differ. A program without such a kernel gets one image for every arch.

Shared memory: a kernel's LOCAL buffers are static `.shared` arrays up to STATIC_SHARED_BYTES (every
arch); beyond, up to what `shared_bytes(arch)` allows a workgroup on each of the build's archs (the
minimum over them: Optimize plans one kernel for all, its PTX is one), they are dynamic shared memory
that the launcher opts in to (uopc/targets/cuda/ptx_memory.py, launcher.py). A GPU newer than the archs
that gives less (JIT from the PTX) makes the launch fail with UOPC_CUDA_ERR_SHARED_MEMORY."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from uopc.diagnostics import CompileError, error, note
from uopc.reporter import current
from uopc.ops import Ops
from uopc.stages.tensor_cores import CUDA_TENSOR_CORES, TF32_TENSOR_CORE
from uopc.targets import BuildRequest, Target
from uopc.targets.capabilities import ALL, F16_F32, SIMPLE, Capabilities
from uopc.targets.cuda.ptx_wgmma import WGMMA_ARCH

DEFAULT_ARCHS = ("sm_80", "sm_90a")
VARIANT_ARCH = WGMMA_ARCH  # the arch whose kernels may differ from the others' (warpgroup MMAs): see arch_variants
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


def arch_variants(archs: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
  """sm_90a gets kernels of its own (warpgroup MMAs, uopc/stages/warpgroup_mma.py) where a build has other archs
  too; a build for sm_90a alone has them in its only image."""
  return ((VARIANT_ARCH,),) if VARIANT_ARCH in archs and any(a != VARIANT_ARCH for a in archs) else ()


def artifacts(name: str, archs: tuple[str, ...] = ()) -> dict[str, str]:
  """The artifacts of NAME; a build with an arch variant (`arch_variants`) also has its PTX and fatbin, kinds
  `ptx:ARCH` and `fatbin:ARCH` (NAME.ARCH.ptx, NAME.ARCH.fatbin), written where some kernel has a variant."""
  labels = [",".join(g) for g in arch_variants(archs)]
  return {"ptx": f"{name}.ptx", **{f"ptx:{v}": f"{name}.{v}.ptx" for v in labels}, "fatbin": f"{name}.fatbin",
          **{f"fatbin:{v}": f"{name}.{v}.fatbin" for v in labels}, "source": f"{name}_cuda.c", "so": f"lib{name}.so", "header": f"{name}.h"}


def _variants(req: BuildRequest) -> list[tuple[tuple[str, ...], list]]:
  """(archs, kernels) of each arch variant in which some kernel is its own; none in a library with multi-device
  entries (its launcher loads one image on every device)."""
  from uopc.targets.cuda.multi_device import entry_devices
  found = [(archs, [k for e in req.entries for k in e.variants[i]]) for i, archs in enumerate(req.variants)]
  own = [k for e in req.entries for k in e.kernels]
  found = [(archs, kernels) for archs, kernels in found if any(k is not o for k, o in zip(kernels, own))]
  if found and any(entry_devices(e) for e in req.entries):
    current().report(note(None, f"{req.name} has multi-device entries: every kernel is built once for all archs "
                                f"(no {', '.join(','.join(a) for a, _ in found)} image, whose kernels would use warpgroup MMAs)"))
    return []
  return found


def build(req: BuildRequest) -> dict[str, Path]:
  from uopc.targets.cuda.launcher import render_header, render_source
  from uopc.targets.cuda.ptx import arch_number, supported_arch
  if bad := [a for a in req.archs if not supported_arch(a)]:
    raise CompileError([error(None, f"cuda: arch {', '.join(bad)} is not supported", "the PTX needs sm_80 or later: "
                              "--arch sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, ...")])
  paths = {kind: req.out_dir / file for kind, file in artifacts(req.name, req.archs).items()}
  variants = _variants(req)
  own_archs = tuple(a for a in req.archs if not any(a in archs for archs, _ in variants))
  images = [_image(req, paths["ptx"], paths["fatbin"], own_archs, [k for e in req.entries for k in e.kernels])]
  for archs, kernels in variants:
    label = ",".join(archs)
    images.append(replace(_image(req, paths[f"ptx:{label}"], paths[f"fatbin:{label}"], archs, kernels), label=label,
                          compute_capability=arch_number(archs[0])))
  paths["header"].write_text(render_header(req.name, req.entries))
  paths["source"].write_text(render_source(req.name, req.entries, images))
  if "so" in req.emit: _compile(paths["source"], paths["so"], req)
  written = {paths[k] for k in ("header", "source", "so") if k != "so" or "so" in req.emit} | {p for image in images for p in image.files}
  return {k: p for k, p in paths.items() if p in written}


def _image(req: BuildRequest, ptx_path: Path, fatbin_path: Path, archs: tuple[str, ...], kernels: list):
  """The PTX of `kernels` and, where the build needs it, their fatbin for `archs`: the image the library embeds."""
  from uopc.targets.cuda.launcher import Image
  from uopc.targets.cuda.ptx import module_arch, render_module
  from uopc.targets.cuda.toolchain import build_fatbin
  ptx = render_module(kernels)
  ptx_path.write_text(ptx)
  fatbin = None
  if {"fatbin", "so", "source"} & {k.split(":")[0] for k in req.emit}:
    fatbin = build_fatbin(ptx_path, archs, fatbin_path, req.opt_level, req.env, module_arch(kernels))
  return Image(fatbin.read_bytes() if fatbin is not None else ptx.encode() + b"\0", tuple(kernels), (ptx_path,) + ((fatbin,) if fatbin else ()))


def _compile(source: Path, so: Path, req: BuildRequest) -> None:
  from uopc.driver import compile_shared
  compile_shared(source, so, req.opt_level, req.env, libs=("-ldl", "-lpthread"))


# PTX: sqrt.rn, div.rn and fma.rn are exact; ex2.approx.f32 is within 2 ULP (uopc/targets/cuda/ptx.py); lg2/sin.approx
# only under --fast-math.
OPS = Capabilities({**{op: ALL for op in SIMPLE + (Ops.SQRT,)}, Ops.EXP2: F16_F32}, {op: F16_F32 for op in (Ops.LOG2, Ops.SIN)},
                   int_division=False, fused_mulacc=True, index32=True, displacement=True)

TARGET = Target("cuda", "NVIDIA GPUs: PTX and a fatbin of SASS per arch (ptxas, fatbinary), with a CUDA driver launcher library",
                _render, artifacts, build, default_archs=DEFAULT_ARCHS, local_bytes=shared_bytes,
                arch_variants=arch_variants, fp_contract=True, ops=OPS, gpu=True, tensor_cores=CUDA_TENSOR_CORES,
                tf32_tensor_core=TF32_TENSOR_CORE, warpgroup_archs=(WGMMA_ARCH,), async_copies=True, ilp_small_launches=True)
