"""Parsed documents → ArrayRecord shards of documents (read back by `DocumentSource`).

  python -m slm_jax.prepare --output=prepared/gum ../shared/data/gum/const
  python -m slm_jax.prepare --output=prepared/fineweb --shard=3/16 parsed/fineweb

Inputs: PTB files/folders (one document per file, or one per tree with --sentences_as_documents),
JSONL files (one document per line: `{"id": …, "trees": ["(S …)", …]}` or `{"ptb": "(S …) (S …)"}`),
Parquet files with PTB trees in a `text` column, and folders of the parse stage's output
(`python -m slm_jax.parse`, JSONL or Parquet parts). A folder contributes every *.jsonl, *.parquet
and PTB (*.mrg, *.ptb, *.tree, *.txt) file under it (--format: only that format's). Trees are read
with the SPEC §1 normalization; malformed trees and empty documents are dropped and counted by
reason (lenient by default; --strict stops at the first problem with its file and line).

Sharding: input files, in sorted path order, are dealt round-robin to `--shard=i/n`; shard i
writes `documents-{i}-of-{n}-{j}.array_record` (j = a new file every --records_per_file documents)
and `manifest-{i}-of-{n}.json`, so many hosts can prepare one corpus into one folder (two writers of one shard are refused:
`slm_jax.locks`, `.lock.i-of-n`);
`DocumentSource` checks that all n manifests are there. The record format (`slm_jax.document`
v1, the word-level lin1 base of a document) is in slm_jax/data/records.py; the library is
`slm_jax.data.documents.prepare`.
"""

from __future__ import annotations

import sys

from slm_jax import cli, locks
from slm_jax.data.documents import RECORDS_PER_FILE, prepare
from slm_jax.inputs import AUTO, TREE_INPUTS


PROG = "python -m slm_jax.prepare"


@cli.options
class PrepareOptions:
  """The flags of `python -m slm_jax.prepare` (the module docstring)."""

  inputs: tuple[str, ...] = cli.option(positional=True, help="PTB files/folders, JSONL files, "
                                       "parse outputs")
  output: str = cli.option(help="folder for the ArrayRecord shards")
  shard: tuple[int, int] = cli.shard_option()
  format: str = cli.option(AUTO, choices=(AUTO, *TREE_INPUTS.formats))
  strict: bool = cli.option(False, help="stop at the first malformed tree (default: skip and "
                            "count)")
  sentences_as_documents: bool = cli.option(False, help="one document per tree instead of per "
                                            "file / JSONL line")
  records_per_file: int = cli.option(RECORDS_PER_FILE)
  allow_partial: bool = cli.option(False, help="prepare the finished shards of an unfinished "
                                   "parse (counted)")


def prepare_shard(options: PrepareOptions) -> None:
  """Prepares this shard of `options.inputs` into `options.output` and prints its counts."""
  index, count = options.shard
  with locks.writer_lock(options.output, what="prepare", part=f"{index}-of-{count}"):
    result = prepare(list(options.inputs), options.output, shard=options.shard,
                     fmt=options.format, lenient=not options.strict,
                     sentences_as_documents=options.sentences_as_documents,
                     records_per_file=options.records_per_file,
                     allow_partial=options.allow_partial)
  counts = result.counts
  print(f"{result.manifest}: {counts.summary('prepare')}\n  {counts.tokens_out:,} lin1 tokens in "
        f"{result.seconds:.1f} s ({counts.tokens_out / max(result.seconds, 1e-9):,.0f} tokens/s)")


def _main(argv: list[str] | None) -> int:
  prepare_shard(cli.parse_options(PrepareOptions, argv, prog=PROG, doc=__doc__))
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
