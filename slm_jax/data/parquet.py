"""Reading Parquet documents one row group at a time (FineWeb-Edu layout: a text column, an id).

The one Parquet reader of the project: the parse stage's raw documents, prepare's Parquet of
trees and the streamed `source="parquet"` all read `(id, text)` rows with `read_rows`. Only the
text column (and the id column, when the file has it) is read; a row group is the unit of work.
"""

from __future__ import annotations


def _parquet_file(path: str):
  try:
    import pyarrow  # pylint: disable=g-import-not-at-top
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("reading Parquet needs pyarrow: pip install pyarrow") from None
  try:
    return pq.ParquetFile(path)
  except pyarrow.ArrowException as error:  # pyarrow's messages do not name the file
    raise ValueError(f"{path}: not a readable Parquet file ({error})") from None


def row_groups(path: str) -> list[int]:
  """Rows per row group of a Parquet file (its footer only)."""
  meta = _parquet_file(path).metadata
  return [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]


def read_column(path: str, row_group: int, column: str,
                id_column: str | None = "id") -> tuple[list[str], list[str] | None]:
  """The `column` values (and ids, when the file has `id_column`) of one row group."""
  pf = _parquet_file(path)
  names = pf.schema_arrow.names
  if column not in names:
    raise KeyError(f"{path}: no column {column!r} (columns: {', '.join(names)})")
  kind = pf.schema_arrow.field(column).type
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  # null: a column with no non-null value (e.g. a file of 0 rows written without a schema)
  if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
    raise ValueError(f"{path}: column {column!r} holds {kind}, not text (strings); pass the "
                     "column that holds the documents (--text_field / data.parquet_column)")
  columns = [column] + ([id_column] if id_column and id_column in names else [])
  table = pf.read_row_group(row_group, columns=columns)
  texts = table.column(column).to_pylist()
  ids = table.column(id_column).to_pylist() if len(columns) > 1 else None
  return texts, ids


def row_name(path: str, row_group: int, row: int) -> str:
  """Where a row is: `path:row_group:row` (also the id of a row without one)."""
  return f"{path}:{row_group}:{row}"


def read_rows(path: str, row_group: int, column: str = "text",
              id_column: str | None = "id") -> list[tuple[str, str]]:
  """(id, text) of every row of one row group. A null text is "" (an empty document, for the
  caller to count); a missing or null id is the row's `row_name`."""
  texts, ids = read_column(path, row_group, column, id_column)
  return [(str(ids[row]) if ids is not None and ids[row] is not None
           else row_name(path, row_group, row), text or "") for row, text in enumerate(texts)]
