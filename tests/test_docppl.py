"""Doc-PPL (SPEC §9): equals a hand computation from the scorer's log-probabilities; projected
duplicates count once; terminal-format models count terminals + EOS; with the real Scorer and one
proposal per sentence it equals the whole-document score."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.corpus.treebank import embedded_corpus
from slm_jax.data.encode import encode_document
from slm_jax.eval.docppl import counted_tokens, distinct_candidates, doc_ppl
from slm_jax.eval.proposals import ProposalSource
from slm_jax.kinds import Kind
from slm_jax.ptb import parse_trees
from slm_jax.tokenizer import make_tokenizer


class FakeScorer:
  """The Scorer interface with a deterministic 'model': log p(token t) depends on the whole
  prefix through a hash, so history matters. Counts sequences per call (batching check)."""

  def __init__(self):
    self.calls = []

  def logprobs(self, sequences):
    self.calls.append(len(sequences))
    out = []
    for seq in sequences:
      ids = np.asarray(seq.tokens, dtype=np.int64)
      out.append(np.array([-(0.3 + zlib.crc32(ids[:t + 1].tobytes()) % 1000 / 300)
                           for t in range(1, len(ids))]))
    return out


class TableProposals(ProposalSource):
  def __init__(self, table):
    self.table = {tuple(trees[0].leaves()): trees for trees in table}

  def proposals(self, sentence_words):
    return self.table[tuple(sentence_words)]


def trees(*texts):
  return [t for s in texts for t in parse_trees(s)]


S1 = trees("(S (NP the cat) (VP sleeps) .)", "(S (NP the) (VP cat sleeps) .)")
S2 = trees("(S (NP dogs) (VP bark (ADVP loudly)) .)", "(S (NP dogs) (VP bark loudly) .)")
WORDS = ["the", "cat", "sleeps", ".", "dogs", "bark", "loudly"]


@pytest.fixture(scope="module")
def tokenizer():
  return make_tokenizer("word", words=WORDS)


def lp_sum(scorer, doc_trees, linearization, tokenizer, first_scored):
  """Σ log p of tokens at positions >= first_scored of the encoded document (hand computation)."""
  seq = encode_document(doc_trees, tokenizer, linearization)
  lp = scorer.logprobs([seq])[0]
  return float(lp[first_scored - 1:].sum()), seq


@pytest.mark.parametrize("name", ["tree", "tgtree"])
def test_two_sentences_two_proposals_by_hand(tokenizer, name):
  conf = CONFIGURATIONS[name]
  lin = conf.linearization
  scorer = FakeScorer()
  got = doc_ppl(scorer, [[S1[0], S2[0]]], tokenizer, conf, TableProposals([S1, S2]))
  # Sentence 1: both proposals with history <s>; the EOS is not part of sentence 1.
  len1 = [len(encode_document([t], tokenizer, lin)) - 2 for t in S1]
  first = []
  for t, n in zip(S1, len1):
    seq = encode_document([t], tokenizer, lin)
    first.append(float(scorer.logprobs([seq])[0][:n].sum()))
  best = S1[int(np.argmax(first))]
  p1 = np.logaddexp(*first)
  # Sentence 2: history = the best sentence-1 sequence; scores sentence 2 and </s>.
  second = [lp_sum(scorer, [best, t], lin, tokenizer, 1 + len1[S1.index(best)])[0] for t in S2]
  p2 = np.logaddexp(*second)
  m = 4 + 4 + 1  # terminals + EOS
  assert got.tokens == m and got.sentences == 2 and got.candidates == 4
  assert got.log_prob == pytest.approx(p1 + p2, abs=1e-9)
  assert got.ppl == pytest.approx(math.exp(-(p1 + p2) / m), rel=1e-12)
  assert sum(scorer.calls[:2]) == 4 and len(scorer.calls) == 2 + 2 + 2  # one call per position


def test_projection_duplicates_count_once(tokenizer):
  """(S (NP the cat) …) and (S the (NP cat) …) differ only in where NP opens: NoONT collapses
  them to one sequence, Tree (lin1) keeps two."""
  pair = trees("(S (NP the cat) sleeps .)", "(S the (NP cat) sleeps .)")
  assert len(distinct_candidates(pair, tokenizer, "lin1")) == 2
  assert len(distinct_candidates(pair, tokenizer, "lin1_noont")) == 1
  conf = CONFIGURATIONS["tree_noont"]
  scorer = FakeScorer()
  got = doc_ppl(scorer, [[pair[0]]], tokenizer, conf, TableProposals([pair]))
  single, _ = lp_sum(scorer, [pair[0]], "lin1_noont", tokenizer, 1)
  assert got.proposals == 2 and got.candidates == 1
  assert got.log_prob == pytest.approx(single, abs=1e-9)  # not single + log 2
  both = doc_ppl(scorer, [[pair[0]]], tokenizer, CONFIGURATIONS["tree"], TableProposals([pair]))
  assert both.candidates == 2
  # Compress: merged closings lose labels and counts, so these two collapse as well.
  merge = trees("(S (NP the cat) (VP sleeps) .)", "(S (NP the cat) (ADJP sleeps) .)")
  assert len(distinct_candidates(merge, tokenizer, "lin1_merge")) == 2  # ONT labels differ
  merge = trees("(S (NP the (NP cat)) sleeps .)", "(S (NP (NP the cat)) sleeps .)")
  assert len(distinct_candidates(merge, tokenizer, "lin1")) == 2


@pytest.mark.parametrize("name", ["terminal", "pause1", "pause2", "tree_shuffle"])
def test_terminal_format_scores_terminals_and_eos_only(tokenizer, name):
  """Terminal-format models score their terminal + EOS tokens (pause models: pauses are context,
  not scored, SPEC §9 / paper §5.2; Tree-Shuffle: terminals in lin0); M = terminal + EOS tokens."""
  conf = CONFIGURATIONS[name]
  doc = [S1[0], S2[0]]
  scorer = FakeScorer()
  got = doc_ppl(scorer, [doc], tokenizer, conf)
  lin = "lin0" if name == "tree_shuffle" else conf.linearization
  seq = encode_document(doc, tokenizer, lin)
  lp = scorer.logprobs([seq])[0]
  keep = np.isin(seq.kinds[1:], [Kind.TERMINAL, Kind.EOS])
  pauses = {"pause1": 8, "pause2": 16}.get(name, 0)
  assert got.tokens == 9 == int(keep.sum()) and len(lp) == 9 + pauses
  assert got.log_prob == pytest.approx(float(lp[keep].sum()), abs=1e-9)  # terminals + EOS
  if pauses:
    assert got.log_prob != pytest.approx(float(lp.sum()), abs=1e-6)  # pauses are not scored
  # A context cap scores sentence by sentence: the second sentence loses its history.
  capped = doc_ppl(FakeScorer(), [doc], tokenizer, conf, max_context=len(seq) - 2)
  assert capped.tokens == 9 and capped.truncated_histories == 1


def test_terminal_tree_scoring_takes_the_best_candidate_on_terminals(tokenizer):
  """`tree_scoring="terminal"`: each sentence scores the best candidate's terminal + EOS
  log-probs (structure as context); histories still follow the best joint candidate."""
  conf = CONFIGURATIONS["tree"]
  doc = [S1[0], S2[0]]
  scorer = FakeScorer()
  got = doc_ppl(scorer, [doc], tokenizer, conf, TableProposals([S1, S2]),
                tree_scoring="terminal")
  joint = doc_ppl(scorer, [doc], tokenizer, conf, TableProposals([S1, S2]))
  words_lp = lambda seq, lp, start: float(lp[start - 1:][np.isin(
      seq.kinds[start:], [Kind.TERMINAL, Kind.EOS])].sum())
  firsts = [encode_document([t], tokenizer, "lin1") for t in S1]
  first_lp = [scorer.logprobs([q])[0] for q in firsts]
  best_first = int(np.argmax([lp.sum() - lp[-1] for lp in first_lp]))  # joint, without EOS
  expected = max(words_lp(q, lp, 1) - lp[-1] for q, lp in zip(firsts, first_lp))
  history = firsts[best_first]
  start = len(history) - 1  # the history without its EOS
  seconds = [encode_document([S1[best_first], t], tokenizer, "lin1") for t in S2]
  expected += max(words_lp(q, scorer.logprobs([q])[0], start) for q in seconds)
  assert got.log_prob == pytest.approx(expected, abs=1e-9)
  assert got.log_prob != pytest.approx(joint.log_prob) and got.tokens == joint.tokens == 9
  with pytest.raises(ValueError, match="tree_scoring"):
    counted_tokens(firsts[0].kinds, conf, "full")


def test_tg_does_not_score_cnt2(tokenizer):
  kinds = encode_document([S1[0]], tokenizer, "lin2").kinds
  tg = counted_tokens(kinds, CONFIGURATIONS["tg"])
  tgtree = counted_tokens(kinds, CONFIGURATIONS["tgtree"])
  assert not tg[kinds == Kind.CNT2].any() and tgtree[kinds == Kind.CNT2].all()
  assert not tg[0] and not tgtree[0]


def test_real_scorer_one_proposal_per_sentence_is_the_document_score():
  """With one proposal (the gold tree) per sentence, Σ_i log p(z_i | ẑ_<i) is the document's
  log-probability: compare with the real Scorer's own `score` of the whole document."""
  from flax import nnx

  from slm_jax.inference import scorer as scorer_module
  from slm_jax.model.config import ModelConfig
  from slm_jax.model.decoder import Decoder
  docs = embedded_corpus("test", 1, min_sentences=3, max_sentences=3)
  words = {w for d in docs for t in d for w in t.leaves()}
  tok = make_tokenizer("word", words=sorted(words))
  gold = TableProposals([[t] for d in docs for t in d])
  conf = CONFIGURATIONS["tg"]  # the Scorer's own target mask must drop CNT2 as doc_ppl does
  model = Decoder(ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=1, n_heads=2,
                              compute_dtype="float32", attention=conf.attention), rngs=nnx.Rngs(0))
  scorer = scorer_module.Scorer(model, tok, conf, batch_size=8)
  got = doc_ppl(scorer, docs, tok, conf, gold)
  whole = scorer.score([encode_document(d, tok, conf.linearization) for d in docs])
  np.testing.assert_allclose(got.doc_log_prob, whole, rtol=1e-5)
  assert got.tokens == sum(len(t.leaves()) for d in docs for t in d) + len(docs)
