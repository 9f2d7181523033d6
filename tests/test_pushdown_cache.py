"""Cached Pushdown decoding: one token per step through the KV cache equals the full forward."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.kinds import Kind
from slm_jax.pushdown import cache
from slm_jax.pushdown.stack import Stack
from slm_jax.structure import row_metadata
from tests.test_pushdown_model import tiny_model


def test_each_step_equals_the_full_forward_pass():
  model = tiny_model(seed=2, n_layers=1, n_kv_heads=1)  # GQA through the cache
  model.depth_embed[...] = model.depth_embed[...] * 30
  T, slots = 7, 8
  tokens = np.array([[1, 5, 9, 3, 7, 2, 4]], np.int32)
  kinds = np.array([[Kind.BOS] + [Kind.TERMINAL] * (T - 2) + [Kind.EOS]], np.int8)
  stack, tape = Stack(T), np.zeros((1, slots, slots), np.int32)
  for e, attach in enumerate([0, 1, 1, 3, 2, 5, 6]):
    if e == 1:
      stack.start_sentence()
    stack.push(e, attach)
    tape[0, e, :T] = stack.depth
  padded = np.zeros((1, slots), np.int32)
  padded[:, :T] = tokens
  kinds_padded = np.zeros((1, slots), np.int8)
  kinds_padded[:, :T] = kinds
  meta = row_metadata(kinds_padded, (kinds_padded != 0).astype(np.int32))
  nexts = np.concatenate([padded[:, 1:], [[0]]], axis=1)

  @nnx.jit
  def full(model, tokens, meta, tape, nexts):
    logits, h = model.forward(tokens, meta, tape)
    return (logits, *model.attachment_logits(h, nexts, tape))

  logits, reduce, shift = full(model, jnp.asarray(padded), meta, jnp.asarray(tape),
                               jnp.asarray(nexts))
  state = cache.empty(model, 1, slots)
  for t in range(T - 1):
    state, word, red, sh = cache.step(model, state, jnp.asarray(padded[:, t]), jnp.int32(t),
                                      jnp.asarray(tape[:, t]), jnp.asarray(nexts[:, t]))
    want = np.asarray(logits[0, t]) - np.logaddexp.reduce(np.asarray(logits[0, t]))
    np.testing.assert_allclose(float(word[0]), want[nexts[0, t]], atol=1e-4)
    np.testing.assert_allclose(np.asarray(red[0, :t + 1]), np.asarray(reduce[0, t, :t + 1]),
                               atol=1e-4)
    np.testing.assert_allclose(float(sh[0]), float(shift[0, t]), atol=1e-4)
  twice = cache.select(state, jnp.asarray([0, 0]))
  assert twice.k.shape[1] == 2 and np.array_equal(np.asarray(twice.h[1]), np.asarray(state.h[0]))
