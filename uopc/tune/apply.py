"""`uopc build --tuning DB`: the database's opts for the kernels it knows, the heuristics for the others.

The result is a `--opts` schedule (kernel name -> opts) that the ordinary build then uses, so a build
with `--tuning DB` is byte for byte the build with those opts pinned by `--opts`; no device is needed.
Kernels the user pins with `--opts` keep them. A kernel falls back to the heuristics when the
database has no entry for its key; when an entry of the same kernel name, target and arch has another
key (the kernel changed since it was tuned, or the search space did), the fallback gets a note; so does
an entry whose opts no longer apply. Notes go to stderr always; `--tuning-report` adds a line per kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from uopc.diagnostics import CompileError
from uopc.tune import db as tuning_db
from uopc.tune.kernels import Kernel, kernel_key, key_arch, load_checked, program_kernels
from uopc.tune.space import SPACE_VERSION


@dataclass(frozen=True)
class Use:
  """How one kernel got its opts: source is 'database', 'heuristics' or '--opts'; note: why it fell back."""
  kernel: str
  source: str
  detail: str = ""
  note: str = ""


def tuned_schedule(file: str, db_path: str, target: str, lib: str, archs: tuple[str, ...], cpu: str,
                   pinned: Mapping[str, tuple] | None, env: Mapping[str, str],
                   modes: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> tuple[dict[str, tuple], list[Use]]:
  """The schedule a build with `--tuning db_path` uses, and how each kernel got its opts; `modes`: the
  build's numeric modes (uopc.tune.kernels.numeric_modes), part of every key; `also`: archs (an arch
  variant's) whose entries serve these kernels after those of `archs`, where their opts pin no warpgroup
  tile (then the kernel they were timed as is these kernels' own)."""
  from uopc.targets import get_target
  entries = tuning_db.load(db_path)
  module = load_checked(file)
  # a GPU build for several archs takes the entry of the first arch that has one
  arch_list = list(dict.fromkeys(key_arch(target, cpu, (a,), modes) for a in (archs or get_target(target).default_archs))) \
    or [key_arch(target, cpu, (), modes)]
  also_list = [key_arch(target, cpu, (a,), modes) for a in also]
  caps = _caps(target, cpu, env, archs, "tf32" in modes)
  schedule, uses = dict(pinned or {}), []
  for k in program_kernels(module, target, lib, arch_list[0], SPACE_VERSION):
    if k.name in schedule:
      uses.append(Use(k.name, "--opts"))
      continue
    found = next((entries[key] for arch in arch_list if (key := kernel_key(k.sink, target, arch, SPACE_VERSION)) in entries), None)
    found = found or next((e for arch in also_list if (e := entries.get(kernel_key(k.sink, target, arch, SPACE_VERSION)))
                           and not _warpgroup(e.opts)), None)
    use = _use(k, found, caps) if found else Use(k.name, "heuristics", "not in the database", _stale(k, entries, target, arch_list))
    if use.source == "database": schedule[k.name] = _opts(found.opts)
    uses.append(use)
  return schedule, uses


def _caps(target: str, cpu: str, env: Mapping[str, str], archs: tuple[str, ...] = (), tf32: bool = False):
  from uopc.driver import cpu_vector_bytes
  from uopc.stages.optimize import target_caps
  from uopc.targets import as_target
  t = as_target(target)
  return target_caps(t, cpu_vector_bytes(cpu, env) if t.cpu_levels else None, archs, tf32)


def _warpgroup(text: str) -> bool:
  """Whether opts pin a warpgroup tile (TC's tiles of sm_90a's warpgroup MMAs)."""
  from uopc.stages.opts import WARPGROUP_TILES, OptOp
  return any(o.op is OptOp.TC and len(o.arg) > 2 and o.arg[2] in WARPGROUP_TILES for o in _opts(text))


def _opts(text: str) -> tuple:
  from uopc.stages.optimize import parse_opts
  return parse_opts(text)


def _use(k: Kernel, entry: tuning_db.Entry, caps) -> Use:
  """The database's opts for `k`, unless they no longer apply (then the heuristics, with a note)."""
  from uopc.stages.optimize import apply_opts, type_axes
  try:
    apply_opts(type_axes(k.sink, caps), _opts(entry.opts), caps, k.name)
  except CompileError as e:
    return Use(k.name, "heuristics", "its database entry does not apply",
               f"kernel {k.name}: the database's opts {entry.opts} do not apply ({e.diagnostics[0].message}); it gets the heuristics")
  speed = f"{entry.heuristic_us / max(entry.time_us, 1e-3):.2f}x"
  return Use(k.name, "database", f"{entry.opts or '(no opts)'} ({entry.time_us:g} us, heuristics {entry.heuristic_us:g} us: {speed} on {entry.device})")


def _stale(k: Kernel, entries: Mapping[str, tuning_db.Entry], target: str, archs: list[str]) -> str:
  stale = sorted(key for key, e in entries.items() if e.kernel == k.name and e.target == target and e.arch in archs)
  if not stale:
    bases = {a.split("+")[0] for a in archs}
    other = sorted(key for key, e in entries.items() if e.kernel == k.name and e.target == target and e.arch.split("+")[0] in bases)
    if not other: return ""
    return (f"kernel {k.name}: the database's entry {other[0]} was tuned for {entries[other[0]].arch}, this build is {archs[0]} "
            "(the arithmetic of --fp-contract / --allow-tf32 differs); it gets the heuristics")
  e = entries[stale[0]]
  why = f"it was tuned with search space {e.space}, this uopc has {SPACE_VERSION}" if e.space != SPACE_VERSION else "the kernel changed since it was tuned"
  return f"kernel {k.name}: the database's entry {stale[0]} is stale ({why}); it gets the heuristics"


def base_arch(arch: str) -> str:
  """A GPU arch without its arch-specific or family suffix (sm_90a -> sm_90)."""
  return re.sub(r"(?<=\d)[af]$", "", arch)


def format_report(db_path: str, uses: list[Use], label: str = "") -> str:
  """The report of `--tuning-report`; `label`: the arch variant whose kernels `uses` are."""
  used = sum(u.source == "database" for u in uses)
  lines = [f"tuning report ({db_path}{f', {label} variant' if label else ''}): {used} of {len(uses)} kernels from the database"]
  lines += [f"  {u.kernel}: {u.source}" + (f": {u.detail}" if u.detail else "") for u in uses]
  return "\n".join(lines)
