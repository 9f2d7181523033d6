"""In-memory training input: documents → ids → packed rows → shuffled batches with metadata.

For the embedded treebank and PTB files/folders (corpora that fit in memory). Batches are a pure
function of (seed, epoch, index), so the iterator state `{"epoch", "index"}` saved in a checkpoint
resumes the exact stream. The Grain pipeline (data/grain_pipeline, a later issue) streams
FineWeb-Edu-scale corpora with the same row format.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence as SequenceT

import numpy as np

from slm_jax.configurations import Configuration
from slm_jax.data.encode import encode_document
from slm_jax.data.packing import pack_documents, stack_rows
from slm_jax.structure import RowMetadata, row_metadata, target_mask
from slm_jax.tokenizer import Tokenizer
from slm_jax.trees import Tree


@dataclasses.dataclass(frozen=True)
class Batch:
  """One batch of packed rows: tokens_BT (int32), their `RowMetadata` (kind int8, segment,
  position, depth, pop int32; every field [B, T]) and targets_BT (bool)."""

  tokens: np.ndarray
  meta: RowMetadata
  targets: np.ndarray

  @classmethod
  def from_rows(cls, tokens, kinds, segment, configuration: Configuration) -> "Batch":
    kinds, segment = kinds.astype(np.int8), segment.astype(np.int32)
    targets = target_mask(kinds, segment, configuration.linearization, configuration.attention)
    return cls(tokens.astype(np.int32), row_metadata(kinds, segment), targets)

  def as_dict(self) -> dict[str, np.ndarray | RowMetadata]:
    """`{"tokens", "meta", "targets"}`: a pytree of the arrays themselves (`dataclasses.asdict`
    would deep-copy them) for device placement and for Grain's worker queues."""
    return {"tokens": self.tokens, "meta": self.meta, "targets": self.targets}

  def pad_rows(self, multiple: int) -> "Batch":
    """This batch plus all-padding rows (segment 0, token 0, no targets; metadata from
    `row_metadata`) up to a multiple of `multiple` rows, e.g. the devices a batch is split over."""
    short = -len(self.tokens) % multiple
    if not short:
      return self
    length = self.tokens.shape[1]
    meta = row_metadata(np.zeros((short, length), np.int8), np.zeros((short, length), np.int32))
    pad = Batch(np.zeros((short, length), np.int32), meta, np.zeros((short, length), bool))
    join = lambda a, b: np.concatenate([a, b])
    return Batch(join(self.tokens, pad.tokens), RowMetadata(*map(join, self.meta, pad.meta)),
                 join(self.targets, pad.targets))


class PackedDataset:
  """All documents of a corpus encoded for one configuration and packed into rows."""

  def __init__(self, documents: Iterable[SequenceT[Tree]], tokenizer: Tokenizer,
               configuration: Configuration, seq_len: int, seed: int = 0):
    self.configuration = configuration
    sequences = (encode_document(d, tokenizer, configuration.linearization, seed=seed)
                 for d in documents)
    rows, self.stats = pack_documents(sequences, seq_len, tokenizer.pad_id, np.int32)
    if not rows:
      raise ValueError("no rows: the corpus is empty or every sentence is longer than "
                       f"seq_len={seq_len} ({self.stats.summary()})")
    stacked = stack_rows(rows)
    self.tokens, self.kinds, self.segment = stacked.tokens, stacked.kinds, stacked.segment
    self.seq_len = seq_len

  def __len__(self) -> int:
    return self.tokens.shape[0]

  def batch(self, rows: np.ndarray) -> Batch:
    return Batch.from_rows(self.tokens[rows], self.kinds[rows], self.segment[rows],
                           self.configuration)

  def batches(self, batch_size: int) -> Iterable[Batch]:
    """Every row once, in order (evaluation); the last batch may be smaller."""
    for start in range(0, len(self), batch_size):
      yield self.batch(np.arange(start, min(start + batch_size, len(self))))


class BatchIterator:
  """Endless shuffled batches; epoch e is a seeded permutation, remainders are dropped."""

  def __init__(self, dataset: PackedDataset, batch_size: int, seed: int):
    if batch_size > len(dataset):
      raise ValueError(f"batch size {batch_size} exceeds the {len(dataset)} packed rows; use a "
                       "smaller batch or more data")
    self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
    self.epoch, self.index = 0, 0

  def state(self) -> dict[str, int]:
    return {"epoch": self.epoch, "index": self.index}

  def restore(self, state: dict[str, int]) -> None:
    self.epoch, self.index = int(state["epoch"]), int(state["index"])

  def _order(self, epoch: int) -> np.ndarray:
    return np.random.default_rng([self.seed, epoch]).permutation(len(self.dataset))

  def __iter__(self):
    return self

  def __next__(self) -> Batch:
    if self.index + self.batch_size > len(self.dataset):
      self.epoch, self.index = self.epoch + 1, 0
    rows = self._order(self.epoch)[self.index:self.index + self.batch_size]
    self.index += self.batch_size
    return self.dataset.batch(rows)
