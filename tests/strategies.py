"""Hypothesis strategies for random trees and documents (shared by the property tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from slm_jax.kinds import PTB_LABELS
from slm_jax.trees import Tree

# A few labels, including nested same-label cases, and words that look like structure symbols.
LABELS = st.sampled_from(("S", "NP", "VP", "PP", "SBAR", "X") + PTB_LABELS[:4])
WORDS = st.sampled_from(("the", "cat", "cats", "chase", "VP)", "(S", "<s>", ")", "-LRB-", "é",
                         "mice", "a", "word", "<P>"))


def trees(max_leaves: int = 12) -> st.SearchStrategy[Tree]:
  """Random normalized trees (no empty constituents, words as leaves)."""
  return st.recursive(
      WORDS.map(lambda w: Tree("NP", (w,))),
      lambda children: st.builds(
          Tree, LABELS, st.lists(st.one_of(WORDS, children), min_size=1, max_size=4).map(tuple)),
      max_leaves=max_leaves)


def documents(max_sentences: int = 4) -> st.SearchStrategy[list[Tree]]:
  return st.lists(trees(), min_size=1, max_size=max_sentences)
