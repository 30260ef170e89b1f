"""Time parsing (and verifying, once uopc.verify exists) a generated 20,000-line program.

Run: .venv/bin/python tests/bench_parse.py [LINES]. A script, not a test: the target is under 2 s.
"""
from __future__ import annotations

import sys
import time

from uopc.frontend import parse_source


def program(lines: int) -> str:
  """A kernel of `lines` lines: a long chain of arithmetic on a loaded value, a store every 8 lines."""
  out = ["kernel bench {", '  %a = PARAM {(0, "a")} : ptr<f32>', '  %b = PARAM {(1, "b")} : ptr<f32>',
         '  %i = SPECIAL(1024) {"gidx0"}', "  %p = INDEX(%a, %i)", "  %q = INDEX(%b, %i)", "  %v0 = LOAD(%p)"]
  n = 0
  while len(out) < lines - 1:
    n += 1
    if n % 8 == 0: out.append(f"  STORE(%q, %v{n - 1})"); out.append(f"  %v{n} = ADD(%v{n - 1}, 2.0)")  # noqa: E702
    elif n % 8 == 1: out.append(f"  %v{n} = MUL(%v{n - 1}, 1.5)  # scale")
    else: out.append(f"  %v{n} = ADD(%v{n - 1}, %v{n - 1})")
  out.append("}")
  return "\n".join(out) + "\n"


def main() -> None:
  lines = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
  text = program(lines)
  parse_source(text, "warmup.uop")  # builds the LALR tables once, as any real run does before parsing
  t0 = time.perf_counter()
  m = parse_source(text, "bench.uop")
  t1 = time.perf_counter()
  print(f"parse:  {text.count(chr(10))} lines in {t1 - t0:.3f} s")
  try:
    from uopc.verify import verify_module
  except ImportError:
    return
  diags = verify_module(m)
  print(f"verify: {time.perf_counter() - t1:.3f} s ({len(diags)} diagnostics)")


if __name__ == "__main__":
  main()
