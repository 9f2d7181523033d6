"""prepare: sharded output, completeness checks, every dropped document counted, and the CLI."""

from __future__ import annotations

import json

import pytest

from slm_jax import ptb
from slm_jax.corpus.treebank import generate_documents
from slm_jax.data.documents import DocumentSource, prepare
from slm_jax.data.records import RecordError
from slm_jax.linearize import base_sequence
from slm_jax.prepare import main
from tests.shared_data import require_shared
from tests.test_records import same_base


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
  assert all(same_base(source[i].base, want[source[i].id]) for i in range(7))
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


@pytest.mark.parametrize("dashed", [False, True])
def test_cli_accepts_the_underscored_and_the_dashed_flag_spellings(tmp_path, capsys, dashed):
  documents = generate_documents(3, seed=5)
  trees = tmp_path / "trees.ptb"
  ptb.write_trees(trees, [tree for document in documents for tree in document])
  flags = ["--sentences_as_documents", "--records_per_file=2"]
  if dashed:
    flags = [flag.replace("_", "-") for flag in flags]
  assert main([str(trees), f"--output={tmp_path / 'out'}", "--format=ptb", "--shard=0/1",
               *flags]) == 0
  n = sum(len(d) for d in documents)  # one document per tree
  assert f"prepare: {n:,} documents → {n:,}" in capsys.readouterr().out
  source = DocumentSource(tmp_path / "out")
  assert len(source) == n and len(source.files) == -(-n // 2)
  assert [source[i].trees() for i in range(len(source))] == [[t] for d in documents for t in d]


def test_cli_errors_are_one_line_naming_the_input_and_exit_2(tmp_path, capsys):
  missing = tmp_path / "missing.ptb"
  assert main([str(missing), f"--output={tmp_path / 'out'}"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and str(missing) in err[0]
  bad = tmp_path / "bad.ptb"
  bad.write_text("(S (NP a))\n(S (NP b)\n")
  assert main([str(bad), f"--output={tmp_path / 'out'}", "--strict"]) == 2
  assert capsys.readouterr().err.strip() == f"error: {bad}:2: unbalanced brackets: 1 unclosed '('"
  assert main([str(bad), f"--output={tmp_path / 'out'}", "--shard=3/2"]) == 2
  assert "error: --shard 3/2: need 0 <= i < n" in capsys.readouterr().err


def test_a_truncated_or_corrupt_file_is_named_with_the_command_that_rebuilds_it(tmp_path):
  from slm_jax.data.documents import DocumentSource, prepare
  from slm_jax.data.records import RecordError
  trees = tmp_path / "trees"
  trees.mkdir()
  for i in range(3):
    (trees / f"d{i}.ptb").write_text(f"(S (NP a{i}) (VP b c))\n")
  out = tmp_path / "out"
  prepare([trees], out, shard=(0, 1))
  assert len(DocumentSource(out)) == 3
  (path,) = out.glob("*.array_record")
  path.write_bytes(path.read_bytes()[:-20])  # a copy cut short
  with pytest.raises(RecordError, match=rf"{path.name}: 0 readable records.*manifest lists 3.*"
                                        rf"--output={out} --shard=0/1"):
    DocumentSource(out)
  path.write_bytes(b"not an array record")
  with pytest.raises(RecordError, match="truncated or corrupt"):
    DocumentSource(path)


def test_unfinished_parse_shard_counts_and_strict_failures_leave_nothing_behind(tmp_path):
  """prepare refuses an unfinished parse (unless --allow_partial, which counts what is missing),
  a folder prepared with another --shard count, and leaves no partial file when it stops."""
  import json
  from slm_jax.parse.__main__ import main as parse_main
  parsed = tmp_path / "parsed"
  (parsed / "shard-00000-of-00002").mkdir(parents=True)
  (parsed / "shard-00000-of-00002" / "part-00000-000000.jsonl").write_text(
      json.dumps({"id": "a", "trees": ["(S (NP a) (VP b))"]}) + "\n")
  assert main([str(parsed), f"--output={tmp_path / 'out'}"]) == 2  # no report, shard 1 missing
  assert not (tmp_path / "out").exists()
  assert main([str(parsed), f"--output={tmp_path / 'out'}", "--allow_partial"]) == 0
  manifest = json.loads((tmp_path / "out" / "manifest-00000-of-00001.json").read_text())
  assert manifest["accounting"]["prepare"]["notes"][
      "unfinished parse shards (--allow_partial)"] == 2
  assert main([str(parsed), f"--output={tmp_path / 'out'}", "--allow_partial",
               "--shard=0/2"]) == 2  # the folder holds …/1 shards
  assert parse_main(["--report", str(tmp_path / "nowhere")]) == 2
  assert parse_main(["--report", str(tmp_path / "out")]) == 2  # no parse shards in it
  bad = tmp_path / "bad.ptb"
  bad.write_text("(S (NP a) (VP b))\n(S (NP a b)\n")
  assert main([str(bad), f"--output={tmp_path / 'strict'}", "--strict"]) == 2
  assert not list((tmp_path / "strict").glob("*array_record*"))  # nothing half written
  assert not list((tmp_path / "strict").glob("*.tmp")) and not list(
      (tmp_path / "strict").glob("manifest-*"))


def test_two_writers_of_one_shard_are_refused_other_shards_are_not(tmp_path, capsys):
  trees = tmp_path / "t.mrg"
  trees.write_text("(S (NP a) (VP b))\n")
  out = tmp_path / "out"
  out.mkdir()
  (out / ".lock.0-of-2").write_text(json.dumps({"pid": 7, "host": "other-host", "started": "T",
                                                "what": "prepare"}))
  assert main([str(trees), f"--output={out}", "--shard=0/2"]) == 2
  err = capsys.readouterr().err
  assert f"error: {out}: in use by pid 7 on other-host since T (prepare)" in err
  assert main([str(trees), f"--output={out}", "--shard=1/2"]) == 0  # its own share is free
  assert not (out / ".lock.1-of-2").exists()
