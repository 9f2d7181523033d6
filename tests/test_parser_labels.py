"""Label vocabulary, binarization and debinarization (`slm_jax.parser.labels`)."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.kinds import PTB_LABELS
from slm_jax.parser import labels as L
from slm_jax.ptb import parse_trees

TREES = parse_trees(
    "(S (NP The old cat) (VP sat (PP on (NP the mat))) .)"
    "(S (VP Go (ADVP home)))"
    "(SBAR (S (VP leave)))"
    "(NP (NP dogs) and (NP (QP five) cats) ,)"
    "(X word)")


def test_vocabulary_holds_empty_ptb_labels_and_training_chains():
  vocab = L.LabelVocab.from_trees(TREES)
  assert vocab.labels[0] == L.EMPTY
  assert vocab.labels[1:27] == PTB_LABELS
  assert vocab.labels[27:] == ("S+VP", "SBAR+S+VP")  # in order of first appearance
  assert vocab.index("S+VP") == vocab.labels.index("S+VP")
  assert vocab.index("SQ+VP") == vocab.index("SQ")  # an unseen chain: its top label
  with pytest.raises(KeyError, match="FOO"):
    vocab.index("FOO")
  assert L.LabelVocab.from_json(vocab.to_json()) == vocab


def test_right_and_left_binarization_spans():
  vocab = L.LabelVocab.from_trees(TREES)
  tree = TREES[0]  # 8 words: The old cat sat on the mat .
  idx = vocab.index
  right = {(i, j): label for i, j, label in L.binarize(tree, vocab, "right").tolist()}
  assert len(right) == 2 * 8 - 1
  assert right[(0, 8)] == idx("S") and right[(0, 3)] == idx("NP") and right[(3, 7)] == idx("VP")
  assert right[(1, 3)] == 0  # NP (The old cat) → The ∅(old cat)
  assert right[(3, 8)] == 0  # S → NP ∅(VP .)
  assert right[(4, 7)] == idx("PP") and right[(5, 7)] == idx("NP")
  left = {(i, j): label for i, j, label in L.binarize(tree, vocab, "left").tolist()}
  assert left[(0, 2)] == 0 and left[(0, 7)] == 0 and (1, 3) not in left
  leaves = [right[(k, k + 1)] for k in range(8)]
  assert leaves == [0] * 8
  chain = {(i, j): label for i, j, label in L.binarize(TREES[2], vocab).tolist()}
  assert chain == {(0, 1): idx("SBAR+S+VP")}  # one word under a chain: one length-1 span


@pytest.mark.parametrize("direction", ["right", "left"])
def test_debinarize_inverts_binarize(direction):
  vocab = L.LabelVocab.from_trees(TREES)
  for tree in TREES:
    spans = L.binarize(tree, vocab, direction)
    assert L.debinarize(tree.leaves(), spans, vocab) == tree
    shuffled = spans[np.random.default_rng(0).permutation(len(spans))]
    assert L.debinarize(tree.leaves(), shuffled, vocab) == tree


def test_spans_key_identifies_the_debinarized_tree():
  vocab = L.LabelVocab.from_trees(TREES)
  tree = TREES[3]
  right, left = L.binarize(tree, vocab, "right"), L.binarize(tree, vocab, "left")
  assert L.spans_key(right) == L.spans_key(left)
  assert L.spans_key(right) == tuple(sorted(map(tuple, L.tree_label_ids(tree, vocab).tolist())))


def test_debinarize_rejects_crossing_and_rootless_spans():
  vocab = L.LabelVocab.from_trees(TREES)
  np_ = vocab.index("NP")
  with pytest.raises(ValueError, match="covers all 3 words"):
    L.debinarize(["a", "b", "c"], np.array([(0, 2, np_)]), vocab)
  with pytest.raises(ValueError, match="crosses"):
    L.debinarize(["a", "b", "c"], np.array([(0, 3, np_), (0, 2, np_), (1, 3, np_)]), vocab)
