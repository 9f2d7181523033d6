"""Evaluator proposals from slm_jax's own parser: distinct trees over exactly the words, best
first, batched prefetch equal to one-at-a-time, too-long input handed to the fallback."""

from __future__ import annotations

import pytest

from slm_jax.eval.parser_proposals import ParserProposals
from slm_jax.eval.proposals import NoProposals


@pytest.fixture(scope="module")
def source():
  return ParserProposals(k=5, seed=3)  # the shipped GUM model


def test_k_distinct_trees_over_the_words(source):
  words = ["The", "cat", "sat", "on", "the", "mat", "."]
  trees = source.proposals(words)
  assert 1 <= len(trees) <= 5 and len({str(t) for t in trees}) == len(trees)
  assert all(t.leaves() == words for t in trees)
  assert source.proposals(words) is trees  # cached


def test_batched_prefetch_equals_one_at_a_time_and_bad_input_is_no_proposals(source):
  sentences = [["Dogs", "bark", "."], ["She", "reads", "old", "books", "."]]
  batched = ParserProposals(k=5, seed=3)
  batched.prefetch(sentences)
  assert batched.stats["sampled"] == 2
  assert [[str(t) for t in batched.proposals(s)] for s in sentences] == [
      [str(t) for t in source.proposals(s)] for s in sentences]
  with pytest.raises(NoProposals):
    source.proposals([])
  with pytest.raises(NoProposals, match="takes 1 to"):
    source.proposals(["w"] * (source.parser.max_words + 1))
