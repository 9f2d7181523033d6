"""GTCA's scorers (SPEC §10): option letters after `Answer:` and summed sentence log-likelihoods.

Both run the model's one forward pass (`GtcaLM.logits`: the branch at the given α when the model
has one, the plain backbone otherwise), jitted once per model graph, over fixed-shape batches
(`batches.make_batch` / `batches.sentence_batch`: one compile per row width).

- `letter_scores`: log p(letter_o | prompt) at each row's last prompt position (the log-softmax
  there, gathered at the options' letter ids), float64 [Q, O], NaN beyond a question's options.
- `sentence_scores`: the summed log-likelihood of every row's tokens after its first (BLiMP's
  sentence score; padding excluded).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.buckets import bucket
from slm_jax.gtca.batches import Encoded, make_batch, row_width, sentence_batch
from slm_jax.gtca.spans import SpanTree


def make_letter_scorer(graphdef) -> Callable:
  """`score(params, batch, alpha) -> float32 [B, O]`: log p(letter_o | prompt) at each row's
  last prompt position; masked options are −inf. `graphdef`, `params`: a `GtcaLM`'s
  (`model.params_of`)."""

  def score(params, tokens, meta, chunks, positions, letters, options, alpha):
    logits_BTV = nnx.merge(graphdef, params).logits(tokens, meta, chunks, alpha)
    last_BV = jnp.take_along_axis(logits_BTV, positions[:, None, None], axis=1)[:, 0]
    logp_BV = jax.nn.log_softmax(last_BV.astype(jnp.float32), axis=-1)
    picked_BO = jnp.take_along_axis(logp_BV, letters, axis=-1)
    return jnp.where(options, picked_BO, -jnp.inf)

  jitted = jax.jit(score)

  def run(params, batch, alpha):
    b = {name: jax.tree.map(jnp.asarray, batch[name]) for name in
         ("tokens", "meta", "chunks", "positions", "letters", "options")}
    return jitted(params, b["tokens"], b["meta"], b["chunks"], b["positions"], b["letters"],
                  b["options"], jnp.asarray(alpha, jnp.float32))

  return run


def letter_scores(scorer: Callable, params, examples: Sequence[Encoded], alpha: float, *,
                  n_layers: int, k: int, batch_size: int = 32, width: int | None = None,
                  pad_id: int = 0) -> np.ndarray:
  """float64 [Q, O] letter log-likelihoods of every example (NaN beyond its options), in
  fixed-shape batches (one compile)."""
  if not examples:
    return np.zeros((0, 0))
  width = width or row_width(examples)
  width_o = max(len(e.letter_ids) for e in examples)
  out = np.full((len(examples), width_o), np.nan)
  for start in range(0, len(examples), batch_size):
    chunk = examples[start:start + batch_size]
    batch = make_batch(chunk, width, n_layers, k, rows=batch_size, pad_id=pad_id)
    scores = np.asarray(scorer(params, batch, alpha), np.float64)[:len(chunk)]
    scores = scores[:, :out.shape[1]] if scores.shape[1] >= out.shape[1] else np.pad(
        scores, ((0, 0), (0, out.shape[1] - scores.shape[1])), constant_values=-np.inf)
    out[start:start + len(chunk)] = np.where(np.isneginf(scores), np.nan, scores)
  return out


def make_sequence_scorer(graphdef) -> Callable:
  """`score(params, tokens, meta, chunks, alpha) -> float32 [B]`: the summed log-likelihood of
  every row's tokens after its first (padding excluded)."""

  def score(params, tokens, meta, chunks, alpha):
    logits_BTV = nnx.merge(graphdef, params).logits(tokens, meta, chunks, alpha)
    logp_BSV = jax.nn.log_softmax(logits_BTV[:, :-1].astype(jnp.float32), axis=-1)
    picked_BS = jnp.take_along_axis(logp_BSV, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.where(meta.segment[:, 1:] > 0, picked_BS, 0.0).sum(axis=-1)

  return jax.jit(score)


def sentence_scores(scorer: Callable, params, rows: Sequence[tuple[np.ndarray, SpanTree]],
                    alpha: float, *, n_layers: int, k: int, batch_size: int = 32,
                    width: int | None = None, pad_id: int = 0) -> np.ndarray:
  """float64 [N] summed log-likelihoods of (ids_T, span tree over all of ids_T) rows."""
  if not rows:
    return np.zeros(0)
  width = width or bucket(max(len(ids) for ids, _ in rows), 16)
  out = np.zeros(len(rows))
  for start in range(0, len(rows), batch_size):
    chunk = rows[start:start + batch_size]
    batch = jax.tree.map(jnp.asarray, sentence_batch(chunk, width, batch_size, n_layers, k,
                                                     pad_id))
    scores = scorer(params, batch["tokens"], batch["meta"], batch["chunks"],
                    jnp.asarray(alpha, jnp.float32))
    out[start:start + len(chunk)] = np.asarray(scores, np.float64)[:len(chunk)]
  return out
