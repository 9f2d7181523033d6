"""ROUGE-1/2/L F1 of generated summaries (SPEC §11: XSum, `rouge-score` with stemming).

`rouge(predictions, references)` scores each (prediction, reference) pair with
`rouge_score.rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)` (its
tokenizer lowercases and keeps alphanumeric tokens; the Porter stemmer stems tokens longer than
3 characters) and averages the per-item F1 over the corpus. R-AVG = mean of the three corpus
F1s × 100 (the paper's XSum column). An empty prediction (no tokens after rouge-score's
tokenization, e.g. "" or only punctuation) scores 0 on all three — rouge-score's own rule — and
stays in the mean; `empty` counts them so a search that ends early shows in the report.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@dataclasses.dataclass(frozen=True)
class RougeScores:
  """Corpus ROUGE F1s (in [0, 1]), R-AVG (×100) and the per-item F1s."""
  rouge1: float
  rouge2: float
  rougeL: float
  r_avg: float
  items_N3: np.ndarray  # [N, 3] per-item F1 (rouge1, rouge2, rougeL)
  empty: int  # predictions with no tokens (scored 0)

  @property
  def count(self) -> int:
    return len(self.items_N3)


def _scorer_and_tokenizer():
  from rouge_score import rouge_scorer, tokenizers  # pylint: disable=import-outside-toplevel
  return (rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True),
          tokenizers.DefaultTokenizer(use_stemmer=False))


def rouge(predictions: Sequence[str], references: Sequence[str]) -> RougeScores:
  """ROUGE-1/2/L F1 per item and their corpus means (module docstring)."""
  if len(predictions) != len(references):
    raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
  if not predictions:
    raise ValueError("ROUGE needs at least one (prediction, reference) pair")
  scorer, tokenizer = _scorer_and_tokenizer()
  items_N3 = np.zeros((len(predictions), 3))
  empty = 0
  for i, (prediction, reference) in enumerate(zip(predictions, references)):
    if not tokenizer.tokenize(prediction):
      empty += 1  # rouge-score gives 0 for it; counted here
    scores = scorer.score(reference, prediction)  # (target, prediction)
    items_N3[i] = [scores[t].fmeasure for t in ROUGE_TYPES]
  r1, r2, rl = items_N3.mean(axis=0).tolist()
  return RougeScores(r1, r2, rl, 100.0 * (r1 + r2 + rl) / 3, items_N3, empty)
