"""Evaluation reports: `results.json`, Markdown tables in the paper's layouts, an SG bar chart.

`results` is the dict `slm_jax.evaluate` builds (and writes as JSON):

  {"settings": {...}, "conventions": {...},
   "models": [{"name", "configuration", "workdir", "step", "dtype",
               "sg": {"score" (headline), "suite_mean", "circuits" (pooled), "suites", ...},
               "blimp": {"overall", "fields", "terms", "paradigms", "stats", ...},
               "docppl": {"ppl", "tokens", ...}}, ...],   (each task: present when it ran)
   "bootstrap": {task: BootstrapResult.to_json()}}   (sg, blimp, docppl, *_macro, macro)

Tables (best value per column in bold, as in the paper), each followed by the conventions that
produced it (suites, item rule, CNT2 scoring in the beam, tree scoring, dtype, proposals, beam):
- Table 4 layout: one row per model, SG↑ BLiMP↑ Doc-PPL↓ (SG = the headline).
- Table 6 layout: BLiMP↑ SG↑, and BLiMP by phenomenon (linguistics term) and by field.
- Tables 13/14 layout: the six SG circuits (pooled over items), SG, and the suite mean; then a row
  per suite, with the accuracy of each later prediction beside it.
- Tables 10/11 layout: bootstrap estimates with 95% CIs per task and macro averages (those
  resample tasks), rank-first shares; paired differences with CIs and two-sided p.
"""

from __future__ import annotations

import io
import json
import pathlib
from typing import Any, Callable, Mapping, Sequence

from slm_jax import files
from slm_jax.tables import DASH, distinct_labels, interval, number, p_text, table
from slm_jax.tables import markdown as markdown_table

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
    "pushdown": "Pushdown (architectural reference)",  # SPEC §14, its own protocol
}


def display_names(configurations: Sequence[str], workdirs: Sequence[str]) -> list[str]:
  """Paper names (`Tree`, `TGTree`, …); runs sharing one are told apart by their paths
  (`tables.distinct_labels`: always distinct, also for two checkpoints of one file name)."""
  return distinct_labels([DISPLAY_NAMES.get(c, c) for c in configurations], workdirs)


def _get(model: dict, *path: str) -> float | None:
  node: Any = model
  for key in path:
    if not isinstance(node, dict) or key not in node:
      return None
    node = node[key]
  return None if node is None else float(node)


CONVENTION_KEYS = {  # which conventions a table depends on
    "main": ("protocol", "sg_suites", "sg_item_rule", "sg_headline", "tree_scoring",
             "beam_search", "beam_cnt2", "blimp_proposals", "docppl_proposals", "proposals_K",
             "dtype"),
    "sg": ("protocol", "sg_suites", "sg_item_rule", "sg_headline", "tree_scoring",
           "beam_search", "beam_cnt2", "dtype"),
    "blimp": ("protocol", "blimp_proposals", "proposals_K", "tree_scoring", "dtype"),
    "syntax": ("protocol", "sg_suites", "sg_item_rule", "tree_scoring", "beam_search",
               "beam_cnt2", "blimp_proposals", "proposals_K", "dtype"),
    "docppl": ("protocol", "docppl_proposals", "proposals_K", "tree_scoring", "dtype"),
    "bootstrap": ("protocol", "bootstrap", "sg_suites", "sg_item_rule", "tree_scoring",
                  "beam_cnt2", "dtype"),
}


def proposal_counts(results: dict, task: str) -> str:
  """How many sentences took each proposal source in `task` ("blimp" or "docppl"), per model
  that used proposals, e.g. `TGTree: grammar 12, parser 2668, flat 0` ("" when none recorded)."""
  parts = []
  for model in results.get("models", []):
    entry = model.get(task) or {}
    counts = (entry.get("stats") or {}).get("proposal_source") if task == "blimp" else (
        entry.get("proposal_source"))
    if counts:
      shown = ", ".join(f"{k} {v}" for k, v in counts.items()
                        if k in ("grammar", "parser", "flat", "primary", "fallback"))
      if shown:
        parts.append(f"{model.get('name', model.get('configuration'))}: {shown}")
  return " / ".join(parts)


def conventions_line(results: dict, table: str) -> str:
  """`_Conventions: key=value, …_` for one table (empty when nothing is recorded), with the
  sentences per proposal source of the tasks it shows (`proposal_counts`)."""
  conv = results.get("conventions") or {}
  parts = [f"{k}={conv[k]}" for k in CONVENTION_KEYS[table] if k in conv]
  for task in ("blimp", "docppl"):
    if f"{task}_proposals" in CONVENTION_KEYS[table]:
      counts = proposal_counts(results, task)
      if counts:
        parts.append(f"{task}_sources: {counts}")
  return f"_Conventions: {'; '.join(parts)}._" if parts else ""


def main_table(results: dict) -> str:
  """Table 4 layout: Model, SG↑ (headline), BLiMP↑, Doc-PPL↓."""
  rows = [[m["name"], _get(m, "sg", "score"), _get(m, "blimp", "overall"),
           _get(m, "docppl", "ppl")] for m in results["models"]]
  return table(["Model", "SG↑", "BLiMP↑", "Doc-PPL↓"], rows, [0, 2, 2, 3],
               [None, False, False, True])


def syntax_table(results: dict) -> str:
  """Table 6 layout: Model, BLiMP↑, SG↑."""
  rows = [[m["name"], _get(m, "blimp", "overall"), _get(m, "sg", "score")]
          for m in results["models"]]
  return table(["Model", "BLiMP↑", "SG↑"], rows, [0, 2, 2], [None, False, False])


def circuits_table(results: dict) -> str:
  """Tables 13/14 layout: Agr … LDD (each pooled over its items), SG↑ = their mean, and the
  mean of the suite accuracies (secondary)."""
  header = (["Model"] + [CIRCUIT_ABBREVIATIONS[c] + "↑" for c in CIRCUITS]
            + ["SG↑", "Suite mean↑"])
  rows = [[m["name"]] + [_get(m, "sg", "circuits", c) for c in CIRCUITS]
          + [_get(m, "sg", "score"), _get(m, "sg", "suite_mean")]
          for m in results["models"] if m.get("sg")]
  return table(header, rows, [0] + [2] * 8, [None] + [False] * 8)


def suites_table(results: dict, circuit_suites: dict[str, list[str]] | None = None) -> str:
  """A row per SG suite (circuit, suite), a column per model: the suite accuracy (the first
  prediction) and, after a slash, the accuracy of each later prediction."""
  models = [m for m in results["models"] if m.get("sg")]
  suites: list[tuple[str, str]] = []
  if circuit_suites:
    suites = [(CIRCUIT_ABBREVIATIONS.get(c, c), s) for c in CIRCUITS
              for s in circuit_suites.get(c, [])]
  known = {s for _, s in suites}
  for m in models:
    for s in m["sg"].get("suites", {}):
      if s not in known:
        suites.append(("(not in the 31)" if circuit_suites else "", s))
        known.add(s)
  ran = {s for m in models for s in m["sg"].get("suites", {})}
  suites = [(c, s) for c, s in suites if s in ran]

  def cell(m, s):
    value = _get(m, "sg", "suites", s)
    later = ((m["sg"].get("predictions") or {}).get(s) or [])[1:]
    text = number(value, 2)
    return text + "".join(f" / {number(v, 2)}" for v in later)

  rows = [[c, s] + [cell(m, s) for m in models] for c, s in suites]
  return markdown_table(["Circuit", "Suite"] + [m["name"] for m in models], rows,
                        right_align=True)


def blimp_breakdown(results: dict, key: str) -> str:
  """BLiMP accuracy per `fields` or `terms` (phenomena; rows) and model (columns)."""
  models = results["models"]
  names = sorted({k for m in models for k in ((m.get("blimp") or {}).get(key) or {})})
  rows = [[n] + [_get(m, "blimp", key, n) for m in models] for n in names]
  return table([key[:-1].capitalize()] + [m["name"] for m in models], rows,
               [0] + [2] * len(models), [None] * (1 + len(models)))


def blimp_counts_table(results: dict) -> str:
  """Pairs, ties and non-finite pairs (both scored wrong) per model."""
  rows = []
  for m in results["models"]:
    b = m.get("blimp")
    if b:
      stats = b.get("stats") or {}
      rows.append([m["name"], str(b.get("pairs")), str(stats.get("ties", 0)),
                   str(stats.get("nonfinite_pairs", 0))])
  return markdown_table(["Model", "Pairs", "Ties (wrong)", "Non-finite (wrong)"], rows,
                        right_align=True)


def docppl_table(results: dict) -> str:
  rows = []
  for m in results["models"]:
    d = m.get("docppl")
    if d:
      rows.append([m["name"], d.get("ppl"), str(d.get("tokens")), str(d.get("sentences")),
                   str(d.get("proposals")), str(d.get("distinct_candidates")),
                   str(d.get("duplicates_after_linearization")),
                   str(d.get("truncated_histories"))])
  return table(["Model", "Doc-PPL↓", "M (terminal+EOS)", "Sentences", "Proposals",
                "Distinct sequences", "Collapsed duplicates", "Truncated histories"], rows,
               [0, 3, 0, 0, 0, 0, 0, 0], [None, True] + [None] * 6)


BOOTSTRAP_ROWS = (  # results["bootstrap"] key -> row title (paper Table 10 order)
    ("sg", "SG"), ("blimp", "BLiMP"), ("docppl", "Doc-PPL"),
    ("sg_macro", "SG circuits AVG†"), ("blimp_macro", "BLiMP paradigms AVG†"),
    ("macro", "AVG (SG, BLiMP)†"))


def bootstrap_tables(results: dict) -> str:
  """Table 10 layout (estimates [95% CI], a row per task, a column per model), rank-first
  shares, and Table 11 layout (paired Δ [95% CI]; p, a column per pair)."""
  boots = results.get("bootstrap") or {}
  present = [(k, t) for k, t in BOOTSTRAP_ROWS if k in boots]
  if not present:
    return ""
  models = list(dict.fromkeys(m for k, _ in present for m in boots[k]["models"]))
  digits = lambda k: 3 if boots[k]["statistic"] == "ppl" else 2
  rows = [[title] + [interval(boots[k]["models"][m]["estimate"], boots[k]["models"][m]["ci"],
                              digits(k)) if m in boots[k]["models"] else DASH for m in models]
          for k, title in present]
  parts = [markdown_table(["Task"] + models, rows, right_align=True)]
  first = [[title] + [number(100 * boots[k]["models"][m]["rank_first"], 2)
                      if m in boots[k]["models"] and boots[k]["models"][m].get("rank_first")
                      is not None else DASH for m in models] for k, title in present]
  parts.append("Ranks first (% of resamples, ties split):\n\n"
               + markdown_table(["Task"] + models, first, right_align=True))
  pair_names = list(dict.fromkeys(f"{p['a']} − {p['b']}" for k, _ in present
                                  for p in boots[k]["pairs"]))
  if pair_names:
    rows = []
    for k, title in present:
      by_name = {f"{p['a']} − {p['b']}": p for p in boots[k]["pairs"]}
      rows.append([title] + [
          f"{interval(by_name[n]['delta'], by_name[n]['ci'], digits(k), True)}; "
          f"{p_text(by_name[n]['p'])}" if n in by_name else DASH for n in pair_names])
    parts.append(markdown_table(["Task"] + pair_names, rows, right_align=True))
  described = []
  for k, title in present:
    b = boots[k]
    unit = "tasks" if b.get("unit") == "tasks" else "examples"
    described.append(f"{title}: {b['examples']} {unit}, B={b['resamples']}, seed {b['seed']}")
  parts.append("; ".join(described) + ". † Macro averages resample tasks: they measure "
               "sensitivity to the task suite, not uncertainty within it.")
  return "\n\n".join(parts)


def markdown(results: dict, circuit_suites: dict[str, list[str]] | None = None,
             sections: Sequence[Callable[[dict], str]] = ()) -> str:
  """All tables as one Markdown document; `sections` render further parts (e.g. the downstream
  tables of `slm_jax.downstream.report`) before the notes."""
  s = results.get("settings", {})
  out = ["# Evaluation results", "",
         "Models: " + ", ".join(f"{m['name']} = `{m['workdir']}` (step {m.get('step')})"
                                if "workdir" in m else f"{m['name']} = `{m['checkpoint']}` "
                                "(pretrained checkpoint, raw text)"
                                for m in results["models"]), "",
         "Settings: " + ", ".join(f"{k}={v}" for k, v in s.items() if not isinstance(v, dict))]

  def section(title: str, table: str, kind: str) -> None:
    if table:
      out.extend(["", f"## {title}", "", table])
      line = conventions_line(results, kind)
      if line:
        out.extend(["", line])

  section("Main results (paper Table 4 layout)", main_table(results), "main")
  models = results["models"]
  if any(m.get("sg") or m.get("blimp") for m in models):
    section("Syntactic evaluation (paper Table 6 layout)", syntax_table(results), "syntax")
  if any(m.get("sg") for m in models):
    section("SG circuits (paper Tables 13/14 layout)", circuits_table(results), "sg")
    section("SG per suite (first prediction / later predictions)",
            suites_table(results, circuit_suites), "sg")
  if any(m.get("blimp") for m in models):
    section("BLiMP by phenomenon (paper Table 6 BLiMP, by linguistics term)",
            blimp_breakdown(results, "terms"), "blimp")
    section("BLiMP by field", blimp_breakdown(results, "fields"), "blimp")
    section("BLiMP pairs, ties and non-finite scores", blimp_counts_table(results), "blimp")
  if any(m.get("docppl") for m in models):
    section("Doc-PPL details", docppl_table(results), "docppl")
  if results.get("bootstrap"):
    section("Paired bootstrap (paper Tables 10/11 layout; Δ = first − second)",
            bootstrap_tables(results), "bootstrap")
  for render in sections:
    text = render(results)
    if text:
      out.extend(["", text.rstrip("\n")])
  notes = results.get("notes")
  if notes:
    out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
  return "\n".join(out) + "\n"


def grouped_bars(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]],
                 title: str, path: str | pathlib.Path, ylabel: str = "accuracy (%)"
                 ) -> pathlib.Path:
  """A grouped bar chart (PNG): one group per label (x), one bar per (name, values) series; a
  None value draws no bar. The one chart helper of the report PNGs."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  width = 0.8 / len(series)
  fig, ax = plt.subplots(figsize=(min(16.0, 4.0 + 0.3 * len(labels) * len(series)), 3.7))
  for k, (name, values) in enumerate(series):
    xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
    shown = [(x, v) for x, v in zip(xs, values) if v is not None]
    ax.bar([x for x, _ in shown], [v for _, v in shown], width, label=name)
  ax.set_xticks(range(len(labels)))
  ax.set_xticklabels(labels)
  ax.set_ylabel(ylabel)
  ax.set_ylim(0, 100)
  ax.set_title(title)
  ax.legend(fontsize="small", ncol=min(len(series), 5))
  ax.grid(axis="y", alpha=0.3)
  fig.tight_layout()
  image = io.BytesIO()
  try:
    fig.savefig(image, format="png", dpi=120)
  finally:
    plt.close(fig)
  return files.write_bytes(path, image.getvalue())  # atomic: a full disk leaves no cut PNG


def plot_sg_circuits(results: dict, path: str | pathlib.Path) -> pathlib.Path | None:
  """Grouped bar chart (PNG): SG accuracy per circuit (x) and model (bars); None without SG."""
  models = [m for m in results["models"] if m.get("sg")]
  if not models:
    return None
  labels = [CIRCUIT_ABBREVIATIONS[c] for c in CIRCUITS] + ["SG"]
  series = [(m["name"], [_get(m, "sg", "circuits", c) for c in CIRCUITS] + [_get(m, "sg", "score")])
            for m in models]
  return grouped_bars(labels, series, "SyntaxGym circuits (pooled over items) and the headline SG",
                      path)


def write_reports(results: dict, out_dir: str | pathlib.Path,
                  circuit_suites: dict[str, list[str]] | None = None,
                  sections: Sequence[Callable[[dict], str]] = (),
                  plots: Mapping[str, tuple[str, Callable]] | None = None
                  ) -> dict[str, pathlib.Path]:
  """Writes results.json, tables.md and sg_circuits.png (when SG ran) into `out_dir`; `sections`
  go into tables.md (see `markdown`), `plots` = {kind: (file name, fn(results, path))} are
  drawn beside (a fn returning None drew nothing)."""
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  paths = {"json": out / "results.json", "markdown": out / "tables.md"}
  write_json(results, paths["json"])
  files.write_text(paths["markdown"], markdown(results, circuit_suites, sections))
  png = plot_sg_circuits(results, out / "sg_circuits.png")
  if png is not None:
    paths["png"] = png
  for kind, (name, draw) in (plots or {}).items():
    drawn = draw(results, out / name)
    if drawn is not None:
      paths[kind] = pathlib.Path(drawn)
  return paths


def write_json(results: dict, path: pathlib.Path) -> None:
  """Strict JSON (no NaN / Infinity tokens, which most JSON readers reject): a non-finite
  number is written as null; the tables say "–" (`tables.DASH`) for it. Atomic (a temporary
  file renamed over `path`): a kill or a full disk leaves the old file, never a cut one."""
  text = json.dumps(_finite(results), indent=1, default=json_default, allow_nan=False) + "\n"
  files.write_text(path, text)  # names the file on failure, leaves no temporary


def _finite(value: Any) -> Any:
  import math
  import numpy as np
  if isinstance(value, dict):
    return {k: _finite(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_finite(v) for v in value]
  if isinstance(value, np.ndarray):
    return _finite(value.tolist())
  if isinstance(value, (float, np.floating)):
    return float(value) if math.isfinite(value) else None
  return value


def json_default(value: Any):
  """numpy scalars and arrays, sets and tuples as JSON values (`json.dumps(default=…)`)."""
  import numpy as np
  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, (set, tuple)):
    return list(value)
  raise TypeError(f"not JSON serializable: {type(value).__name__}")
