"""prepare: record round trip, versioning, sharded output, and every dropped document counted."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.corpus.treebank import generate_documents
from slm_jax.linearize import base_sequence
from slm_jax.prepare import (DocumentSource, RecordError, decode_record, encode_record, main,
                             prepare)
from tests.shared_data import require_shared


def _same_base(a, b) -> bool:
  return (a.symbols() == b.symbols() and np.array_equal(a.kinds, b.kinds)
          and np.array_equal(a.sentence, b.sentence) and np.array_equal(a.unit, b.unit))


def test_record_round_trip_on_gum_and_embedded():
  gum = require_shared("gum")
  files = sorted((gum / "const").glob("*.ptb"))[:5]
  documents = ptb.read_documents(files) + generate_documents(5, seed=3)
  for k, document in enumerate(documents):
    base = base_sequence(document)
    record = decode_record(encode_record(base, f"doc{k}"))
    assert record.id == f"doc{k}"
    assert _same_base(record.base, base)
    assert record.num_sentences == len(document)
    assert record.trees() == list(document)


def test_record_version_and_corruption_are_rejected():
  data = encode_record(base_sequence(generate_documents(1, seed=0)[0]), "x")
  newer = data[:4] + bytes([2]) + data[5:]
  with pytest.raises(RecordError, match="version 2.*re-run python -m slm_jax.prepare"):
    decode_record(newer)
  with pytest.raises(RecordError, match="not an slm_jax.document record"):
    decode_record(b"JUNK" + data[4:])
  with pytest.raises(RecordError, match="corrupt"):
    decode_record(data + b" extra")
  assert struct.unpack_from("<4sB", data) == (b"SLMD", 1)


def test_prepare_counts_every_dropped_document_and_tree(tmp_path):
  inputs = tmp_path / "in"
  inputs.mkdir()
  (inputs / "a.ptb").write_text("(S (NP Cats) (VP chase (NP mice)))\n(S (NP Dogs) (VP bark)\n"
                                "(S (NP Birds) (VP sing))\n")  # the 2nd tree is unclosed
  (inputs / "b.ptb").write_bytes(b"(S (NP caf\xe9))\n")  # not UTF-8
  (inputs / "c.ptb").write_text("")
  (inputs / "d.ptb").write_text("(S (-NONE- *))\n")  # empty after normalization
  jsonl = tmp_path / "docs.jsonl"
  jsonl.write_text("\n".join([
      json.dumps({"id": "j1", "trees": ["(S (NP It) (VP works))", "(S (NP So) (VP does this))"]}),
      "{not json",
      json.dumps({"id": "j3", "text": "no trees here"}),
      json.dumps({"id": "j4", "ptb": "(S (NP One)) (S (NP Two) ())"}),
      json.dumps({"id": "j5", "trees": []}),
  ]) + "\n")
  result = prepare([inputs, jsonl], tmp_path / "out")
  counts = result.counts
  assert counts.documents_in == 9 and counts.documents_out == 3
  assert dict(counts.dropped["documents"]) == {
      "invalid utf-8": 1, "empty document": 3, "invalid JSON line": 1,
      "record without trees": 1}
  assert counts.dropped["sentences"]["malformed tree (unbalanced brackets)"] == 1
  assert counts.dropped["sentences"]["malformed tree (empty tree)"] == 1
  assert counts.dropped["sentences"]["empty after normalization"] == 1
  assert counts.balanced()
  source = DocumentSource(tmp_path / "out")
  ids = sorted(source[i].id for i in range(len(source)))
  assert len(source) == 3 and ids[-2:] == ["j1", "j4"]
  total = source.accounting().stage("prepare")
  assert total.to_json() == counts.to_json()  # the manifest carries the accounting


def test_sharded_prepare_covers_everything_and_checks_completeness(tmp_path):
  gum = require_shared("gum")
  files = sorted((gum / "const").glob("*.ptb"))[:7]
  for i in range(3):
    assert main([*map(str, files), f"--output={tmp_path / 'out'}", f"--shard={i}/3",
                 "--records_per_file=2"]) == 0
  source = DocumentSource(tmp_path / "out")
  assert len(source) == 7 and len(source.files) == 4  # 3 + 2 + 2 documents, 2 per file
  assert sorted(source[i].id for i in range(7)) == sorted(map(str, files))
  want = {str(f): base_sequence(ptb.read_file(f)) for f in files}
  assert all(_same_base(source[i].base, want[source[i].id]) for i in range(7))
  (tmp_path / "out" / "manifest-00001-of-00003.json").unlink()
  with pytest.raises(RecordError, match=r"missing: 1 of 3 .*manifest-00001-of-00003.json"):
    DocumentSource(tmp_path / "out")


def test_sentences_as_documents(tmp_path):
  gum = require_shared("gum")
  one = sorted((gum / "const").glob("*.ptb"))[0]
  trees = ptb.read_file(one)
  prepare([one], tmp_path, sentences_as_documents=True)
  source = DocumentSource(tmp_path)
  assert len(source) == len(trees)
  assert [source[i].trees() for i in range(3)] == [[t] for t in trees[:3]]


def test_words_and_documents_for_tokenizers_and_held_out_sets(tmp_path):
  documents = generate_documents(4, seed=2)
  lines = [json.dumps({"id": str(k), "trees": [t.to_bracketed() for t in d]})
           for k, d in enumerate(documents)]
  (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n")
  prepare([tmp_path / "d.jsonl"], tmp_path / "out")
  source = DocumentSource(tmp_path / "out")
  assert source.documents() == [list(d) for d in documents]
  assert source.documents(limit=1) == [list(documents[0])]
  assert list(source.words()) == [w for d in documents for t in d for w in t.leaves()]
