"""The Pushdown attachment beam of many rows at once (issue #35): `beam_score_many`.

`beam.beam_score` (the one-row search, kept as the oracle) advances one row's hypotheses per
cache step and keeps each hypothesis as a `Stack`. Here `concurrent` rows (sentences or documents)
are in flight together in one key/value cache (`cache`):

  rows       every hypothesis of every row in flight is a cache row, grouped by the row it
             belongs to (in queue order), each group best first; row counts are whole chunks
             of the cache step (`cache.rows_for`)
  widths     rows are searched one width bucket at a time, longest first, each with the
             cache slots `beam_score` gives it (`beam.cache_width`): XLA:CPU's
             attention over 12 slots and over 16 differs in the last bits
  a step     one `cache.step` per round over all hypothesis rows, each at its own row's query
             position t (the step takes a position per row)
  the stack  arrays instead of `Stack` objects: `open_NW` (token s is the last token of a stack
             element), `depth_NW` (the stack tape row after the last pushed token) and the
             attachments so far; the options of the next word are the open tokens ≥ its
             sentence's first token, a reduce with s pops the elements whose last tokens are
             the open ones ≥ s and adds to each token the number of popped elements starting at
             or before it (`_push`)
  pruning    the candidates of a hypothesis laid out as one row [options innermost first …,
             shift] (padded with −inf), so a row's flat order is `beam_score`'s candidate order;
             per row in flight its best `beam` (ties by that order) by `beam_batch.
             select_per_slot` — the one selection rule of the word-synchronous searches
  refill     a row whose last query was scored is finished (its hypotheses dropped) and the
             next row of the queue (longest first) takes its place in the next step
  memory     fewer rows are in flight (at least one) where `concurrent` rows' `beam`
             hypotheses would need a cache (`cache.peak_bytes`: with the copy a step or a
             reselection writes) over the searches' memory budget (`beam.fit_in_memory`): at
             b = 300 the 1B model's float32 cache of one 64-slot sentence is 6.2 GiB, of one
             1,024-token document 99 GiB (`in_flight`, logged)

The results equal `beam_score`'s bit for bit: the same per-token prefix log-probabilities, the
same best attachments and final beam size (float64 reductions in the same order; the cache
computes each row the same way whatever else a step feeds, in chunks of a fixed row count).
tests/test_pushdown_beam_batch.py compares the two; benchmarks/pushdown_beam_bench.py measures them.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from slm_jax.inference.beam import SENTENCES_PER_BATCH, fit_in_memory
from slm_jax.inference.beam_batch import select_per_slot
from slm_jax.kinds import TERMINAL_CODE
from slm_jax.pushdown import cache
from slm_jax.pushdown.beam import BEAM, BeamScore, cache_width, check_row, sentence_openings
from slm_jax.pushdown.model import PushdownLM


def _checked(rows) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
  checked = []
  for i, (tokens_T, kinds_T, sentence_T) in enumerate(rows):
    tokens_T, kinds_T, sentence_T = (np.asarray(a) for a in (tokens_T, kinds_T, sentence_T))
    try:
      check_row(kinds_T, sentence_T)
    except ValueError as error:
      raise ValueError(f"row {i}: {error}") from None
    if tokens_T.shape != kinds_T.shape:
      raise ValueError(f"row {i}: pushdown scoring: tokens {tokens_T.shape} and kinds "
                       f"{kinds_T.shape} differ in shape")
    checked.append((tokens_T, kinds_T, sentence_T))
  return checked


class _Queue:
  """Rows of one width W, longest first: tokens / kinds [R, W], whether token t opens a
  sentence [R, W], lengths [R] and each row's index in the given list (`order`)."""

  def __init__(self, checked):
    lengths = np.array([len(k) for _, k, _ in checked], np.int64)
    self.order = np.argsort(-lengths, kind="stable")  # queue position → index in `checked`
    self.length = lengths[self.order]
    self.width = cache_width(int(self.length.max()))
    R, W = len(checked), self.width
    self.tokens, self.kinds = np.zeros((R, W), np.int32), np.zeros((R, W), np.int8)
    self.opens = np.zeros((R, W), bool)
    for q, i in enumerate(self.order):
      tokens_T, kinds_T, sentence_T = checked[i]
      L = len(kinds_T)
      self.tokens[q, :L], self.kinds[q, :L] = tokens_T, kinds_T
      self.opens[q, :L] = sentence_openings(kinds_T, sentence_T)


class _Hypotheses:
  """Host state of the hypothesis rows n, grouped by `row` [N] (queue positions, ascending;
  each group best first): `score` [N] log p(x≤t, a≤t), `open` / `depth` / `attach` [N, W]."""

  def __init__(self, width: int):
    self.row = np.zeros(0, np.int64)
    self.score = np.zeros(0)
    self.open = np.zeros((0, width), bool)
    self.depth = np.zeros((0, width), np.int32)
    self.attach = np.zeros((0, width), np.int64)

  def take(self, index: np.ndarray) -> "_Hypotheses":
    out = _Hypotheses.__new__(_Hypotheses)
    for name in ("row", "score", "open", "depth", "attach"):
      setattr(out, name, getattr(self, name)[index])
    return out

  def append_start(self, row: int) -> None:
    """A row's first hypothesis: BOS shifted (an element (0, 0), depths 0, score 0)."""
    W = self.open.shape[1]
    start = np.zeros((1, W), bool)
    start[0, 0] = True
    self.row = np.r_[self.row, row]
    self.score = np.r_[self.score, 0.0]
    self.open = np.concatenate([self.open, start])
    self.depth = np.concatenate([self.depth, np.zeros((1, W), np.int32)])
    self.attach = np.concatenate([self.attach, np.zeros((1, W), np.int64)])


def _push(hyps: _Hypotheses, e_N: np.ndarray, shift_N: np.ndarray, s_N: np.ndarray) -> None:
  """Token e of each hypothesis pushed: a shift, or a reduce with the element whose last token
  is s (`Stack.push`, all rows at once)."""
  n, W = hyps.open.shape
  pos_W = np.arange(W)
  rows = np.arange(n)
  hyps.attach[rows, e_N] = np.where(shift_N, e_N, s_N)
  r = np.flatnonzero(~shift_N)
  if len(r):
    s, e, open_ = s_N[r, None], e_N[r, None], hyps.open[r]
    popped = open_ & (pos_W >= s)  # the open tokens ≥ s are the last tokens of popped elements
    below = open_ & (pos_W < s)  # BOS's element is never popped: at least one
    first = W - np.argmax(below[:, ::-1], axis=1)  # first token of the element ending at s
    starts = np.zeros((len(r), W), np.int32)
    starts[np.arange(len(r)), first] = 1
    starts[:, 1:] += popped[:, :-1] & (pos_W[:-1] < e - 1)  # the next elements start at u + 1
    hyps.depth[r] += np.where(pos_W <= e, np.cumsum(starts, axis=1, dtype=np.int32), 0)
    hyps.open[r] = open_ & ~popped
  hyps.open[rows, e_N] = True


def in_flight(model: PushdownLM, beam: int, width: int, wanted: int,
              budget: int | None = None) -> int:
  """How many rows of `width` cache slots the batched beam advances together: `wanted`, or
  fewer (at least 1) where their hypotheses' cache (`cache.peak_bytes`) would pass `budget`
  bytes (`beam.fit_in_memory`, the searches' one memory rule)."""
  size = lambda n: cache.peak_bytes(model.config, cache.rows_for(n * beam), width)
  return fit_in_memory(size, wanted, f"pushdown beam rows of {width} slots", budget=budget)


def beam_score_many(model: PushdownLM, rows: Sequence[tuple], beam: int = BEAM,
                    concurrent: int = SENTENCES_PER_BATCH,
                    memory_budget: int | None = None) -> list[BeamScore]:
  """`beam_score(model, tokens_T, kinds_T, sentence_T, beam)` of every (tokens_T, kinds_T,
  sentence_T) in `rows`, `concurrent` rows advanced together (module docstring; fewer where
  their cache would pass `memory_budget` bytes, `in_flight`); the results in the order of
  `rows`, equal to `beam_score`'s bit for bit."""
  if beam < 1:
    raise ValueError(f"pushdown scoring: beam must be ≥ 1, got {beam}")
  if concurrent < 1:
    raise ValueError(f"pushdown scoring: concurrent must be ≥ 1, got {concurrent}")
  checked = _checked(rows)
  widths = np.array([cache_width(len(k)) for _, k, _ in checked], np.int64)
  out: list[BeamScore | None] = [None] * len(checked)
  for width in sorted(set(widths.tolist()), reverse=True):  # the cache's numbers depend on its
    group = np.flatnonzero(widths == width)  # slot count: each row gets `beam_score`'s width
    fits = in_flight(model, beam, width, min(concurrent, len(group)), memory_budget)
    for i, result in zip(group, _search(model, _Queue([checked[i] for i in group]), beam,
                                        fits)):
      out[i] = result
  return out


def _search(model: PushdownLM, queue: _Queue, beam: int, concurrent: int) -> list[BeamScore]:
  """The batched beam of the rows of one width (module docstring), in the queue's given order."""
  R, W = len(queue.length), queue.width
  t_R = np.zeros(R, np.int64)  # the query position of each row in flight
  first_word_R = np.zeros(R, np.int64)  # `Stack.sentence_start`
  prefix_RW = np.zeros((R, W))  # log p̃(x≤t) of each row (index 0: 0, BOS is given)
  results: list[BeamScore | None] = [None] * R
  hyps = _Hypotheses(W)
  parents = np.zeros(0, np.int64)  # cache row of each hypothesis
  waiting, in_flight = 0, 0
  kv = cache.empty(model, cache.rows_for(1), W)
  no_fast = np.zeros(W + 1, bool)
  pos_W = np.arange(W)
  while True:
    while in_flight < concurrent and waiting < R:  # refill from the queue
      hyps.append_start(waiting)
      parents = np.r_[parents, 0]  # any cache row: slot 0 is written first, later ones masked
      waiting, in_flight = waiting + 1, in_flight + 1
    if not in_flight:
      break
    n = len(hyps.row)
    padded = cache.rows_for(n)
    kv = cache.select(kv, jnp.asarray(np.r_[parents, np.zeros(padded - n, np.int64)]))
    row, t_N = hyps.row, t_R[hyps.row]
    token = np.zeros(padded, np.int32)
    token[:n] = queue.tokens[row, t_N]
    nxt = np.zeros(padded, np.int32)
    nxt[:n] = queue.tokens[row, t_N + 1]
    t_P = np.zeros(padded, np.int32)
    t_P[:n] = t_N
    tape = np.zeros((padded, W), np.int32)
    tape[:n] = hyps.depth
    kv, *out = cache.step(model, kv, jnp.asarray(token), jnp.asarray(t_P), jnp.asarray(tape),
                          jnp.asarray(nxt), jnp.int32(n))
    word, reduce, shift = (np.asarray(a, np.float64)[:n] for a in out)
    scores = hyps.score + word
    groups = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    live = row[groups]
    prefix_RW[live, t_R[live] + 1] = np.logaddexp.reduceat(scores, groups)
    opening = queue.opens[live, t_R[live] + 1]
    first_word_R[live[opening]] = t_R[live[opening]] + 1
    terminal = queue.kinds[row, t_N + 1] == TERMINAL_CODE
    options = hyps.open & (pos_W >= first_word_R[row][:, None]) & terminal[:, None]
    logits = np.full((n, W + 1), -np.inf)
    logits[:, :W] = np.where(options, reduce, -np.inf)[:, ::-1]  # innermost (last s) first
    logits[:, W] = shift
    lse = np.logaddexp.reduce(logits, axis=1)
    cand = scores[:, None] + (logits - lse[:, None])
    f, c = select_per_slot(cand, row, beam, 0, no_fast)
    kept = hyps.take(f)
    kept.score = cand[f, c]
    _push(kept, t_R[kept.row] + 1, c == W, W - 1 - c)
    done = t_R[live] + 2 == queue.length[live]
    for q in live[done]:
      mine = kept.row == q
      best = int(np.argmax(mine))
      results[q] = BeamScore(float(np.logaddexp.reduce(kept.score[mine])),
                             prefix_RW[q, :queue.length[q]].copy(),
                             kept.attach[best, :queue.length[q]].tolist(), int(mine.sum()))
    t_R[live[~done]] += 1
    in_flight -= int(done.sum())
    stay = ~np.isin(kept.row, live[done])
    hyps, parents = kept.take(stay), f[stay]
  out: list[BeamScore | None] = [None] * R
  for q, i in enumerate(queue.order):
    out[i] = results[q]
  return out
