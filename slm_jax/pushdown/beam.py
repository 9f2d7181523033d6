"""Pushdown scoring: the stack tape predicted token by token, attachments marginalized (SPEC §14).

The model's joint distribution over a token row x (BOS, words, EOS) and attachments a is
p(x, a) = Π_t p(x_t+1 | x≤t, a≤t) · p(a_t+1 | x≤t+1, a≤t): the next token depends on the stack
tape the attachments so far build, and the next token's attachment is predicted at the same
query (the paper's synchronous model). The sentence probability marginalizes the attachments,
p(x) = Σ_a p(x, a).

`beam_score` approximates that sum word-synchronously: each hypothesis is one attachment
sequence (a `Stack` and its tape rows); at query t every hypothesis is scored on x_t+1, extended
by every attachment x_t+1 may take (the shift, or reduce with one of its sentence's stack
elements), and the best `beam` extensions are kept (SPEC §14: 300). The prefix probability
after x_t+1 is the logsumexp of the hypotheses' scores with x_t+1 (before their extensions
are pruned: the attachment probabilities of one hypothesis sum to one), which gives per-token
surprisals. EOS, BOS and padding always shift (a sentence's first word too: nothing of its
sentence is on the stack). With a beam at least as wide as the number of attachment sequences,
the result is exact: `exhaustive_score` enumerates them and scores each with the training
loss's own code (`model.joint_loss` over the spans the attachments build), and the tests check
the two agree.

Each step feeds one token per hypothesis through the key/value cache (`cache.step`: keys and
values stay valid as the stack changes, only the new query's stack-tape bias reads the
hypothesis's current tape row) and reorders the cache for the kept hypotheses (`cache.select`);
`use_cache=False` runs the full forward pass over every prefix instead (the reference the cache
is tested against). Widths are padded to `slm_jax.buckets` sizes (`cache_width`) and rows to
whole chunks of the cache step (`cache.rows_for`) so steps reuse compilations and a row's
numbers do not depend on the row count. `beam_batch.beam_score_many` runs this search
for many rows at once (bit for bit the same results; this one-row search is its oracle).
`slm_jax.inference.incremental`'s arena decoder is not used: its hook has masks, not a per-query
bias, and its reselection copies arena paths the Pushdown stack does not need.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.buckets import bucket
from slm_jax.kinds import BOS_CODE, EOS_CODE, TERMINAL_CODE
from slm_jax.pushdown import cache
from slm_jax.pushdown.model import PushdownLM, joint_loss
from slm_jax.pushdown.stack import Stack
from slm_jax.pushdown.structure import PushdownRows, stack_tape
from slm_jax.structure import parse_attention, row_metadata, target_mask

_CAUSAL = parse_attention("causal")


@dataclasses.dataclass
class BeamScore:
  """`log_prob`: log p̃(x) of the whole row; `prefix_log_probs[t]`: log p̃(x≤t) (index 0: 0,
  BOS is given); `best`: the attachments of the best final hypothesis (one per token)."""

  log_prob: float
  prefix_log_probs: np.ndarray
  best: list[int]
  hypotheses: int  # final beam size


BEAM = 300  # SPEC §14: the attachment beam of SG, BLiMP and doc-PPL scoring


def check_row(kinds_T: np.ndarray, sentence_T: np.ndarray) -> None:
  """A row the attachment beam scores: BOS, then terminals and EOS (a one-line error if not)."""
  kinds_T, sentence_T = np.asarray(kinds_T), np.asarray(sentence_T)
  if kinds_T.ndim != 1 or sentence_T.shape != kinds_T.shape:
    raise ValueError(f"pushdown scoring: kinds and sentence must be one row of equal length, got "
                     f"shapes {kinds_T.shape} and {sentence_T.shape}")
  if len(kinds_T) < 2 or kinds_T[0] != BOS_CODE:
    raise ValueError("pushdown scoring: a row starts with BOS and has a token after it")
  bad = np.flatnonzero(~np.isin(kinds_T[1:], (TERMINAL_CODE, EOS_CODE)))
  if bad.size:
    raise ValueError(f"pushdown scoring: token {bad[0] + 1} has kind {kinds_T[bad[0] + 1]}; "
                     "after BOS a row holds terminals and EOS only")


def opens_sentence(kinds_T, sentence_T, t: int) -> bool:
  """Token t is its sentence's first word (nothing of its sentence is on the stack): the
  one-token form the oracle searches read as they go; `sentence_openings` is the whole row."""
  return kinds_T[t] == TERMINAL_CODE and (t == 1 or sentence_T[t] != sentence_T[t - 1])


def sentence_openings(kinds_T, sentence_T) -> np.ndarray:
  """bool [T]: `opens_sentence` of every token of a row (`check_row`'s: BOS first) at once."""
  kinds_T, sentence_T = np.asarray(kinds_T), np.asarray(sentence_T)
  changed_T = np.zeros(len(kinds_T), bool)
  changed_T[1:] = sentence_T[1:] != sentence_T[:-1]
  changed_T[1:2] = True  # the first token after BOS
  return (kinds_T == TERMINAL_CODE) & changed_T


@nnx.jit
def _step(model: PushdownLM, tokens_NT, meta, tape_NTS, next_N, t):
  """Log p(x_t+1) per row, and the attachment logits (reduce [N, S], shift [N]) at query t."""
  logits_NTV, h_NTD = model.forward(tokens_NT, meta, tape_NTS)
  word_N = jax.nn.log_softmax(logits_NTV[:, t], axis=-1)[jnp.arange(len(next_N)), next_N]
  next_NT = tokens_NT.at[:, t].set(next_N)  # the head at t reads token t+1's embedding
  reduce_NTS, shift_NT = model.attachment_logits(h_NTD, next_NT, tape_NTS)
  return word_N, reduce_NTS[:, t], shift_NT[:, t]


@dataclasses.dataclass
class _Hypothesis:
  score: float  # log p(x≤t, a≤t)
  stack: Stack
  tape: np.ndarray  # [width, width]: row t' = the stack tape after token t'
  attachments: list[int]


def _padded(tokens_T, kinds_T, t: int, hyps: list[_Hypothesis], width: int):
  """Device inputs of query t for every hypothesis, rows and widths padded to buckets."""
  rows = bucket(len(hyps), least=8)
  tokens = np.zeros((rows, width), np.int32)
  tokens[:, :len(tokens_T)] = tokens_T
  tape = np.zeros((rows, width, width), np.int32)
  for i, hyp in enumerate(hyps):
    tape[i] = hyp.tape
  kinds = np.zeros((rows, width), np.int8)
  kinds[:, :t + 1] = kinds_T[:t + 1]  # later tokens are padding: query t never sees them
  meta = row_metadata(kinds, (kinds != 0).astype(np.int32))
  next_N = np.full(rows, tokens_T[t + 1], np.int32)
  return jnp.asarray(tokens), meta, jnp.asarray(tape), jnp.asarray(next_N)


class _Recompute:
  """Each query runs the full forward pass over the prefix rows of every hypothesis."""

  def __init__(self, model, tokens_T, kinds_T, width):
    self.model, self.tokens_T, self.kinds_T, self.width = model, tokens_T, kinds_T, width

  def __call__(self, t: int, hyps: list[_Hypothesis]):
    return _step(self.model, *_padded(self.tokens_T, self.kinds_T, t, hyps, self.width),
                 jnp.int32(t))

  def keep(self, parents: list[int]) -> None:
    pass


class _Cached:
  """Each query feeds one token per hypothesis through the key/value cache (`cache.step`)."""

  def __init__(self, model, tokens_T, kinds_T, width):
    self.model, self.tokens_T, self.width = model, tokens_T, width
    self.cache = cache.empty(model, cache.rows_for(1), width)

  def __call__(self, t: int, hyps: list[_Hypothesis]):
    rows = self.cache.h.shape[0]
    tape = np.zeros((rows, self.width), np.int32)
    for i, hyp in enumerate(hyps):
      tape[i] = hyp.tape[t]
    token = np.full(rows, self.tokens_T[t], np.int32)
    nxt = np.full(rows, self.tokens_T[t + 1], np.int32)
    self.cache, *out = cache.step(self.model, self.cache, jnp.asarray(token), jnp.int32(t),
                                  jnp.asarray(tape), jnp.asarray(nxt), jnp.int32(len(hyps)))
    return out

  def keep(self, parents: list[int]) -> None:
    rows = cache.rows_for(len(parents))
    self.cache = cache.select(self.cache, jnp.asarray(parents + [0] * (rows - len(parents))))


def cache_width(length: int) -> int:
  """Cache slots of a row of `length` tokens: its `slm_jax.buckets` size (few shapes compile;
  a row's numbers depend on the slot count, so every search of a row uses this one)."""
  return bucket(length, least=8)


def beam_score(model: PushdownLM, tokens_T, kinds_T, sentence_T, beam: int = BEAM,
               use_cache: bool = True) -> BeamScore:
  """Word-synchronous beam over attachments of one row (`tokens_T`: BOS, terminals, EOS; the
  sentence ordinal of every token in `sentence_T`). `use_cache=False` recomputes every prefix
  (the reference the cached decoding is tested against)."""
  tokens_T, kinds_T, sentence_T = (np.asarray(a) for a in (tokens_T, kinds_T, sentence_T))
  check_row(kinds_T, sentence_T)
  if beam < 1:
    raise ValueError(f"pushdown scoring: beam must be ≥ 1, got {beam}")
  L = len(tokens_T)
  width = cache_width(L)
  engine = (_Cached if use_cache else _Recompute)(model, tokens_T, kinds_T, width)
  start = Stack(L)
  start.push(0, 0)
  hyps = [_Hypothesis(0.0, start, np.zeros((width, width), np.int32), [0])]
  prefix = np.zeros(L)
  for t in range(L - 1):
    word, reduce, shift = (np.asarray(a, np.float64) for a in engine(t, hyps))
    scores = np.array([h.score for h in hyps]) + word[:len(hyps)]
    prefix[t + 1] = float(np.logaddexp.reduce(scores))
    opens = opens_sentence(kinds_T, sentence_T, t + 1)
    candidates = []  # (score, hypothesis, attachment)
    for i, hyp in enumerate(hyps):
      if opens:
        hyp.stack.start_sentence()
      options = hyp.stack.options() if kinds_T[t + 1] == TERMINAL_CODE else []
      logits = np.concatenate([reduce[i, options], [shift[i]]])
      for option, lp in zip(options + [t + 1], logits - np.logaddexp.reduce(logits)):
        candidates.append((scores[i] + lp, i, option))
    candidates.sort(key=lambda c: -c[0])
    extended = []
    for score, i, option in candidates[:beam]:
      stack = hyps[i].stack.copy()
      stack.push(t + 1, option)
      tape = hyps[i].tape.copy()
      tape[t + 1, :L] = stack.depth
      extended.append(_Hypothesis(score, stack, tape, hyps[i].attachments + [option]))
    engine.keep([i for _, i, _ in candidates[:beam]])
    hyps = extended
  total = float(np.logaddexp.reduce([h.score for h in hyps]))
  return BeamScore(total, prefix, hyps[0].attachments, len(hyps))


def attachment_sequences(kinds_T, sentence_T) -> list[list[int]]:
  """Every attachment sequence of a row (its first entry BOS's shift), by depth-first search
  over `Stack` states; exponential: for short rows (tests, checks)."""
  kinds_T, sentence_T = np.asarray(kinds_T), np.asarray(sentence_T)
  check_row(kinds_T, sentence_T)
  L = len(kinds_T)
  out = []

  def walk(stack: Stack, attachments: list[int]):
    e = len(attachments)
    if e == L:
      out.append(attachments)
      return
    if opens_sentence(kinds_T, sentence_T, e):
      stack.start_sentence()
    options = stack.options() if kinds_T[e] == TERMINAL_CODE else []
    for option in options + [e]:
      child = stack.copy()
      child.push(e, option)
      walk(child, attachments + [option])

  start = Stack(L)
  start.push(0, 0)
  walk(start, [0])
  return out


def _rows_of(stack: Stack, kinds_T, sentence_T, attachments) -> PushdownRows:
  L = len(kinds_T)
  end = np.where(stack.span_end < L, stack.span_end, L)
  return PushdownRows(np.arange(L)[None], np.asarray(kinds_T, np.int32)[None],
                      np.ones((1, L), np.int32), np.asarray(sentence_T, np.int32)[None],
                      stack.span_start[None], end[None], np.asarray(attachments, np.int32)[None])


def replay(kinds_T, sentence_T, attachments: Sequence[int], length: int | None = None) -> Stack:
  """The `Stack` after pushing tokens 0 … len(attachments) − 1 of a row with these attachments
  (each sentence's first word opens it); `length`: the tokens it may hold (default the row's)."""
  kinds_T, sentence_T = np.asarray(kinds_T), np.asarray(sentence_T)
  stack = Stack(len(kinds_T) if length is None else length)
  for e, option in enumerate(attachments):
    if opens_sentence(kinds_T, sentence_T, e):
      stack.start_sentence()
    stack.push(e, int(option))
  return stack


def joint_log_prob(model: PushdownLM, tokens_T, kinds_T, sentence_T,
                   attachments: Sequence[int], first: int = 1) -> float:
  """log p(x, a) of one row and one attachment sequence, by the training loss's own code (the
  tape and options from the spans the attachments build); `first` > 1 counts only tokens
  first … (and their attachments), the earlier ones given (a prompt's)."""
  kinds_T, sentence_T = np.asarray(kinds_T), np.asarray(sentence_T)
  stack = replay(kinds_T, sentence_T, attachments)
  return float(_joint(model, jnp.asarray(tokens_T, jnp.int32)[None],
                      _rows_of(stack, kinds_T, sentence_T, attachments), jnp.int32(first)))


@nnx.jit
def _joint(model: PushdownLM, tokens_BT, rows: PushdownRows, first):
  meta = row_metadata(rows.kind, rows.segment, jnp)
  targets = target_mask(rows.kind, rows.segment, "lin0", _CAUSAL, xp=jnp)
  targets = targets & (jnp.arange(targets.shape[-1]) >= first)
  tape = stack_tape(rows.span_start, rows.span_end, jnp)
  return -joint_loss(model, rows, tokens_BT, meta, targets, tape)[0]


def exhaustive_score(model: PushdownLM, tokens_T, kinds_T, sentence_T) -> float:
  """log Σ_a p(x, a) over every attachment sequence (exact; short rows only)."""
  return float(np.logaddexp.reduce([joint_log_prob(model, tokens_T, kinds_T, sentence_T, a)
                                    for a in attachment_sequences(kinds_T, sentence_T)]))
