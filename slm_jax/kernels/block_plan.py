"""Block plan for fused structural attention: which (query block, key block) tiles to visit.

A tile is `empty` when `structure.attends` is False for every (query, key) pair in it, `full` when
it is True for every pair (the kernel may skip evaluating the predicate), else `partial`. The plan
is built on device from O(T) per-block summaries of the row metadata (min/max of segment, pop,
query index, whether a block holds padding / CNT1 / CNT2 tokens) and O(I·J) bound checks per
distinct attention code — never from a dense T×T mask. Every rule below is a sufficient condition
(conservative): a tile is called empty only if a necessary condition of the predicate fails for
every pair, full only if the predicate provably holds for every pair.

The predicate (structure.attends) for query i, key j under code c:
  visible  = seg[i] == seg[j]  &  j <= i  &  (seg[i] != 0 | j == i)
  compose  = kind[i] == CNT1  &  c != CAUSAL                                (query side only)
  composed = (pop[j] == i & kind[j] != CNT2) | j == i
  on_stack = c in {CAUSAL, TG_NOMASK_AUG} | (c == TG & pop[j] > i)
             | (c == TG_NOMASK & (kind[j] != CNT2 | j == i))
  attends  = visible & (compose ? composed : on_stack)
Every token attends itself, so a tile that meets the diagonal is never empty; the `j == i` terms
only matter there. Off the diagonal, padding (segment 0) attends nothing and is never attended.

Heads with the same code share a plan: the rules run once per distinct code of `codes_H` and the
result is gathered to heads. Index lists are padded by repeating the last valid block index (so a
pipelined kernel re-uses the block already in VMEM instead of fetching a new one); `count` says how
many entries are real. Every query block has at least one non-empty key block (its diagonal).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from slm_jax.kinds import Kind
from slm_jax.structure import Attention, RowMetadata

EMPTY, PARTIAL, FULL = 0, 1, 2
_BIG = np.int32(2**30)  # sentinel above any index / segment / pop (pop ≤ T ≤ 32767)


class BlockPlan(NamedTuple):
  """Tile classification and the visit lists of a [B, T] row batch (H heads; I query blocks,
  J key blocks — block counts, not the head dim K of the model's legend).

  kind_BHIJ     int8, EMPTY / PARTIAL / FULL for query block q and key block k
  count_BHI     int32, number of non-empty key blocks of query block q (≥ 1)
  kblocks_BHIJ  int32, their key-block indices in increasing order, padded with the last one
  qcount_BHJ    int32, number of non-empty query blocks of key block k (≥ 1)
  qblocks_BHJI  int32, their query-block indices in increasing order, padded with the last one
  """

  kind_BHIJ: Any
  count_BHI: Any
  kblocks_BHIJ: Any
  qcount_BHJ: Any
  qblocks_BHJI: Any


class BlockSummary(NamedTuple):
  """Per-block bounds of the metadata, each field [B, N] (N blocks of `size` tokens)."""

  start: Any  # first row index of the block
  end: Any  # last row index of the block
  seg_min: Any  # min / max segment over non-padding tokens (BIG / -1 if all padding)
  seg_max: Any
  has_pad: Any  # some token has segment 0
  stack_min: Any  # min index over non-padding non-CNT1 tokens (queries that are never COMPOSE)
  has_stack: Any  # some non-padding non-CNT1 token
  cnt1_min: Any  # min / max index over CNT1 tokens (COMPOSE queries under TG-family codes)
  cnt1_max: Any
  has_cnt1: Any
  pop_max: Any  # max pop over non-padding tokens (keys): STACK needs pop[j] > i
  pop_min: Any  # min pop over all tokens: every key stays visible if pop_min > last query
  cpop_min: Any  # min / max pop over non-padding, non-CNT2 keys popped inside the row
  cpop_max: Any  # (pop < T): COMPOSE needs pop[j] == i
  has_cnt2: Any  # some non-padding CNT2 (TG_NOMASK hides CNT2 keys)
  has_noncnt2: Any  # some non-padding non-CNT2 token


def summarize_blocks(meta: RowMetadata, size: int, xp=jnp) -> BlockSummary:
  """O(T) per-block bounds of `meta` ([B, T] fields, T a multiple of `size`)."""
  kind = xp.asarray(meta.kind).astype(xp.int32)
  segment = xp.asarray(meta.segment).astype(xp.int32)
  pop = xp.asarray(meta.pop).astype(xp.int32)
  B, T = kind.shape
  if T % size:
    raise ValueError(f"summarize_blocks: row length {T} is not a multiple of the block size {size}")
  N = T // size
  blocks = lambda x: x.reshape(B, N, size)
  index = xp.broadcast_to(xp.arange(T, dtype=xp.int32), (B, T))
  real = segment != 0
  cnt1 = kind == int(Kind.CNT1)
  cnt2 = real & (kind == int(Kind.CNT2))
  stack = real & ~cnt1
  popped = real & ~cnt2 & (pop < T)

  def bmin(x, where):
    return xp.min(blocks(xp.where(where, x, _BIG)), axis=-1)

  def bmax(x, where):
    return xp.max(blocks(xp.where(where, x, -1)), axis=-1)

  def bany(where):
    return xp.any(blocks(where), axis=-1)

  start = xp.broadcast_to(xp.arange(N, dtype=xp.int32) * size, (B, N))
  return BlockSummary(
      start=start, end=start + (size - 1),
      seg_min=bmin(segment, real), seg_max=bmax(segment, real), has_pad=bany(~real),
      stack_min=bmin(index, stack), has_stack=bany(stack),
      cnt1_min=bmin(index, cnt1), cnt1_max=bmax(index, cnt1), has_cnt1=bany(cnt1),
      pop_max=bmax(pop, real), pop_min=bmin(pop, xp.ones_like(real)),
      cpop_min=bmin(pop, popped), cpop_max=bmax(pop, popped),
      has_cnt2=bany(cnt2), has_noncnt2=bany(real & ~cnt2))


# --- one rule per predicate term; q fields are [B, I, 1], k fields [B, 1, J] --------------------


def _meets_diagonal(q: BlockSummary, k: BlockSummary):
  """Some pair has j == i: such a tile is never empty (every token attends itself)."""
  return (k.start <= q.end) & (q.start <= k.end)


def _causal_empty(q: BlockSummary, k: BlockSummary):
  """Every key is after every query: j <= i fails everywhere."""
  return k.start > q.end


def _segments_empty(q: BlockSummary, k: BlockSummary):
  """Off the diagonal only same-segment non-padding pairs can attend: disjoint [min, max]
  segment ranges of the non-padding tokens (or an all-padding side) leave no such pair."""
  return (q.seg_max < k.seg_min) | (k.seg_max < q.seg_min)


def _stack_empty(q: BlockSummary, k: BlockSummary, code: int):
  """No non-compose (STACK) query sees any key off the diagonal.

  CAUSAL / TG_NOMASK_AUG: STACK sees every visible key (empty only without STACK queries).
  TG: key j is on the stack of query i iff pop[j] > i; if max pop over the key block is ≤ the
    smallest STACK query index, nothing is. (Padding keys are excluded: they are never visible.)
  TG_NOMASK: CNT2 keys are hidden; a key block of CNT2s only is invisible to STACK queries.
  Under CAUSAL every non-padding query is a STACK query (CNT1 is COMPOSE only in TG codes).
  """
  if code == Attention.CAUSAL:
    return q.seg_max < 0  # no non-padding query at all
  none = ~q.has_stack
  if code == Attention.TG:
    return none | (k.pop_max <= q.stack_min)
  if code == Attention.TG_NOMASK:
    return none | ~k.has_noncnt2
  return none


def _compose_empty(q: BlockSummary, k: BlockSummary, code: int):
  """No COMPOSE query (CNT1, TG-family codes) sees any key off the diagonal.

  COMPOSE query i sees non-CNT2 keys with pop[j] == i: empty if the query block has no CNT1, or
  the CNT1 index range [cnt1_min, cnt1_max] misses the key block's range of such pops.
  """
  if code == Attention.CAUSAL:
    return q.has_cnt1 | ~q.has_cnt1  # all True: no COMPOSE queries under CAUSAL
  return ~q.has_cnt1 | (k.cpop_max < q.cnt1_min) | (q.cnt1_max < k.cpop_min)


def _full(q: BlockSummary, k: BlockSummary, code: int):
  """The predicate holds for every pair: all keys at or before all queries, one non-padding
  segment on both sides, no COMPOSE query (unless CAUSAL), and the code's STACK rule everywhere:
  TG needs every pop > the last query (min pop over the key block > q.end), TG_NOMASK no CNT2 key.
  """
  same = ((q.seg_min == q.seg_max) & (k.seg_min == k.seg_max) & (q.seg_min == k.seg_min)
          & ~q.has_pad & ~k.has_pad)
  full = (k.end <= q.start) & same
  if code == Attention.CAUSAL:
    return full
  full = full & ~q.has_cnt1
  if code == Attention.TG:
    return full & (k.pop_min > q.end)
  if code == Attention.TG_NOMASK:
    return full & ~k.has_cnt2
  return full


def classify(q: BlockSummary, k: BlockSummary, code: int, xp=jnp):
  """int8 [B, I, J] tile kinds for one attention code (a Python int)."""
  qx = BlockSummary(*(f[:, :, None] for f in q))
  kx = BlockSummary(*(f[:, None, :] for f in k))
  empty = ~_meets_diagonal(qx, kx) & (
      _causal_empty(qx, kx) | _segments_empty(qx, kx)
      | (_stack_empty(qx, kx, code) & _compose_empty(qx, kx, code)))
  full = _full(qx, kx, code)
  return xp.where(empty, EMPTY, xp.where(full, FULL, PARTIAL)).astype(xp.int8)


def _compact(visit_NM, xp):
  """Per row of a bool [N, M]: (count [N], the True columns in order, padded with the last)."""
  N, M = visit_NM.shape
  count = xp.sum(visit_NM, axis=-1, dtype=xp.int32)
  slot = xp.where(visit_NM, xp.cumsum(visit_NM, axis=-1, dtype=xp.int32) - 1, M)
  rows = xp.broadcast_to(xp.arange(N, dtype=xp.int32)[:, None], (N, M))
  column = xp.broadcast_to(xp.arange(M, dtype=xp.int32), (N, M))
  if xp is np:
    out = np.zeros((N, M + 1), np.int32)
    out[rows, slot] = column
  else:
    out = xp.zeros((N, M + 1), xp.int32).at[rows, slot].set(column)
  out = out[:, :M]
  last = xp.take_along_axis(out, xp.maximum(count - 1, 0)[:, None], axis=-1)
  return count, xp.where(column < count[:, None], out, last)


def plan_groups(meta: RowMetadata, codes_C, block_q: int, block_k: int, xp=jnp) -> BlockPlan:
  """The plan of each attention code in `codes_C` (Python ints): fields with C in place of H."""
  T = meta.kind.shape[-1]
  if T % block_q or T % block_k:
    raise ValueError(f"plan_blocks: row length {T} must be a multiple of block_q={block_q} and "
                     f"block_k={block_k} (pad with pad_metadata)")
  q = summarize_blocks(meta, block_q, xp)
  k = summarize_blocks(meta, block_k, xp)
  kind_BCIJ = xp.stack([classify(q, k, int(code), xp) for code in codes_C], axis=1)
  B, C, I, J = kind_BCIJ.shape
  visit = kind_BCIJ != EMPTY
  count, kblocks = _compact(visit.reshape(-1, J), xp)
  qcount, qblocks = _compact(xp.swapaxes(visit, -1, -2).reshape(-1, I), xp)
  return BlockPlan(kind_BCIJ, count.reshape(B, C, I), kblocks.reshape(B, C, I, J),
                   qcount.reshape(B, C, J), qblocks.reshape(B, C, J, I))


def distinct_codes(codes_H) -> tuple[list[int], np.ndarray]:
  """Distinct attention codes (sorted Python ints) and each head's index among them ([H])."""
  codes = np.asarray(codes_H, dtype=np.int32).reshape(-1)  # must be concrete (head_codes is)
  distinct, group_H = np.unique(codes, return_inverse=True)
  return [int(c) for c in distinct], group_H.reshape(-1).astype(np.int32)


def plan_blocks(meta: RowMetadata, codes_H, block_q: int, block_k: int, xp=jnp) -> BlockPlan:
  """The block plan of rows `meta` ([B, T]) for heads with attention codes `codes_H` ([H]).

  T must be a multiple of block_q and block_k (see `pad_metadata`). `codes_H` must be concrete
  (e.g. `AttentionSpec.head_codes(H)`); the metadata may be traced (jit-able with xp=jnp). The
  rules run once per distinct code; heads sharing a code get the same plan.
  """
  distinct, group_H = distinct_codes(codes_H)
  plan = plan_groups(meta, distinct, block_q, block_k, xp)
  return BlockPlan(*(xp.take(x, xp.asarray(group_H), axis=1) for x in plan))


def pad_metadata(meta: RowMetadata, length: int, xp=jnp) -> RowMetadata:
  """Rows padded to `length` with padding tokens (segment 0, kind PAD, pop = length).

  Real tokens keep their pops: a never-popped pop of T stays > every real query index.
  """
  T = meta.kind.shape[-1]
  if length == T:
    return meta
  if length < T:
    raise ValueError(f"pad_metadata: cannot pad rows of {T} tokens to {length}")
  pad = [(0, 0)] * (meta.kind.ndim - 1) + [(0, length - T)]
  return RowMetadata(
      kind=xp.pad(xp.asarray(meta.kind), pad, constant_values=int(Kind.PAD)),
      segment=xp.pad(xp.asarray(meta.segment), pad),
      position=xp.pad(xp.asarray(meta.position), pad),
      depth=xp.pad(xp.asarray(meta.depth), pad),
      pop=xp.pad(xp.asarray(meta.pop), pad, constant_values=length))


def padded_length(T: int, block_q: int, block_k: int) -> int:
  """The smallest multiple of both block sizes that is ≥ T."""
  multiple = math.lcm(block_q, block_k)
  return -(-T // multiple) * multiple


def skip_fraction(plan: BlockPlan) -> dict[str, float]:
  """Fractions of all tiles (over rows and heads) that are empty (skipped) / partial / full."""
  kind = np.asarray(plan.kind_BHIJ)
  total = kind.size
  return {"empty": float((kind == EMPTY).sum() / total),
          "partial": float((kind == PARTIAL).sum() / total),
          "full": float((kind == FULL).sum() / total)}
