"""Training input at scale with Grain: prepared documents (or Parquet) → batches with metadata.

  documents ─ seeded global shuffle (a new order every epoch) ─ repeat ─ host shard
  (`[process_index::process_count]` of the global stream, so hosts are disjoint and together see
  every document once per epoch) ─ [worker slice] ─ decode + encode for the configuration
  (`encode_base` ≡ `encode_document` on the record's lin1 base) ─ `PackIterDataset` (whole sentences
  into rows of seq_len with `SentencePacker`) ─ batch ─ `Batch.from_rows` (metadata, targets) ─
  `mp_prefetch` (grain worker processes; each packs its own slice of the host's documents).

Sources: `source="arrayrecord"` reads `python -m slm_jax.prepare` output (`DocumentSource`);
`source="parquet"` streams Parquet files whose text column holds PTB trees (row-group level
shuffle across files + a window shuffle of documents, for users who skip prepare).

State: `TrainIterator.get_state()` is a JSON dict (grain's iterator state; the packer stores a
replay point: the parent state before the document that starts the pending row and the token
offset in it, so a restore re-packs that row exactly). Restoring needs the same worker count,
host layout, source and seed (checked). The packers' accounting travels inside the state, so
`TrainIterator.accounting()` is exact for the batches consumed, across workers and restarts.

No transform reads absl FLAGS (workers may run with unparsed flags); `build_iterator` marks the
flags parsed in the main process when they are not, because grain's multiprocessing reads its
own flags there. Workers are started with "spawn": a script that builds an iterator with
`worker_count > 0` must do so under `if __name__ == "__main__":` (as `slm_jax.main` does), or
each worker re-runs the script.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Iterator, Sequence as SequenceT

import grain
import numpy as np

from slm_jax import ptb
from slm_jax.configurations import Configuration
from slm_jax.data.accounting import Accounting, StageCounts
from slm_jax.data.encode import encode_base, encode_document
from slm_jax.data.loader import Batch
from slm_jax.data.packing import PackStats, Row, SentencePacker, sentence_chunks
from slm_jax.linearize import Sequence
from slm_jax.prepare import DocumentSource, RecordError, decode_record
from slm_jax.tokenizer import Tokenizer

STATE_VERSION = 1
SOURCES = ("arrayrecord", "parquet")
_NO_SHARED_MEMORY = 1 << 62


@dataclasses.dataclass
class EncodedDocument:
  """One document on its way to the packer: ids, or why there are none."""

  sequence: Sequence | None
  read: dict | None = None  # StageCounts JSON of reading it (streamed PTB text), else None
  problem: str | None = None  # reason it was dropped (counted by the packer stage)


class EncodeRecord(grain.transforms.Map):
  """Prepared record bytes → ids of the configuration's linearization."""

  def __init__(self, tokenizer: Tokenizer, linearization: str, seed: int):
    self.tokenizer, self.linearization, self.seed = tokenizer, linearization, seed

  def map(self, element: bytes) -> EncodedDocument:
    try:
      record = decode_record(element)
    except (RecordError, UnicodeDecodeError):
      return EncodedDocument(None, problem="corrupt record")
    return EncodedDocument(encode_base(record.base, self.tokenizer, self.linearization, self.seed))


class ParseAndEncode(grain.transforms.Map):
  """(id, PTB text) → trees (lenient, counted) → `encode_document`."""

  def __init__(self, tokenizer: Tokenizer, linearization: str, seed: int):
    self.tokenizer, self.linearization, self.seed = tokenizer, linearization, seed

  def map(self, element: tuple[str, str]) -> EncodedDocument:
    doc_id, text = element
    report = ptb.ReadReport()
    trees = ptb.parse_trees(text, source=doc_id, lenient=True, report=report)
    counts = StageCounts()
    counts.add_read_report(report)
    if not trees:
      return EncodedDocument(None, counts.to_json(), "empty document")
    sequence = encode_document(trees, self.tokenizer, self.linearization, seed=self.seed)
    return EncodedDocument(sequence, counts.to_json())


class MakeBatch(grain.transforms.Map):
  """Stacked rows → the `Batch` fields (metadata and targets), as a dict of [B, T] arrays."""

  def __init__(self, configuration: Configuration):
    self.configuration = configuration

  def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    batch = Batch.from_rows(element["tokens"], element["kinds"], element["segment"],
                            self.configuration)
    return batch.as_dict()


# --- packing -------------------------------------------------------------------------------------


class PackIterDataset(grain.IterDataset):
  """`EncodedDocument`s → rows `{tokens, kinds, segment}` of whole sentences (`SentencePacker`)."""

  def __init__(self, parent: grain.IterDataset, seq_len: int, pad_id: int):
    super().__init__(parent)
    self.seq_len, self.pad_id = seq_len, pad_id

  def __iter__(self) -> _PackIterator:
    return _PackIterator(self._parent.__iter__(), self.seq_len, self.pad_id)

  def __str__(self) -> str:
    return f"PackIterDataset(seq_len={self.seq_len})"


def _stats_dict(stats: PackStats) -> dict[str, int]:
  return dataclasses.asdict(stats)


class _PackIterator(grain.DatasetIterator):
  """Yields one row per `next`. Its state is the replay point of the row being filled."""

  def __init__(self, parent: grain.DatasetIterator, seq_len: int, pad_id: int):
    super().__init__(parent)
    self.seq_len, self.pad_id = seq_len, pad_id
    self._reset(StageCounts(), PackStats())
    self._replay: dict[str, Any] = self._point(parent.get_state(), None)

  def _reset(self, counts: StageCounts, stats: PackStats) -> None:
    self._counts = counts
    self._packer = SentencePacker(self.seq_len, self.pad_id, np.int32)
    self._packer.stats = stats
    self._rows: Iterator[Row] | None = None  # the packer working on the current document
    self._doc_parent_state: Any = None
    self._doc_start = PackStats()
    self._exhausted = False

  def _point(self, parent_state: Any, offset: int | None, split_pending: bool = False,
             exhausted: bool = False) -> dict[str, Any]:
    return {"parent": parent_state, "offset": offset, "split_pending": split_pending,
            "exhausted": exhausted, "stats": _stats_dict(self._packer.stats),
            "doc_start": _stats_dict(self._doc_start), "pack_counts": self._counts.to_json()}

  def _delta(self) -> PackStats:
    now, start = self._packer.stats, self._doc_start
    return PackStats(**{k: getattr(now, k) - getattr(start, k) for k in _stats_dict(now)})

  def _start_document(self, item: EncodedDocument, parent_state: Any) -> None:
    counts = self._counts
    counts.documents_in += 1
    if item.read is not None:  # sentences read and malformed trees dropped; outs come from packing
      read = StageCounts.from_json(item.read)
      read.sentences_out = 0
      counts.merge(read)
    if item.sequence is None:
      counts.drop("documents", item.problem or "unreadable document")
      return
    if item.read is None:
      counts.sentences_in += len(sentence_chunks(item.sequence))
    counts.tokens_in += len(item.sequence)
    self._doc_parent_state = parent_state
    self._doc_start = dataclasses.replace(self._packer.stats)
    self._rows = self._packer.add(item.sequence)

  def _finish_document(self) -> None:
    delta, counts = self._delta(), self._counts
    counts.sentences_out += delta.sentences - delta.sentences_too_long
    counts.drop("sentences", "longer than a row", delta.sentences_too_long)
    counts.drop("tokens", "sentence longer than a row", delta.tokens_dropped)
    counts.tokens_out += delta.tokens_packed
    if delta.tokens_packed:
      counts.documents_out += 1
    else:
      counts.drop("documents", "every sentence longer than a row")
    self._rows = None

  def _emit(self, row: Row) -> dict[str, np.ndarray]:
    return {"tokens": row.tokens, "kinds": row.kinds, "segment": row.segment}

  def __next__(self) -> dict[str, np.ndarray]:
    while True:
      if self._rows is not None:
        row = next(self._rows, None)
        if row is not None:  # the packer stopped before the sentence that starts the next row
          delta = self._delta()
          self._replay = self._point(self._doc_parent_state,
                                     delta.tokens_packed + delta.tokens_dropped,
                                     split_pending=delta.tokens_packed > 0)
          return self._emit(row)
        self._finish_document()
      if self._exhausted:
        raise StopIteration
      parent_state = self._parent.get_state()
      try:
        item = next(self._parent)
      except StopIteration:
        self._exhausted = True
        last = list(self._packer.flush())
        self._replay = self._point(self._parent.get_state(), None, exhausted=True)
        if last:
          return self._emit(last[0])
        raise StopIteration from None
      self._start_document(item, parent_state)

  def get_state(self) -> dict[str, Any]:
    return json.loads(json.dumps(self._replay))  # a copy, and proof it is JSON

  def set_state(self, state: dict[str, Any]) -> None:
    self._parent.set_state(state["parent"])
    self._reset(StageCounts.from_json(state["pack_counts"]), PackStats(**state["stats"]))
    self._exhausted = bool(state["exhausted"])
    offset = state["offset"]
    if offset is not None:  # re-pack the pending row from its first sentence
      parent_state = self._parent.get_state()
      item = next(self._parent)
      if item.sequence is None or offset >= len(item.sequence):
        raise ValueError("iterator state does not match the data: the document that starts the "
                         "pending row is not where the state says (different data or seed?)")
      rest = _tail(item.sequence, offset)
      stats = self._packer.stats  # add() counts the document again: take that back first
      stats.documents -= 1
      stats.tokens -= len(rest)
      stats.sentences -= len(sentence_chunks(rest))
      stats.documents_split += int(state["split_pending"])
      self._doc_parent_state = parent_state
      self._doc_start = PackStats(**state["doc_start"])
      self._rows = self._packer.add(rest)
    self._replay = json.loads(json.dumps(state))

  def __str__(self) -> str:
    return f"PackIterator(seq_len={self.seq_len})"


def _tail(sequence: Sequence, offset: int) -> Sequence:
  return Sequence(sequence.tokens[offset:], sequence.kinds[offset:], sequence.sentence[offset:],
                  sequence.unit[offset:])


# --- sources -------------------------------------------------------------------------------------


class RawRecords:
  """Record bytes of a `DocumentSource` (decoding happens in the encode step, in the workers)."""

  def __init__(self, source: DocumentSource):
    self.source = source

  def __len__(self) -> int:
    return len(self.source)

  def __getitem__(self, index: int) -> bytes:
    return self.source.raw(index)


class _UnitDocuments(grain.IterDataset):
  """(path, row group) units → (id, text) documents, read one row group at a time."""

  def __init__(self, parent: grain.IterDataset, column: str, id_column: str):
    super().__init__(parent)
    self.column, self.id_column = column, id_column

  def __iter__(self) -> _UnitDocumentsIterator:
    return _UnitDocumentsIterator(self._parent.__iter__(), self.column, self.id_column)


class _UnitDocumentsIterator(grain.DatasetIterator):

  def __init__(self, parent: grain.DatasetIterator, column: str, id_column: str):
    super().__init__(parent)
    self.column, self.id_column = column, id_column
    self._unit_state = parent.get_state()  # parent state before the current unit
    self._rows: list[tuple[str, str]] = []
    self._row = 0

  def _load(self, unit) -> None:
    from slm_jax.parse.readers import read_parquet_column  # pylint: disable=g-import-not-at-top
    path, group = unit
    texts, ids = read_parquet_column(path, group, self.column, self.id_column)
    self._rows = [(str(ids[k]) if ids is not None else f"{path}:{group}:{k}", text or "")
                  for k, text in enumerate(texts)]

  def __next__(self) -> tuple[str, str]:
    while self._row >= len(self._rows):
      self._unit_state = self._parent.get_state()
      self._load(next(self._parent))
      self._row = 0
    self._row += 1
    return self._rows[self._row - 1]

  def get_state(self) -> dict[str, Any]:
    return {"unit": self._unit_state, "row": self._row}

  def set_state(self, state: dict[str, Any]) -> None:
    self._parent.set_state(state["unit"])
    self._unit_state, self._rows, self._row = state["unit"], [], 0
    if state["row"]:
      self._load(next(self._parent))
      self._row = state["row"]


def parquet_units(paths: SequenceT[str | os.PathLike]) -> list[tuple[str, int]]:
  """(file, row group) of every row group of the Parquet files/folders, in sorted path order."""
  from slm_jax.parse import readers  # pylint: disable=g-import-not-at-top
  files = [path for path, _ in readers.list_files(paths, "parquet")]
  return [(path, group) for path in files
          for group in range(len(readers.parquet_row_groups(path)))]


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
  process_index: int = 0
  process_count: int = 1

  def __post_init__(self):
    if not 0 <= self.process_index < self.process_count:
      raise ValueError(f"process_index {self.process_index} not in [0, {self.process_count})")
    if self.batch_size < 1 or self.seq_len < 2:
      raise ValueError(f"batch_size {self.batch_size} and seq_len {self.seq_len} must be ≥ 1, 2")


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
  return _pack_and_batch(ds, tokenizer, configuration, options)


def parquet_dataset(paths: SequenceT[str | os.PathLike], tokenizer: Tokenizer,
                    configuration: Configuration, options: PipelineOptions,
                    units: list[tuple[str, int]] | None = None) -> grain.IterDataset:
  units = parquet_units(paths) if units is None else units
  if not units:
    raise ValueError(f"no row groups in the Parquet files under {', '.join(map(str, paths))}")
  ds = _epochs_and_hosts(grain.MapDataset.source(units), options)
  ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
  ds = _UnitDocuments(ds, options.parquet_column, options.parquet_id_column)
  if options.window_shuffle > 1:
    ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=options.window_shuffle,
                                                     seed=options.shuffle_seed)
  ds = ds.map(ParseAndEncode(tokenizer, configuration.linearization, options.linearization_seed))
  return _pack_and_batch(ds, tokenizer, configuration, options)


def _pack_and_batch(ds: grain.IterDataset, tokenizer: Tokenizer, configuration: Configuration,
                    options: PipelineOptions) -> grain.IterDataset:
  ds = PackIterDataset(ds, options.seq_len, tokenizer.pad_id)
  ds = ds.batch(options.batch_size, drop_remainder=True)
  ds = ds.map(MakeBatch(configuration))
  if options.worker_count > 0:
    # Batches travel pickled through the worker queues (about 1 ms for 8×2048 rows), not in
    # shared memory blocks that outlive a closed iterator.
    ds = grain.experimental.WithOptionsIterDataset(
        ds, grain.experimental.DatasetOptions(min_shm_size=_NO_SHARED_MEMORY))
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(
        num_workers=options.worker_count, per_worker_buffer_size=max(1, options.prefetch)))
  elif options.prefetch > 0:
    ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=options.prefetch)
  return ds


# --- the training iterator -----------------------------------------------------------------------


def _ensure_absl_flags_parsed() -> None:
  """Grain's multiprocessing reads its absl flags in the main process; outside an absl app
  (tests, notebooks, benchmarks) they are unparsed, so take the defaults."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


def _pack_states(state: Any) -> Iterator[dict]:
  """Every packer replay point inside a (nested) grain iterator state."""
  if isinstance(state, dict):
    if "pack_counts" in state and "offset" in state:
      yield state
      return
    for value in state.values():
      yield from _pack_states(value)
  elif isinstance(state, list):
    for value in state:
      yield from _pack_states(value)


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
    for point in _pack_states(self._iterator.get_state()):
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
  if not paths:
    raise ValueError(f"data.source={source!r} needs data.paths")
  if source == "arrayrecord":
    documents = DocumentSource(paths)
    dataset = arrayrecord_dataset(documents, tokenizer, configuration, options)
    accounting, size = documents.accounting(), len(documents)
    what = (f"prepared documents {paths}: {len(documents):,} documents in "
            f"{len(documents.files)} ArrayRecord files (global shuffle)")
  elif source == "parquet":
    units = parquet_units(paths)
    dataset = parquet_dataset(paths, tokenizer, configuration, options, units)
    accounting, size = None, len(units)
    what = (f"Parquet {paths}: {len(units)} row groups, column {options.parquet_column!r} "
            f"(row-group shuffle + window shuffle of {options.window_shuffle} documents)")
  else:
    raise ValueError(f"unknown data.source {source!r} for the grain pipeline; expected one of "
                     f"{', '.join(SOURCES)}")
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
  """The trainer's entry point: `cfg.data.source` in SOURCES, batches of
  `cfg.train.global_batch // process_count` rows on this host.

  Reads cfg.data.{source, paths, seq_len, linearization_seed, shuffle_seed, worker_count,
  prefetch, window_shuffle, parquet_column} and cfg.train.global_batch.
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
      seq_len=int(data.seq_len), batch_size=global_batch // process_count,
      linearization_seed=int(data.linearization_seed), shuffle_seed=int(data.shuffle_seed),
      worker_count=int(data.worker_count), prefetch=int(data.prefetch),
      window_shuffle=int(data.window_shuffle), parquet_column=str(data.parquet_column),
      process_index=process_index, process_count=process_count)
  return build_iterator(str(data.source), [pathlib.Path(p) for p in data.paths], tokenizer,
                        configuration, options)
