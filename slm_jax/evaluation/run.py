"""One evaluation of trained runs: what `python -m slm_jax.evaluate` runs (its flags: `args`).

`evaluate(args)`: the inputs checked before anything is scored (`evaluation.inputs`), the task
data and proposal sources built once (`evaluation.sources`), then per run (`evaluate_run`: each
`--workdir`, then each `--checkpoint`, a pretrained checkpoint loaded by
`evaluation.checkpoints` and scored as raw text, SPEC §13) its scorer from the one dispatch point (`downstream.protocol`: the SLM configurations' `Scorer`, or
the Pushdown reference's), SyntaxGym, BLiMP and doc-PPL (`slm_jax.eval`) and the downstream tasks
(`evaluate_downstream` → `downstream.run`); after every run the finished ones are kept in
`OUT/results.partial.json` (written atomically; a rerun reuses a run whose identity — path, step
and content digest, `evaluation.resume` — and settings are the saved ones), and so are the
finished SG suites and BLiMP paradigms of the run in flight (`eval.sg_partial`: a killed
evaluation resumes without redoing them, with a progress line); one evaluation
writes into an `OUT` at a time (`slm_jax.locks`: a second is refused naming the first's pid);
then the paired bootstrap, conventions and notes (`evaluation.summary`) and the reports
(`eval.report.write_reports`: results.json, tables.md, charts; the downstream tables and chart
from `downstream.report`).
"""

from __future__ import annotations

import functools
import json
import pathlib
import time
from typing import Any

import numpy as np

from slm_jax import cli, locks
from slm_jax.downstream.protocol import protocol
from slm_jax.eval import report
from slm_jax.eval.blimp import evaluate_blimp, load_blimp
from slm_jax.eval.docppl import doc_ppl
from slm_jax.eval.proposals import ProposalSource
from slm_jax.eval.raw_docppl import raw_doc_ppl
from slm_jax.eval.raw_text import RawTextScorer, evaluate_blimp_raw, region_units
from slm_jax.eval.sg_partial import InFlight, SuitesInFlight
from slm_jax.evaluation.checkpoints import load_checkpoint_run
from slm_jax.evaluation.inputs import (DOWNSTREAM_TASKS, check_beam_runs, check_file_coverage,
                                       check_inputs, syntaxgym_dir)
from slm_jax.evaluation.resume import FinishedRuns, model_key
from slm_jax.evaluation.sources import (beam_options, beam_source, blimp_source, docppl_data,
                                        search_options, source_stats)
from slm_jax.evaluation.summary import bootstrap_all, conventions, log, notes, sg_summary


def evaluate(args) -> dict[str, pathlib.Path]:
  """The whole evaluation of `args` (module docstring); returns the files written
  (`eval.report.write_reports`: kind → path)."""
  started = time.time()
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  if beam_tasks(args):
    check_beam_runs(args.workdir)  # a linearization beam proposals cannot invert: say so first
  check_inputs(args)  # then every input, before anything is scored
  with locks.writer_lock(args.out, what="evaluation"):  # one evaluation per --out
    return _evaluate(args, started)


def _evaluate(args, started: float) -> dict[str, pathlib.Path]:
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  first_cfg = run_config(args.workdir[0])[0] if args.workdir else None
  data, settings = task_data(args, first_cfg)
  check_file_coverage(args, data)
  partial = pathlib.Path(args.out) / "results.partial.json"
  finished = FinishedRuns(partial, settings)  # runs a killed evaluation finished: reused
  if finished.note:
    log(finished.note)
  entries, arrays = [], []
  runs = ([(path, index, False) for index, path in enumerate(args.workdir)]
          + [(path, index, True) for index, path in enumerate(args.checkpoint)])
  for path, index, checkpoint in runs:
    key = model_key(path)  # path, step, content digest: another model there is another key
    reused = finished.take(key)
    if reused is None:
      entry, arr = evaluate_run(path, args, data, index, checkpoint=checkpoint, key=key)
    else:
      entry, arr = reused
      log(f"{path}: step {key['step']} finished before (content digest {key['digest']}): "
          f"reused from {partial}")
    entries.append(entry)
    arrays.append(arr)
    # What is done so far survives a later run's failure (removed once results.json is written).
    finished.keep(entries, arrays)
  names = report.display_names([e["configuration"] for e in entries],
                               [*args.workdir, *args.checkpoint])
  for name, entry in zip(names, entries):
    entry["name"] = name
  results = {"settings": settings, "conventions": conventions(args),
             "models": [{"name": e.pop("name"), **e} for e in entries]}
  results["bootstrap"] = bootstrap_all(names, arrays, args.bootstrap_resamples,
                                       args.bootstrap_seed)
  if any(t in args.tasks for t in DOWNSTREAM_TASKS):
    from slm_jax.downstream import report as downstream_report  # pylint: disable=g-import-not-at-top
    results["bootstrap_downstream"] = downstream_report.bootstrap_downstream(
        results, args.bootstrap_resamples, args.bootstrap_seed)
    extra = dict(sections=[downstream_report.markdown_section],
                 plots={"downstream_png": ("downstream.png", downstream_report.plot_downstream)})
  else:
    extra = {}
  results["notes"] = notes(args, data, results, beam_tasks(args))
  results["notes"] += [f"{m['name']}: {m['reference']}." for m in results["models"]
                       if "checkpoint" in m]
  results["settings"]["wall_s"] = round(time.time() - started, 1)
  circuit_suites = None
  if "sg_dir" in data:
    circuits = data["sg_dir"].parent / "circuits.json"
    if circuits.is_file():
      circuit_suites = json.loads(circuits.read_text())["circuit_suites"]
  paths = report.write_reports(results, args.out, circuit_suites, **extra)
  partial.unlink(missing_ok=True)
  return paths


def beam_tasks(args) -> list[str]:
  """The tasks whose proposals come from each run's own beam search (`--*_proposals=beam`)."""
  return [t for t, arg in (("blimp", args.blimp_proposals), ("docppl", args.docppl_proposals))
          if t in args.tasks and arg == "beam"]


def task_data(args, first_cfg) -> tuple[dict[str, Any], dict[str, Any]]:
  """(the data every run is scored on — suites folder, BLiMP pairs or folder, doc-PPL documents,
  shared proposal sources, downstream options and tree source —, the settings recorded in
  results.json); `first_cfg` is the first run's config (its embedded corpus seed)."""
  data: dict[str, Any] = {}
  settings: dict[str, Any] = {"tasks": ",".join(args.tasks), "max_items": args.max_items,
                              "proposals_K": args.proposals}
  if beam_tasks(args) or "sg" in args.tasks:
    settings.update(beam=args.beam, sub_beam=args.sub_beam or args.beam,
                    fast_track=args.fast_track, max_len_factor=args.max_len_factor,
                    min_len=args.min_len, beam_score_cnt2=args.beam_score_cnt2)
  settings.update(dtype=args.dtype, tree_scoring=args.tree_scoring,
                  bootstrap_seed=args.bootstrap_seed)
  if "sg" in args.tasks:
    data["sg_dir"] = syntaxgym_dir(args.syntaxgym_dir)
    settings.update(sg_dir=str(data["sg_dir"]), sg_suites=args.sg_suites)
  if "blimp" in args.tasks and args.data_source == "tfds":
    from slm_jax.eval.tfds_sets import blimp_pairs_from_tfds  # pylint: disable=g-import-not-at-top
    data["blimp_dir"] = None
    data["blimp_paradigms"] = blimp_pairs_from_tfds(args.tfds_dir, max_items=args.max_items)
    data["blimp_proposals"] = blimp_source(args.blimp_proposals, args.proposals, args.seed)
    settings.update(blimp_source=f"tfds {args.tfds_dir or '(default data_dir)'}",
                    blimp_proposals=args.blimp_proposals)
  elif "blimp" in args.tasks:
    data["blimp_dir"] = (pathlib.Path(args.blimp_dir) if args.blimp_dir
                         else cli.shared_data("blimp", "--blimp_dir"))
    data["blimp_proposals"] = blimp_source(args.blimp_proposals, args.proposals, args.seed)
    settings.update(blimp_dir=str(data["blimp_dir"]), blimp_proposals=args.blimp_proposals)
  if "docppl" in args.tasks:
    data["documents"], data["docppl_proposals"], info = docppl_data(args, first_cfg)
    settings.update({f"docppl_{k}": v for k, v in info.items()})
  if any(t in args.tasks for t in DOWNSTREAM_TASKS):
    from slm_jax.downstream.encoding import make_tree_source  # pylint: disable=g-import-not-at-top
    from slm_jax.downstream.run import DownstreamOptions  # pylint: disable=g-import-not-at-top
    data["downstream_options"] = DownstreamOptions(
        pathlib.Path(args.downstream_dir), tuple(args.mc_tasks), max_items=args.max_items,
        batch_size=args.batch_size, beam=args.gen_beam, max_tokens=args.gen_max_tokens,
        max_words=args.gen_max_words, mc_format=args.mc_format, olmes_regime=args.olmes_regime,
        articles_per_batch=args.articles_per_batch)
    data["tree_source"] = functools.cache(lambda: make_tree_source(args.tree_source))
    settings.update(downstream_dir=args.downstream_dir, tree_source=args.tree_source)
    if "mc" in args.tasks:
      settings.update(mc_tasks=",".join(args.mc_tasks), olmes_regime=args.olmes_regime)
    if "xsum" in args.tasks:
      settings.update(gen_beam=args.gen_beam, gen_max_tokens=args.gen_max_tokens,
                      gen_max_words=args.gen_max_words)
  return data, settings


def evaluate_run(workdir: str, args, data: dict, index: int = 0, *, checkpoint: bool = False,
                 key: dict | None = None) -> tuple[dict, dict]:
  """(JSON entry, per-example arrays for the bootstrap) of one run (the `index`-th --workdir),
  or (`checkpoint`) of the `index`-th pretrained checkpoint `workdir` (a folder or .gguf file).
  `key`: its identity (`evaluation.resume.model_key`, taken again when the newest checkpoint was
  unreadable and an older step is evaluated), the key of its in-flight SG suites and BLiMP
  paradigms and recorded in the entry."""
  from slm_jax.train.loading import load_run, source_digest  # pylint: disable=g-import-not-at-top
  if checkpoint:
    trained = load_checkpoint_run(workdir, dtype=args.dtype)
  else:
    trained = load_run(workdir, dtype=args.dtype)  # `trained`: its own configuration
  if key is None or key["step"] != int(trained.step):
    key = {"path": str(pathlib.Path(workdir).resolve()),
           "step": int(trained.step), "digest": source_digest(workdir, int(trained.step))[1]}
  reference = trained.configuration.reference  # "pushdown": the architectural reference, SPEC §14
  evaluation = protocol(trained.configuration)
  run, scorer = evaluation.evaluation_scorer(trained, batch_size=args.batch_size, beam=args.beam,
                                             sentences_per_batch=args.sentences_per_batch)
  raw = isinstance(scorer, RawTextScorer)  # a pretrained checkpoint: raw text (SPEC §13)
  conf = run.configuration
  entry: dict[str, Any] = {"checkpoint" if checkpoint else "workdir": str(workdir),
                           "configuration": conf.name,
                           "linearization": conf.linearization, "attention": conf.attention.name,
                           "step": int(run.step), "dtype": args.dtype, "identity": key,
                           "timing_s": {}}
  if raw:
    entry["reference"] = (f"pretrained checkpoint, prefix token {scorer.prefix_id}: "
                          f"{evaluation.note}")
  elif reference:
    entry["reference"] = f"{reference} (architectural reference, own protocol: SPEC §14)"
  arrays: dict[str, Any] = {}
  if run.skipped:
    entry["newest_checkpoint_step"] = int(run.newest_step)
    entry["skipped_checkpoints"] = [{"step": int(st), "reason": r} for st, r in run.skipped]
    log(f"warning: {workdir}: evaluating step {run.step}, not the newest checkpoint "
         f"({run.newest_step}): " + "; ".join(f"step {st} unreadable ({r})"
                                              for st, r in run.skipped))
  log(f"{workdir}: " + ("pretrained checkpoint, raw text" if raw else
                        f"{conf.name} at step {run.step}") + f" ({args.dtype})")
  if "sg" in args.tasks:
    from slm_jax.eval.sg_aggregate import circuit_labels
    from slm_jax.eval.syntaxgym import evaluate_syntaxgym
    start = time.time()
    kept = SuitesInFlight(pathlib.Path(args.out) / "results.partial.json", dict(
        model=key, dtype=args.dtype, max_items=args.max_items, sg_suites=args.sg_suites,
        tree_scoring=args.tree_scoring, sg_dir=str(data["sg_dir"]), **beam_options(args)))
    if kept.note:
      log(f"  {kept.note}")
    options = dict(split_region=region_units) if raw else search_options(args)
    sg = evaluate_syntaxgym(scorer.prefix_fn if raw else scorer, data["sg_dir"],
                            max_items=args.max_items, suites=args.sg_suites,
                            tree_scoring=args.tree_scoring,
                            progress=cli.Progress("  sg", unit="suites", every=0),
                            done=kept.done, on_suite=kept.keep, **options)
    entry["sg"] = sg_summary(sg)
    if raw:
      entry["sg"]["raw_text"] = dict(scorer.stats)
    entry["timing_s"]["sg"] = round(time.time() - start, 2)
    names = list(sg["suites"])
    labels = circuit_labels(names, [sg["suites"][n]["items"] for n in names])
    correct = np.concatenate([np.asarray(sg["suites"][n]["item_correct"], float)
                              for n in names] or [np.zeros(0)])
    arrays["sg"] = (correct[labels != ""], labels[labels != ""])  # the headline's items
    arrays["sg_circuits"] = {c: v for c, v in sg["circuits"].items() if v is not None}
    log(f"  SG {_pct(entry['sg']['score'])} (suite mean {_pct(entry['sg']['suite_mean'])}, "
         f"{sg['suite_set']}; {entry['timing_s']['sg']} s)")
  beam_sources: list[ProposalSource | None] = []  # this run's beam source, built once

  def own_beam_source() -> ProposalSource | None:
    if not beam_sources:
      beam_sources.append(beam_source(run, scorer, args))
    return beam_sources[0]

  if "blimp" in args.tasks:
    start = time.time()
    source = data["blimp_proposals"]
    if source is None and not raw:
      source = own_beam_source()
    before = source_stats(source)
    paradigms = blimp_paradigms(args, data)
    kept = InFlight(pathlib.Path(args.out) / "results.partial.json", dict(
        model=key, dtype=args.dtype, max_items=args.max_items, tree_scoring=args.tree_scoring,
        blimp=str(data.get("blimp_dir") or f"tfds {args.tfds_dir}"),
        proposals=args.blimp_proposals, proposals_K=args.proposals, seed=args.seed,
        **(beam_options(args) if args.blimp_proposals == "beam" else {})), task="blimp")
    if kept.note:
      log(f"  {kept.note}")
    progress = cli.Progress("  blimp", len(paradigms), unit="paradigms", every=0,
                            done=len(kept.done))

    def keep(uid: str, record: dict) -> None:
      kept.keep(uid, record)
      progress(len(kept.done))

    if raw:
      result = evaluate_blimp_raw(scorer, paradigms, done=kept.done, on_paradigm=keep)
    else:
      result = evaluate_blimp(scorer, run.tokenizer, conf, data["blimp_dir"], source,
                              max_items=args.max_items, tree_scoring=args.tree_scoring,
                              paradigms=paradigms, done=kept.done, on_paradigm=keep)
    entry["blimp"] = result.summary()
    stats = source_stats(source)
    if stats and result.stats.get("proposals") and not raw:
      entry["blimp"]["stats"]["proposal_source"] = {k: v - before.get(k, 0)
                                                    for k, v in stats.items()}
    entry["timing_s"]["blimp"] = round(time.time() - start, 2)
    arrays["blimp"] = result.correct.astype(float)
    arrays["blimp_paradigms"] = {u: p["accuracy"] for u, p in result.paradigms.items()}
    log(f"  BLiMP {result.overall:.2f} ({result.stats['ties']} ties, "
         f"{result.stats['nonfinite_pairs']} non-finite pairs; {entry['timing_s']['blimp']} s)")
  if "docppl" in args.tasks:
    start = time.time()
    cap = args.max_context if args.max_context is not None else int(run.cfg.data.seq_len)
    source = data["docppl_proposals"]
    per_run = source is None
    if per_run:
      source = own_beam_source()
    before = source_stats(source)
    if raw:  # the documents' text (SPEC §13), lm-eval's rolling log-likelihood
      result, measured = raw_doc_ppl(scorer, data["documents"], max_context=cap or None)
    else:
      result, measured = doc_ppl(scorer, data["documents"], run.tokenizer, conf, source,
                                 max_context=cap or None, tree_scoring=args.tree_scoring), {}
    entry["docppl"] = {**result.summary(), "max_context": cap or None, **measured}
    if source is not None and source_stats(source) and result.proposals:
      entry["docppl"]["proposal_source"] = {k: v - before.get(k, 0)
                                            for k, v in source_stats(source).items()}
    entry["timing_s"]["docppl"] = round(time.time() - start, 2)
    arrays["docppl"] = (result.doc_log_prob, result.doc_tokens)
    log(f"  Doc-PPL {result.ppl:.3f} ({entry['timing_s']['docppl']} s)")
  if any(t in args.tasks for t in DOWNSTREAM_TASKS):
    start = time.time()
    entry["downstream"] = evaluate_downstream(trained, args, data, index, checkpoint=checkpoint)
    entry["timing_s"]["downstream"] = round(time.time() - start, 2)
  return entry, arrays


def blimp_paradigms(args, data: dict) -> list:
  """BLiMP's paradigms (read once per evaluation: TFDS pairs, or `--blimp_dir`'s files)."""
  if data.get("blimp_paradigms") is None:
    data["blimp_paradigms"] = load_blimp(data["blimp_dir"], args.max_items)
  return data["blimp_paradigms"]


def _pct(value: float | None) -> str:
  return "–" if value is None else f"{value:.2f}"


def downstream_folder(args, index: int, checkpoint: bool = False) -> pathlib.Path:
  """Where the downstream results of the `index`-th --workdir (or `checkpoint`) are kept
  (resumable)."""
  if checkpoint:
    return (pathlib.Path(args.out) / "downstream"
            / f"checkpoint{index}_{pathlib.Path(args.checkpoint[index]).name}")
  return pathlib.Path(args.out) / "downstream" / f"{index}_{pathlib.Path(args.workdir[index]).name}"


def evaluate_downstream(run, args, data: dict, index: int, checkpoint: bool = False) -> dict:
  """The `downstream` entry of one run (`slm_jax.downstream.run`), the `index`-th --workdir or
  (`checkpoint`) --checkpoint (multiple choice only: XSum and BoolQ read fine-tuned runs)."""
  from slm_jax.downstream import run as downstream  # pylint: disable=g-import-not-at-top
  options = data["downstream_options"]
  folder = downstream_folder(args, index, checkpoint)
  # the paper format cuts WinoGrande / OpenBookQA on parses in every format, a terminal one's too
  # (`downstream.mc_joint`); a checkpoint's raw text reads none
  uses_trees = run.configuration.scheme.has_brackets or (
      options.mc_format == "paper" and "mc" in args.tasks and not checkpoint)
  source = data["tree_source"]() if uses_trees else None
  entry: dict[str, Any] = {"tree_source": args.tree_source if uses_trees else None,
                           "protocol": protocol(run.configuration).name}
  if "mc" in args.tasks:
    entry["mc"] = downstream.evaluate_mc(run, options, folder / "mc", source)
  if "xsum" in args.tasks:
    entry["xsum"] = downstream.evaluate_xsum(args.xsum_finetuned[index], options,
                                             folder / "xsum", source)
  if "boolq" in args.tasks:
    entry["boolq_ft"] = downstream.evaluate_boolq_finetuned(args.boolq_finetuned[index], options,
                                                            folder / "boolq", source)
  if source is not None and source.stats.get("fallback"):
    entry["tree_fallback"] = int(source.stats["fallback"])
  return entry
