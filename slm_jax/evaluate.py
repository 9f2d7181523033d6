"""Syntactic evaluation of trained runs: SyntaxGym, BLiMP, doc-PPL, paired bootstrap, reports.

  python -m slm_jax.evaluate --workdir=RUN [--workdir=RUN2 ...] --tasks=sg,blimp,docppl --out=DIR
      [--max-items=N] [--proposals=K] [--blimp-dir=DIR] [--syntaxgym-dir=DIR]
      [--docppl-ptb=PATH ...] [--docppl-proposals=grammar|gold|beam|FILE]
      [--blimp-proposals=grammar|flat|beam|FILE] [--beam=300] [--fast-track=30] [--max-context=N]
      [--sg-suites=a,b] [--docppl-documents=500] [--batch-size=32] [--bootstrap-resamples=10000]

Each run is loaded with `slm_jax.train.loading.load_run` (its config, tokenizer and newest
checkpoint) and scored by `slm_jax.eval.scorer.Scorer`. Writes `DIR/results.json`, `DIR/tables.md`
(paper Tables 4/6/13 layouts) and `DIR/sg_circuits.png` (when SG ran).

Data: `--blimp-dir` / `--syntaxgym-dir` default to `../shared/data/{blimp,syntaxgym/json}` next to
the repository (or `$SLM_JAX_SHARED_DATA`). Doc-PPL uses the embedded treebank's test split
(`--docppl-documents`, default 500 or `--max-items`; the first run's `data.embedded_seed`) with
`GrammarPosterior` proposals (K = `--proposals`, exact posterior samples, distinct), or PTB files
(`--docppl-ptb`, one document per file) with gold trees or a proposals file. BLiMP proposals
default to the grammar posterior, falling back to one flat `(S …)` tree for sentences the embedded
grammar does not cover (every real BLiMP sentence, in practice; the count is reported) — pass a
parser's K-best file (`--blimp-proposals=FILE`, format in `slm_jax.eval.proposals`) for a faithful
evaluation. `beam` (BLiMP and doc-PPL) uses each tree model's own word-synchronous beam search
(`--beam`, `--fast-track`; cap max(6L, 10)) as its parser: the top K completed hypotheses of every
sentence, and one flat `(S …)` tree where the beam completes nothing (counted). It needs a
one-to-one linearization (tree, tgtree, tg, …); tree_noont / tree_compress runs are refused
before anything is scored (give them a proposals FILE).

`--max-items=N` caps SG items per suite, BLiMP pairs per paradigm and (unless
`--docppl-documents` is given) doc-PPL documents.
`--max-context` caps doc-PPL scored sequences (tokens; default: the run's training `seq_len`,
0 = unlimited): older history sentences are dropped and counted.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from typing import Any, Sequence

import numpy as np

from slm_jax.eval import report
from slm_jax.eval.blimp import evaluate_blimp
from slm_jax.eval.bootstrap import paired_bootstrap
from slm_jax.eval.docppl import doc_ppl, is_tree_model
from slm_jax.eval.grammar_posterior import GrammarPosterior
from slm_jax.eval.proposals import (BeamProposals, FallbackProposals, FileProposals,
                                    FlatProposals, NoProposals, ProposalSource,
                                    check_beam_proposals)
from slm_jax.trees import Tree

TASKS = ("sg", "blimp", "docppl")
REPO = pathlib.Path(__file__).resolve().parents[1]


def shared_data_dir() -> pathlib.Path:
  env = os.environ.get("SLM_JAX_SHARED_DATA")
  return pathlib.Path(env) if env else REPO.parent / "shared" / "data"


class GoldProposals(ProposalSource):
  """The gold tree of each sentence of an evaluation corpus (K = 1)."""

  def __init__(self, documents: Sequence[Sequence[Tree]]):
    self.table = {tuple(t.leaves()): [t] for doc in documents for t in doc}

  def proposals(self, sentence_words):
    try:
      return self.table[tuple(sentence_words)]
    except KeyError:
      raise NoProposals(f"no gold tree for {' '.join(sentence_words)!r}") from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m slm_jax.evaluate", description=__doc__.split("\n")[0])
  p.add_argument("--workdir", action="append", required=True, help="a training workdir (repeat)")
  p.add_argument("--tasks", default="sg,blimp,docppl", help="comma-separated: sg, blimp, docppl")
  p.add_argument("--out", required=True, help="output folder")
  p.add_argument("--max-items", type=int, default=None,
                 help="cap: SG items per suite, BLiMP pairs per paradigm, doc-PPL documents")
  p.add_argument("--proposals", type=int, default=300, help="K proposal trees per sentence")
  p.add_argument("--blimp-dir", default=None)
  p.add_argument("--syntaxgym-dir", default=None)
  p.add_argument("--blimp-proposals", default="grammar",
                 help="grammar | flat | beam (the tree model's own beam search, per run; "
                 "--beam/--fast-track, K = --proposals) | FILE")
  p.add_argument("--docppl-ptb", action="append", default=None,
                 help="PTB file or folder (one document per file) instead of the embedded test")
  p.add_argument("--docppl-proposals", default=None,
                 help="grammar | gold | beam | FILE (default: grammar; gold with --docppl-ptb)")
  p.add_argument("--docppl-documents", type=int, default=None,
                 help="doc-PPL documents (default: 500, or --max-items when given)")
  p.add_argument("--max-context", type=int, default=None,
                 help="doc-PPL sequence cap in tokens (default: training seq_len; 0 = none)")
  p.add_argument("--sg-suites", default=None, help="comma-separated SG suites (default: all)")
  p.add_argument("--beam", type=int, default=300,
                 help="beam size of SG and of beam proposals (tree models)")
  p.add_argument("--fast-track", type=int, default=30,
                 help="fast-track size of SG and of beam proposals (tree models)")
  p.add_argument("--batch-size", type=int, default=32, help="scorer batch size")
  p.add_argument("--seed", type=int, default=0, help="proposal sampling seed")
  p.add_argument("--bootstrap-resamples", type=int, default=10_000)
  args = p.parse_args(argv)
  args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
  unknown = [t for t in args.tasks if t not in TASKS]
  if unknown:
    p.error(f"unknown task(s) {', '.join(unknown)}; expected {', '.join(TASKS)}")
  return args


def _log(message: str) -> None:
  print(f"[evaluate] {message}", file=sys.stderr, flush=True)


def _syntaxgym_dir(arg: str | None) -> pathlib.Path:
  path = pathlib.Path(arg) if arg else shared_data_dir() / "syntaxgym"
  if (path / "json").is_dir():
    path = path / "json"
  if not path.is_dir():
    raise FileNotFoundError(f"SyntaxGym suites not found at {path} (pass --syntaxgym-dir)")
  return path


def _blimp_proposals(arg: str, k: int, seed: int) -> ProposalSource | None:
  """The BLiMP source shared by all runs; None for `beam` (built per run by `_beam_source`)."""
  if arg == "beam":
    return None
  if arg == "flat":
    return FlatProposals()
  if arg == "grammar":
    return FallbackProposals(GrammarPosterior(k=k, seed=seed), FlatProposals())
  return FileProposals(arg, k=k)


def _docppl_data(args, first_cfg) -> tuple[list[list[Tree]], ProposalSource | None, dict]:
  limit = args.docppl_documents or args.max_items or 500
  if args.docppl_ptb:
    from slm_jax.ptb import read_documents
    documents = read_documents(args.docppl_ptb)[:limit]
    source_kind = args.docppl_proposals or "gold"
    info = {"corpus": "PTB " + " ".join(str(p) for p in args.docppl_ptb)}
  else:
    from slm_jax.corpus.treebank import embedded_corpus
    seed = int(first_cfg.data.embedded_seed)
    documents = embedded_corpus("test", limit, seed)
    source_kind = args.docppl_proposals or "grammar"
    info = {"corpus": f"embedded test split (seed {seed})"}
  if source_kind == "beam":
    source: ProposalSource | None = None  # per run: `_beam_source`
  elif source_kind == "gold":
    source = GoldProposals(documents)
  elif source_kind == "grammar":
    source = FallbackProposals(GrammarPosterior(k=args.proposals, seed=args.seed), FlatProposals())
  else:
    source = FileProposals(source_kind, k=args.proposals)
  info.update(documents=len(documents), proposals=source_kind)
  return documents, source, info


def _beam_source(run, scorer, args) -> ProposalSource | None:
  """This run's beam proposals (flat tree where the beam completes nothing); None for terminal
  models, which need no proposals."""
  if not is_tree_model(run.configuration):
    return None
  beam = BeamProposals.for_model(scorer, run.tokenizer, run.configuration, k=args.proposals,
                                 beam=args.beam, fast_track=args.fast_track)
  return FallbackProposals(beam, FlatProposals())


def _source_stats(source: ProposalSource | None) -> dict:
  """A source's counters (a fallback's merged with its primary's)."""
  stats = dict(getattr(source, "stats", None) or {})
  if isinstance(source, FallbackProposals):
    stats.update(getattr(source.primary, "stats", None) or {})
  return stats


def _check_beam_runs(workdirs: Sequence[str]) -> None:
  """Refuses, before any scoring, runs whose linearization beam proposals cannot invert."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  for workdir in workdirs:
    _, conf = run_config(workdir)
    if is_tree_model(conf):
      try:
        check_beam_proposals(conf)
      except ValueError as e:
        raise ValueError(f"{workdir}: {e}") from None


def _sg_summary(sg: dict) -> dict:
  """Percentages in the report's layout (see slm_jax.eval.report), the raw result kept."""
  pct = lambda v: None if v is None else 100.0 * float(v)
  return {"score": pct(sg.get("sg_31")), "score_paper": pct(sg.get("sg_paper")),
          "circuits": {c: pct(v) for c, v in sg.get("circuits_by_items", {}).items()},
          "circuits_by_suite": {c: pct(v) for c, v in sg.get("circuits", {}).items()},
          "suites": {s: pct(r["accuracy"]) for s, r in sg["suites"].items()},
          "counts": sg.get("counts"), "raw": sg}


def evaluate_run(workdir: str, args, data: dict) -> tuple[dict, dict]:
  """(JSON entry, per-example arrays for the bootstrap) of one run."""
  from slm_jax.eval.scorer import Scorer
  from slm_jax.train.loading import load_run
  run = load_run(workdir)
  conf = run.configuration
  scorer = Scorer(run.model, run.tokenizer, conf, batch_size=args.batch_size)
  entry: dict[str, Any] = {"workdir": str(workdir), "configuration": conf.name,
                           "linearization": conf.linearization, "attention": conf.attention.name,
                           "step": int(run.step), "timing_s": {}}
  arrays: dict[str, Any] = {}
  _log(f"{workdir}: {conf.name} at step {run.step}")
  if "sg" in args.tasks:
    from slm_jax.eval.syntaxgym import evaluate_syntaxgym
    start = time.time()
    suites = args.sg_suites.split(",") if args.sg_suites else None
    sg = evaluate_syntaxgym(scorer, data["sg_dir"], max_items=args.max_items, suites=suites,
                            beam=args.beam, fast_track=args.fast_track)
    entry["sg"] = _sg_summary(sg)
    entry["timing_s"]["sg"] = round(time.time() - start, 2)
    kept = [n for n in sg["suites"] if n not in _excluded_suites()]
    arrays["sg"] = (np.concatenate([np.asarray(sg["suites"][n]["item_correct"], float)
                                    for n in kept]),
                    np.concatenate([[n] * len(sg["suites"][n]["item_correct"]) for n in kept]))
    _log(f"  SG {entry['sg']['score']:.2f} ({entry['timing_s']['sg']} s)")
  beam_sources: list[ProposalSource | None] = []  # this run's beam source, built once

  def beam_source() -> ProposalSource | None:
    if not beam_sources:
      beam_sources.append(_beam_source(run, scorer, args))
    return beam_sources[0]

  if "blimp" in args.tasks:
    start = time.time()
    source = data["blimp_proposals"]
    if source is None:
      source = beam_source()
    before = _source_stats(source)
    result = evaluate_blimp(scorer, run.tokenizer, conf, data["blimp_dir"], source,
                            max_items=args.max_items)
    entry["blimp"] = result.summary()
    stats = _source_stats(source)
    if stats and result.stats.get("proposals"):
      entry["blimp"]["stats"]["proposal_source"] = {k: v - before.get(k, 0)
                                                    for k, v in stats.items()}
    entry["timing_s"]["blimp"] = round(time.time() - start, 2)
    arrays["blimp"] = result.correct.astype(float)
    _log(f"  BLiMP {result.overall:.2f} ({entry['timing_s']['blimp']} s)")
  if "docppl" in args.tasks:
    start = time.time()
    cap = args.max_context if args.max_context is not None else int(run.cfg.data.seq_len)
    source = data["docppl_proposals"]
    per_run = source is None
    if per_run:
      source = beam_source()
    before = _source_stats(source)
    result = doc_ppl(scorer, data["documents"], run.tokenizer, conf, source,
                     max_context=cap or None)
    entry["docppl"] = {**result.summary(), "max_context": cap or None}
    if per_run and source is not None:
      entry["docppl"]["proposal_source"] = {k: v - before.get(k, 0)
                                            for k, v in _source_stats(source).items()}
    entry["timing_s"]["docppl"] = round(time.time() - start, 2)
    arrays["docppl"] = (result.doc_log_prob, result.doc_tokens)
    _log(f"  Doc-PPL {result.ppl:.3f} ({entry['timing_s']['docppl']} s)")
  return entry, arrays


def _excluded_suites() -> tuple[str, ...]:
  from slm_jax.eval.syntaxgym import EXCLUDED_SUITES
  return EXCLUDED_SUITES


def bootstrap_all(names: list[str], arrays: list[dict], resamples: int) -> dict:
  """Paired bootstrap per task over the models that ran it (shared resample indices)."""
  out = {}
  for task in TASKS:
    have = [(n, a[task]) for n, a in zip(names, arrays) if task in a]
    if not have:
      continue
    if task == "blimp":
      res = paired_bootstrap({n: v for n, v in have}, "mean", scale=100.0, resamples=resamples)
    elif task == "sg":
      groups = have[0][1][1]
      if any(len(g) != len(groups) or (g != groups).any() for _, (_, g) in have):
        _log("  SG bootstrap skipped: models were evaluated on different items")
        continue
      res = paired_bootstrap({n: v for n, (v, _) in have}, "group_mean", groups=groups,
                             scale=100.0, resamples=resamples)
    else:
      res = paired_bootstrap({n: lp for n, (lp, _) in have}, "ppl",
                             denominators={n: m for n, (_, m) in have}, resamples=resamples)
    out[task] = res.to_json()
  return out


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  started = time.time()
  from slm_jax.train.loading import run_config  # fails early on a broken install
  import json
  first_cfg, _ = run_config(args.workdir[0])
  data: dict[str, Any] = {}
  settings: dict[str, Any] = {"tasks": ",".join(args.tasks), "max_items": args.max_items,
                              "proposals_K": args.proposals}
  notes: list[str] = []
  beam_tasks = [t for t, arg in (("blimp", args.blimp_proposals), ("docppl", args.docppl_proposals))
                if t in args.tasks and arg == "beam"]
  if beam_tasks:
    _check_beam_runs(args.workdir)
    settings.update(beam=args.beam, fast_track=args.fast_track)
  if "sg" in args.tasks:
    data["sg_dir"] = _syntaxgym_dir(args.syntaxgym_dir)
    settings.update(sg_dir=str(data["sg_dir"]), beam=args.beam, fast_track=args.fast_track)
  if "blimp" in args.tasks:
    data["blimp_dir"] = pathlib.Path(args.blimp_dir) if args.blimp_dir else (
        shared_data_dir() / "blimp")
    data["blimp_proposals"] = _blimp_proposals(args.blimp_proposals, args.proposals, args.seed)
    settings.update(blimp_dir=str(data["blimp_dir"]), blimp_proposals=args.blimp_proposals)
  if "docppl" in args.tasks:
    data["documents"], data["docppl_proposals"], info = _docppl_data(args, first_cfg)
    settings.update({f"docppl_{k}": v for k, v in info.items()})
  entries, arrays = [], []
  for workdir in args.workdir:
    entry, arr = evaluate_run(workdir, args, data)
    entries.append(entry)
    arrays.append(arr)
  names = report.display_names([e["configuration"] for e in entries], args.workdir)
  for name, entry in zip(names, entries):
    entry["name"] = name
  results = {"settings": settings, "models": [{"name": e.pop("name"), **e} for e in entries]}
  results["bootstrap"] = bootstrap_all(names, arrays, args.bootstrap_resamples)
  fallback = getattr(data.get("blimp_proposals"), "stats", None)
  if fallback and fallback.get("fallback"):
    notes.append(f"BLiMP: {fallback['fallback']} of {sum(fallback.values())} proposal requests "
                 "fell back to a flat (S …) tree (words outside the embedded grammar); tree-model "
                 "BLiMP scores are not parser-marginalized. Pass --blimp-proposals=FILE (or "
                 "beam).")
  doc_source = data.get("docppl_proposals")
  if isinstance(doc_source, FallbackProposals) and doc_source.stats.get("fallback"):
    notes.append(f"Doc-PPL: {doc_source.stats['fallback']} proposal requests fell back to a "
                 "flat tree.")
  for task in beam_tasks:
    for name, entry in zip(names, results["models"]):
      source_stats = (entry[task]["stats"] if task == "blimp" else entry[task]).get(
          "proposal_source", {})
      if source_stats.get("fallback"):
        notes.append(f"{'BLiMP' if task == 'blimp' else 'Doc-PPL'} ({name}): the beam completed "
                     f"no tree for {source_stats['fallback']} of {source_stats['sentences']} "
                     "sentences; those were scored on a flat (S …) tree.")
  if "sg" in args.tasks:
    notes.append("SG↑ = mean accuracy of the 31 suites (SPEC §9); circuit columns and SG(paper) "
                 "use item-level circuit accuracies (paper Tables 13/14 convention).")
  if args.max_items is not None:
    notes.append(f"--max-items={args.max_items}: subsets, not the full benchmarks.")
  results["notes"] = notes
  results["settings"]["wall_s"] = round(time.time() - started, 1)
  circuit_suites = None
  if "sg_dir" in data:
    circuits = data["sg_dir"].parent / "circuits.json"
    if circuits.is_file():
      circuit_suites = json.loads(circuits.read_text())["circuit_suites"]
  paths = report.write_reports(results, args.out, circuit_suites)
  for kind, path in paths.items():
    _log(f"wrote {kind}: {path}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
