"""`uopc tune`: BEAM search over each kernel's opts, from the heuristics' choice, within time budgets.

Per kernel (uopc.tune.kernels: the kernels after Rangeify, one search per key):
1. The heuristics' opts H are built and measured first: their output is the reference every other
   candidate must reproduce (uopc.tune.measure.mismatch), and their time the one to beat. Then the
   prefixes of H (H without its last opts), so the search can undo the heuristics' later choices, and
   H's variants (uopc.tune.space.variants: one opt of H replaced by another of its kind on its axis, so
   it can revise an early choice such as TC's staging), in a shuffled order (below).
2. A round: the children (uopc.tune.space) of each of the `beam` fastest kernels measured so far,
   those not seen before (kernels compare as IR: two opt lists that make one kernel are one
   candidate), in an order shuffled by a seed from the kernel's key (deterministic, and not biased
   to the first axes when the budget ends a round). They are built in parallel in chunks, then
   measured one at a time with the builders idle (timing while compiling would measure the compiler).
   A candidate that fails to build or run, or whose output differs, is never kept.
3. Rounds go on while the best time improves and the budget lasts.
4. The best and H are measured again, and the best is kept only if it is still faster; the database
   entry records its opts and both times.

Budgets: the run's (`budget`) is shared among the kernels left, each getting the time the run has
left over the kernels left (at most `kernel_budget`); what a kernel does not use goes to the next.
H is always measured; the rest only within the kernel's time. The database is saved after every
kernel, so an interrupted run keeps what it found; kernels already in it are skipped unless `retune`.
"""
from __future__ import annotations

import math
import os
import random
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from uopc.diagnostics import CompileError, error
from uopc.stages.optimize import Opt, TargetCaps, apply_opts, heuristic_opts, is_axis, kernel_axes, target_caps, type_axes
from uopc.tune import db as tuning_db
from uopc.tune.compile import Builder, Job
from uopc.tune.kernels import Kernel, key_arch, load_checked, numeric_modes, program_kernels
from uopc.tune.measure import KernelData, Measurement, NotTunable, kernel_data, mismatch
from uopc.tune.progress import Progress
from uopc.tune.space import MAX_LANES, SPACE_VERSION, children, lanes, variants
from uopc.uop import UOp

TUNABLE_TARGETS = ("c", "llvm", "cuda")
IMPROVEMENT = 0.01  # a round must beat the best time by this fraction to go on


@dataclass(frozen=True)
class TuneOptions:
  target: str = "c"
  cpu: str = "portable"            # -t c: the --cpu level the kernels are built and keyed for
  arch: str | None = None          # a GPU's arch (default: the device's)
  budget: float = 300.0            # seconds for the whole run
  kernel_budget: float | None = None  # seconds at most per kernel (default: a fair share of what is left)
  beam: int = 4
  jobs: int = 0                    # build workers (0: every core)
  shard: tuple[int, int] = (0, 1)  # (i, n): tune the kernels whose key is i modulo n
  runs: int = 7                    # timed calls per candidate (at least measure.MIN_RUNS)
  max_seconds: float = 0.5         # a candidate's timed calls stop after this (once MIN_RUNS are done)
  retune: bool = False             # search kernels already in the database again
  name: str | None = None          # NAME (the kernels' C names start with it), as in `uopc build --name`
  fp_contract: bool | None = None  # tune the kernels as `uopc build --fp-contract` builds them (None: the target's default) ...
  allow_tf32: bool = False         # ... and `--allow-tf32` (keys carry these modes: uopc.tune.kernels.key_arch)


@dataclass
class KernelReport:
  kernel: str
  key: str
  status: str                      # tuned | skipped | in the database | no budget
  reason: str = ""
  entry: tuning_db.Entry | None = None
  measured: int = 0
  failed: int = 0                  # did not build or run
  wrong: int = 0                   # ran, with another output than the heuristics'
  internal: list[str] = field(default_factory=list)  # compiler errors hit (bugs to report)


@dataclass(frozen=True)
class _Candidate:
  opts: tuple[Opt, ...]
  seconds: float
  so: Path


@dataclass
class _Context:
  opts: TuneOptions
  caps: TargetCaps
  device: object
  builder: Builder
  work: Path
  vector_bytes: int | None
  archs: tuple[str, ...]
  cpu_flags: tuple[str, ...]
  progress: Progress


def default_arch(target: str, device_arch: str) -> str:
  """The arch `uopc tune` tunes for without --arch: the arch of the device's image in a default build (an H100's
  sm_90 is sm_90a there), else the device's."""
  from uopc.targets import get_target
  from uopc.tune.apply import base_arch
  return next((a for a in get_target(target).default_archs if base_arch(a) == device_arch), device_arch)


def tune_file(path: str, db_path: str, opts: TuneOptions, progress: Progress | None = None) -> list[KernelReport]:
  """Tune every kernel of the program at `path` (of this shard) and add the results to the database."""
  from uopc.driver import cpu_flags, cpu_vector_bytes, lib_name
  if opts.target not in TUNABLE_TARGETS:
    raise CompileError([error(None, f"-t {opts.target} cannot be tuned yet: no timer for its device", f"tunable targets: {', '.join(TUNABLE_TARGETS)}")])
  from uopc.targets import get_target
  t = get_target(opts.target)
  if opts.cpu != "portable" and not t.cpu_levels: raise CompileError([error(None, f"--cpu {opts.cpu} is for -t c")])
  opts = replace(opts, fp_contract=t.contract(opts.fp_contract))
  start = time.monotonic()
  entries = tuning_db.load(db_path, missing_ok=True)
  module = load_checked(path)
  device = make_device(opts.target)
  archs = (opts.arch or default_arch(opts.target, device.arch()),) if t.gpu else ()
  vector_bytes = cpu_vector_bytes(opts.cpu, os.environ) if t.cpu_levels else None
  arch = key_arch(opts.target, opts.cpu, archs, numeric_modes(opts.fp_contract, opts.allow_tf32))
  kernels = _shard(program_kernels(module, opts.target, lib_name(path, opts.name), arch, SPACE_VERSION), opts.shard)
  progress = progress or Progress()
  reports = []
  with Builder(opts.jobs or os.cpu_count() or 1) as builder, tempfile.TemporaryDirectory(prefix="uopc-tune-") as work:
    ctx = _Context(opts, target_caps(t, vector_bytes, archs, opts.allow_tf32), device, builder, Path(work), vector_bytes, archs,
                   cpu_flags(opts.cpu) if t.cpu_levels else (), progress)
    for i, k in enumerate(kernels):
      left = opts.budget - (time.monotonic() - start)
      share = left / (len(kernels) - i)
      report = _tune_kernel(ctx, k, arch, entries, time.monotonic() + min(share, opts.kernel_budget or math.inf), left > 0)
      if report.entry is not None:
        entries[k.key] = report.entry
        tuning_db.save(db_path, entries)
      progress.line(format_kernel(report))
      reports.append(report)
  progress.close()
  return reports


def make_device(target: str):
  if target == "cuda":
    from uopc.tune.measure_cuda import CudaDevice, CudaError
    try:
      return CudaDevice()
    except CudaError as e:
      raise CompileError([error(None, f"-t cuda is tuned on a GPU: {e}", "build with `uopc build --tuning` needs none")]) from None
  from uopc.tune.measure import CpuDevice
  return CpuDevice()


def _shard(kernels: list[Kernel], shard: tuple[int, int]) -> list[Kernel]:
  """One kernel per key (the first name), those of shard i of n (by the key's value modulo n)."""
  by_key = {}
  for k in kernels: by_key.setdefault(k.key, k)
  i, n = shard
  return [k for k in by_key.values() if int(k.key, 16) % n == i]


def _tune_kernel(ctx: _Context, k: Kernel, arch: str, entries: dict, deadline: float, has_budget: bool) -> KernelReport:
  if k.key in entries and not ctx.opts.retune: return KernelReport(k.name, k.key, "in the database", entry=None)
  if not has_budget: return KernelReport(k.name, k.key, "no budget", "the run's budget was spent")
  if not all(is_axis(r) for r in kernel_axes(k.sink)): return KernelReport(k.name, k.key, "skipped", "its RANGEs have no axis types (a legacy kernel)")
  try:
    data = kernel_data(k.sink, declared=dict(k.sizes))
  except NotTunable as e:
    return KernelReport(k.name, k.key, "skipped", str(e))
  return _Search(ctx, k, data, deadline).run(arch)


class _Search:
  """The BEAM search of one kernel (see the module docstring)."""

  def __init__(self, ctx: _Context, k: Kernel, data: KernelData, deadline: float):
    self.ctx, self.k, self.data, self.deadline = ctx, k, data, deadline
    self.typed = type_axes(k.sink, ctx.caps)
    self.heuristic = heuristic_opts(self.typed, ctx.caps)
    self.max_lanes = max(MAX_LANES, lanes(apply_opts(self.typed, self.heuristic, ctx.caps, k.name), ctx.caps))
    self.times: dict[UOp, _Candidate] = {}  # every kernel measured
    self.seen: set[UOp] = set()
    self.reference: Measurement | None = None
    self.report = KernelReport(k.name, k.key, "tuned")
    self.rng = random.Random(int(k.key, 16))
    self.count = 0
    self.heuristic_sink: UOp | None = None  # the first kernel measured

  def run(self, arch: str) -> KernelReport:
    states = [(self.heuristic[:i], apply_opts(self.typed, self.heuristic[:i], self.ctx.caps, self.k.name))
              for i in range(len(self.heuristic), -1, -1)]
    self._evaluate(states[:1], always=True)
    if self.reference is None:
      self.report.status = "skipped"
      self.report.reason = f"the heuristic kernel did not build or run: {self.report.reason}"
      return self.report
    self._evaluate(states[1:])
    prefixes = [sink for _, sink in reversed(states)]  # prefixes[j]: the kernel of the heuristic's first j opts
    alternatives = variants(prefixes, self.heuristic, self.ctx.caps, self.max_lanes)
    self.rng.shuffle(alternatives)
    self._evaluate(alternatives)
    best = self._best_time()
    while time.monotonic() < self.deadline and (kids := self._children()):
      self.rng.shuffle(kids)
      self._evaluate(kids)
      if self._best_time() > best * (1 - IMPROVEMENT): break
      best = self._best_time()
    self.report.entry = self._entry(arch)
    return self.report

  def _best_time(self) -> float: return min(c.seconds for c in self.times.values())

  def _beam(self) -> list[tuple[tuple[Opt, ...], UOp]]:
    ranked = sorted(self.times.items(), key=lambda kv: (kv[1].seconds, str(kv[1].opts)))[:self.ctx.opts.beam]
    return [(c.opts, sink) for sink, c in ranked]

  def _children(self) -> list[tuple[tuple[Opt, ...], UOp]]:
    out: dict[UOp, tuple[Opt, ...]] = {}
    for opts, sink in self._beam():
      for child_opts, child in children(sink, opts, self.ctx.caps, self.max_lanes):
        if child not in self.seen and child not in out: out[child] = child_opts
    return [(opts, sink) for sink, opts in out.items()]

  def _evaluate(self, states: list[tuple[tuple[Opt, ...], UOp]], always: bool = False) -> None:
    """Build `states` in parallel chunks and measure them, while the kernel's time lasts (`always`: regardless)."""
    states = [(o, s) for o, s in states if s not in self.seen]
    chunk = max(2 * self.ctx.builder.workers, 4)
    for at in range(0, len(states), chunk):
      if not always and time.monotonic() >= self.deadline: return
      part = states[at:at + chunk]
      self.seen.update(s for _, s in part)
      for (opts, sink), built in zip(part, self.ctx.builder.build([self._job(opts) for opts, _ in part])):
        if not always and time.monotonic() >= self.deadline: return
        self._measure(opts, sink, built)

  def _job(self, opts: tuple[Opt, ...]) -> Job:
    self.count += 1
    c = self.ctx
    return Job(self.k.name, self.k.sink, opts, c.opts.target, c.vector_bytes, c.archs, c.cpu_flags, str(c.work / self.k.key / str(self.count)),
               c.opts.fp_contract, c.opts.allow_tf32)

  def _measure(self, opts: tuple[Opt, ...], sink: UOp, built) -> None:
    if built.so is None:
      self.report.failed += 1
      self.report.reason = built.error
      if built.internal: self.report.internal.append(f"{','.join(map(str, opts))}: {built.error}")
      return
    try:
      m = self.ctx.device.measure(Path(built.so), self.data, self.ctx.opts.runs, self.ctx.opts.max_seconds)
    except (RuntimeError, OSError) as e:
      self.report.failed += 1
      self.report.reason = str(e)
      return
    if self.reference is None: self.reference = m
    elif mismatch(self.reference.outputs, m.outputs, self.data, self.ctx.opts.allow_tf32) is not None:
      self.report.wrong += 1
      return
    self.report.measured += 1
    self.times[sink] = _Candidate(opts, m.seconds, Path(built.so))
    if self.heuristic_sink is None: self.heuristic_sink = sink
    self.ctx.progress.step(f"{self.k.name}: {self.times[self.heuristic_sink].seconds / self._best_time():.2f}x")

  def _entry(self, arch: str) -> tuning_db.Entry:
    """The best candidate, measured again beside the heuristics and kept only if still faster."""
    heuristic = self.times[self.heuristic_sink]
    best = self.times[self._beam()[0][1]]
    heuristic_s = self._remeasure(heuristic)
    best_s = self._remeasure(best) if best is not heuristic else heuristic_s
    if best_s >= heuristic_s: best, best_s = heuristic, heuristic_s
    c = self.ctx
    return tuning_db.Entry(self.k.name, c.opts.target, arch, SPACE_VERSION, ",".join(map(str, best.opts)), round(best_s * 1e6, 3),
                           ",".join(map(str, heuristic.opts)), round(heuristic_s * 1e6, 3), c.device.description)

  def _remeasure(self, c: _Candidate) -> float:
    return self.ctx.device.measure(c.so, self.data, self.ctx.opts.runs, self.ctx.opts.max_seconds).seconds


def format_kernel(r: KernelReport) -> str:
  if r.entry is None: return f"{r.kernel}: {r.status}" + (f" ({r.reason})" if r.reason else "")
  e = r.entry
  counts = f"{r.measured} measured" + (f", {r.failed} failed" if r.failed else "") + (f", {r.wrong} wrong output" if r.wrong else "")
  return (f"{r.kernel}: {e.heuristic_us:g} us -> {e.time_us:g} us ({e.heuristic_us / max(e.time_us, 1e-3):.2f}x) "
          f"with {e.opts or '(no opts)'} [{counts}]")


def format_summary(reports: list[KernelReport], db_path: str) -> str:
  tuned = [r.entry for r in reports if r.entry is not None]
  lines = [f"{len(tuned)} of {len(reports)} kernels tuned into {db_path}"]
  if tuned:
    geo = math.exp(sum(math.log(max(e.heuristic_us, 1e-3) / max(e.time_us, 1e-3)) for e in tuned) / len(tuned))
    lines.append(f"geometric-mean speedup over the heuristics: {geo:.2f}x")
  if bugs := [f"{r.kernel}: {b}" for r in reports for b in r.internal]:
    lines.append(f"{len(bugs)} candidates hit internal compiler errors (please report):")
    lines += [f"  {b}" for b in bugs[:10]]
  return "\n".join(lines)
