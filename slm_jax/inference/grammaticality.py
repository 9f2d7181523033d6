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

import jax
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


# A pytree, so the compiled word loop (`beam_loop`) carries it on the device.
jax.tree_util.register_dataclass(GrammarState, data_fields=[f.name for f in dataclasses.fields(
    GrammarState)], meta_fields=[])


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

  def min_completion(self, open_, last, remaining, xp=np):
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
    return remaining + xp.where(finished, 0, 1)

  # ---- candidates
  # Every rule below is written once for numpy (`xp=np`, the host searches) and jax.numpy
  # (`xp=jnp`, the compiled word loop `beam_loop`, traced with 64-bit integers): whole-array
  # expressions, no in-place writes.

  def slot_token_ids(self, state: GrammarState, word_first, xp=np):
    """[N, C] the token each slot emits first (to read its log-probability); `word_first`: one
    id, or one per row."""
    n = state.length.shape[0]
    columns = []
    if self.n_ont:
      ont = xp.asarray([self.tokenizer.ont_id(l) for l in self.labels[:self.n_ont]], xp.int64)
      columns.append(xp.broadcast_to(ont[None, :], (n, self.n_ont)))
    if self.family == "noont":
      columns.append(xp.broadcast_to(xp.asarray(self.cnt_ids[self.label_index])[None, :],
                                     (n, self.n_close)))
    elif self.family == "merge":
      columns.append(xp.full((n, 1), self.tokenizer.merged_close_id, xp.int64))
    else:
      top = xp.take_along_axis(state.stack, xp.maximum(state.open - 1, 0)[:, None], axis=1)
      columns.append(xp.asarray(self.cnt_ids)[top.astype(xp.int64)])
    word = xp.reshape(xp.asarray(word_first, xp.int64), (-1, 1))
    columns.append(xp.broadcast_to(word, (n, 1)))
    return xp.concatenate(columns, axis=1)

  def valid(self, state: GrammarState, *, at_end, remaining, word_len, cap, xp=np):
    """[N, C] bool: may each slot come next? `remaining` = pieces of the words not yet emitted
    (including the current word of `word_len` pieces); at_end: all words are out (EOS step).
    Each of at_end, remaining, word_len and cap is one value for every row or one per row (a
    batched search holds rows of many sentences, each at its own word)."""
    n = state.length.shape[0]
    length, open_, last = state.length, state.open, state.last
    at_end = xp.broadcast_to(xp.asarray(at_end, bool), (n,))
    remaining, word_len, cap = (xp.asarray(x, xp.int64) for x in (remaining, word_len, cap))
    columns = []
    alive = last != DONE
    least_open = xp.where(at_end, 1, 2)  # the root closes only after the last word
    if self.n_ont:
      ont = alive & ~at_end & ((open_ >= 1) | (length == 0))
      if self.max_open is not None:
        ont &= state.run_onts < self.max_open
      ont &= length + 1 + self.min_completion(open_ + 1, AFTER_ONT, remaining, xp) <= cap
      columns.append(xp.broadcast_to(ont[:, None], (n, self.n_ont)))
    if self.tree:
      close = alive & (open_ >= least_open) & (last != AFTER_ONT) & (last != START)
      close &= length + self.copies + self.min_completion(open_ - 1, AFTER_CLOSE,
                                                         remaining, xp) <= cap
    elif self.family == "merge":
      close = (last == AFTER_WORD) & (open_ >= least_open)
      close &= length + 1 + self.min_completion(open_, AFTER_CLOSE, remaining, xp) <= cap
    else:  # noont
      close = alive & (last != START)
      close &= length + 1 + self.min_completion(open_, AFTER_CLOSE, remaining, xp) <= cap
    columns.append(xp.broadcast_to(close[:, None], (n, self.n_close)))
    eos = (open_ == 0) & (last == AFTER_CLOSE) if self.tree else last == AFTER_CLOSE
    word = alive & ((open_ >= 1) if self.family != "noont" else True)
    word &= length + word_len + self.min_completion(open_, AFTER_WORD,
                                                    remaining - word_len, xp) <= cap
    columns.append(xp.where(at_end, eos, word)[:, None])
    return xp.concatenate(columns, axis=1)

  def advance(self, state: GrammarState, slot, *, at_end, word_len, xp=np) -> GrammarState:
    """The state after each row takes `slot` (a new GrammarState; rows = len(slot)); at_end and
    word_len: one value, or one per row."""
    slot = xp.asarray(slot)
    at_end = xp.broadcast_to(xp.asarray(at_end, bool), slot.shape)
    is_ont = slot < self.n_ont
    is_close = (slot >= self.n_ont) & (slot < self.word_slot)
    is_word = slot == self.word_slot
    label = xp.asarray(self.label_index)[xp.clip(slot, 0, max(self.n_ont - 1, 0))]
    depth = xp.arange(state.stack.shape[1])
    pushed = is_ont[:, None] & (depth[None, :] == state.open[:, None])
    stack = xp.where(pushed, label[:, None].astype(state.stack.dtype), state.stack)
    open_ = state.open + is_ont
    if self.tree or self.family == "merge":
      open_ = open_ - is_close
      if self.family == "merge":
        open_ = xp.where(is_close & at_end, 0, open_)  # the final `)` closes everything
    length = state.length + xp.where(is_ont, 1, 0) + xp.where(is_close, self.copies, 0) + (
        xp.where(is_word & ~at_end, word_len, 0))
    run_onts = xp.where(is_ont, state.run_onts + 1, 0)
    last = xp.select([is_ont, is_close, is_word & at_end, is_word],
                     [AFTER_ONT, AFTER_CLOSE, DONE, AFTER_WORD], state.last)
    return GrammarState(length, open_, last, run_onts, stack)

  def expand(self, slot: np.ndarray, first_ids: np.ndarray, word_ids, word_kind: int):
    """Tokens each chosen (slot, first id) feeds: ids, kinds [M, K], scored [M, K], count [M].

    Position 0 is always scored (it ranked the candidate); closing copies are scored when CNT2
    is a target of the configuration; every piece of a word is scored.
    """
    m = len(np.asarray(slot))
    words = np.broadcast_to(np.asarray(word_ids, np.int64), (m, len(word_ids)))
    return self.expand_rows(slot, first_ids, words, np.full(m, len(word_ids)),
                            np.full(m, word_kind))

  def expand_rows(self, slot, first_ids, words_MW, word_len_M, word_kind_M, xp=np):
    """`expand` with a word per row: row m's word is words_MW[m, :word_len_M[m]] of kind
    word_kind_M[m] (rows of a batched search belong to different sentences)."""
    slot, first_ids = xp.asarray(slot), xp.asarray(first_ids, xp.int64)
    words_MW, word_kind_M = xp.asarray(words_MW, xp.int64), xp.asarray(word_kind_M, xp.int64)
    is_ont = slot < self.n_ont
    is_close = (slot >= self.n_ont) & (slot < self.word_slot)
    is_word = slot == self.word_slot
    width = words_MW.shape[1]
    ids = [first_ids]
    kinds = [xp.select([is_ont, is_close], [int(Kind.ONT), int(self.closing[0])], word_kind_M)]
    scored = [xp.ones(slot.shape, bool)]
    for k in range(1, max(self.copies, width)):
      copy = is_close & (k < self.copies)  # a closing's deterministic copies
      piece = is_word & (k < word_len_M) if k < width else xp.zeros(slot.shape, bool)
      word_piece = words_MW[:, min(k, width - 1)]
      ids.append(xp.where(copy, first_ids, xp.where(piece, word_piece, 0)))
      copy_kind = int(self.closing[k]) if k < self.copies else 0
      kinds.append(xp.where(copy, copy_kind, xp.where(piece, word_kind_M, 0)))
      scored.append((copy & self.cnt2_scored) | piece)
    count = xp.where(is_close, self.copies, 1)
    if width > 1:
      count = xp.where(is_word, xp.maximum(xp.asarray(word_len_M, xp.int64), 1), count)
    return (xp.stack(ids, axis=1).astype(xp.int64), xp.stack(kinds, axis=1).astype(xp.int64),
            xp.stack(scored, axis=1), count.astype(xp.int64))
