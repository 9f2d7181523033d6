"""Which structural tokens may come next during word-synchronous search, per linearization.

The search builds one sentence (a single tree over all its words) after BOS. Before gold word w
it may emit structural tokens, then must emit w (all its pieces); after the last word it may only
close, then emit EOS. A hypothesis is a *valid prefix*: a prefix of the linearization of some
tree over the sentence whose full linearization fits the length cap (SPEC §9: max(6L, 10) tokens
between BOS and EOS, L = terminal tokens). Rules per linearization (derived from SPEC §2):

lin1 / lin2 / lin3 (labelled brackets; a closing is 1 / 2 / 3 tokens: CNT, CNT1+CNT2,
CNT+CNT2+CNT2, the copies deterministic):
  ONT(any label)   before a word, while the root is open (or as the very first token: the root)
  closing          its label is the innermost open label; not right after an ONT (no empty
                   constituent); the root closes only after the last word
  word             inside the root (never before the first ONT)
  EOS              after the last word, once every constituent is closed

lin1_noont (ONTs dropped): constituent starts are invisible, so any closing sequence is some
tree's: give every closing the constituent from the sentence start to that point (left-branching;
equal ends are unary chains; the last closing is the root). Hence: no closing before the first
word; after a word any number of closings with any labels; at least one closing after the last
word; EOS right after a closing once all words are out.

lin1_merge (every maximal run of closings is one unlabelled `)`): a `)` closes k >= 1
constituents, k unseen. Counting k = 1 for every `)` before the last word keeps the most
constituents open, so it admits every valid prefix: `)` only right after a word (runs are
maximal; no empty constituent) and, before the last word, only while >= 2 constituents are open
(the root stays open). After the last word exactly one `)` (it closes all), then EOS.

Length cap: a token is allowed only if the shortest completion still fits (remaining pieces plus
the closings of every open constituent; one final closing for noont/merge), so every kept prefix
extends to a tree within the cap and brute-force enumeration of trees gives the same prefix set.
`max_open` optionally bounds consecutive ONTs (paper App. B.1's XSum constraint; None for SG).

Candidate slots per hypothesis (columns of `valid`): [ONT per label…] [closing: one slot with the
row's innermost label (lin1/2/3) | one `)` (merge) | one per label (noont)] [the word / EOS].
"""

from __future__ import annotations

import dataclasses

import numpy as np

from slm_jax.kinds import PTB_LABELS, Kind
from slm_jax.linearize import SCHEME_TABLE, get_scheme
from slm_jax.tokenizer import Tokenizer

START, AFTER_ONT, AFTER_WORD, AFTER_CLOSE, DONE = range(5)  # `last` codes
BEAM_LINEARIZATIONS = tuple(s.name for s in SCHEME_TABLE.values() if s.beam_searchable)


@dataclasses.dataclass
class GrammarState:
  """Per-hypothesis search state, numpy arrays over N rows."""

  length: np.ndarray  # [N] sentence tokens emitted (after BOS)
  open: np.ndarray  # [N] open constituents (merge: counting k = 1 per `)`)
  last: np.ndarray  # [N] START / AFTER_ONT / AFTER_WORD / AFTER_CLOSE / DONE
  run_onts: np.ndarray  # [N] consecutive ONTs just emitted
  stack: np.ndarray  # [N, D] label index of open constituents (bottom first)

  @classmethod
  def initial(cls, n: int, depth: int) -> "GrammarState":
    z = lambda: np.zeros(n, np.int64)
    return cls(z(), z(), np.full(n, START, np.int64), z(), np.zeros((n, depth), np.int16))

  def take(self, index) -> "GrammarState":
    return GrammarState(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))

  def put(self, rows, other: "GrammarState") -> None:
    for f in dataclasses.fields(self):
      getattr(self, f.name)[rows] = getattr(other, f.name)


class Grammar:
  """Candidate slots, their validity and their token expansions for one linearization."""

  def __init__(self, linearization: str, tokenizer: Tokenizer, *, cnt2_scored: bool,
               labels=None, max_open: int | None = None):
    if linearization not in BEAM_LINEARIZATIONS:
      raise ValueError(f"word-synchronous search needs a tree linearization "
                       f"({', '.join(BEAM_LINEARIZATIONS)}), got {linearization}")
    self.linearization = linearization
    self.tokenizer = tokenizer
    self.labels = tuple(PTB_LABELS if labels is None else labels)
    unknown = [l for l in self.labels if l not in PTB_LABELS]
    if unknown or not self.labels:
      raise ValueError(f"labels must be a non-empty subset of the 26 PTB labels, got {unknown}")
    facts = get_scheme(linearization)
    self.closing = facts.closing_expansion  # kinds of one closing's tokens
    self.copies = len(self.closing)
    self.cnt2_scored = cnt2_scored
    self.max_open = max_open
    self.tree = facts.invertible  # ONT-opened, label-matched closings
    # The grammar family, from the scheme table: tree (lin1/2/3), noont (closings name their
    # label, no ONTs) or merge (ONTs and unlabeled `)` runs).
    self.family = "tree" if facts.invertible else "merge" if facts.opens else "noont"
    self.label_index = np.asarray([PTB_LABELS.index(l) for l in self.labels], np.int64)
    self.cnt_ids = np.asarray([tokenizer.cnt_id(l) for l in PTB_LABELS], np.int64)
    # Without ONTs (lin1_noont) a closing names its label; else one closing slot (the label of
    # the innermost open constituent, or lin1_merge's unlabeled `)`).
    self.n_ont = len(self.labels) if facts.opens else 0
    self.n_close = 1 if facts.opens else len(self.labels)
    self.word_slot = self.n_ont + self.n_close
    self.n_slots = self.word_slot + 1

  # ---- costs

  def min_completion(self, open_, last, remaining):
    """Fewest tokens that still complete the sentence (before EOS): the pieces of the words not
    yet emitted plus the **reserved closings** — every open constituent's closing, `copies`
    tokens each (1 lin1, 2 lin2, 3 lin3); one final `)` / closing for merge and noont.

    This is where the cap max(6L, 10) of SPEC §9 counts the closings: `valid` admits a token
    only if `length` (tokens after BOS so far) + the token(s) + this completion <= cap, so an
    ONT is refused once its own closing would not fit, and every kept prefix extends to a tree
    of at most `cap` tokens between BOS and EOS (EOS itself is not counted). Example, lin1 with
    L = 2 one-piece words: cap 12 = 2 words + 5 constituents × 2 (tests/test_beam.py)."""
    if self.tree:
      return remaining + open_ * self.copies
    finished = (remaining == 0) & (last == AFTER_CLOSE)
    return remaining + np.where(finished, 0, 1)

  # ---- candidates

  def slot_token_ids(self, state: GrammarState, word_first: int) -> np.ndarray:
    """[N, C] the token each slot emits first (to read its log-probability)."""
    n = len(state.length)
    ids = np.empty((n, self.n_slots), np.int64)
    ids[:, :self.n_ont] = [self.tokenizer.ont_id(l) for l in self.labels[:self.n_ont]]
    if self.family == "noont":
      ids[:, self.n_ont:self.word_slot] = self.cnt_ids[self.label_index]
    elif self.family == "merge":
      ids[:, self.n_ont] = self.tokenizer.merged_close_id
    else:
      top = state.stack[np.arange(n), np.maximum(state.open - 1, 0)]
      ids[:, self.n_ont] = self.cnt_ids[top]
    ids[:, self.word_slot] = word_first
    return ids

  def valid(self, state: GrammarState, *, at_end, remaining, word_len, cap) -> np.ndarray:
    """[N, C] bool: may each slot come next? `remaining` = pieces of the words not yet emitted
    (including the current word of `word_len` pieces); at_end: all words are out (EOS step).
    Each of at_end, remaining, word_len and cap is one value for every row or one per row (a
    batched search holds rows of many sentences, each at its own word)."""
    n = len(state.length)
    length, open_, last = state.length, state.open, state.last
    at_end = np.broadcast_to(np.asarray(at_end, bool), (n,))
    remaining, word_len, cap = (np.asarray(x, np.int64) for x in (remaining, word_len, cap))
    out = np.zeros((n, self.n_slots), bool)
    alive = last != DONE
    least_open = np.where(at_end, 1, 2)  # the root closes only after the last word
    if self.n_ont:
      ont = alive & ~at_end & ((open_ >= 1) | (length == 0))
      if self.max_open is not None:
        ont &= state.run_onts < self.max_open
      ont &= length + 1 + self.min_completion(open_ + 1, AFTER_ONT, remaining) <= cap
      out[:, :self.n_ont] = ont[:, None]
    if self.tree:
      close = alive & (open_ >= least_open) & (last != AFTER_ONT) & (last != START)
      close &= length + self.copies + self.min_completion(open_ - 1, AFTER_CLOSE,
                                                         remaining) <= cap
    elif self.family == "merge":
      close = (last == AFTER_WORD) & (open_ >= least_open)
      close &= length + 1 + self.min_completion(open_, AFTER_CLOSE, remaining) <= cap
    else:  # noont
      close = alive & (last != START)
      close &= length + 1 + self.min_completion(open_, AFTER_CLOSE, remaining) <= cap
    out[:, self.n_ont:self.word_slot] = close[:, None]
    eos = (open_ == 0) & (last == AFTER_CLOSE) if self.tree else last == AFTER_CLOSE
    word = alive & ((open_ >= 1) if self.family != "noont" else True)
    word &= length + word_len + self.min_completion(open_, AFTER_WORD,
                                                    remaining - word_len) <= cap
    out[:, self.word_slot] = np.where(at_end, eos, word)
    return out

  def advance(self, state: GrammarState, slot: np.ndarray, *, at_end, word_len) -> GrammarState:
    """The state after each row takes `slot` (a new GrammarState; rows = len(slot)); at_end and
    word_len: one value, or one per row."""
    slot = np.asarray(slot)
    at_end = np.broadcast_to(np.asarray(at_end, bool), slot.shape)
    s = GrammarState(state.length.copy(), state.open.copy(), state.last.copy(),
                     state.run_onts.copy(), state.stack.copy())
    rows = np.arange(len(slot))
    is_ont = slot < self.n_ont
    is_close = (slot >= self.n_ont) & (slot < self.word_slot)
    is_word = slot == self.word_slot
    if is_ont.any():
      r = rows[is_ont]
      s.stack[r, s.open[r]] = self.label_index[slot[r]]
    s.open += is_ont
    if self.tree or self.family == "merge":
      s.open -= is_close
      if self.family == "merge":
        s.open[is_close & at_end] = 0  # the final `)` closes everything
    s.length += np.where(is_ont, 1, 0) + np.where(is_close, self.copies, 0) + np.where(
        is_word & ~at_end, word_len, 0)
    s.run_onts = np.where(is_ont, s.run_onts + 1, 0)
    s.last = np.select([is_ont, is_close, is_word & at_end, is_word],
                       [AFTER_ONT, AFTER_CLOSE, DONE, AFTER_WORD], s.last)
    return s

  def expand(self, slot: np.ndarray, first_ids: np.ndarray, word_ids, word_kind: int):
    """Tokens each chosen (slot, first id) feeds: ids, kinds [M, K], scored [M, K], count [M].

    Position 0 is always scored (it ranked the candidate); closing copies are scored when CNT2
    is a target of the configuration; every piece of a word is scored.
    """
    m = len(np.asarray(slot))
    words = np.broadcast_to(np.asarray(word_ids, np.int64), (m, len(word_ids)))
    return self.expand_rows(slot, first_ids, words, np.full(m, len(word_ids)),
                            np.full(m, word_kind))

  def expand_rows(self, slot: np.ndarray, first_ids: np.ndarray, words_MW: np.ndarray,
                  word_len_M: np.ndarray, word_kind_M: np.ndarray):
    """`expand` with a word per row: row m's word is words_MW[m, :word_len_M[m]] of kind
    word_kind_M[m] (rows of a batched search belong to different sentences)."""
    slot = np.asarray(slot)
    m = len(slot)
    k = max(self.copies, words_MW.shape[1])
    ids = np.zeros((m, k), np.int64)
    kinds = np.zeros((m, k), np.int64)
    scored = np.zeros((m, k), bool)
    count = np.ones(m, np.int64)
    is_ont = slot < self.n_ont
    is_close = (slot >= self.n_ont) & (slot < self.word_slot)
    is_word = slot == self.word_slot
    ids[:, 0] = first_ids
    kinds[:, 0] = np.select([is_ont, is_close], [Kind.ONT, self.closing[0]], word_kind_M)
    scored[:, 0] = True
    if self.copies > 1:
      ids[is_close, 1:self.copies] = np.asarray(first_ids)[is_close, None]
      kinds[is_close, 1:self.copies] = self.closing[1:]
      scored[is_close, 1:self.copies] = self.cnt2_scored
      count[is_close] = self.copies
    if words_MW.shape[1] > 1:
      piece = is_word[:, None] & (np.arange(1, words_MW.shape[1]) < word_len_M[:, None])
      ids[:, 1:words_MW.shape[1]] = np.where(piece, words_MW[:, 1:], ids[:, 1:words_MW.shape[1]])
      kinds[:, 1:words_MW.shape[1]] = np.where(piece, word_kind_M[:, None],
                                                kinds[:, 1:words_MW.shape[1]])
      scored[:, 1:words_MW.shape[1]] |= piece
      count = np.where(is_word, np.maximum(word_len_M, 1), count)
    return ids, kinds, scored, count
