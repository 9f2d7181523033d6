"""Feeding the chosen expansions' tokens into the KV cache: the one loop the word-synchronous
searches share (`beam` one sentence, `beam_batch` many, `generate` summaries).

An expansion (`Grammar.expand` / `expand_rows`) is up to K tokens per new hypothesis row: its
first token was scored when it was chosen; tokens 1… are scored on the way (`scored[:, k]`) from
the logits after the previous one was fed. Round k feeds token k of every row that has one, in
one `step_rows` call, and writes it into the rows' histories after `used` sentence tokens. The
gains are added round by round (the float order the searches' bit-for-bit tests rely on).
"""

from __future__ import annotations

import numpy as np


def feed_expansions(decoder, new: np.ndarray, tokens: np.ndarray, kinds: np.ndarray,
                    scored: np.ndarray, count: np.ndarray, used: np.ndarray, hist: np.ndarray,
                    hist_kind: np.ndarray, score: np.ndarray, *, term: np.ndarray | None = None,
                    term_rows: np.ndarray | None = None) -> int:
  """Feeds `count[i]` tokens of expansion i into row `new[i]`; adds each scored token's
  log-prob to `score` (and to `term` where `term_rows[i]`, the word expansions); returns the
  number of rounds (decoder steps) taken. `tokens`, `kinds`, `scored`: [rows, K]."""
  n = len(score)
  rounds = int(count.max(initial=0))
  for k in range(rounds):
    live = count > k
    rows = new[live]
    if k > 0:
      query = np.zeros((n, 1), np.int64)
      query[rows, 0] = tokens[live, k]
      gained = np.where(scored[live, k], decoder.gather(query)[rows, 0], 0.0)
      score[rows] += gained
      if term is not None:
        term[rows] += np.where(term_rows[live], gained, 0.0)
    decoder.step_rows(rows, tokens[live, k], kinds[live, k])
    hist[rows, used[live] + k] = tokens[live, k]
    hist_kind[rows, used[live] + k] = kinds[live, k]
  return rounds
