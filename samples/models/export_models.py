"""Write the real-model programs of programs.py as `.uop` files next to this script, at their real
shapes: `python samples/models/export_models.py` (needs tinygrad 0.14: pip install 'uopc[tinygrad]').
Each file has one `func` entry named like the file; its PARAMs are the function's arguments in order
(activations, then weights), then `out`."""
from __future__ import annotations

import sys
from pathlib import Path

import uopc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from programs import Program, programs  # noqa: E402

HEADER = "# {name}: written by samples/models/export_models.py from programs.py ({doc}); do not edit\n"


def export_text(p: Program) -> str:
  doc = ", ".join(f"{n}[{'x'.join(map(str, s))}]:{d}" for n, s, d in p.inputs)
  return HEADER.format(name=p.name, doc=doc) + uopc.export(p.fn, *p.examples(), name=p.name)


def main() -> None:
  for p in programs("real"):
    path = HERE / f"{p.name}.uop"
    path.write_text(export_text(p))
    print(f"wrote {path.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
  main()
