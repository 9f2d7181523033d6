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


@cli.options
class BeamStageOptions:
  """The flags both stages add to their shard CLI's."""

  num_shards: int = cli.option(64, help="shards of the stage (a few per worker: the engine "
                               "balances them)")
  workers: int = cli.option(1, help="worker processes of the local DirectRunner (other runners:"
                            " their own options)")


@cli.options
class BeamParseOptions(BeamStageOptions, parse_cli.ParseOptions):
  """`parse`: every flag of `python -m slm_jax.parse`, run as one pipeline."""


@cli.options
class BeamPrepareOptions(BeamStageOptions, prepare_cli.PrepareOptions):
  """`prepare`: every flag of `python -m slm_jax.prepare`, run as one pipeline."""

  redo: bool = cli.option(False, help="prepare shards that already have a manifest again")


COMMANDS = {"parse": (BeamParseOptions, parse_cli.__doc__),
            "prepare": (BeamPrepareOptions, prepare_cli.__doc__)}


def pipeline_options(extra: list[str], workers: int):
  """Beam options from the flags this CLI does not know; the local DirectRunner by default."""
  from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=g-import-not-at-top
  flags = list(extra)
  if not any(f.startswith("--runner") for f in flags):
    flags.append("--runner=DirectRunner")
    if workers > 1:
      flags += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
  return PipelineOptions(flags)


def run_stage(stage: str, options: BeamParseOptions | BeamPrepareOptions,
              extra: list[str]) -> tuple[str, object]:
  """Runs `stage` (parse or prepare) as one Beam pipeline (`extra`: its pipeline options);
  (the counters' namespace, the finished result)."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  if options.shard != (0, 1):
    raise cli.CliError("--shard: the Beam pipeline runs every shard; give --num_shards")
  if not options.inputs or not options.output:
    raise cli.CliError("give INPUT… and --output")
  pipeline = beam.Pipeline(options=pipeline_options(extra, options.workers))
  if stage == "parse":
    from slm_jax.parse import beam_parse  # pylint: disable=g-import-not-at-top
    if options.report:
      raise cli.CliError("--report: use python -m slm_jax.parse --report OUTPUT")
    beam_parse.build(pipeline, list(options.inputs), options.output, options.num_shards,
                     backend=options.backend, model=options.model,
                     batch_size=options.batch_size, options=parse_cli.stage_options(options))
    namespace = beam_parse.COUNTER_NAMESPACE
  else:
    from slm_jax.data import beam_prepare  # pylint: disable=g-import-not-at-top
    beam_prepare.build(pipeline, list(options.inputs), options.output, options.num_shards,
                       skip_done=not options.redo, fmt=options.format,
                       lenient=not options.strict,
                       sentences_as_documents=options.sentences_as_documents,
                       records_per_file=options.records_per_file,
                       allow_partial=options.allow_partial)
    namespace = beam_prepare.COUNTER_NAMESPACE
  result = pipeline.run()
  result.wait_until_finish()
  return namespace, result


def _main(argv: list[str] | None) -> int:
  stage, options, extra = cli.parse_command(  # --help works without the beam extra
      COMMANDS, argv, prog="python -m slm_jax.beam_pipelines", doc=__doc__, known=True)
  from slm_jax.data.beam_prepare import counters  # pylint: disable=g-import-not-at-top
  started = time.time()
  namespace, result = run_stage(stage, options, extra)
  seconds = time.time() - started
  counts = counters(result, namespace)
  shown = "; ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
  print(f"{stage}: {options.num_shards} shards into {options.output} in {seconds:.1f} s "
        f"({options.workers} worker(s)): {shown}")
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
