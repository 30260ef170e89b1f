"""What the `uopc tune` command and `uopc build --tuning` do, apart from their click declarations (uopc.cli).

Every user error (a bad budget or shard, an unreadable or corrupted database, a target that cannot
be tuned) is a CompileError, so the CLI prints it located and exits 1.
"""
from __future__ import annotations

import re
import sys
from typing import Mapping, TextIO

from uopc.diagnostics import CompileError, error
from uopc.tune import db as tuning_db

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_budget(text: str, flag: str) -> float:
  """`300`, `300s`, `5m`, `1.5h` -> seconds."""
  m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", text)
  if m is None or m.group(2) not in _UNITS:
    raise CompileError([error(None, f"{flag} {text}: expected a duration such as 300s, 5m or 1h")])
  return float(m.group(1)) * _UNITS[m.group(2)]


def parse_shard(text: str) -> tuple[int, int]:
  """`i/n` with 0 <= i < n."""
  m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
  if m is None or not 0 <= int(m.group(1)) < int(m.group(2)):
    raise CompileError([error(None, f"--shard {text}: expected I/N with 0 <= I < N, e.g. 0/4 .. 3/4")])
  return int(m.group(1)), int(m.group(2))


def merge_files(inputs: tuple[str, ...], output: str | None) -> str:
  """Merge the databases `inputs` into `output`; the summary line."""
  if not inputs: raise CompileError([error(None, "--merge needs the databases to merge: uopc tune --merge a.json b.json -o all.json")])
  if output is None: raise CompileError([error(None, "--merge needs -o OUT.json")])
  merged = tuning_db.merge(*(tuning_db.load(p) for p in inputs))
  tuning_db.save(output, merged)
  return f"{len(merged)} entries from {len(inputs)} databases into {output}"


def tune(file: str, db_path: str, options, progress_stream: TextIO | None = None) -> str:
  """Run `uopc tune` on `file`; the summary."""
  from uopc.tune.progress import Progress
  from uopc.tune.search import format_summary, tune_file
  reports = tune_file(file, db_path, options, Progress(progress_stream or sys.stderr))
  return format_summary(reports, db_path)


def build_schedule(file: str, db_path: str, target: str, name: str, archs: tuple[str, ...], cpu: str,
                   pinned: Mapping[str, tuple] | None, report: bool, out: TextIO | None = None,
                   modes: tuple[str, ...] = (), label: str = "", also: tuple[str, ...] = ()) -> dict[str, tuple]:
  """`uopc build --tuning`: the schedule to build with; notes (and with `report`, the report) to `out`;
  `label` names an arch variant's kernels in the report; `also`: see uopc.tune.apply.tuned_schedule."""
  import os
  from uopc.tune.apply import format_report, tuned_schedule
  out = out or sys.stderr
  schedule, uses = tuned_schedule(file, db_path, target, name, archs, cpu, pinned, os.environ, modes, also)
  for u in uses:
    if u.note: out.write(f"uopc: note: {db_path}: {u.note}\n")
  if report: out.write(format_report(db_path, uses, label) + "\n")
  return schedule


def build_schedules(file: str, db_path: str, target: str, name: str, archs: tuple[str, ...], cpu: str,
                    pinned: Mapping[str, tuple] | None, report: bool, out: TextIO | None = None,
                    modes: tuple[str, ...] = ()) -> tuple[dict[str, tuple], dict[tuple[str, ...], dict[str, tuple]]]:
  """`build_schedule` for the build's own kernels and for each arch variant's (Target.arch_variants), by its
  archs. The variant's kernels take the entries tuned for its archs (sm_90a, with warpgroup MMAs); the build's
  own kernels those of its other archs and of the variant archs' base (sm_90a -> sm_90: the same GPUs, no
  arch-specific instructions), then the variant archs' entries that pin no warpgroup tile (a kernel without
  wgmma is the same in both images), so that what `uopc tune` found on an H100, for sm_90 or sm_90a, serves
  default builds."""
  from uopc.targets import get_target
  from uopc.tune.apply import base_arch
  t = get_target(target)
  archs = archs or t.default_archs
  groups = t.arch_variants(archs) if t.arch_variants else ()
  own = tuple(dict.fromkeys(base_arch(a) if any(a in g for g in groups) else a for a in archs))
  variant_archs = tuple(dict.fromkeys(a for g in groups for a in g))
  schedule = build_schedule(file, db_path, target, name, own, cpu, pinned, report, out, modes, also=variant_archs)
  return schedule, {g: build_schedule(file, db_path, target, name, g, cpu, pinned, report, out, modes, ",".join(g)) for g in groups}
