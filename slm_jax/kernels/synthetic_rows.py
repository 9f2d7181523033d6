"""Synthetic packed lin2 rows for timing the kernels without a corpus (the autotuner's inputs).

The kernel layer reads no corpus, so launch profiles are timed on rows of this shape: documents
of about 1,740 tokens (the deduplicated BBC corpus of paper Table 2: 2,544,658,027 lin2 tokens
over 1,466,132 articles), each BOS, sentences, EOS; a sentence is a random constituency tree over
5–30 words (binary and ternary splits, some unary nodes) in lin2: ONT, children, CNT1, CNT2.
Rows are sentence-packed: a sentence that does not fit starts the next row (the rest is padding),
a document that continues keeps going in the next row as a new segment. Deterministic in `seed`.
Only kinds and segments matter to the kernels (they mask and skip from them); token ids do not.
"""

from __future__ import annotations

import numpy as np

from slm_jax.kinds import Kind
from slm_jax.structure import RowMetadata, row_metadata

DOCUMENT_TOKENS = 2_544_658_027 // 1_466_132  # lin2 tokens per BBC article (paper Table 2)


def _tree(rng: np.random.Generator, words: int, out: list[int]) -> None:
  """Appends the lin2 kinds of a random tree over `words` terminals to `out`."""
  if words == 1:
    if rng.random() < 0.25:  # a unary node over one word
      out += [Kind.ONT, Kind.TERMINAL, Kind.CNT1, Kind.CNT2]
    else:
      out.append(Kind.TERMINAL)
    return
  parts = 3 if words >= 3 and rng.random() < 0.3 else 2
  cuts = np.sort(rng.choice(np.arange(1, words), size=parts - 1, replace=False))
  out.append(Kind.ONT)
  for size in np.diff(np.concatenate([[0], cuts, [words]])):
    _tree(rng, int(size), out)
  out += [Kind.CNT1, Kind.CNT2]


def sentence_kinds(rng: np.random.Generator) -> list[int]:
  """One sentence: a tree over 5–30 words under a root node."""
  out: list[int] = []
  _tree(rng, int(rng.integers(5, 31)), out)
  return [int(kind) for kind in out]


def lin2_rows(batch: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """kinds and segment [batch, length] int32 of packed synthetic lin2 documents."""
  rng = np.random.default_rng(seed)
  kinds = np.zeros((batch, length), np.int32)
  segment = np.zeros((batch, length), np.int32)
  row, filled, document, left = 0, 0, 0, 0
  while row < batch:
    if left <= 0:  # a new document: BOS, sentences up to about its length, EOS
      document += 1
      left = int(rng.integers(DOCUMENT_TOKENS // 2, 3 * DOCUMENT_TOKENS // 2))
      pending = [int(Kind.BOS)]
    else:
      pending = []
    pending += sentence_kinds(rng)
    left -= len(pending)
    if left <= 0:
      pending.append(int(Kind.EOS))
    if len(pending) > length:
      continue  # longer than a row: never packed (as the real packer drops it)
    if filled + len(pending) > length:
      row, filled = row + 1, 0
      document += 1  # the document continues in the next row as a new segment
      if row == batch:
        break
    kinds[row, filled:filled + len(pending)] = pending
    segment[row, filled:filled + len(pending)] = document
    filled += len(pending)
  return kinds, segment


def lin2_metadata(batch: int, length: int, seed: int = 0) -> RowMetadata:
  """`row_metadata` of `lin2_rows` (numpy)."""
  return row_metadata(*lin2_rows(batch, length, seed))
