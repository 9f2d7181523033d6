"""GTCA's result tables: mean ± SD over seeds, the main and ablation layouts, best in bold,
collecting result.json files."""

from __future__ import annotations

import json

import pytest

from slm_jax.gtca import report
from slm_jax.gtca.metrics import REAL_BLIMP


def test_tables_in_the_seed_layout(tmp_path):
  """The cells are `slm_jax.tables`' (mean ± sample SD; one run `x (n=1)`; none `–`)."""
  results = {"backbone": {"toy": [50.0, 50.0]}, "lora_only": {"toy": [60.0, 62.0]},
             "gtca": {"toy": [70.0, 74.0], "drift": [0.01, 0.03]},
             "no_mask": {"toy": [71.0], "drift": [0.05]}}
  table = report.main_table(results, metrics=("toy",))
  lines = table.splitlines()
  assert lines[0] == "| Method | Toy MCQA↑ | n |"
  assert [line.split(" | ")[0] for line in lines[2:]] == ["| Backbone", "| LoRA-only", "| GTCA"]
  assert "**72.00 ± 2.83**" in lines[-1]
  ablation = report.ablation_table(results, metrics=("toy", "drift"))
  assert "**0.020 ± 0.014**" in ablation  # lower drift is better
  # the toy's BLiMP-style pairs and the real BLiMP are two columns, never one
  both = report.report({"gtca": {"blimp": [60.0], REAL_BLIMP: [70.0, 72.0]},
                          "lora_only": {"blimp": [50.0]}})
  assert "| Method | BLiMP(-style pairs)↑ | BLiMP (67 paradigms)↑ | n |" in both
  assert "| GTCA | **60.00 (n=1)** | 71.00 ± 1.41 | 2 |" in both
  assert "| LoRA-only | 50.00 (n=1) | – | 1 |" in both
  for i, (name, seed) in enumerate([("gtca", 0), ("gtca", 1), ("lora_only", 0)]):
    path = tmp_path / name / f"seed{seed}"
    path.mkdir(parents=True)
    (path / "result.json").write_text(json.dumps({"method": name, "metrics": {"toy": 60.0 + i}}))
  grouped = report.collect([tmp_path])
  assert grouped == {"gtca": {"toy": [60.0, 61.0]}, "lora_only": {"toy": [62.0]}}
  (tmp_path / "bad").mkdir()
  (tmp_path / "bad" / "result.json").write_text("{}")
  with pytest.raises(ValueError, match="not a GTCA result"):
    report.collect([tmp_path / "bad"])
  with pytest.raises(FileNotFoundError):
    report.collect([tmp_path / "absent"])
