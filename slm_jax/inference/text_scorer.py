"""Teacher-forced log-probabilities of plain token sequences (text, not trees) with one decoder.

`TextScorer(model).score(sequences, topk)` → per sequence the log-probability of each token given
its prefix (float64 [T-1], aligned to tokens[1:]) and, with `topk` > 0, the top-k next-token
log-probs after every position ([T, k] values and ids). The model reads tokens[:-1] (the last
token is only a target; all T tokens when `topk` asks for the positions after the last one), so
a sequence of n + 1 tokens costs n positions: lm-eval's rolling windows of `max_length` inputs
(`eval.raw_docppl`) fill a row of that width. Each sequence is one causal segment of its own row
(kind TERMINAL, segment 1, positions from 0), batched by `scorer.BatchScorer` (rows padded,
segment 0 and id 0, to a length bucket), so results do not depend on batching.
This is what `python -m slm_jax.score` runs and what the parity tests compare against
transformers.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.inference.scorer import BatchScorer
from slm_jax.kinds import Kind
from slm_jax.model.decoder import Decoder
from slm_jax.structure import row_metadata


class Scored(NamedTuple):
  logprobs: np.ndarray  # float64 [T-1]: log p(token_t | tokens_<t), t = 1..T-1
  top_logprobs: np.ndarray | None  # float64 [T, k]: best next-token log-probs after position t
  top_ids: np.ndarray | None  # int64 [T, k]


class TextScorer(BatchScorer):
  """Batched scoring of token-id sequences (see the module docstring)."""

  def __init__(self, model: Decoder, *, batch_size: int = 8):
    super().__init__(model, batch_size=batch_size, pad_id=0)
    self.vocab_size = model.config.vocab_size
    graphdef = self.graphdef.graphdef

    def run(params, tokens_BT, targets_BT, meta, topk: int):
      logits_BTV = nnx.merge(graphdef, params)(tokens_BT, meta)
      logp_BTV = jax.nn.log_softmax(logits_BTV, axis=-1)
      picked_BT = jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1)[..., 0]
      if not topk:
        return picked_BT, None, None
      values_BTK, ids_BTK = jax.lax.top_k(logp_BTV, topk)
      return picked_BT, values_BTK, ids_BTK

    self._run = jax.jit(run, static_argnums=4)

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

    def call(tokens_BT, kinds_BT, segment_BT, index_B):
      targets_BT = np.zeros_like(tokens_BT)  # row r, position t: the token after t
      for r, i in enumerate(index_B[index_B >= 0]):
        targets_BT[r, :len(arrays[i]) - 1] = arrays[i][1:]
      meta = jax.tree.map(jnp.asarray, row_metadata(kinds_BT, segment_BT))
      return self._run(self.params, jnp.asarray(tokens_BT), jnp.asarray(targets_BT), meta, topk)

    read = [ids if topk or len(ids) == 1 else ids[:-1] for ids in arrays]  # the model's input
    rows = self.batched([(ids, np.full(len(ids), Kind.TERMINAL, np.int32)) for ids in read],
                        call, with_index=True)
    return [Scored(np.asarray(picked, np.float64)[:len(ids) - 1],
                   None if values is None else np.asarray(values[:len(ids)], np.float64),
                   None if top is None else np.asarray(top[:len(ids)], np.int64))
            for (picked, values, top), ids in zip(rows, arrays)]
