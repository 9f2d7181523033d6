"""Parse raw documents into PTB trees, one shard per host (or per GPU).

  python -m slm_jax.parse --output=parsed/fineweb --shard=3/16 fineweb-edu/sample/10BT/
  python -m slm_jax.parse --output=parsed/fineweb --shard=3/16 --model=/models/benepar_en3 data/
  python -m slm_jax.parse --output=parsed/ptb --backend=passthrough trees.parquet
  python -m slm_jax.parse --report parsed/fineweb       # merged counts of every shard

Inputs: Parquet files/folders (FineWeb-Edu layout: a `text` column; `id` used when present), JSONL
(`{"text": …, "id": …}` per line) or plain text files (one document each). Rerunning the same
command resumes (finished units are skipped); see slm_jax/parse/stage.py for the output layout.
"""

from __future__ import annotations

import argparse
import sys

from slm_jax.parse.backends import BACKENDS, BENEPAR_DEFAULT_MODEL, ModelNotFoundError, make_backend
from slm_jax.parse.stage import StageOptions, merged_report, run_shard
from slm_jax.prepare import parse_shard


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m slm_jax.parse", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("inputs", nargs="*", help="Parquet/JSONL/text files or folders")
  parser.add_argument("--output", help="output folder (shared by all shards)")
  parser.add_argument("--shard", default="0/1", help="i/n: the work units of this host")
  parser.add_argument("--backend", default="benepar", choices=sorted(BACKENDS))
  parser.add_argument("--model", default=BENEPAR_DEFAULT_MODEL,
                      help="benepar model name (in NLTK_DATA) or local path")
  parser.add_argument("--batch_size", type=int, default=256, help="sentences per parser call")
  parser.add_argument("--max_words", type=int, default=200,
                      help="skip (and count) longer sentences")
  parser.add_argument("--text_field", default="text")
  parser.add_argument("--id_field", default="id")
  parser.add_argument("--input_format", default="auto",
                      choices=("auto", "parquet", "jsonl", "text"))
  parser.add_argument("--output_format", default="jsonl", choices=("jsonl", "parquet"))
  parser.add_argument("--cache_dir", default="", help="sentence cache folder (default "
                      "OUTPUT/cache; put it on local disk)")
  parser.add_argument("--no_cache", action="store_true")
  parser.add_argument("--force", action="store_true", help="redo finished units (the cache "
                      "still applies)")
  parser.add_argument("--report", metavar="OUTPUT", help="print the merged report of OUTPUT")
  return parser


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  if args.report:
    counts, missing = merged_report(args.report)
    print(counts.summary("parse"))
    if missing:
      print(f"  not finished: {len(missing)} shard(s): {', '.join(missing[:8])}"
            + (" …" if len(missing) > 8 else ""))
    return 0 if not missing else 1
  if not args.inputs or not args.output:
    print("error: give INPUT… and --output (or --report OUTPUT)", file=sys.stderr)
    return 2
  options = StageOptions(text_field=args.text_field, id_field=args.id_field,
                         input_format=args.input_format, output_format=args.output_format,
                         max_words=args.max_words, batch_sentences=args.batch_size,
                         cache_dir=None if args.no_cache else args.cache_dir, force=args.force)
  try:
    backend = make_backend(args.backend, model=args.model, batch_size=args.batch_size)
    if args.backend == "benepar":
      backend.load()  # fail before reading any input when the model is missing
    result = run_shard(args.inputs, args.output, backend, shard=parse_shard(args.shard),
                       options=options)
  except (ModelNotFoundError, ImportError, ValueError, FileNotFoundError, KeyError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  counts = result.counts
  print(f"{result.directory}: {result.units_done} units parsed, {result.units_resumed} already "
        f"done; {result.seconds:.1f} s\n{counts.summary('parse')}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
