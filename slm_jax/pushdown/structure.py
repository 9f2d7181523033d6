"""Silver Pushdown structure of packed lin1 rows: spans, attachments, stack tapes (SPEC §14).

The structure (Murty et al. 2023, §3) is the tree right-binarized and unary-collapsed: a node
with children c1 … cn (n ≥ 2) becomes the binary constituents B_k = (c_k, B_k+1), k < n, spanning
start(c_k) … end(node); a node with one child is that child. Read as shift-reduce, each word is
shifted and then reduced with the stack elements its completed constituents cover. Facts used:

- every token m that is not the last token of its sentence is the left-child end of exactly one
  binary constituent, [span_start[m], span_end[m]] (the last tokens of a sentence, BOS and EOS
  have none: T); a sentence of L words has L − 1 constituents;
- the *attachment* of token e is the last token of the stack element the outermost constituent
  ending at e reduces with (the left child of the widest constituent ending at e), or e itself
  (a shift) when no constituent ends at e — the paper's label convention;
- the *stack tape* after token t: depth_t(j) = #{m : span_start[m] ≤ j ≤ span_end[m] ≤ t}, the
  number of completed constituents above j (the paper's depth increments, one per reduce);
- token j heads (is the last token of) a stack element after token t iff span_end[j] > t, so the
  elements the next word may reduce with are those j of its own sentence (BOS never).

`pushdown_rows(kind_T, segment_T)` reads the lin1 kinds only (terminals may be sub-word pieces:
each piece is a leaf in its word's place) and returns everything in *compact* coordinates: the
row's BOS, terminal and EOS tokens moved to the front in order (the Pushdown model sees no
bracket tokens), empty slots after them (PAD, segment 0). Vectorized over leading batch axes;
`xp=jax.numpy` runs it inside `jax.jit` (scatters, cumulative max/min, no Python loops), numpy on
the host. The per-token loop oracle is `stack.oracle_document`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from slm_jax.kinds import (BOS_CODE as _BOS, EOS_CODE as _EOS, ONT_CODE as _ONT, PAD_CODE as _PAD,
                           TERMINAL_CODE as _TERMINAL, is_closing)
from slm_jax.structure import row_metadata


class PushdownRows(NamedTuple):
  """Compact rows (fields [..., T]); "none" is T. `source`: the lin1 index each slot holds (T for
  an empty slot); `sentence`: ordinal of the sentence a token belongs to within the row (BOS
  before the first: one less); `span_start`/`span_end`: the constituent a token is the left-child
  end of; `attach`: the attachment (the token itself = shift; BOS, EOS and padding shift)."""

  source: Any
  kind: Any
  segment: Any
  sentence: Any
  span_start: Any
  span_end: Any
  attach: Any


def _cummax(x, xp):
  if xp is np:
    return np.maximum.accumulate(x, axis=-1)
  import jax  # pylint: disable=g-import-not-at-top
  return jax.lax.cummax(x, axis=x.ndim - 1)


def _cummin(x, xp):
  if xp is np:
    return np.minimum.accumulate(x, axis=-1)
  import jax  # pylint: disable=g-import-not-at-top
  return jax.lax.cummin(x, axis=x.ndim - 1)


def _scatter(xp, base_NW, index_NK, values_NK, valid_NK, op: str):
  """base with `values` written at `index` along the last axis (rows independent) where `valid`;
  op: set (indices unique among valid), min or add."""
  rows, width = base_NW.shape
  flat = index_NK + (xp.arange(rows, dtype=index_NK.dtype) * width)[:, None]
  flat = xp.where(valid_NK, flat, rows * width).reshape(-1)  # invalid → a dump slot
  values = values_NK.reshape(-1).astype(base_NW.dtype)
  out = xp.concatenate([base_NW.reshape(-1), xp.zeros((1,), base_NW.dtype)])
  if xp is np:
    {"set": np.put, "min": np.minimum.at, "add": np.add.at}[op](out, flat, values)
  else:
    at = out.at[flat]
    out = {"set": at.set, "min": at.min, "add": at.add}[op](values)
  return out[:-1].reshape(rows, width)


def _take(x_NT, index_NK, xp):
  """x[n, index[n, k]] with out-of-range indices clipped (callers mask them)."""
  return xp.take_along_axis(x_NT, xp.clip(index_NK, 0, x_NT.shape[-1] - 1), axis=-1)


def pushdown_rows(kind_T, segment_T, xp=np) -> PushdownRows:
  """The silver structure of lin1 rows ([..., T] kinds and segment ids), compact coordinates."""
  kind_in = xp.asarray(kind_T)
  shape = kind_in.shape
  T = shape[-1]
  kind = kind_in.reshape(-1, T).astype(xp.int32)
  segment = xp.asarray(segment_T).reshape(-1, T).astype(xp.int32)
  meta = row_metadata(kind, segment, xp)
  pop, depth = meta.pop.astype(xp.int32), meta.depth.astype(xp.int32)
  i32 = xp.int32
  index = xp.broadcast_to(xp.arange(T, dtype=i32), kind.shape)
  is_term = kind == _TERMINAL
  keep = is_term | (kind == _BOS) | (kind == _EOS)
  dest = xp.cumsum(keep, axis=-1, dtype=i32) - 1  # compact index of a kept token
  last_term = _cummax(xp.where(is_term, index, -1), xp)  # last terminal at or before t
  next_term = xp.flip(_cummin(xp.flip(xp.where(is_term, index, T), -1), xp), -1)
  # Children of a node end at a terminal or a closing whose pop is the node's closing; a child
  # is not its node's last exactly when the node's closing does not follow it.
  child_end = (is_term | is_closing(kind)) & (pop < T)
  left = child_end & (pop != index + 1)
  # The opening of each closing (an ONT's pop is its own closing), for the child's first token.
  opening = _scatter(xp, xp.zeros_like(index), pop, index, (kind == _ONT) & (pop < T), "set")
  first = xp.where(is_term, index, _take(next_term, _take(opening, index, xp), xp))
  # Per left child (at its end t): its last terminal m, the constituent's first terminal (the
  # child's first) and last terminal (its parent's last), all in compact coordinates.
  m = _take(dest, xp.maximum(last_term, 0), xp)
  start = _take(dest, first, xp)
  end = _take(dest, xp.maximum(_take(last_term, pop, xp), 0), xp)
  none = xp.full_like(index, T)
  span_start = _scatter(xp, none, m, start, left, "set")
  span_end = _scatter(xp, none, m, end, left, "set")
  # Attachment: the left-child end of the widest constituent ending at e (least start).
  compact = xp.broadcast_to(xp.arange(T, dtype=i32), kind.shape)
  has = span_end < T
  key = _scatter(xp, xp.full_like(index, T * T), xp.minimum(span_end, T - 1),
                 span_start * T + compact, has, "min")
  attach = xp.where(key < T * T, key % T, compact)
  # Compact slots: kept tokens first, in order (a stable sort of "not kept").
  source = xp.argsort(xp.where(keep, 0, 1), axis=-1, stable=True).astype(i32)
  filled = compact < keep.sum(axis=-1, dtype=i32)[:, None]
  source = xp.where(filled, source, T)
  roots = xp.cumsum((kind == _ONT) & (depth == 0), axis=-1, dtype=i32)
  fields = dict(
      source=source,
      kind=xp.where(filled, _take(kind, source, xp), _PAD),
      segment=xp.where(filled, _take(segment, source, xp), 0),
      sentence=xp.where(filled, _take(roots, source, xp) - 1, -1),
      span_start=span_start, span_end=span_end, attach=attach)
  return PushdownRows(**{k: v.reshape(shape).astype(i32) for k, v in fields.items()})


def stack_tape(span_start_T, span_end_T, xp=np):
  """Depths [..., T, T]: entry [t, j] is depth_t(j), the constituents completed by token t
  that contain j (0 for j > t). int32; callers clip to their embedding table."""
  start = xp.asarray(span_start_T)
  shape = start.shape
  T = shape[-1]
  start = start.reshape(-1, T).astype(xp.int32)
  end = xp.asarray(span_end_T).reshape(-1, T).astype(xp.int32)
  has = end < T
  rows = start.shape[0]
  # ends_starts[e, s]: constituents [s, e]; cumsum over s counts those with start ≤ j, the
  # lower triangle keeps j ≤ e, and the cumsum over e adds up everything completed by t.
  counts = _scatter(xp, xp.zeros((rows, T * T), xp.int32), xp.minimum(end, T - 1) * T
                    + xp.minimum(start, T - 1), xp.ones_like(start), has, "add")
  counts = xp.cumsum(counts.reshape(rows, T, T), axis=-1)
  lower = xp.arange(T)[None, :] <= xp.arange(T)[:, None]
  tape = xp.cumsum(xp.where(lower, counts, 0), axis=-2)
  return tape.reshape(*shape, T).astype(xp.int32)


def reduce_options(rows: PushdownRows, xp=np):
  """[..., T, S] bool: at query t, the stack elements (by their last token j) that the next
  token t+1 may reduce with. Only a terminal reduces, only with elements of its own sentence;
  the shift is always allowed (it is not in this mask)."""
  kind, sentence, end = (xp.asarray(a) for a in (rows.kind, rows.sentence, rows.span_end))
  T = kind.shape[-1]
  pad = lambda x, value: xp.concatenate([x[..., 1:], xp.full_like(x[..., :1], value)], axis=-1)
  next_kind, next_sentence = pad(kind, _PAD), pad(sentence, -2)
  index = xp.arange(T)
  return ((index[None, :] <= index[:, None])
          & (kind[..., None, :] == _TERMINAL) & (next_kind[..., :, None] == _TERMINAL)
          & (sentence[..., None, :] == next_sentence[..., :, None])
          & (end[..., None, :] > index[:, None]))
