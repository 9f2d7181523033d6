"""Parse raw documents into PTB trees, one shard per host (or per GPU).

  python -m slm_jax.parse --output=parsed/fineweb --shard=3/16 fineweb-edu/sample/10BT/
  python -m slm_jax.parse --output=parsed/fineweb --shard=3/16 --model=/models/benepar_en3 data/
  python -m slm_jax.parse --output=parsed/fineweb --backend=slm data/   # our parser, offline
  python -m slm_jax.parse --output=parsed/ptb --backend=passthrough trees.parquet
  python -m slm_jax.parse --report parsed/fineweb       # merged counts of every shard

Inputs: Parquet files/folders (FineWeb-Edu layout: a `text` column; `id` used when present), JSONL
(`{"text": …, "id": …}` per line) or plain text files (one document each); a folder contributes
every *.parquet, *.jsonl, *.txt and *.text file under it (--input_format: only that format's).
Rerunning the same command resumes (finished units are skipped); a shard made by another backend
or options is refused (its `identity.json`), and so is a second writer of one shard
(`slm_jax.locks`); see slm_jax/parse/stage.py for the output layout.
"""

from __future__ import annotations

import pathlib
import sys

from slm_jax import cli, locks
from slm_jax.data.parse_reports import SHARD_GLOB, merged_report
from slm_jax.inputs import AUTO, PARSE_INPUTS
from slm_jax.parse.backends import BACKENDS, BENEPAR_DEFAULT_MODEL, make_backend
from slm_jax.parse.stage import StageOptions, claim_shard, run_shard, shard_record


def _parser() -> cli.ArgumentParser:
  parser = cli.ArgumentParser(prog="python -m slm_jax.parse", description=__doc__)
  parser.add_argument("inputs", nargs="*", help="Parquet/JSONL/text files or folders")
  parser.add_argument("--output", help="output folder (shared by all shards)")
  cli.add_shard_argument(parser, "work units")
  parser.add_argument("--backend", default="benepar", choices=sorted([*BACKENDS, "slm"]),
                      help="benepar (the paper's parser, the parse extra), slm (slm_jax's own "
                      "parser: works offline, the shipped GUM model by default), passthrough "
                      "(the inputs hold trees), flat")
  parser.add_argument("--model", default=None,
                      help=f"benepar: a model name in NLTK_DATA or a path (default "
                      f"{BENEPAR_DEFAULT_MODEL}); slm: a parser folder (default: the shipped "
                      "model)")
  parser.add_argument("--batch_size", type=int, default=256, help="sentences per parser call")
  parser.add_argument("--max_words", type=int, default=200,
                      help="skip (and count) longer sentences")
  parser.add_argument("--text_field", default="text")
  parser.add_argument("--id_field", default="id")
  parser.add_argument("--input_format", default=AUTO, choices=(AUTO, *PARSE_INPUTS.formats))
  parser.add_argument("--output_format", default="jsonl", choices=("jsonl", "parquet"))
  parser.add_argument("--cache_dir", default="", help="sentence cache folder (default "
                      "OUTPUT/cache; put it on local disk)")
  parser.add_argument("--no_cache", action="store_true")
  parser.add_argument("--force", action="store_true", help="redo finished units (the cache "
                      "still applies)")
  parser.add_argument("--report", metavar="OUTPUT", help="print the merged report of OUTPUT")
  return parser


def _report(output: str) -> int:
  """The merged counts; exit 1 while shards are missing, 2 when OUTPUT is no parse output."""
  folder = pathlib.Path(output)
  if not folder.is_dir():
    raise cli.CliError(f"--report {output}: no such folder")
  if not any(folder.glob(SHARD_GLOB)):
    raise cli.CliError(f"--report {output}: holds no parse shards (shard-*-of-*/); is it the "
                       "--output of python -m slm_jax.parse?")
  counts, missing = merged_report(output)
  print(counts.summary("parse"))
  if not missing:
    return cli.EXIT_OK
  print(f"  not finished: {len(missing)} shard(s): {', '.join(missing[:8])}"
        + (" …" if len(missing) > 8 else ""))
  return cli.EXIT_INCOMPLETE


def _main(argv: list[str] | None) -> int:
  args = _parser().parse_args(argv)
  if args.report:
    return _report(args.report)
  if not args.inputs or not args.output:
    raise cli.CliError("give INPUT… and --output (or --report OUTPUT)")
  options = StageOptions(text_field=args.text_field, id_field=args.id_field,
                         input_format=args.input_format, output_format=args.output_format,
                         max_words=args.max_words, batch_sentences=args.batch_size,
                         cache_dir=None if args.no_cache else args.cache_dir, force=args.force)
  if args.backend == "slm":
    from slm_jax.parse.slm_backend import SlmBackend  # pylint: disable=g-import-not-at-top
    backend = SlmBackend(args.model)
  else:
    backend = make_backend(args.backend, model=args.model, batch_size=args.batch_size)
  if args.backend in ("benepar", "slm"):
    backend.load()  # fail before reading any input when the model is missing
  index, count = args.shard
  with locks.writer_lock(args.output, what="parse", part=f"{index}-of-{count}"):
    claim_shard(args.output, index, count, shard_record(backend, options))
    result = run_shard(args.inputs, args.output, backend, shard=args.shard, options=options)
  counts = result.counts
  print(f"{result.directory}: {result.units_done} units parsed, {result.units_resumed} already "
        f"done; {result.seconds:.1f} s\n{counts.summary('parse')}")
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
