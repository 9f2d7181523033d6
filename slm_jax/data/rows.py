"""Records of small labeled data files (evaluation sets) and field access that names the place.

`read_rows` reads a whole file as a list of dicts: Parquet (`.parquet`, the Hub's converted
splits), Arrow (`.arrow`, the stream files `datasets.save_to_disk` writes), JSON lines (`.jsonl`)
or JSON (`.json`: an array of rows, or JSON lines). It is for evaluation sets of thousands of
rows with nested fields; corpora of documents are read a row group at a time by
`slm_jax.data.parquet`.

`RowReader` wraps one row: every missing field, wrong type or unreadable answer is a
`RowDataError` whose message names the file, the row (counted from 1, in file order) and the
field — `path: row 3: field 'answer': ...`; invalid UTF-8 names file, line and byte. The task readers of `slm_jax.gtca.mcqa_data` and
`slm_jax.downstream.tasks` are built on it.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from slm_jax import cli, files

LETTERS = "ABCDEFGH"
FORMATS = (".parquet", ".arrow", ".jsonl", ".json")


class RowDataError(ValueError):
  """A file that does not fit its dataset's layout; the message names file, row and field."""


def _read_arrow(path: pathlib.Path) -> list[dict[str, Any]]:
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  try:
    with pa.memory_map(str(path)) as source:
      return pa.ipc.open_stream(source).read_all().to_pylist()
  except pa.ArrowInvalid:
    try:
      with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all().to_pylist()
    except pa.ArrowInvalid as error:
      raise RowDataError(f"{path}: not a readable Arrow stream or file ({error})") from None


def _read_parquet(path: pathlib.Path) -> list[dict[str, Any]]:
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  try:
    return pq.read_table(path).to_pylist()
  except pa.ArrowException as error:  # pyarrow's messages do not name the file
    raise RowDataError(f"{path}: not a readable Parquet file ({error})") from None


def _read_json(path: pathlib.Path) -> list[Any]:
  text = cli.read_utf8(path)  # invalid UTF-8 names file, line and byte
  if path.suffix == ".json" and text.lstrip().startswith("["):
    try:
      return json.loads(text)
    except json.JSONDecodeError as e:
      raise RowDataError(f"{path}: not valid JSON ({e})") from None
  rows = []
  for number, line in enumerate(files.text_lines(text), 1):  # on \n only
    if line.strip():
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError as e:
        raise RowDataError(f"{path}:{number}: not valid JSON ({e})") from None
  return rows


def read_rows(path: str | pathlib.Path) -> list[dict[str, Any]]:
  """The rows of a Parquet, Arrow, JSON-lines or JSON file as dicts, in file order."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise RowDataError(f"{path}: no such file")
  if path.suffix not in FORMATS:
    raise RowDataError(f"{path}: unknown format {path.suffix!r} (expected "
                       f"{', '.join(FORMATS)})")
  if path.suffix == ".parquet":
    rows = _read_parquet(path)
  elif path.suffix == ".arrow":
    rows = _read_arrow(path)
  else:
    rows = _read_json(path)
  for i, row in enumerate(rows):
    if not isinstance(row, dict):
      raise RowDataError(f"{path}: row {i}: expected an object, got {type(row).__name__}")
  return rows


def _kind_name(kind: type | tuple[type, ...]) -> str:
  kinds = kind if isinstance(kind, tuple) else (kind,)
  return " or ".join(k.__name__ for k in kinds)


class RowReader:
  """Field access on one row with errors naming file, row and field."""

  def __init__(self, path: str | pathlib.Path, index: int, row: dict):
    self.path, self.index, self.row = pathlib.Path(path), index, row

  @property
  def where(self) -> str:
    """`file:row`, the `source` of the example read from this row."""
    return f"{self.path}:{self.index}"

  def fail(self, field: str, what: str) -> RowDataError:
    """The error of a field, naming the file and the row counted from 1."""
    return RowDataError(f"{self.path}: row {self.index + 1}: field {field!r}: {what}")

  def has(self, field: str) -> bool:
    return self.row.get(field) is not None

  def get(self, field: str, kind: type | tuple[type, ...]) -> Any:
    """The field's value, which must be present, not null and of `kind`. `bool` is not taken
    for `int` (Parquet and JSON keep them apart)."""
    if not self.has(field):
      raise self.fail(field, "missing")
    value = self.row[field]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
      raise self.fail(field, f"expected {_kind_name(kind)}, got bool")
    if not isinstance(value, kind):
      raise self.fail(field, f"expected {_kind_name(kind)}, got {type(value).__name__}")
    return value

  def strings(self, field: str, minimum: int = 2, value: Any = None) -> tuple[str, ...]:
    """A list of at least `minimum` strings (the field's value, or `value` read from it)."""
    if value is None:
      value = self.get(field, (list, tuple, np.ndarray))
    elif not isinstance(value, (list, tuple, np.ndarray)):
      raise self.fail(field, f"expected a list, got {type(value).__name__}")
    value = list(value)
    if len(value) < minimum or not all(isinstance(v, str) for v in value):
      raise self.fail(field, f"expected a list of at least {minimum} strings, got {value!r}")
    return tuple(value)

  def index_in(self, field: str, value: Any, count: int, base: int = 0,
               letters: bool = False) -> int:
    """An answer given as int / numeric string (counted from `base`) or, with `letters`, a
    letter A–H, as an index into `count` options; "" and −1 (unlabeled) → −1."""
    if isinstance(value, str):
      text = value.strip()
      if text in ("", "-1"):
        return -1
      if letters and len(text) == 1 and text.upper() in LETTERS:
        index = LETTERS.index(text.upper())
      elif text.isdigit():
        index = int(text) - base
      else:
        raise self.fail(field, f"cannot read answer {value!r}")
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
      if int(value) == -1:
        return -1
      index = int(value) - base
    else:
      raise self.fail(field, f"cannot read answer {value!r}")
    if not 0 <= index < count:
      raise self.fail(field, f"answer {value!r} is outside the {count} options")
    return index
