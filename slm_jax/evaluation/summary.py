"""What `results.json` records besides the scores: the conventions under every table, SG in the
report's layout, the paired bootstrap of the syntactic tasks, and the notes.

- `conventions(config)`: what produced the numbers (suites, item rule, tree scoring, beam, dtype,
  proposals, bootstrap), printed under every table (`eval.report`).
- `sg_summary(sg)`: `eval.syntaxgym`'s result as percentages in the report's layout.
- `bootstrap_all(names, arrays, resamples, seed)`: the paired bootstrap per task (SG, BLiMP,
  doc-PPL) over the models that ran it, and the macro averages that resample tasks.
- `notes(config, data, results, beam_tasks)`: the report's notes.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from slm_jax.eval.bootstrap import SEED, macro_bootstrap, paired_bootstrap
from slm_jax.eval.proposals import ChainProposals, FallbackProposals
from slm_jax.eval.sg_aggregate import ITEM_RULE
from slm_jax.evaluation.config import TASKS, EvaluationConfig
from slm_jax.evaluation.sources import is_parser


def log(message: str) -> None:
  print(f"[evaluate] {message}", file=sys.stderr, flush=True)


def conventions(config: EvaluationConfig) -> dict[str, Any]:
  """What produced the numbers: printed under every table (`report`)."""
  syntactic = config.syntactic
  out = {"protocol": config.protocol or "flags (spec defaults)", "dtype": config.run.dtype,
         "tree_scoring": syntactic.tree_scoring}
  if "sg" in config.tasks:
    out.update(sg_suites=syntactic.sg_suites, sg_item_rule=ITEM_RULE,
               sg_headline="mean of 6 circuits pooled over items")
  if "blimp" in config.tasks:
    out.update(blimp_proposals=syntactic.blimp_proposals, proposals_K=syntactic.proposals)
  if "docppl" in config.tasks:
    out.update(docppl_proposals=syntactic.docppl_proposals or "auto",
               proposals_K=syntactic.proposals)
  beam_used = "sg" in config.tasks or "beam" in (syntactic.blimp_proposals,
                                                 syntactic.docppl_proposals)
  if beam_used:
    out.update(beam_search=f"b={syntactic.beam}, sub-beam={syntactic.sub_beam or syntactic.beam}, "
               f"fast track={syntactic.fast_track}, "
               f"cap=max({syntactic.max_len_factor:g}L, {syntactic.min_len})",
               beam_cnt2="scored where a target" if syntactic.beam_score_cnt2 else
               "never scored (paper code)")
  if "mc" in config.tasks:
    out.update(downstream_mc_format=config.downstream.mc_format)
  out.update(bootstrap=f"B={config.run.bootstrap_resamples}, seed={config.run.bootstrap_seed}")
  return out


def sg_summary(sg: dict) -> dict:
  """Percentages in the report's layout (see slm_jax.eval.report), the raw result kept."""
  pct = lambda v: None if v is None else 100.0 * float(v)
  return {"score": pct(sg["sg"]), "suite_mean": pct(sg["suite_mean"]),
          "suite_set": sg["suite_set"], "suite_count": sg["suite_count"],
          "item_rule": sg["item_rule"],
          "circuits": {c: pct(v) for c, v in sg["circuits"].items()},
          "circuit_items": sg["circuit_items"],
          "circuits_by_suite": {c: pct(v) for c, v in sg["circuits_by_suite"].items()},
          "suites": {s: pct(r["accuracy"]) for s, r in sg["suites"].items()},
          "predictions": {s: [pct(p["accuracy"]) for p in r["predictions"]]
                          for s, r in sg["suites"].items()},
          "counts": sg.get("counts"), "raw": sg}


def bootstrap_all(names: list[str], arrays: list[dict], resamples: int,
                  seed: int = SEED) -> dict:
  """Paired bootstrap per task over the models that ran it (shared resample indices), and the
  macro averages that resample tasks: BLiMP over its paradigms, SG over its six circuits, and
  SG + BLiMP when both ran (paper Table 10's AVG row)."""
  out = {}
  options = dict(resamples=resamples, seed=seed)
  for task in TASKS:
    have = [(n, a[task]) for n, a in zip(names, arrays) if task in a]
    if not have:
      continue
    if task == "blimp":
      res = paired_bootstrap({n: v for n, v in have}, "mean", scale=100.0, **options)
    elif task == "sg":
      groups = have[0][1][1]
      if any(len(g) != len(groups) or (g != groups).any() for _, (_, g) in have):
        log("  SG bootstrap skipped: models were evaluated on different items")
        continue
      if len(groups) == 0:
        continue
      res = paired_bootstrap({n: v for n, (v, _) in have}, "group_mean", groups=groups,
                             scale=100.0, **options)
    else:
      res = paired_bootstrap({n: lp for n, (lp, _) in have}, "ppl",
                             denominators={n: m for n, (_, m) in have}, **options)
    out[task] = res.to_json()
  for key, task in (("blimp_paradigms", "blimp_macro"), ("sg_circuits", "sg_macro")):
    have = [(n, a[key]) for n, a in zip(names, arrays) if key in a]
    tasks = sorted(set.intersection(*[set(t) for _, t in have])) if have else []
    if len(tasks) >= 2:
      scale = 1.0 if key == "blimp_paradigms" else 100.0
      out[task] = macro_bootstrap({n: [scale * t[k] for k in tasks] for n, t in have},
                                  **options).to_json() | {"tasks": tasks}
  both = [(n, a) for n, a in zip(names, arrays) if "sg_circuits" in a and "blimp" in a]
  if both and "sg" in out and "blimp" in out:
    scores = {n: [out["sg"]["models"][n]["estimate"], out["blimp"]["models"][n]["estimate"]]
              for n, _ in both if n in out["sg"]["models"]}
    if scores:
      out["macro"] = macro_bootstrap(scores, **options).to_json() | {"tasks": ["SG", "BLiMP"]}
  return out


def notes(config: EvaluationConfig, data: dict, results: dict,
          beam_tasks: Sequence[str]) -> list[str]:
  """The report's notes: proposal fallbacks (shared and per-run beam sources), the SG headline
  rule and later predictions, BLiMP ties and non-finite pairs, `--max_items` subsets."""
  out: list[str] = []
  names = [m["name"] for m in results["models"]]
  for task, key in (("BLiMP", "blimp_proposals"), ("Doc-PPL", "docppl_proposals")):
    source = data.get(key)
    if isinstance(source, ChainProposals) and sum(source.stats.values()):
      out.append(f"{task} proposals (auto, SPEC §9), sentences per source (all models): " +
                 ", ".join(f"{name} {source.stats.get(name, 0)}" for name, _ in source.named) +
                 " (grammar: the embedded grammar's exact posterior; parser: K samples of the "
                 "shipped parser; flat: one (S …) tree, where neither gave a tree).")
  fallback = getattr(data.get("blimp_proposals"), "stats", None)
  if isinstance(data.get("blimp_proposals"), FallbackProposals) and fallback.get("fallback"):
    why = ("longer than the parser's limit" if is_parser(config.syntactic.blimp_proposals)
           else "words outside the embedded grammar")
    out.append(f"BLiMP: {fallback['fallback']} of {fallback['primary'] + fallback['fallback']} "
                 f"proposal requests fell back to a flat (S …) tree ({why}); those sentences are "
                 "not parser-marginalized. Pass --blimp-proposals=parser, beam or FILE.")
  doc_source = data.get("docppl_proposals")
  if isinstance(doc_source, FallbackProposals) and doc_source.stats.get("fallback"):
    out.append(f"Doc-PPL: {doc_source.stats['fallback']} proposal requests fell back to a "
                 "flat tree.")
  for task in beam_tasks:
    for name, entry in zip(names, results["models"]):
      source_stats = (entry[task]["stats"] if task == "blimp" else entry[task]).get(
          "proposal_source", {})
      if source_stats.get("fallback"):
        out.append(f"{'BLiMP' if task == 'blimp' else 'Doc-PPL'} ({name}): the beam completed "
                     f"no tree for {source_stats['fallback']} of {source_stats['sentences']} "
                     "sentences; those were scored on a flat (S …) tree.")
  if "sg" in config.tasks:
    out.append(f"SG↑ = mean of the six circuit accuracies, each pooled over the items of its "
                 f"suites ({config.syntactic.sg_suites}; paper Tables 13/14, SPEC §9); an item "
                 "is correct when the suite's first prediction holds; 'suite mean' = mean of the "
                 "suite accuracies (secondary).")
    later = sum(((e.get("sg") or {}).get("counts") or {}).get(
        "items_failing_a_later_prediction", 0) for e in results["models"])
    if later:
      out.append(f"SG: {later} correct items (all models) fail a later prediction of their "
                   "suite (reported per suite in results.json, not in the headline).")
  for name, entry in zip(names, results["models"]):
    stats = (entry.get("blimp") or {}).get("stats") or {}
    if stats.get("ties") or stats.get("nonfinite_pairs"):
      out.append(f"BLiMP ({name}): {stats.get('ties', 0)} tied and "
                   f"{stats.get('nonfinite_pairs', 0)} non-finite pairs, scored wrong.")
  if config.run.max_items is not None:
    out.append(f"--max_items={config.run.max_items}: subsets, not the full benchmarks.")
  return out
