"""The CUDA artifacts of a build: NAME.ptx and NAME.fatbin (SASS per arch by ptxas, plus the PTX for
the driver to JIT-compile on GPUs newer than every arch built), made without a GPU.

`ptxas` and `fatbinary` are looked up in $CUDA_HOME/bin, then on $PATH, then in the NVIDIA nvcc
wheel (`pip install nvidia-cuda-nvcc`: `nvidia/cu13/bin/` since CUDA 13, `nvidia/cuda_nvcc/bin/`
before). Without ptxas the fatbin holds only the PTX; without fatbinary too there is no fatbin and
the launcher embeds the PTX text itself. Either is said once on stderr.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Mapping, Sequence

from uopc import progress
from uopc.diagnostics import note
from uopc.reporter import current
from uopc.targets.cuda.ptx import RENDER_ARCH
from uopc.tools import run_on_generated


def _wheel_bin_dirs() -> list[Path]:
  spec = importlib.util.find_spec("nvidia")
  if spec is None or not spec.submodule_search_locations: return []
  roots = [Path(p) for p in spec.submodule_search_locations]
  return [d for root in roots for d in [root / "cuda_nvcc" / "bin", *sorted(root.glob("cu[0-9]*/bin"), reverse=True)] if d.is_dir()]


def find_tool(name: str, env: Mapping[str, str] = os.environ) -> Path | None:
  """`ptxas` or `fatbinary`: from $CUDA_HOME/bin, $PATH, or the nvcc wheel; None when none has it."""
  if env.get("CUDA_HOME") and (p := Path(env["CUDA_HOME"]) / "bin" / name).is_file(): return p
  if found := shutil.which(name, path=env.get("PATH")): return Path(found)
  return next((d / name for d in _wheel_bin_dirs() if (d / name).is_file()), None)


def assemble(ptx: Path, arch: str, out: Path, ptxas: Path, opt_level: int = 3) -> Path:
  """SASS for one arch: `ptxas -arch=ARCH -O<opt_level> ptx -o out` (a cubin). A ptxas that fails on
  an empty module of the same PTX version and target too (too old for them, say) is the user's to
  update (exit 1); a failure on our kernels alone is an internal compiler error."""
  probe_ptx, probe_out = ptx.with_name(".uopc-probe.ptx"), ptx.with_name(".uopc-probe.cubin")
  def probe() -> list[str]:
    probe_ptx.write_text("".join(line for line in ptx.read_text().splitlines(True) if line.startswith((".version", ".target", ".address_size"))))
    return [str(ptxas), f"-arch={arch}", probe_ptx.name, "-o", probe_out.name]
  try:
    run_on_generated([str(ptxas), f"-arch={arch}", f"-O{opt_level}", ptx.name, "-o", out.name], ptx.parent, probe)
  finally:
    for leftover in (probe_ptx, probe_out): leftover.unlink(missing_ok=True)
  return out


def _sm(arch: str) -> str: return arch.removeprefix("sm_")


def build_fatbin(ptx: Path, archs: Sequence[str], out: Path, opt_level: int = 3,
                 env: Mapping[str, str] = os.environ, ptx_arch: str = RENDER_ARCH) -> Path | None:
  """NAME.fatbin next to `ptx`: a cubin per arch and the PTX itself (for `ptx_arch`, its `.target`); None
  without fatbinary."""
  fatbinary, ptxas = find_tool("fatbinary", env), find_tool("ptxas", env)
  if fatbinary is None:
    current().report(note(None, f"no fatbinary (CUDA_HOME, PATH or `pip install nvidia-cuda-nvcc`): {out.name} is not built and "
                                "the library embeds the PTX, compiled by the driver at first use"))
    return None
  images = []
  if ptxas is None:
    current().report(note(None, f"no ptxas (CUDA_HOME, PATH or `pip install nvidia-cuda-nvcc`): {out.name} holds only PTX, "
                                "compiled by the driver at first use"))
  else:
    progress.expect(len(archs))
    for arch in archs:
      cubin = assemble(ptx, arch, ptx.with_name(f"{ptx.stem}.{arch}.cubin"), ptxas, opt_level)
      images.append(f"--image3=kind=elf,sm={_sm(arch)},file={cubin.name}")
      progress.step(cubin.name)
  images.append(f"--image3=kind=ptx,sm={_sm(ptx_arch)},file={ptx.name}")
  run_on_generated([str(fatbinary), f"--create={out.name}", "-64", *images], ptx.parent)
  return out
