"""Input discovery: one rule for prepare/training, the parse stage and the PTB folder readers."""

from __future__ import annotations

import pytest

from slm_jax import inputs, ptb
from slm_jax.inputs import PARSE_INPUTS, TREE_INPUTS, discover, ptb_files
from slm_jax.trees import Tree


def _touch(folder, *names):
  for name in names:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")


def _names(found, root):
  return [(str(path)[len(str(root)) + 1:], fmt) for path, fmt in found]


def test_a_folder_contributes_every_file_of_a_known_format_sorted(tmp_path):
  _touch(tmp_path, "b.jsonl", "a.parquet", "c.ptb", "D.MRG", "sub/e.txt", "sub/f.tree",
         "report.json", "manifest-00000-of-00001.json", "notes.md", ".part-1.jsonl.tmp")
  assert _names(discover([tmp_path], TREE_INPUTS), tmp_path) == [
      ("D.MRG", "ptb"), ("a.parquet", "parquet"), ("b.jsonl", "jsonl"), ("c.ptb", "ptb"),
      ("sub/e.txt", "ptb"), ("sub/f.tree", "ptb")]
  assert _names(discover([tmp_path], PARSE_INPUTS), tmp_path) == [
      ("a.parquet", "parquet"), ("b.jsonl", "jsonl"), ("sub/e.txt", "text")]
  assert _names(discover(tmp_path, TREE_INPUTS, "jsonl"), tmp_path) == [("b.jsonl", "jsonl")]
  assert _names(discover([tmp_path], ptb_files(("*.mrg",))), tmp_path) == [("D.MRG", "ptb")]


def test_named_files_are_read_whatever_their_name_or_rejected_naming_the_flag(tmp_path):
  _touch(tmp_path, "docs.json", "trees.dat", "raw.TXT", "part.Parquet")
  named = [tmp_path / n for n in ("trees.dat", "docs.json", "raw.TXT", "part.Parquet")]
  assert _names(discover(named, TREE_INPUTS), tmp_path) == [
      ("docs.json", "jsonl"), ("part.Parquet", "parquet"), ("raw.TXT", "ptb"),
      ("trees.dat", "ptb")]
  assert discover([tmp_path / "trees.dat"], TREE_INPUTS, "jsonl") == [
      (str(tmp_path / "trees.dat"), "jsonl")]
  assert discover([tmp_path / "raw.TXT"], PARSE_INPUTS) == [(str(tmp_path / "raw.TXT"), "text")]
  with pytest.raises(ValueError, match=r"trees\.dat: unknown input format.*--input_format="
                     r"parquet\|jsonl\|text"):
    discover([tmp_path / "trees.dat"], PARSE_INPUTS)
  assert discover([tmp_path / "trees.dat"], PARSE_INPUTS, "text") == [
      (str(tmp_path / "trees.dat"), "text")]
  # A folder never contributes .json files (reports, manifests) nor unknown names.
  _touch(tmp_path, "sub/docs.json", "sub/trees.dat")
  with pytest.raises(FileNotFoundError, match=r"no input files \(\*\.parquet, \*\.jsonl, "
                     r"\*\.txt, \*\.text\) under") as error:
    discover([tmp_path / "sub"], PARSE_INPUTS)
  assert error.value.filename == str(tmp_path / "sub")


def test_every_file_once_and_every_problem_names_the_path(tmp_path):
  _touch(tmp_path, "a/x.ptb", "a/y.ptb", "b/z.ptb")
  (tmp_path / "empty").mkdir()
  found = discover([tmp_path / "b", tmp_path / "a" / "y.ptb", tmp_path / "a"], TREE_INPUTS)
  assert _names(found, tmp_path) == [("a/x.ptb", "ptb"), ("a/y.ptb", "ptb"), ("b/z.ptb", "ptb")]
  with pytest.raises(FileNotFoundError) as error:
    discover([tmp_path / "a", tmp_path / "empty"], TREE_INPUTS)
  assert error.value.filename == str(tmp_path / "empty") and "no input files" in str(error.value)
  with pytest.raises(FileNotFoundError, match="no input files .*jsonl.* under") as error:
    discover([tmp_path / "a"], TREE_INPUTS, "jsonl")
  assert error.value.filename == str(tmp_path / "a")
  with pytest.raises(FileNotFoundError, match="input does not exist") as error:
    discover([tmp_path / "a", tmp_path / "missing.ptb"], TREE_INPUTS)
  assert error.value.filename == str(tmp_path / "missing.ptb")
  with pytest.raises(ValueError, match="--format must be auto or one of jsonl, parquet, ptb, "
                     "got 'text'"):
    discover([tmp_path / "a"], TREE_INPUTS, "text")
  with pytest.raises(ValueError, match="no input paths given"):
    discover([], PARSE_INPUTS)


def test_ptb_readers_use_the_same_rule(tmp_path):
  ptb.write_trees(tmp_path / "b.ptb", [Tree("S", ("b",))])
  (tmp_path / "a").mkdir()
  ptb.write_trees(tmp_path / "a" / "x.MRG", [Tree("S", ("x",))])
  documents = ptb.read_documents([tmp_path / "b.ptb", tmp_path / "a", tmp_path / "b.ptb"])
  assert [d[0].leaves() for d in documents] == [["x"], ["b"]]  # sorted by path, each file once
  assert [name for name, _ in ptb.read_folder(tmp_path)] == [str(tmp_path / "a" / "x.MRG"),
                                                             str(tmp_path / "b.ptb")]
  assert ptb.DEFAULT_PATTERNS == inputs.PTB_PATTERNS
  with pytest.raises(FileNotFoundError, match="no input files \\(\\*\\.tree\\) under"):
    ptb.read_folder(tmp_path, patterns=("*.tree",))
