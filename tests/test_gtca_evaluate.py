"""`python -m slm_jax.gtca.evaluate --runs=…`: both tables of finished runs, also to a file;
`--run=DIR --task=SET` again keeps the earlier evaluation (refused without --force)."""

from __future__ import annotations

import json

import pytest

from slm_jax import cli
from slm_jax.gtca import evaluate, runs


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
  assert "| LoRA-only | **62.00 (n=1)** | 1 |\n| GTCA | 60.50 ± 0.71 | 2 |" in printed  # best bold


def test_evaluating_a_run_again_keeps_the_earlier_file(tmp_path, monkeypatch, capsys):
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  (run_dir / "result.json").write_text(json.dumps({"method": "gtca", "metrics": {"toy": 90.0}}))
  scores = iter([0.25, 0.5])
  monkeypatch.setattr(runs, "restore_run", lambda path, log: None)
  monkeypatch.setattr(runs.real_sets, "score_run", lambda restored, task, *a, **k: {
      "metrics": {task: next(scores)}, "counts": {"truncated": 0}})
  argv = ["--run", str(run_dir), "--task=cola", "--data_root=d", "--cache=c"]
  assert evaluate.main(argv + ["--limit=3"]) == 0
  first = json.loads((run_dir / "eval_cola.json").read_text())
  assert first["metrics"] == {"cola": 0.25} and first["evaluated"]["limit"] == 3
  with pytest.raises(cli.CliError, match=r"eval_cola.json: exists .*--force"):
    evaluate.main(argv)
  assert evaluate.main(argv + ["--force"]) == 0
  assert json.loads((run_dir / "eval_cola.1.json").read_text()) == first  # the trace
  assert json.loads((run_dir / "eval_cola.json").read_text())["metrics"] == {"cola": 0.5}
  result = json.loads((run_dir / "result.json").read_text())
  assert result["metrics"] == {"toy": 90.0, "cola": 0.5}
  assert result["eval_history"] == {"cola": ["eval_cola.1.json"]}
  capsys.readouterr()
