"""Word-synchronous generation of several summaries at once (issue #35 item 3).

`generate.word_synchronous_generate` generates one article's summary; each of its
decoder steps feeds at most 2·beam + fast_track rows (18 at SPEC §11's beam 6), so a step costs
about what a step of 64 rows does and the per-round host work dominates.
`word_synchronous_generate_many` runs the same search for `concurrent` articles together in one
`IncrementalDecoder` of `concurrent` × (2·beam + fast_track) rows, the way
`beam_batch.BatchedSearch` runs sentences:

  slots    each article in flight holds a slot: its own prompt (`start_rows`), word step, pool,
           frontier, finished hypotheses and counters; a finished article's rows are released
           and its slot is refilled from the queue
  a round  one expansion round of every slot: the candidates of all frontiers at once
           (`generate.tree_candidates`: one `gather`, one piece top-k), the selection per slot
           (`beam_batch.select_per_slot`: sub-beam then the fast track of word starts, the
           one-article order), one `copy_rows` for every fork, one `step_rows` per token
           position, the pool merge per slot (a stable sort by (slot, score))
  a word   a slot whose frontier is empty ends its word step: its pool is its beam; it stops
           (`max_words` reached, no hypothesis left, or the exact early stop) or starts the
           next word from the pool
  results  per article exactly those of the one-article search: the same best hypothesis, text,
           log-prob bit for bit, ranked scores and counters (`steps`: the decoder steps the
           article took part in) — the decoder computes every row the same way whatever else a
           step feeds (`incremental`); tests/test_generate_batch.py compares the two.

Fewer articles are in flight where their decoder's key/value arena (`incremental.arena_bytes`)
would pass the searches' memory budget (`beam.fit_in_memory`, logged).

`recompute=True` (the `RecomputeDecoder` baseline has no per-row prompts) runs the articles one
after another.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from slm_jax.buckets import bucket
from slm_jax.configurations import Configuration
from slm_jax.inference.beam import fit_in_memory
from slm_jax.inference.beam_batch import SlotRows, select_per_slot
from slm_jax.inference.generate import (BEAM, MAX_OPEN, MAX_WORDS, Generation, piece_classes,
                                        prompt_arrays, tree_candidates, tree_generation,
                                        tree_search_setup, word_synchronous_generate)
from slm_jax.inference.grammaticality import GrammarState
from slm_jax.inference.incremental import IncrementalDecoder, arena_bytes
from slm_jax.inference.scorer import LENGTH_BUCKET
from slm_jax.kinds import TERMINAL_CODE
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import Tokenizer

CONCURRENT = 8  # articles generated together


def word_synchronous_generate_many(model: Decoder, tokenizer: Tokenizer,
                                   configuration: Configuration, prompts: Sequence, *,
                                   prompt_kinds: Sequence | None = None, beam: int = BEAM,
                                   max_words: int = MAX_WORDS, max_open: int | None = MAX_OPEN,
                                   max_tokens: int | None = None, fast_track: int = 0,
                                   labels=None, length_penalty: float = 0.0,
                                   recompute: bool = False, concurrent: int = CONCURRENT,
                                   memory_budget: int | None = None) -> list[Generation]:
  """`word_synchronous_generate` of every prompt (a `linearize.Sequence`, or ids with
  `prompt_kinds[i]`), `concurrent` articles together (fewer where their arena would pass
  `memory_budget` bytes), results in the input order (module docstring)."""
  if concurrent < 1:
    raise ValueError(f"generation: concurrent must be >= 1, got {concurrent}")
  options = dict(beam=beam, max_words=max_words, max_open=max_open, max_tokens=max_tokens,
                 fast_track=fast_track, labels=labels, length_penalty=length_penalty)
  kinds = list(prompt_kinds) if prompt_kinds is not None else [None] * len(prompts)
  if len(kinds) != len(prompts):
    raise ValueError(f"{len(prompts)} prompts but {len(kinds)} prompt_kinds")
  if recompute or concurrent <= 1 or len(prompts) <= 1:
    return [word_synchronous_generate(model, tokenizer, configuration, p, prompt_kinds=k,
                                      recompute=recompute, **options)
            for p, k in zip(prompts, kinds)]
  arrays = [prompt_arrays(tokenizer, p, k) for p, k in zip(prompts, kinds)]
  return _BatchedGeneration(model, tokenizer, configuration, arrays, concurrent,
                            memory_budget=memory_budget, **options).run()


class _BatchedGeneration(SlotRows):
  """The batched search of the module docstring over prompts (ids, kinds)."""

  def __init__(self, model, tokenizer, configuration, prompts, concurrent, *, beam, max_words,
               max_open, max_tokens, fast_track, labels, length_penalty, memory_budget=None):
    self.grammar, self.cap = tree_search_setup(
        tokenizer, configuration, beam=beam, max_words=max_words, fast_track=fast_track,
        max_open=max_open, labels=labels, max_tokens=max_tokens)
    self.tokenizer, self.prompts = tokenizer, prompts
    self.beam, self.fast_track, self.max_words = beam, fast_track, max_words
    self.length_penalty = length_penalty
    self.classes = jnp.asarray(piece_classes(tokenizer))
    self.top = min(max(beam, fast_track), tokenizer.base_size)
    width = 2 * beam + fast_track  # one article's rows (word_synchronous_generate's n)
    longest = max(len(ids) for ids, _ in prompts)
    max_len = bucket(longest + self.cap, LENGTH_BUCKET)
    K = self.slots = fit_in_memory(lambda n: arena_bytes(model.config, n * width, max_len),
                                   min(int(concurrent), len(prompts)), "articles",
                                   budget=memory_budget)
    self.decoder = IncrementalDecoder(model, configuration, max_len=max_len, batch=K * width)
    n = self.decoder.batch
    self.state = GrammarState.initial(n, self.cap + 2)
    self.score, self.words = np.zeros(n), np.zeros(n, np.int64)
    self.hist = np.zeros((n, self.cap + 1), np.int64)
    self.hist_kind = np.zeros((n, self.cap + 1), np.int64)
    self.owner = np.full(n, -1, np.int64)  # the slot holding each row (-1: free)
    self.held = [-1] * K  # the prompt index each slot works on (-1: none)
    self.w = np.zeros(K, np.int64)  # the word step of each slot
    self.steps = np.zeros(K, np.int64)
    self.done: list[list] = [[] for _ in range(K)]  # finished (ids, kinds, log-prob, words)
    empty = np.zeros(0, np.int64)
    self.front_rows, self.front_slot, self.pool_rows, self.pool_slot = empty, empty, empty, empty
    self.queue = list(range(len(prompts)))
    self.results: list[Generation | None] = [None] * len(prompts)

  def run(self) -> list[Generation]:
    for slot in range(self.slots):
      self._start(slot)
    while True:
      self._settle()
      if not len(self.front_rows):
        return self.results
      self._round()

  def _start(self, slot: int) -> None:
    """The next prompt of the queue takes `slot` (one row holding the prompt)."""
    if not self.queue:
      self.held[slot] = -1
      return
    index = self.held[slot] = self.queue.pop(0)
    row = int(np.flatnonzero(self.owner < 0)[0])
    self.owner[row] = slot
    self.state.put([row], GrammarState.initial(1, self.state.stack.shape[1]))
    self.score[row], self.words[row] = 0.0, 0
    self.hist[row] = self.hist_kind[row] = 0
    self.decoder.start_rows([row], *self.prompts[index])
    self.w[slot], self.steps[slot], self.done[slot] = 0, 0, []
    self._add_front(np.asarray([row]), np.asarray([slot]))

  def _settle(self) -> None:
    """Depth-first continuation on every frontier (as `word_synchronous_generate`); slots whose
    frontier is empty end their word step until every slot in flight has a frontier."""
    while True:
      above = self._above_pools(self.beam)
      if not above.all():
        self._release(self.front_rows[~above])
        self.front_rows, self.front_slot = self.front_rows[above], self.front_slot[above]
      waiting = np.zeros(self.slots, bool)
      waiting[self.front_slot] = True
      ended = [k for k in range(self.slots) if self.held[k] >= 0 and not waiting[k]]
      if not ended:
        return
      for slot in ended:
        self._end_word(slot)

  def _end_word(self, slot: int) -> None:
    """The slot's pool is its beam after the word step: stop, or start the next word."""
    mine = self.pool_slot == slot
    pool = self.pool_rows[mine]
    self.pool_rows, self.pool_slot = self.pool_rows[~mine], self.pool_slot[~mine]
    done = self.done[slot]
    stop = not len(pool) or self.w[slot] == self.max_words or (
        len(done) >= self.beam and self.length_penalty == 0.0
        and self.score[pool].max() <= np.sort([d[2] for d in done])[-self.beam])
    if not stop:
      self.w[slot] += 1
      self._add_front(pool, np.full(len(pool), slot))
      return
    self.results[self.held[slot]] = tree_generation(self.tokenizer, done, int(self.steps[slot]),
                                                    int(self.w[slot]) + 1, self.length_penalty)
    self._release(pool)
    self._start(slot)

  def _round(self) -> None:
    """One expansion round of every slot (module docstring)."""
    grammar, decoder, ws = self.grammar, self.decoder, self.grammar.word_slot
    front, front_slot = self.front_rows, self.front_slot
    parent = self.state.take(front)
    cand, slot_ids, piece_ids = tree_candidates(
        grammar, decoder, parent, front, self.w[front_slot], self.score, cap=self.cap,
        max_words=self.max_words, classes=self.classes, top=self.top)
    starts = np.zeros(cand.shape[1], bool)
    starts[grammar.n_slots:grammar.n_slots + self.top] = True
    f, c = select_per_slot(cand, front_slot, self.beam, self.fast_track, starts)
    for i in np.flatnonzero(c == ws):  # EOS: finished, never fed (in the slot's kept order)
      row, used = front[f[i]], int(parent.length[f[i]])
      self.done[front_slot[f[i]]].append((self.hist[row, :used].copy(),
                                          self.hist_kind[row, :used].copy(),
                                          float(cand[f[i], c[i]]), int(self.words[row])))
    fed = c != ws
    f, c = f[fed], c[fed]
    slot_of = front_slot[f]
    is_piece = c >= grammar.n_slots
    is_start = is_piece & (c < grammar.n_slots + self.top)
    first = np.where(is_piece, piece_ids[f, np.maximum(c - grammar.n_slots, 0)],
                     slot_ids[f, np.minimum(c, grammar.n_slots - 1)])
    column = np.where(is_piece, ws, c)
    source = front[f]
    expanded = np.zeros(decoder.batch, bool)
    expanded[source] = True
    self._release(front[~expanded[front]])  # frontier hypotheses with no kept successor
    new = self._place(source, slot_of)
    self.state.put(new, grammar.advance(parent.take(f), column, at_end=False, word_len=1))
    self.score[new] = cand[f, c]
    self.words[new] = self.words[source] + is_start
    tokens, kinds, scored, count = grammar.expand(column, first, (0,), TERMINAL_CODE)
    rounds = np.zeros(self.slots, np.int64)
    np.maximum.at(rounds, slot_of, count)
    self.steps += rounds
    used = parent.length[f]
    for k in range(int(count.max(initial=0))):
      live = count > k
      rows = new[live]
      if k > 0:
        query = np.zeros((decoder.batch, 1), np.int64)
        query[rows, 0] = tokens[live, k]
        self.score[rows] += np.where(scored[live, k], decoder.gather(query)[rows, 0], 0.0)
      decoder.step_rows(rows, tokens[live, k], kinds[live, k])
      self.hist[rows, used[live] + k] = tokens[live, k]
      self.hist_kind[rows, used[live] + k] = kinds[live, k]
    self._merge_pools(new[is_start], slot_of[is_start], self.beam)
    self.front_rows, self.front_slot = new[~is_start], slot_of[~is_start]
