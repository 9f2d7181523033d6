"""KV-cache decoding with incremental TG structural metadata (for beam search over hypotheses).

`IncrementalDecoder(model, configuration, max_len=S, batch=N)` holds N hypotheses of up to S
tokens. Keys and values live in a shared **token arena** (paged attention with one-token pages):
  k, v      L × [A, G, K]  per-layer keys (RoPE applied) and values of every token fed, in the
                           compute dtype (A arena slots); a token's slot is written once, never moves
  path      [N, S]         the arena slot of each of a row's tokens (a shared prefix is stored once)
  kind, pop [N, S]         the SPEC §3 metadata of every token of the row, *as known so far*
  length    [N]            tokens fed (the next token goes to row slot `length`, RoPE position too)
  logprobs  [N, V]         log-softmax of the next-token distribution (float32)
A step appends the fed rows' new keys/values to the arena (one contiguous write) and attends
each row over `k[path[row]]`; forking a hypothesis (`copy_rows`) copies its path and metadata
rows (a few int32s per token), never keys or values. Everything is updated in place (donated
buffers), and a step computes only the rows it feeds (bucketed row counts, `slm_jax.buckets`).
The arena starts with `arena_factor`·N·S slots (a search uses one slot per fed token; a step's
padding rows write past the used slots and are written over by the next step); when a step would
overflow it, the slots the live rows still use are moved to its front, a shared prefix kept
shared (hypotheses of a beam share most of their tokens, so this is far below N·S; only those
slots are moved, in place: a compaction costs O(kept), not O(arena)), and the arena grows only
if that is not room enough. `release(rows)` marks rows unused (their slots are
dropped at the next compaction); `start_rows(rows, prefix)` starts rows on a prefix of their own
while the others keep decoding (a batched beam refills the rows of a finished sentence).

Fixed chunks: a step computes its rows in chunks of `ROW_CHUNK` = 64 rows (the Pushdown cache's
rule, `pushdown.cache.in_chunks`), each chunk's rows of one cache width, the least slot bucket
above the row's own length (`chunk_layout`): one loop per width inside one compiled call. XLA
picks its kernels by shape (on CPU below 64 rows, on a GPU's TF32 matmuls at any row count), so
a row computed among rows of other lengths, or in a call of another row count, could round
differently; in a chunk of its own width it gets the same bits whatever else a step feeds, and a
search that batches many sentences into one step (`beam_batch`) or runs its rounds in one
compiled loop (`beam_loop`) equals the one-sentence search bit for bit
(tests/test_incremental.py, tests/test_beam_batch.py, tests/test_beam_loop.py check it).

The model runs its own forward pass (`Decoder.__call__`: embedding, blocks, final norm, head);
this module plugs into its per-layer attention hook only: each layer hands over the new tokens'
q/k/v, the hook writes k/v into the arena and calls the model's `attention_core` over the row's
cached keys with the mask of the arena metadata. A block feature added to the model is decoded
with no change here. The prefix of `start` goes through the same hook (keys recorded, attention by
`xla_attention` over the prefix's `row_metadata`).

Incremental metadata: a cached key that is not popped yet has pop = S ("infinity"); when a
closing (CNT/CNT1) arrives at slot i, every not-yet-popped key in [innermost open ONT, i) gets
pop = i (the ONT itself, its direct children, and child CNT1s — deeper items were popped by their
own closing); a CNT2 gets pop = i + 1. A mask only compares pop[j] with the query index (`> i`,
`== i`), so for the prefix [0, i] this gives exactly the mask the full-sequence `row_metadata`
gives. The new query's mask comes from `structure.attends` (the one predicate) with the
configuration's head-group codes, so every attention type (causal, tg, tg_nomask, tg_nomask_aug,
hybrids) is decoded the way it was trained.
All functions are jitted once per (graphdef, N, S) (a row copy also per row bucket) and vectorized
over hypotheses; the arena offset and the rows of a step are traced (no recompiles).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.buckets import bucket, buckets
from slm_jax.configurations import Configuration
from slm_jax.inference.scorer import check_attention, split_model
from slm_jax.kinds import CNT2_CODE as _CNT2, ONT_CODE as _ONT, is_closing
from slm_jax.model.attention import attention_core, xla_attention
from slm_jax.model.decoder import Decoder
from slm_jax.structure import RowMetadata, TokenMeta, attends, row_metadata

ROW_CHUNK = 64  # rows one chunk of a step computes (module docstring: a row's bits never depend
# on the other rows of a step; 64 rows' gathered keys and values also fit the CPU caches)
ROW_BUCKET = ROW_CHUNK  # fewest rows `RecomputeDecoder` computes
MOVE_BUCKET = 32  # fewest rows a copy moves
SLOT_BUCKET = 16  # fewest cache slots a step reads
ARENA_FACTOR = 1.25  # arena slots per row slot a decoder starts with (compaction makes room)
COMPACT_FRACTION = 4  # a compaction moves at least arena / COMPACT_FRACTION slots (one variant)


class DecoderCache(NamedTuple):
  """Device state of N hypotheses (see module docstring)."""

  k: tuple  # per layer [A, G, K] arena (slot-major: a gather by path gives [N, S, G, K])
  v: tuple  # per layer [A, G, K] arena
  path: jax.Array  # [N, S] int32 arena slot of each row token
  kind: jax.Array  # [N, S] int32
  pop: jax.Array  # [N, S] int32
  length: jax.Array  # [N] int32


def _group_mask(groups: tuple, q_index_MC, q_kind_MC, key_kind_MS, key_pop_MS):
  """attends() of queries [M, C] against keys [M, S] under each head-group code → [M, A, C, S]
  (one segment; key j's row index is j)."""
  S = key_kind_MS.shape[-1]
  query = TokenMeta(q_index_MC[:, None, :, None], 1, q_kind_MC[:, None, :, None], 0)
  key = TokenMeta(jnp.arange(S), 1, key_kind_MS[:, None, None, :], key_pop_MS[:, None, None, :])
  return attends(query, key, jnp.asarray(groups, jnp.int32)[:, None, None])


def _last_logprobs(logits_BTV) -> jax.Array:
  """log-softmax of the last position's logits, float32 [B, V]."""
  return jax.nn.log_softmax(logits_BTV[:, -1].astype(jnp.float32), axis=-1)


def _prefix_forward(model, tokens_PT, meta: RowMetadata):
  """The prefix [P, T] through the model: (keys, values per layer [P·T, G, K] in the compute
  dtype, next-token logprobs after the last position [P, V])."""
  P, T = tokens_PT.shape
  dtype = model.config.compute_dtype
  ks, vs = [], []

  def record(layer, q_PTHK, k_PTGK, v_PTGK, meta_, attention):
    G, K = k_PTGK.shape[2:]
    ks.append(k_PTGK.reshape(P * T, G, K).astype(dtype))
    vs.append(v_PTGK.reshape(P * T, G, K).astype(dtype))
    return xla_attention(q_PTHK, k_PTGK.astype(dtype), v_PTGK.astype(dtype), meta_, attention)

  hidden_PTD = model.hidden(model.embed(tokens_PT), meta, record)
  lp = _last_logprobs(model.logits(hidden_PTD[:, -1:]))  # the head on the last position only
  return ks, vs, lp


def _prefix_pop(meta: RowMetadata, S: int):
  """The cache's pop of the prefix tokens [P, T] (CNT2: index + 1; never popped: S)."""
  T = meta.kind.shape[1]
  index = jnp.arange(T)
  return jnp.where(meta.kind == _CNT2, index + 1, jnp.where(meta.pop >= T, S, meta.pop))


@functools.partial(jax.jit, static_argnums=(0, 2, 3, 4))
def _prefill(graphdef, params, n: int, max_len: int, arena: int, tokens_PT, meta: RowMetadata):
  """Feeds the prefix [P, T] (P = 1 or n) → (n-row cache, logprobs [n, V]); the prefix of row p
  takes arena slots [p·T, (p+1)·T) (P = 1: one copy shared by every row)."""
  model = nnx.merge(graphdef.graphdef, params)
  P, T = tokens_PT.shape
  S = max_len
  ks, vs, lp = _prefix_forward(model, tokens_PT, meta)
  put = lambda a: jnp.zeros((arena,) + a.shape[1:], a.dtype).at[:P * T].set(a)
  grow = lambda a: jnp.broadcast_to(a, (n,) + a.shape[1:])
  prefix_slots = jnp.arange(P * T, dtype=jnp.int32).reshape(P, T)
  path = jnp.zeros((P, S), jnp.int32).at[:, :T].set(prefix_slots)
  kind_PS = jnp.zeros((P, S), jnp.int32).at[:, :T].set(meta.kind)
  pop_PS = jnp.full((P, S), S, jnp.int32).at[:, :T].set(_prefix_pop(meta, S))
  return (DecoderCache(tuple(map(put, ks)), tuple(map(put, vs)), grow(path), grow(kind_PS),
                       grow(pop_PS), jnp.full((n,), T, jnp.int32)), grow(lp))


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(2, 3))
def _prefill_rows(graphdef, params, cache: DecoderCache, logprobs_NV, tokens_1T,
                  meta: RowMetadata, rows_R, base):
  """Rows rows_R (index N = padding, dropped) start over on the prefix [1, T]: its keys and
  values take arena slots [base, base + T), shared by those rows; the other rows are untouched."""
  model = nnx.merge(graphdef.graphdef, params)
  T = tokens_1T.shape[1]
  S = cache.path.shape[1]
  ks, vs, lp = _prefix_forward(model, tokens_1T, meta)
  write = lambda arena, new: jax.lax.dynamic_update_slice_in_dim(arena, new, base, 0)
  rows = lambda a, row: a.at[rows_R].set(row, mode="drop")
  path = jnp.zeros((S,), jnp.int32).at[:T].set(base + jnp.arange(T, dtype=jnp.int32))
  kind = jnp.zeros((S,), jnp.int32).at[:T].set(meta.kind[0])
  pop = jnp.full((S,), S, jnp.int32).at[:T].set(_prefix_pop(meta, S)[0])
  cache = DecoderCache(tuple(map(write, cache.k, ks)), tuple(map(write, cache.v, vs)),
                       rows(cache.path, path), rows(cache.kind, kind), rows(cache.pop, pop),
                       rows(cache.length, T))
  return cache, rows(logprobs_NV, lp[0])


def _empty_cache(config, n: int, max_len: int, arena: int) -> tuple[DecoderCache, jax.Array]:
  """An n-row cache holding nothing yet (rows are started by `_prefill_rows`)."""
  kv = lambda: tuple(jnp.zeros((arena, config.n_kv_heads, config.head_dim), config.compute_dtype)
                     for _ in range(config.n_layers))
  meta = lambda: jnp.zeros((n, max_len), jnp.int32)
  return (DecoderCache(kv(), kv(), meta(), meta(), jnp.full((n, max_len), max_len, jnp.int32),
                       jnp.zeros((n,), jnp.int32)),
          jnp.zeros((n, config.vocab_size), jnp.float32))


def _gather_slots(arena_AGK, path_MS):
  """The arena rows of each row's slots as [M, S, G, K], gathered group-major (one K-vector per
  index, in the [M, G, S, K] order the attention's batched dot reads) so the gather is not
  fused into a transposing copy (XLA:CPU runs that one element at a time)."""
  A, G, K = arena_AGK.shape
  index_MGS = path_MS[:, None, :] * G + jnp.arange(G, dtype=path_MS.dtype)[None, :, None]
  rows_MGSK = jnp.take(arena_AGK.reshape(A * G, K), index_MGS, axis=0, mode="clip")
  return rows_MGSK.transpose(0, 2, 1, 3)


def _update_structure(kind_MS, pop_MS, pos_M, kinds_M, active_M, inf: int):
  """Incremental metadata after appending kinds_M at slot pos_M (rows with active_M); the
  slots are a prefix [0, S') of the cache, and `inf` (= max_len) marks keys not popped yet."""
  S = kind_MS.shape[-1]
  j = jnp.arange(S)[None, :]
  i = pos_M[:, None]
  open_ont = (kind_MS == _ONT) & (pop_MS == inf) & (j < i)
  innermost = jnp.max(jnp.where(open_ont, j, -1), axis=-1)[:, None]  # -1: nothing open
  closes = (active_M & is_closing(kinds_M))[:, None] & (innermost >= 0)
  pop_MS = jnp.where(closes & (j >= innermost) & (j < i) & (pop_MS == inf), i, pop_MS)
  new = (j == i) & active_M[:, None]
  kind_MS = jnp.where(new, kinds_M[:, None], kind_MS)
  pop_MS = jnp.where(new, jnp.where(kinds_M[:, None] == _CNT2, i + 1, inf), pop_MS)
  return kind_MS, pop_MS


def _step_chunk(model, groups: tuple, width: int, cache: DecoderCache, logprobs_NV, fed_3M,
                base):
  """Appends token fed_3M[1, m] (kind fed_3M[2, m]) to row fed_3M[0, m] (index N = padding,
  ignored); the M new keys/values take arena slots [base, base + M) (the live rows come first).

  Only row slots [0, width) are read (width > every fed row's length).
  """
  rows_M, tokens_M, kinds_M = fed_3M[0], fed_3M[1], fed_3M[2]
  N, S = cache.kind.shape
  M = rows_M.shape[0]
  active_M = rows_M < N
  rows = jnp.minimum(rows_M, N - 1)  # padding rows read row N-1; their writes are dropped
  pos_M = cache.length[rows]
  kind_MS, pop_MS = _update_structure(cache.kind[rows, :width], cache.pop[rows, :width],
                                      pos_M, kinds_M, active_M, S)
  slot_M = base + jnp.arange(M, dtype=jnp.int32)
  path_MS = jnp.where(jnp.arange(width)[None, :] == pos_M[:, None], slot_M[:, None],
                      cache.path[rows, :width])
  mask_MA1S = _group_mask(groups, pos_M[:, None], kinds_M[:, None], kind_MS, pop_MS)
  ks, vs = list(cache.k), list(cache.v)

  def attend(layer, q_M1HK, k_M1GK, v_M1GK, meta, attention):
    write = lambda arena, new: jax.lax.dynamic_update_slice_in_dim(
        arena, new[:, 0].astype(arena.dtype), base, 0)
    ks[layer], vs[layer] = write(ks[layer], k_M1GK), write(vs[layer], v_M1GK)
    return attention_core(q_M1HK, _gather_slots(ks[layer], path_MS),
                          _gather_slots(vs[layer], path_MS), mask_MA1S)

  # The cache supplies keys, values and mask; the model needs the new tokens' positions (RoPE).
  new_pop = jnp.take_along_axis(pop_MS, pos_M[:, None], axis=1)
  meta = RowMetadata(kinds_M[:, None], jnp.ones((M, 1), jnp.int32), pos_M[:, None],
                     jnp.zeros((M, 1), jnp.int32), new_pop)
  lp = _last_logprobs(model(tokens_M[:, None], meta, attend))
  drop = lambda a, new: a.at[rows_M].set(new, mode="drop")
  meta_rows = lambda a, new: a.at[rows_M, :width].set(new, mode="drop")
  cache = DecoderCache(tuple(ks), tuple(vs), meta_rows(cache.path, path_MS),
                       meta_rows(cache.kind, kind_MS), meta_rows(cache.pop, pop_MS),
                       drop(cache.length, pos_M + 1))
  return cache, drop(logprobs_NV, lp)


def chunk_layout(rows_R, lengths_R, n: int, widths: tuple, chunk: int = ROW_CHUNK):
  """Where each fed row is computed: rows_R (index n = padding) grouped by their own slot width
  (the least of `widths` above the row's length), in their order within a group, each group
  padded to whole chunks of `chunk` rows → (fed index of each layout position [L] (R: padding),
  first chunk of each width [W], chunks of each width [W]); L = whole chunks for R rows in every
  group. A row's chunk holds `chunk` rows of its own width whatever else is fed (module
  docstring: the numbers of a row never depend on the other rows of a step)."""
  R, W = rows_R.shape[0], len(widths)
  live_R = rows_R < n
  group_R = jnp.where(live_R, jnp.searchsorted(jnp.asarray(widths, jnp.int32),
                                               lengths_R + 1), W)
  member_RW = group_R[:, None] == jnp.arange(W)[None, :]
  count_W = jnp.sum(member_RW, axis=0, dtype=jnp.int32)
  chunks_W = (count_W + chunk - 1) // chunk
  first_W = jnp.cumsum(chunks_W) - chunks_W
  rank_R = jnp.take_along_axis(jnp.cumsum(member_RW, axis=0, dtype=jnp.int32),
                               jnp.minimum(group_R, W - 1)[:, None], axis=1)[:, 0] - 1
  L = (-(-R // chunk) + W) * chunk
  position_R = jnp.where(live_R, first_W[jnp.minimum(group_R, W - 1)] * chunk + rank_R, L)
  source_L = jnp.full((L,), R, jnp.int32).at[position_R].set(
      jnp.arange(R, dtype=jnp.int32), mode="drop")
  return source_L, first_W, chunks_W


def step_fed(model, groups: tuple, widths: tuple, cache: DecoderCache, logprobs_NV, fed_3R,
             base, chunk: int = ROW_CHUNK):
  """Feeds fed_3R (rows, token ids, kinds; row index N = padding) as `_step_chunk` calls of
  `chunk` rows each (`chunk_layout`); the live rows take arena slots [base, base + live) in
  layout order. Traceable: `step_rows`' jitted call and the compiled word loop
  (`beam_loop`) share it. → (cache, logprobs_NV)."""
  N = cache.length.shape[0]
  rows_R = fed_3R[0]
  lengths_R = cache.length[jnp.minimum(rows_R, N - 1)]
  source_L, first_W, chunks_W = chunk_layout(rows_R, lengths_R, N, widths, chunk)
  padding = jnp.asarray([[N], [0], [0]], fed_3R.dtype)
  layout_3L = jnp.concatenate([fed_3R, padding], axis=1)[:, source_L]
  live_C = jnp.sum((layout_3L[0] < N).reshape(-1, chunk), axis=1, dtype=jnp.int32)
  base_C = base + jnp.cumsum(live_C, dtype=jnp.int32) - live_C
  for w, width in enumerate(widths):

    def body(i, carry, width=width):
      fed_3M = jax.lax.dynamic_slice_in_dim(layout_3L, i * chunk, chunk, axis=1)
      return _step_chunk(model, groups, width, *carry, fed_3M, base_C[i])

    cache, logprobs_NV = jax.lax.fori_loop(first_W[w], first_W[w] + chunks_W[w], body,
                                           (cache, logprobs_NV))
  return cache, logprobs_NV


@functools.partial(jax.jit, static_argnums=(0, 2, 3, 4), donate_argnums=(5, 6))
def _step_rows(graphdef, params, groups: tuple, widths: tuple, chunk: int, cache: DecoderCache,
               logprobs_NV, fed_3R, base):
  """`step_fed` of the model (one compiled variant per decoder: every row count, every width)."""
  model = nnx.merge(graphdef.graphdef, params)
  return step_fed(model, groups, widths, cache, logprobs_NV, fed_3R, base, chunk)


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(1, 2))
def _copy_rows(width: int, cache: DecoderCache, logprobs_NV, moves_2M):
  """Row moves_2M[0, m] ← old row moves_2M[1, m] (all sources read first; destination N =
  padding, dropped): paths and metadata only, the arena is shared.

  Only slots [0, width) move (width >= every source's length).
  """
  dest_M, src_M = moves_2M[0], moves_2M[1]
  copy = lambda a: a.at[dest_M].set(a[src_M], mode="drop")
  meta = lambda a: a.at[dest_M, :width].set(a[src_M, :width], mode="drop")
  return cache._replace(path=meta(cache.path), kind=meta(cache.kind), pop=meta(cache.pop),
                        length=copy(cache.length)), copy(logprobs_NV)


def _held_slots(width: int, arena: int, path_NW, lengths_N):
  """[arena] bool: the slots some row's first lengths_N tokens use (a released row: none)."""
  held_NW = jnp.arange(width)[None, :] < lengths_N[:, None]
  return jnp.zeros((arena,), bool).at[jnp.where(held_NW, path_NW, arena)].set(True, mode="drop")


@functools.partial(jax.jit, static_argnums=(0,))
def _count_held(width: int, cache: DecoderCache, lengths_N):
  """How many arena slots `_compact` keeps."""
  return jnp.sum(_held_slots(width, cache.k[0].shape[0], cache.path[:, :width], lengths_N))


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2,))
def _compact(width: int, keep: int, cache: DecoderCache, lengths_N):
  """Moves the arena slots of every row's first lengths_N tokens (all within [0, width)) to the
  front, in slot order, each slot once (a shared prefix stays shared); a row of length 0 (a
  released row) keeps nothing. `keep` >= the slots kept (`_count_held`): only that many are
  gathered and written, in place (the i-th kept slot is at index >= i), so a compaction costs
  O(kept), not O(arena). Returns (cache, slots kept)."""
  A = cache.k[0].shape[0]
  used_NW = cache.path[:, :width]
  held_NW = jnp.arange(width)[None, :] < lengths_N[:, None]
  mark = _held_slots(width, A, used_NW, lengths_N)
  order = jnp.nonzero(mark, size=keep, fill_value=0)[0]  # kept slots first, ascending
  new_slot = (jnp.cumsum(mark) - 1).astype(jnp.int32)
  move = lambda a: jax.lax.dynamic_update_slice_in_dim(a, a[order], 0, 0)
  path = cache.path.at[:, :width].set(jnp.where(held_NW, new_slot[used_NW], 0))
  return (cache._replace(k=tuple(map(move, cache.k)), v=tuple(map(move, cache.v)), path=path),
          jnp.sum(mark))


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(1,))
def _grow(arena: int, cache: DecoderCache):
  """The cache with `arena` arena slots (the used ones keep their place)."""
  pad = lambda a: jnp.zeros((arena,) + a.shape[1:], a.dtype).at[:a.shape[0]].set(a)
  return cache._replace(k=tuple(map(pad, cache.k)), v=tuple(map(pad, cache.v)))


@jax.jit
def _gather(logprobs_NV, ids_NC):
  return jnp.take_along_axis(logprobs_NV, ids_NC, axis=1)


def gather_logprobs(logprobs_NV, ids_NC) -> np.ndarray:
  """logprobs_NV[n, ids_NC[n, c]] as float64 numpy [N, C] (a small device→host transfer)."""
  return np.asarray(_gather(logprobs_NV, jnp.asarray(np.asarray(ids_NC, np.int32))), np.float64)


def _distinct_indices(index: np.ndarray, n: int) -> bool:
  """All of `index` in [0, n) and no repeats (O(n), no sort)."""
  if index.min() < 0 or index.max() >= n:
    return False
  return int(np.bincount(index, minlength=n).max()) <= 1


def step_width(batch: int) -> int:
  """The most arena slots one step of a `batch`-row decoder writes: a slot per row, and the
  padding rows of its last chunk (written over by the next step)."""
  return batch + ROW_CHUNK


def arena_slots(batch: int, max_len: int, arena_factor: float = ARENA_FACTOR) -> int:
  """Slots of the arena an `IncrementalDecoder(batch=, max_len=)` starts with: `arena_factor`
  slots per row slot, and room for a prefix and two steps at least."""
  return int(max(arena_factor * batch * max_len, max_len + 2 * step_width(batch)))


def arena_bytes(config, batch: int, max_len: int, arena_factor: float = ARENA_FACTOR) -> int:
  """Bytes of that arena's keys and values (every layer, the model config's compute dtype)."""
  slot = 2 * config.n_layers * config.n_kv_heads * config.head_dim
  return arena_slots(batch, max_len, arena_factor) * slot * jnp.dtype(config.compute_dtype).itemsize


class IncrementalDecoder:
  """KV-cache decoder of `batch` hypotheses of up to `max_len` tokens (see module docstring).

  `start(prefix_ids, prefix_kinds)` → logprobs [N, V] after the prefix (1-D: the same prefix for
  every row; 2-D [N, T]: one per row); `step(token_ids_N, kinds_N, active_N=None)` appends one
  token per active row and returns the new next-token logprobs (inactive rows keep theirs);
  `reorder(indices_N)` makes row n a copy of old row indices_N[n] (beam reselection).
  Sparse forms for beam search: `step_rows(rows, ids, kinds)` (only those rows are computed) and
  `copy_rows(dest, src)` (only those rows move; no keys or values are copied). The cache and the
  `logprobs` array are updated in place (donated buffers: `.logprobs` read earlier is invalid
  after the next call; `start` and `step` return copies). `gather(ids_NC)` reads a few
  log-probabilities per row to the host. `compactions` counts arena compactions.
  Batched searches start rows on prefixes of their own with `start_rows(rows, ids, kinds)` and
  hand back the rows they no longer need with `release(rows)`.
  """

  def __init__(self, model: Decoder, configuration: Configuration, *, max_len: int, batch: int,
               arena_factor: float = ARENA_FACTOR, slot_bucket: int = SLOT_BUCKET,
               chunk_rows: int = ROW_CHUNK):
    check_attention(model, configuration)
    if arena_factor <= 0 or slot_bucket < 1 or chunk_rows < 1:
      raise ValueError(f"need arena_factor > 0, slot_bucket >= 1 and chunk_rows >= 1, got "
                       f"{arena_factor}, {slot_bucket}, {chunk_rows}")
    self.model = model
    self.configuration = configuration
    self.max_len = int(max_len)
    self.batch = int(batch)
    # Fewest cache slots a step reads: larger = fewer compiled variants (slot_bucket >= max_len:
    # one per function, for short runs such as live metrics), more attention work per step.
    self.slot_bucket = int(slot_bucket)
    self.widths = tuple(buckets(self.max_len, self.slot_bucket))  # the cache widths a step reads
    self.chunk_rows = int(chunk_rows)  # rows a step computes at once (module docstring)
    # The most arena slots one step writes (`step_width`), and the arena: room for a prefix and
    # a few steps at least; a compaction (or, rarely, growth) makes more room when needed.
    self.step_width = self.batch + self.chunk_rows
    self.arena = max(arena_slots(self.batch, self.max_len, arena_factor),
                     self.max_len + 2 * self.step_width)
    self.graphdef, self.params = split_model(model)
    self.groups = tuple(int(g) for g in configuration.attention.groups)  # head-group codes
    self.cache: DecoderCache | None = None
    self._logprobs: jax.Array | None = None
    self.lengths = np.zeros(self.batch, np.int64)  # host mirror of cache.length (0: unused)
    self.free = 0  # first unused arena slot
    self.compactions = 0

  @property
  def logprobs(self) -> jax.Array:
    """Next-token log-probabilities [N, V] (device, float32)."""
    self._check_started()
    return self._logprobs

  def _check_started(self) -> None:
    if self.cache is None:
      raise RuntimeError("IncrementalDecoder: call start(prefix) first")

  def _prefix(self, prefix_ids, prefix_kinds, rows: int, where: str):
    ids = np.asarray(prefix_ids, np.int32)
    kinds = np.asarray(prefix_kinds, np.int32)
    if ids.ndim == 1:
      ids, kinds = ids[None], kinds[None]
    if ids.shape != kinds.shape or ids.shape[0] not in (1, rows) or ids.shape[1] == 0:
      raise ValueError(f"{where}: prefix ids {ids.shape} and kinds {kinds.shape} must be [T] or "
                       f"[{rows}, T] with T >= 1")
    if ids.shape[1] > self.max_len:
      raise ValueError(f"{where}: prefix of {ids.shape[1]} tokens exceeds max_len={self.max_len}")
    return ids, jax.tree.map(jnp.asarray, row_metadata(kinds, np.ones_like(kinds)))

  def start(self, prefix_ids, prefix_kinds) -> jax.Array:
    ids, meta = self._prefix(prefix_ids, prefix_kinds, self.batch, "start")
    self.cache = self._logprobs = None  # free the old cache before allocating the new one
    self.arena = max(self.arena, ids.size + 2 * self.step_width)
    self.cache, self._logprobs = _prefill(self.graphdef, self.params, self.batch, self.max_len,
                                          self.arena, jnp.asarray(ids), meta)
    self.lengths = np.full(self.batch, ids.shape[1], np.int64)
    self.free = ids.size
    return jnp.copy(self._logprobs)

  def start_rows(self, rows, prefix_ids, prefix_kinds) -> None:
    """Rows `rows` start over on the prefix (1-D; its keys are stored once, shared by those
    rows); every other row keeps its tokens. The first call of a decoder that was never
    `start`ed allocates an empty cache. The prefix goes through the model exactly as `start`'s
    one-prefix form sends it (the same bits)."""
    rows = np.asarray(rows, np.int64)
    ids, meta = self._prefix(prefix_ids, prefix_kinds, 1, "start_rows")
    if not len(rows) or not _distinct_indices(rows, self.batch):
      raise ValueError(f"start_rows: rows must be distinct indices in [0, {self.batch})")
    if self.cache is None:
      self.cache, self._logprobs = _empty_cache(self.model.config, self.batch, self.max_len,
                                                self.arena)
      self.lengths = np.zeros(self.batch, np.int64)
      self.free = 0
    T = ids.shape[1]
    self.lengths[rows] = 0  # these rows' old tokens need no room
    self._make_room(T)
    padded = np.full(bucket(len(rows), 1), self.batch, np.int32)
    padded[:len(rows)] = rows
    self.cache, self._logprobs = _prefill_rows(self.graphdef, self.params, self.cache,
                                               self._logprobs, jnp.asarray(ids), meta,
                                               jnp.asarray(padded), np.int32(self.free))
    self.free += T
    self.lengths[rows] = T

  def release(self, rows) -> None:
    """Rows `rows` are no longer needed: the next compaction drops the slots only they use. A
    released row holds nothing until `start_rows` or `copy_rows` fills it again."""
    self.lengths[np.asarray(rows, np.int64)] = 0

  def step_rows(self, rows, token_ids, kinds) -> None:
    """Appends token_ids[m] (kind kinds[m]) to row rows[m]; rows distinct. One device call,
    computed in chunks of `ROW_CHUNK` rows of one cache width each (module docstring)."""
    self._check_started()
    rows = np.asarray(rows, np.int64)
    token_ids, kinds = np.asarray(token_ids), np.asarray(kinds)
    m = len(rows)
    if m == 0:
      return
    if not _distinct_indices(rows, self.batch):
      raise ValueError(f"step_rows: rows must be distinct indices in [0, {self.batch})")
    lengths = self.lengths[rows]
    full = lengths >= self.max_len
    if full.any():
      raise ValueError(f"step: row {int(rows[full][0])} already holds max_len={self.max_len} "
                       "tokens")
    self._make_room(m + self.chunk_rows)
    fed = np.zeros((3, self.batch), np.int32)
    fed[0, m:] = self.batch  # padding rows: no chunk computes them
    fed[0, :m], fed[1, :m], fed[2, :m] = rows, token_ids, kinds
    self.cache, self._logprobs = _step_rows(self.graphdef, self.params, self.groups, self.widths,
                                            self.chunk_rows, self.cache, self._logprobs, fed,
                                            np.int32(self.free))
    self.free += m  # the last chunk's padding slots [free + m, …) are written over next
    self.lengths[rows] += 1

  def _make_room(self, width: int) -> None:
    """Compacts the arena (and grows it if that is not enough) so `width` slots are free."""
    if self.free + width <= self.arena:
      return
    self._compact_arena()
    if self.free + width > self.arena:
      self.arena = max(int(1.5 * self.arena), self.free + 2 * width)
      self.cache = _grow(self.arena, self.cache)

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
    if src.shape != dest.shape or not _distinct_indices(dest, self.batch) or src.min() < 0 or (
        src.max() >= self.batch):
      raise ValueError(f"copy_rows: dest (distinct) and src must be parallel indices in "
                       f"[0, {self.batch})")
    width = bucket(m, MOVE_BUCKET, self.batch)
    moves = np.zeros((2, width), np.int32)
    moves[0, m:] = self.batch
    moves[0, :m], moves[1, :m] = dest, src
    # Every slot of a row moves (a few int32s each): one compiled variant per row bucket.
    self.cache, self._logprobs = _copy_rows(self.max_len, self.cache, self._logprobs, moves)
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

  def _compact_arena(self) -> None:
    """Moves the slots the rows hold to the arena's front (`_compact`): all slots of every row
    scanned, at least a quarter of the arena moved, so a decoder compiles one variant (rarely
    a few: more kept slots) however full its rows are."""
    lengths = jnp.asarray(self.lengths, jnp.int32)
    held = int(_count_held(self.max_len, self.cache, lengths))
    keep = bucket(held, max(self.arena // COMPACT_FRACTION, 1), self.arena)
    self.cache, kept = _compact(self.max_len, keep, self.cache, lengths)
    self.free = int(kept)
    self.compactions += 1

  def precompile(self) -> int:
    """Compiles the step (one variant: every row count and width), the row copies and the
    compaction now (after `start`; changes nothing a row decodes: the step rows are padding, and
    a compaction keeps every row's keys); returns how many variants.
    Benchmarks call it so no timing includes a compile."""
    self._check_started()
    self._compact_arena()
    self._make_room(self.step_width)
    fed = np.zeros((3, self.batch), np.int32)
    fed[0] = self.batch  # padding only: no chunk runs
    self.cache, self._logprobs = _step_rows(self.graphdef, self.params, self.groups, self.widths,
                                            self.chunk_rows, self.cache, self._logprobs, fed,
                                            np.int32(self.free))
    count = 2
    for width in buckets(self.batch, MOVE_BUCKET):
      moves = np.full((2, width), self.batch, np.int32)
      self.cache, self._logprobs = _copy_rows(self.max_len, self.cache, self._logprobs, moves)
      count += 1
    jax.block_until_ready(self._logprobs)
    return count

  def gather(self, ids_NC) -> np.ndarray:
    """logprobs[n, ids_NC[n, c]] as float64 numpy [N, C] (a small device→host transfer)."""
    self._check_started()
    return gather_logprobs(self._logprobs, ids_NC)
