"""GTCA's result tables (SPEC §10): the paper's main and ablation tables over seeds.

- **Tables**: `main_table` (paper's main table: one row per method — Backbone, LoRA-only,
  Direct-Joint, GTCA — one column per benchmark) and `ablation_table` (full GTCA then one row
  per ablation), mean ± SD over seeds, the best mean per column in bold, an `n` column: the
  project's seed layout `slm_jax.tables.seed_table` (one run: `83.12 (n=1)`, none: `–`).
- `collect` reads every `result.json` that `python -m slm_jax.gtca.train` wrote under some
  folders (one per method, ablation and seed) and groups them by method; `report` prints both
  tables with the columns some run measured (`present`).
"""

from __future__ import annotations

import collections
import json
import pathlib
from typing import Mapping, Sequence

from slm_jax.gtca.metrics import REAL_BLIMP
from slm_jax.tables import seed_table

MAIN_METHODS = ("backbone", "lora_only", "direct_joint", "gtca")
ABLATIONS = ("gtca", "no_gate", "no_mask", "stage2_only", "weak_parser", "right_branching",
             "random_trees", "permuted_trees")
DISPLAY = {"backbone": "Backbone", "lora_only": "LoRA-only", "direct_joint": "Direct-Joint",
           "gtca": "GTCA", "no_gate": "w/o gate (g ≡ 1)", "no_mask": "w/o mask (m ≡ 1)",
           "stage2_only": "Stage 1+2 (no stage 3)", "weak_parser": "Weak parser",
           "right_branching": "Right-branching trees",
           "random_trees": "Random trees", "permuted_trees": "Permuted trees"}
METRIC_NAMES = {"toy": "Toy MCQA↑", "toy_pp": "PP↑", "toy_src": "SRC↑", "toy_orc": "ORC↑",
                "cloth": "CLOTH↑", "mmlu": "MMLU↑", "blimp": "BLiMP(-style pairs)↑",
                REAL_BLIMP: "BLiMP (67 paradigms)↑", "cola": "CoLA (MCC)↑",
                "hellaswag": "HellaSwag↑", "winogrande": "WinoGrande↑", "drift": "Drift↓",
                "blimp_mcqa": "BLiMP-MC seen paradigms↑",
                "blimp_mcqa_heldout": "BLiMP-MC held-out paradigms↑",
                "blimp_heldout": "BLiMP pairs, held-out paradigms↑",
                "mcqa_mix": "MCQA mix (ARC-E + OBQA + CSQA)↑", "mcqa_mix_arc_easy": "ARC-Easy↑",
                "mcqa_mix_openbookqa": "OpenBookQA↑",
                "mcqa_mix_commonsenseqa": "CommonsenseQA↑",
                "xattn_params": "X-attn params", "branch_params": "Branch params"}
LOWER_BETTER = {"drift"}
COUNTS = {"xattn_params", "branch_params"}  # sizes, not scores: whole numbers, no bold


def _table(results: Mapping[str, Mapping[str, Sequence[float]]], rows: Sequence[str],
           metrics: Sequence[str], first: str) -> str:
  return seed_table(results, rows, metrics, first=first, row_names=DISPLAY,
                    metric_names=METRIC_NAMES, digits={"drift": 3, **dict.fromkeys(COUNTS, 0)},
                    lower_better=LOWER_BETTER, unranked=COUNTS)


def main_table(results: Mapping[str, Mapping[str, Sequence[float]]],
               metrics: Sequence[str] = ("toy", "toy_pp", "toy_src", "toy_orc", "blimp"),
               methods: Sequence[str] = MAIN_METHODS) -> str:
  """The paper's main-table layout: method rows, benchmark columns, mean ± SD over seeds."""
  return _table(results, methods, metrics, "Method")


def ablation_table(results: Mapping[str, Mapping[str, Sequence[float]]],
                   metrics: Sequence[str] = ("toy", "toy_pp", "toy_src", "toy_orc", "blimp",
                                             "drift"),
                   ablations: Sequence[str] = ABLATIONS) -> str:
  """The paper's ablation-table layout: full GTCA first, then one row per ablation."""
  return _table(results, ablations, metrics, "Variant")


def collect(run_dirs: Sequence[str | pathlib.Path]) -> dict[str, dict[str, list[float]]]:
  """method → metric → values over seeds, from every `result.json` under `run_dirs`."""
  grouped: dict[str, dict[str, list[float]]] = collections.defaultdict(
      lambda: collections.defaultdict(list))
  found = 0
  for root in run_dirs:
    root = pathlib.Path(root)
    files = [root] if root.is_file() else sorted(root.rglob("result.json"))
    for path in files:
      try:
        result = json.loads(path.read_text())
        method, metrics = result["method"], result["metrics"]
      except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a GTCA result file ({type(error).__name__}: {error})"
                         ) from None
      found += 1
      for name, value in metrics.items():
        if isinstance(value, (int, float)):
          grouped[method][name].append(float(value))
  if not found:
    raise FileNotFoundError(f"no result.json under {', '.join(map(str, run_dirs))}")
  return {m: dict(v) for m, v in grouped.items()}


MAIN_COLUMNS = ("toy", "toy_pp", "toy_src", "toy_orc", "cloth", "mcqa_mix", "mcqa_mix_arc_easy",
                "mcqa_mix_openbookqa", "mcqa_mix_commonsenseqa", "mmlu", "hellaswag",
                "winogrande", "blimp", REAL_BLIMP, "cola", "blimp_mcqa", "blimp_mcqa_heldout",
                "blimp_heldout")


def present(results: Mapping[str, Mapping[str, Sequence[float]]],
            columns: Sequence[str]) -> tuple[str, ...]:
  """The columns some method has a value for (a table shows only measured benchmarks)."""
  return tuple(c for c in columns if any(results[m].get(c) for m in results))


def report(results: Mapping[str, Mapping[str, Sequence[float]]]) -> str:
  """Both tables as Markdown, each under a heading, with the benchmarks the runs measured."""
  return ("## Main results (mean ± SD over seeds)\n\n"
          + main_table(results, present(results, (*MAIN_COLUMNS, *sorted(COUNTS)))) +
          "\n\n## Ablations (mean ± SD over seeds)\n\n"
          + ablation_table(results, present(results, (*MAIN_COLUMNS, "drift", *sorted(COUNTS))))
          + "\n")

