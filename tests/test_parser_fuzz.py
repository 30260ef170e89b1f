"""Random and mutated text never crashes the front end: only CompileError, every diagnostic readable."""
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uopc.diagnostics import CompileError
from uopc.frontend import parse_source, print_module

try:
  from uopc.verify import verify_module
except ImportError:  # the verifier is another engineer's; parse-only until it lands
  verify_module = None

SAMPLE_TEXTS = [p.read_text() for p in sorted((Path(__file__).resolve().parents[1] / "samples").glob("*.uop"))]
TOKENS = ["%a", "%b", "%0", "=", "(", ")", "[", "]", "{", "}", ",", ":", "-", "#", "\n", " ", "ADD", "CONST", "RANGE",
          "STORE", "INDEX", "LOAD", "SINK", "PARAM", "kernel", "func", "k", "f32", "ptr<f32>", "ptr<", ">", "1", "2.5",
          "0x1f", "nan", "inf", "'s'", '"', "AxisType.LOOP", "UOps.ALU", "BinaryOps.ADD", "(0, 'd', True)", "7 UOps.STORE"]


def _check(text: str) -> None:
  try:
    m = parse_source(text, "fuzz.uop")
  except CompileError as e:
    for d in e.diagnostics:
      assert d.message and (d.loc is None or (d.loc.file == "fuzz.uop" and d.loc.line >= 1 and d.loc.col >= 1))
    assert e.format()
    return
  if verify_module is not None: verify_module(m)
  again = parse_source(print_module(m), "again.uop")
  assert [(e.name, e.sink) for e in again.entries] == [(e.name, e.sink) for e in m.entries]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=200))
def test_random_text(text):
  _check(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_random_token_soup(tokens):
  _check(" ".join(tokens))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SAMPLE_TEXTS), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 8),
                                                         st.sampled_from(TOKENS + [""])), min_size=1, max_size=4))
def test_mutated_samples(text, edits):
  for at, cut, insert in edits:
    at %= len(text) + 1
    text = text[:at] + insert + text[at + cut:]
  _check(text)
