"""The UUAS probe's gold side (`slm_jax.gtca.probe_trees`): dependency trees from head rules,
punctuation (tagged, and untagged words by the probe CLI's evalb set), tree distances, the MST."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.gtca import probe_trees, structural_probe
from slm_jax.gtca.probe import PUNCT_WORDS

CAT = "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"


def tree(text: str):
  return ptb.parse_trees(text, normalize=probe_trees.TREE_OPTIONS)[0]


def test_head_rules_on_a_tagged_tree():
  words, kept, heads = probe_trees.tree_dependencies(tree(CAT), PUNCT_WORDS)
  assert words == ["the", "cat", "sat", "on", "the", "mat", "."]
  assert kept.tolist() == [0, 1, 2, 3, 4, 5]  # the final "." is punctuation
  # the→cat, cat→sat, sat = root, on→sat, the→mat, mat→on
  assert heads.tolist() == [1, 2, -1, 2, 5, 3]
  assert probe_trees.tree_edges(heads) == {(0, 1), (1, 2), (2, 3), (4, 5), (3, 5)}


def test_distances_hand_computed():
  d = probe_trees.tree_distances(np.array([1, 2, -1, 2, 5, 3]))
  want = np.array([[0, 1, 2, 3, 5, 4],
                   [1, 0, 1, 2, 4, 3],
                   [2, 1, 0, 1, 3, 2],
                   [3, 2, 1, 0, 2, 1],
                   [5, 4, 3, 2, 0, 1],
                   [4, 3, 2, 1, 1, 0]])
  np.testing.assert_array_equal(d, want)
  assert probe_trees.sentence(tree(CAT), PUNCT_WORDS).distances.tolist() == want.tolist()


def test_untagged_tree_punctuation_and_rules():
  s = probe_trees.sentence(tree("(S Cats (VP chase mice) .)"), PUNCT_WORDS)
  assert s.words == ("Cats", "chase", "mice", ".") and s.kept.tolist() == [0, 1, 2]
  assert s.heads.tolist() == [1, -1, 1]
  np.testing.assert_array_equal(s.distances, [[0, 1, 2], [1, 0, 1], [2, 1, 0]])
  # A tagged "$" is a word (it heads "$ 100"); tagged "," is not.
  s = probe_trees.sentence(
      tree("(S (NP (QP ($ $) (CD 100))) (, ,) (VP (VBZ is) (ADJP (JJ ok))))"), PUNCT_WORDS)
  assert s.kept.tolist() == [0, 1, 3, 4]
  assert probe_trees.head_child("NP", ["DT", "JJ", "NN"]) == 2
  assert probe_trees.head_child("NP", ["NP", "POS"]) == 1
  assert probe_trees.head_child("PP", ["IN", "NP"]) == 0
  assert probe_trees.head_child("VP", ["MD", "VP"]) == 0
  assert probe_trees.head_child("S", ["NP", "VP"]) == 1
  # A sentence of punctuation and one word has no edge: not probed.
  probed = probe_trees.sentences_from_trees([tree("(S (NP (NN Hi)) (. !))"), tree(CAT)],
                                            PUNCT_WORDS)
  assert [s.n for s in probed] == [6]


def test_bad_heads_are_errors():
  with pytest.raises(ValueError, match="exactly one root"):
    probe_trees.tree_distances(np.array([1, 0]))
  with pytest.raises(ValueError, match="cycle"):
    probe_trees.tree_distances(np.array([-1, 2, 1]))


def random_heads(n: int, rng: np.random.Generator) -> np.ndarray:
  """A random tree over n nodes (each node attached to an earlier one, then relabelled)."""
  parent = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
  perm = rng.permutation(n)  # node k is called perm[k]
  heads = np.empty(n, np.int64)
  heads[perm] = np.where(parent >= 0, perm[np.maximum(parent, 0)], -1)
  return heads


def test_mst_recovers_the_tree_from_its_own_distances():
  rng = np.random.default_rng(0)
  sentences = []
  for n in list(range(2, 30)) * 2:
    heads = random_heads(n, rng)
    d = probe_trees.tree_distances(heads)
    assert probe_trees.min_spanning_tree(d) == probe_trees.tree_edges(heads)
    sentences.append(probe_trees.ProbeSentence(tuple(map(str, range(n))), np.arange(n), heads, d))
  assert structural_probe.uuas([s.distances for s in sentences], sentences) == 1.0
  # Reversed distances do not.
  assert structural_probe.uuas([-s.distances for s in sentences], sentences) < 0.5
