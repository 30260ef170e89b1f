"""The float16 gemm of issue 19 against its float32 twin, in one run: samples/models' `half_matmul`
(tinygrad's `a.matmul(b, dtype=dtypes.float)` of float16 a and b: each product rounded to float16, the
sums in float32) and the same function of float32 inputs (a float32 gemm), both exported with
`uopc.export`, built with `uopc build -t c` and called through ctypes, workspaces allocated once. With
`--fast-math` both are built with it: the float16 products are then summed unrounded (uopc.stages.isel).

The calls alternate (float16, float32, float16, ...) so that both see the same machine, load included;
the report gives each one's median time and the median of the per-pair ratios. Before timing, the
float16 result is checked against the float64 sums of the float16-rounded products (--fast-math: of the exact
products; within the float32 sum's error bound) and the float32 one against numpy.

  python tests/bench/bench_half_matmul.py [--size 256] [--pairs 400] [--cpu native] [--fast-math] [--half-opts KERNEL:OPTS]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "samples" / "models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import UopcModel  # noqa: E402
from machine import describe, load  # noqa: E402
from programs import Program, half_matmul  # noqa: E402
from runners import Tinygrad  # noqa: E402


def within_sum_bound(got: np.ndarray, products: np.ndarray) -> bool:
  """got equals the sums over k of products[m, k, n] up to float32's bound for a sum of K terms."""
  k = products.shape[1]
  want, bound = products.sum(1, dtype=np.float64), np.abs(products).sum(1, dtype=np.float64) * k * 2.0 ** -24
  return bool(np.all(np.abs(got.astype(np.float64) - want) <= bound))


def main(argv: list[str]) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--size", type=int, default=256, help="M = K = N (default 256, the sample's)")
  ap.add_argument("--pairs", type=int, default=400, help="alternating pairs of calls timed (default 400)")
  ap.add_argument("--cpu", default="native", help="uopc build --cpu (default native)")
  ap.add_argument("--half-opts", action="append", default=[], metavar="KERNEL:OPTS",
                  help="uopc build --opts for the float16 build (repeatable): time a pinned schedule against the float32 one")
  ap.add_argument("--fast-math", action="store_true", help="build both with uopc build --fast-math")
  args = ap.parse_args(argv)
  s = args.size
  half = Program("half_matmul", half_matmul, (("a", (s, s), "float16"), ("b", (s, s), "float16")))
  single = Program("float_matmul", half_matmul, (("a", (s, s), "float32"), ("b", (s, s), "float32")))
  a, b = half.arrays(seed=0)
  build_args = (["--cpu", args.cpu] if args.cpu != "portable" else []) + (["--fast-math"] if args.fast_math else [])
  with tempfile.TemporaryDirectory(prefix="uopc-bench-half-") as tmp:
    like = np.zeros((s, s), np.float32)
    f16 = UopcModel(half, [a, b], like, Path(tmp), build_args + [x for o in args.half_opts for x in ("--opts", o)])
    f32 = UopcModel(single, [a.astype(np.float32), b.astype(np.float32)], like, Path(tmp), build_args)
    f16.call(), f32.call()
    products = (a[:, :, None] * b[None, :, :]).astype(np.float64)  # numpy rounds each float16 product once
    if args.fast_math: products = a.astype(np.float64)[:, :, None] * b[None]  # unrounded
    if not within_sum_bound(f16.out, products) or not within_sum_bound(f32.out, a.astype(np.float64)[:, :, None] * b[None]):
      print("FAILED: a result is not the gemm's", file=sys.stderr)
      return 1
    t16, t32 = [], []
    for _ in range(args.pairs):
      start = time.perf_counter(); f16.call(); t16.append(time.perf_counter() - start)  # noqa: E702
      start = time.perf_counter(); f32.call(); t32.append(time.perf_counter() - start)  # noqa: E702
  ratio = statistics.median(x / y for x, y in zip(t16, t32))
  lines = [f"`{' '.join(['python', 'tests/bench/bench_half_matmul.py', *argv])}`", ""]
  lines += [f"- {k}: {v}" for k, v in describe(dict(os.environ), Tinygrad.version(), args.cpu)] + [f"- load average at end: {load()}"]
  lines += ["", f"half_matmul {s}: float16 {statistics.median(t16) * 1e3:.3f} ms, float32 {statistics.median(t32) * 1e3:.3f} ms, "
            f"float16 / float32 {ratio:.2f}x (median of {args.pairs} alternating pairs)"]
  print("\n".join(lines))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
