"""Plain causal text rows for a decoder: what Hugging Face checkpoints (and GTCA's backbone) read.

- `plain_rows(sequences, width, rows, pad_id)`: tokens [rows, width] and `RowMetadata` of causal
  text rows (kind TERMINAL, one segment each, segment 0 = padding).
- `logits(model, ids_BT)`: float32 logits of equal-length rows, one jitted forward pass (what the
  parity tests compare against transformers).

Batched per-token scoring of texts (`python -m slm_jax.score`) is
`inference.text_scorer.TextScorer`, on the one batching loop of every scorer
(`inference.scorer.BatchScorer`).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.kinds import Kind
from slm_jax.model.decoder import Decoder
from slm_jax.structure import row_metadata


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
