"""The A/B harness (ab_cpu.py) on a small gemm: it builds each variant, compares outputs, and times them."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ab_cpu import main  # noqa: E402
from test_tensor_programs import gemm  # noqa: E402


def test_variants_are_built_compared_and_timed(tmp_path, capsys):
  (tmp_path / "g.uop").write_text(gemm(16, 8, 32).text())
  assert main([str(tmp_path / "g.uop"), "--pairs", "3", "--workdir", str(tmp_path / "work"), "--opts", "g__gemm_k0:SPLIT(1,4,u)", "--opts", "g__gemm_k0:SPLIT(2,8,r)"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert [line.split()[-1] for line in lines[-3:]] == ["heuristics", "g__gemm_k0:SPLIT(1,4,u)", "g__gemm_k0:SPLIT(2,8,r)"]
  assert lines[-3].split()[2] == "1.000x"
  assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["v0", "v1", "v2"]
