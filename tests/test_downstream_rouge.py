"""ROUGE-1/2/L F1 with stemming (SPEC §11): a hand-computed pair, stemming, empty predictions."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.downstream.rouge import rouge


def test_hand_computed_pair():
  # prediction: the cat sat on the mat / reference: the cat is on the mat (6 tokens each)
  # unigrams: the×2, cat, on, mat match → P = R = 5/6; bigrams: "the cat", "on the", "the mat"
  # of 5 → 3/5; LCS "the cat on the mat" = 5 → 5/6. R-AVG = (5/6 + 3/5 + 5/6) / 3 × 100.
  scores = rouge(["the cat sat on the mat"], ["the cat is on the mat"])
  assert scores.rouge1 == pytest.approx(5 / 6)
  assert scores.rouge2 == pytest.approx(3 / 5)
  assert scores.rougeL == pytest.approx(5 / 6)
  assert scores.r_avg == pytest.approx(100 * (5 / 6 + 3 / 5 + 5 / 6) / 3)
  assert scores.empty == 0 and scores.count == 1


def test_unequal_lengths_precision_and_recall_differ():
  # prediction 2 tokens, reference 4: unigram P = 1, R = 1/2 → F1 = 2/3; bigram "cat sat" 1/1
  # and 1/3 → F1 = 1/2; LCS 2 → 2/3.
  scores = rouge(["cat sat"], ["the cat sat down"])
  np.testing.assert_allclose(scores.items_N3[0], [2 / 3, 1 / 2, 2 / 3])


def test_stemming_and_case():
  stemmed = rouge(["Cats RUNNING"], ["cat runs"])
  assert stemmed.rouge1 == pytest.approx(1.0)  # cats → cat, running / runs → run
  assert stemmed.rouge2 == pytest.approx(1.0)


def test_empty_predictions_score_zero_and_are_counted():
  scores = rouge(["", "!!", "the cat"], ["the cat", "the cat", "the cat"])
  np.testing.assert_allclose(scores.items_N3[:2], 0.0)
  assert scores.empty == 2 and scores.count == 3
  assert scores.rouge1 == pytest.approx(1 / 3)  # the empties stay in the mean
  assert scores.r_avg == pytest.approx(100 / 3)


def test_mismatched_or_no_items_are_refused():
  with pytest.raises(ValueError, match="2 predictions but 1"):
    rouge(["a", "b"], ["a"])
  with pytest.raises(ValueError, match="at least one"):
    rouge([], [])
