"""The prepare stage on Apache Beam: documents of trees → ArrayRecord shards + manifests.

The pipeline is the shard loop of `python -m slm_jax.prepare` handed to a distributed engine:
`Create(shard indices 0 … n-1) → Reshuffle → PrepareShard`, where `PrepareShard` runs
`documents.prepare(paths, output, shard=(i, n))` — the same function, reading the same input files
(`inputs.discover`, sorted, dealt round-robin), so shard i's files and manifest are byte for byte
those of `python -m slm_jax.prepare --shard=i/n`. The prepare counts become Beam metrics
(`COUNTER_NAMESPACE`: documents/sentences/tokens in and out, `dropped <unit>: <reason>`).

Retries and reruns never duplicate a document: a shard's files are written under temporary names
and renamed when complete, a failed attempt removes what it wrote, and a shard run again replaces
its own files. `skip_done` (default) skips shards whose manifest is already there, so a rerun
after a failure only does the shards that did not finish.

Runners: anything Beam runs on (`--runner=DirectRunner --direct_num_workers=8
--direct_running_mode=multi_processing` locally; Dataflow, Flink, Spark with their options); the
input and output folders must be visible to every worker (a shared filesystem or a bucket mounted
with gcsfuse), as for the shard CLI. `slm_jax.beam_pipelines` is the command line.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Iterator, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from slm_jax.data import documents
from slm_jax.data.accounting import StageCounts

COUNTER_NAMESPACE = "slm_jax.prepare"


def report_counters(namespace: str, counts: StageCounts) -> None:
  """A stage's counts as Beam counters (summed over shards and workers by the runner)."""
  for name, value in counts.to_json().items():
    if isinstance(value, int):
      Metrics.counter(namespace, name).inc(value)
  for unit, reasons in counts.dropped.items():
    for reason, count in reasons.items():
      Metrics.counter(namespace, f"dropped {unit}: {reason}").inc(count)
  for note, count in counts.notes.items():
    Metrics.counter(namespace, note).inc(count)


def counters(result: Any, namespace: str) -> dict[str, int]:
  """The committed counters of `namespace` in a finished pipeline's result."""
  query = result.metrics().query(MetricsFilter().with_namespace(namespace))
  return {c.key.metric.name: int(c.committed) for c in query["counters"]}


def _done(output: pathlib.Path, index: int, count: int) -> bool:
  """Shard `index` has a readable manifest whose files are all there."""
  path = output / documents.manifest_name(index, count)
  try:
    manifest = json.loads(path.read_text())
  except (OSError, json.JSONDecodeError):
    return False
  return all((output / f["path"]).is_file() for f in manifest.get("files", []))


class PrepareShard(beam.DoFn):
  """Shard index → its manifest path (after `documents.prepare`)."""

  def __init__(self, paths: Sequence[str], output: str, count: int, skip_done: bool = True,
               **prepare_options):
    super().__init__()
    self.paths, self.output, self.count = list(paths), output, count
    self.skip_done, self.options = skip_done, prepare_options

  def process(self, index: int) -> Iterator[str]:
    output = pathlib.Path(self.output)
    if self.skip_done and _done(output, index, self.count):
      Metrics.counter(COUNTER_NAMESPACE, "shards already done").inc()
      yield str(output / documents.manifest_name(index, self.count))
      return
    result = documents.prepare(self.paths, output, shard=(index, self.count), **self.options)
    report_counters(COUNTER_NAMESPACE, result.counts)
    yield str(result.manifest)


def build(pipeline: Any, paths: Sequence[str], output: str, num_shards: int, *,
          skip_done: bool = True, **prepare_options) -> Any:
  """Adds the prepare stage to `pipeline`; returns the PCollection of manifest paths."""
  if num_shards < 1:
    raise ValueError(f"--num_shards={num_shards} must be ≥ 1")
  return (pipeline
          | "shards" >> beam.Create(list(range(num_shards)))
          | "spread" >> beam.Reshuffle()
          | "prepare" >> beam.ParDo(PrepareShard(paths, output, num_shards, skip_done,
                                                 **prepare_options)))
