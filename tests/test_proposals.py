"""Proposal sources: the inside sampler draws exactly from the grammar's posterior (checked against
brute-force enumeration), its probabilities are the generator's, files parse in both formats; beam
proposals are the model's completed beam hypotheses and rescore to the beam's probabilities."""

from __future__ import annotations

import collections
import json
import math

import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.corpus.grammar import default_grammar
from slm_jax.corpus.treebank import embedded_corpus, generate_sentence
from slm_jax.eval.blimp import sentence_log_probs
from slm_jax.eval.docppl import (counted_tokens, distinct_candidates, make_sequence,
                                 scoring_linearization, sequence_scores)
from slm_jax.eval.grammar_posterior import GrammarPosterior, exact_enumeration
from slm_jax.eval.proposals import (BeamProposals, FallbackProposals, FileProposals, FlatProposals,
                                    NoProposals, ProposalError)
from slm_jax.inference.scorer import Scorer
from slm_jax.ptb import parse_trees
from slm_jax.trees import Tree

AMBIGUOUS = [  # 4, 3 and 10 distinct output trees (PP attachment, complement clauses)
    "writers admire Susan near foxes on keys .",
    "Susan forgot that writers admire Susan near foxes .",
    "writers admire Susan near foxes on keys with the farmers .",
]


@pytest.fixture(scope="module")
def posterior():
  return GrammarPosterior(k=300, seed=0)


def derivation_prob(derivation: Tree) -> float:
  """Product of the rule probabilities of a derivation (as the generator drew it)."""
  g = default_grammar()
  rules = {(r.lhs, r.rhs): r.prob for r in g.rules}
  lexical = {(r.lhs, r.word): r.prob for r in g.lexical_rules}
  p, stack = 1.0, [derivation]
  while stack:
    node = stack.pop()
    kids = node.children
    if isinstance(kids[0], str):
      p *= lexical[(node.label, kids[0])]
    else:
      p *= rules[(node.label, tuple(k.label for k in kids))]
      stack.extend(kids)
  return p


@pytest.mark.parametrize("sentence", AMBIGUOUS)
def test_samples_match_the_exact_posterior(posterior, sentence):
  words = sentence.split()
  exact, total = exact_enumeration(words)
  assert len(exact) >= 3 and math.isclose(sum(exact.values()), 1.0)
  samples = posterior.sample(words, 2000, rng=np.random.default_rng(7))
  counts = collections.Counter(samples)
  assert set(counts) <= set(exact)
  tv = 0.5 * sum(abs(counts.get(t, 0) / 2000 - p) for t, p in exact.items())
  assert tv < 0.05, tv
  # Sensitivity: a sampler ignoring the probabilities (uniform over parses) would fail.
  assert 0.5 * sum(abs(p - 1 / len(exact)) for p in exact.values()) > 0.08
  assert math.isclose(posterior.log_marginal(words), math.log(total), rel_tol=1e-9)


def test_inside_total_is_the_generators_probability(posterior):
  """Generated sentences: the generator's derivation is among the enumerated ones with the same
  probability, and the inside total equals the sum over all enumerated derivations."""
  rng = np.random.default_rng(3)
  checked = 0
  while checked < 12:
    derivation = generate_sentence(rng, derivation=True)
    words = derivation.leaves()
    if len(words) > 7:
      continue
    exact, total = exact_enumeration(words)
    tree = default_grammar().to_output_tree(derivation)
    assert tree in exact
    assert derivation_prob(derivation) <= total * (1 + 1e-12)
    assert math.isclose(posterior.log_marginal(words), math.log(total), rel_tol=1e-9)
    checked += 1


def test_proposals_are_distinct_output_trees_over_the_words(posterior):
  docs = embedded_corpus("test", 6)
  found = 0
  for doc in docs:
    for gold in doc:
      words = gold.leaves()
      trees = posterior.proposals(words)
      found += gold in trees  # generator trees are output trees of the same form
      assert 1 <= len(trees) <= posterior.k
      assert len(set(trees)) == len(trees)
      assert all(t.leaves() == words for t in trees)
      # Output trees are normalized trees: PTB labels only, no POS/hidden/intermediate nodes.
      labels = {n.label for t in trees for n in t.subtrees()}
      assert all("[" not in x and "|" not in x and x.isupper() for x in labels), labels
  assert found >= 0.9 * sum(len(d) for d in docs)
  long_words = max((t.leaves() for d in docs for t in d), key=len)
  assert posterior.proposals(long_words) == posterior.proposals(long_words)  # seeded per sentence


def test_ambiguous_proposals_cover_the_posterior(posterior):
  words = AMBIGUOUS[2].split()
  exact, _ = exact_enumeration(words)
  assert set(posterior.proposals(words)) == set(exact)  # 300 draws find all 10 parses


def test_unknown_words_raise_no_proposals(posterior):
  with pytest.raises(NoProposals, match="zyzzyva"):
    posterior.proposals(["the", "zyzzyva", "sleeps", "."])
  with pytest.raises(NoProposals):
    posterior.proposals(["sleeps", "the", "."])  # known words, no parse
  fallback = FallbackProposals(posterior, FlatProposals())
  assert fallback.proposals(["a", "zyzzyva"]) == [Tree("S", ("a", "zyzzyva"))]
  assert fallback.stats == {"fallback": 1}


def test_file_proposals_jsonl_and_blocks(tmp_path):
  trees = ["(S (NP Cats) (VP chase (NP mice)))", "(S Cats (VP chase mice))",
           "(S (NP Cats) (VP chase (NP mice)))"]
  jsonl = tmp_path / "p.jsonl"
  jsonl.write_text(json.dumps({"words": ["Cats", "chase", "mice"], "trees": trees}) + "\n"
                   + json.dumps({"trees": ["(S (NP (NNS Dogs)) (VP (VBP bark)))"]}) + "\n")
  source = FileProposals(jsonl)
  assert source.proposals(["Cats", "chase", "mice"]) == parse_trees("\n".join(trees[:2]))
  assert source.duplicates_dropped == 1
  assert source.proposals(["Dogs", "bark"]) == [Tree("S", (Tree("NP", ("Dogs",)),
                                                            Tree("VP", ("bark",))))]
  blocks = tmp_path / "p.txt"
  blocks.write_text("(S (NP Cats)\n   (VP chase (NP mice)))\n(S Cats (VP chase mice))\n\n"
                    "(S (NP Dogs) (VP bark))\n")
  source = FileProposals(blocks, k=1)
  assert source.proposals(["Cats", "chase", "mice"]) == parse_trees(trees[0])
  with pytest.raises(NoProposals):
    source.proposals(["Birds", "sing"])
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"words": ["a", "b"], "trees": ["(S a c)"]}) + "\n")
  with pytest.raises(ProposalError, match=r"bad.jsonl:1: tree 0 has leaves 'a c'"):
    FileProposals(bad)


# --- the model's own beam search ------------------------------------------------------------------

def beam_source(name, tokenizer=None, k=300, **options) -> tuple[BeamProposals, Scorer]:
  from tests.test_beam import LABELS, WORD_TOKENIZER, model_for
  tokenizer = tokenizer or WORD_TOKENIZER
  configuration = CONFIGURATIONS[name]
  scorer = Scorer(model_for(configuration, tokenizer), tokenizer, configuration, batch_size=64)
  options = {"labels": LABELS, "beam": 64, "fast_track": 0, **options}
  return BeamProposals.for_model(scorer, tokenizer, configuration, k=k, **options), scorer


def rescored(scorer: Scorer, trees: list[Tree]) -> np.ndarray:
  """Each tree's log p(<s> z </s>) through the doc-PPL / BLiMP scoring path."""
  conf, tok = scorer.configuration, scorer.tokenizer
  candidates = distinct_candidates(trees, tok, scoring_linearization(conf))
  assert len(candidates) == len(trees)
  sequences = [make_sequence([c], tok, eos=True) for c in candidates]
  return sequence_scores(scorer, sequences, [counted_tokens(s.kinds, conf) for s in sequences])


@pytest.mark.parametrize("name", ["tree", "tg", "tree_triplecnt"])  # lin1, lin2, lin3
def test_beam_proposals_are_the_completed_hypotheses(name):
  words = ("cats", "chase", "mice")
  cap = {"tree": 7, "tg": 9, "tree_triplecnt": 11}[name]  # room for two constituents
  source, scorer = beam_source(name, max_len_factor=0, min_len=cap)
  trees = source.proposals(words)
  result = source.last
  assert result.pruned == 0 and len(trees) == len(result.complete) > 10  # every structure
  assert len(set(trees)) == len(trees) and all(tuple(t.leaves()) == words for t in trees)
  # Rescoring each proposal gives its beam score, so the marginal is the beam's sentence_logprob.
  np.testing.assert_allclose(rescored(scorer, trees), [c.logprob for c in result.complete],
                             atol=1e-4)
  (marginal,), stats = sentence_log_probs(scorer, [words], scorer.tokenizer, scorer.configuration,
                                          source)
  assert marginal == pytest.approx(result.sentence_logprob, abs=1e-4)
  assert stats == {"proposals": len(trees), "candidates": len(trees)}
  # At most k, the best first: a prefix of the full list.
  source.k = 3
  assert source.proposals(words) == trees[:3]
  assert source.stats["beyond_k"] == len(trees) - 3 and source.stats["sentences"] == 3
  assert source.stats["proposals"] == 2 * len(trees) + 3 and not source.stats["invalid"]


def test_beam_proposals_map_word_pieces_back_to_the_words():
  from slm_jax.tokenizer import make_tokenizer
  tokenizer = make_tokenizer("gpt2")
  words = ("cats", "meows", "-LRB-")  # two pieces; a PTB escape (encoded as " (")
  assert len(tokenizer.encode_word("meows")) == 2
  source, _ = beam_source("tree", tokenizer, beam=8, fast_track=2)
  trees = source.proposals(words)
  assert 1 <= len(trees) <= 10 and len(set(trees)) == len(trees)
  assert all(tuple(t.leaves()) == words for t in trees)
  assert not source.stats["invalid"]


def test_beam_proposals_without_a_completed_tree():
  source, _ = beam_source("tree", max_len_factor=0, min_len=2)  # cap 2: no room for brackets
  with pytest.raises(NoProposals, match="completed no tree over 'cats chase'"):
    source.proposals(["cats", "chase"])
  assert source.stats == collections.Counter(sentences=1, no_parse=1)
  fallback = FallbackProposals(source, FlatProposals())
  assert fallback.proposals(["cats", "chase"]) == [Tree("S", ("cats", "chase"))]
  assert fallback.stats == {"fallback": 1}


def test_beam_proposals_refuse_many_to_one_and_terminal_models():
  from slm_jax.inference.beam import BeamSearcher
  from tests.test_beam import WORD_TOKENIZER, model_for
  for name in ("tree_noont", "tree_compress"):
    configuration = CONFIGURATIONS[name]
    searcher = BeamSearcher(model_for(configuration, WORD_TOKENIZER), WORD_TOKENIZER,
                            configuration, beam=4)
    with pytest.raises(ValueError, match=f"{name} uses lin1_.*file of proposals"):
      BeamProposals(searcher)
  with pytest.raises(ValueError, match="tree_noont"):
    BeamProposals.for_model(None, WORD_TOKENIZER, CONFIGURATIONS["tree_noont"])
  for name in ("terminal", "tree_shuffle", "pause1"):
    with pytest.raises(ValueError, match="terminal format"):
      BeamProposals.for_model(None, WORD_TOKENIZER, CONFIGURATIONS[name])
