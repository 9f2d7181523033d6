"""Pushdown decoding with a key/value cache, through the decoder's `attend` hook.

A token's keys and values depend on the stack tape rows up to its own position only (the
decoder is causal), so they stay valid while later attachments change the stack: a cache keeps
every layer's keys and values and the final hidden states (the attachment head's keys read
them), and only the stack-tape bias of the new query is computed from the hypothesis's current
tape row. `step` feeds token t of every row (RoPE position t; or each row its own t, when
the batched beam `beam_batch` holds several rows' hypotheses), writes its keys/values
into slot t, attends over slots ≤ t with the bias of `tape_NS` (the depths after token t), and
returns the log-probability of the next token and the attachment logits of that token — what one
step of the attachment beam (`beam.beam_score`) needs, equal to the recomputed forward pass
(`beam` tests it). It computes `CHUNK_ROWS` rows at a time, so a row's numbers are the same
bits however many rows a step holds (the one-row and the batched beam agree bit for bit); the
chunk loop is `in_chunks`, the one such loop.
The joint summary search (`generate`) uses its two halves: `feed` (the same
step, returning the full next-token log-softmax [N, V] and the new hidden state) and
`attachments` (the attachment logits of K candidate next tokens per row at once), after
`prefill` has written a whole teacher-forced prompt row into the cache. `select` reorders the
rows for the hypotheses kept (a gather; pruning copies rows, never recomputes them).
`feed_chunks` / `attachments_chunks` are the two halves over several articles' rows at once (each
row at its own position), computed one article's `beam` rows per chunk (`in_chunks`), so each
row's numbers are those of its article's search alone (`generate_batch`).

The model's own blocks, norms and head run: the cache is the `attend` hook, as
`slm_jax.inference.incremental` is for the other configurations (whose masks, not biases, carry the
structure, so that decoder has no bias input).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax.buckets import bucket
from slm_jax.kinds import TERMINAL_CODE
from slm_jax.model.attention import attention_core
from slm_jax.pushdown.model import PushdownLM
from slm_jax.structure import RowMetadata


class Cache(NamedTuple):
  """k, v [L, N, S, G, K] per layer; h [N, S, D] final hidden states; N rows, S slots."""

  k: jax.Array
  v: jax.Array
  h: jax.Array


def empty(model: PushdownLM, rows: int, slots: int) -> Cache:
  c = model.config
  kv = jnp.zeros((c.n_layers, rows, slots, c.n_kv_heads, c.head_dim), c.compute_dtype)
  return Cache(kv, kv, jnp.zeros((rows, slots, c.d_model), c.compute_dtype))


def _write(into_NS, x_N1, t):
  """`into_NS` with slot t of every row (t a scalar, or t[n] for row n) set to `x_N1`."""
  x_N1 = x_N1.astype(into_NS.dtype)
  if jnp.ndim(t) == 0:
    return jax.lax.dynamic_update_slice_in_dim(into_NS, x_N1, t, axis=1)
  return into_NS.at[jnp.arange(into_NS.shape[0]), t].set(x_N1[:, 0])


def _feed(model: PushdownLM, cache: Cache, token_N, t, tape_NS):
  """(cache, log-softmax of the next token [N, V], hidden state [N, D]) after feeding token t
  (a scalar: every row at position t; or [N]: row n at position t[n], the batched beam's rows
  of several sentences)."""
  rows, slots = cache.h.shape[:2]
  ones = jnp.ones((rows, 1), jnp.int32)
  t_N1 = t if jnp.ndim(t) == 0 else jnp.asarray(t)[:, None]
  meta = RowMetadata(ones * TERMINAL_CODE, ones, ones * t_N1, ones * 0, ones * slots)
  visible_N11S = jnp.broadcast_to((jnp.arange(slots) <= t_N1)[:, None, None]
                                  if jnp.ndim(t) else jnp.arange(slots) <= t,
                                  (rows, 1, 1, slots))
  keys, values = [], []

  def attend(layer, q_N1HK, k_N1GK, v_N1GK, meta_, attention):
    del meta_, attention  # one causal query per row: the mask is the slots written so far
    k_NSGK = _write(cache.k[layer], k_N1GK, t)
    v_NSGK = _write(cache.v[layer], v_N1GK, t)
    keys.append(k_NSGK)
    values.append(v_NSGK)
    bias = model.depth_bias(layer, q_N1HK, tape_NS[:, None])
    return attention_core(q_N1HK, k_NSGK, v_NSGK, visible_N11S, bias)

  h_N1D = model.decoder.hidden(model.decoder.embed(token_N[:, None]), meta, attend=attend)
  h_NSD = _write(cache.h, h_N1D, t)
  logp_NV = jax.nn.log_softmax(model.decoder.logits(h_N1D)[:, 0].astype(jnp.float32), axis=-1)
  return Cache(jnp.stack(keys), jnp.stack(values), h_NSD), logp_NV, h_N1D[:, 0]


def _attachments(model: PushdownLM, h_ND, keys_NSD, next_NK, tape_NS):
  """(reduce [N, K, S], shift [N, K]) logits of K candidate next tokens' attachments at the
  query whose hidden state is h_ND (its stack tape row tape_NS; keys from keys_NSD)."""
  K = next_NK.shape[1]
  h_NKD = jnp.broadcast_to(h_ND[:, None], (*next_NK.shape, h_ND.shape[-1]))
  tape_NKS = jnp.broadcast_to(tape_NS[:, None], (tape_NS.shape[0], K, tape_NS.shape[1]))
  return model.attachment_logits(h_NKD, next_NK, tape_NKS, keys_BSD=keys_NSD)


CHUNK_ROWS = 64  # rows one step computes at a time (`step`): XLA:CPU picks its matmul kernels
# by row count, so a row's numbers are the same bits in every call of one row count, not across
# row counts (8 rows and 12 differ in the 7th digit); a search pads its rows with `rows_for`


def rows_for(n: int) -> int:
  """Cache rows for n hypotheses: whole chunks of `CHUNK_ROWS`, their count a bucket
  (`slm_jax.buckets`, so few shapes compile)."""
  return CHUNK_ROWS * bucket(-(-max(n, 1) // CHUNK_ROWS), least=1)


def nbytes(config, rows: int, slots: int) -> int:
  """Bytes of `empty(model, rows, slots)` (`config` the model's): every layer's keys and values
  and the final hidden states, in the compute dtype."""
  per_slot = 2 * config.n_layers * config.n_kv_heads * config.head_dim + config.d_model
  return int(rows) * int(slots) * per_slot * jnp.dtype(config.compute_dtype).itemsize


COPIES_AT_PEAK = 2  # a step (`step`, `feed_chunks`) and a reselection (`select`) write a new
# cache while the old one is alive


def peak_bytes(config, rows: int, slots: int) -> int:
  """The memory a search holding a cache of `rows` rows and `slots` slots needs at its peak."""
  return COPIES_AT_PEAK * nbytes(config, rows, slots)


def _step(model: PushdownLM, cache: Cache, token_N, t, tape_NS, next_N):
  cache, logp_NV, h_ND = _feed(model, cache, token_N, t, tape_NS)
  word_N = jnp.take_along_axis(logp_NV, next_N[:, None], axis=-1)[:, 0]
  reduce_N1S, shift_N1 = _attachments(model, h_ND, cache.h, next_N[:, None], tape_NS)
  return cache, word_N, reduce_N1S[:, 0], shift_N1[:, 0]


def in_chunks(fn, C: int, live, cache: Cache | None, *rows):
  """`fn(cache of C rows or None, *rows' C rows) → (that cache or None, outputs [C, …])` over the
  rows of `cache` and `rows` (arrays [N, …]; a 0-d one is given whole to every chunk), C at a
  time in one loop, so every row is computed in a call of C rows however many rows there are
  (module docstring); → (cache, outputs [N, …]). `live`: only the chunks holding rows < live are
  computed (the others' outputs are 0, their cache rows unchanged); None: all."""
  N = rows[0].shape[0]
  if N % C:
    raise ValueError(f"pushdown cache: {N} rows are not whole chunks of {C} (pad them with "
                     "cache.rows_for)")
  chunks = N // C if live is None else (live + C - 1) // C

  def part(a, x, axis=0):
    return jax.lax.dynamic_slice_in_dim(x, a, C, axis) if jnp.ndim(x) else x

  def call(a, kv):
    kv = None if kv is None else Cache(part(a, kv.k, 1), part(a, kv.v, 1), part(a, kv.h))
    return fn(kv, *(part(a, x) for x in rows))

  def body(i, carry):
    kv, outputs = carry
    a = i * C
    put = lambda into, x, axis=0: jax.lax.dynamic_update_slice_in_dim(into, x, a, axis)
    chunk, *out = call(a, kv)
    if kv is not None:
      kv = Cache(put(kv.k, chunk.k, 1), put(kv.v, chunk.v, 1), put(kv.h, chunk.h))
    return kv, tuple(put(into, x) for into, x in zip(outputs, out))

  shapes = jax.eval_shape(lambda: call(0, cache)[1:])
  zeros = tuple(jnp.zeros((N, *s.shape[1:]), s.dtype) for s in shapes)
  return jax.lax.fori_loop(0, chunks, body, (cache, zeros))


@nnx.jit
def step(model: PushdownLM, cache: Cache, token_N, t, tape_NS, next_N, live=None):
  """(cache, log p(next_N | …) [N], reduce [N, S], shift [N]) after feeding token t (a scalar,
  or per row [N]). The rows are computed `CHUNK_ROWS` at a time (all of them when fewer), so a
  row's numbers do not depend on how many rows a call holds (`rows_for` pads them to whole
  chunks); `live`: only the chunks holding rows < live are computed (the others' outputs are 0,
  their cache rows unchanged)."""
  C = min(CHUNK_ROWS, cache.h.shape[0])
  cache, out = in_chunks(functools.partial(_step, model), C, live, cache, token_N, t, tape_NS,
                         next_N)
  return (cache, *out)


@functools.partial(nnx.jit, static_argnames=("chunk",))
def feed_chunks(model: PushdownLM, cache: Cache, token_N, t_N, tape_NS, *, chunk: int,
                live=None):
  """`feed` of every row at its own position t_N, `chunk` rows at a time (`in_chunks`; the joint
  summary search of several articles, one article's `chunk` hypothesis rows a chunk, computes each
  row as `feed` of that article's rows alone does); → (cache, logp [N, V], h [N, D])."""
  cache, out = in_chunks(functools.partial(_feed, model), chunk, live, cache, token_N, t_N,
                         tape_NS)
  return (cache, *out)


@functools.partial(nnx.jit, static_argnames=("chunk",))
def attachments_chunks(model: PushdownLM, h_ND, keys_NSD, next_NK, tape_NS, *, chunk: int,
                       live=None):
  """`attachments` of every row, `chunk` rows at a time (`in_chunks`, as `feed_chunks`)."""
  def fn(_, h_CD, keys_CSD, next_CK, tape_CS):
    return (None, *_attachments(model, h_CD, keys_CSD, next_CK, tape_CS))

  _, out = in_chunks(fn, chunk, live, None, h_ND, keys_NSD, next_NK, tape_NS)
  return out


feed = nnx.jit(_feed)
feed.__doc__ = _feed.__doc__
attachments = nnx.jit(_attachments)
attachments.__doc__ = _attachments.__doc__


@functools.partial(nnx.jit, static_argnames=("slots",))
def prefill(model: PushdownLM, tokens_1P, meta: RowMetadata, tape_1PP, last, *, slots: int):
  """(cache of one row and `slots` slots holding a whole prompt row [1, P] (P ≤ slots; padding
  after token `last`), the next-token log-softmax [1, V] and hidden state [1, D] at `last`).
  The prompt's queries see its reference mask and stack tape, as in `PushdownLM.forward`."""
  keys, values = [], []
  hook = model.attend(tape_1PP)

  def attend(layer, q_1PHK, k_1PGK, v_1PGK, meta_, attention):
    keys.append(k_1PGK)
    values.append(v_1PGK)
    return hook(layer, q_1PHK, k_1PGK, v_1PGK, meta_, attention)

  h_1PD = model.decoder.hidden(model.decoder.embed(tokens_1P), meta, attend=attend)
  blank = empty(model, 1, slots)
  put = lambda into, x, axis: jax.lax.dynamic_update_slice_in_dim(into, x.astype(into.dtype), 0,
                                                                   axis=axis)
  cache = Cache(put(blank.k, jnp.stack(keys), 2), put(blank.v, jnp.stack(values), 2),
                put(blank.h, h_1PD, 1))
  h_1D = jnp.take(h_1PD, last, axis=1)
  logp_1V = jax.nn.log_softmax(model.decoder.logits(h_1D[:, None])[:, 0].astype(jnp.float32),
                               axis=-1)
  return cache, logp_1V, h_1D


@jax.jit
def select(cache: Cache, parents_N) -> Cache:
  """The rows `parents_N` of the cache, in that order (the kept hypotheses' origins)."""
  return Cache(cache.k[:, parents_N], cache.v[:, parents_N], cache.h[parents_N])
