"""The `IncrementalDecoder` interface without a cache: the baselines of `benchmarks/beam_bench.py`.

Every step re-runs the full forward pass over the whole prefix of each fed row (bucketed rows and
lengths, as the cache's), or, with `all_rows=True`, of every row at the longest row's length.
Same log-probabilities as the KV cache (tests/test_incremental.py), a different cost.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.buckets import bucket, buckets
from slm_jax.configurations import Configuration
from slm_jax.inference.incremental import ROW_BUCKET, SLOT_BUCKET, gather_logprobs
from slm_jax.inference.scorer import check_attention, split_model
from slm_jax.model.decoder import Decoder
from slm_jax.structure import row_metadata


class RecomputeDecoder:
  """The IncrementalDecoder interface without a cache: every step re-runs the full forward pass
  over the whole prefix of each row it feeds — or, with `all_rows=True`, of every row at the
  longest row's length (a naive batch) — the baselines of `benchmarks/beam_bench.py`."""

  def __init__(self, model: Decoder, configuration: Configuration, *, max_len: int, batch: int,
               all_rows: bool = False):
    check_attention(model, configuration)
    self.all_rows = all_rows
    self.model = model
    self.configuration = configuration
    self.max_len = int(max_len)
    self.batch = int(batch)
    self.graphdef, self.params = split_model(model)
    self.tokens = np.zeros((self.batch, self.max_len), np.int32)
    self.kinds = np.zeros((self.batch, self.max_len), np.int32)
    self.lengths = np.zeros(self.batch, np.int64)
    self._logprobs: jax.Array | None = None

  @property
  def logprobs(self) -> jax.Array:
    return self._logprobs

  def _forward(self, rows: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Fresh logprobs (rows padded to a bucket) and where they go (index N = dropped)."""
    if not self.all_rows:
      return self._forward_rows(rows)
    fresh, _ = self._forward_rows(np.arange(self.batch))  # every row, keep the fed ones
    index = np.full(self.batch, self.batch, np.int32)
    index[rows] = rows
    return fresh, jnp.asarray(index)

  def _forward_rows(self, rows: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Fresh logprobs of `rows` padded to a row bucket, and the padded row index (N = pad)."""
    width = bucket(len(rows), ROW_BUCKET, self.batch)
    padded = np.concatenate([rows, np.full(width - len(rows), rows[0])])
    lengths = self.lengths[padded]
    slots = bucket(int(lengths.max()), SLOT_BUCKET, self.max_len)
    segment = (np.arange(slots)[None, :] < lengths[:, None]).astype(np.int32)
    meta = row_metadata(self.kinds[padded, :slots], segment)
    fresh = _last_logprobs(self.graphdef, self.params, jnp.asarray(self.tokens[padded, :slots]),
                           jax.tree.map(jnp.asarray, meta), jnp.asarray(lengths - 1))
    index = np.concatenate([rows, np.full(width - len(rows), self.batch)]).astype(np.int32)
    return fresh, jnp.asarray(index)

  def start(self, prefix_ids, prefix_kinds) -> jax.Array:
    ids = np.asarray(prefix_ids, np.int32)
    kinds = np.asarray(prefix_kinds, np.int32)
    if ids.ndim == 1:
      ids, kinds = ids[None], kinds[None]
    T = ids.shape[1]
    self.tokens[:] = 0
    self.kinds[:] = 0
    self.tokens[:, :T] = ids
    self.kinds[:, :T] = kinds
    self.lengths[:] = T
    fresh, _ = self._forward_rows(np.arange(self.batch))
    self._logprobs = fresh[:self.batch]
    return self._logprobs

  def step_rows(self, rows, token_ids, kinds) -> None:
    rows = np.asarray(rows, np.int64)
    if len(rows) == 0:
      return
    self.tokens[rows, self.lengths[rows]] = token_ids
    self.kinds[rows, self.lengths[rows]] = kinds
    self.lengths[rows] += 1
    fresh, index = self._forward(rows)
    self._logprobs = _put_rows(self._logprobs, index, fresh)

  def step(self, token_ids_N, kinds_N, active_N=None) -> jax.Array:
    active = np.ones(self.batch, bool) if active_N is None else np.asarray(active_N, bool)
    rows = np.flatnonzero(active)
    self.step_rows(rows, np.asarray(token_ids_N)[rows], np.asarray(kinds_N)[rows])
    return self._logprobs

  def copy_rows(self, dest, src) -> None:
    dest, src = np.asarray(dest, np.int64), np.asarray(src, np.int64)
    m = len(dest)
    if m == 0:
      return
    self.tokens[dest], self.kinds[dest] = self.tokens[src], self.kinds[src]
    self.lengths[dest] = self.lengths[src]
    width = bucket(m, ROW_BUCKET, self.batch)
    pad = lambda a, fill: jnp.asarray(np.concatenate([a, np.full(width - m, fill)]).astype(
        np.int32))
    self._logprobs = _put_rows(self._logprobs, pad(dest, self.batch),
                               self._logprobs[pad(src, 0)])

  def reorder(self, indices) -> None:
    self.copy_rows(np.arange(self.batch), np.asarray(indices))

  def precompile(self) -> int:
    """Compiles the forward pass for every (row bucket, slot bucket); returns how many."""
    count = 0
    for width in [self.batch] if self.all_rows else buckets(self.batch, ROW_BUCKET):
      index = jnp.full((width,), self.batch, jnp.int32)
      self._logprobs = _put_rows(self._logprobs, index, self._logprobs[jnp.zeros_like(index)])
      for slots in buckets(self.max_len, SLOT_BUCKET):
        tokens = np.zeros((width, slots), np.int32)
        meta = row_metadata(tokens, np.ones_like(tokens))
        _last_logprobs(self.graphdef, self.params, jnp.asarray(tokens),
                       jax.tree.map(jnp.asarray, meta), jnp.zeros((width,), jnp.int32))
        count += 1
    return count

  def gather(self, ids_NC) -> np.ndarray:
    return gather_logprobs(self._logprobs, ids_NC)


@jax.jit
def _put_rows(logprobs_NV, index_M, values_MV):
  return logprobs_NV.at[index_M].set(values_MV, mode="drop")


@functools.partial(jax.jit, static_argnums=(0,))
def _last_logprobs(graphdef, params, tokens_MS, meta: Any, last_M):
  """Full forward over [M, S]; log-softmax of the logits at each row's last real token."""
  model = nnx.merge(graphdef.graphdef, params)
  h_MSD = model.hidden(model.embed(tokens_MS), meta)
  h_M1D = jnp.take_along_axis(h_MSD, last_M[:, None, None], axis=1)
  return jax.nn.log_softmax(model.logits(h_M1D)[:, 0], axis=-1)
