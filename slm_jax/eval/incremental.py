"""KV-cache decoding with incremental TG structural metadata (for beam search over hypotheses).

`IncrementalDecoder(model, configuration, max_len=S, batch=N)` holds, for N hypotheses:
  k, v      L × [N, G, S, K]  per-layer keys (RoPE applied) and values, in the compute dtype
  kind, pop [N, S]            the SPEC §3 metadata of every cached token, *as known so far*
  length    [N]               tokens fed (the next token goes to slot `length`, RoPE position too)
  logprobs  [N, V]            log-softmax of the next-token distribution (float32)
Everything is updated in place (donated buffers; per-layer arrays so a step writes one slot per
row, not the whole cache), and a step computes only the rows it feeds (bucketed row counts).

Incremental metadata: a cached key that is not popped yet has pop = S ("infinity"); when a
closing (CNT/CNT1) arrives at slot i, every not-yet-popped key in [innermost open ONT, i) gets
pop = i (the ONT itself, its direct children, and child CNT1s — deeper items were popped by their
own closing); a CNT2 gets pop = i + 1. A mask only compares pop[j] with the query index (`> i`,
`== i`), so for the prefix [0, i] this gives exactly the mask the full-sequence `row_metadata`
gives. The new query's mask comes from `structure.attends` (the one predicate) with the
configuration's per-head codes, so every attention type (causal, tg, tg_nomask, tg_nomask_aug,
hybrids) is decoded the way it was trained.

The layers are the model's own submodules (`embed_tokens`, `blocks[i].attn_norm`, `attn.q/k/v/o`,
`mlp_norm`, `mlp`, `final_norm`, the tied head) and `apply_rope`; only the attention over the
cache is re-implemented (same float32 softmax, GQA layout h = g·R + r, masked probabilities
zeroed).
All functions are jitted once per (graphdef, N, S, row bucket) and vectorized over hypotheses.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.configurations import Configuration
from slm_jax.kinds import Kind
from slm_jax.model.decoder import Decoder
from slm_jax.model.layers import apply_rope
from slm_jax.structure import TokenMeta, attends, row_metadata

_ONT, _CNT, _CNT1, _CNT2 = int(Kind.ONT), int(Kind.CNT), int(Kind.CNT1), int(Kind.CNT2)


class DecoderCache(NamedTuple):
  """Device state of N hypotheses (see module docstring)."""

  k: tuple  # per layer [N, G, S, K]
  v: tuple  # per layer [N, G, S, K]
  kind: jax.Array  # [N, S] int32
  pop: jax.Array  # [N, S] int32
  length: jax.Array  # [N] int32


def _attend(q_MHK, k_MGSK, v_MGSK, mask_MHS):
  """Softmax attention of one query per row over its S cached keys (xla_attention's math)."""
  M, H, K = q_MHK.shape
  G = k_MGSK.shape[1]
  q_MGRK = q_MHK.reshape(M, G, H // G, K)
  logits_MGRS = jnp.einsum("mgrk,mgsk->mgrs", q_MGRK, k_MGSK,
                           preferred_element_type=jnp.float32) * (K ** -0.5)
  mask_MGRS = mask_MHS.reshape(M, G, H // G, -1)
  logits_MGRS = jnp.where(mask_MGRS, logits_MGRS, jnp.finfo(jnp.float32).min)
  probs_MGRS = jnp.where(mask_MGRS, jax.nn.softmax(logits_MGRS, axis=-1), 0.0)
  o_MGRK = jnp.einsum("mgrs,mgsk->mgrk", probs_MGRS.astype(v_MGSK.dtype), v_MGSK)
  return o_MGRK.reshape(M, H, K)


def _attend_chunk(q_PTHK, k_PGSK, v_PGSK, mask_PHTS):
  """`_attend` for T queries per row (the prefix)."""
  P, T, H, K = q_PTHK.shape
  G = k_PGSK.shape[1]
  q_PGRTK = q_PTHK.reshape(P, T, G, H // G, K).transpose(0, 2, 3, 1, 4)
  logits = jnp.einsum("pgrtk,pgsk->pgrts", q_PGRTK, k_PGSK,
                      preferred_element_type=jnp.float32) * (K ** -0.5)
  mask = mask_PHTS.reshape(P, G, H // G, T, -1)
  logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  probs = jnp.where(mask, jax.nn.softmax(logits, axis=-1), 0.0)
  o_PGRTK = jnp.einsum("pgrts,pgsk->pgrtk", probs.astype(v_PGSK.dtype), v_PGSK)
  return o_PGRTK.transpose(0, 3, 1, 2, 4).reshape(P, T, H, K)


def _mask(codes_H, q_index, q_kind, key_kind, key_pop):
  """attends() of queries [..., C] against keys [..., S] → [..., H, C, S]; one segment."""
  S = key_kind.shape[-1]
  query = TokenMeta(q_index[..., None, :, None], 1, q_kind[..., None, :, None], 0)
  key = TokenMeta(jnp.arange(S), 1, key_kind[..., None, None, :], key_pop[..., None, None, :])
  return attends(query, key, jnp.asarray(codes_H)[:, None, None])


def _head(model: Decoder, x_MD):
  """Next-token log-probabilities [M, V] from the last hidden states [M, D]."""
  logits = model.logits(model.final_norm(x_MD[:, None]))[:, 0]
  return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)


@functools.partial(jax.jit, static_argnums=(0, 2, 3, 4))
def _prefill(graphdef, params, codes_H: tuple, n: int, max_len: int, tokens_PT, kind_PT, pop_PT):
  """Feeds the prefix [P, T] (P = 1 or n) from slot 0 → (n-row cache, logprobs [n, V])."""
  model = nnx.merge(graphdef, params)
  P, T = tokens_PT.shape
  S = max_len
  index = jnp.arange(T)
  pop_PT = jnp.where(kind_PT == _CNT2, index + 1, jnp.where(pop_PT >= T, S, pop_PT))
  kind_PS = jnp.zeros((P, S), jnp.int32).at[:, :T].set(kind_PT)
  pop_PS = jnp.full((P, S), S, jnp.int32).at[:, :T].set(pop_PT)
  pos_PT = jnp.broadcast_to(index, (P, T))
  mask_PHTS = _mask(codes_H, pos_PT, kind_PT, kind_PS, pop_PS)
  x = model.embed(tokens_PT).astype(model.config.compute_dtype)
  grow = lambda a: jnp.broadcast_to(a, (n,) + a.shape[1:])
  ks, vs = [], []
  for block in model.blocks:
    attn = block.attn
    H, G, K = attn.shape
    h = block.attn_norm(x)
    q = apply_rope(attn.q(h).reshape(P, T, H, K), pos_PT, attn.rope_theta)
    k = apply_rope(attn.k(h).reshape(P, T, G, K), pos_PT, attn.rope_theta)
    v = attn.v(h).reshape(P, T, G, K)
    pad = lambda a: jnp.zeros((P, G, S, K), model.config.compute_dtype).at[:, :, :T].set(
        a.transpose(0, 2, 1, 3).astype(model.config.compute_dtype))
    k_PGSK, v_PGSK = pad(k), pad(v)
    o = _attend_chunk(q, k_PGSK, v_PGSK, mask_PHTS)
    x = x + attn.o(o.reshape(P, T, H * K)).astype(x.dtype)
    x = x + block.mlp(block.mlp_norm(x)).astype(x.dtype)
    ks.append(grow(k_PGSK))
    vs.append(grow(v_PGSK))
  lp = _head(model, x[:, -1])
  return (DecoderCache(tuple(ks), tuple(vs), grow(kind_PS), grow(pop_PS),
                       jnp.full((n,), T, jnp.int32)), grow(lp))


def _update_structure(kind_MS, pop_MS, pos_M, kinds_M, active_M, inf: int):
  """Incremental metadata after appending kinds_M at slot pos_M (rows with active_M); the
  slots are a prefix [0, S') of the cache, and `inf` (= max_len) marks keys not popped yet."""
  S = kind_MS.shape[-1]
  j = jnp.arange(S)[None, :]
  i = pos_M[:, None]
  open_ont = (kind_MS == _ONT) & (pop_MS == inf) & (j < i)
  innermost = jnp.max(jnp.where(open_ont, j, -1), axis=-1)[:, None]  # -1: nothing open
  closes = (active_M & ((kinds_M == _CNT) | (kinds_M == _CNT1)))[:, None] & (innermost >= 0)
  pop_MS = jnp.where(closes & (j >= innermost) & (j < i) & (pop_MS == inf), i, pop_MS)
  new = (j == i) & active_M[:, None]
  kind_MS = jnp.where(new, kinds_M[:, None], kind_MS)
  pop_MS = jnp.where(new, jnp.where(kinds_M[:, None] == _CNT2, i + 1, inf), pop_MS)
  return kind_MS, pop_MS


@functools.partial(jax.jit, static_argnums=(0, 2, 3), donate_argnums=(4, 5))
def _step_rows(graphdef, params, codes_H: tuple, width: int, cache: DecoderCache, logprobs_NV,
               rows_M, tokens_M, kinds_M):
  """Appends one token to each of rows_M (index N = padding, ignored); cache updated in place.

  Only slots [0, width) are read (width > every fed row's length).
  """
  model = nnx.merge(graphdef, params)
  N, S = cache.kind.shape
  active_M = rows_M < N
  pos_M = cache.length[rows_M]  # padding reads are clamped, their writes dropped
  kind_MS, pop_MS = _update_structure(cache.kind[rows_M, :width], cache.pop[rows_M, :width],
                                      pos_M, kinds_M, active_M, S)
  mask_MHS = _mask(codes_H, pos_M[:, None], kinds_M[:, None], kind_MS, pop_MS)[:, :, 0]
  M = rows_M.shape[0]
  x = model.embed(tokens_M[:, None]).astype(model.config.compute_dtype)
  ks, vs = list(cache.k), list(cache.v)
  for layer, block in enumerate(model.blocks):
    attn = block.attn
    H, G, K = attn.shape
    h = block.attn_norm(x)
    q = apply_rope(attn.q(h).reshape(M, 1, H, K), pos_M[:, None], attn.rope_theta)[:, 0]
    k = apply_rope(attn.k(h).reshape(M, 1, G, K), pos_M[:, None], attn.rope_theta)[:, 0]
    v = attn.v(h).reshape(M, G, K)
    ks[layer] = ks[layer].at[rows_M, :, pos_M].set(k.astype(ks[layer].dtype), mode="drop")
    vs[layer] = vs[layer].at[rows_M, :, pos_M].set(v.astype(vs[layer].dtype), mode="drop")
    rows = jnp.minimum(rows_M, N - 1)  # padding rows read row N-1; their writes are dropped
    o = _attend(q, ks[layer][rows, :, :width], vs[layer][rows, :, :width], mask_MHS)
    x = x + attn.o(o.reshape(M, 1, H * K)).astype(x.dtype)
    x = x + block.mlp(block.mlp_norm(x)).astype(x.dtype)
  lp = _head(model, x[:, 0])
  drop = lambda a, new: a.at[rows_M].set(new, mode="drop")
  meta = lambda a, new: a.at[rows_M, :width].set(new, mode="drop")
  cache = DecoderCache(tuple(ks), tuple(vs), meta(cache.kind, kind_MS), meta(cache.pop, pop_MS),
                       drop(cache.length, pos_M + 1))
  return cache, drop(logprobs_NV, lp)


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(1, 2))
def _copy_rows(width: int, cache: DecoderCache, logprobs_NV, dest_M, src_M):
  """Row dest_M[m] ← old row src_M[m] (all sources read first; dest N = padding, dropped).

  Only slots [0, width) move (width >= every source's length).
  """
  copy = lambda a: a.at[dest_M].set(a[src_M], mode="drop")
  slots = lambda a: a.at[dest_M, :, :width].set(a[src_M, :, :width], mode="drop")
  meta = lambda a: a.at[dest_M, :width].set(a[src_M, :width], mode="drop")
  return DecoderCache(tuple(map(slots, cache.k)), tuple(map(slots, cache.v)), meta(cache.kind),
                      meta(cache.pop), copy(cache.length)), copy(logprobs_NV)


@jax.jit
def _gather(logprobs_NV, ids_NC):
  return jnp.take_along_axis(logprobs_NV, ids_NC, axis=1)


ROW_BUCKET = 32  # fewest rows a step computes (fewer compiled variants; padding is cheap)


def _bucket(m: int, cap: int, least: int = ROW_BUCKET) -> int:
  """Padded size for m: `least`·{1, 1.5, 2, 3, 4, 6, …}, at most `cap` (rows, or cache slots)."""
  size = least
  while size < m:
    size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
  return min(cap, size)


def _buckets(cap: int, least: int) -> list[int]:
  """Every size `_bucket` returns up to `cap`."""
  sizes = {min(cap, least)}
  while max(sizes) < cap:
    sizes.add(_bucket(max(sizes) + 1, cap, least))
  return sorted(sizes)


class IncrementalDecoder:
  """KV-cache decoder of `batch` hypotheses of up to `max_len` tokens (see module docstring).

  `start(prefix_ids, prefix_kinds)` → logprobs [N, V] after the prefix (1-D: the same prefix for
  every row; 2-D [N, T]: one per row); `step(token_ids_N, kinds_N, active_N=None)` appends one
  token per active row and returns the new next-token logprobs (inactive rows keep theirs);
  `reorder(indices_N)` makes row n a copy of old row indices_N[n] (beam reselection).
  Sparse forms for beam search: `step_rows(rows, ids, kinds)` (only those rows are computed) and
  `copy_rows(dest, src)` (only those rows move). The cache and the `logprobs` array are updated
  in place (donated buffers: `.logprobs` read earlier is invalid after the next call; `start` and
  `step` return copies). `gather(ids_NC)` reads a few log-probabilities per row to the host.
  """

  def __init__(self, model: Decoder, configuration: Configuration, *, max_len: int, batch: int):
    config = model.config
    if configuration.attention != config.attention:
      raise ValueError(f"configuration {configuration.name} uses attention "
                       f"{configuration.attention.name} but the model was built with "
                       f"{config.attention.name}")
    self.model = model
    self.configuration = configuration
    self.max_len = int(max_len)
    self.batch = int(batch)
    self.graphdef, self.params = nnx.split(model)
    self.codes = tuple(int(c) for c in configuration.attention.head_codes(config.n_heads))
    self.cache: DecoderCache | None = None
    self._logprobs: jax.Array | None = None
    self.lengths = np.zeros(self.batch, np.int64)  # host mirror of cache.length

  @property
  def logprobs(self) -> jax.Array:
    """Next-token log-probabilities [N, V] (device, float32)."""
    self._check_started()
    return self._logprobs

  def _check_started(self) -> None:
    if self.cache is None:
      raise RuntimeError("IncrementalDecoder: call start(prefix) first")

  def start(self, prefix_ids, prefix_kinds) -> jax.Array:
    ids = np.asarray(prefix_ids, np.int32)
    kinds = np.asarray(prefix_kinds, np.int32)
    if ids.ndim == 1:
      ids, kinds = ids[None], kinds[None]
    if ids.shape != kinds.shape or ids.shape[0] not in (1, self.batch) or ids.shape[1] == 0:
      raise ValueError(f"start: prefix ids {ids.shape} and kinds {kinds.shape} must be [T] or "
                       f"[{self.batch}, T] with T >= 1")
    T = ids.shape[1]
    if T > self.max_len:
      raise ValueError(f"start: prefix of {T} tokens exceeds max_len={self.max_len}")
    pop = row_metadata(kinds, np.ones_like(kinds)).pop
    self.cache = self._logprobs = None  # free the old cache before allocating the new one
    self.cache, self._logprobs = _prefill(self.graphdef, self.params, self.codes, self.batch,
                                          self.max_len, jnp.asarray(ids), jnp.asarray(kinds),
                                          jnp.asarray(pop))
    self.lengths = np.full(self.batch, T, np.int64)
    return jnp.copy(self._logprobs)

  def step_rows(self, rows, token_ids, kinds) -> None:
    """Appends token_ids[m] (kind kinds[m]) to row rows[m]; rows distinct."""
    self._check_started()
    rows = np.asarray(rows, np.int64)
    m = len(rows)
    if m == 0:
      return
    if len(np.unique(rows)) != m or rows.min() < 0 or rows.max() >= self.batch:
      raise ValueError(f"step_rows: rows must be distinct indices in [0, {self.batch})")
    full = self.lengths[rows] >= self.max_len
    if full.any():
      raise ValueError(f"step: row {int(rows[full][0])} already holds max_len={self.max_len} "
                       "tokens")
    width = _bucket(m, self.batch)
    slots = _bucket(int(self.lengths[rows].max()) + 1, self.max_len, 16)
    pad = lambda a, fill: np.concatenate([np.asarray(a, np.int32),
                                          np.full(width - m, fill, np.int32)])
    self.cache, self._logprobs = _step_rows(
        self.graphdef, self.params, self.codes, slots, self.cache, self._logprobs,
        jnp.asarray(pad(rows, self.batch)), jnp.asarray(pad(token_ids, 0)),
        jnp.asarray(pad(kinds, 0)))
    self.lengths[rows] += 1

  def step(self, token_ids_N, kinds_N, active_N=None) -> jax.Array:
    tokens = np.asarray(token_ids_N)
    kinds = np.asarray(kinds_N)
    active = (np.ones(self.batch, bool) if active_N is None else np.asarray(active_N, bool))
    if tokens.shape != (self.batch,) or kinds.shape != (self.batch,) or active.shape != (
        self.batch,):
      raise ValueError(f"step: token ids {tokens.shape}, kinds {kinds.shape} and active "
                       f"{active.shape} must all be [{self.batch}]")
    rows = np.flatnonzero(active)
    self.step_rows(rows, tokens[rows], kinds[rows])
    return jnp.copy(self._logprobs)  # a copy: the live array is donated to the next call

  def copy_rows(self, dest, src) -> None:
    """Row dest[m] becomes a copy of row src[m] (sources are read before any write)."""
    self._check_started()
    dest, src = np.asarray(dest, np.int64), np.asarray(src, np.int64)
    m = len(dest)
    if m == 0:
      return
    if src.shape != dest.shape or len(np.unique(dest)) != m or min(dest.min(), src.min()) < 0 or (
        max(dest.max(), src.max()) >= self.batch):
      raise ValueError(f"copy_rows: dest (distinct) and src must be parallel indices in "
                       f"[0, {self.batch})")
    width = _bucket(m, self.batch)
    slots = _bucket(int(self.lengths[src].max()), self.max_len, 16)
    pad = lambda a, fill: jnp.asarray(np.concatenate([a, np.full(width - m, fill)]).astype(
        np.int32))
    self.cache, self._logprobs = _copy_rows(slots, self.cache, self._logprobs,
                                            pad(dest, self.batch), pad(src, 0))
    lengths = self.lengths.copy()
    lengths[dest] = self.lengths[src]
    self.lengths = lengths

  def reorder(self, indices) -> None:
    index = np.asarray(indices, np.int64)
    if index.shape != (self.batch,) or index.min(initial=0) < 0 or index.max(
        initial=0) >= self.batch:
      raise ValueError(f"reorder: need {self.batch} row indices in [0, {self.batch}), got shape "
                       f"{index.shape}")
    self.copy_rows(np.arange(self.batch), index)

  def precompile(self) -> int:
    """Compiles every (row bucket, slot bucket) variant now (after `start`; changes nothing:
    all rows are padding); returns how many. Benchmarks call it so no timing includes a compile."""
    self._check_started()
    count = 0
    for width in _buckets(self.batch, ROW_BUCKET):
      rows = jnp.full((width,), self.batch, jnp.int32)
      zeros = jnp.zeros((width,), jnp.int32)
      for slots in _buckets(self.max_len, 16):
        self.cache, self._logprobs = _step_rows(self.graphdef, self.params, self.codes, slots,
                                                self.cache, self._logprobs, rows, zeros, zeros)
        self.cache, self._logprobs = _copy_rows(slots, self.cache, self._logprobs, rows, zeros)
        count += 2
    jax.block_until_ready(self._logprobs)
    return count

  def gather(self, ids_NC) -> np.ndarray:
    """logprobs[n, ids_NC[n, c]] as float64 numpy [N, C] (a small device→host transfer)."""
    self._check_started()
    ids = jnp.asarray(np.asarray(ids_NC, np.int32))
    return np.asarray(_gather(self._logprobs, ids), np.float64)


class RecomputeDecoder:
  """The IncrementalDecoder interface without a cache: every step re-runs the full forward pass
  over the whole prefix of each row it feeds — or, with `all_rows=True`, of every row at the
  longest row's length (a naive batch) — the baselines of `benchmarks/beam_bench.py`."""

  def __init__(self, model: Decoder, configuration: Configuration, *, max_len: int, batch: int,
               all_rows: bool = False):
    self.all_rows = all_rows
    self.model = model
    self.configuration = configuration
    self.max_len = int(max_len)
    self.batch = int(batch)
    self.graphdef, self.params = nnx.split(model)
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
    width = _bucket(len(rows), self.batch)
    padded = np.concatenate([rows, np.full(width - len(rows), rows[0])])
    lengths = self.lengths[padded]
    slots = _bucket(int(lengths.max()), self.max_len, 16)
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
    width = _bucket(m, self.batch)
    pad = lambda a, fill: jnp.asarray(np.concatenate([a, np.full(width - m, fill)]).astype(
        np.int32))
    self._logprobs = _put_rows(self._logprobs, pad(dest, self.batch),
                               self._logprobs[pad(src, 0)])

  def reorder(self, indices) -> None:
    self.copy_rows(np.arange(self.batch), np.asarray(indices))

  def precompile(self) -> int:
    """Compiles the forward pass for every (row bucket, slot bucket); returns how many."""
    count = 0
    for width in [self.batch] if self.all_rows else _buckets(self.batch, ROW_BUCKET):
      index = jnp.full((width,), self.batch, jnp.int32)
      self._logprobs = _put_rows(self._logprobs, index, self._logprobs[jnp.zeros_like(index)])
      for slots in _buckets(self.max_len, 16):
        tokens = np.zeros((width, slots), np.int32)
        meta = row_metadata(tokens, np.ones_like(tokens))
        _last_logprobs(self.graphdef, self.params, jnp.asarray(tokens),
                       jax.tree.map(jnp.asarray, meta), jnp.zeros((width,), jnp.int32))
        count += 1
    return count

  def gather(self, ids_NC) -> np.ndarray:
    return np.asarray(_gather(self._logprobs, jnp.asarray(np.asarray(ids_NC, np.int32))),
                      np.float64)


@jax.jit
def _put_rows(logprobs_NV, index_M, values_MV):
  return logprobs_NV.at[index_M].set(values_MV, mode="drop")


@functools.partial(jax.jit, static_argnums=(0,))
def _last_logprobs(graphdef, params, tokens_MS, meta: Any, last_M):
  """Full forward over [M, S]; log-softmax of the logits at each row's last real token."""
  model = nnx.merge(graphdef, params)
  h = model.hidden(model.embed(tokens_MS), meta)
  h_last = jnp.take_along_axis(h, last_M[:, None, None], axis=1)
  return _head(model, h_last[:, 0])
