"""Pack linearized documents into fixed-length rows of whole sentences (SPEC §8).

A document `<s> s1 s2 … </s>` is cut only between sentences (BOS travels with the first sentence,
EOS with the last). Sentences are placed in order; when the next sentence does not fit in the row,
the row is padded and the document continues in the next row as a new segment. A sentence longer
than a row is dropped and counted. Every row carries tokens, kinds and segment ids (1, 2, … per
document piece, 0 = padding); `slm_jax.structure.row_metadata` derives the rest.

This is the simple in-memory packer used by tests, `explain` and small runs; the Grain pipeline
reuses `SentencePacker` inside its packing transform.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

import numpy as np

from slm_jax.kinds import Kind
from slm_jax.linearize import Sequence


@dataclasses.dataclass
class PackStats:
  """What went in, what came out, and what was dropped (nothing disappears silently)."""

  documents: int = 0
  sentences: int = 0
  tokens: int = 0
  rows: int = 0
  tokens_packed: int = 0
  padding: int = 0
  documents_split: int = 0  # documents continued in a later row
  sentences_too_long: int = 0  # dropped: longer than a row
  tokens_dropped: int = 0

  def merge(self, other: "PackStats") -> None:
    for field in dataclasses.fields(self):
      setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

  def summary(self) -> str:
    fill = self.tokens_packed / max(1, self.rows * (self.tokens_packed + self.padding)
                                    // max(1, self.rows))
    return (f"{self.documents} documents, {self.sentences} sentences, {self.tokens} tokens in; "
            f"{self.rows} rows, {self.tokens_packed} tokens packed ({fill:.1%} fill), "
            f"{self.documents_split} documents split; dropped {self.sentences_too_long} sentences "
            f"longer than a row ({self.tokens_dropped} tokens)")


@dataclasses.dataclass(frozen=True)
class Row:
  tokens: np.ndarray  # [T]
  kinds: np.ndarray  # [T] int8
  segment: np.ndarray  # [T] int32


def sentence_chunks(sequence: Sequence) -> list[tuple[int, int]]:
  """[start, end) token ranges of the sentences of a document (BOS/EOS attached)."""
  boundaries = np.flatnonzero(np.diff(sequence.sentence)) + 1
  starts = np.concatenate([[0], boundaries])
  ends = np.concatenate([boundaries, [len(sequence)]])
  return list(zip(starts.tolist(), ends.tolist()))


class SentencePacker:
  """Streaming packer: `add(document)` yields the rows it completes; `flush()` the last one."""

  def __init__(self, seq_len: int, pad_token, token_dtype=None):
    if seq_len < 2:
      raise ValueError(f"seq_len must be at least 2, got {seq_len}")
    self.seq_len = seq_len
    self.pad_token = pad_token
    self.token_dtype = token_dtype
    self.stats = PackStats()
    self._pieces: list[tuple[np.ndarray, np.ndarray, int]] = []
    self._used = 0
    self._segment = 0

  def _emit(self) -> Row:
    length = self.seq_len
    tokens = [p[0] for p in self._pieces]
    kinds = [p[1] for p in self._pieces]
    segments = [np.full(len(p[0]), p[2], np.int32) for p in self._pieces]
    pad = length - self._used
    dtype = self.token_dtype or (tokens[0].dtype if tokens else object)
    pad_tokens = np.empty(pad, dtype=dtype)
    pad_tokens[:] = self.pad_token
    row = Row(np.concatenate(tokens + [pad_tokens]).astype(dtype, copy=False),
              np.concatenate(kinds + [np.full(pad, Kind.PAD, np.int8)]).astype(np.int8),
              np.concatenate(segments + [np.zeros(pad, np.int32)]))
    self.stats.rows += 1
    self.stats.padding += pad
    self._pieces, self._used, self._segment = [], 0, 0
    return row

  def add(self, sequence: Sequence) -> Iterator[Row]:
    stats = self.stats
    stats.documents += 1
    stats.tokens += len(sequence)
    chunks = sentence_chunks(sequence)
    stats.sentences += len(chunks)
    segment = None  # this document's segment id in the current row
    placed_any = False
    for start, end in chunks:
      size = end - start
      if size > self.seq_len:
        stats.sentences_too_long += 1
        stats.tokens_dropped += size
        continue
      if self._used + size > self.seq_len:
        yield self._emit()
        segment = None
        if placed_any:
          stats.documents_split += 1
      if segment is None:
        self._segment += 1
        segment = self._segment
      self._pieces.append((sequence.tokens[start:end], sequence.kinds[start:end], segment))
      self._used += size
      stats.tokens_packed += size
      placed_any = True

  def flush(self) -> Iterator[Row]:
    if self._pieces:
      yield self._emit()


def pack_documents(sequences: Iterable[Sequence], seq_len: int, pad_token,
                   token_dtype=None) -> tuple[list[Row], PackStats]:
  """Packs all documents; returns the rows and the accounting."""
  packer = SentencePacker(seq_len, pad_token, token_dtype)
  rows: list[Row] = []
  for sequence in sequences:
    rows.extend(packer.add(sequence))
  rows.extend(packer.flush())
  return rows, packer.stats


def stack_rows(rows: list[Row]) -> Row:
  """Rows as one batch: arrays [N, T]."""
  return Row(np.stack([r.tokens for r in rows]), np.stack([r.kinds for r in rows]),
             np.stack([r.segment for r in rows]))
