"""GTCA's scorers (SPEC §10): option letters after `Answer:` and summed sentence log-likelihoods.

Both run the model's one forward pass (`GtcaLM.logits`: the branch at the given α when the model
has one, the plain backbone otherwise), jitted once per model graph, over the batches of the one
scorer loop (`inference.scorer.batched_rows`: rows sorted by length, padded to one fixed width and
`batch_size` rows, so one compile per row width); each batch's span-tree chunks
(`batches.padded_chunks`) and option letters are looked up by the rows' indices.

- `letter_scores`: log p(letter_o | prompt) at each row's last prompt position (the log-softmax
  there, gathered at the options' letter ids; the head applied at that position only,
  `GtcaLM.logits_at`), float64 [Q, O], NaN beyond a question's options.
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
from slm_jax.inference.scorer import batched_rows
from slm_jax.gtca.batches import EncodedExample, padded_chunks, row_width
from slm_jax.gtca.spans import SpanTree
from slm_jax.kinds import Kind
from slm_jax.structure import row_metadata


def make_letter_scorer(graphdef) -> Callable:
  """`score(params, batch, alpha) -> float32 [B, O]`: log p(letter_o | prompt) at each row's
  last prompt position; masked options are −inf. `graphdef`, `params`: a `GtcaLM`'s
  (`model.params_of`)."""

  def score(params, tokens, meta, chunks, positions, letters, options, alpha):
    last_BV = nnx.merge(graphdef, params).logits_at(tokens, meta, chunks, alpha, positions)
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


def _rows(ids: Sequence[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
  """`batched_rows` input: every token a terminal (GTCA's rows are plain text ids)."""
  return [(np.asarray(x, np.int32), np.full(len(x), int(Kind.TERMINAL), np.int32)) for x in ids]


def letter_scores(scorer: Callable, params, examples: Sequence[EncodedExample], alpha: float, *,
                  n_layers: int, k: int, batch_size: int = 32, width: int | None = None,
                  pad_id: int = 0) -> np.ndarray:
  """float64 [Q, O] letter log-likelihoods of every example (NaN beyond its options), batched by
  `inference.scorer.batched_rows` at one row width and `batch_size` rows (one compile); a set of
  fewer examples gets the row bucket that holds them (`bucket(len, 1)`: 16 long HellaSwag rows
  are not padded to 32)."""
  if not examples:
    return np.zeros((0, 0))
  batch_size = bucket(len(examples), 1, batch_size)
  width_o = max(len(e.letter_ids) for e in examples)

  def call(tokens_BT, kinds_BT, segment_BT, index_B):
    rows = [examples[i] for i in index_B if i >= 0]
    positions = np.zeros(len(index_B), np.int32)
    letters = np.zeros((len(index_B), width_o), np.int32)
    for r, e in enumerate(rows):
      positions[r] = e.position
      letters[r, :len(e.letter_ids)] = e.letter_ids
    batch = dict(tokens=tokens_BT, meta=row_metadata(kinds_BT, segment_BT), positions=positions,
                 letters=letters, options=np.arange(width_o) < np.asarray(
                     [len(e.letter_ids) for e in rows] + [0] * (len(index_B) - len(rows)))[:, None],
                 chunks=padded_chunks([e.tree for e in rows], len(index_B), n_layers,
                                      tokens_BT.shape[1], k))
    return (np.asarray(scorer(params, batch, alpha), np.float64),)

  scored = batched_rows(_rows([e.ids_T for e in examples]), call, batch_size=batch_size,
                        pad_id=pad_id, width=width or row_width(examples), full_rows=True,
                        with_index=True)
  out = np.stack([row for (row,) in scored])
  return np.where(np.isneginf(out), np.nan, out)


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
  """float64 [N] summed log-likelihoods of (ids_T, span tree over all of ids_T) rows, batched by
  `inference.scorer.batched_rows` at one row width and `batch_size` rows."""
  if not rows:
    return np.zeros(0)

  def call(tokens_BT, kinds_BT, segment_BT, index_B):
    trees = [rows[i][1] for i in index_B if i >= 0]
    chunks = padded_chunks(trees, len(index_B), n_layers, tokens_BT.shape[1], k)
    scores = scorer(params, jnp.asarray(tokens_BT),
                    jax.tree.map(jnp.asarray, row_metadata(kinds_BT, segment_BT)),
                    jax.tree.map(jnp.asarray, chunks), jnp.asarray(alpha, jnp.float32))
    return (np.asarray(scores, np.float64),)

  width = width or bucket(max(len(ids) for ids, _ in rows), 16)
  scored = batched_rows(_rows([ids for ids, _ in rows]), call, batch_size=batch_size,
                        pad_id=pad_id, width=width, full_rows=True, with_index=True)
  return np.asarray([float(x) for (x,) in scored], np.float64)
