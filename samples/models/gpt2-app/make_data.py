"""Inputs and tinygrad's expected output for gpt2-app: `python make_data.py BUILD_DIR`.

inputs.bin: every argument of gpt2_block except `out`, float32, concatenated in argument order (the
activations x[64, 768], then the weights); expected.bin: tinygrad's output [64, 768], float32."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from programs import programs  # noqa: E402
from tinygrad import Tensor  # noqa: E402


def main(out_dir: str) -> None:
  block = next(p for p in programs("real") if p.name == "gpt2_block")
  arrays = block.arrays(seed=0)
  expected = block.fn(*[Tensor(a) for a in arrays]).numpy()
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  (out / "inputs.bin").write_bytes(b"".join(np.ascontiguousarray(a, np.float32).tobytes() for a in arrays))
  (out / "expected.bin").write_bytes(np.ascontiguousarray(expected, np.float32).tobytes())
  print(f"wrote {out / 'inputs.bin'} ({len(arrays)} arrays) and {out / 'expected.bin'} {expected.shape}")


if __name__ == "__main__":
  main(sys.argv[1])
