"""Building candidates: one kernel with pinned opts, alone in a library (LIB, one entry ENTRY).

A candidate goes through the same kernel-level stages as in `uopc build` (Optimize with the opts
pinned, Expand, Instruction Selection, Linearize, Render) and the target's own library builder, so
what is timed is the code a build with those opts makes. Candidates are built in worker processes, all
cores by default (`Builder`: a process pool from the forkserver, or spawn where there is none; the
jobs carry the kernel's sink, which pickles); one job builds in this process. A candidate that
some stage refuses is a failed build (its first line of error kept), not an error of the run; one
that hits a compiler bug too, but it is counted and reported as such.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from uopc.tune.measure import ENTRY, LIB
from uopc.uop import UOp


@dataclass(frozen=True)
class Job:
  kernel: str                     # the kernel's C name
  sink: UOp                       # before Optimize
  opts: tuple                     # the Opts pinned
  target: str
  vector_bytes: int | None        # -t c: the --cpu level's vector registers
  archs: tuple[str, ...]
  cpu_flags: tuple[str, ...]
  out_dir: str                    # a fresh directory for this candidate
  fp_contract: bool = False        # built as `uopc build --fp-contract=fast` / `--allow-tf32` would
  allow_tf32: bool = False


@dataclass(frozen=True)
class Built:
  so: str | None                  # the library, or None when the build failed
  error: str = ""
  internal: bool = False          # the failure is a compiler bug (reported at the end), not a refused opt


def build_candidate(job: Job) -> Built:
  from uopc.diagnostics import CompileError
  from uopc.launcher import EntryKernels, kernel_name
  from uopc.pipeline import TENSOR_STAGES, PrintOptions, pipeline, run_kernel_stages
  from uopc.targets import BuildRequest, get_target
  from uopc.tools import ToolFailure
  try:
    name = kernel_name(LIB, ENTRY, 0)  # the launcher calls its entry's kernel by this name
    stages = [s for s in pipeline(job.target, schedule={name: job.opts}, vector_bytes=job.vector_bytes, archs=job.archs,
                                  fp_contract=job.fp_contract, allow_tf32=job.allow_tf32) if s.name not in TENSOR_STAGES]
    kernel = run_kernel_stages(stages, job.sink, name, PrintOptions())
    out = Path(job.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = get_target(job.target).build(BuildRequest(out, LIB, [EntryKernels(ENTRY, (kernel,))], ("so",), 3, job.archs, os.environ, job.cpu_flags))
    return Built(str(paths["so"]))
  except (CompileError, ToolFailure) as e:
    return Built(None, (str(e).strip().splitlines() or [type(e).__name__])[0])
  except Exception as e:  # noqa: BLE001 - a compiler bug one candidate hits must not end the search; it is counted
    return Built(None, f"internal compiler error: {type(e).__name__}: {e}", internal=True)


class Builder:
  """Builds jobs on `workers` processes (in this one when workers is 1); results in the jobs' order."""

  def __init__(self, workers: int):
    self.workers = max(1, workers)
    self.pool = None
    if self.workers > 1:
      methods = multiprocessing.get_all_start_methods()
      ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
      self.pool = ProcessPoolExecutor(self.workers, mp_context=ctx)

  def build(self, jobs: list[Job]) -> list[Built]:
    if self.pool is None or len(jobs) == 1: return [build_candidate(j) for j in jobs]
    return list(self.pool.map(build_candidate, jobs))

  def close(self) -> None:
    if self.pool is not None: self.pool.shutdown(cancel_futures=True)

  def __enter__(self) -> "Builder": return self

  def __exit__(self, *exc) -> None: self.close()
