"""Per-token structural metadata, THE attention-mask predicate, dense masks and targets (SPEC §3–§4).

The contract every attention path consumes (the XLA reference attention, the Pallas and Triton
kernels, `explain`): a packed row is described by O(T) metadata

  kind_T      `Kind` of each token
  segment_T   document id within the row, 0 = padding (contiguous runs)
  position_T  index within its run (RoPE positions)
  depth_T     TG depth: root level 0, children of a node at depth d have d+1, a closing has its
              opening's depth
  pop_T       row index of the closing whose COMPOSE pops this token off the TG stack; for an ONT its
              own closing, for a terminal/child closing the parent's closing, for CNT2 its own index
              + 1 (never pushed), T ("infinity") if never popped

and `attends(query, key, attention)` is the single predicate (the SPEC §3 table, with one
TG-faithful refinement: a COMPOSE query never sees a CNT2 key, which the literal `pop[j] == i` would
admit whenever a CNT2 directly precedes the CNT1, as in `VP) VP) S)`), written with elementwise operators
only, so it runs on numpy arrays, traced jax arrays, and inside Pallas/Triton tiles. The attention
code may be a Python int (static) or an integer array (per head, traced) — the same expression.

`row_metadata` is vectorized over any leading batch axes and runs under `jax.jit` (pass
`xp=jax.numpy`); it is O(T log T) (one stable sort) and never builds a T×T array. On numpy it
takes a cheaper host route to the same result (`_row_metadata_numpy`, tested equal).

Metadata is a function of the visible kinds: an ONT opens a constituent, CNT/CNT1 closes the
innermost open one (a closing with nothing open, as in lin1_noont/lin1_merge/lin1_shuf, closes
nothing and sits at depth 0), CNT2 changes nothing. Only lin2 configurations consume depth/pop.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any, NamedTuple

import numpy as np

from slm_jax.kinds import (BOS_CODE as _BOS, CNT1_CODE as _CNT1, CNT2_CODE as _CNT2,
                           EOS_CODE as _EOS, ONT_CODE as _ONT, Kind, is_closing, is_structural)
from slm_jax.linearize import get_scheme


class Attention(enum.IntEnum):
  """Per-head attention type code (stable: kernels receive these ints)."""

  CAUSAL = 0
  TG = 1  # STACK/COMPOSE (Transformer Grammars)
  TG_NOMASK = 2  # COMPOSE kept, no post-composition mask; CNT2 keys hidden
  TG_NOMASK_AUG = 3  # COMPOSE kept, everything else causal (CNT2 visible)


ATTENTION_NAMES = {a.name.lower(): a for a in Attention}
# Plain ints for use inside traced code and kernels.
_CAUSAL, _TG, _TG_NOMASK, _TG_NOMASK_AUG = (int(a) for a in Attention)


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
  """One attention code per head group; hybrids have two groups (SPEC §3 `mix_A_B`).

  Group g covers heads [g·H/G, (g+1)·H/G). A single type is one group.
  """

  groups: tuple[Attention, ...]

  @property
  def name(self) -> str:
    names = [g.name.lower() for g in self.groups]
    return names[0] if len(names) == 1 else f"mix({','.join(names)})"

  @property
  def tg_family(self) -> bool:
    """True when any group uses a TG-family mask (COMPOSE at CNT1, CNT2 not a target)."""
    return any(g != Attention.CAUSAL for g in self.groups)

  def head_codes(self, num_heads: int) -> np.ndarray:
    """Attention code of every head, shape [H]."""
    groups = len(self.groups)
    if num_heads % groups:
      raise ValueError(f"{self.name} needs a number of heads divisible by {groups}, got {num_heads}")
    return np.repeat(np.asarray(self.groups, dtype=np.int32), num_heads // groups)


def parse_attention(name: str) -> AttentionSpec:
  """`causal`, `tg`, `tg_nomask`, `tg_nomask_aug`, or `mix(A,B)` of two of those."""
  text = name.strip().lower()
  match = re.fullmatch(r"mix\(\s*(\w+)\s*,\s*(\w+)\s*\)", text)
  parts = match.groups() if match else (text,)
  unknown = [p for p in parts if p not in ATTENTION_NAMES]
  if unknown:
    raise ValueError(f"unknown attention {name!r}: expected one of {', '.join(ATTENTION_NAMES)} "
                     "or mix(A,B)")
  return AttentionSpec(tuple(ATTENTION_NAMES[p] for p in parts))


class TokenMeta(NamedTuple):
  """Metadata of query or key tokens, arrays broadcastable against each other."""

  index: Any  # row index (j <= i causality)
  segment: Any
  kind: Any
  pop: Any


def attends(query: TokenMeta, key: TokenMeta, attention) -> Any:
  """THE mask predicate (SPEC §3): may `query` attend `key` under `attention`?

  `attention` is an `Attention` code: a Python int or an integer array broadcastable to the
  result (e.g. shape [H, 1, 1] for per-head codes). Uses only elementwise operators.
  """
  is_self = key.index == query.index
  visible = ((query.segment == key.segment) & (key.index <= query.index)
             & ((query.segment != 0) | is_self))  # padding attends only itself
  compose_query = (query.kind == _CNT1) & (attention != _CAUSAL)
  # COMPOSE: what this CNT1 pops, and itself. A CNT2 right before it has pop == i too (its own
  # index + 1) but was never pushed, so TG's COMPOSE does not see it.
  composed = ((key.pop == query.index) & (key.kind != _CNT2)) | is_self
  on_stack = (((attention == _CAUSAL) | (attention == _TG_NOMASK_AUG))
              | ((attention == _TG) & (key.pop > query.index))
              | ((attention == _TG_NOMASK) & ((key.kind != _CNT2) | is_self)))
  return visible & ((compose_query & composed) | (~compose_query & on_stack))


class RowMetadata(NamedTuple):
  """Structural metadata of packed rows, each field [..., T]."""

  kind: Any
  segment: Any
  position: Any
  depth: Any
  pop: Any

  def query(self, xp=np) -> TokenMeta:
    """Fields shaped [..., T, 1] (query side of a [..., T, S] mask)."""
    index = xp.arange(self.kind.shape[-1])
    return TokenMeta(index[:, None], self.segment[..., :, None], self.kind[..., :, None],
                     self.pop[..., :, None])

  def key(self, xp=np) -> TokenMeta:
    """Fields shaped [..., 1, S] (key side)."""
    index = xp.arange(self.kind.shape[-1])
    return TokenMeta(index[None, :], self.segment[..., None, :], self.kind[..., None, :],
                     self.pop[..., None, :])


MAX_ROW_TOKENS = 32767  # the longest row `row_metadata` takes (int32 arithmetic)


def row_metadata(kind_T, segment_T, xp=np) -> RowMetadata:
  """SPEC §3 metadata of packed rows from their kinds and segment ids ([..., T] each).

  Runs of equal segment id are documents (or document pieces); 0 is padding. Use `xp=jax.numpy`
  inside `jax.jit`. Rows of up to 32,767 tokens (int32 arithmetic).
  """
  kind_in = xp.asarray(kind_T)
  shape = kind_in.shape
  length = shape[-1]
  if length > MAX_ROW_TOKENS:
    raise ValueError(f"row_metadata supports rows of at most {MAX_ROW_TOKENS:,} tokens, got "
                     f"{length}")
  if xp is np:
    return _row_metadata_numpy(kind_in, np.asarray(segment_T))
  return _row_metadata_traced(kind_in, xp.asarray(segment_T), xp)


def _row_metadata_traced(kind_in, segment_in, xp) -> RowMetadata:
  """`row_metadata` with jax.numpy (static shapes, runs under `jax.jit`): one stable sort."""
  import jax  # pylint: disable=g-import-not-at-top
  cummax = lambda x: jax.lax.cummax(x, axis=x.ndim - 1)
  cummin = lambda x: jax.lax.cummin(x, axis=x.ndim - 1)
  shape = kind_in.shape
  length = shape[-1]
  kind = kind_in.reshape(-1, length)  # [N, T]; scans run along rows, gathers on flat arrays
  segment = segment_in.reshape(-1, length)
  rows = kind.shape[0]
  i32 = xp.int32
  index = xp.broadcast_to(xp.arange(length, dtype=i32), kind.shape)
  new_run = xp.concatenate([xp.ones_like(segment[:, :1], dtype=bool),
                            segment[:, 1:] != segment[:, :-1]], axis=-1)
  run = xp.cumsum(new_run, axis=-1, dtype=i32)  # 1-based run ordinal within the row
  run_start = cummax(xp.where(new_run, index, 0))
  position = index - run_start
  row_base = (xp.arange(rows, dtype=i32) * length)[:, None]
  flat_start = (run_start + row_base).reshape(-1)

  is_open = (kind == _ONT).astype(i32)
  delta = is_open - is_closing(kind).astype(i32)
  # Open count after each token, restarted at every run and reflected at 0 so that a closing
  # with nothing open closes nothing: X_i = U_i - min(0, min_{k<=i in run} U_k), U unclamped.
  step = xp.cumsum(delta, axis=-1, dtype=i32)
  walk = step - (step - delta).reshape(-1)[flat_start].reshape(kind.shape)
  offset = (2 * length + 1) * run  # earlier runs never win the running minimum
  open_after = walk - xp.minimum(cummin(walk - offset) + offset, 0)
  is_boundary = (kind == _BOS) | (kind == _EOS)
  depth = xp.where(is_boundary, 0, open_after - is_open)  # BOS/EOS are root level

  # pop[i] = the first token j > i of i's run with open_after[j] == open_after[i] - 1: the
  # walk moves by one, so that is where the constituent holding i closes (for an ONT its own
  # closing, for any other stack item its parent's closing). One stable sort per row of item
  # slots (2j, key (run, open_after[j])) and query slots (2i+1, key (run, open_after[i] - 1));
  # the answer is the next item slot after each query slot in sorted order, if its key is equal.
  width = length + 2
  item_key = run * width + open_after + 1
  query_key = xp.where(is_boundary, run * width, item_key - 1)  # BOS/EOS: never popped
  keys = xp.stack([item_key, query_key], axis=-1).reshape(rows, 2 * length)
  slots = 2 * length
  order = (xp.argsort(keys, axis=-1, stable=True).astype(i32)
           + (xp.arange(rows, dtype=i32) * slots)[:, None])
  order = order.reshape(-1)
  sorted_keys = keys.reshape(-1)[order]
  rank = xp.arange(rows * slots, dtype=i32)
  item_rank = xp.where((order & 1) == 0, rank, rows * slots)
  next_item = xp.flip(cummin(xp.flip(item_rank.reshape(rows, slots), axis=-1)), axis=-1)
  next_item = xp.concatenate([next_item[:, 1:], xp.full_like(next_item[:, :1], rows * slots)],
                             axis=-1).reshape(-1)  # first item slot strictly after, same row
  safe = xp.minimum(next_item, rows * slots - 1)
  found = (next_item < rows * slots) & (sorted_keys[safe] == sorted_keys)
  popper = xp.where(found, (order[safe] >> 1) % length, length)
  inverse = xp.zeros_like(order).at[order].set(xp.arange(order.shape[0], dtype=order.dtype))
  pop = popper[inverse[1::2]].reshape(kind.shape)
  pop = xp.where(kind == _CNT2, index + 1, pop)
  pop = xp.where(segment == 0, length, pop)
  return RowMetadata(kind_in, segment_in, position.reshape(shape), depth.reshape(shape),
                     pop.reshape(shape).astype(i32))


def _row_metadata_numpy(kind_in: np.ndarray, segment_in: np.ndarray) -> RowMetadata:
  """`row_metadata` on the host: the same metadata (tested equal to the traced route on packed
  batches and to the oracle on every GUM/PTB document), in O(T log T) numpy steps over the
  flattened rows.

  Runs are cut at segment changes and row starts; the walk (open constituents after each token)
  restarts at 0 in every run, reflected at 0 where a closing has nothing to close. Brackets are the
  ONTs and the closings that close something; a bracket's level is the walk inside it. Sorted by
  (run, level, position) (one stable radix argsort of small ints), each level's brackets alternate
  opening, closing: an opening's own closing is the next sorted bracket. Its parent's closing is
  the bracket that follows the opening's position among the level above (one `searchsorted`).
  Every other token is popped with its innermost open constituent: the closing right after it if
  the next bracket is a closing, else the next bracket's (a sibling's) parent closing; one
  `np.repeat` spreads that value of each bracket over the tokens before it.
  """
  shape = kind_in.shape
  length = shape[-1]
  kind = kind_in.reshape(-1)
  segment = segment_in.reshape(-1)
  n = kind.size
  rows = n // length if length else 0
  i32, intp = np.int32, np.intp  # intp indices: numpy gathers with int32 ones are ~3× slower
  # pop is computed in flat positions, NEVER meaning "not popped"; the end turns both into row
  # indices (subtract the row start, cap at length)
  never = n + length
  pop_dtype = i32 if never < 2**31 else np.int64
  index = np.arange(n, dtype=pop_dtype)
  new_run = np.empty(n, bool)
  new_run[:1] = True
  np.not_equal(segment[1:], segment[:-1], out=new_run[1:])
  new_run[::max(length, 1)] = True
  starts = np.flatnonzero(new_run)
  single = len(starts) == 1
  is_open = kind == _ONT
  is_close = is_closing(kind)
  delta = is_open.view(np.int8) - is_close.view(np.int8)
  walk = np.cumsum(delta, dtype=i32)  # open constituents after each token, if nothing unmatched
  run = None
  if single:
    position = index
  else:
    run_len = np.diff(np.append(starts, n))
    run = np.repeat(np.arange(len(starts), dtype=i32), run_len)
    position = index - np.repeat(starts.astype(pop_dtype), run_len)
    walk -= np.repeat((walk - delta).take(starts), run_len)
  reflected = walk.min(initial=0) < 0
  if reflected:  # a closing with nothing open closes nothing: reflect at 0, in the runs that dip
    low = walk.min(keepdims=True) if single else np.minimum.reduceat(walk, starts)
    for r in np.flatnonzero(low < 0).tolist():
      part = walk[starts[r]:starts[r + 1] if r + 1 < len(starts) else n]
      part -= np.minimum(np.minimum.accumulate(part), 0)
  open_after = walk
  is_boundary = (kind == _BOS) | (kind == _EOS)
  depth = open_after - is_open
  np.putmask(depth, is_boundary, 0)  # BOS/EOS are root level

  if reflected:
    down = is_close.copy()
    down[1:] &= open_after[1:] < open_after[:-1]
    down &= ~new_run
  else:  # the walk never went below 0: every closing closes something
    down = is_close
  bracket_pos = np.flatnonzero(is_open | down)
  brackets = len(bracket_pos)
  if brackets:
    level = (open_after + down).take(bracket_pos)  # an opening's walk after, a closing's before
    width = int(level.max()) + 2
    keys = len(starts) * width
    key = level if single else (run.take(bracket_pos).astype(
        np.int32 if keys < 2**31 else np.int64) * width + level)
    order = np.argsort(key.astype(np.int16) if keys < 2**15 else key,  # int16: a radix sort
                       kind="stable")
    sorted_pos = bracket_pos.take(order)
    sorted_key = key.take(order)
    sorted_open = is_open.take(sorted_pos)
    opens = np.flatnonzero(sorted_open)  # sorted indices of the openings
    after = np.minimum(opens + 1, brackets - 1)
    closes_own = ((opens + 1 < brackets) & (sorted_key.take(after) == sorted_key.take(opens))
                  & ~sorted_open.take(after))
    stride = n + 1
    wide = np.int32 if (int(sorted_key[-1]) + 1) * stride < 2**31 else np.int64
    keyed = sorted_key.astype(wide) * wide(stride) + sorted_pos.astype(wide)
    at = np.searchsorted(keyed, keyed.take(opens) - stride)  # after the opening, a level up
    at_c = np.minimum(at, brackets - 1)
    has_parent = ((at < brackets) & (sorted_key.take(at_c) == sorted_key.take(opens) - 1)
                  & ~sorted_open.take(at_c))
    value = sorted_pos.copy()  # before a closing: that closing pops the token
    value[opens] = np.where(has_parent, sorted_pos.take(at_c), never)  # before an opening
    by_position = np.empty(brackets, intp)
    by_position[order] = value
    # Tokens [bracket k-1, bracket k) take value k. Tokens after a run's last bracket meet the
    # next run's first bracket, always a root opening (value NEVER), or the end.
    gaps = np.empty(brackets + 1, intp)
    gaps[0] = bracket_pos[0]
    np.subtract(bracket_pos[1:], bracket_pos[:-1], out=gaps[1:-1])
    gaps[-1] = n - bracket_pos[-1]
    pop = np.repeat(np.append(by_position, never).astype(pop_dtype), gaps)
    pop[sorted_pos.take(opens)] = np.where(closes_own, sorted_pos.take(after), never)
  else:
    pop = np.full(n, never, pop_dtype)
  np.putmask(pop, is_boundary, never)  # BOS/EOS are never popped
  cnt2 = np.flatnonzero(kind == _CNT2)
  pop[cnt2] = cnt2 + 1
  np.putmask(pop, segment == 0, never)
  if rows > 1:
    pop = pop.reshape(rows, length)
    pop -= np.arange(0, n, length, dtype=pop_dtype)[:, None]
  np.minimum(pop, length, out=pop)
  return RowMetadata(kind_in, segment_in, position.reshape(shape).astype(i32),
                     depth.reshape(shape), pop.reshape(shape).astype(i32, copy=False))


def dense_mask(meta: RowMetadata, attention: AttentionSpec, xp=np):
  """Boolean masks [..., G, T, T], one per head group of `attention` (reference / tests)."""
  codes = xp.asarray(np.asarray(attention.groups, dtype=np.int32))[:, None, None]
  query, key = meta.query(xp), meta.key(xp)
  expand = lambda m: TokenMeta(*(x if np.ndim(x) < 2 else x[..., None, :, :] for x in m))
  return attends(expand(query), expand(key), codes)


def target_mask(kind_T, segment_T, linearization: str, attention: AttentionSpec, xp=np):
  """SPEC §4: which tokens are prediction targets (their loss is counted), [..., T] bool.

  Not targets: padding; the first token of every run (BOS, or the first token of a document
  continued from an earlier row: nothing in the row predicts it); CNT2 under any TG-family
  attention (deterministic after its CNT1); every NT token in lin1_shuf.
  """
  kind = xp.asarray(kind_T)
  segment = xp.asarray(segment_T)
  first = xp.concatenate([xp.ones_like(segment[..., :1], dtype=bool),
                          segment[..., 1:] != segment[..., :-1]], axis=-1)
  target = (segment != 0) & ~first & (kind != Kind.PAD) & (kind != Kind.BOS)
  if attention.tg_family:
    target = target & (kind != Kind.CNT2)
  if not get_scheme(linearization).structure_targets:
    target = target & ~is_structural(kind)
  return target
