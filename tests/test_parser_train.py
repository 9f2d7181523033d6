"""`python -m slm_jax.parser.train` end to end on a tiny treebank: training, checkpoint/resume,
export, summary; and the GUM split reader."""

from __future__ import annotations

import json

import pytest

from slm_jax import cli
from slm_jax.parser import corpus, train
from slm_jax.parser.api import load_parser
from slm_jax.parser.config import CONFIGS, named_config

TREES = """(ROOT (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))
(S (NP the dog) (VP barked (PP at (NP the cat))) .)
(S (NP a bird) (VP sang))
(S (VP Go (ADVP home)) !)
(NP (NP dogs) and (NP cats))
(S (NP he) (VP saw (NP the bird) (PP in (NP trees))))
"""


@pytest.fixture()
def treebank(tmp_path):
  path = tmp_path / "tiny.ptb"
  path.write_text(TREES * 3)
  return path


def run(tmp_path, treebank, *extra):
  return cli.run(train.main, [f"--workdir={tmp_path / 'work'}", "--config=tiny",
                              f"--train={treebank}", f"--dev={treebank}", *extra])


@pytest.mark.slow  # about a minute on a loaded 2-core machine (compilation)
def test_train_resume_and_export(tmp_path, treebank, capsys):
  # A time limit far below one step: stops after the first step, checkpointed, exit 1.
  assert run(tmp_path, treebank, "--max_minutes=0.0001") == cli.EXIT_INCOMPLETE
  out = capsys.readouterr().out
  assert "minute limit" in out
  export = tmp_path / "export"
  assert run(tmp_path, treebank, "--max_epochs=2", f"--export={export}") == 0  # cache hit
  out = capsys.readouterr().out
  assert "resumed from step 1 (epoch 0, batch 1)" in out
  assert "loss" in out and "words/s" in out and "ETA" in out
  summary = json.loads((tmp_path / "work" / "summary.json").read_text())
  assert summary["stop"] == "reached 2 epochs"
  assert summary["data"]["train_sentences"] == 18
  assert [h["epoch"] for h in summary["history"]] == [0, 1]
  assert 0 <= summary["dev"]["f1"] <= 100
  parser = load_parser(export)
  tree = parser.parse([["the", "cat", "sat", "."]])[0]
  assert tree.leaves() == ["the", "cat", "sat", "."]
  assert (export / "train_log.txt").is_file() and (export / "summary.json").is_file()


def test_bad_flags_are_one_error_line(tmp_path, treebank, capsys):
  assert run(tmp_path, treebank, "--split=ptb") == cli.EXIT_USAGE
  assert "only named split is 'gum'" in capsys.readouterr().err
  assert cli.run(train.main, [f"--workdir={tmp_path}", "--config=huge"]) == cli.EXIT_USAGE
  assert "unknown parser config 'huge'" in capsys.readouterr().err


def test_configs_are_frozen():
  assert set(CONFIGS) == {"tiny", "default", "gpu"}
  with pytest.raises(Exception):
    named_config("default").learning_rate = 1.0  # type: ignore[misc]


def test_gum_split_names_and_files(tmp_path):
  (tmp_path / "const").mkdir()
  (tmp_path / "splits.md").write_text("# Splits\n\n## dev\n\n  * GUM_a\n  * GUM_b\n\n"
                                      "## train\n\n  * GUM_c\n")
  (tmp_path / "const" / "GUM_a.ptb").write_text("(S a)\n")
  (tmp_path / "const" / "GUM_c.ptb").write_text("(S c)\n")
  assert corpus.gum_split_names((tmp_path / "splits.md").read_text()) == {
      "dev": ["GUM_a", "GUM_b"], "train": ["GUM_c"]}
  files, missing = corpus.gum_split_files("dev", tmp_path)
  assert [f.name for f in files] == ["GUM_a.ptb"] and missing == ["GUM_b"]
  with pytest.raises(ValueError, match="no documents listed under '## test'"):
    corpus.gum_split_files("test", tmp_path)
  with pytest.raises(ValueError, match="unknown GUM split"):
    corpus.gum_split_files("valid", tmp_path)


def test_real_gum_split_is_complete_apart_from_reddit():
  from tests.shared_data import require_shared
  gum = require_shared("gum")
  for split in ("train", "dev", "test"):
    files, missing = corpus.gum_split_files(split, gum)
    assert files and all(name.startswith("GUM_reddit_") for name in missing)
