"""Evaluation reports: `results.json`, Markdown tables in the paper's layouts, an SG bar chart.

`results` is the dict `slm_jax.evaluate` builds (and writes as JSON):

  {"settings": {...},
   "models": [{"name", "configuration", "workdir", "step",
               "sg": {"score", "circuits": {circuit: acc}, "suites": {suite: acc}} | absent,
               "blimp": {"overall", "fields", "terms", "paradigms", ...} | absent,
               "docppl": {"ppl", "tokens", ...} | absent}, ...],
   "bootstrap": {task: BootstrapResult.to_json()}}

Tables (best value per column in bold, as in the paper):
- Table 4 layout: one row per model, SG↑ BLiMP↑ Doc-PPL↓.
- Table 6 layout: SG circuits (Table 13 abbreviations) with SG and BLiMP.
- Table 13 layout, per suite: a row per SG suite (grouped by circuit), a column per model.
- BLiMP by field and by linguistics term; doc-PPL details; bootstrap CIs and paired tests.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Sequence

CIRCUIT_ABBREVIATIONS = {  # paper Table 13
    "Agreement": "Agr", "Center Embedding": "CtrEmb", "Garden-Path Effects": "GrdnPath",
    "Gross Syntactic State": "GrsSyn", "Licensing": "Lic", "Long-Distance Dependencies": "LDD",
}
CIRCUITS = tuple(CIRCUIT_ABBREVIATIONS)
DISPLAY_NAMES = {
    "terminal": "Terminal", "tree": "Tree", "tgtree": "TGTree", "tg": "TG",
    "tgnomask": "TGNomask", "tgnomask_aug": "TGNomask-Aug", "tree_noont": "Tree-NoONT",
    "tree_compress": "Tree-Compress", "tree_triplecnt": "Tree-TripleCNT",
    "tree_shuffle": "Tree-Shuffle", "tgnomask_mix_tg": "TGNomask-Mix-TG",
    "tgtree_mix_tg": "TGTree-Mix-TG", "pause1": "Pause-1", "pause2": "Pause-2",
}
TASK_TITLES = {"sg": "SG", "blimp": "BLiMP", "docppl": "Doc-PPL"}


def display_names(configurations: Sequence[str], workdirs: Sequence[str]) -> list[str]:
  """Paper names (`Tree`, `TGTree`, …); runs sharing a configuration get their workdir appended."""
  base = [DISPLAY_NAMES.get(c, c) for c in configurations]
  return [f"{b} ({pathlib.Path(w).name})" if base.count(b) > 1 else b
          for b, w in zip(base, workdirs)]


def _get(model: dict, *path: str) -> float | None:
  node: Any = model
  for key in path:
    if not isinstance(node, dict) or key not in node:
      return None
    node = node[key]
  return None if node is None else float(node)


def _fmt(value: float | None, digits: int) -> str:
  return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else (
      f"{value:.{digits}f}")


def _table(header: Sequence[str], rows: Sequence[Sequence[float | None | str]],
           digits: Sequence[int], lower_better: Sequence[bool | None]) -> str:
  """Markdown table; numeric columns with a direction get their best value in bold."""
  cells = [[c if isinstance(c, str) else _fmt(c, digits[j]) for j, c in enumerate(row)]
           for row in rows]
  for j, direction in enumerate(lower_better):
    if direction is None:
      continue
    numbers = [(row[j], i) for i, row in enumerate(rows)
               if isinstance(row[j], (int, float)) and not math.isnan(row[j])]
    if len(numbers) < 2:
      continue
    best = (min if direction else max)(v for v, _ in numbers)
    if all(round(v, digits[j]) == round(best, digits[j]) for v, _ in numbers):
      continue  # all tied: nothing to highlight
    for v, i in numbers:
      if round(v, digits[j]) == round(best, digits[j]):
        cells[i][j] = f"**{cells[i][j]}**"
  lines = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if j == 0 else "---:" for j in range(len(header))) + "|"]
  lines += ["| " + " | ".join(row) + " |" for row in cells]
  return "\n".join(lines)


def main_table(results: dict) -> str:
  """Table 4 layout: Model, SG↑, BLiMP↑, Doc-PPL↓."""
  rows = [[m["name"], _get(m, "sg", "score"), _get(m, "blimp", "overall"),
           _get(m, "docppl", "ppl")] for m in results["models"]]
  return _table(["Model", "SG↑", "BLiMP↑", "Doc-PPL↓"], rows, [0, 2, 2, 3],
                [None, False, False, True])


def circuits_table(results: dict) -> str:
  """Table 6 layout with the SG circuits of Table 13: Agr … LDD, SG(paper) = their mean, SG
  (31 suites), BLiMP."""
  header = (["Model"] + [CIRCUIT_ABBREVIATIONS[c] + "↑" for c in CIRCUITS]
            + ["SG(paper)↑", "SG↑", "BLiMP↑"])
  rows = [[m["name"]] + [_get(m, "sg", "circuits", c) for c in CIRCUITS]
          + [_get(m, "sg", "score_paper"), _get(m, "sg", "score"), _get(m, "blimp", "overall")]
          for m in results["models"]]
  return _table(header, rows, [0] + [2] * 9, [None] + [False] * 9)


def suites_table(results: dict, circuit_suites: dict[str, list[str]] | None = None) -> str:
  """Table 13 detail: a row per SG suite (circuit, suite), a column per model."""
  models = results["models"]
  suites: list[tuple[str, str]] = []
  if circuit_suites:
    suites = [(CIRCUIT_ABBREVIATIONS.get(c, c), s) for c in CIRCUITS
              for s in circuit_suites.get(c, [])]
  known = {s for _, s in suites}
  for m in models:
    for s in (m.get("sg") or {}).get("suites", {}):
      if s not in known:
        suites.append(("(not in the 31)" if circuit_suites else "", s))
        known.add(s)
  rows = [[c, s] + [_get(m, "sg", "suites", s) for m in models] for c, s in suites]
  return _table(["Circuit", "Suite"] + [m["name"] for m in models], rows,
                [0, 0] + [2] * len(models), [None, None] + [None] * len(models))


def blimp_breakdown(results: dict, key: str) -> str:
  """BLiMP accuracy per `fields` or `terms` (rows) and model (columns)."""
  models = results["models"]
  names = sorted({k for m in models for k in ((m.get("blimp") or {}).get(key) or {})})
  rows = [[n] + [_get(m, "blimp", key, n) for m in models] for n in names]
  return _table([key[:-1].capitalize()] + [m["name"] for m in models], rows,
                [0] + [2] * len(models), [None] * (1 + len(models)))


def docppl_table(results: dict) -> str:
  rows = []
  for m in results["models"]:
    d = m.get("docppl")
    if d:
      rows.append([m["name"], d.get("ppl"), str(d.get("tokens")), str(d.get("sentences")),
                   str(d.get("proposals")), str(d.get("distinct_candidates")),
                   str(d.get("duplicates_after_linearization")),
                   str(d.get("truncated_histories"))])
  return _table(["Model", "Doc-PPL↓", "M (terminal+EOS)", "Sentences", "Proposals",
                 "Distinct sequences", "Collapsed duplicates", "Truncated histories"], rows,
                [0, 3, 0, 0, 0, 0, 0, 0], [None, True] + [None] * 6)


def bootstrap_tables(results: dict) -> str:
  parts = []
  for task, boot in (results.get("bootstrap") or {}).items():
    title = TASK_TITLES.get(task, task)
    digits = 3 if boot["statistic"] == "ppl" else 2
    rows = [[m, f"{v['estimate']:.{digits}f} [{v['ci'][0]:.{digits}f}, {v['ci'][1]:.{digits}f}]"]
            for m, v in boot["models"].items()]
    parts.append(f"**{title}** ({boot['examples']} examples, {boot['resamples']} resamples, "
                 f"seed {boot['seed']})\n\n"
                 + _table(["Model", "Estimate [95% CI]"], rows, [0, 0], [None, None]))
    if boot["pairs"]:
      rows = [[f"{p['a']} − {p['b']}",
               f"{p['delta']:+.{digits}f} [{p['ci'][0]:+.{digits}f}, {p['ci'][1]:+.{digits}f}]",
               "<.001" if p["p"] < 0.001 else f"{p['p']:.3f}"] for p in boot["pairs"]]
      parts.append(_table(["Pair", "Δ [95% CI]", "p"], rows, [0, 0, 0], [None] * 3))
  return "\n\n".join(parts)


def markdown(results: dict, circuit_suites: dict[str, list[str]] | None = None) -> str:
  """All tables as one Markdown document."""
  s = results.get("settings", {})
  out = ["# Evaluation results", "",
         "Models: " + ", ".join(f"{m['name']} = `{m['workdir']}` (step {m.get('step')})"
                                for m in results["models"]), "",
         "Settings: " + ", ".join(f"{k}={v}" for k, v in s.items() if not isinstance(v, dict)),
         "", "## Main results (paper Table 4 layout)", "", main_table(results)]
  if any(m.get("sg") or m.get("blimp") for m in results["models"]):
    out += ["", "## Syntactic evaluation: SG circuits and BLiMP (paper Tables 6 and 13 layout)", "",
            circuits_table(results)]
  if any(m.get("sg") for m in results["models"]):
    out += ["", "## SG per suite (paper Table 13, by suite)", "",
            suites_table(results, circuit_suites)]
  if any(m.get("blimp") for m in results["models"]):
    out += ["", "## BLiMP by field", "", blimp_breakdown(results, "fields"),
            "", "## BLiMP by linguistics term", "", blimp_breakdown(results, "terms")]
  if any(m.get("docppl") for m in results["models"]):
    out += ["", "## Doc-PPL details", "", docppl_table(results)]
  if results.get("bootstrap"):
    out += ["", "## Paired bootstrap (95% percentile CIs; Δ = first − second)", "",
            bootstrap_tables(results)]
  notes = results.get("notes")
  if notes:
    out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
  return "\n".join(out) + "\n"


def plot_sg_circuits(results: dict, path: str | pathlib.Path) -> pathlib.Path | None:
  """Grouped bar chart (PNG): SG accuracy per circuit (x) and model (bars); None without SG."""
  models = [m for m in results["models"] if m.get("sg")]
  if not models:
    return None
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  labels = [CIRCUIT_ABBREVIATIONS[c] for c in CIRCUITS] + ["SG"]
  width = 0.8 / len(models)
  fig, ax = plt.subplots(figsize=(min(14.0, 4.0 + 0.35 * len(labels) * len(models)), 3.6))
  for k, m in enumerate(models):
    values = [_get(m, "sg", "circuits", c) for c in CIRCUITS] + [_get(m, "sg", "score")]
    xs = [i + (k - (len(models) - 1) / 2) * width for i in range(len(labels))]
    ax.bar(xs, [0.0 if v is None else v for v in values], width, label=m["name"])
  ax.set_xticks(range(len(labels)))
  ax.set_xticklabels(labels)
  ax.set_ylabel("accuracy (%)")
  ax.set_ylim(0, 100)
  ax.set_title("SyntaxGym circuits")
  ax.legend(fontsize="small", ncol=min(len(models), 4))
  ax.grid(axis="y", alpha=0.3)
  fig.tight_layout()
  path = pathlib.Path(path)
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def write_reports(results: dict, out_dir: str | pathlib.Path,
                  circuit_suites: dict[str, list[str]] | None = None) -> dict[str, pathlib.Path]:
  """Writes results.json, tables.md and sg_circuits.png (when SG ran) into `out_dir`."""
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  paths = {"json": out / "results.json", "markdown": out / "tables.md"}
  paths["json"].write_text(json.dumps(results, indent=1, default=_json_default) + "\n")
  paths["markdown"].write_text(markdown(results, circuit_suites))
  png = plot_sg_circuits(results, out / "sg_circuits.png")
  if png is not None:
    paths["png"] = png
  return paths


def _json_default(value: Any):
  import numpy as np
  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, (set, tuple)):
    return list(value)
  raise TypeError(f"not JSON serializable: {type(value).__name__}")
