"""Training input at scale with Grain: prepared documents (or Parquet) → batches with metadata.

  documents ─ seeded global shuffle (a new order every epoch) ─ repeat ─ host shard
  (`[process_index::process_count]` of the global stream, so hosts are disjoint and together see
  every document once per epoch) ─ [worker slice] ─ decode + encode for the configuration
  (`encode_base` ≡ `encode_document` on the record's lin1 base) ─ `PackIterDataset` (whole sentences
  into rows of seq_len with `SentencePacker`) ─ batch ─ `Batch.from_rows` (metadata, targets) ─
  `mp_prefetch` (grain worker processes; each packs its own slice of the host's documents).

Sources (`stream_sources`): `source="arrayrecord"` reads `python -m slm_jax.prepare` output
(`DocumentSource`); `source="tfds"` reads the same records from a TFDS build of the corpus
(`tfds_corpus.TfdsDocuments`: `tfds.data_source`, no TensorFlow) through the same shuffle, host
sharding, packing and state; `source="parquet"` streams Parquet files whose text column holds
PTB trees (row-group level shuffle across files + a window shuffle of documents, for users who
skip prepare). This module assembles them with the packer (`pack_iter`) into the `TrainIterator`.

State: `TrainIterator.get_state()` is a JSON dict (grain's iterator state, with the packer's
replay points, see `pack_iter`). Restoring needs the same worker count, host layout, source and
seed (checked). The packers' accounting travels inside the state, so
`TrainIterator.accounting()` is exact for the batches consumed, across workers and restarts.

No transform reads absl FLAGS (workers may run with unparsed flags); `build_iterator` marks the
flags parsed in the main process when they are not, because grain's multiprocessing reads its
own flags there. Workers exit with their parent (`exit_with_parent`: a trainer killed with
SIGKILL leaves no orphans). Workers are started with "spawn": a script that builds an iterator with
`worker_count > 0` must do so under `if __name__ == "__main__":` (as `slm_jax.main` does), or
each worker re-runs the script.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import threading
import time
from typing import Any, Sequence as SequenceT

import grain
import numpy as np

from slm_jax.configurations import Configuration
from slm_jax.data import parquet
from slm_jax.data.accounting import Accounting, StageCounts
from slm_jax.data.config import MIN_SEQ_LEN
from slm_jax.data.documents import DocumentSource
from slm_jax.data.loader import Batch
from slm_jax.data.pack_iter import PackIterDataset, pack_states
from slm_jax.data.packing import PackStats
from slm_jax.data.sources import STREAMED, open_documents
from slm_jax.data.stream_sources import (EncodeRecord, ParseAndEncode, RawRecords, UnitDocuments,
                                         parquet_units)
from slm_jax.tokenizer import Tokenizer

STATE_VERSION = 1
_NO_SHARED_MEMORY = 1 << 62


class MakeBatch(grain.transforms.Map):
  """Stacked rows → the `Batch` fields (metadata and targets), as a dict of [B, T] arrays."""

  def __init__(self, configuration: Configuration):
    self.configuration = configuration

  def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    batch = Batch.from_rows(element["tokens"], element["kinds"], element["segment"],
                            self.configuration)
    return batch.as_dict()


# --- assembly ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
  seq_len: int
  batch_size: int  # rows per batch on this host
  linearization_seed: int = 0
  shuffle_seed: int = 0
  shuffle: bool = True
  num_epochs: int | None = None  # None: repeat forever (training)
  worker_count: int = 0  # grain worker processes (0: in this process)
  prefetch: int = 2  # batches buffered per worker (or by a thread when worker_count == 0)
  read_threads: int = 4  # threads fetching records in each process (I/O latency)
  window_shuffle: int = 1_000  # Parquet: documents per shuffle window (0: off)
  parquet_column: str = "text"
  parquet_id_column: str = "id"
  tfds_name: str = ""  # source=tfds: dataset[/config][:version], e.g. slm_corpus/gum
  tfds_dir: str = ""  # source=tfds: the TFDS data_dir ("" = TFDS's default)
  process_index: int = 0
  process_count: int = 1

  def __post_init__(self):
    if not 0 <= self.process_index < self.process_count:
      raise ValueError(f"process_index {self.process_index} not in [0, {self.process_count})")
    if self.batch_size < 1 or self.seq_len < MIN_SEQ_LEN:
      raise ValueError(f"batch_size {self.batch_size} must be ≥ 1 and seq_len {self.seq_len} "
                       f"≥ {MIN_SEQ_LEN} (data.seq_len's lower bound)")


def _epochs_and_hosts(ds: grain.MapDataset, options: PipelineOptions) -> grain.MapDataset:
  if options.shuffle:
    ds = ds.shuffle(seed=options.shuffle_seed)  # reseeded every epoch by repeat
  ds = ds.repeat(options.num_epochs)
  return ds[options.process_index::options.process_count]


def arrayrecord_dataset(source: DocumentSource, tokenizer: Tokenizer,
                        configuration: Configuration,
                        options: PipelineOptions) -> grain.IterDataset:
  ds = _epochs_and_hosts(grain.MapDataset.source(RawRecords(source)), options)
  ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=options.read_threads,
                                            prefetch_buffer_size=64))
  ds = ds.map(EncodeRecord(tokenizer, configuration.linearization, options.linearization_seed))
  return _pack_and_batch(ds, tokenizer, configuration, options, len(source))


def parquet_dataset(paths: SequenceT[str | os.PathLike], tokenizer: Tokenizer,
                    configuration: Configuration, options: PipelineOptions,
                    units: list[tuple[str, int]] | None = None) -> grain.IterDataset:
  units = parquet_units(paths) if units is None else units
  if not units:
    raise ValueError(f"no row groups in the Parquet files under {', '.join(map(str, paths))}")
  ds = _epochs_and_hosts(grain.MapDataset.source(units), options)
  ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
  ds = UnitDocuments(ds, options.parquet_column, options.parquet_id_column)
  if options.window_shuffle > 1:
    ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=options.window_shuffle,
                                                     seed=options.shuffle_seed)
  ds = ds.map(ParseAndEncode(tokenizer, configuration.linearization, options.linearization_seed))
  rows = {path: parquet.row_groups(path) for path in {path for path, _ in units}}
  return _pack_and_batch(ds, tokenizer, configuration, options,
                         sum(rows[path][group] for path, group in units))


def _pack_and_batch(ds: grain.IterDataset, tokenizer: Tokenizer, configuration: Configuration,
                    options: PipelineOptions, documents: int) -> grain.IterDataset:
  """Packing, batching, metadata and prefetch; `documents` in one pass over the source (a pass
  that packs nothing stops with `NoRowsError` instead of looping forever)."""
  ds = PackIterDataset(ds, options.seq_len, tokenizer.pad_id, epoch_documents=documents + 1)
  ds = ds.batch(options.batch_size, drop_remainder=True)
  ds = ds.map(MakeBatch(configuration))
  if options.worker_count > 0:
    # Batches travel pickled through the worker queues (about 1 ms for 8×2048 rows), not in
    # shared memory blocks that outlive a closed iterator.
    ds = grain.experimental.WithOptionsIterDataset(
        ds, grain.experimental.DatasetOptions(min_shm_size=_NO_SHARED_MEMORY))
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(
        num_workers=options.worker_count, per_worker_buffer_size=max(1, options.prefetch)),
        worker_init_fn=functools.partial(exit_with_parent, os.getpid()))
  elif options.prefetch > 0:
    ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=options.prefetch)
  return ds


PARENT_POLL_S = 1.0


def exit_with_parent(parent_pid: int, worker_index: int = 0, worker_count: int = 1) -> None:
  """Runs in each Grain worker process: a daemon thread ends the worker (exit 0) once its parent
  is gone. Grain's workers otherwise outlive a trainer killed with SIGKILL for good, blocked on a
  full queue (no atexit, no signal reaches them); polling the parent pid is portable, unlike
  PR_SET_PDEATHSIG, which fires when the *thread* that started the worker ends."""
  del worker_index, worker_count

  def watch() -> None:
    while os.getppid() == parent_pid:
      time.sleep(PARENT_POLL_S)
    os._exit(0)  # pylint: disable=protected-access  # no cleanup left to do for an orphan

  threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


# --- the training iterator -----------------------------------------------------------------------


def _ensure_absl_flags_parsed() -> None:
  """Grain's multiprocessing reads its absl flags in the main process; outside an absl app
  (tests, notebooks, benchmarks) they are unparsed, so take the defaults."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


class TrainIterator:
  """Yields `Batch`es; `get_state()`/`set_state()` exchange a JSON dict (stored by the trainer)."""

  def __init__(self, dataset: grain.IterDataset, identity: dict[str, Any],
               source_accounting: Accounting | None = None, paths: SequenceT[str] = ()):
    self._dataset = dataset
    self.identity = identity
    self.paths = list(paths)
    self._source_accounting = source_accounting or Accounting()
    self._iterator = iter(dataset)

  def __iter__(self) -> TrainIterator:
    return self

  def __next__(self) -> Batch:
    return Batch(**next(self._iterator))

  def get_state(self) -> dict[str, Any]:
    return {"version": STATE_VERSION, **self.identity, "paths": self.paths,
            "grain": self._iterator.get_state()}

  def set_state(self, state: dict[str, Any]) -> None:
    if state.get("version") != STATE_VERSION:
      raise ValueError(f"data iterator state version {state.get('version')!r}; this slm_jax "
                       f"writes version {STATE_VERSION}")
    theirs = {k: state.get(k) for k in self.identity}
    if theirs != self.identity:
      diff = {k: (theirs[k], v) for k, v in self.identity.items() if theirs[k] != v}
      raise ValueError(f"data iterator state was saved with a different pipeline (saved, now): "
                       f"{diff}; restore with the same data.*, worker count and host layout")
    self._iterator.set_state(state["grain"])

  def accounting(self) -> Accounting:
    """The prepare-time accounting of the source plus this host's pipeline counts so far."""
    total = Accounting().merge(self._source_accounting)
    pipeline = total.stage("pipeline")
    for point in pack_states(self._iterator.get_state()):
      pipeline.merge(StageCounts.from_json(point["pack_counts"]))
      stats = PackStats(**point["stats"])
      pipeline.notes["rows"] += stats.rows
      pipeline.notes["padding tokens"] += stats.padding
      pipeline.notes["documents split across rows"] += stats.documents_split
    return total

  def close(self) -> None:
    close = getattr(self._iterator, "close", None)
    if close is not None:
      close()


def build_iterator(source: str, paths: SequenceT[str | os.PathLike], tokenizer: Tokenizer,
                   configuration: Configuration,
                   options: PipelineOptions) -> tuple[TrainIterator, str]:
  """The training iterator over `paths` and a description of it."""
  _ensure_absl_flags_parsed()
  paths = [str(p) for p in paths]
  if not paths and source != "tfds":
    raise ValueError(f"data.source={source!r} needs data.paths")
  if source in ("arrayrecord", "tfds"):
    documents = open_documents(source, paths, options.tfds_name, options.tfds_dir)
    dataset = arrayrecord_dataset(documents, tokenizer, configuration, options)
    accounting, size = documents.accounting(), len(documents)
    where = paths if source == "arrayrecord" else f"TFDS {options.tfds_name} ({documents.folder})"
    paths = paths or [str(documents.folder)]
    what = (f"prepared documents {where}: {len(documents):,} documents in "
            f"{len(documents.files)} ArrayRecord files (global shuffle)")
  elif source == "parquet":
    units = parquet_units(paths)
    dataset = parquet_dataset(paths, tokenizer, configuration, options, units)
    accounting, size = None, len(units)
    what = (f"Parquet {paths}: {len(units)} row groups, column {options.parquet_column!r} "
            f"(row-group shuffle + window shuffle of {options.window_shuffle} documents)")
  else:
    raise ValueError(f"unknown data.source {source!r} for the grain pipeline; expected one of "
                     f"{', '.join(STREAMED)}")
  # What a saved state must agree with (paths may move; the data and its order may not).
  identity = {"source": source, "size": size, "shuffle_seed": options.shuffle_seed,
              "linearization": configuration.linearization, "seq_len": options.seq_len,
              "batch_size": options.batch_size, "worker_count": options.worker_count,
              "process_index": options.process_index, "process_count": options.process_count}
  iterator = TrainIterator(dataset, identity, accounting, paths)
  describe = (f"grain: {what}; host {options.process_index}/{options.process_count}; "
              f"shuffle seed {options.shuffle_seed}; {configuration.linearization} packed into "
              f"rows of {options.seq_len}, {options.batch_size} rows per host batch; "
              f"{options.worker_count} worker processes, prefetch {options.prefetch}")
  if accounting is not None and accounting.stages:
    describe += "\n" + accounting.summary()
  return iterator, describe


def make_train_iterator(cfg: Any, tokenizer: Tokenizer, configuration: Configuration, *,
                        process_index: int | None = None,
                        process_count: int | None = None) -> tuple[TrainIterator, str]:
  """The trainer's entry point: `cfg.data.source` in `sources.STREAMED`, batches of
  `cfg.train.global_batch // process_count` rows on this host.

  The one mapping from the run's typed `data` section (`slm_jax.data.config.DataSection`) and
  `train.global_batch` to `PipelineOptions`.
  """
  if process_index is None or process_count is None:
    import jax  # pylint: disable=g-import-not-at-top
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  data = cfg.data
  global_batch = int(cfg.train.global_batch)
  if global_batch % process_count:
    raise ValueError(f"train.global_batch={global_batch} is not divisible by the "
                     f"{process_count} hosts")
  options = PipelineOptions(
      seq_len=data.seq_len, batch_size=global_batch // process_count,
      linearization_seed=data.linearization_seed, shuffle_seed=data.shuffle_seed,
      worker_count=data.worker_count, prefetch=data.prefetch,
      window_shuffle=data.window_shuffle, parquet_column=data.parquet_column,
      tfds_name=getattr(data, "tfds_name", ""), tfds_dir=getattr(data, "tfds_dir", ""),
      process_index=process_index, process_count=process_count)
  return build_iterator(data.source, [pathlib.Path(p) for p in data.paths], tokenizer,
                        configuration, options)
