"""The resumable packer of the Grain pipeline: `EncodedDocument`s → rows of whole sentences.

`PackIterDataset` wraps `SentencePacker` (SPEC §8: whole sentences per row, a sentence longer
than a row dropped and counted) as a grain `IterDataset`. Its iterator state is a JSON replay
point: the parent state before the document that starts the pending row and the token offset in
it, so a restore re-packs that row exactly. The packer's accounting (`StageCounts` of what came
in, was packed and was dropped, plus `PackStats`) travels inside that state, so the accounting
of the batches consumed is exact across workers and restarts (`pack_states` finds every replay
point in a nested grain state).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator

import grain
import numpy as np

from slm_jax.data.accounting import StageCounts
from slm_jax.data.packing import PackStats, Row, SentencePacker, sentence_chunks
from slm_jax.linearize import Sequence


@dataclasses.dataclass
class EncodedDocument:
  """One document on its way to the packer: ids, or why there are none."""

  sequence: Sequence | None
  read: dict | None = None  # StageCounts JSON of reading it (streamed PTB text), else None
  problem: str | None = None  # why it was dropped, unless `read` already counts the drop


class NoRowsError(ValueError):
  """A whole pass over the documents packed nothing (every sentence longer than a row)."""


class PackIterDataset(grain.IterDataset):
  """`EncodedDocument`s → rows `{tokens, kinds, segment}` of whole sentences (`SentencePacker`).

  `epoch_documents` (the documents one pass over this stream holds at most): after that many
  documents in a row without a packed token, an endless stream would never yield a row, so
  the iterator raises `NoRowsError` with the drop counts instead of hanging.
  """

  def __init__(self, parent: grain.IterDataset, seq_len: int, pad_id: int,
               epoch_documents: int | None = None):
    super().__init__(parent)
    self.seq_len, self.pad_id, self.epoch_documents = seq_len, pad_id, epoch_documents

  def __iter__(self) -> _PackIterator:
    return _PackIterator(self._parent.__iter__(), self.seq_len, self.pad_id,
                         self.epoch_documents)

  def __str__(self) -> str:
    return f"PackIterDataset(seq_len={self.seq_len})"


def _stats_dict(stats: PackStats) -> dict[str, int]:
  return dataclasses.asdict(stats)


class _PackIterator(grain.DatasetIterator):
  """Yields one row per `next`. Its state is the replay point of the row being filled."""

  def __init__(self, parent: grain.DatasetIterator, seq_len: int, pad_id: int,
               epoch_documents: int | None = None):
    super().__init__(parent)
    self.seq_len, self.pad_id, self.epoch_documents = seq_len, pad_id, epoch_documents
    self._barren = 0  # documents in a row that packed no token
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
    read_dropped = 0
    if item.read is not None:  # sentences read and malformed trees dropped; outs come from packing
      read = StageCounts.from_json(item.read)
      read.sentences_out = 0
      read_dropped = read.dropped_total("documents")
      counts.merge(read)
    if item.sequence is None:
      if not read_dropped:  # the reader did not count the drop: count it here
        counts.drop("documents", item.problem or "unreadable document")
      self._barren += 1
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
      self._barren = 0
    else:
      counts.drop("documents", "every sentence longer than a row")
      self._barren += 1
    self._rows = None

  def _check_progress(self) -> None:
    if self.epoch_documents is not None and self._barren > self.epoch_documents:
      summary = "; ".join(line.strip() for line in self._counts.summary().splitlines())
      raise NoRowsError(f"no rows: the corpus is empty or every sentence is longer than "
                        f"seq_len={self.seq_len} ({self._barren:,} documents in a row packed "
                        f"nothing; {summary})")

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
      self._check_progress()
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


def pack_states(state: Any) -> Iterator[dict]:
  """Every packer replay point inside a (nested) grain iterator state."""
  if isinstance(state, dict):
    if "pack_counts" in state and "offset" in state:
      yield state
      return
    for value in state.values():
      yield from pack_states(value)
  elif isinstance(state, list):
    for value in state:
      yield from pack_states(value)
