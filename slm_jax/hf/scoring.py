"""Teacher-forced log-probabilities of plain token sequences (text, not trees) with one decoder.

`TextScorer(model).score(sequences, topk)` → per sequence the log-probability of each token given
its prefix (float64 [T-1], aligned to tokens[1:]) and, with `topk` > 0, the top-k next-token
log-probs after every position ([T, k] values and ids). Each sequence is one causal segment of
its own row (kind TERMINAL, segment 1, positions from 0), rows padded (segment 0) to a length
bucket (`slm_jax.buckets`) and batched, so results do not depend on batching. This is what
`python -m slm_jax.score` runs and what the parity tests compare against transformers.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.buckets import bucket
from slm_jax.kinds import Kind
from slm_jax.model.decoder import Decoder
from slm_jax.structure import row_metadata

LENGTH_BUCKET = 16


class Scored(NamedTuple):
  logprobs: np.ndarray  # float64 [T-1]: log p(token_t | tokens_<t), t = 1..T-1
  top_logprobs: np.ndarray | None  # float64 [T, k]: best next-token log-probs after position t
  top_ids: np.ndarray | None  # int64 [T, k]


def plain_rows(sequences: Sequence[np.ndarray], width: int, rows: int, pad_id: int = 0):
  """tokens [rows, width] and RowMetadata of causal text rows (one segment each, 0 = padding)."""
  tokens = np.full((rows, width), pad_id, np.int32)
  segment = np.zeros((rows, width), np.int32)
  for r, ids in enumerate(sequences):
    tokens[r, :len(ids)], segment[r, :len(ids)] = ids, 1
  kinds = np.where(segment > 0, int(Kind.TERMINAL), int(Kind.PAD)).astype(np.int32)
  return tokens, row_metadata(kinds, segment)


def logits(model: Decoder, ids_BT) -> np.ndarray:
  """float32 logits [B, T, V] of equal-length causal rows `ids_BT`."""
  ids_BT = np.asarray(ids_BT)
  tokens, meta = plain_rows(list(ids_BT), ids_BT.shape[1], ids_BT.shape[0])
  graphdef, state = nnx.split(model)
  forward = jax.jit(lambda state, tokens, meta: nnx.merge(graphdef, state)(tokens, meta))
  return np.asarray(forward(state, jnp.asarray(tokens), jax.tree.map(jnp.asarray, meta)))


class TextScorer:
  """Batched scoring of token-id sequences (see the module docstring)."""

  def __init__(self, model: Decoder, *, batch_size: int = 8):
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    self.batch_size = int(batch_size)
    self.vocab_size = model.config.vocab_size
    graphdef, self.params = nnx.split(model)

    def run(params, tokens_BT, meta, topk: int):
      logits_BTV = nnx.merge(graphdef, params)(tokens_BT, meta)
      logp_BTV = jax.nn.log_softmax(logits_BTV, axis=-1)
      picked_BT = jnp.take_along_axis(logp_BTV[:, :-1], tokens_BT[:, 1:, None], axis=-1)[..., 0]
      if not topk:
        return picked_BT, None, None
      values_BTK, ids_BTK = jax.lax.top_k(logp_BTV, topk)
      return picked_BT, values_BTK, ids_BTK

    self._run = jax.jit(run, static_argnums=3)

  def score(self, sequences: Sequence[Sequence[int]], topk: int = 0) -> list[Scored]:
    """Scores every sequence (ids in [0, vocab)); `topk` ≤ vocab adds the best next tokens."""
    arrays = [np.asarray(s, np.int64) for s in sequences]
    for i, ids in enumerate(arrays):
      if ids.ndim != 1 or not len(ids):
        raise ValueError(f"sequence {i} is empty or not a flat list of ids")
      bad = ids[(ids < 0) | (ids >= self.vocab_size)]
      if bad.size:
        raise ValueError(f"sequence {i}: id {int(bad[0])} is outside the model's vocabulary "
                         f"[0, {self.vocab_size})")
    if not 0 <= topk <= self.vocab_size:
      raise ValueError(f"topk={topk} must be in [0, {self.vocab_size}]")
    out: list[Scored | None] = [None] * len(arrays)
    order = sorted(range(len(arrays)), key=lambda i: len(arrays[i]))
    for start in range(0, len(order), self.batch_size):
      chunk = order[start:start + self.batch_size]
      width = bucket(len(arrays[chunk[-1]]), LENGTH_BUCKET)
      rows = bucket(len(chunk), 1, self.batch_size)
      tokens, meta = plain_rows([arrays[i] for i in chunk], width, rows)
      picked, values, ids = self._run(self.params, jnp.asarray(tokens),
                                      jax.tree.map(jnp.asarray, meta), topk)
      picked = np.asarray(picked, np.float64)
      for r, i in enumerate(chunk):
        n = len(arrays[i])
        out[i] = Scored(picked[r, :n - 1],
                        None if values is None else np.asarray(values[r, :n], np.float64),
                        None if ids is None else np.asarray(ids[r, :n], np.int64))
    return out
