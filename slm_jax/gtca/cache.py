"""`python -m slm_jax.gtca.cache`: build the GTCA parse cache (SPEC §10) for a set's prompts.

The store (key = sha256 of the token ids, value = the span tree, the identity in its meta) is
`slm_jax.gtca.parse_cache`; the builder `slm_jax.gtca.cache_builder`; the record sources
`slm_jax.gtca.cache_records`.

CLI:
  python -m slm_jax.gtca.cache (--data=FILE.jsonl | --task=SET --data_root=DIR [--split=S]
      [--limit=N] | --ptb=FILES) (--backbone=HF_FOLDER|tokenizer.json | --workdir=RUN
      [--options=N]) --out=cache.sqlite [--shard=i/n] [--parser=DIR|benepar[:MODEL]|right_branching|random]
      [--max_len=N] [--chat_template=auto|on|off] [--bos] [--block=256]
  python -m slm_jax.gtca.cache --merge --out=cache.sqlite
Records: `--data` JSON lines, MCQA `{"id", "question", "options": [...], "context"?}` or
`{"id", "sentence"}`, with an optional `tree` (PTB text, one tree per sentence of the context and
question fields in order) used instead of parsing; `--task` one split (default: the evaluation
split) of a real set in its Hugging Face layout (`slm_jax.gtca.mcqa_data`: cloth, mmlu,
hellaswag, winogrande, cola), unlabeled rows counted and left out, or `--task=blimp`
(`--data_root` = BLiMP's folder of `<UID>.jsonl`, read by `slm_jax.eval.blimp.load_blimp`; no
`--split`; `--limit=N`: the first N pairs *per paradigm*): both sentences of every pair as
sentence records (`UID:pair:good|bad`; BLiMP repeats sentences across pairs: counted as
duplicates, stored once); `--ptb` PTB files as sentence records with their own trees (what the
UUAS probe's GTCA switch reads). `--backbone` is a Hugging Face checkpoint (its tokenizer, BOS,
chat template); `--workdir` a slm_jax training run, whose prompt tokenizer is the word
vocabulary plus the prompt words of `--options` letters (default: the set's option count, else
the records' largest, at least 2; BLiMP and CoLA: 2, so give the run's count) — the one
`slm_jax.gtca.backbone` gives the trainer. Without `--parser` the shipped GUM parser is loaded,
only if some record has no tree; `right_branching` / `random` are the weak-parser and random-tree
ablations' parsers (no model; a random tree is drawn from a seed of the sentence's words);
`benepar[:MODEL]` is the Berkeley parser of the parse extra (`cache_records.BeneparWords`; the
model is never downloaded here: a missing one says how to obtain it).
`--max_len` (default: the backbone's context, `slm_jax.gtca.backbone.backbone_context` — a
checkpoint's `max_position_embeddings`, a workdir's `data.seq_len`; 0: no limit; an explicit
value wins over the context) bounds a row: MCQA prompts are cut from the left to max_len − 1
tokens so the answer letter still fits, sentence prompts to max_len.
`--shard=i/n` takes the records with index ≡ i (mod n) and writes
`cache.shard-0000i-of-0000n.sqlite` beside `--out` (n = 1: `--out` itself);
`--merge` joins all n shard files into `--out` (refused while a shard is missing or the shards'
identities differ). A rerun skips keys already present and counts them (`cached already`), so a
killed run resumes; rows are committed every block. Progress goes to stderr (done/total, rate,
ETA); at the end the counts: examples, parsed, cached already, duplicates (same ids as another
record), truncated, errors (each kept example error is listed, and the exit code is 1), and for
`--task` the rows read and the unlabeled rows left out (BLiMP: paradigms, pairs, sentences).
Data without a usable record is refused (exit 2, no cache written); `--out` that is not a span
cache (a folder, another SQLite schema, a corrupt file) is the one line `FILE: not a GTCA span
cache (…)`.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any, Callable

from slm_jax import cli, locks
from slm_jax.gtca import cache_records
from slm_jax.gtca.cache_builder import KEPT_ERRORS, build_cache, parser_identity, read_records
from slm_jax.gtca.mcqa_data import SETS
from slm_jax.gtca.parse_cache import GIVEN, ParseCache, merge_shards, shard_path
from slm_jax.gtca.prompts import PromptFormat, TextTokenizer


def _max_len(backbone: pathlib.Path, flag: int | None) -> int | None:
  """The row limit: an explicit --max_len (0: none), else the backbone's context — a
  workdir's data.seq_len, a checkpoint folder's max_position_embeddings (`backbone_context`)."""
  if flag is not None:
    return flag or None  # 0: no limit
  from slm_jax.gtca.backbone import backbone_context  # pylint: disable=g-import-not-at-top
  return backbone_context(backbone)


def _records(options: CacheOptions, index: int, count: int, bad_lines: list[str]):
  """(records, counts of a --task split or None)."""
  if options.task:
    return cache_records.task_records(options.task, options.data_root, options.split,
                                      options.limit or None, index, count)
  if options.ptb:
    return cache_records.ptb_records(options.ptb.split(","), index, count), None
  return read_records(options.data, index, count, bad_lines), None


def _parser_of(arg: str | None, records) -> tuple[Callable[[], Any] | None, str]:
  """(parser factory or None, the parser identity stored in the cache's meta)."""
  if arg in cache_records.WEAK_PARSERS:
    return (lambda: cache_records.WeakParser(arg)), arg
  if not any("tree" not in record for _, record in records):
    return None, GIVEN
  if arg and (arg == "benepar" or arg.startswith("benepar:")):
    parser = cache_records.BeneparWords(arg.partition(":")[2] or None)
    return (lambda: parser), parser.identity
  from slm_jax.parser import api  # pylint: disable=import-outside-toplevel  (JAX: only to parse)
  parser_dir = pathlib.Path(arg) if arg else api.SHIPPED
  if not parser_dir.is_dir():
    raise FileNotFoundError(f"--parser {parser_dir}: not a folder")
  return (lambda: api.load_parser(parser_dir)), parser_identity(parser_dir)


@cli.options
class CacheOptions:
  """The flags of `python -m slm_jax.gtca.cache` (the module docstring)."""

  data: str | None = cli.option(None, help="JSONL records (MCQA or sentence, optional `tree`)")
  task: str | None = cli.option(None, choices=tuple(SETS),
                                help="a real set read from --data_root")
  data_root: str | None = cli.option(None, help="the set's Hugging Face download (or their "
                                     "parent)")
  split: str | None = cli.option(None, help="the split of --task (default: its evaluation "
                                 "split)")
  limit: int = cli.option(0, help="only the first N examples (blimp: N pairs per paradigm; 0: "
                          "all)")
  ptb: str | None = cli.option(None, help="PTB files/folders (comma-separated): sentence "
                               "records with their own trees, for the UUAS probe's GTCA switch")
  checkpoint: str | None = cli.option(None, help="the backbone model: a slm_jax training "
                                      "workdir, a Hugging Face checkpoint folder or a .gguf file")
  backbone: str | None = cli.option(None, help="Hugging Face checkpoint folder or "
                                    "tokenizer.json")
  workdir: str | None = cli.option(None, help="instead of --backbone: a slm_jax training run")
  options: int | None = cli.option(None, help="--workdir: option letters of the prompt "
                                   "tokenizer (default: the set's, else the records' largest, at "
                                   "least 2)")
  out: str = cli.option(help="the SQLite cache (shards write beside it)")
  shard: tuple[int, int] = cli.shard_option("records")
  parser: str | None = cli.option(None, help="parser folder (default: the shipped GUM), "
                                  "benepar[:MODEL] (the parse extra; MODEL a name in NLTK_DATA or "
                                  "a path, default benepar_en3), or right_branching / random (the "
                                  "weak-parser / random-tree ablations)")
  max_len: int | None = cli.option(None, help="left-truncate so a row (prompt + answer letter) "
                                   "has at most N tokens (default: the backbone's context — a "
                                   "checkpoint's max_position_embeddings, a workdir's "
                                   "data.seq_len; 0: never); an explicit N wins, larger or "
                                   "smaller — the trainer reads it from the cache")
  chat_template: str = cli.option("auto", choices=("auto", "on", "off"), help="wrap prompts in "
                                  "the backbone's chat template (auto: if it has one)")
  bos: bool = cli.option(False, help="prepend the backbone's BOS token")
  block: int = cli.option(256, help="records per parse batch")
  merge: bool = cli.option(False, help="join the shard files into --out")

  def validate(self) -> None:
    if self.merge:
      return
    if self.checkpoint and (self.backbone or self.workdir):
      raise cli.CliError("give --checkpoint, or the old --backbone / --workdir, not both")
    if not self.checkpoint and bool(self.backbone) == bool(self.workdir):
      raise cli.CliError("give --backbone (a Hugging Face checkpoint) or --workdir (a slm_jax "
                         "run), one of them (or --merge)")
    if sum(1 for given in (self.data, self.task, self.ptb) if given) != 1:
      raise cli.CliError("give one of --data, --task (with --data_root) or --ptb")
    if self.task and not self.data_root:
      raise cli.CliError("--task needs --data_root (the set's Hugging Face download)")


def build(options: CacheOptions) -> int:
  """Builds (or, `--merge`, joins) the span cache of `options`; prints its counts and returns
  the exit code (1: some records produced no span tree)."""
  if options.merge:
    count, rows = merge_shards(options.out)
    print(f"merged {count} shards into {options.out}: {rows} span trees")
    return cli.EXIT_OK
  workdir, backbone_folder = options.workdir, options.backbone
  if options.checkpoint:  # any model (train.models): a workdir's prompt tokenizer, or the
    # checkpoint's
    from slm_jax.train import models  # pylint: disable=g-import-not-at-top
    if models.model_kind(options.checkpoint) == models.WORKDIR:
      workdir = options.checkpoint
    else:
      backbone_folder = options.checkpoint
  index, count = options.shard
  bad_lines: list[str] = []
  records, task_counts = _records(options, index, count, bad_lines)
  if not records:  # an empty cache with exit 0 would hide it
    source = options.data or options.ptb or f"--task={options.task} ({options.data_root})"
    shard = f" (shard {index}/{count})" if count > 1 else ""
    raise cli.CliError(f"{source}{shard}: no usable records ({len(bad_lines)} lines refused"
                       + (f": {bad_lines[0]}" if bad_lines else "") + "); nothing to cache")
  if workdir:
    from slm_jax.gtca.backbone import workdir_prompt_tokenizer  # pylint: disable=g-import-not-at-top
    backbone = pathlib.Path(workdir)
    letters = options.options or cache_records.default_options(options.task, records)
    tokenizer = workdir_prompt_tokenizer(backbone, letters)
  else:
    backbone = pathlib.Path(backbone_folder)
    tokenizer = TextTokenizer.load(backbone)
  chat = options.chat_template == "on" or (options.chat_template == "auto"
                                           and tokenizer.chat_template is not None)
  fmt = PromptFormat(max_len=_max_len(backbone, options.max_len), chat=chat, bos=options.bos)
  factory, parser_id = _parser_of(options.parser, records)
  identity = {"tokenizer": tokenizer.identity, **fmt.to_meta(), "parser": parser_id}
  out = shard_path(options.out, index, count)
  with locks.writer_lock(out.parent, what="GTCA span cache", part=f"{out.name}"), \
       ParseCache(out, identity, writable=True, info={"backbone": str(backbone)}) as cache:
    report = build_cache(records, tokenizer, cache, fmt, factory, block=max(1, options.block),
                         progress=cli.Progress("gtca cache", unit="examples"))
    total = len(cache)
  report.examples += len(bad_lines)
  for message in bad_lines:
    report.error(message)
  if task_counts is not None:
    print(cache_records.task_summary(options.task, task_counts))
  print(f"{out}: {report.summary()}; {total} span trees in the cache")
  for message in report.messages:
    print(f"  {message}", file=sys.stderr)
  if report.errors:
    print(f"error: {report.errors} records produced no span tree (listed above, first "
          f"{KEPT_ERRORS}); they will be cache misses", file=sys.stderr)
    return cli.EXIT_INCOMPLETE
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return build(cli.parse_options(CacheOptions, argv, prog="python -m slm_jax.gtca.cache",
                                 doc=__doc__.split("\n\n")[0]))


if __name__ == "__main__":
  sys.exit(cli.run(main))
