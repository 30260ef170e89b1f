"""Coverage-guided fuzzing of the front end, the verifier and the pipeline (atheris, libFuzzer's engine).

Each input is a `.uop` text (bytes decoded as UTF-8, bad bytes replaced). The property: uopc either
accepts it or reports CompileError diagnostics; with --pipeline, an accepted program also goes through
every stage up to Render for the C target, which must either finish or report CompileError. Any other
exception is a crash (libFuzzer writes the input under -artifact_prefix and exits 1).

  python tests/fuzz_uop.py [--pipeline] [libFuzzer flags: -runs=N -max_len=N -artifact_prefix=DIR/] CORPUS_DIR...

The corpus starts as copies of samples/*.uop (the mutations of real programs reach far deeper than
random bytes); `make fuzz` runs it at length, tests/test_fuzz.py briefly.
"""
from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["uopc"]):
  from uopc.diagnostics import CompileError
  from uopc.frontend import parse_source
  from uopc.pipeline import compile_module
  from uopc.verify import verify_module

PIPELINE = "--pipeline" in sys.argv


def one_input(data: bytes) -> None:
  text = data.decode("utf-8", errors="replace")
  try:
    module = parse_source(text, "fuzz.uop")
  except CompileError:
    return
  if verify_module(module) or not PIPELINE: return
  try:
    compile_module(module, "c", "fz")
  except CompileError:
    return


def main() -> None:
  sys.setrecursionlimit(20_000)
  argv = [a for a in sys.argv if a != "--pipeline"]
  atheris.Setup(argv, one_input)
  atheris.Fuzz()


if __name__ == "__main__":
  main()
