"""The one "PTB text → counted trees" reader, prepare's input readers and the Parquet row reader."""

from __future__ import annotations

import json
import re

import pytest

from slm_jax import ptb
from slm_jax.data import parquet
from slm_jax.data.accounting import StageCounts
from slm_jax.data.tree_documents import documents_of_text, read_tree_inputs
from slm_jax.trees import Tree

CATS = "(S (NP Cats) (VP chase (NP mice)))"
DOGS = "(S (NP Dogs) (VP bark))"


def _kept(counts: StageCounts, documents) -> StageCounts:
  """What a caller does: count the documents it keeps out."""
  counts.documents_out += len(documents)
  return counts


def test_text_to_counted_trees_lenient_strict_and_split():
  counts = StageCounts()
  counts.documents_in += 1
  documents = documents_of_text("d1", f"{CATS}\n(S (NP broken\n{DOGS}\n", counts)
  assert documents == [("d1", ptb.parse_trees(f"{CATS}\n{DOGS}"))]
  assert _kept(counts, documents).balanced()
  assert (counts.sentences_in, counts.sentences_out) == (3, 2)
  assert dict(counts.dropped["sentences"]) == {"malformed tree (unbalanced brackets)": 1}

  counts = StageCounts()
  counts.documents_in += 2
  assert documents_of_text("d2", "", counts) == []
  assert documents_of_text("d3", "(S (-NONE- *))", counts) == []
  assert dict(counts.dropped["documents"]) == {"empty document": 2}
  assert counts.dropped["sentences"]["empty after normalization"] == 1 and counts.balanced()

  counts = StageCounts()
  counts.documents_in += 1
  split = documents_of_text("d4", f"{CATS} {DOGS}", counts, sentences_as_documents=True)
  assert [doc_id for doc_id, _ in split] == ["d4#0", "d4#1"]
  assert [trees for _, trees in split] == [[t] for t in ptb.parse_trees(f"{CATS} {DOGS}")]
  assert counts.documents_in == 2 and _kept(counts, split).balanced()

  with pytest.raises(ptb.TreeError, match=re.escape("f.jsonl:7:2: unbalanced brackets")):
    documents_of_text("d5", f"{CATS}\n(S (NP x)", StageCounts(), where="f.jsonl:7",
                      lenient=False)


def test_prepare_inputs_count_every_document(tmp_path):
  (tmp_path / "a.ptb").write_text(f"{CATS}\n{DOGS}\n")
  (tmp_path / "empty.ptb").write_text("\n")
  (tmp_path / "latin.ptb").write_bytes(b"(S (NP caf\xe9))\n")
  (tmp_path / "d.jsonl").write_text(json.dumps({"id": "j", "trees": [CATS]}) + "\n\n"
                                    + json.dumps({"ptb": DOGS}) + "\n")
  files = [(str(tmp_path / n), f) for n, f in (("a.ptb", "ptb"), ("empty.ptb", "ptb"),
                                               ("latin.ptb", "ptb"), ("d.jsonl", "jsonl"))]
  counts = StageCounts()
  documents = list(read_tree_inputs(files, counts, sentences_as_documents=True))
  assert [doc_id for doc_id, _ in documents] == [
      f"{tmp_path / 'a.ptb'}#0", f"{tmp_path / 'a.ptb'}#1", "j#0", f"{tmp_path / 'd.jsonl'}:3#0"]
  # The empty file is a dropped document in sentence mode too; a file that is not UTF-8 is one.
  assert counts.documents_in == 6
  assert dict(counts.dropped["documents"]) == {"empty document": 1, "invalid utf-8": 1}
  assert _kept(counts, documents).balanced()
  (tmp_path / "d.jsonl").write_text(json.dumps({"text": "no trees"}) + "\n")
  with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'd.jsonl'}:1: a record needs")):
    list(read_tree_inputs([(str(tmp_path / "d.jsonl"), "jsonl")], StageCounts(), lenient=False))


def test_parquet_rows_default_missing_ids_and_null_texts(tmp_path):
  pa = pytest.importorskip("pyarrow")
  pq = pytest.importorskip("pyarrow.parquet")
  path = str(tmp_path / "t.parquet")
  pq.write_table(pa.table({"text": [CATS, None, DOGS], "id": ["a", None, "c"]}), path,
                 row_group_size=2)
  assert parquet.row_groups(path) == [2, 1]
  assert parquet.read_rows(path, 0) == [("a", CATS), (f"{path}:0:1", "")]
  assert parquet.read_rows(path, 1) == [("c", DOGS)]
  assert parquet.read_rows(path, 1, id_column="url") == [(f"{path}:1:0", DOGS)]
  with pytest.raises(KeyError, match=re.escape(f"{path}: no column 'body' (columns: text, id)")):
    parquet.read_rows(path, 0, "body")
  (tmp_path / "junk.parquet").write_text("not parquet")
  with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'junk.parquet'}: not a readable "
                                                 "Parquet file")):
    parquet.row_groups(str(tmp_path / "junk.parquet"))
  counts = StageCounts()
  documents = list(read_tree_inputs([(path, "parquet")], counts))
  assert documents == [("a", [ptb.parse_trees(CATS)[0]]), ("c", [ptb.parse_trees(DOGS)[0]])]
  assert counts.documents_in == 3 and counts.dropped["documents"]["empty document"] == 1
  assert isinstance(documents[0][1][0], Tree)
