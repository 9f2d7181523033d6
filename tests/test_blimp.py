"""BLiMP: all 67 paradigms load; PTB-style tokenization; pair accuracy and tree marginalization
with a fake scorer whose sentence scores are known in closed form; tiny tree models scored over
their own beam proposals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.shared_data import require_shared
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.eval.blimp import (NUM_PARADIGMS, PAIRS_PER_PARADIGM, evaluate_blimp, load_blimp,
                                sentence_log_probs, word_tokenize)
from slm_jax.eval.proposals import BeamProposals, FlatProposals, ProposalSource
from slm_jax.eval.syntaxgym import tokenize_region
from slm_jax.ptb import parse_trees
from slm_jax.tokenizer import make_tokenizer


class PerTokenScorer:
  """log p = -1 for every token: a sequence scores minus its number of counted tokens."""

  def logprobs(self, sequences):
    return [np.full(len(s.tokens) - 1, -1.0) for s in sequences]


class TwoTrees(ProposalSource):
  """A flat tree and a tree with one extra NP over the first two words."""

  def proposals(self, words):
    w = " ".join(words[2:])
    return parse_trees(f"(S {' '.join(words)})\n(S (NP {words[0]} {words[1]}) {w})\n"
                       f"(S {words[0]} (NP {words[1]}) {w})")


def test_all_67_paradigms_load():
  root = require_shared("blimp")
  paradigms = load_blimp(root)
  assert len(paradigms) == NUM_PARADIGMS
  assert all(len(p) == PAIRS_PER_PARADIGM for p in paradigms)
  assert len({p.uid for p in paradigms}) == NUM_PARADIGMS
  assert {p.field for p in paradigms} >= {"morphology", "syntax", "semantics"}
  assert all(len(p.good) == len(p.bad) for p in paradigms)
  assert [len(p) for p in load_blimp(root, max_items=3)] == [3] * NUM_PARADIGMS


def test_word_tokenize_is_ptb_style():
  assert word_tokenize("Who should Derek hug after shocking Richard?") == [
      "Who", "should", "Derek", "hug", "after", "shocking", "Richard", "?"]
  assert word_tokenize("Kristin's dog wasn't here.") == ["Kristin", "'s", "dog", "was", "n't",
                                                          "here", "."]
  assert word_tokenize('"Don\'t go," she said.') == ["``", "Do", "n't", "go", ",", "''", "she",
                                                      "said", "."]
  assert word_tokenize("They can't, or cannot; we'll see!") == [
      "They", "ca", "n't", ",", "or", "can", "not", ";", "we", "'ll", "see", "!"]
  # brackets as PTB leaves, like the trees models train on (one tokenizer for every evaluator)
  assert word_tokenize("I go (really).") == ["I", "go", "-LRB-", "really", "-RRB-", "."]
  assert tokenize_region("it (really) is") == ["it", "-LRB-", "really", "-RRB-", "is"]


def write_blimp(directory, pairs_by_uid):
  directory.mkdir()
  for uid, pairs in pairs_by_uid.items():
    with open(directory / f"{uid}.jsonl", "w") as f:
      for n, (good, bad) in enumerate(pairs):
        f.write(json.dumps({"sentence_good": good, "sentence_bad": bad, "field": "syntax",
                            "linguistics_term": f"term_{uid[-1]}", "UID": uid,
                            "pairID": str(n)}) + "\n")


def test_pair_accuracy_with_a_fake_scorer(tmp_path):
  # With -1 per token the shorter sentence wins; equal lengths tie, and ties are wrong.
  write_blimp(tmp_path / "b", {
      "p_a": [("Cats sleep.", "Cats sleep soundly ."), ("A b c d.", "A b."),
              ("x y.", "y x.")],
      "p_b": [("One.", "One two."), ("One two.", "One two three."),
              ("One two three four.", "One.")],
  })
  words = sorted({w for s in ["Cats sleep soundly .", "A b c d .", "x y .", "One two three four ."]
                  for w in s.split()})
  tok = make_tokenizer("word", words=words)
  result = evaluate_blimp(PerTokenScorer(), tok, CONFIGURATIONS["terminal"], tmp_path / "b")
  assert result.paradigms["p_a"]["accuracy"] == pytest.approx(100 / 3)
  assert result.paradigms["p_b"]["accuracy"] == pytest.approx(200 / 3)
  assert result.overall == pytest.approx(50.0)
  assert result.terms == {"term_a": pytest.approx(100 / 3), "term_b": pytest.approx(200 / 3)}
  assert result.fields == {"syntax": pytest.approx(50.0)}
  assert result.correct.tolist() == [True, False, False, True, True, False]
  assert result.stats["unique_sentences"] == 10  # "One ." and "One two ." occur twice
  limited = evaluate_blimp(PerTokenScorer(), tok, CONFIGURATIONS["terminal"], tmp_path / "b",
                           max_items=1)
  assert limited.correct.tolist() == [True, True]


class BrokenScorer(PerTokenScorer):
  """-1 per token, but -inf for every sequence holding token id `broken`."""

  def __init__(self, broken: int):
    self.broken = broken

  def logprobs(self, sequences):
    return [np.where(np.asarray(s.tokens[1:]) == self.broken, -np.inf, -1.0) for s in sequences]


def test_ties_and_non_finite_scores_are_wrong_and_counted(tmp_path):
  write_blimp(tmp_path / "b", {"p_a": [("x y.", "y x."),  # equal lengths: a tie
                                        ("A b.", "A b zz."),  # bad is -inf: not right
                                        ("zz b.", "A b c d."),  # good is -inf
                                        ("A b.", "A b c d.")]})  # right
  tok = make_tokenizer("word", words="A b c d x y zz .".split())
  scorer = BrokenScorer(tok.encode_word("zz")[0])
  result = evaluate_blimp(scorer, tok, CONFIGURATIONS["terminal"], tmp_path / "b")
  assert result.correct.tolist() == [False, False, False, True]
  assert result.stats["ties"] == 1 and result.stats["nonfinite_pairs"] == 2
  assert result.overall == pytest.approx(25.0)


def test_tree_models_sum_over_distinct_linearizations():
  tok = make_tokenizer("word", words=["the", "cat", "sleeps", "."])
  words = ["the", "cat", "sleeps", "."]
  # lin1: the flat tree has 2 NT tokens, the others 4 each (two distinct sequences): with
  # 4 words + EOS every candidate also scores 5 terminal/EOS tokens.
  (lin1,), _ = sentence_log_probs(PerTokenScorer(), [words], tok, CONFIGURATIONS["tree"],
                                  TwoTrees())
  assert lin1 == pytest.approx(math.log(math.exp(-7) + 2 * math.exp(-9)))
  # NoONT drops the opening NP: the second and third tree are the same sequence, counted once.
  (noont,), stats = sentence_log_probs(PerTokenScorer(), [words], tok,
                                       CONFIGURATIONS["tree_noont"], TwoTrees())
  assert noont == pytest.approx(math.log(math.exp(-6) + math.exp(-7)))
  assert stats == {"proposals": 3, "candidates": 2}
  # TG does not score CNT2: lin2 doubles closings, and only the first copy counts.
  (tg,), _ = sentence_log_probs(PerTokenScorer(), [words], tok, CONFIGURATIONS["tg"], TwoTrees())
  assert tg == pytest.approx(lin1)
  (tgtree,), _ = sentence_log_probs(PerTokenScorer(), [words], tok, CONFIGURATIONS["tgtree"],
                                    TwoTrees())
  assert tgtree == pytest.approx(math.log(math.exp(-8) + 2 * math.exp(-11)))
  # Terminal-format models ignore proposals and score every position as trained: 4 words +
  # EOS, and the pause models their 4 or 8 pause tokens too (SPEC §9).
  for name, tokens in (("terminal", 5), ("tree_shuffle", 5), ("pause1", 9), ("pause2", 13)):
    (term,), _ = sentence_log_probs(PerTokenScorer(), [words], tok, CONFIGURATIONS[name])
    assert term == pytest.approx(-tokens), name
  # Terminal-only tree scoring: the best candidate's terminals + EOS (5 tokens each).
  (best,), _ = sentence_log_probs(PerTokenScorer(), [words], tok, CONFIGURATIONS["tree"],
                                  TwoTrees(), tree_scoring="terminal")
  assert best == pytest.approx(-5.0)
  with pytest.raises(ValueError, match="needs a proposal source"):
    sentence_log_probs(PerTokenScorer(), [words], tok, CONFIGURATIONS["tree"])


def test_real_blimp_with_flat_proposals_runs_every_paradigm():
  root = require_shared("blimp")
  tok = make_tokenizer("word", words=["the", "a", "."])
  result = evaluate_blimp(PerTokenScorer(), tok, CONFIGURATIONS["tree"], root, FlatProposals(),
                          max_items=2)
  assert len(result.paradigms) == NUM_PARADIGMS and len(result.correct) == 2 * NUM_PARADIGMS
  assert 0.0 <= result.overall <= 100.0 and result.stats["candidates"] == result.stats["proposals"]
  summary = result.summary()
  assert summary["pairs"] == 134 and set(summary["fields"]) >= {"syntax", "morphology"}
  assert np.isclose(result.overall, 100 * result.correct.mean())


@pytest.mark.parametrize("name", ["tree", "tg"])  # lin1, lin2 (TG: CNT2 is not scored)
def test_tree_models_with_beam_proposals(name, tmp_path):
  from slm_jax.inference.scorer import Scorer
  from tests.test_beam import LABELS, model_for
  write_blimp(tmp_path / "b", {"p_a": [("Cats chase mice.", "Mice cats chase."),
                                        ("Cats meow.", "Meow cats.")]})
  tok = make_tokenizer("word", words="Cats Mice chase cats mice meow Meow .".split())
  conf = CONFIGURATIONS[name]
  scorer = Scorer(model_for(conf, tok), tok, conf, batch_size=64)
  source = BeamProposals.for_model(scorer, tok, conf, k=300, beam=16, fast_track=2,
                                   labels=LABELS)
  sentences = [word_tokenize("Cats chase mice."), word_tokenize("Cats meow.")]
  scores, stats = sentence_log_probs(scorer, sentences, tok, conf, source)
  # k covers every completed hypothesis: the marginal over the rescored proposals is the beam's.
  expected = [source.searcher.search(words).sentence_logprob for words in sentences]
  np.testing.assert_allclose(scores, expected, atol=1e-4)
  assert stats["proposals"] == stats["candidates"] == source.stats["complete"] > 2
  result = evaluate_blimp(scorer, tok, conf, tmp_path / "b", source)
  assert len(result.correct) == 2 and result.stats["unique_sentences"] == 4
  assert source.stats["sentences"] == 6 and not source.stats["no_parse"]
