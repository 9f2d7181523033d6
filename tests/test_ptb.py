"""Tests of the PTB reader/writer and SPEC §1 normalization (`slm_jax.ptb`)."""

from __future__ import annotations

import collections
import pickle
import re
import time

import pytest
from hypothesis import given, settings, strategies as st

from slm_jax import ptb
from slm_jax.ptb import NormalizeOptions, ReadReport, TreeError
from slm_jax.trees import Tree
from tests.shared_data import require_shared


def parse_one(text: str, **kw) -> Tree:
  trees = ptb.parse_trees(text, **kw)
  assert len(trees) == 1, trees
  return trees[0]


def line(text: str) -> str:
  return ptb.format_tree(parse_one(text))


def line_with(text: str, options: NormalizeOptions | None) -> str:
  return ptb.format_tree(parse_one(text, normalize=options))


# --- normalization (SPEC §1) ---------------------------------------------------------------------


def test_running_example_with_root_wrapper_and_pos():
  text = "(ROOT (S (NP (NNS Cats)) (VP (VBP chase) (NP (NNS mice)))))"
  expected = Tree("S", (Tree("NP", ("Cats",)), Tree("VP", ("chase", Tree("NP", ("mice",))))))
  assert parse_one(text) == expected
  assert line("(ROOT (S (NNS Cats) (VP (VBP chase) (NNS mice))))") == "(S Cats (VP chase mice))"


def test_ptb_sample_tree_matches_skeletal_form():
  combined = """
( (S
    (NP-SBJ
      (NP (NNP Pierre) (NNP Vinken) )
      (, ,)
      (ADJP
        (NP (CD 61) (NNS years) )
        (JJ old) )
      (, ,) )
    (VP (MD will)
      (VP (VB join)
        (NP (DT the) (NN board) )
        (PP-CLR (IN as)
          (NP (DT a) (JJ nonexecutive) (NN director) ))
        (NP-TMP (NNP Nov.) (CD 29) )))
    (. .) ))
"""
  assert line(combined) == (
      "(S (NP (NP Pierre Vinken) , (ADJP (NP 61 years) old) ,) (VP will (VP join "
      "(NP the board) (PP as (NP a nonexecutive director)) (NP Nov. 29))) .)")


def test_wrappers_empty_root_and_top():
  for text in ["( (S (NN a)))", "(ROOT (S (NN a)))", "(TOP (S (NN a)))", "(S (NN a))"]:
    assert line(text) == "(S a)"
  raw = parse_one("( (S (NN a)))", normalize=None)
  assert raw == Tree("", (Tree("S", (Tree("NN", ("a",)),)),))
  keep = parse_one("(ROOT (S (NN a)))", normalize=NormalizeOptions(drop_wrapper=False))
  assert keep == Tree("ROOT", (Tree("S", ("a",)),))


def test_none_leaves_and_emptied_constituents_cascade():
  text = """( (S (NP-SBJ-1 (NP (-NONE- *T*-1)) (SBAR (-NONE- 0) (S (-NONE- *T*-2))))
               (VP (VBD left) (NP (-NONE- *-1)))))"""
  assert line(text) == "(S (VP left))"
  assert line("(S (NP (DT the) (-NONE- *U*)) (VP (VB go)))") == "(S (NP the) (VP go))"
  keep = NormalizeOptions(drop_empty=False, drop_preterminals=False)
  assert ptb.format_tree(parse_one("(S (NP (-NONE- *)) (VP (VB go)))", normalize=keep)) == \
      "(S (NP (-NONE- *)) (VP (VB go)))"


def test_tree_with_only_none_is_counted_and_skipped():
  report = ReadReport()
  trees = ptb.parse_trees("(S (NN a))\n( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *?*))))\n(S (NN b))",
                          report=report)
  assert [ptb.format_tree(t) for t in trees] == ["(S a)", "(S b)"]
  assert (report.empty_after_normalization, report.trees_read, report.trees_skipped) == (1, 2, 0)


@pytest.mark.parametrize("label, stripped", [
    ("NP-SBJ-1", "NP"), ("PP=2", "PP"), ("NP-SBJ=3", "NP"), ("NP-SBJ=1-3", "NP"), ("S-TPC-1", "S"),
    ("ADVP-PRD-LOC=3", "ADVP"), ("WHNP-260", "WHNP"), ("NP", "NP"), ("-LRB-", "-LRB-"),
    ("-RRB-", "-RRB-"), ("-NONE-", "-NONE-"), ("-", "-"), ("ADVP|PRT", "ADVP|PRT")])
def test_strip_function_tags(label, stripped):
  assert ptb.strip_function_tags(label) == stripped


def test_function_tags_and_indices_in_trees():
  text = "(S (NP-SBJ-1 (NN a)) (VP (VB b) (PP=2 (IN c) (NP-SBJ=3 (NN d)))))"
  assert line(text) == "(S (NP a) (VP b (PP c (NP d))))"
  keep = NormalizeOptions(strip_function_tags=False, unknown_labels="keep")
  assert line_with(text, keep) == "(S (NP-SBJ-1 a) (VP b (PP=2 c (NP-SBJ=3 d))))"


def test_brackets_stay_words_and_tags():
  text = "(NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-))"
  assert line(text) == "(NP -LRB- x -RRB-)"
  with_pos = parse_one(text, normalize=NormalizeOptions(drop_preterminals=False))
  assert ptb.format_tree(with_pos) == text


def test_pos_removal_keeps_unary_chains():
  assert line("(S (VP (VP (VB go))))") == "(S (VP (VP go)))"
  assert line("(ROOT (NP (NP (NNP English))))") == "(NP (NP English))"


def test_unknown_labels_map_to_x_and_are_counted():
  report = ReadReport()
  tree = parse_one("(ROOT (S (NML-SBJ (NN a) (NN b)) (VP (VB c) (NML (NN d)))))", report=report)
  assert ptb.format_tree(tree) == "(S (X a b) (VP c (X d)))"
  assert report.unknown_labels == collections.Counter({"NML": 2})
  assert "NML" in report.summary()


def test_counted_warning_is_logged_without_a_report(caplog):
  with caplog.at_level("WARNING", logger="slm_jax.ptb"):
    ptb.parse_trees("(S (NML (NN a)))", source="w.mrg")
  assert "w.mrg" in caplog.text and "'NML' ×1" in caplog.text


def test_sentence_of_words_only_keeps_an_x_root_and_is_counted_as_such():
  """GUM's `(ROOT (VB Understand))`: the wrapper holds no phrase, so the words stay under X. That
  is not an unknown label (ROOT is a known wrapper), so strict label checking accepts it."""
  text = "(ROOT (VB Understand))\n(TOP (UH Uh) (UH huh))\n(ROOT (S (NN a)))"
  expected = [Tree("X", ("Understand",)), Tree("X", ("Uh", "huh")), Tree("S", ("a",))]
  for options in (NormalizeOptions(), NormalizeOptions(unknown_labels="raise")):
    report = ReadReport()
    assert ptb.parse_trees(text, normalize=options, report=report) == expected
    assert (report.word_roots, report.unknown_labels) == (2, collections.Counter())
    assert "words only, kept under an X root: 2" in report.summary()
  keep = NormalizeOptions(drop_wrapper=False, unknown_labels="keep")
  assert ptb.parse_trees("(ROOT (VB Go))", normalize=keep)[0] == Tree("ROOT", ("Go",))


def test_unknown_labels_raise_mode():
  text = "(S (NN a))\n(S\n  (NML (NN a))\n  (VP (VB b)))"
  with pytest.raises(TreeError) as info:
    ptb.parse_trees(text, normalize=NormalizeOptions(unknown_labels="raise"))
  assert (info.value.line, info.value.kind) == (3, ptb.UNKNOWN)
  assert "'NML'" in info.value.reason
  # POS tags are never checked, only phrase labels.
  assert ptb.parse_trees("(S (GW a) (HYPH -))", normalize=NormalizeOptions(unknown_labels="raise"))


def test_raw_mode_keeps_everything():
  text = "(ROOT (S (NP-SBJ-1 (-NONE- *)) (VP (VB go))))"
  expected = Tree("ROOT", (Tree("S", (Tree("NP-SBJ-1", (Tree("-NONE-", ("*",)),)),
                                      Tree("VP", (Tree("VB", ("go",)),)))),))
  assert parse_one(text, normalize=None) == expected
  assert parse_one(text, normalize=NormalizeOptions.raw()) == expected
  assert ptb.normalize_tree(expected, None) == expected
  assert ptb.normalize_tree(expected) == Tree("S", (Tree("VP", ("go",)),))


def test_skeletal_input_keeps_mixed_children():
  text = "( (S (NP-SBJ (NP Pierre Vinken) , (ADJP (NP 61 years) old) ,) (VP will (VP join)) .))"
  tree = parse_one(text, normalize=NormalizeOptions(drop_preterminals=False))
  assert ptb.format_tree(tree) == (
      "(S (NP (NP Pierre Vinken) , (ADJP (NP 61 years) old) ,) (VP will (VP join)) .)")


def test_several_trees_in_order_across_and_within_lines():
  text = "(S (NN a)) (S (NN b))\n\n(ROOT\n  (S (NN c)))\r\n( (S (NN d)))(S (NN e))"
  assert [t.leaves() for t in ptb.parse_trees(text)] == [["a"], ["b"], ["c"], ["d"], ["e"]]
  assert ptb.parse_trees("") == [] and ptb.parse_trees(" \n\t\n") == []


# --- malformed input -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, line_no, kind, reason", [
    ("(S (NN a))\n\n(S (NP (NN b))\n  (VP (VB c))", 3, ptb.UNBALANCED,
     "unbalanced brackets: 1 unclosed '('"),
    ("(S (NN a))\n(S\n  (NP (NN b\n", 2, ptb.UNBALANCED, "unbalanced brackets: 3 unclosed '('"),
    ("(S (NN a))\n(S (NN b)))\n(S (NN c))", 2, ptb.UNBALANCED,
     "unbalanced brackets: unexpected ')'"),
    (")", 1, ptb.UNBALANCED, "unbalanced brackets: unexpected ')'"),
    ("(S (NN a))\n\n()", 3, ptb.EMPTY_TREE, "empty tree"),
    ("(S (NN a)\n   ( ) (NN b))", 2, ptb.EMPTY_TREE, "empty tree"),
    ("(S\n  (NP (NN a))\n  (VP ))", 3, ptb.NO_CHILDREN, "node 'VP' has no children"),
    ("(S (NN a))\nhello (S (NN b))", 2, ptb.STRAY_WORD, "word outside any tree: 'hello'"),
    ("(", 1, ptb.UNBALANCED, "unbalanced brackets: 1 unclosed '('"),
])
def test_malformed_input_is_located(text, line_no, kind, reason):
  with pytest.raises(TreeError) as info:
    ptb.parse_trees(text, source="doc.mrg")
  error = info.value
  assert (error.source, error.line, error.kind, error.reason) == ("doc.mrg", line_no, kind, reason)
  assert str(error) == f"doc.mrg:{line_no}: {reason}"
  assert isinstance(error, ValueError)
  again = pickle.loads(pickle.dumps(error))
  assert (again.source, again.line, again.reason, again.kind) == ("doc.mrg", line_no, reason, kind)


def test_lenient_mode_skips_and_counts():
  text = "\n".join([
      "(S (NN a))",            # 1 ok
      "(S (NN b)))",           # 2 stray ')': tree taken back
      "(S () (NN c))",         # 3 empty tree inside
      "stray words here",      # 4 one run of stray words
      "(S (VP ) (NN d))",      # 5 node without children
      "( (S (-NONE- *)))",     # 6 empty after normalization
      "(S (NN e))",            # 7 ok
      "(S (NP (NN f))",        # 8 unclosed: skipped up to the next line starting with '('
      "  (VP (VB g))",         # 9
      "(S (NN h))",            # 10 ok
  ])
  report = ReadReport()
  trees = ptb.parse_trees(text, source="x.mrg", lenient=True, report=report)
  assert [t.leaves() for t in trees] == [["a"], ["e"], ["h"]]
  assert (report.trees_read, report.trees_skipped, report.empty_after_normalization) == (3, 5, 1)
  assert report.skipped_by_reason == collections.Counter({
      ptb.UNBALANCED: 2, ptb.EMPTY_TREE: 1, ptb.STRAY_WORD: 1, ptb.NO_CHILDREN: 1})
  assert [(e.line, e.kind) for e in report.errors] == [
      (2, ptb.UNBALANCED), (3, ptb.EMPTY_TREE), (4, ptb.STRAY_WORD), (5, ptb.NO_CHILDREN),
      (8, ptb.UNBALANCED)]
  assert "skipped 5 malformed" in report.summary()
  with pytest.raises(TreeError, match=r"^x.mrg:2: unbalanced brackets: unexpected"):
    ptb.parse_trees(text, source="x.mrg")


def test_lenient_unknown_label_raise_skips_tree():
  report = ReadReport()
  options = NormalizeOptions(unknown_labels="raise")
  trees = ptb.parse_trees("(S (NML (NN a)))\n(S (NN b))", normalize=options, lenient=True,
                          report=report)
  assert trees == [Tree("S", ("b",))] and report.skipped_by_reason == {ptb.UNKNOWN: 1}


def test_report_merge():
  first, second = ReadReport(), ReadReport()
  ptb.parse_trees("(S (NML (NN a)))", report=first)
  ptb.parse_trees("(S (NN b))\n)", report=second, lenient=True)
  first.merge(second)
  assert (first.trees_read, first.trees_skipped, first.unknown_labels["NML"]) == (1, 1, 1)
  assert len(first.errors) == 1


def test_bad_labels_and_words_of_tree_objects():
  for tree, kind in [(Tree("NP SBJ", ("a",)), ptb.BAD_LABEL), (Tree("NP", ("a b",)), ptb.BAD_WORD),
                     (Tree("NP(", ("a",)), ptb.BAD_LABEL), (Tree("NP", ("",)), ptb.BAD_WORD),
                     (Tree("S", (Tree("NP", ()),)), ptb.NO_CHILDREN)]:
    with pytest.raises(TreeError) as info:
      ptb.format_tree(tree)
    assert info.value.kind == kind
    with pytest.raises(TreeError):
      ptb.normalize_tree(tree)


# --- writer and round trips ----------------------------------------------------------------------


def test_format_one_line_and_pretty():
  tree = Tree("S", ("Cats", Tree("VP", ("chase", Tree("NP", ("mice",))))))
  assert ptb.format_tree(tree) == "(S Cats (VP chase (NP mice)))"
  assert ptb.format_tree(tree, pretty=True) == "(S\n  Cats\n  (VP\n    chase\n    (NP mice)))"
  assert ptb.format_document([tree, tree]) == "(S Cats (VP chase (NP mice)))\n" * 2
  # Normalized trees are re-read raw: the default would take (NP mice) for a POS preterminal.
  text = ptb.format_document([tree, tree], pretty=True)
  assert ptb.parse_trees(text, normalize=None) == [tree, tree]


_LABELS = st.sampled_from(["S", "NP", "VP", "PP", "X", "NP-SBJ-1", "PP=2", "-NONE-", "-LRB-", "NN",
                           "ROOT", "TOP", "NML", "ADVP|PRT", "WHNP-12"])
_WORDS = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp"),
                               blacklist_characters="()\x85"), min_size=1, max_size=4)


def _trees():
  return st.recursive(
      st.builds(Tree, _LABELS, st.lists(_WORDS, min_size=1, max_size=2).map(tuple)),
      lambda inner: st.builds(
          Tree, _LABELS, st.lists(st.one_of(inner, _WORDS), min_size=1, max_size=4).map(tuple)),
      max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(_trees(), st.booleans())
def test_round_trip_raw(tree, pretty):
  text = ptb.format_tree(tree, pretty=pretty)
  assert ptb.parse_trees(text, normalize=None) == [tree]
  wrapped = Tree("", (tree,))
  assert ptb.parse_trees(ptb.format_tree(wrapped), normalize=None) == [wrapped]


@settings(max_examples=150, deadline=None)
@given(_trees(), st.sampled_from([NormalizeOptions(), NormalizeOptions(drop_preterminals=False),
                                  NormalizeOptions(unknown_labels="raise"),
                                  NormalizeOptions(drop_empty=False, strip_function_tags=False)]))
def test_normalize_tree_agrees_with_reader(tree, options):
  text = ptb.format_tree(tree)
  from_text, from_tree = ReadReport(), ReadReport()
  try:
    expected = ptb.parse_trees(text, normalize=options, report=from_text)
  except TreeError as error:
    with pytest.raises(TreeError, match=re.escape(error.reason)):
      ptb.normalize_tree(tree, options, from_tree)
    return
  result = ptb.normalize_tree(tree, options, from_tree)
  assert ([] if result is None else [result]) == expected
  assert from_tree.unknown_labels == from_text.unknown_labels
  assert from_tree.empty_after_normalization == from_text.empty_after_normalization
  if result is not None:  # normalized output is a fixed point of raw reading
    assert ptb.parse_trees(ptb.format_tree(result), normalize=None) == [result]


_PIECES = st.sampled_from(["(", ")", "(", ")", "(", ")", "S", "NP-SBJ", "-NONE-", "*", "ROOT", "NN",
                           "word", "é", "-LRB-", " ", " ", "  ", "\n", "\t", "\r\n", "\u00a0"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join),
       st.sampled_from([NormalizeOptions(), None, NormalizeOptions(unknown_labels="raise")]))
def test_fuzz_only_tree_errors(text, options):
  try:
    strict = ptb.parse_trees(text, normalize=options, source="f")
  except TreeError as error:
    assert error.source == "f" and 1 <= error.line <= text.count("\n") + 1
    strict = None
  report = ReadReport()
  lenient = ptb.parse_trees(text, normalize=options, lenient=True, report=report)
  if strict is not None:
    assert lenient == strict and report.trees_skipped == 0
  else:
    assert report.trees_skipped >= 1 and report.errors
  for tree in lenient:
    assert ptb.parse_trees(ptb.format_tree(tree), normalize=None) == [tree]


@given(st.text(max_size=60))
def test_tokenize_matches_regex(text):
  assert ptb.tokenize(text) == ptb._TOKEN_RE.findall(text)


# --- files ---------------------------------------------------------------------------------------


def test_files_folders_and_documents(tmp_path):
  (tmp_path / "b").mkdir()
  ptb.write_trees(tmp_path / "b" / "two.mrg", [Tree("S", ("c",)), Tree("S", ("d",))])
  (tmp_path / "a.ptb").write_text("\ufeff(ROOT (S (NN a)))\n(ROOT (S (NN b)))\n", encoding="utf-8")
  (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
  (tmp_path / "ignored.json").write_text("{}", encoding="utf-8")
  folder = ptb.read_folder(tmp_path)
  assert [name.rsplit("/", 1)[-1] for name, _ in folder] == ["a.ptb", "two.mrg", "empty.txt"]
  assert [len(trees) for _, trees in folder] == [2, 2, 0]
  report = ReadReport()
  documents = ptb.read_documents([tmp_path / "a.ptb", tmp_path / "b"], report=report)
  assert [[t.leaves()[0] for t in doc] for doc in documents] == [["a", "b"], ["c", "d"]]
  assert (report.files_read, report.trees_read) == (2, 4)
  report = ReadReport()
  assert len(ptb.read_documents(tmp_path, sentences=True, report=report)) == 4
  assert report.empty_files == 1
  two = ptb.read_file(tmp_path / "b" / "two.mrg", normalize=None)
  assert two == [Tree("S", ("c",)), Tree("S", ("d",))]


def test_file_errors_name_the_file(tmp_path):
  missing = tmp_path / "missing.mrg"
  with pytest.raises(FileNotFoundError, match="missing.mrg"):
    ptb.read_file(missing)
  with pytest.raises(FileNotFoundError, match="missing.mrg"):
    ptb.read_documents([missing])
  bad = tmp_path / "bad.mrg"
  bad.write_text("(S (NN a))\n(S (NN b)\n", encoding="utf-8")
  with pytest.raises(TreeError, match=re.escape(f"{bad}:2: unbalanced brackets")):
    ptb.read_file(bad)
  latin = tmp_path / "latin.mrg"
  latin.write_bytes(b"(S (NN a))\n(S (NN caf\xe9))\n")
  with pytest.raises(TreeError) as info:
    ptb.read_file(latin)
  assert (info.value.source, info.value.line, info.value.kind) == (str(latin), 2, ptb.BAD_ENCODING)
  latin.write_bytes(b"\xef\xbb\xbf(S (NN a))\n\n(S (NN caf\xe9))\n")  # after a BOM
  with pytest.raises(TreeError, match=r":3: invalid UTF-8"):
    ptb.read_file(latin)
  report = ReadReport()
  assert ptb.read_file(latin, lenient=True, report=report) == []
  assert report.files_skipped == 1 and report.skipped_by_reason[ptb.BAD_ENCODING] == 1


# --- the shared corpora (strict mode, zero errors) -----------------------------------------------


def test_ptb_sample_reads_cleanly():
  folder = require_shared("ptb_sample") / "combined"
  report = ReadReport()
  documents = ptb.read_folder(folder, patterns=("*.mrg",), report=report)
  assert len(documents) == 199
  assert sum(len(trees) for _, trees in documents) == report.trees_read == 3914
  assert report.trees_skipped == 0 and report.empty_after_normalization == 0
  assert report.unknown_labels == collections.Counter({"ADVP|PRT": 1})
  labels = {node.label for _, trees in documents for tree in trees for node in tree.subtrees()}
  assert labels <= set(ptb.PTB_LABELS)
  print(report.summary())


def test_gum_reads_cleanly():
  folder = require_shared("gum") / "const"
  report = ReadReport()
  start = time.perf_counter()
  documents = ptb.read_documents(folder, report=report)
  seconds = time.perf_counter() - start
  assert len(documents) == 263 == len(list(folder.glob("*.ptb")))
  assert sum(len(doc) for doc in documents) == report.trees_read == 14597
  assert report.trees_skipped == 0 and report.empty_after_normalization == 0
  # 24 one-word sentences (ROOT (VB Understand)) become (X Understand).
  assert report.word_roots == 24 and not report.unknown_labels
  words = sum(len(tree.leaves()) for doc in documents for tree in doc)
  print(f"GUM: {len(documents)} documents, {report.trees_read} trees, {words} words, "
        f"read in {seconds:.2f} s")
  print(report.summary())


def test_one_word_phrases_are_not_mistaken_for_pos_tags():
  # A skeletal (already normalized) tree reads back unchanged with the default normalization.
  text = "(S (NP the hungry cat) (VP meows))"
  assert ptb.format_tree(ptb.parse_trees(text)[0]) == text
  raw = "(ROOT (S (NP (DT the) (NN cat)) (VP (VBZ meows))))"
  assert ptb.format_tree(ptb.parse_trees(raw)[0]) == "(S (NP the cat) (VP meows))"


def test_embedded_treebank_round_trips_through_the_default_reader():
  from slm_jax.corpus import treebank
  documents = treebank.generate_documents(20, seed=3)
  for document in documents:
    text = ptb.format_document(document)
    assert ptb.parse_trees(text) == list(document)
