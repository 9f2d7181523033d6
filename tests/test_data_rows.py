"""`slm_jax.data.rows`: whole-file rows of Parquet / Arrow / JSONL / JSON, and `RowReader`."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slm_jax.data.rows import RowDataError, RowReader, read_rows

ROWS = [{"question": "Where is the kettle?", "choices": {"text": ["shelf", "sink"],
                                                         "label": ["A", "B"]}, "answer": 1},
        {"question": "Is it raining?", "choices": {"text": ["yes", "no"], "label": ["A", "B"]},
         "answer": 0}]


def test_every_format_reads_the_same_rows(tmp_path):
  pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "a.parquet")
  table = pa.Table.from_pylist(ROWS)
  with pa.OSFile(str(tmp_path / "a.arrow"), "wb") as sink:
    with pa.ipc.new_stream(sink, table.schema) as writer:
      writer.write_table(table)
  with pa.OSFile(str(tmp_path / "file.arrow"), "wb") as sink:  # the random-access variant
    with pa.ipc.new_file(sink, table.schema) as writer:
      writer.write_table(table)
  (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n\n" for r in ROWS))
  (tmp_path / "a.json").write_text(json.dumps(ROWS))
  (tmp_path / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
  for name in ("a.parquet", "a.arrow", "file.arrow", "a.jsonl", "a.json", "lines.json"):
    assert read_rows(tmp_path / name) == ROWS, name


def test_read_errors_name_the_file_and_line(tmp_path):
  with pytest.raises(RowDataError, match="absent.parquet: no such file"):
    read_rows(tmp_path / "absent.parquet")
  (tmp_path / "a.csv").write_text("a,b\n")
  with pytest.raises(RowDataError, match=r"a\.csv: unknown format '\.csv'"):
    read_rows(tmp_path / "a.csv")
  (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"a": \n')
  with pytest.raises(RowDataError, match=r"bad\.jsonl:2: not valid JSON"):
    read_rows(tmp_path / "bad.jsonl")
  (tmp_path / "list.json").write_text('[{"a": 1}, [1, 2]]')
  with pytest.raises(RowDataError, match=r"list\.json: row 1: expected an object, got list"):
    read_rows(tmp_path / "list.json")
  (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
  with pytest.raises(RowDataError, match=r"junk\.parquet: not a readable Parquet file"):
    read_rows(tmp_path / "junk.parquet")
  (tmp_path / "junk.arrow").write_bytes(b"not arrow at all")
  with pytest.raises(RowDataError, match=r"junk\.arrow: not a readable Arrow"):
    read_rows(tmp_path / "junk.arrow")


def test_row_reader_fields_name_file_row_and_field():
  row = RowReader("x/f.parquet", 3, {"q": "text", "n": 2, "flag": True, "list": ["a", "b"],
                                     "short": ["a"], "none": None})
  assert row.where == "x/f.parquet:3"
  assert row.get("q", str) == "text" and row.get("flag", bool) is True
  assert row.strings("list") == ("a", "b")
  assert row.has("q") and not row.has("none") and not row.has("absent")
  for field, kind, what in (("absent", str, "missing"), ("none", str, "missing"),
                            ("n", str, "expected str, got int"),
                            ("flag", int, "expected int, got bool"),
                            ("q", (list, tuple), "expected list or tuple, got str")):
    with pytest.raises(RowDataError, match=rf"^x/f\.parquet: row 4: field '{field}': {what}"):
      row.get(field, kind)
  with pytest.raises(RowDataError, match="field 'short': expected a list of at least 2"):
    row.strings("short")
  assert row.strings("short", minimum=1) == ("a",)


def test_answers_as_index_number_or_letter():
  row = RowReader("f.jsonl", 0, {})
  assert row.index_in("a", 2, 4) == 2 and row.index_in("a", np.int64(1), 4) == 1
  assert row.index_in("a", "2", 2, base=1) == 1
  assert row.index_in("a", " C ", 4, letters=True) == 2
  assert row.index_in("a", "", 4) == -1 and row.index_in("a", -1, 4) == -1
  assert row.index_in("a", "-1", 2, base=1) == -1
  for value, what in ((4, "answer 4 is outside the 4 options"), ("E", "cannot read answer 'E'"),
                      (True, "cannot read answer True"), (1.0, "cannot read answer 1.0"),
                      ("0", "answer .0. is outside")):
    with pytest.raises(RowDataError, match=f"f.jsonl: row 1: field 'a': {what}"):
      row.index_in("a", value, 4, base=1 if value == "0" else 0)
