"""The word loop off the host (issue #46): the expansion rounds of the batched word-synchronous
search (`beam_batch.BatchedSearch`, SPEC §9) in one compiled `jax.lax.while_loop`, so the host is
visited once per word instead of once per decoder call.

`LoopSearch(searcher, sentences, complete=, prefixes=, concurrent=)` — iterated like
`BatchedSearch`, (index, BeamResult) pairs as sentences finish — keeps the search's state on the
device in fixed-capacity arrays (`LoopState`): per decoder row its joint and terminal scores
(float64, as the host searches add them), grammar state, token history and owning slot; per slot
(a sentence in flight) its frontier [F] and pool [P] rows, in order, with their counts, its word
and its counters. `WordLoop.rounds` runs every slot's rounds in one call:

  prune     depth-first continuation: frontier rows not above the slot's P-th pool score leave
  a round   the candidates of every frontier row (`Grammar.slot_token_ids` / `valid` with
            `xp=jnp`: the host's rules, written once), their scores from the decoder's
            log-probabilities; per slot the sub-beam (`lax.top_k`: ties by flat index, as the
            host's `top_k`) ∪ the fast track's word candidates not in it; row placement (a
            parent's first successor keeps its row, the others take free rows, their cache paths
            copied); the grammar advance; the expansion's tokens (`Grammar.expand_rows`) fed one
            position at a time through `incremental.step_fed` (the decoder's own chunked step,
            so each row gets the bits the host search's `step_rows` gives it); the pool merge (a
            stable sort by score, the pool first) and the new frontier
  exit      once some slot's frontier is empty (its word ends), or the arena has no room for
            another round

The host then records the ended words (`beam_batch.record_word`, the host searches' rule),
starts the next words or sentences (`WordLoop.begin` edits the device state in one call),
compacts the arena when asked and calls `rounds` again. Scores are float64, so the loop is
traced with 64-bit types (`jax.enable_x64`); the model's computation is dtype-explicit and gives
the same bits there. tests/test_beam_loop.py compares every result field with the one-sentence
search (the oracle) and the host's batched search.
"""

from __future__ import annotations

import functools
from typing import Iterator, NamedTuple, Sequence as SequenceT

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.inference.beam_batch import record_word, sentence_queue
from slm_jax.inference.beam_result import BeamResult
from slm_jax.inference.grammaticality import START, GrammarState
from slm_jax.inference.incremental import DecoderCache, step_fed
from slm_jax.kinds import Kind


class SlotWords(NamedTuple):
  """The word each slot searches (EOS at a sentence's end step), per slot [K]."""
  ids: jax.Array  # [K, W] its pieces (0 past its length)
  length: jax.Array  # [K] pieces
  kind: jax.Array  # [K] TERMINAL or EOS
  at_end: jax.Array  # [K] bool: the EOS step
  remaining: jax.Array  # [K] pieces of the words not yet emitted, this one included
  cap: jax.Array  # [K] the sentence's length cap
  active: jax.Array  # [K] bool: the slot holds a sentence


class LoopState(NamedTuple):
  """The search's device state (module docstring); row index N and slot rows N mean 'none'."""
  score: jax.Array  # [N] float64 joint log-prob of each row
  term: jax.Array  # [N] float64 its terminal (and EOS) tokens only
  grammar: GrammarState  # [N]
  hist: jax.Array  # [N, T] int32 sentence tokens of each row
  hist_kind: jax.Array  # [N, T] int32
  owner: jax.Array  # [N] int32 slot holding each row (-1: free)
  front: jax.Array  # [K, F] int32 frontier rows, in order
  front_n: jax.Array  # [K]
  pool: jax.Array  # [K, P] int32 pool rows, best first
  pool_n: jax.Array  # [K]
  words: SlotWords
  steps: jax.Array  # [K] int64 counters of the sentence in the slot (`BeamResult`)
  expansions: jax.Array
  pruned: jax.Array


def _compact(values_KX, keep_KX, width: int, fill):
  """Per slot, the kept entries of values_KX in order, then `fill` → ([K, width], counts [K])."""
  K = values_KX.shape[0]
  position = jnp.where(keep_KX, jnp.cumsum(keep_KX, axis=1) - 1, width)
  out = jnp.full((K, width), fill, values_KX.dtype).at[
      jnp.arange(K)[:, None], position].set(values_KX, mode="drop")
  return out, jnp.sum(keep_KX, axis=1, dtype=jnp.int32)


def _signless_zero(x):
  """x with −0 replaced by 0, so XLA's total float order ranks them equal, as numpy does."""
  return jnp.where(x == 0, 0.0, x)


def top_k(values_KX, k: int) -> jax.Array:
  """Indices [K, k] of the k largest of each row of float64 values_KX, best first, ties by lower
  index (`beam_batch.top_k`'s rule, and `lax.top_k`'s), exactly. XLA:CPU has no fast float64
  top-k (it sorts the whole row: ~24 ms for 8 × 9,240 against 1.7 ms in float32), so the
  float32 top-(2k+16) are taken first and sorted in float64 (by index first, so the stable sort
  breaks ties by it). Float32 rounding is monotone, so they hold the true top k whenever the
  least float32 value among them is below the float32 value of the k-th (or fewer than k values
  are finite); otherwise (float32 ties that wide) the whole row is sorted in float64. −0 ranks
  as 0 (numpy's order; XLA sorts floats totally). Each top-k output has one user: XLA:CPU keeps
  its fast top-k only then (a conditional or a second reader of the top-k turns it into a
  sort)."""
  values_KX = _signless_zero(values_KX)
  X = values_KX.shape[1]
  k = min(k, X)
  wide = min(X, 2 * k + 16)
  _, index = jax.lax.top_k(values_KX.astype(jnp.float32), wide)
  index = jnp.sort(index, axis=1)
  value = jnp.take_along_axis(values_KX, index, axis=1)
  order = jnp.argsort(-value, axis=1, stable=True)[:, :k]
  kth = jnp.take_along_axis(value, order[:, k - 1:], axis=1)[:, 0].astype(jnp.float32)
  holds = (kth == -jnp.inf) | (jnp.min(value.astype(jnp.float32), axis=1) < kth) | (wide == X)
  return jax.lax.cond(
      jnp.all(holds), lambda best, _: best,
      lambda best, whole: jnp.argsort(-whole, axis=1, stable=True)[:, :k].astype(best.dtype),
      jnp.take_along_axis(index, order, axis=1), values_KX)


def _in_x64(fn):
  """`fn` called with 64-bit types on (the loop's float64 scores); the decoder's own calls
  (prefixes, compactions) stay outside, as the host searches make them."""
  @functools.wraps(fn)
  def call(*args, **kwargs):
    with jax.enable_x64(True):
      return fn(*args, **kwargs)
  return call


def _rows_set(array, rows, values):
  """array[rows] = values, rows of index len(array) dropped."""
  return array.at[rows].set(values, mode="drop")


class WordLoop:
  """The compiled functions of one searcher on one decoder with K slots (module docstring)."""

  def __init__(self, searcher, decoder, slots: int, widest: int):
    self.searcher, self.grammar, self.decoder = searcher, searcher.grammar, decoder
    # Every sentence the decoder holds fits: its tokens and open constituents (one shape per
    # decoder, so searches of other sentences reuse the compiled loop).
    self.K, self.N, self.depth, self.widest = int(slots), decoder.batch, decoder.max_len + 2, int(
        widest)
    self.P = searcher.word_beam
    self.M = searcher.beam + searcher.fast_track  # most candidates kept per slot and round
    self.F = max(self.P, self.M)
    self.eos_id = searcher.tokenizer.eos_id
    # The most arena slots one round writes: a step per token position of an expansion, each
    # its rows and the padding of a chunk.
    self.positions = max(self.grammar.copies, self.widest)
    self.round_slots = self.positions * (self.K * self.M + decoder.chunk_rows)
    self.rounds = _in_x64(jax.jit(self._rounds, donate_argnums=(1, 2, 4)))
    self.begin = _in_x64(jax.jit(self._begin, donate_argnums=(0,)))
    self.read_pools = _in_x64(jax.jit(self._read_pools))
    self.read_rows = _in_x64(jax.jit(self._read_rows))
    self.held_lengths = _in_x64(jax.jit(
        lambda cache, state: jnp.where(state.owner >= 0, cache.length, 0)))

  # ---- state

  @_in_x64
  def initial(self) -> LoopState:
    """Every row free, every slot idle."""
    N, K, T = self.N, self.K, self.depth - 1
    zeros = lambda *shape, dtype=jnp.int64: jnp.zeros(shape, dtype)
    grammar = GrammarState(zeros(N), zeros(N), jnp.full((N,), START, jnp.int64), zeros(N),
                           zeros(N, self.depth, dtype=jnp.int16))
    words = SlotWords(zeros(K, self.widest), jnp.ones((K,), jnp.int64), zeros(K),
                      zeros(K, dtype=bool), zeros(K), zeros(K), zeros(K, dtype=bool))
    return LoopState(zeros(N, dtype=jnp.float64), zeros(N, dtype=jnp.float64), grammar,
                     zeros(N, T, dtype=jnp.int32), zeros(N, T, dtype=jnp.int32),
                     jnp.full((N,), -1, jnp.int32), jnp.full((K, self.F), N, jnp.int32),
                     zeros(K, dtype=jnp.int32), jnp.full((K, self.P), N, jnp.int32),
                     zeros(K, dtype=jnp.int32), words, zeros(K), zeros(K), zeros(K))

  # ---- the rounds (one compiled call)

  def _rounds(self, params, cache: DecoderCache, logprobs_NV, free, state: LoopState):
    """Rounds of every slot until some slot's word ends or the arena is short of room →
    (cache, logprobs, free, state)."""
    model = nnx.merge(self.decoder.graphdef.graphdef, params)
    arena = cache.k[0].shape[0]

    def going(carry):
      _, _, free_, st = carry
      w = st.words
      return (jnp.any(w.active) & ~jnp.any(w.active & (st.front_n == 0))
              & (free_ + self.round_slots <= arena))

    def body(carry):
      return self._prune(self._round(model, *carry))

    return jax.lax.while_loop(going, body, self._prune((cache, logprobs_NV, free, state)))

  def _prune(self, carry):
    """Depth-first continuation: frontier rows not above their slot's P-th pool score leave."""
    cache, logprobs_NV, free, st = carry
    N, P, F = self.N, self.P, self.F
    listed = jnp.arange(F)[None, :] < st.front_n[:, None]
    threshold = jnp.where(st.pool_n >= P, st.score[jnp.minimum(st.pool[:, P - 1], N - 1)],
                          -jnp.inf)
    keep = listed & (st.score[jnp.minimum(st.front, N - 1)] > threshold[:, None])
    dropped = listed & ~keep
    front, front_n = _compact(st.front, keep, F, N)
    st = st._replace(owner=_rows_set(st.owner, jnp.where(dropped, st.front, N), -1),
                     front=front, front_n=front_n,
                     pruned=st.pruned + jnp.sum(dropped, axis=1))
    return cache, logprobs_NV, free, st

  def _select(self, cand_KX):
    """(flat candidate index [K, M], kept [K, M]) per slot: the sub-beam (its `beam` best, ties by
    flat index) then the fast track's word candidates not in it (`beam_batch.select_per_slot`)."""
    searcher, C = self.searcher, self.grammar.n_slots
    K, X = cand_KX.shape
    finite = jnp.sum(jnp.isfinite(cand_KX), axis=1)
    sub = top_k(cand_KX, searcher.beam)
    sub_ok = jnp.arange(sub.shape[1])[None, :] < jnp.minimum(finite, searcher.beam)[:, None]
    chosen, ok = [sub], [sub_ok]
    if searcher.fast_track:
      word = (jnp.arange(X) % C) == self.grammar.word_slot
      words_KX = jnp.where(word[None, :], cand_KX, -jnp.inf)
      fast = top_k(words_KX, searcher.fast_track)
      in_sub = jnp.zeros((K, X), bool).at[jnp.arange(K)[:, None], sub].set(sub_ok)
      chosen.append(fast)
      ok.append(jnp.isfinite(jnp.take_along_axis(words_KX, fast, axis=1))
                & ~jnp.take_along_axis(in_sub, fast, axis=1))
    flat, kept = _compact(jnp.concatenate(chosen, axis=1), jnp.concatenate(ok, axis=1), self.M, 0)
    return flat, kept, finite

  def _round(self, model, cache: DecoderCache, logprobs_NV, free, st: LoopState):
    grammar, decoder = self.grammar, self.decoder
    N, K, F, M, C = self.N, self.K, self.F, self.M, grammar.n_slots
    w = st.words
    listed = jnp.arange(F)[None, :] < st.front_n[:, None]
    rows = jnp.minimum(st.front, N - 1).reshape(-1)  # [K·F]
    slot_of = jnp.repeat(jnp.arange(K), F)
    parent = jax.tree.map(lambda a: a[rows], st.grammar)
    ids = grammar.slot_token_ids(parent, w.ids[slot_of, 0], xp=jnp)
    valid = grammar.valid(parent, at_end=w.at_end[slot_of], remaining=w.remaining[slot_of],
                          word_len=w.length[slot_of], cap=w.cap[slot_of], xp=jnp)
    lp = logprobs_NV[rows[:, None], ids.astype(jnp.int32)].astype(jnp.float64)
    ok = valid & jnp.isfinite(lp) & listed.reshape(-1)[:, None]
    cand = jnp.where(ok, st.score[rows][:, None] + lp, -jnp.inf).reshape(K, F * C)
    flat, kept, finite = self._select(cand)
    chosen = jnp.arange(M)[None, :] < kept[:, None]  # [K, M]
    f, c = flat // C, flat % C
    source = jnp.where(chosen, jnp.take_along_axis(st.front, f, axis=1), N).astype(jnp.int32)
    # Frontier rows with no kept successor are free again.
    expanded = jnp.zeros((N + 1,), bool).at[source].set(True)[st.front]
    owner = _rows_set(st.owner, jnp.where(listed & ~expanded, st.front, N), -1)
    # A parent's first successor keeps its row; the others take free rows, slot by slot.
    index = jnp.broadcast_to(jnp.arange(M)[None, :], (K, M))
    first = jnp.full((K, F), M).at[jnp.arange(K)[:, None], jnp.where(chosen, f, F)].min(
        index, mode="drop")
    keeps_row = chosen & (jnp.take_along_axis(first, f, axis=1) == index)
    moves = chosen & ~keeps_row
    rank = (jnp.cumsum(moves.reshape(-1)) - 1).reshape(K, M)
    free_rows = jnp.nonzero(owner < 0, size=N, fill_value=N)[0]
    new = jnp.where(keeps_row, source, jnp.where(moves, free_rows[jnp.clip(rank, 0, N - 1)],
                                                 N)).astype(jnp.int32)
    owner = _rows_set(owner, jnp.where(moves, new, N), jnp.broadcast_to(
        jnp.arange(K, dtype=jnp.int32)[:, None], (K, M)))
    # Per kept candidate, flattened [K·M].
    new_m, source_m, moves_m = new.reshape(-1), jnp.minimum(source, N - 1).reshape(-1), \
        moves.reshape(-1)
    chosen_m, c_m, slot_m = chosen.reshape(-1), c.reshape(-1), jnp.repeat(jnp.arange(K), M)
    pick = lambda a_KX: jnp.take_along_axis(a_KX, flat, axis=1).reshape(-1)
    lp_m = pick(lp.reshape(K, F * C))
    is_word = c_m == grammar.word_slot
    at_end, word_len = w.at_end[slot_m], w.length[slot_m]
    parent_m = jax.tree.map(lambda a: a[source_m], st.grammar)
    advanced = grammar.advance(parent_m, c_m, at_end=at_end, word_len=word_len, xp=jnp)
    state_grammar = jax.tree.map(lambda a, b: _rows_set(a, new_m, b.astype(a.dtype)),
                                 st.grammar, advanced)
    score = _rows_set(st.score, new_m, pick(cand))
    term = _rows_set(st.term, new_m, st.term[source_m] + jnp.where(is_word, lp_m, 0.0))
    copy = lambda a: _rows_set(a, jnp.where(moves_m, new_m, N), a[source_m])
    cache = cache._replace(path=copy(cache.path), kind=copy(cache.kind), pop=copy(cache.pop),
                           length=copy(cache.length))
    hist, hist_kind = copy(st.hist), copy(st.hist_kind)
    tokens, kinds, scored, count = grammar.expand_rows(
        c_m, pick(ids.reshape(K, F * C)), w.ids[slot_m], word_len, w.kind[slot_m], xp=jnp)
    eos = is_word & at_end
    count = jnp.where(eos | ~chosen_m, 0, count)  # EOS is scored, never fed
    used = parent_m.length  # sentence tokens before the new ones

    def feed(k, carry):  # token k of every expansion that has one (`beam_feed`'s rounds)
      cache_, logprobs_, free_, score_, term_, hist_, hist_kind_ = carry
      live = count > k
      target = jnp.where(live, new_m, N)
      token_k = jnp.take(tokens, k, axis=1)
      got = logprobs_[jnp.minimum(new_m, N - 1), token_k.astype(jnp.int32)]
      gained = jnp.where(jnp.take(scored, k, axis=1) & (k > 0), got.astype(jnp.float64), 0.0)
      score_ = score_.at[target].add(gained, mode="drop")
      term_ = term_.at[target].add(jnp.where(is_word, gained, 0.0), mode="drop")
      fed = jnp.stack([target, token_k, jnp.take(kinds, k, axis=1)]).astype(jnp.int32)
      cache_, logprobs_ = step_fed(model, decoder.groups, decoder.widths, cache_, logprobs_,
                                   fed, free_, decoder.chunk_rows)
      at = (target, used + k)
      return (cache_, logprobs_, free_ + jnp.sum(live, dtype=free_.dtype),
              score_, term_, hist_.at[at].set(token_k.astype(jnp.int32), mode="drop"),
              hist_kind_.at[at].set(jnp.take(kinds, k, axis=1).astype(jnp.int32), mode="drop"))

    cache, logprobs_NV, free, score, term, hist, hist_kind = jax.lax.fori_loop(
        0, jnp.max(count), feed, (cache, logprobs_NV, free, score, term, hist, hist_kind))
    ended = (jnp.where(eos & chosen_m, new_m, N), used)
    hist = hist.at[ended].set(self.eos_id, mode="drop")
    hist_kind = hist_kind.at[ended].set(int(Kind.EOS), mode="drop")
    # Each slot's pool ← its best P of pool ∪ the new word rows (stable: the pool first).
    word_rows = jnp.where((is_word & chosen_m).reshape(K, M), new, N)
    pooled = jnp.arange(self.P)[None, :] < st.pool_n[:, None]
    rows_all = jnp.concatenate([jnp.where(pooled, st.pool, N), word_rows], axis=1)
    present = rows_all < N
    key = jnp.where(present, -_signless_zero(score[jnp.minimum(rows_all, N - 1)]), jnp.inf)
    order = jnp.argsort(key, axis=1, stable=True)
    rows_all = jnp.take_along_axis(rows_all, order, axis=1)
    present = jnp.take_along_axis(present, order, axis=1)
    dropped = present & (jnp.arange(rows_all.shape[1])[None, :] >= self.P)
    owner = _rows_set(owner, jnp.where(dropped, rows_all, N), -1)
    front, front_n = _compact(new, chosen & ~(c == grammar.word_slot), F, N)
    steps = jnp.max(count.reshape(K, M), axis=1)
    st = st._replace(score=score, term=term, grammar=state_grammar, hist=hist,
                     hist_kind=hist_kind, owner=owner, front=front, front_n=front_n,
                     pool=rows_all[:, :self.P],
                     pool_n=jnp.minimum(jnp.sum(present, axis=1, dtype=jnp.int32), self.P),
                     steps=st.steps + steps, expansions=st.expansions + kept,
                     pruned=st.pruned + finite - kept + jnp.sum(dropped, axis=1))
    return cache, logprobs_NV, free, st

  # ---- the host's edits and reads

  def _begin(self, st: LoopState, next_word_K, stop_K, start_row_K, words: SlotWords):
    """Slots with `next_word_K` search their next word from their pool; slots with `stop_K`
    release their pool (their sentence is done); a slot with a start row (< N; started on its
    prefix by `IncrementalDecoder.start_rows`) begins a sentence there. `words`: every slot's."""
    N, K, P, F = self.N, self.K, self.P, self.F
    pooled = jnp.arange(P)[None, :] < st.pool_n[:, None]
    as_front = jnp.full((K, F), N, jnp.int32).at[:, :P].set(jnp.where(pooled, st.pool, N))
    front = jnp.where(next_word_K[:, None], as_front, st.front)
    front_n = jnp.where(next_word_K, st.pool_n, jnp.where(stop_K, 0, st.front_n))
    owner = _rows_set(st.owner, jnp.where(stop_K[:, None] & pooled, st.pool, N), -1)
    pool_n = jnp.where(next_word_K | stop_K, 0, st.pool_n)
    starts = start_row_K < N
    row = jnp.where(starts, start_row_K, N)
    owner = _rows_set(owner, row, jnp.arange(K, dtype=jnp.int32))
    fresh = GrammarState(jnp.zeros(K, jnp.int64), jnp.zeros(K, jnp.int64),
                         jnp.full((K,), START, jnp.int64), jnp.zeros(K, jnp.int64),
                         jnp.zeros((K, self.depth), jnp.int16))
    grammar = jax.tree.map(lambda a, b: _rows_set(a, row, b), st.grammar, fresh)
    front = jnp.where(starts[:, None], jnp.full((K, F), N, jnp.int32).at[:, 0].set(row), front)
    front_n = jnp.where(starts, 1, front_n)
    reset = lambda counter: jnp.where(starts, 0, counter)
    return st._replace(
        score=_rows_set(st.score, row, 0.0), term=_rows_set(st.term, row, 0.0), grammar=grammar,
        hist=_rows_set(st.hist, row, 0), hist_kind=_rows_set(st.hist_kind, row, 0), owner=owner,
        front=front, front_n=front_n, pool_n=pool_n, words=words, steps=reset(st.steps),
        expansions=reset(st.expansions), pruned=reset(st.pruned))

  def _read_pools(self, st: LoopState):
    """Each slot's pool rows with their scores and the best one's history, and the counters."""
    rows = jnp.minimum(st.pool, self.N - 1)
    best = rows[:, 0]
    return (st.pool_n, st.score[rows], st.term[rows], st.hist[best], st.hist_kind[best],
            st.front_n, st.steps, st.expansions, st.pruned)

  def _read_rows(self, st: LoopState, slot):
    """The histories of the slot's pool rows [P, T] (the EOS step lists them all)."""
    rows = jnp.minimum(st.pool[slot], self.N - 1)
    return st.hist[rows], st.hist_kind[rows]


class LoopSearch:
  """The search of `sentences` by `searcher`'s rules with the word loop compiled (module
  docstring); iterate it for (index, BeamResult) pairs as sentences finish. `prefixes[i]` =
  (ids, kinds) before sentence i (default BOS)."""

  def __init__(self, searcher, sentences: SequenceT[SequenceT[str]], *, complete: bool = True,
               prefixes=None, concurrent: int = 8):
    self.searcher, self.complete = searcher, bool(complete)
    self.queue, self.decoder, self.slots = sentence_queue(searcher, sentences, complete, prefixes,
                                                          concurrent)
    if self.decoder is None:
      return
    widest = max(max(map(len, s.pieces)) for s in self.queue)
    self.loop = searcher.word_loop(self.decoder, self.slots, widest)
    self.held = [None] * self.slots
    K, W = self.slots, self.loop.widest
    self.words = dict(ids=np.zeros((K, W), np.int64), length=np.ones(K, np.int64),
                      kind=np.zeros(K, np.int64), at_end=np.zeros(K, bool),
                      remaining=np.zeros(K, np.int64), cap=np.zeros(K, np.int64),
                      active=np.zeros(K, bool))

  def __iter__(self) -> Iterator[tuple[int, BeamResult]]:
    if self.decoder is None:
      return
    loop, decoder, K, N = self.loop, self.decoder, self.slots, self.decoder.batch
    state = loop.initial()
    state = self._start(state, list(range(K)))
    while self.words["active"].any():
      decoder.cache, decoder._logprobs, free, state = loop.rounds(
          decoder.params, decoder.cache, decoder._logprobs, np.int32(decoder.free), state)
      decoder.free = int(free)
      (pool_n, score, term, best_hist, best_kind, front_n, steps, expansions,
       pruned) = jax.device_get(loop.read_pools(state))
      ended = [k for k in range(K) if self.words["active"][k] and front_n[k] == 0]
      if not ended:  # the arena is short of room: compact it (grow it if that is not enough)
        decoder.lengths = np.asarray(loop.held_lengths(decoder.cache, state), np.int64)
        decoder._make_room(loop.round_slots)
        continue
      next_word, stop, finished = np.zeros(K, bool), np.zeros(K, bool), []
      for k in ended:
        sentence, n = self.held[k], int(pool_n[k])
        hist, kinds = best_hist[k:k + 1], best_kind[k:k + 1]
        if sentence.w == len(sentence.words) and n:  # the EOS step lists every hypothesis
          hist, kinds = jax.device_get(loop.read_rows(state, np.int32(k)))
          hist, kinds = hist[:n], kinds[:n]
        done = record_word(self.searcher, sentence, self.complete, score[k, :n],
                           term[k, :n], hist.astype(np.int64), kinds.astype(np.int64))
        if done:
          out = sentence.result
          out.steps, out.expansions, out.pruned = int(steps[k]), int(expansions[k]), int(
              pruned[k])
          finished.append((sentence.index, out))
          stop[k] = True
          self.words["active"][k] = False
        else:
          next_word[k] = True
          self._set_word(k)
      state = loop.begin(state, next_word, stop, np.full(K, N, np.int32), self._slot_words())
      yield from finished
      if stop.any() and self.queue:
        state = self._start(state, list(np.flatnonzero(stop)))
    decoder.lengths = np.zeros(N, np.int64)  # every row is free again

  def _start(self, state: LoopState, slots: list[int]) -> LoopState:
    """The next sentences of the queue take `slots` (a free row each, started on its prefix)."""
    loop, decoder, N = self.loop, self.decoder, self.decoder.batch
    decoder.lengths = np.asarray(loop.held_lengths(decoder.cache, state), np.int64) if (
        decoder.cache is not None) else np.zeros(N, np.int64)
    owner = np.asarray(state.owner)
    start_row = np.full(self.slots, N, np.int32)
    for k in slots:
      if not self.queue:
        break
      sentence = self.held[k] = self.queue.pop(0)
      row = int(np.flatnonzero((owner < 0) & (np.arange(N) != start_row[:, None]).all(0))[0])
      start_row[k] = row
      decoder.start_rows([row], sentence.prefix_ids, sentence.prefix_kinds)
      self.words["cap"][k] = sentence.cap
      self.words["active"][k] = True
      self._set_word(k)
    none = np.zeros(self.slots, bool)
    return loop.begin(state, none, none, start_row, self._slot_words())

  def _set_word(self, slot: int) -> None:
    sentence, words = self.held[slot], self.words
    at_end = sentence.w == len(sentence.words)
    ids = (self.searcher.tokenizer.eos_id,) if at_end else sentence.pieces[sentence.w]
    words["at_end"][slot] = at_end
    words["remaining"][slot] = sentence.remaining
    words["ids"][slot] = 0
    words["ids"][slot, :len(ids)] = ids
    words["length"][slot] = len(ids)
    words["kind"][slot] = int(Kind.EOS if at_end else Kind.TERMINAL)

  def _slot_words(self) -> SlotWords:
    return SlotWords(**{name: np.array(value) for name, value in self.words.items()})
