"""Make tests/threefry_vectors.json: (x, key) -> THREEFRY(x, key) known answers from tinygrad.

Needs tinygrad 0.14.0 and its CPU device (clang), which the test suite does not:
  python3 -m venv /tmp/tgvenv && /tmp/tgvenv/bin/pip install tinygrad==0.14.0 numpy
  /tmp/tgvenv/bin/python tests/make_threefry_vectors.py
The inputs are edge patterns (0, all ones, single bits, halves) and seeded random 64-bit values.
"""
import json
import random
from pathlib import Path

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import Ops, UOp

N_RANDOM = 12000


def inputs() -> list[tuple[int, int]]:
  edges = [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 0x1BD11BDA, 0x243F6A8885A308D3]
  edges += [1 << b for b in range(0, 64, 7)]
  rng = random.Random(20240611)
  pairs = [(x, k) for x in edges for k in edges]
  return pairs + [(rng.getrandbits(64), rng.getrandbits(64)) for _ in range(N_RANDOM)]


def tinygrad_threefry(xs: list[int], keys: list[int]) -> list[int]:
  x = Tensor(np.array(xs, dtype=np.uint64), device="CPU")
  k = Tensor(np.array(keys, dtype=np.uint64), device="CPU")
  out = Tensor(UOp(Ops.THREEFRY, dtypes.uint64, (x.uop, k.uop)))  # the THREEFRY UOp itself, elementwise
  return [int(v) for v in out.numpy()]


if __name__ == "__main__":
  pairs = inputs()
  results = tinygrad_threefry([x for x, _ in pairs], [k for _, k in pairs])
  vectors = [[f"{x:#018x}", f"{k:#018x}", f"{r:#018x}"] for (x, k), r in zip(pairs, results)]
  out = Path(__file__).with_name("threefry_vectors.json")
  rows = ",\n".join(json.dumps(v) for v in vectors)  # one vector a line: readable diffs
  out.write_text(f'{{"source": "tinygrad 0.14.0 THREEFRY UOp on the CPU device",\n"vectors": [\n{rows}\n]}}\n')
  print(f"{len(vectors)} vectors -> {out}")
