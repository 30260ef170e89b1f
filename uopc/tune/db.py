"""The tuning database: a JSON text file that diffs well in review.

Format (`FORMAT` 1):

  {
    "entries": {
      "<key>": {"arch": "portable", "device": "...", "heuristic_opts": "...", "heuristic_us": 12.5,
                "kernel": "NAME__main_k0", "opts": "SPLIT(0,4,u)", "space": 1, "target": "c", "time_us": 9.75},
      ...
    },
    "format": 1
  }

Keys are uopc.tune.kernels.kernel_key (the kernel's IR after Rangeify, target, arch, search-space
version). Each entry: the opts found (the `--opts` syntax), their time and the heuristics' (median
microseconds on `device`), and for people and stale-entry notes, the kernel's name, target, arch and
search-space version.

Invariants: `dumps` is a function of the entries alone (keys sorted, fixed indentation, one trailing
newline), so saving what was loaded rewrites the same bytes; `merge` is commutative and associative
(on a key in several databases the fastest entry wins, ties broken by the opts text); a file that is
not such a database is a CompileError located at file:line:col (the JSON decoder's position, or the
line of the offending entry's key).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from uopc.diagnostics import CompileError, Loc, error

FORMAT = 1


@dataclass(frozen=True)
class Entry:
  kernel: str
  target: str
  arch: str
  space: int
  opts: str
  time_us: float
  heuristic_opts: str
  heuristic_us: float
  device: str


_FIELDS = {"kernel": str, "target": str, "arch": str, "space": int, "opts": str, "time_us": (int, float),
           "heuristic_opts": str, "heuristic_us": (int, float), "device": str}
_KIND_NAMES = {str: "a string", int: "an integer"}


def load(path: str | Path, missing_ok: bool = False) -> dict[str, Entry]:
  """The entries of the database at `path` ({} when it does not exist and `missing_ok`)."""
  path = Path(path)
  try:
    text = path.read_text(encoding="utf-8")
  except FileNotFoundError:
    if missing_ok: return {}
    raise CompileError([error(None, f"cannot read the tuning database {path}: no such file")]) from None
  except (OSError, UnicodeDecodeError) as e:
    raise CompileError([error(None, f"cannot read the tuning database {path}: {getattr(e, 'strerror', None) or e}")]) from None
  return parse(text, str(path))


def parse(text: str, file: str) -> dict[str, Entry]:
  try:
    doc = json.loads(text)
  except json.JSONDecodeError as e:
    raise CompileError([error(Loc(file, e.lineno, e.colno), f"not a tuning database: {e.msg}")], {file: text}) from None
  def fail(message: str, key: str | None = None) -> CompileError:
    return CompileError([error(_locate(text, file, key), message, "a tuning database is written by `uopc tune`")], {file: text})
  if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict): raise fail('not a tuning database: expected {"entries": {...}, "format": 1}')
  if doc.get("format") != FORMAT: raise fail(f"tuning database format {doc.get('format')!r}; this uopc reads format {FORMAT}", "format")
  return {key: _entry(value, key, fail) for key, value in doc["entries"].items()}


def _entry(value, key: str, fail) -> Entry:
  if not isinstance(value, dict): raise fail(f"entry {key}: expected an object", key)
  for name, kind in _FIELDS.items():
    if not isinstance(value.get(name), kind) or isinstance(value.get(name), bool):
      raise fail(f"entry {key}: field '{name}' is missing or not {_KIND_NAMES.get(kind, 'a number')}", key)
  if unknown := sorted(set(value) - set(_FIELDS)): raise fail(f"entry {key}: unknown field '{unknown[0]}'", key)
  return Entry(**{name: value[name] for name in _FIELDS})


def _locate(text: str, file: str, key: str | None) -> Loc:
  """The line and column of `"key"` in the text (the entry a schema error is about), else 1:1."""
  if key is not None and (at := text.find(json.dumps(key))) >= 0:
    line = text.count("\n", 0, at) + 1
    return Loc(file, line, at - (text.rfind("\n", 0, at) + 1) + 1)
  return Loc(file, 1, 1)


def dumps(entries: dict[str, Entry]) -> str:
  doc = {"entries": {k: asdict(v) for k, v in entries.items()}, "format": FORMAT}
  return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def save(path: str | Path, entries: dict[str, Entry]) -> None:
  """Write atomically: a reader (or an interrupted run) never sees half a database."""
  path = Path(path)
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  tmp.write_text(dumps(entries), encoding="utf-8")
  tmp.replace(path)


def better(a: Entry, b: Entry) -> Entry:
  """The entry to keep of two for one key: the faster, ties by the opts text (so merging is order-free)."""
  return min(a, b, key=lambda e: (e.time_us, e.opts, e.device, e.heuristic_us))


def merge(*dbs: dict[str, Entry]) -> dict[str, Entry]:
  out: dict[str, Entry] = {}
  for db in dbs:
    for key, entry in db.items(): out[key] = better(out[key], entry) if key in out else entry
  return out
