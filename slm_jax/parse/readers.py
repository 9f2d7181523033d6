"""Raw documents from Parquet shards (FineWeb-Edu layout), JSONL and plain text, in work units.

A work unit is the smallest piece one host reads on its own: a Parquet row group, a block of
`JSONL_BLOCK` lines of a JSONL file, or a whole text file. Units are numbered (file index, part
index) over the input files in sorted path order, so every host computes the same list, and
`--shard=i/n` takes the units with `(file_index + part_index) % n == i` (round-robin over row
groups of one big file as over many small files). Only the text column (and the id column, when
present) is read from Parquet.

`RawDocument.text` is whatever the source holds: running text for a parser backend, or PTB trees
for the pass-through backend.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Iterator, Sequence

PARQUET_SUFFIXES = (".parquet",)
JSONL_SUFFIXES = (".jsonl", ".json")
TEXT_SUFFIXES = (".txt", ".text")
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


def _format_of(path: pathlib.Path) -> str | None:
  suffix = path.suffix.lower()
  if suffix in PARQUET_SUFFIXES:
    return "parquet"
  if suffix in JSONL_SUFFIXES:
    return "jsonl"
  if suffix in TEXT_SUFFIXES:
    return "text"
  return None


def list_files(paths: Sequence[str | os.PathLike], fmt: str = "auto") -> list[tuple[str, str]]:
  """(path, format) of the input files in sorted path order; folders are searched recursively."""
  if fmt not in ("auto", "parquet", "jsonl", "text"):
    raise ValueError(f"input format must be auto, parquet, jsonl or text, got {fmt!r}")
  found: dict[str, str] = {}
  for entry in paths:
    path = pathlib.Path(entry)
    if path.is_file():
      kind = _format_of(path) if fmt == "auto" else fmt
      if kind is None:
        raise ValueError(f"{path}: unknown input format (suffix {path.suffix!r}); pass "
                         "--input_format=parquet|jsonl|text")
      found[str(path)] = kind
    elif path.is_dir():
      for child in path.rglob("*"):
        kind = _format_of(child)
        if child.is_file() and kind is not None and (fmt == "auto" or kind == fmt):
          found[str(child)] = kind
    else:
      raise FileNotFoundError(f"input {path} does not exist")
  if not found:
    raise FileNotFoundError(f"no .parquet, .jsonl or .txt files under {', '.join(map(str, paths))}")
  return sorted(found.items())


def _parquet_file(path: str):
  try:
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("reading Parquet needs pyarrow: pip install pyarrow") from None
  return pq.ParquetFile(path)


def parquet_row_groups(path: str) -> list[int]:
  """Rows per row group of a Parquet file (its footer only)."""
  meta = _parquet_file(path).metadata
  return [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]


def _count_lines(path: str) -> int:
  with open(path, "rb") as f:
    return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def list_units(files: Sequence[tuple[str, str]], jsonl_block: int = JSONL_BLOCK) -> list[Unit]:
  units = []
  for file_index, (path, fmt) in enumerate(files):
    if fmt == "parquet":
      parts = len(parquet_row_groups(path))
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


def read_parquet_column(path: str, row_group: int, column: str,
                        id_column: str | None = "id") -> tuple[list[str], list[str] | None]:
  """The `column` values (and ids, when the file has `id_column`) of one row group."""
  pf = _parquet_file(path)
  names = pf.schema_arrow.names
  if column not in names:
    raise KeyError(f"{path}: no column {column!r} (columns: {', '.join(names)})")
  columns = [column] + ([id_column] if id_column and id_column in names else [])
  table = pf.read_row_group(row_group, columns=columns)
  texts = table.column(column).to_pylist()
  ids = table.column(id_column).to_pylist() if len(columns) > 1 else None
  return texts, ids


def read_unit(unit: Unit, *, text_field: str = "text", id_field: str = "id",
              jsonl_block: int = JSONL_BLOCK) -> Iterator[RawDocument]:
  """The documents of one unit, in order. A null/missing text is an empty document (the caller
  counts it); ids default to `file:row`."""
  if unit.fmt == "parquet":
    texts, ids = read_parquet_column(unit.path, unit.part, text_field, id_field)
    for row, text in enumerate(texts):
      doc_id = str(ids[row]) if ids is not None and ids[row] is not None else \
          f"{unit.path}:{unit.part}:{row}"
      yield RawDocument(doc_id, text or "")
  elif unit.fmt == "jsonl":
    first, last = unit.part * jsonl_block, (unit.part + 1) * jsonl_block
    with open(unit.path, encoding="utf-8") as f:
      for line_number, line in enumerate(f):
        if line_number < first:
          continue
        if line_number >= last:
          break
        where = f"{unit.path}:{line_number + 1}"
        if not line.strip():
          yield RawDocument(where, "")
          continue
        try:
          obj = json.loads(line)
        except json.JSONDecodeError:
          yield RawDocument(where, "", "invalid JSON line")
          continue
        text = obj.get(text_field) if isinstance(obj, dict) else None
        yield RawDocument(str(obj.get(id_field, where)) if isinstance(obj, dict) else where,
                          text if isinstance(text, str) else "")
  else:
    yield RawDocument(unit.path, pathlib.Path(unit.path).read_text(encoding="utf-8"))
