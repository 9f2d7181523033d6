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


def _parser() -> cli.ArgumentParser:
  parser = cli.ArgumentParser(prog="python -m slm_jax.prepare", description=__doc__)
  parser.add_argument("inputs", nargs="+", help="PTB files/folders, JSONL files, parse outputs")
  parser.add_argument("--output", required=True, help="folder for the ArrayRecord shards")
  cli.add_shard_argument(parser)
  parser.add_argument("--format", default=AUTO, choices=(AUTO, *TREE_INPUTS.formats))
  parser.add_argument("--strict", action="store_true",
                      help="stop at the first malformed tree (default: skip and count)")
  parser.add_argument("--sentences_as_documents", action="store_true",
                      help="one document per tree instead of per file / JSONL line")
  parser.add_argument("--records_per_file", type=int, default=RECORDS_PER_FILE)
  parser.add_argument("--allow_partial", action="store_true",
                      help="prepare the finished shards of an unfinished parse (counted)")
  return parser


def _main(argv: list[str] | None) -> int:
  args = _parser().parse_args(argv)
  index, count = args.shard
  with locks.writer_lock(args.output, what="prepare", part=f"{index}-of-{count}"):
    result = prepare(args.inputs, args.output, shard=args.shard, fmt=args.format,
                     lenient=not args.strict, sentences_as_documents=args.sentences_as_documents,
                     records_per_file=args.records_per_file, allow_partial=args.allow_partial)
  counts = result.counts
  print(f"{result.manifest}: {counts.summary('prepare')}\n  {counts.tokens_out:,} lin1 tokens in "
        f"{result.seconds:.1f} s ({counts.tokens_out / max(result.seconds, 1e-9):,.0f} tokens/s)")
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
