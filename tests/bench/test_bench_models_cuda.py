"""The GPU models benchmark's `--variant` arguments, without a GPU: a label's specs are read as one
`--opts` schedule (inline or @FILE), and a malformed one is refused with what was expected."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models_cuda import variants  # noqa: E402


def test_a_labels_specs_make_one_schedule(tmp_path):
  (tmp_path / "half.opts").write_text("# rows of 768\ngpt2_layernorm__gpt2_layernorm_k0:SPLIT(3,4,r),SPLIT(3,96,G)\n")
  got = variants([f"half=@{tmp_path / 'half.opts'}", "half=softmax__softmax_k0:", "base=argmax__argmax_k0:SPLIT(0,16,l)"])
  assert sorted(got) == ["base", "half"]
  assert sorted(got["half"]) == ["gpt2_layernorm__gpt2_layernorm_k0", "softmax__softmax_k0"]
  assert [str(o) for o in got["half"]["gpt2_layernorm__gpt2_layernorm_k0"]] == ["SPLIT(3,4,r)", "SPLIT(3,96,G)"]
  assert got["half"]["softmax__softmax_k0"] == ()
  assert [str(o) for o in got["base"]["argmax__argmax_k0"]] == ["SPLIT(0,16,l)"]


@pytest.mark.parametrize("spec", ["argmax__argmax_k0:SPLIT(0,16,l)", "=argmax__argmax_k0:"])
def test_a_variant_without_a_label_is_refused(spec):
  with pytest.raises(SystemExit, match="expected LABEL=KERNEL:OPTS or LABEL=@FILE"):
    variants([spec])
