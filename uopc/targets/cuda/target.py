"""`-t cuda`: PTX for NVIDIA GPUs, a fatbin with SASS per arch (ptxas, fatbinary) and a launcher
library that loads it through the CUDA driver; no GPU or CUDA SDK is needed to build. `--arch`
names the SASS archs (sm_80 or later; default sm_80 and sm_90); the PTX in the fatbin runs on
newer GPUs through the driver's JIT."""
from __future__ import annotations

from pathlib import Path

from uopc.diagnostics import CompileError, error
from uopc.targets import BuildRequest, Target

DEFAULT_ARCHS = ("sm_80", "sm_90")


def _render(linear, name: str, loc_of, fast_math: bool = False):
  from uopc.targets.cuda.ptx import render_kernel
  return render_kernel(linear, name, fast_math=fast_math, loc_of=loc_of)


def artifacts(name: str, archs: tuple[str, ...] = ()) -> dict[str, str]:
  return {"ptx": f"{name}.ptx", "fatbin": f"{name}.fatbin", "source": f"{name}_cuda.c", "so": f"lib{name}.so",
          "header": f"{name}.h"}


def build(req: BuildRequest) -> dict[str, Path]:
  from uopc.targets.cuda.launcher import render_header, render_source
  from uopc.targets.cuda.ptx import render_module, supported_arch
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
    fatbin = build_fatbin(paths["ptx"], req.archs, paths["fatbin"], req.opt_level, req.env)
  image = fatbin.read_bytes() if fatbin is not None else ptx.encode() + b"\0"
  paths["source"].write_text(render_source(req.name, req.entries, image))
  if "so" in req.emit: _compile(paths["source"], paths["so"], req)
  return {k: p for k, p in paths.items() if k != "fatbin" or fatbin is not None}


def _compile(source: Path, so: Path, req: BuildRequest) -> None:
  from uopc.driver import compile_shared
  compile_shared(source, so, req.opt_level, req.env, libs=("-ldl", "-lpthread"))


TARGET = Target("cuda", "NVIDIA GPUs: PTX and a fatbin of SASS per arch (ptxas, fatbinary), with a CUDA driver launcher library",
                _render, artifacts, build, default_archs=DEFAULT_ARCHS)
