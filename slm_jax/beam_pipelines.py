"""The parse and prepare stages on Apache Beam (the `beam` extra): one pipeline instead of a
shell loop over `--shard=i/n`.

  python -m slm_jax.beam_pipelines parse --output=parsed/fineweb --num_shards=512 \\
      --backend=benepar --workers=8 fineweb-edu/sample/10BT/
  python -m slm_jax.beam_pipelines prepare --output=prepared/fineweb --num_shards=128 \\
      --workers=8 parsed/fineweb
  python -m slm_jax.beam_pipelines prepare --output=gs://… … --runner=DataflowRunner \\
      --project=P --region=R --temp_location=gs://B/tmp --requirements_file=requirements.txt

Every flag of `python -m slm_jax.parse` / `python -m slm_jax.prepare` means the same here
(except `--shard`: the pipeline runs all `--num_shards` shards); the output folder is the one the
shard CLI writes for `--shard=i/n`, i = 0 … n-1 (`slm_jax.parse.beam_parse`,
`slm_jax.data.beam_prepare`). Other flags are Beam pipeline options: `--runner` (default: the
local DirectRunner; `--workers=N` runs it with N worker processes), Dataflow's `--project`,
`--region`, `--temp_location`; FlinkRunner's `--flink_master`; SparkRunner's `--spark_master_url`
(portable runners also need `--environment_type=LOCAL` or a worker image with slm_jax
installed). Folders must be visible to every worker. The stage's counts are Beam counters,
printed at the end; rerunning the same command after a failure finishes the shards (and units)
that did not finish and duplicates no document.
"""

from __future__ import annotations

import sys
import time

from slm_jax import cli
from slm_jax import prepare as prepare_cli
from slm_jax.parse import __main__ as parse_cli


def _parser() -> cli.ArgumentParser:
  parser = cli.ArgumentParser(prog="python -m slm_jax.beam_pipelines", description=__doc__)
  stages = parser.add_subparsers(dest="stage", required=True)
  for name, base in (("parse", parse_cli._parser()), ("prepare", prepare_cli._parser())):  # pylint: disable=protected-access
    sub = stages.add_parser(name, parents=[base], add_help=False, conflict_handler="resolve",
                            description=base.description,
                            formatter_class=base.formatter_class)
    sub.add_argument("--num_shards", type=int, default=64,
                     help="shards of the stage (a few per worker: the engine balances them)")
    sub.add_argument("--workers", type=int, default=1,
                     help="worker processes of the local DirectRunner (other runners: their own "
                     "options)")
  stages.choices["prepare"].add_argument(
      "--redo", action="store_true", help="prepare shards that already have a manifest again")
  return parser


def pipeline_options(extra: list[str], workers: int):
  """Beam options from the flags this CLI does not know; the local DirectRunner by default."""
  from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=g-import-not-at-top
  flags = list(extra)
  if not any(f.startswith("--runner") for f in flags):
    flags.append("--runner=DirectRunner")
    if workers > 1:
      flags += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
  return PipelineOptions(flags)


def _stage_options(args):
  """The parse flags as `StageOptions`, as `python -m slm_jax.parse` reads them."""
  from slm_jax.parse.stage import StageOptions  # pylint: disable=g-import-not-at-top
  return StageOptions(text_field=args.text_field, id_field=args.id_field,
                      input_format=args.input_format, output_format=args.output_format,
                      max_words=args.max_words, batch_sentences=args.batch_size,
                      cache_dir=None if args.no_cache else args.cache_dir, force=args.force)


def _run(args, extra: list[str]) -> tuple[str, object]:
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  if args.shard != (0, 1):
    raise cli.CliError("--shard: the Beam pipeline runs every shard; give --num_shards")
  if not args.inputs or not args.output:
    raise cli.CliError("give INPUT… and --output")
  pipeline = beam.Pipeline(options=pipeline_options(extra, args.workers))
  if args.stage == "parse":
    from slm_jax.parse import beam_parse  # pylint: disable=g-import-not-at-top
    if args.report:
      raise cli.CliError("--report: use python -m slm_jax.parse --report OUTPUT")
    beam_parse.build(pipeline, args.inputs, args.output, args.num_shards, backend=args.backend,
                     model=args.model, batch_size=args.batch_size,
                     options=_stage_options(args))
    namespace = beam_parse.COUNTER_NAMESPACE
  else:
    from slm_jax.data import beam_prepare  # pylint: disable=g-import-not-at-top
    beam_prepare.build(pipeline, args.inputs, args.output, args.num_shards,
                       skip_done=not args.redo, fmt=args.format, lenient=not args.strict,
                       sentences_as_documents=args.sentences_as_documents,
                       records_per_file=args.records_per_file,
                       allow_partial=args.allow_partial)
    namespace = beam_prepare.COUNTER_NAMESPACE
  result = pipeline.run()
  result.wait_until_finish()
  return namespace, result


def _main(argv: list[str] | None) -> int:
  args, extra = _parser().parse_known_args(argv)  # --help works without the beam extra
  from slm_jax.data.beam_prepare import counters  # pylint: disable=g-import-not-at-top
  started = time.time()
  namespace, result = _run(args, extra)
  seconds = time.time() - started
  counts = counters(result, namespace)
  shown = "; ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
  print(f"{args.stage}: {args.num_shards} shards into {args.output} in {seconds:.1f} s "
        f"({args.workers} worker(s)): {shown}")
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
