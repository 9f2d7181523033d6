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


PROG = "python -m slm_jax.parse"


@cli.options
class ParseOptions:
  """The flags of `python -m slm_jax.parse` (the module docstring)."""

  inputs: tuple[str, ...] = cli.option((), positional=True,
                                       help="Parquet/JSONL/text files or folders")
  output: str | None = cli.option(None, help="output folder (shared by all shards)")
  shard: tuple[int, int] = cli.shard_option("work units")
  backend: str = cli.option("benepar", choices=sorted([*BACKENDS, "slm"]),
                            help="benepar (the paper's parser, the parse extra), slm (slm_jax's "
                            "own parser: works offline, the shipped GUM model by default), "
                            "passthrough (the inputs hold trees), flat")
  model: str | None = cli.option(None, help=f"benepar: a model name in NLTK_DATA or a path "
                                 f"(default {BENEPAR_DEFAULT_MODEL}); slm: a parser folder "
                                 "(default: the shipped model)")
  batch_size: int = cli.option(256, help="sentences per parser call")
  max_words: int = cli.option(200, help="skip (and count) longer sentences")
  text_field: str = cli.option("text")
  id_field: str = cli.option("id")
  input_format: str = cli.option(AUTO, choices=(AUTO, *PARSE_INPUTS.formats))
  output_format: str = cli.option("jsonl", choices=("jsonl", "parquet"))
  cache_dir: str = cli.option("", help="sentence cache folder (default OUTPUT/cache; put it on "
                              "local disk)")
  no_cache: bool = cli.option(False)
  force: bool = cli.option(False, help="redo finished units (the cache still applies)")
  report: str | None = cli.option(None, metavar="OUTPUT",
                                  help="print the merged report of OUTPUT")


def stage_options(options: ParseOptions) -> StageOptions:
  """The parse flags as the stage reads them (also the Beam pipeline's)."""
  return StageOptions(text_field=options.text_field, id_field=options.id_field,
                      input_format=options.input_format, output_format=options.output_format,
                      max_words=options.max_words, batch_sentences=options.batch_size,
                      cache_dir=None if options.no_cache else options.cache_dir,
                      force=options.force)


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


def parse(options: ParseOptions) -> int:
  """Parses this shard of `options.inputs` into `options.output` (or prints `--report`'s merged
  counts); the exit code."""
  if options.report:
    return _report(options.report)
  if not options.inputs or not options.output:
    raise cli.CliError("give INPUT… and --output (or --report OUTPUT)")
  stage = stage_options(options)
  if options.backend == "slm":
    from slm_jax.parse.slm_backend import SlmBackend  # pylint: disable=g-import-not-at-top
    backend = SlmBackend(options.model)
  else:
    backend = make_backend(options.backend, model=options.model, batch_size=options.batch_size)
  if options.backend in ("benepar", "slm"):
    backend.load()  # fail before reading any input when the model is missing
  index, count = options.shard
  with locks.writer_lock(options.output, what="parse", part=f"{index}-of-{count}"):
    claim_shard(options.output, index, count, shard_record(backend, stage))
    result = run_shard(list(options.inputs), options.output, backend, shard=options.shard,
                       options=stage)
  counts = result.counts
  print(f"{result.directory}: {result.units_done} units parsed, {result.units_resumed} already "
        f"done; {result.seconds:.1f} s\n{counts.summary('parse')}")
  return cli.EXIT_OK


def _main(argv: list[str] | None) -> int:
  return parse(cli.parse_options(ParseOptions, argv, prog=PROG, doc=__doc__))


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
