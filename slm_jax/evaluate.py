"""Evaluation of trained runs: SyntaxGym, BLiMP, doc-PPL, downstream tasks, paired bootstrap, reports.

  python -m slm_jax.evaluate --workdir=RUN [--workdir=RUN2 ...] --tasks=sg,blimp,docppl --out=DIR
  python -m slm_jax.evaluate --workdir=RUN ... --tasks=mc,xsum,boolq --downstream_dir=DIR
      [--mc_tasks=arc_easy,piqa,...] [--tree_source=parser|parser:DIR|flat|file:PATH]
      [--xsum_finetuned=OUT ...] [--boolq_finetuned=OUT ...] [--gen_beam=6]
      [--gen_max_tokens=150] [--gen_max_words=75] --out=DIR
      [--max_items=N] [--proposals=300] [--blimp_dir=DIR] [--syntaxgym_dir=DIR]
      [--docppl_ptb=PATH ...] [--docppl_proposals=grammar|gold|beam|parser[:DIR]|FILE]
      [--blimp_proposals=grammar|flat|beam|parser[:DIR]|FILE] [--sg_suites=hu31|paper32|a,b]
      [--beam=300] [--sub_beam=B] [--fast_track=30] [--max_len_factor=6] [--min_len=10]
      [--beam_score_cnt2=true|false] [--tree_scoring=joint|terminal] [--dtype=float32|bfloat16]
      [--max_context=N] [--docppl_documents=500] [--batch_size=32]
      [--bootstrap_resamples=10000] [--bootstrap_seed=2027] [--data_source=local|tfds]
      [--tfds_dir=DIR]

Each run is loaded with `slm_jax.train.loading.load_run` (its config, tokenizer and newest
checkpoint; the model built in `--dtype`, float32 by default as the paper evaluates) and scored by
`slm_jax.eval.scorer.Scorer`. Writes `DIR/results.json`, `DIR/tables.md` (paper Tables 4, 6,
10–11, 13/14 layouts, each with the conventions that produced it) and `DIR/sg_circuits.png`.

SG: Hu et al.'s 31 suites by default (`--sg_suites=paper32` keeps fgd-embed3/4 as the paper's
code does); an item is correct when the suite's first prediction holds; the headline SG is the
mean of the six circuits, each pooled over its items (`slm_jax.eval.sg_aggregate`). Tree models
get prefix probabilities from word-synchronous beam search (b = `--beam`, sub-beam, fast track,
cap max(factor·L, min)); `--beam_score_cnt2=false` leaves CNT2 unscored in the beam as the
paper's code does; `--tree_scoring=terminal` reads terminals' log-probs only (the best beam
hypothesis / best proposal; the paper's `tree_eval_type=terminal`). Pause models are scored on
every position; Tree-Shuffle on terminals.

Data: `--data_source=tfds` reads BLiMP from a prepared TFDS data_dir (`--tfds_dir`, the
`blimp/<UID>` builds; `slm_jax.eval.tfds_sets`); SyntaxGym is always local.
`--blimp_dir` / `--syntaxgym_dir` default to `../shared/data/{blimp,syntaxgym/json}` next to
the repository (or `$SLM_JAX_SHARED_DATA`). Doc-PPL uses the embedded treebank's test split
(`--docppl_documents`, default 500 or `--max_items`; the first run's `data.embedded_seed`) with
`GrammarPosterior` proposals (K = `--proposals`, exact posterior samples, distinct), or PTB files
(`--docppl_ptb`, one document per file) with gold trees or a proposals file. BLiMP proposals
default to the grammar posterior, falling back to one flat `(S …)` tree for sentences the embedded
grammar does not cover (every real BLiMP sentence, in practice; the count is reported) — pass a
parser's K-best file (`--blimp_proposals=FILE`, format in `slm_jax.eval.proposals`), or
`parser[:DIR]` — K distinct samples of slm_jax's own CRF parser (offline; the shipped GUM model by
default; too-long sentences fall back to a flat tree, counted) — for a faithful evaluation. `beam` (BLiMP and doc-PPL) uses each tree model's own word-synchronous beam search
as its parser: the top K completed hypotheses of every sentence, and one flat `(S …)` tree where
the beam completes nothing (counted). It needs a one-to-one linearization (tree, tgtree, tg, …);
tree_noont / tree_compress runs are refused before anything is scored (give them a FILE).

Downstream (SPEC §11, `slm_jax.downstream`): `mc` scores the 11 OLMES-style multiple-choice
tasks (or `--mc_tasks`) of `--downstream_dir` (one `<task>/` Hub download folder each,
docs/DOWNSTREAM_DATA.md) with their fixed shots, every text parsed by `--tree_source` and
linearized for tree models; resumable per task under `DIR/downstream/<model>/`. `xsum` / `boolq`
read the finished seeds of `python -m slm_jax.finetune` output folders, one `--xsum_finetuned` /
`--boolq_finetuned` per `--workdir` in the same order: XSum generates (beam `--gen_beam`,
word-synchronous for tree models) and reports ROUGE-1/2/L and R-AVG; BoolQ scores " yes" vs
" no". Tables 5, 4 (downstream columns), 15/16 and the downstream bootstrap (per task and macro,
tasks resampled) go into `tables.md`, with `downstream.png`. `--max_items` caps their items too.
The Pushdown reference (SPEC §14) runs every downstream task with its own protocol
(`slm_jax.downstream.protocol`): MC and BoolQ teacher-forced with the tree source's spans
supplied as its stack tape, XSum by a joint beam over summary tokens and attachment actions
(`--gen_beam`, `--gen_max_tokens`).

Flags are spelled with underscores (`--max_items`); the dashed spellings (`--max-items`) work
too (`slm_jax.cli`); `--help` shows every default. `--max_items=N` caps SG items per suite, BLiMP
pairs per paradigm and (unless `--docppl_documents` is given) doc-PPL documents.
`--max_context` caps doc-PPL scored sequences (tokens; default: the run's training `seq_len`,
0 = unlimited): older history sentences are dropped and counted. Bootstrap: B resamples, seed
2027 (paper Tables 10–11; 2026 for App. F); macro averages resample tasks.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time
from typing import Any, Sequence

import numpy as np

from slm_jax import cli
from slm_jax.downstream.example import MC_TASKS
from slm_jax.downstream.generate import BEAM as GEN_BEAM
from slm_jax.downstream.generate import MAX_TOKENS as GEN_MAX_TOKENS
from slm_jax.downstream.generate import MAX_WORDS as GEN_MAX_WORDS
from slm_jax.eval import report
from slm_jax.eval.beam import BEAM, FAST_TRACK, MAX_LEN_FACTOR, MIN_LEN
from slm_jax.eval.blimp import evaluate_blimp
from slm_jax.eval.bootstrap import RESAMPLES, SEED, macro_bootstrap, paired_bootstrap
from slm_jax.eval.docppl import TREE_SCORINGS, doc_ppl
from slm_jax.eval.grammar_posterior import GrammarPosterior
from slm_jax.eval.proposals import (BeamProposals, FallbackProposals, FileProposals,
                                    FlatProposals, NoProposals, ProposalSource,
                                    check_beam_proposals)
from slm_jax.eval.sg_aggregate import ITEM_RULE
from slm_jax.trees import Tree

TASKS = ("sg", "blimp", "docppl", "mc", "xsum", "boolq")
DOWNSTREAM_TASKS = ("mc", "xsum", "boolq")


class GoldProposals(ProposalSource):
  """The gold tree of each sentence of an evaluation corpus (K = 1)."""

  def __init__(self, documents: Sequence[Sequence[Tree]]):
    self.table = {tuple(t.leaves()): [t] for doc in documents for t in doc}

  def proposals(self, sentence_words):
    try:
      return self.table[tuple(sentence_words)]
    except KeyError:
      raise NoProposals(f"no gold tree for {' '.join(sentence_words)!r}") from None


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
  """The module docstring verbatim, and every flag's default in its help line (unless the help
  already says what an unset flag means)."""

  def _get_help_string(self, action):
    text = action.help or ""
    if "(default" in text or "None:" in text or action.required:
      return text
    return super()._get_help_string(action)


def parse_args(argv: Sequence[str] | None):
  p = cli.ArgumentParser(prog="python -m slm_jax.evaluate", description=__doc__.split("\n")[0],
                         formatter_class=_HelpFormatter)
  p.add_argument("--workdir", action="append", required=True, help="a training workdir (repeat)")
  p.add_argument("--tasks", default="sg,blimp,docppl",
                 help="comma-separated: sg, blimp, docppl, mc, xsum, boolq")
  p.add_argument("--out", required=True, help="output folder")
  p.add_argument("--max_items", type=int, default=None,
                 help="cap: SG items per suite, BLiMP pairs per paradigm, doc-PPL documents")
  p.add_argument("--proposals", type=int, default=300, help="K proposal trees per sentence")
  p.add_argument("--blimp_dir", default=None, help="BLiMP *.jsonl folder (shared data)")
  p.add_argument("--data_source", default="local", choices=("local", "tfds"),
                 help="where BLiMP is read: local jsonl files (--blimp_dir) or a prepared "
                 "TFDS data_dir (--tfds_dir; `blimp/<UID>` builds)")
  p.add_argument("--tfds_dir", default=None,
                 help="TFDS data_dir for --data_source=tfds (None: TFDS's default)")
  p.add_argument("--syntaxgym_dir", default=None, help="SyntaxGym suites folder (shared data)")
  p.add_argument("--blimp_proposals", default="grammar",
                 help="grammar | flat | beam (the tree model's own beam search, per run; "
                 "--beam/--fast_track, K = --proposals) | parser[:DIR] (slm_jax's own CRF "
                 "parser, K samples; DIR None: the shipped GUM model) | FILE")
  p.add_argument("--docppl_ptb", action="append", default=None,
                 help="PTB file or folder (one document per file) instead of the embedded test")
  p.add_argument("--docppl_proposals", default=None,
                 help="grammar | gold | beam | parser[:DIR] | FILE (None: grammar; gold with "
                 "--docppl_ptb)")
  p.add_argument("--docppl_documents", type=int, default=None,
                 help="doc-PPL documents (None: 500, or --max_items when given)")
  p.add_argument("--max_context", type=int, default=None,
                 help="doc-PPL sequence cap in tokens (None: training seq_len; 0 = none)")
  p.add_argument("--sg_suites", default="hu31",
                 help="hu31 (Hu et al.'s 31) | paper32 (+ fgd-embed3/4, as the paper's code) | "
                 "comma-separated suite names")
  p.add_argument("--beam", type=int, default=BEAM,
                 help="b: the word beam of SG and of beam proposals (tree models)")
  p.add_argument("--sub_beam", type=int, default=None,
                 help="candidates ranked per expansion round (None: = --beam)")
  p.add_argument("--fast_track", type=int, default=FAST_TRACK,
                 help="word hypotheses added to the sub-beam each round (union)")
  p.add_argument("--max_len_factor", type=float, default=MAX_LEN_FACTOR,
                 help="length cap max(factor·L, --min_len), L = terminal tokens")
  p.add_argument("--min_len", type=int, default=MIN_LEN, help="smallest length cap")
  p.add_argument("--beam_score_cnt2", type=cli.boolean, default=True,
                 help="score CNT2 inside the beam where it is a target (TGTree; false: the "
                 "paper's code, which never scores it)")
  p.add_argument("--tree_scoring", default="joint", choices=TREE_SCORINGS,
                 help="tree models: joint log-probs (marginals) or terminal (terminals' "
                 "log-probs only, the best hypothesis / candidate; paper tree_eval_type)")
  p.add_argument("--downstream_dir", default=None,
                 help="folder of <task>/ downstream data folders (mc, xsum, boolq)")
  p.add_argument("--mc_tasks", default=",".join(MC_TASKS),
                 help="comma-separated multiple-choice tasks of --tasks=mc")
  p.add_argument("--tree_source", default="parser",
                 help="trees of downstream texts for tree models: parser[:DIR] | flat | file:PATH")
  p.add_argument("--xsum_finetuned", action="append", default=None,
                 help="python -m slm_jax.finetune --task=xsum output folder (one per --workdir)")
  p.add_argument("--boolq_finetuned", action="append", default=None,
                 help="python -m slm_jax.finetune --task=boolq output folder (one per --workdir)")
  p.add_argument("--gen_beam", type=int, default=GEN_BEAM, help="XSum generation beam")
  p.add_argument("--gen_max_tokens", type=int, default=GEN_MAX_TOKENS,
                 help="XSum summary tokens (terminal and pause models)")
  p.add_argument("--gen_max_words", type=int, default=GEN_MAX_WORDS,
                 help="XSum summary words (tree models, word-synchronous)")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                 help="compute dtype of the evaluated model (paper: FP32)")
  p.add_argument("--batch_size", type=int, default=32, help="scorer batch size")
  p.add_argument("--seed", type=int, default=0, help="proposal sampling seed")
  p.add_argument("--bootstrap_resamples", type=int, default=RESAMPLES, help="bootstrap B")
  p.add_argument("--bootstrap_seed", type=int, default=SEED,
                 help="bootstrap seed (2027: paper Tables 10-11; 2026: App. F)")
  args = p.parse_args(argv)
  args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
  unknown = [t for t in args.tasks if t not in TASKS]
  if unknown:
    p.error(f"unknown task(s) {', '.join(unknown)}; expected {', '.join(TASKS)}")
  if not args.tasks:
    p.error(f"--tasks is empty; expected some of {', '.join(TASKS)}")
  for flag, least in (("max_items", 1), ("proposals", 1), ("beam", 1), ("sub_beam", 1),
                      ("fast_track", 0), ("min_len", 1), ("batch_size", 1),
                      ("docppl_documents", 1), ("max_context", 0), ("bootstrap_resamples", 1),
                      ("gen_beam", 1), ("gen_max_tokens", 1), ("gen_max_words", 1)):
    value = getattr(args, flag)
    if value is not None and value < least:
      p.error(f"--{flag}={value}: must be at least {least}")
  if args.max_len_factor <= 0:
    p.error(f"--max_len_factor={args.max_len_factor:g}: must be positive")
  args.mc_tasks = [t.strip() for t in args.mc_tasks.split(",") if t.strip()]
  unknown = [t for t in args.mc_tasks if t not in MC_TASKS]
  if unknown or not args.mc_tasks:
    p.error(f"--mc_tasks: unknown or no task(s) {', '.join(unknown)}; expected some of "
            f"{', '.join(MC_TASKS)}")
  for task in ("xsum", "boolq"):
    folders = getattr(args, f"{task}_finetuned")
    if task in args.tasks and len(folders or ()) != len(args.workdir):
      p.error(f"--tasks={task} needs one --{task}_finetuned per --workdir "
              f"({len(args.workdir)}), got {len(folders or ())}")
  return args


def check_inputs(args) -> None:
  """Every input of the command, checked before anything is scored: each workdir is a training
  workdir with a readable config and at least one checkpoint, proposal files and PTB paths
  exist, and `--out` is (or can be made) a folder. Raises one error naming every problem."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  problems = []
  for workdir in args.workdir:
    try:
      run_config(workdir)
    except (FileNotFoundError, ValueError) as error:
      problems.append(cli.one_line(str(error)))
      continue
    checkpoints = pathlib.Path(workdir) / "checkpoints"
    if not checkpoints.is_dir() or not any(c.name.isdigit() for c in checkpoints.iterdir()):
      problems.append(f"{workdir}: no checkpoint in {checkpoints} (has the run saved one?)")
  for flag, task in (("blimp_proposals", "blimp"), ("docppl_proposals", "docppl")):
    value = getattr(args, flag)
    if task not in args.tasks or value in (None, "grammar", "flat", "beam", "gold"):
      continue
    if _is_parser(value):
      folder = value.partition(":")[2]
      if folder and not (pathlib.Path(folder) / "config.json").is_file():
        problems.append(f"--{flag}={value}: {folder} is not a parser folder (no config.json)")
    elif not pathlib.Path(value).is_file():
      problems.append(f"--{flag}={value}: no such proposals file")
  if "docppl" in args.tasks:
    for path in args.docppl_ptb or ():
      if not pathlib.Path(path).exists():
        problems.append(f"--docppl_ptb={path}: no such file or folder")
  if any(t in args.tasks for t in DOWNSTREAM_TASKS):
    if args.downstream_dir is None:
      problems.append("--tasks=mc/xsum/boolq need --downstream_dir (the folder of <task>/ "
                      "downloads; docs/DOWNSTREAM_DATA.md)")
    elif not pathlib.Path(args.downstream_dir).is_dir():
      problems.append(f"--downstream_dir={args.downstream_dir}: no such folder")
    for task in ("xsum", "boolq"):
      for folder in (getattr(args, f"{task}_finetuned") or ()) if task in args.tasks else ():
        if not pathlib.Path(folder).is_dir():
          problems.append(f"--{task}_finetuned={folder}: no such folder")
  out = pathlib.Path(args.out)
  if out.exists() and not out.is_dir():
    problems.append(f"--out={out}: exists and is not a folder")
  if problems:
    raise cli.CliError("; ".join(problems))
  out.mkdir(parents=True, exist_ok=True)


def beam_options(args) -> dict[str, Any]:
  """The `BeamSearcher` options of the command line (SG and beam proposals)."""
  return dict(beam=args.sub_beam or args.beam, word_beam=args.beam, fast_track=args.fast_track,
              max_len_factor=args.max_len_factor, min_len=args.min_len,
              score_cnt2=args.beam_score_cnt2)


def conventions(args) -> dict[str, Any]:
  """What produced the numbers: printed under every table (`report`)."""
  out = {"dtype": args.dtype, "tree_scoring": args.tree_scoring}
  if "sg" in args.tasks:
    out.update(sg_suites=args.sg_suites, sg_item_rule=ITEM_RULE,
               sg_headline="mean of 6 circuits pooled over items")
  if "blimp" in args.tasks:
    out.update(blimp_proposals=args.blimp_proposals, proposals_K=args.proposals)
  if "docppl" in args.tasks:
    out.update(docppl_proposals=args.docppl_proposals or ("gold" if args.docppl_ptb else
                                                          "grammar"), proposals_K=args.proposals)
  beam_used = "sg" in args.tasks or "beam" in (args.blimp_proposals, args.docppl_proposals)
  if beam_used:
    out.update(beam_search=f"b={args.beam}, sub-beam={args.sub_beam or args.beam}, "
               f"fast track={args.fast_track}, cap=max({args.max_len_factor:g}L, {args.min_len})",
               beam_cnt2="scored where a target" if args.beam_score_cnt2 else
               "never scored (paper code)")
  out.update(bootstrap=f"B={args.bootstrap_resamples}, seed={args.bootstrap_seed}")
  return out


def _log(message: str) -> None:
  print(f"[evaluate] {message}", file=sys.stderr, flush=True)


def _syntaxgym_dir(arg: str | None) -> pathlib.Path:
  path = pathlib.Path(arg) if arg else cli.shared_data("syntaxgym", "--syntaxgym_dir")
  if (path / "json").is_dir():
    path = path / "json"
  if not path.is_dir():
    raise FileNotFoundError(f"SyntaxGym suites not found at {path} (pass --syntaxgym-dir)")
  return path


def _check_file_coverage(args, data: dict) -> None:
  """A proposals FILE must cover every sentence a tree model will ask for: checked before any
  run is scored, so a gap never throws away finished work."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  if not any(run_config(w)[1].scheme.scored_with_structure for w in args.workdir):
    return  # terminal models ask for no trees
  needs = []
  if isinstance(data.get("blimp_proposals"), FileProposals):
    from slm_jax.eval.blimp import load_blimp, word_tokenize  # pylint: disable=g-import-not-at-top
    paradigms = data.get("blimp_paradigms") or load_blimp(data["blimp_dir"], args.max_items)
    needs.append(("blimp_proposals", data["blimp_proposals"],
                  [tuple(word_tokenize(x)) for p in paradigms for x in (*p.good, *p.bad)]))
  if isinstance(data.get("docppl_proposals"), FileProposals):
    needs.append(("docppl_proposals", data["docppl_proposals"],
                  [tuple(t.leaves()) for doc in data["documents"] for t in doc]))
  problems = []
  for flag, source, sentences in needs:
    missing = [w for w in dict.fromkeys(sentences) if w not in source.table]
    if missing:
      problems.append(f"--{flag}={source.path}: no proposals for {len(missing)} of "
                      f"{len(set(sentences))} sentences (first: {' '.join(missing[0])!r})")
  if problems:
    raise cli.CliError("; ".join(problems))


def _blimp_proposals(arg: str, k: int, seed: int) -> ProposalSource | None:
  """The BLiMP source shared by all runs; None for `beam` (built per run by `_beam_source`)."""
  if arg == "beam":
    return None
  if arg == "flat":
    return FlatProposals()
  if arg == "grammar":
    return FallbackProposals(GrammarPosterior(k=k, seed=seed), FlatProposals())
  if _is_parser(arg):
    return _parser_source(arg, k, seed)
  return FileProposals(arg, k=k)


def _is_parser(arg: str | None) -> bool:
  return arg is not None and (arg == "parser" or arg.startswith("parser:"))


def _parser_source(arg: str, k: int, seed: int) -> ProposalSource:
  """`parser` (the shipped GUM model) or `parser:DIR`: K distinct CRF samples of slm_jax's own
  parser per sentence; a sentence it cannot take (too long) falls back to a flat tree, counted."""
  from slm_jax.eval.parser_proposals import ParserProposals  # pylint: disable=g-import-not-at-top
  path = arg.partition(":")[2] or None
  return FallbackProposals(ParserProposals(path, k=k, seed=seed), FlatProposals())


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
  elif _is_parser(source_kind):
    source = _parser_source(source_kind, args.proposals, args.seed)
  else:
    source = FileProposals(source_kind, k=args.proposals)
  info.update(documents=len(documents), proposals=source_kind)
  return documents, source, info


def _beam_source(run, scorer, args) -> ProposalSource | None:
  """This run's beam proposals (flat tree where the beam completes nothing); None for terminal
  models, which need no proposals."""
  if not run.configuration.scheme.scored_with_structure:
    return None
  beam = BeamProposals.for_model(scorer, run.tokenizer, run.configuration, k=args.proposals,
                                 **beam_options(args))
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
    if conf.scheme.scored_with_structure:
      try:
        check_beam_proposals(conf)
      except ValueError as e:
        raise ValueError(f"{workdir}: {e}") from None


def _sg_summary(sg: dict) -> dict:
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


def downstream_folder(args, index: int) -> pathlib.Path:
  """Where the downstream results of the `index`-th --workdir are kept (resumable)."""
  return pathlib.Path(args.out) / "downstream" / f"{index}_{pathlib.Path(args.workdir[index]).name}"


def evaluate_downstream(run, args, data: dict, index: int) -> dict:
  """The `downstream` entry of one run (`slm_jax.downstream.run`)."""
  from slm_jax.downstream import run as downstream  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.protocol import protocol  # pylint: disable=g-import-not-at-top
  options = data["downstream_options"]
  folder = downstream_folder(args, index)
  uses_trees = run.configuration.scheme.has_brackets
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


def evaluate_run(workdir: str, args, data: dict, index: int = 0) -> tuple[dict, dict]:
  """(JSON entry, per-example arrays for the bootstrap) of one run (the `index`-th --workdir)."""
  from slm_jax.eval.scorer import Scorer
  from slm_jax.train.loading import load_run
  run = trained = load_run(workdir, dtype=args.dtype)  # `trained`: its own configuration
  reference = run.configuration.reference  # "pushdown": the architectural reference, SPEC §14
  if reference == "pushdown":  # scored as words; the attachment beam (--beam) marginalizes
    from slm_jax.eval.pushdown_scoring import PushdownScorer, scoring_configuration
    run = dataclasses.replace(run, configuration=scoring_configuration(run.configuration))
    scorer = PushdownScorer(run.model, run.tokenizer, run.configuration, beam=args.beam,
                            batch_size=args.batch_size)
  else:
    scorer = Scorer(run.model, run.tokenizer, run.configuration, batch_size=args.batch_size)
  conf = run.configuration
  entry: dict[str, Any] = {"workdir": str(workdir), "configuration": conf.name,
                           "linearization": conf.linearization, "attention": conf.attention.name,
                           "step": int(run.step), "dtype": args.dtype, "timing_s": {}}
  if reference:
    entry["reference"] = f"{reference} (architectural reference, own protocol: SPEC §14)"
  arrays: dict[str, Any] = {}
  if run.skipped:
    entry["newest_checkpoint_step"] = int(run.newest_step)
    entry["skipped_checkpoints"] = [{"step": int(st), "reason": r} for st, r in run.skipped]
    _log(f"warning: {workdir}: evaluating step {run.step}, not the newest checkpoint "
         f"({run.newest_step}): " + "; ".join(f"step {st} unreadable ({r})"
                                              for st, r in run.skipped))
  _log(f"{workdir}: {conf.name} at step {run.step} ({args.dtype})")
  if "sg" in args.tasks:
    from slm_jax.eval.sg_aggregate import circuit_labels
    from slm_jax.eval.syntaxgym import evaluate_syntaxgym
    start = time.time()
    sg = evaluate_syntaxgym(scorer, data["sg_dir"], max_items=args.max_items,
                            suites=args.sg_suites, tree_scoring=args.tree_scoring,
                            progress=cli.Progress("  sg", unit="suites", every=0),
                            **beam_options(args))
    entry["sg"] = _sg_summary(sg)
    entry["timing_s"]["sg"] = round(time.time() - start, 2)
    names = list(sg["suites"])
    labels = circuit_labels(names, [sg["suites"][n]["items"] for n in names])
    correct = np.concatenate([np.asarray(sg["suites"][n]["item_correct"], float)
                              for n in names] or [np.zeros(0)])
    arrays["sg"] = (correct[labels != ""], labels[labels != ""])  # the headline's items
    arrays["sg_circuits"] = {c: v for c, v in sg["circuits"].items() if v is not None}
    _log(f"  SG {_pct(entry['sg']['score'])} (suite mean {_pct(entry['sg']['suite_mean'])}, "
         f"{sg['suite_set']}; {entry['timing_s']['sg']} s)")
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
                            max_items=args.max_items, tree_scoring=args.tree_scoring,
                            paradigms=data.get("blimp_paradigms"))
    entry["blimp"] = result.summary()
    stats = _source_stats(source)
    if stats and result.stats.get("proposals"):
      entry["blimp"]["stats"]["proposal_source"] = {k: v - before.get(k, 0)
                                                    for k, v in stats.items()}
    entry["timing_s"]["blimp"] = round(time.time() - start, 2)
    arrays["blimp"] = result.correct.astype(float)
    arrays["blimp_paradigms"] = {u: p["accuracy"] for u, p in result.paradigms.items()}
    _log(f"  BLiMP {result.overall:.2f} ({result.stats['ties']} ties, "
         f"{result.stats['nonfinite_pairs']} non-finite pairs; {entry['timing_s']['blimp']} s)")
  if "docppl" in args.tasks:
    start = time.time()
    cap = args.max_context if args.max_context is not None else int(run.cfg.data.seq_len)
    source = data["docppl_proposals"]
    per_run = source is None
    if per_run:
      source = beam_source()
    before = _source_stats(source)
    result = doc_ppl(scorer, data["documents"], run.tokenizer, conf, source,
                     max_context=cap or None, tree_scoring=args.tree_scoring)
    entry["docppl"] = {**result.summary(), "max_context": cap or None}
    if per_run and source is not None:
      entry["docppl"]["proposal_source"] = {k: v - before.get(k, 0)
                                            for k, v in _source_stats(source).items()}
    entry["timing_s"]["docppl"] = round(time.time() - start, 2)
    arrays["docppl"] = (result.doc_log_prob, result.doc_tokens)
    _log(f"  Doc-PPL {result.ppl:.3f} ({entry['timing_s']['docppl']} s)")
  if any(t in args.tasks for t in DOWNSTREAM_TASKS):
    start = time.time()
    entry["downstream"] = evaluate_downstream(trained, args, data, index)
    entry["timing_s"]["downstream"] = round(time.time() - start, 2)
  return entry, arrays


def _pct(value: float | None) -> str:
  return "–" if value is None else f"{value:.2f}"


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
        _log("  SG bootstrap skipped: models were evaluated on different items")
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


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  started = time.time()
  from slm_jax.train.loading import run_config  # fails early on a broken install
  import json
  if any(t in args.tasks and arg == "beam" for t, arg in
         (("blimp", args.blimp_proposals), ("docppl", args.docppl_proposals))):
    _check_beam_runs(args.workdir)  # a linearization beam proposals cannot invert: say so first
  check_inputs(args)  # then every input, before anything is scored
  first_cfg, _ = run_config(args.workdir[0])
  data: dict[str, Any] = {}
  settings: dict[str, Any] = {"tasks": ",".join(args.tasks), "max_items": args.max_items,
                              "proposals_K": args.proposals}
  notes: list[str] = []
  beam_tasks = [t for t, arg in (("blimp", args.blimp_proposals), ("docppl", args.docppl_proposals))
                if t in args.tasks and arg == "beam"]
  if beam_tasks or "sg" in args.tasks:
    settings.update(beam=args.beam, sub_beam=args.sub_beam or args.beam,
                    fast_track=args.fast_track, max_len_factor=args.max_len_factor,
                    min_len=args.min_len, beam_score_cnt2=args.beam_score_cnt2)
  settings.update(dtype=args.dtype, tree_scoring=args.tree_scoring,
                  bootstrap_seed=args.bootstrap_seed)
  if "sg" in args.tasks:
    data["sg_dir"] = _syntaxgym_dir(args.syntaxgym_dir)
    settings.update(sg_dir=str(data["sg_dir"]), sg_suites=args.sg_suites)
  if "blimp" in args.tasks and args.data_source == "tfds":
    from slm_jax.eval.tfds_sets import blimp_pairs_from_tfds  # pylint: disable=g-import-not-at-top
    data["blimp_dir"] = None
    data["blimp_paradigms"] = blimp_pairs_from_tfds(args.tfds_dir, max_items=args.max_items)
    data["blimp_proposals"] = _blimp_proposals(args.blimp_proposals, args.proposals, args.seed)
    settings.update(blimp_source=f"tfds {args.tfds_dir or '(default data_dir)'}",
                    blimp_proposals=args.blimp_proposals)
  elif "blimp" in args.tasks:
    data["blimp_dir"] = (pathlib.Path(args.blimp_dir) if args.blimp_dir
                         else cli.shared_data("blimp", "--blimp_dir"))
    data["blimp_proposals"] = _blimp_proposals(args.blimp_proposals, args.proposals, args.seed)
    settings.update(blimp_dir=str(data["blimp_dir"]), blimp_proposals=args.blimp_proposals)
  if "docppl" in args.tasks:
    data["documents"], data["docppl_proposals"], info = _docppl_data(args, first_cfg)
    settings.update({f"docppl_{k}": v for k, v in info.items()})
  if any(t in args.tasks for t in DOWNSTREAM_TASKS):
    import functools  # pylint: disable=g-import-not-at-top
    from slm_jax.downstream.encoding import make_tree_source  # pylint: disable=g-import-not-at-top
    from slm_jax.downstream.run import DownstreamOptions  # pylint: disable=g-import-not-at-top
    data["downstream_options"] = DownstreamOptions(
        pathlib.Path(args.downstream_dir), tuple(args.mc_tasks), max_items=args.max_items,
        batch_size=args.batch_size, beam=args.gen_beam, max_tokens=args.gen_max_tokens,
        max_words=args.gen_max_words)
    data["tree_source"] = functools.cache(lambda: make_tree_source(args.tree_source))
    settings.update(downstream_dir=args.downstream_dir, tree_source=args.tree_source)
    if "mc" in args.tasks:
      settings.update(mc_tasks=",".join(args.mc_tasks))
    if "xsum" in args.tasks:
      settings.update(gen_beam=args.gen_beam, gen_max_tokens=args.gen_max_tokens,
                      gen_max_words=args.gen_max_words)
  _check_file_coverage(args, data)
  entries, arrays = [], []
  partial = pathlib.Path(args.out) / "results.partial.json"
  for index, workdir in enumerate(args.workdir):
    entry, arr = evaluate_run(workdir, args, data, index)
    entries.append(entry)
    arrays.append(arr)
    # What is done so far survives a later run's failure (removed once results.json is written).
    report.write_json({"settings": settings, "complete": False, "models": entries}, partial)
  names = report.display_names([e["configuration"] for e in entries], args.workdir)
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
  fallback = getattr(data.get("blimp_proposals"), "stats", None)
  if fallback and fallback.get("fallback"):
    why = ("longer than the parser's limit" if _is_parser(args.blimp_proposals)
           else "words outside the embedded grammar")
    notes.append(f"BLiMP: {fallback['fallback']} of {fallback['primary'] + fallback['fallback']} "
                 f"proposal requests fell back to a flat (S …) tree ({why}); those sentences are "
                 "not parser-marginalized. Pass --blimp-proposals=parser, beam or FILE.")
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
    notes.append(f"SG↑ = mean of the six circuit accuracies, each pooled over the items of its "
                 f"suites ({args.sg_suites}; paper Tables 13/14, SPEC §9); an item is correct "
                 "when the suite's first prediction holds; 'suite mean' = mean of the suite "
                 "accuracies (secondary).")
    later = sum(((e.get("sg") or {}).get("counts") or {}).get(
        "items_failing_a_later_prediction", 0) for e in results["models"])
    if later:
      notes.append(f"SG: {later} correct items (all models) fail a later prediction of their "
                   "suite (reported per suite in results.json, not in the headline).")
  for name, entry in zip(names, results["models"]):
    stats = (entry.get("blimp") or {}).get("stats") or {}
    if stats.get("ties") or stats.get("nonfinite_pairs"):
      notes.append(f"BLiMP ({name}): {stats.get('ties', 0)} tied and "
                   f"{stats.get('nonfinite_pairs', 0)} non-finite pairs, scored wrong.")
  if args.max_items is not None:
    notes.append(f"--max_items={args.max_items}: subsets, not the full benchmarks.")
  results["notes"] = notes
  results["settings"]["wall_s"] = round(time.time() - started, 1)
  circuit_suites = None
  if "sg_dir" in data:
    circuits = data["sg_dir"].parent / "circuits.json"
    if circuits.is_file():
      circuit_suites = json.loads(circuits.read_text())["circuit_suites"]
  paths = report.write_reports(results, args.out, circuit_suites, **extra)
  partial.unlink(missing_ok=True)
  for kind, path in paths.items():
    _log(f"wrote {kind}: {path}")
  return 0


if __name__ == "__main__":
  raise SystemExit(cli.run(main))
