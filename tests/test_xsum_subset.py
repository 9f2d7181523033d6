"""XSum's training rows (SPEC §11): the paper's subset by HELM's filter (or an id list), the whole
split on request, empty articles skipped and counted everywhere (test split included)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slm_jax.data.rows import RowDataError
from slm_jax.downstream import tasks, xsum_subset


def words(n: int, word: str = "word") -> str:
  return " ".join([word] * n)


KEPT_DOC = words(60, "news")  # 60 words, kept with an 11-word summary (11 / 60 ≤ 0.2)
SUMMARY = words(11, "sum")


def write_split(root, split, rows):
  folder = root / "xsum" / "default" / split
  folder.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows), folder / "0000.parquet")


def test_helm_filter_bounds():
  assert xsum_subset.helm_keeps(KEPT_DOC, SUMMARY)
  assert not xsum_subset.helm_keeps(words(49), SUMMARY)  # too short
  assert not xsum_subset.helm_keeps(words(151), SUMMARY)  # too long
  assert not xsum_subset.helm_keeps(words(60), words(10))  # summary ≤ 10 words
  assert not xsum_subset.helm_keeps(words(60), words(13))  # 13 / 60 > 0.2
  assert not xsum_subset.helm_keeps("Last updated at 10:00 " + words(60), SUMMARY)
  assert xsum_subset.helm_keeps(words(30) + "\n\n" + words(30), SUMMARY)  # newlines are spaces


def test_subset_maps_kept_texts_to_the_last_id_and_full_takes_all(tmp_path):
  rows = [{"id": "1", "document": KEPT_DOC, "summary": SUMMARY},
          {"id": "2", "document": words(20), "summary": SUMMARY},  # filtered out
          {"id": "3", "document": "", "summary": "x"},  # empty: skipped, counted
          {"id": "4", "document": KEPT_DOC.replace(" ", "  ", 3), "summary": words(3)},
          {"id": "5", "document": words(70, "other"), "summary": SUMMARY}]
  write_split(tmp_path, "train", rows)
  examples, counts = xsum_subset.read_training_rows(tmp_path)
  # Row 1's text is also row 4's (up to whitespace): the paper's map takes the last id, 4; row 4
  # fails the filter itself (3-word summary) but is kept through row 1's text.
  assert [e.source.rsplit(":", 1)[1] for e in examples] == ["3", "4"]  # row indices of ids 4, 5
  assert [e.options[0] for e in examples] == [words(3), SUMMARY]
  assert counts["empty_document"] == 1 and counts["subset_ids"] == 2 and counts["kept"] == 2
  full, counts = xsum_subset.read_training_rows(tmp_path, "full")
  assert len(full) == 4 and counts["rows"] == 5
  ids = tmp_path / "ids.json"
  ids.write_text(json.dumps(["2", 5]))
  listed, _ = xsum_subset.read_training_rows(tmp_path, "subset", ids)
  assert [e.question for e in listed] == [words(20), words(70, "other")]
  with pytest.raises(RowDataError, match="no row in the subset"):
    ids.write_text("[]")
    xsum_subset.read_training_rows(tmp_path, "subset", ids)


def test_the_empty_test_article_is_skipped_and_counted(tmp_path):
  write_split(tmp_path, "test", [{"id": "1", "document": "The warning begins.", "summary": "A"},
                                 {"id": "2", "document": "", "summary": "x"}])
  split = tasks.load_split("xsum", tmp_path)
  assert [x.question for x in split.examples] == ["The warning begins."]
  assert split.counts["empty_document"] == 1 and split.counts["rows"] == 2


def test_tree_models_reserve_the_paper_code_summary_budget():
  """The paper code reserves 150 summary positions for every model (tree models: ≤ 150 tokens,
  structure included, and ≤ 75 words), not max(6·75, 10) = 450."""
  from slm_jax.configurations import CONFIGURATIONS
  from slm_jax.downstream.protocol import protocol
  for name in ("tree", "tgtree", "terminal"):
    conf = CONFIGURATIONS[name]
    assert protocol(conf).generated_positions(conf, max_tokens=150, max_words=75) == 150
