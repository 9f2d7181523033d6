"""`python -m slm_jax.gtca.evaluate --runs=…`: both tables of finished runs, also to a file."""

from __future__ import annotations

import json

from slm_jax.gtca import evaluate


def test_runs_print_and_write_the_tables(tmp_path, capsys):
  for i, (name, seed) in enumerate([("gtca", 0), ("gtca", 1), ("lora_only", 0)]):
    path = tmp_path / name / f"seed{seed}"
    path.mkdir(parents=True)
    (path / "result.json").write_text(json.dumps({"method": name, "metrics": {"toy": 60.0 + i}}))
  out = tmp_path / "tables.md"
  assert evaluate.main(["--runs", str(tmp_path), "--out", str(out)]) == 0
  printed = capsys.readouterr().out
  assert printed == out.read_text() + "\n"  # the same tables on stdout and in the file
  assert printed.startswith("## Main results (mean ± SD over seeds)")
  assert "| LoRA-only | **62.00** | 1 |\n| GTCA | 60.50 ± 0.71 | 2 |" in printed  # best in bold
