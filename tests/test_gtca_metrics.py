"""GTCA's metrics: MCQA accuracy (ties, padding, unlabeled answers), BLiMP pairs, MCC, drift."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slm_jax.gtca import metrics


def test_mcqa_correct_handles_ties_padding_and_bad_answers():
  scores = [[-1.0, -2.0], [-1.0, -1.0], [-3.0, -0.5, -0.1], [np.nan, -1.0]]
  assert metrics.mcqa_correct(scores, [0, 0, 2, 0]).tolist() == [True, False, True, False]
  assert metrics.accuracy([True, False, True, True]) == 75.0
  with pytest.raises(ValueError, match="question 1: answer -1"):
    metrics.mcqa_correct(scores, [0, -1, 0, 0])
  assert metrics.pair_accuracy([-1.0, -5.0, -2.0], [-2.0, -1.0, -2.0]) == pytest.approx(100 / 3)


def test_matthews_corrcoef_against_a_hand_computation():
  labels, preds = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # tp 2, tn 1, fp 1, fn 1
  assert metrics.matthews_corrcoef(labels, preds) == pytest.approx((2 * 1 - 1 * 1) / 6)
  assert metrics.matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
  assert metrics.matthews_corrcoef([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
  assert metrics.matthews_corrcoef([1, 0, 1], [1, 1, 1]) == 0.0
  with pytest.raises(ValueError, match="3 labels but 2"):
    metrics.matthews_corrcoef([1, 0, 1], [1, 0])


def test_option_drift_on_constructed_scores():
  with_ = [[0.0, 1.0], [2.0, 0.0, 1.0]]
  without = [[0.0, 0.0], [2.0, 2.0, 2.0]]
  # gaps: q0 (0−1) vs 0 → 1; q1 (2−0) vs 0 → 2, (2−1) → 1, (0−1) → 1: mean 5/4
  assert metrics.option_drift(with_, without) == pytest.approx(1.25)
  tokens = [[1, 2], [1, 1, 1]]  # q0 per token: (0 − 0.5) vs 0 → 0.5
  assert metrics.option_drift(with_, without, tokens) == pytest.approx((0.5 + 4) / 4)
  assert metrics.option_drift([[1.0, 2.0]], [[1.0, 2.0]]) == 0.0
  assert math.isnan(metrics.option_drift([[1.0]], [[2.0]]))
  with pytest.raises(ValueError, match="differ"):
    metrics.option_drift([[1.0, 2.0]], [[1.0, 2.0, 3.0]])
