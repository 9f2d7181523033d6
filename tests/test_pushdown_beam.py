"""Pushdown scoring: a wide enough beam equals exhaustive enumeration of attachment sequences."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.kinds import Kind
from slm_jax.pushdown.beam import (attachment_sequences, beam_score, exhaustive_score,
                                   joint_log_prob, opens_sentence, sentence_openings)
from tests.test_pushdown_model import VOCAB, tiny_model

CATALAN = {1: 1, 2: 2, 3: 5, 4: 14}


def _row(sentences: list[int], seed: int = 0):
  """tokens, kinds, sentence of `<s> w … </s>` with the given words per sentence."""
  words = sum(sentences)
  kinds = np.array([Kind.BOS] + [Kind.TERMINAL] * words + [Kind.EOS], np.int8)
  tokens = np.random.default_rng(seed).integers(1, VOCAB, len(kinds)).astype(np.int32)
  sentence = np.concatenate([[-1], np.repeat(np.arange(len(sentences)), sentences),
                             [len(sentences) - 1]])
  return tokens, kinds, sentence


@pytest.fixture(scope="module")
def model():
  model = tiny_model(seed=3, n_layers=1)
  model.depth_embed[...] = model.depth_embed[...] * 30  # attachments change the word scores
  return model


@pytest.mark.parametrize("sentences", [[1], [3], [2, 1], [1, 1, 1], [4, 2, 3]])
def test_sentence_openings_are_opens_sentence_at_every_token(sentences):
  _, kinds, sentence = _row(sentences)
  loop = [opens_sentence(kinds, sentence, t) for t in range(len(kinds))]
  assert sentence_openings(kinds, sentence).tolist() == loop
  assert sum(loop) == len(sentences)


def test_attachment_sequences_are_the_binary_forests():
  """A sentence of n words has Catalan(n) forests (every sequence of shifts and reduces); two
  sentences multiply, since no word reduces with an earlier sentence."""
  for n, count in CATALAN.items():
    assert len(attachment_sequences(*_row([n])[1:])) == count
  assert len(attachment_sequences(*_row([2, 3])[1:])) == CATALAN[2] * CATALAN[3]
  for sequence in attachment_sequences(*_row([2, 2])[1:]):
    assert sequence[3] == 3 and sequence[-1] == 5  # the 2nd sentence's first word, EOS: shift


@pytest.mark.parametrize("sentences", [[3], pytest.param([4], marks=pytest.mark.slow), [2, 2]])
def test_a_wide_beam_equals_exhaustive_enumeration(model, sentences):
  tokens, kinds, sentence = _row(sentences)
  count = len(attachment_sequences(kinds, sentence))
  exact = exhaustive_score(model, tokens, kinds, sentence)
  wide = beam_score(model, tokens, kinds, sentence, beam=count)
  assert wide.hypotheses == count
  assert wide.log_prob == pytest.approx(exact, abs=1e-4)
  assert wide.prefix_log_probs[-1] == pytest.approx(wide.log_prob, abs=1e-6)
  assert (np.diff(wide.prefix_log_probs) < 0).all()  # every token has a surprisal
  narrow = beam_score(model, tokens, kinds, sentence, beam=2)
  assert narrow.log_prob < exact  # a pruned beam sums fewer sequences
  recomputed = beam_score(model, tokens, kinds, sentence, beam=2, use_cache=False)
  assert recomputed.best == narrow.best  # the cache decodes what the full forward pass does
  np.testing.assert_allclose(recomputed.prefix_log_probs, narrow.prefix_log_probs, atol=1e-4)
  best = joint_log_prob(model, tokens, kinds, sentence, wide.best)
  assert best == pytest.approx(max(joint_log_prob(model, tokens, kinds, sentence, a)
                                   for a in attachment_sequences(kinds, sentence)), abs=1e-4)


def test_bad_rows_are_named(model):
  tokens, kinds, sentence = _row([2])
  with pytest.raises(ValueError, match="starts with BOS"):
    beam_score(model, tokens[1:], kinds[1:], sentence[1:])
  bad = kinds.copy()
  bad[2] = Kind.ONT
  with pytest.raises(ValueError, match="token 2 has kind 4"):
    beam_score(model, tokens, bad, sentence)
  with pytest.raises(ValueError, match="beam must be"):
    beam_score(model, tokens, kinds, sentence, beam=0)
