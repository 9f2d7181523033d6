"""The parser's library API, its files and the parse CLI, on a tiny random model."""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib

import pytest
from flax import nnx

from slm_jax import cli
from slm_jax.eval.proposals import FileProposals
from slm_jax.parser import parse as parse_cli
from slm_jax.parser.api import load_parser
from slm_jax.parser.config import named_config
from slm_jax.parser.labels import LabelVocab
from slm_jax.parser.model import SpanScorer
from slm_jax.parser.vocab import Vocab
from slm_jax.parser.weights import ParserFileError, save_parser

WORDS = ["the", "cat", "sat", "on", "a", "mat", "."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> pathlib.Path:
  cfg = dataclasses.replace(named_config("tiny").model, max_words=12)
  vocab = Vocab.from_sentences([WORDS], min_count=1)
  labels = LabelVocab(("∅", "NP", "VP", "S", "PP", "S+VP"))
  model = SpanScorer(cfg, len(vocab.words), len(vocab.chars), len(labels), nnx.Rngs(3))
  return save_parser(tmp_path_factory.mktemp("parser"), model, vocab, labels)


def test_saved_parser_loads_and_parses_the_same(folder):
  parser = load_parser(folder)
  again = load_parser(folder)
  sentences = [WORDS, WORDS[:2], ["unseen", "wörds", "ok", "€"], ["x"]]
  trees = parser.parse(sentences)
  assert trees == again.parse(sentences)
  assert [t.leaves() for t in trees] == sentences
  assert trees[3].label in ("NP", "VP", "S", "PP")  # one word: a root node (or chain) over it


def test_parse_rejects_empty_and_too_long_sentences(folder):
  parser = load_parser(folder)
  with pytest.raises(ValueError, match="sentence 1 is empty"):
    parser.parse([WORDS, []])
  with pytest.raises(ValueError, match="sentence 0 has 13 words; the parser takes at most 12"):
    parser.parse([["w"] * 13])


def test_missing_and_corrupt_files_name_the_file(folder, tmp_path):
  with pytest.raises(ParserFileError, match="no such parser folder"):
    load_parser(tmp_path / "nothing")
  broken = tmp_path / "broken"
  broken.mkdir()
  for name in ("config.json", "vocab.json", "model.safetensors"):
    (broken / name).write_bytes((folder / name).read_bytes())
  (broken / "model.safetensors").write_bytes(b"not a safetensors file")
  with pytest.raises(ParserFileError, match=r"broken/model\.safetensors: not a readable"):
    load_parser(broken)
  (broken / "model.safetensors").unlink()
  with pytest.raises(ParserFileError, match=r"broken/model\.safetensors: missing"):
    load_parser(broken)
  (broken / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
  config = json.loads((folder / "config.json").read_text())
  config["model"]["hidden"] = 20
  (broken / "config.json").write_text(json.dumps(config))
  with pytest.raises(ParserFileError, match="weights do not fit config.json"):
    load_parser(broken)
  (broken / "config.json").write_text("{")
  with pytest.raises(ParserFileError, match=r"broken/config\.json: not valid JSON"):
    load_parser(broken)


def test_parse_cli_lines_empty_and_too_long(folder, tmp_path, capsys, monkeypatch):
  text = "The cat sat on the mat.\n\n" + " ".join(["w"] * 13) + "\nDon't go (now)!\n"
  monkeypatch.setattr("sys.stdin", io.StringIO(text))
  out = tmp_path / "trees.txt"
  assert cli.run(parse_cli.main, ["-", f"--model={folder}", f"--output={out}"]) == 0
  lines = out.read_text().split("\n")
  assert len(lines) == 5 and lines[4] == ""
  assert lines[1] == "" and lines[2] == ""  # the empty line and the skipped one keep their place
  from slm_jax.ptb import parse_trees
  assert parse_trees(lines[0])[0].leaves() == ["The", "cat", "sat", "on", "the", "mat", "."]
  assert parse_trees(lines[3])[0].leaves() == ["Do", "n't", "go", "-LRB-", "now", "-RRB-", "!"]
  err = capsys.readouterr().err
  assert "<stdin>:3: skipped: 13 words" in err
  assert "parsed 2 sentences" in err and "empty lines: 1" in err and "too long (skipped): 1" in err


def test_parse_cli_samples_are_read_by_file_proposals(folder, tmp_path):
  source = tmp_path / "in.txt"
  source.write_text("the cat sat\n\na mat .\n")
  out = tmp_path / "proposals.txt"
  assert parse_cli.main([str(source), f"--model={folder}", "--pretokenized", "--samples=5",
                         f"--output={out}"]) == 0
  proposals = FileProposals(out)
  assert len(proposals) == 2
  trees = proposals.proposals(["the", "cat", "sat"])
  assert 1 <= len(trees) <= 5 and len(set(trees)) == len(trees)
  assert proposals.duplicates_dropped == 0


def test_parse_cli_names_the_line_of_bad_input(folder, tmp_path, capsys):
  source = tmp_path / "in.txt"
  source.write_bytes(b"the cat sat\na \xff mat\n")
  assert cli.run(parse_cli.main, [str(source), f"--model={folder}"]) == 2
  assert f"error: {source}:2: invalid UTF-8 at byte 14" in capsys.readouterr().err
  source.write_text("the cat sat\na (mat) .\n")
  assert cli.run(parse_cli.main, [str(source), f"--model={folder}", "--pretokenized"]) == 2
  assert (f"error: {source}:2: word '(mat)' holds a bracket: --pretokenized words are PTB "
          "tokens") in capsys.readouterr().err


def test_parse_cli_bad_model_is_one_error_line(tmp_path, capsys):
  source = tmp_path / "in.txt"
  source.write_text("a b\n")
  assert cli.run(parse_cli.main, [str(source), f"--model={tmp_path / 'none'}"]) == 2
  assert capsys.readouterr().err.startswith("error: ")
