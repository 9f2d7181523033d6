"""The parse stage on Apache Beam: raw documents (Parquet, JSONL, text) → sentences → parser →
documents of PTB trees.

The pipeline is the shard loop of `python -m slm_jax.parse` handed to a distributed engine:
`Create(shard indices 0 … n-1) → Reshuffle → ParseShard`, where `ParseShard` runs
`stage.run_shard(inputs, output, backend, shard=(i, n))` — the same work units
(`readers.shard_units`), sentence splitting, sentence cache, parser batches, SPEC §1
normalization and atomic part files — so the output folder is the one `--shard=i/n` for every i
writes, byte for byte (`shard-i-of-n/part-….jsonl` + reports). Each worker builds its parser
backend once (`setup`) and keeps its shard's SQLite sentence cache, as a GPU host of the shard CLI
does. The shard counts become Beam metrics (`COUNTER_NAMESPACE`).

What made a shard is recorded next to it (`identity.json`, `stage.claim_shard`, as the shard CLI
does) and every shard folder is checked before the pipeline starts: an output holding another
backend's or other options' shards is refused naming the differing keys, never counted as done.
Retries and reruns never duplicate a document: part files and their reports are written
atomically and a unit whose report exists is skipped (counted from its report), so a shard run
again after a failure parses only the units that did not finish. Choose `num_shards` a few times
the number of workers, so that the engine can balance them.

Runners and folders: see `slm_jax.data.beam_prepare`; `slm_jax.beam_pipelines` is the command
line.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from slm_jax.data.beam_prepare import report_counters
from slm_jax.parse.backends import make_backend
from slm_jax.data.parse_reports import shard_dir
from slm_jax.parse.stage import StageOptions, check_shard, claim_shard, run_shard, shard_record

COUNTER_NAMESPACE = "slm_jax.parse"


class ParseShard(beam.DoFn):
  """Shard index → its shard folder (after `stage.run_shard`); one backend per worker."""

  def __init__(self, inputs: Sequence[str], output: str, count: int, backend: str,
               model: str | None, batch_size: int, options: StageOptions):
    super().__init__()
    self.inputs, self.output, self.count = list(inputs), output, count
    self.backend_name, self.model, self.batch_size = backend, model, batch_size
    self.options = dataclasses.asdict(options)
    self._backend = None

  def setup(self) -> None:
    self._backend = make_backend(self.backend_name, model=self.model, batch_size=self.batch_size)

  def process(self, index: int) -> Iterator[str]:
    options = StageOptions(**self.options)
    claim_shard(self.output, index, self.count, shard_record(self._backend, options))
    result = run_shard(self.inputs, self.output, self._backend, shard=(index, self.count),
                       options=options)
    report_counters(COUNTER_NAMESPACE, result.counts)
    Metrics.counter(COUNTER_NAMESPACE, "units parsed").inc(result.units_done)
    Metrics.counter(COUNTER_NAMESPACE, "units already done").inc(result.units_resumed)
    yield str(result.directory)


def build(pipeline: Any, inputs: Sequence[str], output: str, num_shards: int, *,
          backend: str = "benepar", model: str | None = None, batch_size: int = 256,
          options: StageOptions = StageOptions()) -> Any:
  """Adds the parse stage to `pipeline`; returns the PCollection of shard folders."""
  if num_shards < 1:
    raise ValueError(f"--num_shards={num_shards} must be ≥ 1")
  made = make_backend(backend, model=model, batch_size=batch_size)  # an unknown one fails here
  record = shard_record(made, options)
  for index in range(num_shards):  # another run's shard is refused here, in one line
    check_shard(shard_dir(output, index, num_shards), record)
  return (pipeline
          | "shards" >> beam.Create(list(range(num_shards)))
          | "spread" >> beam.Reshuffle()
          | "parse" >> beam.ParDo(ParseShard(inputs, output, num_shards, backend, model,
                                             batch_size, options)))
