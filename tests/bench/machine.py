"""What a benchmark result depends on, recorded next to it: CPU, cores, load, numpy and its BLAS,
compilers, tinygrad, and the uopc revision."""
from __future__ import annotations

import os
import platform
import shlex
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
  try:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
  except OSError:
    return None
  return done.stdout.strip() if done.returncode == 0 else None


def cpu_model() -> str:
  for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
    if line.startswith("model name"): return line.split(":", 1)[1].strip()
  return platform.processor() or platform.machine()


def cpu_flags() -> str:
  """The vector ISA levels the kernels could use (the widest matters for -march=native code)."""
  for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
    if line.startswith("flags"):
      flags = set(line.split(":", 1)[1].split())
      return " ".join(f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16") if f in flags)
  return "unknown"


def cores() -> str:
  usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return f"{usable} usable of {os.cpu_count()}"


def load() -> str:
  one, five, fifteen = os.getloadavg()
  return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min)"


def memory() -> str:
  for line in Path("/proc/meminfo").read_text().splitlines() if Path("/proc/meminfo").exists() else []:
    if line.startswith("MemTotal"): return f"{int(line.split()[1]) / 2**20:.1f} GiB"
  return "unknown"


def blas() -> str:
  deps = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
  threads = [f"{k}={os.environ[k]}" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ]
  return f"{deps.get('name', 'unknown')} {deps.get('version', '')}".strip() + (f" ({', '.join(threads)})" if threads else " (default threads)")


def compiler(cmd: str) -> str:
  first = _run([*shlex.split(cmd), "--version"])
  return f"`{cmd}`: {first.splitlines()[0]}" if first else f"`{cmd}`: not found"


def uopc_revision() -> str:
  rev = _run(["git", "rev-parse", "--short=12", "HEAD"], ROOT)
  if rev is None: return "unknown (not a git checkout)"
  dirty = _run(["git", "status", "--porcelain", "--untracked-files=no", "--", "uopc"], ROOT)
  return rev + (" with uncommitted changes under uopc/" if dirty else "")


def uopc_cpu(cpu: str, env: dict[str, str]) -> str:
  """`uopc build --cpu` level, its flags and the vector width the heuristics size their tiles by."""
  from uopc.diagnostics import CompileError
  from uopc.driver import cpu_flags, cpu_vector_bytes
  try:
    return f"`--cpu {cpu}` ({' '.join(cpu_flags(cpu)) or 'no -march'}; {cpu_vector_bytes(cpu, env)}-byte vectors)"
  except CompileError as e:
    return f"`--cpu {cpu}`: {e}"


def describe(env: dict[str, str], tinygrad: str, cpu: str = "portable") -> list[tuple[str, str]]:
  """(what, value) rows; `env` is the environment uopc builds with, `tinygrad` its version or why it is
  absent, `cpu` the `uopc build --cpu` level."""
  return [
    ("CPU", f"{cpu_model()} ({platform.machine()}; {cpu_flags()})"),
    ("cores", cores()),
    ("memory", memory()),
    ("load average at start", load()),
    ("OS", f"{platform.system()} {platform.release()}"),
    ("Python", platform.python_version()),
    ("numpy", f"{np.__version__}, BLAS {blas()}"),
    ("uopc C compiler ($CC)", compiler(env.get("CC") or "cc") + (f", CFLAGS={env['CFLAGS']!r}" if env.get("CFLAGS") else "")),
    ("uopc build", uopc_cpu(cpu, env)),
    ("tinygrad", tinygrad),
    ("clang (tinygrad's compiler)", compiler("clang")),
    ("uopc revision", uopc_revision()),
  ]
