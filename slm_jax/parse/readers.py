"""Raw documents from Parquet shards (FineWeb-Edu layout), JSONL and plain text, in work units.

Input files are found by `slm_jax.inputs.discover(paths, inputs.PARSE_INPUTS, fmt)`
(*.parquet, *.jsonl, *.txt / *.text). A work unit is the smallest piece one host reads on its
own: a Parquet row group, a block of `JSONL_BLOCK` lines of a JSONL file, or a whole text file.
Units are numbered (file index, part index) over the input files in sorted path order, so every
host computes the same list, and `--shard=i/n` takes the units with
`(file_index + part_index) % n == i` (round-robin over row groups of one big file as over many
small files). Parquet is read with `slm_jax.data.parquet` (only the text column, and the id
column when present).

`RawDocument.text` is whatever the source holds: running text for a parser backend, or PTB trees
for the pass-through backend.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Iterator, Sequence

from slm_jax import files
from slm_jax.data import parquet

JSONL_BLOCK = 1000


@dataclasses.dataclass(frozen=True)
class RawDocument:
  id: str
  text: str
  problem: str | None = None  # why the document could not be read (counted by the caller)


@dataclasses.dataclass(frozen=True)
class Unit:
  """One independently readable piece of the input."""

  path: str
  fmt: str  # parquet | jsonl | text
  file_index: int
  part: int  # Parquet row group, JSONL block, 0 for text

  @property
  def name(self) -> str:
    return f"{self.file_index:05d}-{self.part:06d}"


def _count_lines(path: str) -> int:
  with open(path, "rb") as f:
    return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def list_units(files: Sequence[tuple[str, str]], jsonl_block: int = JSONL_BLOCK) -> list[Unit]:
  units = []
  for file_index, (path, fmt) in enumerate(files):
    if fmt == "parquet":
      parts = len(parquet.row_groups(path))
    elif fmt == "jsonl":
      lines = _count_lines(path)
      with open(path, "rb") as f:  # a last line without a newline still counts
        f.seek(0, os.SEEK_END)
        if f.tell():
          f.seek(-1, os.SEEK_END)
          lines += f.read(1) != b"\n"
      parts = max(1, -(-lines // jsonl_block))
    else:
      parts = 1
    units.extend(Unit(path, fmt, file_index, part) for part in range(parts))
  return units


def shard_units(units: Sequence[Unit], index: int, count: int) -> list[Unit]:
  return [u for u in units if (u.file_index + u.part) % count == index]


def read_unit(unit: Unit, *, text_field: str = "text", id_field: str = "id",
              jsonl_block: int = JSONL_BLOCK) -> Iterator[RawDocument]:
  """The documents of one unit, in order. A null/missing text is an empty document (the caller
  counts it); ids default to `file:row`."""
  if unit.fmt == "parquet":
    for doc_id, text in parquet.read_rows(unit.path, unit.part, text_field, id_field):
      yield RawDocument(doc_id, text)
  elif unit.fmt == "jsonl":
    first, last = unit.part * jsonl_block, (unit.part + 1) * jsonl_block
    for number, line in files.iter_lines(unit.path):  # on \n only, as the line count splits
      if number <= first:
        continue
      if number > last:
        break
      where = f"{unit.path}:{number}"
      if not line.strip():
        yield RawDocument(where, "")
        continue
      try:
        obj = json.loads(line)
      except json.JSONDecodeError:
        yield RawDocument(where, "", "invalid JSON line")
        continue
      text = obj.get(text_field) if isinstance(obj, dict) else None
      doc_id = str(obj.get(id_field, where)) if isinstance(obj, dict) else where
      if text is None or isinstance(text, str):
        yield RawDocument(doc_id, text or "")
      else:  # counted under its own reason, never read as an empty document
        yield RawDocument(doc_id, "", f"{text_field!r} is {type(text).__name__}, not a string")
  else:
    yield RawDocument(unit.path, pathlib.Path(unit.path).read_text(encoding="utf-8"))
