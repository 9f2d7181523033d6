"""Batched word-synchronous beam search: the beams of many sentences advanced together (issue #35).

`BeamSearcher.search` (the one-sentence search, `beam`) feeds one sentence's
hypotheses per decoder step and does its bookkeeping per sentence. `BatchedSearch` runs the same
search (SPEC §9: fast track ∪ sub-beam, depth-first continuation, the length cap with reserved
closings; module docstring of `beam`) for `concurrent` sentences at once in one decoder of
`concurrent` × `capacity` rows:

  slots      each sentence in flight holds a slot: its own word position, pool, frontier, cap
             and counters; a finished sentence's rows are released and its slot is refilled
             from the queue (longest first, so the sentences in flight have similar lengths and
             every step reads few cache slots)
  a round    one expansion round of every slot: one `gather` of the candidates' log-probs for
             all frontiers, candidate validity for all of them (`Grammar.valid` with a word,
             cap and end flag per row), the selection per slot (`select_per_slot`:
             partial selection within each slot's candidates, no sort of all of them), one
             `copy_rows` for every fork, one `step_rows` per token position for every kept
             candidate, and the pool merge per slot (a stable sort by (slot, score))
  results    per sentence exactly those of `BeamSearcher.search`: the same hypotheses in the
             same order, the same scores bit for bit (the decoder computes every row the same
             way whatever else a step feeds, `incremental`), the same counters
             (`steps`: the steps the sentence took part in)

Rows are the decoder's; which row holds a hypothesis does not change its numbers. The
one-sentence search stays as the oracle (tests/test_beam_batch.py compares the two).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Sequence as SequenceT

import numpy as np

from slm_jax.inference.beam_feed import feed_expansions
from slm_jax.inference.beam_result import BeamResult
from slm_jax.inference.grammaticality import GrammarState
from slm_jax.inference.scorer import logsumexp
from slm_jax.kinds import Kind


@dataclasses.dataclass
class _Sentence:
  """One sentence of the queue and its result so far."""
  index: int  # position in the caller's list
  words: list[str]
  pieces: list[tuple[int, ...]]
  cap: int
  prefix_ids: np.ndarray
  prefix_kinds: np.ndarray
  result: BeamResult
  w: int = 0  # the word being searched (len(words): the EOS step)
  remaining: int = 0  # pieces of the words not yet emitted (the current one included)


def segment_ranks(slot_sorted: np.ndarray) -> np.ndarray:
  """Rank of each entry within its run of equal values (the array is grouped by value)."""
  n = len(slot_sorted)
  if not n:
    return np.zeros(0, np.int64)
  starts = np.flatnonzero(np.r_[True, slot_sorted[1:] != slot_sorted[:-1]])
  return np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))


class SlotRows:
  """Rows of one decoder shared by slots (the sentences, or articles, in flight): the
  bookkeeping `BatchedSearch` and `generate_batch` share. Needs `decoder`, `slots`,
  `owner` [N] (the slot holding each row, -1 free), `score` [N], `hist` / `hist_kind` [N, T],
  and the frontier and pool rows with their slots (`front_rows`, `front_slot`, `pool_rows`,
  `pool_slot`; the pools grouped by slot, each best first)."""

  def _add_front(self, rows, slots) -> None:
    rows = np.concatenate([self.front_rows, rows])
    slots = np.concatenate([self.front_slot, slots])
    order = np.argsort(slots, kind="stable")
    self.front_rows, self.front_slot = rows[order], slots[order]

  def _release(self, rows) -> None:
    self.owner[rows] = -1
    self.decoder.release(rows)

  def _above_pools(self, width: int) -> np.ndarray:
    """Depth-first continuation: which frontier rows score above their slot's `width`-th pool
    hypothesis (every row of a slot whose pool is not full)."""
    counts = np.bincount(self.pool_slot, minlength=self.slots)
    threshold = np.full(self.slots, -np.inf)
    full = np.flatnonzero(counts >= width)
    start = np.cumsum(counts) - counts
    threshold[full] = self.score[self.pool_rows[start[full] + width - 1]]
    return self.score[self.front_rows] > threshold[self.front_slot]

  def _place(self, source: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Rows for the successors of `source` rows: each parent's first successor takes the
    parent's row, the others copy their parent into free rows (`BeamSearcher._place`)."""
    m = len(source)
    _, first = np.unique(source, return_index=True)
    reuse = np.zeros(m, bool)
    reuse[first] = True
    new = source.copy()
    free = np.flatnonzero(self.owner < 0)[:m - len(first)]
    new[~reuse] = free
    self.owner[free] = slot[~reuse]
    self.decoder.copy_rows(free, source[~reuse])  # reads every source before writing
    self.hist[free], self.hist_kind[free] = self.hist[source[~reuse]], self.hist_kind[
        source[~reuse]]
    return new

  def _merge_pools(self, rows: np.ndarray, slots: np.ndarray, width: int) -> np.ndarray:
    """Each slot's pool ← its best `width` of pool ∪ new rows (stable: the pool first, then
    the new ones in their kept order); returns the slots of the rows dropped (released)."""
    rows = np.concatenate([self.pool_rows, rows])
    slots = np.concatenate([self.pool_slot, slots])
    order = np.lexsort((np.arange(len(rows)), -self.score[rows], slots))
    rows, slots = rows[order], slots[order]
    keep = segment_ranks(slots) < width
    self._release(rows[~keep])
    self.pool_rows, self.pool_slot = rows[keep], slots[keep]
    return slots[~keep]


class BatchedSearch(SlotRows):
  """The batched search of `sentences` by `searcher`'s rules (module docstring); iterate it for
  (index, BeamResult) pairs as sentences finish. `prefixes[i]` = (ids, kinds) before sentence i
  (default BOS)."""

  def __init__(self, searcher: "BeamSearcher", sentences: SequenceT[SequenceT[str]], *,
               complete: bool = True, prefixes=None, concurrent: int = 8):
    self.searcher, self.grammar, self.complete = searcher, searcher.grammar, bool(complete)
    self.queue, self.decoder, self.slots = sentence_queue(searcher, sentences, complete, prefixes,
                                                          concurrent)
    if self.decoder is None:
      return
    queue = self.queue
    n = self.decoder.batch
    depth = max(s.cap for s in queue) + 2
    self.state = GrammarState.initial(n, depth)
    self.score, self.term = np.zeros(n), np.zeros(n)
    self.hist = np.zeros((n, depth - 1), np.int64)
    self.hist_kind = np.zeros((n, depth - 1), np.int64)
    self.owner = np.full(n, -1, np.int64)  # the slot holding each row (-1: free)
    widest = max(max(map(len, s.pieces)) for s in queue)
    K = self.slots
    self.held: list[_Sentence | None] = [None] * K
    self.at_end = np.zeros(K, bool)
    self.remaining = np.zeros(K, np.int64)
    self.cap = np.zeros(K, np.int64)
    self.word_ids = np.zeros((K, widest), np.int64)
    self.word_len = np.ones(K, np.int64)
    self.word_kind = np.full(K, int(Kind.TERMINAL), np.int64)
    self.steps, self.expansions, self.pruned = (np.zeros(K, np.int64) for _ in range(3))
    empty = np.zeros(0, np.int64)
    self.front_rows, self.front_slot, self.pool_rows, self.pool_slot = empty, empty, empty, empty
    self.finished: list[tuple[int, BeamResult]] = []

  # ---- the loop

  def __iter__(self) -> Iterator[tuple[int, BeamResult]]:
    if self.decoder is None:
      return
    for slot in range(self.slots):
      self._start(slot)
    while True:
      self._settle()
      yield from self.finished
      self.finished = []
      if not len(self.front_rows):
        return
      self._round()

  def _start(self, slot: int) -> None:
    """The next sentence of the queue takes `slot` (one row holding its prefix)."""
    if not self.queue:
      self.held[slot] = None
      return
    sentence = self.held[slot] = self.queue.pop(0)
    row = int(np.flatnonzero(self.owner < 0)[0])
    self.owner[row] = slot
    self.state.put([row], GrammarState.initial(1, self.state.stack.shape[1]))
    self.score[row] = self.term[row] = 0.0
    self.hist[row] = self.hist_kind[row] = 0
    self.decoder.start_rows([row], sentence.prefix_ids, sentence.prefix_kinds)
    self.cap[slot] = sentence.cap
    self.steps[slot] = self.expansions[slot] = self.pruned[slot] = 0
    self._set_word(slot)
    self._add_front(np.asarray([row]), np.asarray([slot]))

  def _set_word(self, slot: int) -> None:
    sentence = self.held[slot]
    at_end = sentence.w == len(sentence.words)
    ids = (self.searcher.tokenizer.eos_id,) if at_end else sentence.pieces[sentence.w]
    self.at_end[slot] = at_end
    self.remaining[slot] = sentence.remaining
    self.word_ids[slot] = 0
    self.word_ids[slot, :len(ids)] = ids
    self.word_len[slot] = len(ids)
    self.word_kind[slot] = int(Kind.EOS if at_end else Kind.TERMINAL)

  def _settle(self) -> None:
    """Depth-first continuation on every frontier; slots whose frontier is empty end their
    word (and their sentence, refilled from the queue) until every slot in flight has one."""
    while True:
      above = self._above_pools(self.searcher.word_beam)
      if not above.all():
        self.pruned += np.bincount(self.front_slot[~above], minlength=self.slots)
        self._release(self.front_rows[~above])
        self.front_rows, self.front_slot = self.front_rows[above], self.front_slot[above]
      waiting = np.zeros(self.slots, bool)
      waiting[self.front_slot] = True
      ended = [k for k in range(self.slots) if self.held[k] is not None and not waiting[k]]
      if not ended:
        return
      for slot in ended:
        self._end_word(slot)

  def _end_word(self, slot: int) -> None:
    """The slot's pool is its beam after the word: record it, then start the next word (the
    pool becomes the frontier) or finish the sentence."""
    sentence, out = self.held[slot], self.held[slot].result
    mine = self.pool_slot == slot
    pool = self.pool_rows[mine]
    self.pool_rows, self.pool_slot = self.pool_rows[~mine], self.pool_slot[~mine]
    done = record_word(self.searcher, sentence, self.complete, self.score[pool],
                       self.term[pool], self.hist[pool], self.hist_kind[pool])
    if done:
      out.steps, out.expansions, out.pruned = (int(a[slot]) for a in (self.steps,
                                                                     self.expansions,
                                                                     self.pruned))
      self.finished.append((sentence.index, out))
      self._release(pool)
      self._start(slot)
    else:
      self._set_word(slot)
      self._add_front(pool, np.full(len(pool), slot))

  # ---- one expansion round of every slot

  def _round(self) -> None:
    grammar, decoder, n = self.grammar, self.decoder, self.decoder.batch
    front, front_slot = self.front_rows, self.front_slot
    parent = self.state.take(front)
    ids = grammar.slot_token_ids(parent, self.word_ids[front_slot, 0])
    valid = grammar.valid(parent, at_end=self.at_end[front_slot],
                          remaining=self.remaining[front_slot],
                          word_len=self.word_len[front_slot], cap=self.cap[front_slot])
    query = np.zeros((n, grammar.n_slots), np.int64)
    query[front] = ids
    lp = decoder.gather(query)[front]
    cand = np.where(valid & np.isfinite(lp), self.score[front, None] + lp, -np.inf)
    f, c = self._select(cand, front_slot)
    slot = front_slot[f]
    finite = np.isfinite(cand).sum(axis=1)
    self.pruned += (np.bincount(front_slot, weights=finite, minlength=self.slots).astype(np.int64)
                    - np.bincount(slot, minlength=self.slots))
    is_word = c == grammar.word_slot
    parent_term = self.term[front[f]] + np.where(is_word, lp[f, c], 0.0)
    source = front[f]
    expanded = np.zeros(n, bool)
    expanded[source] = True
    self._release(front[~expanded[front]])  # frontier hypotheses with no kept successor
    new = self._place(source, slot)
    at_end = self.at_end[slot]
    self.state.put(new, grammar.advance(parent.take(f), c, at_end=at_end,
                                        word_len=self.word_len[slot]))
    self.score[new] = cand[f, c]
    self.term[new] = parent_term
    tokens, kinds, scored, count = grammar.expand_rows(c, ids[f, c], self.word_ids[slot],
                                                       self.word_len[slot], self.word_kind[slot])
    eos = is_word & at_end
    count[eos] = 0  # EOS is scored, never fed
    rounds = np.zeros(self.slots, np.int64)
    np.maximum.at(rounds, slot, count)
    self.steps += rounds
    used = parent.length[f]  # sentence tokens before the new ones
    feed_expansions(decoder, new, tokens, kinds, scored, count, used, self.hist, self.hist_kind,
                    self.score, term=self.term, term_rows=is_word)
    self.expansions += np.bincount(slot, minlength=self.slots)
    self.hist[new[eos], used[eos]] = self.searcher.tokenizer.eos_id
    self.hist_kind[new[eos], used[eos]] = Kind.EOS
    dropped = self._merge_pools(new[is_word], slot[is_word], self.searcher.word_beam)
    self.pruned += np.bincount(dropped, minlength=self.slots)
    self.front_rows, self.front_slot = new[~is_word], slot[~is_word]

  def _select(self, cand: np.ndarray, front_slot: np.ndarray):
    """(frontier index, candidate slot) of the kept candidates (`select_per_slot` with the
    grammar's word slot as the fast track's columns)."""
    columns = np.arange(cand.shape[1]) == self.grammar.word_slot
    return select_per_slot(cand, front_slot, self.searcher.beam, self.searcher.fast_track,
                           columns)


def sentence_queue(searcher: "BeamSearcher", sentences, complete: bool, prefixes,
                   concurrent: int):
  """The batched searches' set-up: (the sentences as `_Sentence`s, longest first, so those in
  flight have similar lengths; the decoder; how many sentences it advances together), the
  decoder None for no sentences. `prefixes[i]` = (ids, kinds) before sentence i (default BOS)."""
  tok = searcher.tokenizer
  queue = []
  for i, words in enumerate(sentences):
    words = list(words)
    if not words:
      raise ValueError(f"beam search needs at least one word (sentence {i} is empty)")
    if prefixes is None:
      ids, kinds = [tok.bos_id], [int(Kind.BOS)]
    else:
      ids, kinds = prefixes[i]
    pieces = [tuple(tok.encode_word(w)) for w in words]
    cap = searcher.cap(sum(map(len, pieces)))
    result = BeamResult(
        words=words, prefix_logprobs=np.full(len(words), -np.inf),
        sentence_logprob=-math.inf if complete else math.nan,
        terminal_prefix_logprobs=np.full(len(words), -np.inf),
        sentence_terminal_logprob=-math.inf if complete else math.nan, best=[],
        best_complete=None, beam_sizes=np.zeros(len(words), np.int64), cap=cap, steps=0,
        expansions=0)
    queue.append(_Sentence(i, words, pieces, cap, np.asarray(ids), np.asarray(kinds), result,
                           remaining=sum(map(len, pieces))))
  slots = [bucket_slots(searcher, s) for s in queue]
  queue = [queue[i] for i in sorted(range(len(queue)), key=lambda i: -slots[i])]
  if not queue:
    return queue, None, 0
  wanted = searcher.in_flight(max(slots), max(1, min(int(concurrent), len(queue))))
  decoder = searcher.decoder(max(slots), rows=wanted * searcher.capacity)
  return queue, decoder, min(wanted, decoder.batch // searcher.capacity)


def record_word(searcher: "BeamSearcher", sentence: _Sentence, complete: bool, score_P, term_P,
                hist_PT, hist_kind_PT) -> bool:
  """Records the beam after the sentence's current word — its pool, best first: joint and
  terminal scores [P], token histories [P', T] (P' = 1, the best, suffices before the EOS
  step) — into `sentence.result` (`BeamSearcher.search`'s rule) and moves to the next word;
  returns whether the sentence is finished."""
  out, pool = sentence.result, np.arange(len(score_P))
  if sentence.w == len(sentence.words):
    out.sentence_logprob = logsumexp(score_P)
    if len(pool):
      out.sentence_terminal_logprob = float(term_P.max())
      out.best_complete = searcher._symbols(hist_PT, hist_kind_PT, pool)
      out.complete = searcher._completed(hist_PT, hist_kind_PT, score_P, term_P, pool)
    return True
  w = sentence.w
  sentence.remaining -= len(sentence.pieces[w])
  out.beam_sizes[w] = len(pool)
  if not len(pool):
    return True
  out.prefix_logprobs[w] = logsumexp(score_P)
  out.terminal_prefix_logprobs[w] = float(term_P.max())
  out.best.append(searcher._symbols(hist_PT, hist_kind_PT, pool))
  sentence.w += 1
  return sentence.w == len(sentence.words) + int(complete)


def select_per_slot(cand: np.ndarray, front_slot: np.ndarray, beam: int, fast_track: int,
                    fast_columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(row index, column) of the kept candidates of `cand` [rows, columns] (−inf: invalid),
  rows grouped by `front_slot` (non-decreasing), grouped by slot: per slot, the sub-beam (its
  `beam` best, ties by flat index) then the fast-track candidates (columns where
  `fast_columns`) not in it (its `fast_track` best of them), each best first — the one
  selection rule of the word-synchronous searches (`BeamSearcher._select` is the one-slot case).
  Per slot by partial selection (`top_k`): O(candidates), no sort of all of them."""
  columns = cand.shape[1]
  rows = len(front_slot)
  starts = np.flatnonzero(np.r_[True, front_slot[1:] != front_slot[:-1]]) if rows else []
  kept = []
  for a, b in zip(starts, np.r_[starts[1:], rows].astype(np.int64)):  # a loop over slots
    flat = cand[a:b].ravel()
    finite = np.flatnonzero(np.isfinite(flat))
    chosen = top_k(flat, finite, beam)
    if fast_track and len(finite) > len(chosen):
      fast = top_k(flat, finite[fast_columns[finite % columns]], fast_track)
      chosen = np.concatenate([chosen, fast[~np.isin(fast, chosen)]])
    kept.append(chosen + a * columns)
  kept = np.concatenate(kept) if kept else np.zeros(0, np.int64)
  return kept // columns, kept % columns


def top_k(values: np.ndarray, index: np.ndarray, k: int) -> np.ndarray:
  """The `k` entries of `index` with the largest `values[index]`, best first, ties by position
  in `index` (increasing) — `index[np.argsort(-values[index], kind="stable")[:k]]` without
  sorting everything."""
  v = values[index]
  if len(v) > k:
    threshold = np.partition(v, len(v) - k)[len(v) - k]  # the k-th largest value
    above = v > threshold
    at = np.flatnonzero(v == threshold)[:k - int(above.sum())]
    keep = np.flatnonzero(above)
    keep = np.sort(np.concatenate([keep, at]))
    index, v = index[keep], v[keep]
  return index[np.argsort(-v, kind="stable")]


def bucket_slots(searcher: "BeamSearcher", sentence: _Sentence) -> int:
  """Cache slots a sentence asks for (`BeamSearcher.slots`, with its prefix)."""
  return searcher.slots(sentence.words, len(sentence.prefix_ids))
