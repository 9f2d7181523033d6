"""What the Grain pipeline's streamed sources yield, up to the packer's `EncodedDocument`s.

- `source="arrayrecord"`: `RawRecords` (record bytes of a prepared `DocumentSource`; decoding
  happens in the workers) → `EncodeRecord` (`decode_record` → `encode_base`).
- `source="tfds"`: the same, over a `tfds_corpus.TfdsDocuments` (the `DocumentSource` of a TFDS
  build of the corpus, read with `tfds.data_source`).
- `source="parquet"`: `parquet_units` ((file, row group) of every Parquet file under the paths) →
  `UnitDocuments` ((id, PTB text) rows, one row group at a time, resumable) → `ParseAndEncode`
  (`tree_documents.documents_of_text`, lenient and counted → `encode_document`).
The names of the data sources are `slm_jax.data.sources.SOURCES` / `STREAMED`.
"""

from __future__ import annotations

import os
from typing import Any, Sequence as SequenceT

import grain

from slm_jax import inputs
from slm_jax.data import parquet
from slm_jax.data.accounting import StageCounts
from slm_jax.data.documents import DocumentSource
from slm_jax.data.encode import encode_base, encode_document
from slm_jax.data.pack_iter import EncodedDocument
from slm_jax.data.records import RecordError, decode_record
from slm_jax.data.tree_documents import documents_of_text
from slm_jax.tokenizer import Tokenizer

# --- prepared documents (ArrayRecord) ------------------------------------------------------------


class RawRecords:
  """Record bytes of a `DocumentSource` (decoding happens in the encode step, in the workers)."""

  def __init__(self, source: DocumentSource):
    self.source = source

  def __len__(self) -> int:
    return len(self.source)

  def __getitem__(self, index: int) -> bytes:
    return self.source.raw(index)


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


# --- Parquet of PTB trees ----------------------------------------------------------------------


def parquet_units(paths: SequenceT[str | os.PathLike]) -> list[tuple[str, int]]:
  """(file, row group) of every row group of the Parquet files/folders, in sorted path order."""
  files = [path for path, _ in inputs.discover(paths, inputs.TREE_INPUTS, "parquet")]
  return [(path, group) for path in files for group in range(len(parquet.row_groups(path)))]


class UnitDocuments(grain.IterDataset):
  """(path, row group) units → (id, text) documents, read one row group at a time."""

  def __init__(self, parent: grain.IterDataset, column: str, id_column: str):
    super().__init__(parent)
    self.column, self.id_column = column, id_column

  def __iter__(self) -> UnitDocumentsIterator:
    return UnitDocumentsIterator(self._parent.__iter__(), self.column, self.id_column)


class UnitDocumentsIterator(grain.DatasetIterator):

  def __init__(self, parent: grain.DatasetIterator, column: str, id_column: str):
    super().__init__(parent)
    self.column, self.id_column = column, id_column
    self._unit_state = parent.get_state()  # parent state before the current unit
    self._rows: list[tuple[str, str]] = []
    self._row = 0

  def _load(self, unit) -> None:
    path, group = unit
    self._rows = parquet.read_rows(path, group, self.column, self.id_column)

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


class ParseAndEncode(grain.transforms.Map):
  """(id, PTB text) → trees (lenient, counted: `documents_of_text`) → `encode_document`."""

  def __init__(self, tokenizer: Tokenizer, linearization: str, seed: int):
    self.tokenizer, self.linearization, self.seed = tokenizer, linearization, seed

  def map(self, element: tuple[str, str]) -> EncodedDocument:
    doc_id, text = element
    counts = StageCounts()
    documents = documents_of_text(doc_id, text, counts)  # an empty document is counted there
    if not documents:
      return EncodedDocument(None, counts.to_json())
    (_, trees), = documents
    sequence = encode_document(trees, self.tokenizer, self.linearization, seed=self.seed)
    return EncodedDocument(sequence, counts.to_json())
