"""Word-synchronous beam search (Stern et al. 2017, as used by TG; paper App. B.2, SPEC §9).

p̃(x≤w) = logsumexp over the beam B_w of log p(x≤w, y≤w): the joint probability of the words so
far and a structural prefix, for a tree-linearization model. One word step w:

  frontier ← B_{w-1};  pool ← ∅                              (pool: hypotheses that emitted w)
  while frontier ≠ ∅:
    if |pool| = word_beam: drop the frontier hypotheses scoring ≤ the pool's word_beam-th
      (depth-first continuation: expansion goes on while a structural hypothesis still scores
      above it; scores only fall, so nothing dropped could enter the pool); stop when none is left
    candidates = every valid successor of every frontier hypothesis (grammaticality.py): a
      structural token, or the word w (all its pieces); ranked by score + log p(first token)
    keep the union of the top `beam` candidates (the sub-beam) and the `fast_track` best word
      candidates (the fast track: hypotheses that emit the word immediately); a candidate in
      both is kept once and no replacement is drawn for it (SPEC §9, the paper's code)
    feed the kept candidates through the KV-cache decoder (a closing is fed with its
      deterministic copies; a word with all its pieces; every fed token is scored unless it is a
      non-target CNT2, SPEC §4, or `score_cnt2=False`)
    pool ← best `word_beam` of pool ∪ {kept word candidates};  frontier ← kept structural ones
  B_w ← pool

The linearized sentence (between BOS and EOS) is capped at max(max_len_factor·L, min_len)
tokens, L = terminal tokens of the sentence (`cap`; the grammar reserves the closings of every
open constituent inside it, see `Grammar.min_completion`). With `complete=True` one more step
closes the open constituents and emits EOS: `sentence_logprob` = logsumexp over the completed
hypotheses, which `BeamResult.complete` lists best first (tokens after BOS, EOS excluded, with
their joint log-probs; at most `word_beam`; `slm_jax.eval.proposals.BeamProposals` turns them into
proposal trees). Defaults: beam = word_beam = 300, fast_track = 30, cap max(6L, 10) (paper App.
B.2). All hypotheses of a step are batched on the device through `IncrementalDecoder`.

Two readings of the beam: `prefix_logprobs` (the marginal: logsumexp of the joint log-probs of
B_w) and `terminal_prefix_logprobs` (the largest terminal-only log-prob in B_w: the sum over
a hypothesis' terminal tokens alone, structure as context — the paper's `tree_eval_type=terminal`;
hypotheses are still ranked by their joint scores). `sentence_terminal_logprob` is the same over
the completed hypotheses (terminals and EOS).
`score_cnt2=False` drops CNT2 log-probs from the beam's scores for every configuration (the
paper's code never scores CNT2); the default scores them where CNT2 is a target (TGTree, causal
lin2/lin3 models, SPEC §4).

Scores are natural logarithms. A word candidate is ranked by its first piece (its full score,
all pieces, is what enters the pool); for word-level vocabularies the two are the same.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Callable, Sequence as SequenceT

import jax
import numpy as np

from slm_jax.buckets import bucket
from slm_jax.configurations import Configuration
from slm_jax.inference.beam_batch import BatchedSearch, select_per_slot
from slm_jax.inference.beam_feed import feed_expansions
from slm_jax.inference.beam_loop import LoopSearch, WordLoop
from slm_jax.inference.beam_result import BeamResult, Completed
from slm_jax.inference.grammaticality import Grammar, GrammarState
from slm_jax.inference.incremental import IncrementalDecoder, arena_bytes
from slm_jax.inference.scorer import LENGTH_BUCKET, Scorer, logsumexp
from slm_jax.kinds import Kind
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import Tokenizer

# Paper App. B.2 defaults (the evaluator's flags start from these).
BEAM = 300  # b: the word beam, and the sub-beam
FAST_TRACK = 30  # hypotheses that emit the word immediately, added to the sub-beam
MAX_LEN_FACTOR = 6  # the length cap is max(MAX_LEN_FACTOR·L, MIN_LEN)
MIN_LEN = 10
SENTENCES_PER_BATCH = 8  # sentences a batched search advances together (`search_many`)
MEMORY_SHARE = 0.5  # of the device's memory a batched search's key/value arena may take
GIB = 2 ** 30
_LOG = logging.getLogger(__name__)


def memory_budget() -> int:
  """Bytes a batched search's key/value arena may take: `MEMORY_SHARE` of the default device's
  memory (its allocator's limit; the CPU reports none: the host's physical memory)."""
  stats = jax.devices()[0].memory_stats() or {}
  total = stats.get("bytes_limit") or os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  return int(MEMORY_SHARE * total)


def fit_in_memory(size: Callable[[int], int], wanted: int, what: str, *,
                  budget: int | None = None, reported: set[int] | None = None) -> int:
  """The one memory rule of the batched searches: how many of `wanted` items (sentences, rows,
  articles) go in flight together, `wanted` or fewer (at least 1) where their cache `size(n)`
  (bytes) would pass `budget` (default `memory_budget()`). A reduction is logged, naming `what`
  ("sentences", "articles", …), once per count when `reported` (the counts said) is given."""
  budget = memory_budget() if budget is None else int(budget)
  fits = max(1, int(wanted))
  while fits > 1 and size(fits) > budget:
    fits -= 1
  if fits < wanted and (reported is None or fits not in reported):
    if reported is not None:
      reported.add(fits)
    _LOG.warning("%s in flight: %d, not %d: their cache would take %s, over the budget of %s "
                 "(%.0f%% of the device's memory; one: %s)", what, fits, wanted,
                 _gib(size(wanted)), _gib(budget), 100 * MEMORY_SHARE, _gib(size(1)))
  return fits


def _gib(size: int) -> str:
  return f"{size / GIB:.1f} GiB" if size >= GIB // 10 else f"{size / 2 ** 20:.2f} MiB"


class BeamSearcher:
  """Reusable word-synchronous beam search for one model (see module docstring).

  `model` is a `Decoder`, a `Scorer`, or an `IncrementalDecoder`-like object (start /
  step_rows / copy_rows / gather / batch / max_len); `decoder_cls` builds decoders for a
  `Decoder` (e.g. `RecomputeDecoder` for the benchmark baseline), with `decoder_len` cache slots
  (default: the length bucket of each sentence's prefix + cap; one decoder is kept at a time).
  `labels` restricts the ONT / closing labels (default: the 26 PTB labels). `score_cnt2=False`
  leaves CNT2 log-probs out of every score (the paper's code); `word_beam` defaults to `beam`.
  """

  def __init__(self, model: Decoder | Scorer | Any, tokenizer: Tokenizer,
               configuration: Configuration, *, beam: int = BEAM, fast_track: int = FAST_TRACK,
               word_beam: int | None = None, max_len_factor: float = MAX_LEN_FACTOR,
               min_len: int = MIN_LEN,
               max_open: int | None = None, labels: SequenceT[str] | None = None,
               score_cnt2: bool = True, decoder_cls=IncrementalDecoder,
               decoder_len: int | None = None, sentences_per_batch: int = SENTENCES_PER_BATCH,
               batched: bool = True, memory_budget: int | None = None,
               compiled: bool = False):
    if isinstance(model, Scorer):
      model = model.model
    if beam < 1 or fast_track < 0 or (word_beam is not None and word_beam < 1) or (
        sentences_per_batch < 1):
      raise ValueError(f"need beam >= 1, fast_track >= 0, word_beam >= 1, "
                       f"sentences_per_batch >= 1; got {beam}, {fast_track}, {word_beam}, "
                       f"{sentences_per_batch}")
    self.tokenizer = tokenizer
    self.configuration = configuration
    self.beam = int(beam)
    self.fast_track = int(fast_track)
    self.word_beam = int(word_beam or beam)
    self.max_len_factor = max_len_factor
    self.min_len = int(min_len)
    self.score_cnt2 = bool(score_cnt2)  # False: the paper's code (CNT2 never scored)
    self.grammar = Grammar(configuration.linearization, tokenizer,
                           cnt2_scored=score_cnt2 and not configuration.attention.tg_family,
                           labels=labels, max_open=max_open)
    self.capacity = self.word_beam + self.beam + self.fast_track
    if isinstance(model, Decoder):
      self.model, self._fixed = model, None
    else:
      self.model, self._fixed = None, model
      if model.batch < self.capacity:
        raise ValueError(f"decoder has {model.batch} rows; this search needs word_beam + beam + "
                         f"fast_track = {self.capacity}")
    self.decoder_cls = decoder_cls
    self.decoder_len = decoder_len
    self.sentences_per_batch = int(sentences_per_batch)
    self.batched = bool(batched)  # search_many's default: batched, or one `search` at a time
    self.compiled = bool(compiled)  # the batched search's rounds in one compiled loop
    self._word_loop = None
    self.memory_budget = memory_budget  # bytes (None: `memory_budget()` when first needed)
    self._decoder = None
    self._reported: set[int] = set()

  def decoder(self, max_len: int, rows: int | None = None):
    """A decoder with at least `max_len` cache slots and `rows` rows (default `capacity`, one
    sentence's): the live one if it is large enough (a cache only grows, so sentences of
    different lengths share one compiled size), else a new one of `max_len` slots (or
    `decoder_len`, when fixed). A decoder given to the constructor is always the one (a batched
    search then runs as many sentences at once as its rows hold)."""
    rows = max(int(rows or self.capacity), self.capacity)
    if self.decoder_len is not None:
      if self.decoder_len < max_len:
        raise ValueError(f"decoder_len={self.decoder_len} < {max_len} slots needed")
      max_len = self.decoder_len
    if self._fixed is not None:
      if self._fixed.max_len < max_len:
        raise ValueError(f"decoder max_len={self._fixed.max_len} < {max_len} needed")
      return self._fixed
    live = self._decoder
    if self._live_holds(max_len, rows):
      return live
    if live is not None:  # one cache alive at a time, as large as every use so far
      max_len, rows = max(max_len, live.max_len), max(rows, live.batch)
    self._decoder = None
    self._decoder = self.decoder_cls(self.model, self.configuration, max_len=max_len, batch=rows)
    return self._decoder

  def _live_holds(self, max_len: int, rows: int) -> bool:
    """Whether the live decoder has `max_len` slots and `rows` rows (`decoder` reuses it)."""
    live = self._decoder
    return live is not None and live.max_len >= max_len and live.batch >= rows

  def in_flight(self, max_len: int, wanted: int) -> int:
    """How many sentences a batched search over `max_len` cache slots advances together:
    `wanted`, or fewer (at least 1) where the decoder of that many sentences' rows would start
    with a key/value arena (`incremental.arena_bytes`) larger than `memory_budget`: the 1B
    configurations at b = 300 need 24.6 GiB of float32 arena per sentence in flight at 128 cache
    slots (8 sentences: 197 GiB). `fit_in_memory` is the rule; a reduction is logged once per
    count. A decoder given to the constructor, or another decoder class, is used as it is."""
    if self._fixed is not None or self.decoder_cls is not IncrementalDecoder or wanted <= 1:
      return wanted
    if self._live_holds(max(max_len, self.decoder_len or 0), wanted * self.capacity):
      return wanted  # the live decoder holds them: nothing new is allocated
    live = self._decoder
    max_len = max(max_len, self.decoder_len or 0, live.max_len if live is not None else 0)
    return fit_in_memory(lambda n: arena_bytes(self.model.config, n * self.capacity, max_len),
                         wanted, "sentences", budget=self.memory_budget,
                         reported=self._reported)

  def cap(self, terminal_tokens: int) -> int:
    return int(max(math.ceil(self.max_len_factor * terminal_tokens), self.min_len))

  def slots(self, words: SequenceT[str], prefix_len: int = 1) -> int:
    """Cache slots a search of `words` after a prefix of `prefix_len` tokens asks for."""
    pieces = sum(len(self.tokenizer.encode_word(w)) for w in words)
    return bucket(prefix_len + self.cap(pieces), LENGTH_BUCKET)

  def search(self, words: SequenceT[str], *, complete: bool = True, prefix_ids=None,
             prefix_kinds=None) -> BeamResult:
    """Beam search over one sentence after `prefix` (default: BOS)."""
    words = list(words)
    if not words:
      raise ValueError("beam search needs at least one word")
    tok, grammar = self.tokenizer, self.grammar
    pieces = [tok.encode_word(w) for w in words]
    cap = self.cap(sum(map(len, pieces)))
    if prefix_ids is None:
      prefix_ids, prefix_kinds = [tok.bos_id], [int(Kind.BOS)]
    prefix_len = len(prefix_ids)
    decoder = self.decoder(self.slots(words, prefix_len))
    decoder.start(prefix_ids, prefix_kinds)
    n = decoder.batch  # >= capacity
    state = GrammarState.initial(n, cap + 2)
    score = np.zeros(n)  # joint log-prob of each row
    term = np.zeros(n)  # its terminal (and EOS) tokens only
    hist = np.zeros((n, cap + 1), np.int64)  # sentence tokens of each row
    hist_kind = np.zeros((n, cap + 1), np.int64)
    steps = expansions = pruned = 0
    beam_rows = np.zeros(1, np.int64)
    out = BeamResult(words=words, prefix_logprobs=np.full(len(words), -np.inf),
                     sentence_logprob=-math.inf if complete else math.nan,
                     terminal_prefix_logprobs=np.full(len(words), -np.inf),
                     sentence_terminal_logprob=-math.inf if complete else math.nan, best=[],
                     best_complete=None, beam_sizes=np.zeros(len(words), np.int64), cap=cap,
                     steps=0, expansions=0)
    remaining = int(sum(map(len, pieces)))
    for w in range(len(words) + int(complete)):
      at_end = w == len(words)
      word_ids = (tok.eos_id,) if at_end else pieces[w]
      word_kind = int(Kind.EOS if at_end else Kind.TERMINAL)
      pool = np.zeros(0, np.int64)
      frontier = beam_rows
      while len(frontier):
        if len(pool) >= self.word_beam:  # depth-first continuation (module docstring)
          above = score[frontier] > score[pool[self.word_beam - 1]]
          pruned += int((~above).sum())
          frontier = frontier[above]
          if not len(frontier):
            break
        parent = state.take(frontier)
        ids = grammar.slot_token_ids(parent, word_ids[0])
        valid = grammar.valid(parent, at_end=at_end, remaining=remaining,
                              word_len=len(word_ids), cap=cap)
        query = np.zeros((n, grammar.n_slots), np.int64)
        query[frontier] = ids
        lp = decoder.gather(query)[frontier]
        cand = np.where(valid & np.isfinite(lp), score[frontier, None] + lp, -np.inf)
        f, c = self._select(cand)
        pruned += int(np.isfinite(cand).sum()) - len(f)
        if len(f) == 0:  # dead ends only (the cap admits no continuation)
          frontier = frontier[:0]
          break
        is_word = c == grammar.word_slot
        parent_term = term[frontier[f]] + np.where(is_word, lp[f, c], 0.0)
        new = self._place(frontier[f], pool, n, decoder, hist, hist_kind)
        state.put(new, grammar.advance(parent.take(f), c, at_end=at_end, word_len=len(word_ids)))
        score[new] = cand[f, c]
        term[new] = parent_term
        tokens, kinds, scored, count = grammar.expand(c, ids[f, c], word_ids, word_kind)
        if at_end:
          count[is_word] = 0  # EOS is scored, never fed
        used = parent.length[f]  # sentence tokens before the new ones
        steps += feed_expansions(decoder, new, tokens, kinds, scored, count, used, hist,
                                 hist_kind, score, term=term, term_rows=is_word)
        expansions += len(f)
        if at_end:
          hist[new[is_word], used[is_word]] = tok.eos_id
          hist_kind[new[is_word], used[is_word]] = Kind.EOS
        pool = np.concatenate([pool, new[is_word]])
        pruned += max(len(pool) - self.word_beam, 0)
        pool = pool[np.argsort(-score[pool], kind="stable")[:self.word_beam]]
        frontier = new[~is_word]
      beam_rows = pool
      if at_end:
        out.sentence_logprob = logsumexp(score[pool])
        if len(pool):
          out.sentence_terminal_logprob = float(term[pool].max())
          out.best_complete = self._symbols(hist, hist_kind, pool)
          out.complete = self._completed(hist, hist_kind, score, term, pool)
      else:
        remaining -= len(word_ids)
        out.beam_sizes[w] = len(pool)
        if len(pool) == 0:
          break
        out.prefix_logprobs[w] = logsumexp(score[pool])
        out.terminal_prefix_logprobs[w] = float(term[pool].max())
        out.best.append(self._symbols(hist, hist_kind, pool))
    out.steps, out.expansions, out.pruned = steps, expansions, pruned
    return out

  def search_many(self, sentences: SequenceT[SequenceT[str]], *, complete: bool = True,
                  prefixes=None, batched: bool | None = None) -> list[BeamResult]:
    """`search` of every sentence (results in the input order). batched=True (the default,
    `self.batched`): the batched search (`beam_batch`: `sentences_per_batch`
    sentences advanced together, the same results bit for bit); False: one `search` after
    another (the oracle). `prefixes[i]` = (ids, kinds) before sentence i (default BOS)."""
    out: list[BeamResult | None] = [None] * len(sentences)
    for i, result in self.iter_search(sentences, complete=complete, prefixes=prefixes,
                                      batched=batched):
      out[i] = result
    return out

  def iter_search(self, sentences: SequenceT[SequenceT[str]], *, complete: bool = True,
                  prefixes=None, batched: bool | None = None):
    """(index, BeamResult) of each sentence as it finishes (`search_many`; the batched search
    finishes the longest sentences first); a caller keeps what it needs of each result."""
    if not (self.batched if batched is None else batched):
      for i, words in enumerate(sentences):
        ids, kinds = (None, None) if prefixes is None else prefixes[i]
        yield i, self.search(words, complete=complete, prefix_ids=ids, prefix_kinds=kinds)
      return
    search = LoopSearch if self.compiled else BatchedSearch
    yield from search(self, sentences, complete=complete, prefixes=prefixes,
                      concurrent=self.sentences_per_batch)

  def word_loop(self, decoder, slots: int, widest: int) -> WordLoop:
    """The compiled word loop (`beam_loop`) for `slots` sentences in `decoder`, words of up
    to `widest` pieces (bucketed): one kept, so later searches reuse its compiled functions."""
    widest = bucket(widest, 1)
    loop = self._word_loop
    if loop is None or loop.decoder is not decoder or loop.K != slots or loop.widest < widest:
      loop = self._word_loop = WordLoop(self, decoder, slots, widest)
    return loop

  @staticmethod
  def _place(source, pool, n, decoder, hist, hist_kind) -> np.ndarray:
    """Rows for the successors of `source` rows: the first successor of each parent takes the
    parent's own row (expanded frontier rows are not needed again: no copy), the others copy
    their parent into rows outside the pool and the parents."""
    m = len(source)
    _, first = np.unique(source, return_index=True)
    reuse = np.zeros(m, bool)
    reuse[first] = True
    new = source.copy()
    taken = np.zeros(n, bool)
    taken[pool] = True
    taken[source] = True
    free = np.flatnonzero(~taken)[:m - len(first)]
    new[~reuse] = free
    decoder.copy_rows(free, source[~reuse])  # reads every source before writing
    hist[free], hist_kind[free] = hist[source[~reuse]], hist_kind[source[~reuse]]
    return new

  def _select(self, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent, slot) of the kept candidates: the union of the sub-beam (top `beam` of all) and
    the fast track (top `fast_track` word candidates); a fast-track candidate already in the
    sub-beam is not added again, and nothing replaces it (`beam_batch.select_per_slot`, one
    slot). Ranking is by score, ties by flat index (a stable sort), found by partial selection."""
    columns = np.arange(cand.shape[1]) == self.grammar.word_slot
    return select_per_slot(cand, np.zeros(len(cand), np.int64), self.beam, self.fast_track,
                           columns)

  def _symbols(self, hist, hist_kind, pool) -> list[str]:
    best = pool[0]  # the pool is sorted best first
    used = int(np.count_nonzero(hist_kind[best]))
    return self.tokenizer.decode(hist[best, :used])

  def _completed(self, hist, hist_kind, score, term, pool) -> list[Completed]:
    """The pool's rows (best first) without their final EOS, decoded in one call."""
    kinds_PT = hist_kind[pool]
    lengths = np.count_nonzero(kinds_PT, axis=1) - 1  # rows are contiguous and end with EOS
    keep = np.arange(kinds_PT.shape[1]) < lengths[:, None]
    ids = hist[pool][keep]
    kinds = kinds_PT[keep].astype(np.int8)
    symbols = self.tokenizer.decode(ids)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return [Completed(ids[a:b], kinds[a:b], symbols[a:b], float(score[row]), float(term[row]))
            for a, b, row in zip(bounds[:-1], bounds[1:], pool.tolist())]


def word_synchronous_beam(model: Decoder | Scorer | Any, tokenizer: Tokenizer,
                          configuration: Configuration, words: SequenceT[str], *,
                          complete: bool = True, **options) -> BeamResult:
  """One sentence through a fresh `BeamSearcher(..., **options)` (use the class to search many
  sentences)."""
  return BeamSearcher(model, tokenizer, configuration, **options).search(words, complete=complete)
