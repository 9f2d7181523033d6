"""`auto` proposals (SPEC §9, the evaluator's default for BLiMP and doc-PPL): the embedded
grammar's exact posterior where it parses the sentence, the shipped parser's K samples for real
English, a flat tree only where neither has one; every source counted; the parser never sees
what the grammar covers."""

from __future__ import annotations

import collections

import pytest

from slm_jax import evaluate
from slm_jax.corpus.treebank import embedded_corpus
from slm_jax.eval.blimp import word_tokenize
from slm_jax.eval.proposals import ChainProposals, FlatProposals, NoProposals, ProposalSource
from slm_jax.evaluation.sources import auto_source, blimp_source
from slm_jax.trees import Tree


class Recording(ProposalSource):
  """Trees for the sentences in `table`; records what was prefetched."""

  def __init__(self, table):
    self.table = {tuple(k): v for k, v in table.items()}
    self.prefetched: list[tuple[str, ...]] = []

  def prefetch(self, sentences):
    self.prefetched.extend(tuple(s) for s in sentences)

  def proposals(self, sentence_words):
    try:
      return self.table[tuple(sentence_words)]
    except KeyError:
      raise NoProposals("not mine") from None


def test_chain_takes_the_first_source_with_trees_and_counts_each():
  a, b = ("x", "y"), ("p", "q")
  first = Recording({a: [Tree("S", ("x", (Tree("NP", ("y",)))))]})
  second = Recording({b: [Tree("S", (Tree("NP", ("p",)), "q"))]})
  chain = ChainProposals([("grammar", first), ("parser", second), ("flat", FlatProposals())])
  chain.prefetch([a, b, ("z",), a])
  assert first.prefetched == [a, b, ("z",)]
  assert second.prefetched == [b, ("z",)]  # only what the grammar cannot serve
  assert chain.proposals(a) == first.table[a]
  assert chain.proposals(b) == second.table[b]
  assert chain.proposals(["z"]) == [Tree("S", ("z",))]
  assert chain.stats == collections.Counter(grammar=1, parser=1, flat=1)
  with pytest.raises(NoProposals, match="grammar: not mine; parser: not mine; flat: an empty"):
    chain.proposals([])
  with pytest.raises(ValueError, match="distinct source names"):
    ChainProposals([("a", first), ("a", second)])


def test_auto_is_the_default_and_gives_a_real_blimp_sentence_parser_trees():
  args = evaluate.parse_args(["--workdir=w", "--out=o"])
  assert args.syntactic.blimp_proposals == "auto"
  assert args.syntactic.docppl_proposals is None  # None: auto
  source = blimp_source(args.syntactic.blimp_proposals, 5, 0)
  real = word_tokenize("The teachers who the student admired were talking about the lecture.")
  embedded = tuple(embedded_corpus("test", 1, 0)[0][0].leaves())
  trees = source.proposals(real)
  assert trees and all(tuple(t.leaves()) == tuple(real) for t in trees)
  assert trees != [Tree("S", tuple(real))]  # not the flat stand-in
  assert any(isinstance(child, Tree) for t in trees for child in t.children)
  assert source.proposals(embedded)  # the grammar's posterior
  assert source.stats == collections.Counter(parser=1, grammar=1)


def test_auto_never_loads_the_parser_for_grammar_sentences():
  source = auto_source(5, 0)
  embedded = [tuple(t.leaves()) for t in embedded_corpus("test", 2, 0)[0]]
  source.prefetch(embedded)
  for words in embedded:
    source.proposals(words)
  assert source.stats == collections.Counter(grammar=len(embedded))
  assert source.named[1][1]._source is None  # pylint: disable=protected-access
