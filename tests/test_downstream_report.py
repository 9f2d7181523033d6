"""Downstream report (paper Tables 4, 5, 10–11, 15/16 layouts) on hand-made results dicts: the AVG
and the seed SD by hand, numbers in the right rows and columns, missing tasks, the bootstrap of
identical models, the scorer adapter and the chart."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.downstream import report
from slm_jax.downstream.example import MC_TASKS
from slm_jax.downstream.scoring import summarize
from slm_jax.eval.bootstrap import paired_bootstrap

# Hand-picked S_term accuracies of the 11 tasks (MC_TASKS order): sum 598, AVG 598 / 11 = 54.3636.
TERMINAL = [60.0, 50.0, 70.0, 40.0, 45.0, 42.0, 55.0, 48.0, 70.0, 44.0, 74.0]
TREE = [62.0, 48.0, 66.0, 41.0, 44.0, 46.0, 57.0, 50.0, 68.0, 45.0, 72.0]  # sum 599 → 54.4545


def _entry(term: float, full: float) -> dict:
  return {"accuracy": term, "accuracy_full": full, "n": 100, "wrong_ties_nonfinite": 2,
          "correct": [], "correct_full": []}


def table_results() -> dict:
  """Three models; Pause-1 has no PIQA; XSum/BoolQ seeds by hand."""
  return {"conventions": {"dtype": "float32"}, "models": [
      {"name": "Terminal", "downstream": {
          "tree_source": None,
          "mc": {t: _entry(a, a - 1.0) for t, a in zip(MC_TASKS, TERMINAL)},
          # ravg 22.0, 22.1, 21.9: mean 22.00, SD sqrt((0 + .01 + .01) / 2) = 0.10
          "xsum": {"seeds": {"42": {"rouge1": 30.0, "rouge2": 10.0, "rougeL": 26.0, "ravg": 22.0},
                             "2026": {"rouge1": 30.3, "rouge2": 10.0, "rougeL": 26.0, "ravg": 22.1},
                             "6198": {"rouge1": 29.7, "rouge2": 10.0, "rougeL": 26.0,
                                      "ravg": 21.9}}},
          "boolq_ft": {"seeds": {"42": {"accuracy": 66.0}, "2026": {"accuracy": 68.0}}}}},
      {"name": "Tree", "downstream": {
          "tree_source": "parser",
          "mc": {t: _entry(a, a + 0.5) for t, a in zip(MC_TASKS, TREE)},
          "boolq_ft": {"seeds": {"42": {"accuracy": 66.7}}}}},
      {"name": "Pause-1", "downstream": {
          "mc": {t: _entry(50.0, 50.0) for t in MC_TASKS if t != "piqa"}}}]}


def _rows(markdown: str, heading: str) -> dict[str, list[str]]:
  """The rows of the first table after `heading`: first cell → the other cells (bold removed)."""
  lines = markdown[markdown.index(heading):].splitlines()
  start = next(i for i, l in enumerate(lines) if l.startswith("|"))
  table = []
  for line in lines[start:]:
    if not line.startswith("|"):
      break
    table.append([c.strip().replace("**", "") for c in line.strip("|").split("|")])
  return {r[0]: r[1:] for r in [table[0]] + table[2:]}


def test_average_and_seed_statistics_by_hand():
  results = table_results()
  terminal, tree, pause = results["models"]
  assert report.mc_average(terminal, MC_TASKS) == pytest.approx(598 / 11)
  assert report.mc_average(tree, MC_TASKS) == pytest.approx(599 / 11)
  assert report.mc_average(pause, MC_TASKS) is None  # no PIQA
  mean, sd, n = report.seed_stats(terminal["downstream"]["xsum"], "ravg")
  assert (mean, n) == (pytest.approx(22.0), 3) and sd == pytest.approx(0.1)
  mean, sd, n = report.seed_stats(terminal["downstream"]["boolq_ft"], "accuracy")
  assert mean == 67.0 and sd == pytest.approx(np.sqrt(2.0)) and n == 2  # ddof=1
  assert report.seed_stats(tree["downstream"]["boolq_ft"], "accuracy") == (66.7, None, 1)


def test_table5_rows_and_columns():
  md = report.markdown_section(table_results())
  rows = _rows(md, "paper Table 5 layout")
  header = rows["Model"]
  assert header == [report.TASK_ABBREVIATIONS[t] + "↑" for t in MC_TASKS] + ["AVG↑"]
  assert rows["Terminal"] == [f"{a:.2f}" for a in TERMINAL] + ["54.36"]
  assert rows["Tree"] == [f"{a:.2f}" for a in TREE] + ["54.45"]
  assert rows["Pause-1"][header.index("PIQA↑")] == report.DASH
  assert rows["Pause-1"][-1] == report.DASH
  assert "Left out of AVG (it needs every task of the suite): Pause-1 (no PIQA)." in md
  assert "| **54.45** |" in md  # best AVG in bold
  assert "raw sum for WG, BQ" in md and "shots: 5 WG/HS/M/MMR/OBQA, 3 BQ/CSQA/SIQA" in md
  assert "tree source: Terminal: none, Tree: parser, Pause-1: none" in md


def test_table4_downstream_columns():
  md = report.markdown_section(table_results())
  rows = _rows(md, "paper Table 4 downstream columns")
  assert rows["Model"] == ["XSum R-AVG↑", "BoolQ (FT)↑", "MC AVG↑"]
  assert rows["Terminal"] == ["22.00 ± 0.10", "67.00 ± 1.41", "54.36"]
  assert rows["Tree"] == [report.DASH, "66.70 (n=1)", "54.45"]
  assert rows["Pause-1"] == [report.DASH, report.DASH, report.DASH]
  assert "| **67.00 ± 1.41** |" in md
  xsum = _rows(md, "XSum ROUGE")
  assert xsum["Terminal"] == ["30.00 ± 0.30", "10.00 ± 0.00", "26.00 ± 0.00", "22.00 ± 0.10"]


def test_full_versus_terminal_table():
  md = report.markdown_section(table_results())
  rows = _rows(md, "Full vs terminal scoring")
  assert rows["Task"][:6] == ["Terminal Full", "Terminal Term", "Terminal Δ", "Tree Full",
                              "Tree Term", "Tree Δ"]
  assert rows["WinoGrande"][:6] == ["59.00", "60.00", "+1.00", "62.50", "62.00", "-0.50"]
  assert rows["PIQA"][6:] == [report.DASH] * 3  # Pause-1 lacks PIQA
  assert rows["Macro average"][:3] == [f"{598 / 11 - 1:.2f}", "54.36", "+1.00"]
  counts = _rows(md, "Downstream items")
  assert counts["MMLU"] == ["100 (2)", "100 (2)", "100 (2)"]


def _items(rng, n, p):
  return (rng.random(n) < p).astype(int).tolist()


def bootstrap_results(identical: bool) -> dict:
  """Per-item 0/1 arrays: Tree equals Terminal when `identical`; MMLU with two subjects."""
  rng = np.random.default_rng(0)
  models = []
  for name in ("Terminal", "Tree", "Pause-1"):
    mc = {}
    for k, t in enumerate(("winogrande", "mmlu", "piqa")):
      if name == "Pause-1" and t == "piqa":
        continue
      n = 40
      groups = ["astronomy"] * 10 + ["philosophy"] * 30 if t == "mmlu" else None
      same = identical and name in ("Terminal", "Tree")  # the same items right and wrong
      draw = np.random.default_rng(100 + k) if same else rng
      correct, full = _items(draw, n, 0.6), _items(draw, n, 0.5)
      entry = {"n": n, "wrong_ties_nonfinite": 0, "correct": correct, "correct_full": full}
      for key, values in (("accuracy", correct), ("accuracy_full", full)):
        v = np.asarray(values, float)
        entry[key] = (100 * np.mean([v[:10].mean(), v[10:].mean()]) if groups
                      else 100 * v.mean())
      if groups:
        entry["groups"] = groups
        entry["subjects"] = {"astronomy": 100 * np.mean(correct[:10]),
                             "philosophy": 100 * np.mean(correct[10:])}
      mc[t] = entry
    models.append({"name": name, "downstream": {"mc": mc}})
  return {"models": models}


def test_bootstrap_of_identical_models():
  results = bootstrap_results(identical=True)
  boot = report.bootstrap_downstream(results, resamples=400, seed=2027)
  for task, b in boot["tasks"].items():
    pair = next(p for p in b["pairs"] if (p["a"], p["b"]) == ("Terminal", "Tree"))
    assert pair["delta"] == 0.0 and pair["ci"][0] <= 0.0 <= pair["ci"][1] and pair["p"] == 1.0
    assert b["models"]["Terminal"]["rank_first"] == b["models"]["Tree"]["rank_first"]
  macro = next(p for p in boot["macro"]["pairs"] if (p["a"], p["b"]) == ("Terminal", "Tree"))
  assert macro["ci"] == [0.0, 0.0] and macro["p"] == 1.0
  assert boot["macro"]["unit"] == "tasks" and boot["macro"]["examples"] == 3
  assert boot["macro"]["left_out"] == {"Pause-1": ["piqa"]}
  assert boot["tasks"]["piqa"]["left_out"] == ["Pause-1"]
  assert set(boot["tasks"]["winogrande"]["models"]) == {"Terminal", "Tree", "Pause-1"}
  vs = boot["macro_examples"]
  assert vs["reference"] == "Terminal" and vs["pairs"][0]["p"] == 1.0


def test_bootstrap_matches_the_library_and_the_headline():
  results = bootstrap_results(identical=False)
  boot = report.bootstrap_downstream(results, resamples=300, seed=7)
  mmlu = boot["tasks"]["mmlu"]
  assert mmlu["statistic"] == "group_mean"  # stratified by subject: the macro over subjects
  for m in results["models"]:
    entry = m["downstream"]["mc"]["mmlu"]
    assert mmlu["models"][m["name"]]["estimate"] == pytest.approx(entry["accuracy"])
  items = {m["name"]: m["downstream"]["mc"]["winogrande"]["correct"] for m in results["models"]}
  direct = paired_bootstrap(items, "mean", scale=100.0, resamples=300, seed=7).to_json()
  assert boot["tasks"]["winogrande"]["models"] == direct["models"]
  assert boot["tasks"]["winogrande"]["pairs"] == direct["pairs"]
  # Full vs term: the per-task Δ is the accuracy difference, the macro Δ their mean.
  fvt = boot["full_vs_term"]["Tree"]
  mc = results["models"][1]["downstream"]["mc"]
  for t, d in fvt["tasks"].items():
    assert d["delta"] == pytest.approx(mc[t]["accuracy"] - mc[t]["accuracy_full"])
    assert d["ci"][0] <= d["delta"] <= d["ci"][1]
  assert fvt["macro"]["delta"] == pytest.approx(np.mean([d["delta"]
                                                         for d in fvt["tasks"].values()]))
  assert set(boot["full_vs_term"]) == {"Terminal", "Tree"}  # Pause-1 lacks PIQA
  results["bootstrap_downstream"] = boot
  md = report.markdown_section(results)
  rows = _rows(md, "Downstream paired bootstrap")
  assert list(rows) == ["Task", "WG", "M", "PIQA", "AVG†"]
  assert rows["PIQA"][2] == report.DASH  # Pause-1 has no PIQA
  est = boot["tasks"]["mmlu"]["models"]["Tree"]
  assert rows["M"][1] == f"{est['estimate']:.2f} [{est['ci'][0]:.2f}, {est['ci'][1]:.2f}]"
  assert "Left out of AVG†: Pause-1 (no PIQA)." in md
  assert "Paired 95% bootstrap intervals for the macro Δ" in md
  assert "Δ vs. Terminal" in md and "B=300, seed 7" in md


def test_bootstrap_skips_tasks_scored_on_different_items():
  results = bootstrap_results(identical=False)
  results["models"][1]["downstream"]["mc"]["winogrande"]["correct"] = [1, 0, 1]
  boot = report.bootstrap_downstream(results, resamples=50)
  assert "winogrande" in boot["skipped"] and "winogrande" not in boot["tasks"]
  assert "macro_examples" not in boot  # needs every task of the suite


def test_mc_summary_maps_the_scorer_output():
  records = []
  for i, (group, correct, full) in enumerate([("a", 1, 0), ("b", 0, 0), ("b", 1, 1), ("b", 1, 0),
                                              ("b", 0, 1)]):
    records.append(dict(index=i, source=f"f:{i}", group=group, gold=0, prediction=0 if correct
                        else 1, correct=bool(correct), tie=i == 1, nonfinite=False,
                        prediction_full=0, correct_full=bool(full), shots=5, shots_dropped=0))
  records.append(dict(records[0], index=5, gold=-1))  # unlabeled: not scored
  entry = report.mc_summary(summarize("mmlu", records), records)
  assert entry["accuracy"] == pytest.approx(100 * (1.0 + 0.5) / 2)  # macro over subjects
  assert entry["accuracy_full"] == pytest.approx(100 * (0.0 + 0.5) / 2)
  assert entry["n"] == 5 and entry["wrong_ties_nonfinite"] == 1
  assert entry["correct"] == [1, 0, 1, 1, 0] and entry["groups"] == ["a", "b", "b", "b", "b"]
  assert entry["subjects"] == {"a": 100.0, "b": 50.0}
  plain = report.mc_summary(summarize("piqa", [dict(r, group="") for r in records]), records)
  assert plain["accuracy"] == pytest.approx(60.0) and "groups" not in plain


def test_plot_is_written(tmp_path):
  path = report.plot_downstream(table_results(), tmp_path / "downstream.png")
  assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert report.plot_downstream({"models": [{"name": "x", "sg": {}}]}, tmp_path / "n.png") is None
  assert report.markdown_section({"models": [{"name": "x", "sg": {}}]}) == ""
