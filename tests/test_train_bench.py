"""benchmarks/train_bench.py at tiny scale on CPU: the per-configuration table, the paper's
Table 9 layout, and the budget that cuts configurations it has no time for."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "train_bench.py"


def test_train_bench_prints_the_tables_and_cuts_what_the_budget_does_not_allow():
  done = subprocess.run([sys.executable, str(SCRIPT), "--names", "terminal,tgtree,tg",
                         "--steps", "1", "--batch", "2", "--budget", "0.001"],
                        capture_output=True, text=True, timeout=300, check=False,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 0, done.stderr[-3000:]
  lines = done.stdout.splitlines()
  (terminal,) = [line for line in lines if line.startswith("| terminal |")]
  cells = [cell.strip() for cell in terminal.strip("|").split("|")]
  assert cells[:3] == ["terminal", "lin0", "causal"] and float(cells[3].replace(",", "")) > 0
  assert cells[4] == "–" and cells[5] == "1.00"  # no MFU on CPU; the ratio to itself
  assert any(line.startswith("| 100M | H800 (paper") and "62,175" in line for line in lines)
  assert "cut (budget 0 s): tgtree, tg" in done.stdout
