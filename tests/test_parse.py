"""The parse stage on FineWeb-Edu-layout Parquet: splitting, sharding, resume, the sentence cache
(a rerun parses nothing), the report by reason, pass-through trees, and the benepar backend as far
as it can be checked without its model."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os

import pytest

from slm_jax import inputs, ptb
from slm_jax.data import parquet
from slm_jax.data.documents import DocumentSource, prepare
from slm_jax.parse import readers
from slm_jax.parse.__main__ import main as parse_main
from slm_jax.parse.backends import (BENEPAR_DEFAULT_MODEL, BeneparBackend, FlatBackend,
                                    ModelNotFoundError, ParseFailure, PassThroughBackend,
                                    benepar_input_fields, tree_to_string)
from slm_jax.parse.stage import StageOptions, _normalized, run_shard
from tests.shared_data import require_shared

TEXTS = [
    'Dr. Smith went to Washington D.C. on Jan. 5th. He said "hi (quietly)" and left!',
    "",  # an empty document
    "Cats chase mice. Mice run away.\n\nA new paragraph starts here.",
    "Cats chase mice. " + "word " * 60 + "end.",  # the 2nd sentence is too long
    "This one will FAIL to parse. But this one is fine.",
    "This gives BAD output.",  # the only sentence comes back malformed: the document is dropped
    "Prices rose 5% to $3.50, it's said. Don't you think so?",
]


def _fineweb(path, texts=TEXTS, row_group_size=2):
  """A Parquet file with FineWeb-Edu's columns (only `text` is needed)."""
  pa = pytest.importorskip("pyarrow")
  pq = pytest.importorskip("pyarrow.parquet")
  n = len(texts)
  table = pa.table({"text": texts, "id": [f"<urn:uuid:{k}>" for k in range(n)],
                    "dump": ["CC-MAIN-2024-10"] * n,
                    "url": [f"https://e.org/{k}" for k in range(n)],
                    "file_path": ["s3://commoncrawl/x.warc.gz"] * n, "language": ["en"] * n,
                    "language_score": [0.95] * n, "token_count": [100] * n,
                    "score": [3.1] * n, "int_score": [3] * n})
  pq.write_table(table, path, row_group_size=row_group_size)
  return path


class CountingBackend(FlatBackend):
  """A tiny parser: right-branching trees with POS tags and a TOP wrapper, like benepar's output;
  fails on sentences containing FAIL and writes a malformed tree for BAD."""

  name = "counting"

  def _parse(self, sentences):
    out = []
    for s in sentences:
      if "FAIL" in s.escaped:
        out.append(ParseFailure("parser error (test)"))
      elif "BAD" in s.escaped:
        out.append("(TOP (S (NN oops)")
      else:
        words = " ".join(f"(NN {w})" for w in s.escaped[1:])
        out.append(f"(TOP (S (NN {s.escaped[0]}) (VP {words})))" if words
                   else f"(TOP (S (NN {s.escaped[0]})))")
    return out


def test_splitter_sentences_and_ptb_tokens():
  splitting = pytest.importorskip("slm_jax.splitting")
  pytest.importorskip("pysbd")
  pytest.importorskip("nltk")
  sentences = splitting.Splitter().split(TEXTS[0] + "\n" + TEXTS[6])
  assert [s.escaped for s in sentences] == [
      ("Dr.", "Smith", "went", "to", "Washington", "D.C.", "on", "Jan.", "5th", "."),
      ("He", "said", "``", "hi", "-LRB-", "quietly", "-RRB-", "''", "and", "left", "!"),
      ("Prices", "rose", "5", "%", "to", "$", "3.50", ",", "it", "'s", "said", "."),
      ("Do", "n't", "you", "think", "so", "?")]
  second = sentences[1]
  assert second.words[2:8] == ('"', "hi", "(", "quietly", ")", '"')
  assert second.space_after[:5] == (True, True, False, True, False)  # `said "hi (quietly`


def test_units_and_shards_cover_every_row_group(tmp_path):
  path = _fineweb(tmp_path / "a.parquet")
  jsonl = tmp_path / "b.jsonl"
  jsonl.write_text("".join(json.dumps({"text": f"Doc {k}.", "id": k}) + "\n" for k in range(5)))
  files = inputs.discover([tmp_path], inputs.PARSE_INPUTS)
  units = readers.list_units(files, jsonl_block=2)
  assert [(u.fmt, u.part) for u in units] == [("parquet", p) for p in range(4)] + \
      [("jsonl", p) for p in range(3)]
  shards = [readers.shard_units(units, i, 3) for i in range(3)]
  assert sorted(u.name for s in shards for u in s) == sorted(u.name for u in units)
  texts = [d.text for u in units for d in readers.read_unit(u, jsonl_block=2)]
  assert texts == TEXTS + [f"Doc {k}." for k in range(5)]
  assert parquet.read_column(str(path), 1, "text")[1] == ["<urn:uuid:2>", "<urn:uuid:3>"]


def _outputs(directory):
  lines = []
  for part in sorted(directory.rglob("part-*.jsonl")):
    lines.extend(json.loads(line) for line in part.read_text().splitlines())
  return sorted(lines, key=lambda d: d["id"])


def test_stage_reports_every_drop_resumes_and_never_parses_twice(tmp_path):
  pytest.importorskip("pysbd")
  pytest.importorskip("nltk")
  source = _fineweb(tmp_path / "fineweb.parquet")
  out = tmp_path / "parsed"
  options = StageOptions(max_words=40, batch_sentences=3)
  backend = CountingBackend()
  first = run_shard([source], out, backend, options=options)
  assert first.units_done == 4 and backend.calls == 10 and backend.batches == 4
  counts = first.counts
  assert counts.documents_in == 7 and counts.documents_out == 5 and counts.balanced()
  assert dict(counts.dropped["documents"]) == {"empty document": 1, "no sentence parsed": 1}
  assert dict(counts.dropped["sentences"]) == {
      "longer than --max_words=40": 1, "parser error (test)": 1, "malformed parser output": 1}
  docs = _outputs(out)
  assert [d["id"] for d in docs] == ["<urn:uuid:0>", "<urn:uuid:2>", "<urn:uuid:3>",
                                     "<urn:uuid:4>", "<urn:uuid:6>"]
  assert docs[0]["trees"][1] == ("(S He (VP said `` hi -LRB- quietly -RRB- '' and left !))")
  # Rerun: every unit is done; nothing is read or parsed, the report is the same.
  again = run_shard([source], out, backend, options=options)
  assert (again.units_done, again.units_resumed, backend.calls) == (0, 4, 10)
  assert again.counts.to_json()["dropped"] == counts.to_json()["dropped"]
  # Forced rerun (or a crash mid-unit): the cache answers, the backend is not called.
  forced = run_shard([source], out, backend, options=dataclasses.replace(options, force=True))
  assert forced.units_done == 4 and backend.calls == 10
  assert forced.counts.notes["sentences from the cache"] == 10
  assert _outputs(out) == docs
  # Two shards together write what one shard wrote; prepare reads the stage's output.
  for i in range(2):
    run_shard([source], tmp_path / "two", CountingBackend(), shard=(i, 2), options=options)
  assert _outputs(tmp_path / "two") == docs
  assert parse_main(["--report", str(tmp_path / "two")]) == 0
  prepare([out], tmp_path / "prepared")
  prepared = DocumentSource(tmp_path / "prepared")
  assert len(prepared) == 5
  by_id = {prepared[i].id: prepared[i].trees() for i in range(5)}
  assert by_id["<urn:uuid:0>"] == ptb.parse_trees("\n".join(docs[0]["trees"]))


def test_pass_through_reads_trees_in_the_text_and_counts_malformed_ones(tmp_path):
  gum = require_shared("gum")
  files = sorted((gum / "const").glob("*.ptb"))[:3]
  texts = [f.read_text() for f in files] + ["(S (NP a) (VP b)) (S (NP broken (VP tree)\n", ""]
  source = _fineweb(tmp_path / "trees.parquet", texts)
  result = run_shard([source], tmp_path / "out", PassThroughBackend(),
                     options=StageOptions(output_format="parquet"))
  counts = result.counts
  assert counts.documents_in == 5 and counts.documents_out == 4 and counts.balanced()
  assert counts.dropped["sentences"]["malformed tree (unbalanced brackets)"] == 1
  assert counts.dropped["documents"]["empty document"] == 1
  pq = pytest.importorskip("pyarrow.parquet")
  table = pq.read_table(sorted((tmp_path / "out").rglob("part-*.parquet"))[0])
  assert table.column_names == ["id", "text"]
  assert ptb.parse_trees(table.column("text")[0].as_py()) == ptb.read_file(files[0])
  prepare([tmp_path / "out"], tmp_path / "prepared")  # prepare reads the Parquet parts too
  prepared = DocumentSource(tmp_path / "prepared")
  assert len(prepared) == 4 and prepared[0].trees() == ptb.read_file(files[0])


def test_parser_output_is_normalized_like_the_reader():
  report = ptb.ReadReport()
  out = _normalized("(TOP (S (NP-SBJ (NNP Dr.) (NNP Smith)) (VP (VBD went)) (. .)))", report)
  assert out == "(S (NP Dr. Smith) (VP went) .)"
  assert _normalized("(TOP (S (NN x)", report) == ParseFailure("malformed parser output")
  nltk = pytest.importorskip("nltk")
  tree = nltk.Tree.fromstring("(TOP (S (NP (PRP It)) (VP (VBZ works)) (. .)))")
  assert tree_to_string(tree) == "(TOP (S (NP (PRP It)) (VP (VBZ works)) (. .)))"


def test_benepar_input_conversion():
  splitting = pytest.importorskip("slm_jax.splitting")
  pytest.importorskip("pysbd")
  sentence = splitting.Splitter().split('He said "hi (quietly)."')[0]
  fields = benepar_input_fields(sentence)
  assert fields["words"] == ["He", "said", '"', "hi", "(", "quietly", ")", ".", '"']
  assert fields["escaped_words"] == ["He", "said", "``", "hi", "-LRB-", "quietly", "-RRB-", ".",
                                     "''"]
  assert fields["space_after"] == [True, True, False, True, False, False, False, False, False]
  benepar = pytest.importorskip("benepar", reason="benepar (the parse extra) is not installed")
  converted = BeneparBackend().inputs([sentence])[0]
  assert isinstance(converted, benepar.InputSentence)
  assert converted.words == fields["words"] and converted.escaped_words == fields["escaped_words"]


def _benepar_model_installed() -> bool:
  try:
    import nltk  # pylint: disable=g-import-not-at-top
    nltk.data.find(f"models/{BENEPAR_DEFAULT_MODEL}")
    return True
  except (ImportError, LookupError):
    return False


def test_missing_benepar_model_says_how_to_get_it(tmp_path):
  with pytest.raises(ModelNotFoundError, match=r"does not exist.*benepar\.download"):
    BeneparBackend(str(tmp_path / "no_model")).load()
  if _benepar_model_installed():
    pytest.skip("a benepar model is installed here; the missing-model path cannot be shown")
  try:
    importlib.import_module("benepar")
  except ImportError:
    with pytest.raises(ImportError, match=r"parse extra.*pip install"):
      BeneparBackend().load()
    return
  with pytest.raises(ModelNotFoundError) as error:
    BeneparBackend().load()
  message = str(error.value)
  assert "python -c \"import benepar; benepar.download('benepar_en3')\"" in message
  assert "--model=/path/to/benepar_en3" in message
  assert parse_main(["--output", str(tmp_path), str(tmp_path)]) == 2  # the CLI fails early


@pytest.mark.skipif(not _benepar_model_installed(),
                    reason="benepar model benepar_en3 not installed (needs a download: "
                    "python -c \"import benepar; benepar.download('benepar_en3')\")")
def test_real_benepar_model_parses(tmp_path):  # pragma: no cover - needs the model
  pytest.importorskip("pysbd")
  source = _fineweb(tmp_path / "f.parquet", [TEXTS[0], TEXTS[6]])
  result = run_shard([source], tmp_path / "out", BeneparBackend(),
                     options=StageOptions(cache_dir=None))
  assert result.counts.sentences_out == 4 and result.counts.balanced()
  trees = [t for d in _outputs(tmp_path / "out") for t in d["trees"]]
  assert all(ptb.parse_trees(t)[0].leaves() for t in trees)
  assert os.path.exists(result.directory / "report.json")


@pytest.mark.parametrize("dashed", [False, True])
def test_cli_accepts_the_underscored_and_the_dashed_flag_spellings(tmp_path, capsys, dashed):
  source = tmp_path / "trees.dat"  # an unknown suffix: --input_format says what it is
  source.write_text("".join(json.dumps({"body": t, "key": f"k{k}"}) + "\n" for k, t in
                            enumerate(["(S (NP a) (VP b))", "(S (NP broken", "(S (NP c))"])))
  spell = (lambda name: name.replace("_", "-")) if dashed else (lambda name: name)
  flags = [f"--{spell(name)}={value}" for name, value in (
      ("input_format", "jsonl"), ("output_format", "jsonl"), ("text_field", "body"),
      ("id_field", "key"), ("batch_size", 2), ("max_words", 5),
      ("cache_dir", tmp_path / "cache"))] + ["--force"]
  out = tmp_path / "out"
  assert parse_main([str(source), f"--output={out}", "--backend=passthrough", "--shard=0/1",
                     *flags]) == 0
  assert "1 units parsed" in capsys.readouterr().out
  assert [(d["id"], d["trees"]) for d in _outputs(out)] == [("k0", ["(S (NP a) (VP b))"]),
                                                           ("k2", ["(S (NP c))"])]
  assert parse_main([str(source), f"--output={out}", "--backend=passthrough",
                     f"--{spell('no_cache')}", f"--{spell('input_format')}=jsonl",
                     f"--{spell('text_field')}=body", f"--{spell('id_field')}=key"]) == 0
  assert parse_main(["--report", str(out)]) == 0
  printed = capsys.readouterr().out
  assert "0 units parsed, 1 already done" in printed and "3 documents → 2" in printed


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
  source = tmp_path / "trees.dat"
  source.write_text("(S (NP a))\n")
  assert parse_main([str(source), f"--output={tmp_path}", "--backend=passthrough"]) == 2
  err = capsys.readouterr().err.strip()
  assert err == (f"error: {source}: unknown input format (suffix '.dat'); pass "
                 "--input_format=parquet|jsonl|text")
  assert parse_main([str(source), "--backend=passthrough"]) == 2
  assert capsys.readouterr().err.strip() == ("error: give INPUT… and --output (or --report "
                                             "OUTPUT)")
  assert parse_main([str(source), f"--output={tmp_path}", "--shard=2"]) == 2
  assert "error: --shard must look like i/n (e.g. 3/16), got '2'" in capsys.readouterr().err


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
  from slm_jax.parse import stage

  def full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")

  target = tmp_path / "part-00000-000000.jsonl"
  monkeypatch.setattr(stage.json, "dumps", full_disk)  # the write fails midway
  with pytest.raises(OSError, match="No space left"):
    stage._write_part(target, [("a", ["(S a)"])], "jsonl")
  assert list(tmp_path.iterdir()) == []


def test_a_non_string_text_column_is_named_with_its_type(tmp_path):
  import pyarrow as pa
  import pyarrow.parquet as pq
  path = tmp_path / "numbers.parquet"
  pq.write_table(pa.table({"text": [1, 2, 3], "id": ["a", "b", "c"]}), path)
  assert parse_main([str(path), f"--output={tmp_path / 'out'}", "--backend=passthrough"]) == 2
  from slm_jax.data.parquet import read_rows
  with pytest.raises(ValueError, match=r"numbers.parquet: column 'text' holds int64, not text"):
    read_rows(str(path), 0)


def test_the_slm_backend_parses_offline_with_the_shipped_model(tmp_path):
  """`--backend=slm`: raw text → trees with slm_jax's own parser, no download; the cache key
  names the model; a corrupt model folder is one error line."""
  source = tmp_path / "docs.jsonl"
  source.write_text(json.dumps({"id": "a", "text": "The cat sat on the mat. Dogs bark."}) + "\n")
  out = tmp_path / "parsed"
  assert parse_main([str(source), f"--output={out}", "--backend=slm", "--no_cache"]) == 0
  (part,) = out.rglob("part-*.jsonl")
  trees = json.loads(part.read_text().splitlines()[0])["trees"]
  assert len(trees) == 2
  assert ptb.parse_trees(trees[0])[0].leaves() == ["The", "cat", "sat", "on", "the", "mat", "."]
  broken = tmp_path / "broken_model"
  broken.mkdir()
  (broken / "config.json").write_text("{not json")
  assert parse_main([str(source), f"--output={tmp_path / 'p2'}", "--backend=slm",
                     f"--model={broken}"]) == 2


def test_another_backend_s_shard_is_not_counted_as_done(tmp_path, capsys):
  source = tmp_path / "doc.txt"
  source.write_text("Cats chase mice.\n")
  out = tmp_path / "out"
  assert parse_main([str(source), f"--output={out}", "--backend=flat", "--no_cache"]) == 0
  capsys.readouterr()
  assert parse_main([str(source), f"--output={out}", "--backend=passthrough", "--no_cache"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and "\n" not in err
  assert "holds another parse (backend: 'flat" in err and "'passthrough" in err
  assert parse_main([str(source), f"--output={out}", "--backend=flat", "--no_cache",
                     "--max_words=3"]) == 2
  assert "max_words: 200 in the folder, 3 now" in capsys.readouterr().err
