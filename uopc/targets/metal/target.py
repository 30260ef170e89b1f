"""`-t metal`: Metal Shading Language, an Objective-C launcher and its C header; on macOS (where
`xcrun` exists) also NAME.metallib and libNAME.dylib. Elsewhere the sources are the product: build
them on a Mac with the command written at the top of NAME_launcher.m."""
from __future__ import annotations

from pathlib import Path

from uopc.diagnostics import note
from uopc.reporter import current
from uopc.targets import BuildRequest, Target
from uopc.targets.capabilities import ALL, F16_F32, SIMPLE, TRANSCENDENTAL, Capabilities

MAC_ONLY = ("metallib", "dylib")


def _render(linear, name: str, loc_of, fast_math: bool = False):
  from uopc.targets.metal.render import render_kernel
  return render_kernel(linear, name, loc_of)


def artifacts(name: str, archs: tuple[str, ...] = ()) -> dict[str, str]:
  return {"source": f"{name}.metal", "launcher": f"{name}_launcher.m", "header": f"{name}.h",
          "metallib": f"{name}.metallib", "dylib": f"lib{name}.dylib"}


def build(req: BuildRequest) -> dict[str, Path]:
  from uopc.targets.metal.launcher import build_macos, render_header, render_launcher
  from uopc.targets.metal.render import render_module
  paths = {kind: req.out_dir / file for kind, file in artifacts(req.name).items()}
  source = render_module([k for e in req.entries for k in e.kernels])
  paths["source"].write_text(source)
  paths["launcher"].write_text(render_launcher(req.name, req.entries, source))
  paths["header"].write_text(render_header(req.name, req.entries))
  if any(k in req.emit for k in MAC_ONLY) and not build_macos(req.out_dir, req.name):
    current().report(note(None, f"no Xcode tools (xcrun) here: {req.name}.metallib and lib{req.name}.dylib are not built; "
                                f"build them on macOS from {req.name}.metal and {req.name}_launcher.m"))
    return {k: p for k, p in paths.items() if k not in MAC_ONLY}
  return paths


# The precise:: functions are not verified here, so transcendentals are decomposed; the fast versions are used under
# --fast-math; no float64.
OPS = Capabilities({op: ALL for op in SIMPLE}, {op: F16_F32 for op in TRANSCENDENTAL}, float64=False, int_division=False)

TARGET = Target("metal", "Metal Shading Language and an Objective-C launcher (binaries on macOS)", _render, artifacts, build,
                ops=OPS, gpu=True)
