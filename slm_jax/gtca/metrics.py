"""GTCA's evaluation metrics (SPEC §10): MCQA letter accuracy, BLiMP pairs, CoLA MCC, option drift.

- **MCQA**: a question is right iff its answer's score (the conditional log-likelihood of its
  letter after `Answer:`, `scoring.letter_scores`) is strictly above every other option's (a tie
  is wrong, as BLiMP's ties are, SPEC §9); `mcqa_metrics` gives the accuracy overall and per
  example group (the toy task's attractor).
- **BLiMP**: summed log-likelihood of each sentence, right iff good > bad (`pair_accuracy`,
  `slm_jax.eval.blimp.pair_verdicts`). Two metrics, never mixed: `blimp` is the toy task's
  BLiMP-style pairs (`slm_jax.gtca.runs`; older result.json files have only it), `blimp_real`
  (`REAL_BLIMP`) the real BLiMP's 67 paradigms, the mean of per-paradigm accuracies, and
  `blimp_real_<field>` (`slm_jax.gtca.real_sets.blimp_metrics`).
- **CoLA**: Matthews correlation of binary predictions (`matthews_corrcoef`, ×100 in tables as the
  paper prints it).
- **Option drift** (paper: 0.013 per token with the mask, 0.021 without): for every question
  and option pair (i, j) the gap s_i − s_j of per-token option scores with the branch and
  without it (α = 0, same weights); drift = mean |Δgap| over all pairs of all questions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from slm_jax.eval.blimp import pair_verdicts
from slm_jax.gtca.batches import EncodedExample

REAL_BLIMP = "blimp_real"  # the real BLiMP's metric; "blimp": the toy's BLiMP-style pairs


def _ragged(scores: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
  """Per-question option scores as float64 [Q, O], NaN where a question has fewer options."""
  if isinstance(scores, np.ndarray) and scores.ndim == 2:
    return scores.astype(np.float64)
  rows = [np.asarray(s, np.float64).reshape(-1) for s in scores]
  width = max((len(r) for r in rows), default=0)
  out = np.full((len(rows), width), np.nan)
  for q, r in enumerate(rows):
    out[q, :len(r)] = r
  return out


def mcqa_correct(scores_QO, answers_Q) -> np.ndarray:
  """bool [Q]: the answer's score is finite and strictly above every other option's score.
  Padding (NaN beyond a question's options) never wins; an unlabeled answer (−1) is an error."""
  scores_QO = _ragged(scores_QO)
  answers_Q = np.asarray(answers_Q, np.int64)
  if scores_QO.shape[0] != answers_Q.shape[0]:
    raise ValueError(f"{scores_QO.shape[0]} score rows for {answers_Q.shape[0]} answers")
  bad = np.flatnonzero((answers_Q < 0) | (answers_Q >= max(scores_QO.shape[1], 1)))
  if bad.size:
    raise ValueError(f"question {int(bad[0])}: answer {int(answers_Q[bad[0]])} is not one of "
                     f"its {scores_QO.shape[1]} options (unlabeled questions cannot be scored)")
  q = np.arange(len(answers_Q))
  right_Q = scores_QO[q, answers_Q]
  others_QO = np.where(np.arange(scores_QO.shape[1])[None, :] == answers_Q[:, None], -np.inf,
                       np.nan_to_num(scores_QO, nan=-np.inf, posinf=np.inf, neginf=-np.inf))
  return np.isfinite(right_Q) & (right_Q > others_QO.max(axis=1, initial=-np.inf))


def accuracy(correct_N) -> float:
  """Percent of True (NaN for an empty set)."""
  correct_N = np.asarray(correct_N, bool)
  return 100.0 * float(correct_N.mean()) if correct_N.size else float("nan")


def pair_accuracy(good_N, bad_N) -> float:
  """BLiMP: percent of pairs whose good sentence has the higher summed log-likelihood."""
  return accuracy(pair_verdicts(np.asarray(good_N), np.asarray(bad_N))[0])


def matthews_corrcoef(labels_N, predictions_N) -> float:
  """MCC of binary labels/predictions (0/1 or bool), in [−1, 1]; 0 when a marginal is constant
  (the convention of sklearn: the denominator is 0)."""
  y = np.asarray(labels_N).astype(bool).reshape(-1)
  p = np.asarray(predictions_N).astype(bool).reshape(-1)
  if y.shape != p.shape:
    raise ValueError(f"{y.size} labels but {p.size} predictions")
  tp, tn = float(np.sum(y & p)), float(np.sum(~y & ~p))
  fp, fn = float(np.sum(~y & p)), float(np.sum(y & ~p))
  denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return 0.0 if denominator == 0 else (tp * tn - fp * fn) / denominator


def option_drift(with_QO, without_QO, tokens_QO=None) -> float:
  """Mean |Δ(s_i − s_j)| over option pairs i < j of every question, scores per token.

  `with_QO` / `without_QO`: summed option log-likelihoods with and without the branch (ragged
  lists or NaN-padded [Q, O]); `tokens_QO` the options' token counts (None: 1 each, as for
  single-token letters). Questions with one option contribute nothing; no pair at all → NaN.
  """
  a_QO, b_QO = _ragged(with_QO), _ragged(without_QO)
  if a_QO.shape != b_QO.shape:
    raise ValueError(f"scores with the branch {a_QO.shape} and without {b_QO.shape} differ")
  if tokens_QO is not None:
    n_QO = _ragged(tokens_QO)
    if n_QO.shape != a_QO.shape:
      raise ValueError(f"token counts {n_QO.shape} do not fit the scores {a_QO.shape}")
    if np.any(n_QO[np.isfinite(n_QO)] <= 0):
      raise ValueError("an option has no tokens")
    a_QO, b_QO = a_QO / n_QO, b_QO / n_QO
  gap = lambda s: s[:, :, None] - s[:, None, :]
  change_QOO = np.abs(gap(a_QO) - gap(b_QO))
  upper_OO = np.triu(np.ones((a_QO.shape[1],) * 2, bool), k=1)
  values = change_QOO[:, upper_OO]
  values = values[np.isfinite(values)]
  return float(values.mean()) if values.size else float("nan")


def mcqa_metrics(scores_QO: np.ndarray, examples: Sequence[EncodedExample], prefix: str = "toy"
                 ) -> dict[str, float]:
  """Accuracy (%) overall (`prefix`) and per example group (`prefix_group`)."""
  correct = mcqa_correct(scores_QO, [e.answer for e in examples])
  out = {prefix: accuracy(correct)}
  groups = np.asarray([e.group for e in examples])
  for group in sorted(set(groups) - {""}):
    out[f"{prefix}_{group}"] = accuracy(correct[groups == group])
  return out

