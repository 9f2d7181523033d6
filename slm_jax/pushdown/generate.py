"""XSum summaries of a Pushdown run: summary tokens and attachment actions searched jointly (§14).

The prompt (article + instruction, written in lin1 with the trees the tree source supplies, as
`downstream.run` builds it) is teacher-forced: its compact terminal row (BOS, terminals) and
silver stack tape come from `structure.pushdown_rows` / `stack_tape`, and one `cache.prefill`
writes it into the key/value cache. Its stack is the replay of its silver attachments
(`beam.replay`). The summary is one new sentence after it (`Stack.start_sentence()`: its
first word and EOS always shift).

Each step, every live hypothesis (a piece sequence, an attachment sequence, its `Stack`) takes its
`beam` best allowed next pieces (base pieces and EOS, as `inference.generate.beam_generate`
allows them; EOS only after `min_tokens`), and every (piece, attachment ∈ stack options ∪
{shift}) pair is scored by

    hypothesis score + log p(piece | prefix, tape) + log p(attachment | piece, prefix, tape),

the attachment distribution being the head's softmax over the options and the shift
(`model.attachment_nll`'s). The best `beam` pairs are kept; EOS pairs ranked within the best
`beam` finish. Limits, ranking, early stop and the result are `beam_generate`'s (`max_tokens`
chosen tokens, EOS included; a hypothesis live at the limit is kept with `finished=False`;
`length_penalty` α = 0 ranks by the joint log-prob, so a beam wide enough equals exhaustive
search over (piece sequence, attachment sequence) — the tests check it); `Generation.attachments`
holds the best hypothesis's attachments (compact-row indices).

Each step feeds the kept tokens of all rows at once (`cache.feed`, with each hypothesis's new
stack-tape row) and scores the attachments of all rows' candidate pieces in one call
(`cache.attachments`); reselection gathers cache rows (`cache.select`). `recompute=True` runs the
full forward pass over every row instead (the reference the cache is tested against).

The per-article rule on the host (candidates, pruning, finished hypotheses, early stop,
counters, the result) is `ArticleSearch`; `generate_batch` runs it for
several articles sharing one cache (bit for bit this search, its oracle).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.buckets import bucket
from slm_jax.inference.generate import (BEAM, MAX_TOKENS, Generation, best_first, detokenize,
                                        prompt_arrays, search_done)
from slm_jax.inference.scorer import LENGTH_BUCKET
from slm_jax.kinds import BOS_CODE, CNT_CODE, ONT_CODE, TERMINAL_CODE
from slm_jax.pushdown import cache
from slm_jax.pushdown.beam import replay
from slm_jax.pushdown.model import PushdownLM
from slm_jax.pushdown.stack import Stack
from slm_jax.pushdown.structure import pushdown_rows, stack_tape
from slm_jax.structure import row_metadata
from slm_jax.tokenizer import Tokenizer


@dataclasses.dataclass(frozen=True)
class CompactPrompt:
  """The teacher-forced prompt in compact coordinates: tokens, kinds [P] and tape [P, P]."""
  tokens: np.ndarray
  kinds: np.ndarray
  tape: np.ndarray
  stack: Stack  # after the prompt, its summary sentence opened


def compact_prompt(ids, kinds, room: int) -> CompactPrompt:
  """The compact row, silver tape and stack of a lin1 prompt (BOS, trees, no EOS); the stack
  may hold `room` tokens after it."""
  bad = np.flatnonzero(~np.isin(kinds, (BOS_CODE, TERMINAL_CODE, ONT_CODE, CNT_CODE)))
  if kinds[0] != BOS_CODE or bad.size or not (kinds == ONT_CODE).any():
    where = 0 if kinds[0] != BOS_CODE else int(bad[0]) if bad.size else None
    raise ValueError("pushdown generation: the prompt is a lin1 row (BOS, then the trees of its "
                     "sentences, no EOS); " + (f"token {where} has kind {int(kinds[where])}"
                                                if where is not None else "it has no tree"))
  rows = pushdown_rows(kinds[None], np.ones((1, len(kinds)), np.int32))
  P = int((rows.source < len(kinds)).sum())
  source = rows.source[0, :P]
  tape = stack_tape(rows.span_start, rows.span_end)[0, :P, :P]
  stack = replay(rows.kind[0, :P], rows.sentence[0, :P], rows.attach[0, :P], P + room)
  stack.start_sentence()
  return CompactPrompt(ids[source], kinds[source], tape, stack)


@functools.partial(jax.jit, static_argnums=(4,))
def top_pieces(logp_NV, base_V, eos_N, eos, k: int):
  """The k most probable allowed next tokens of every row: log p, ids [N, k]; allowed are the
  `base_V` tokens, and EOS in the rows where `eos_N`."""
  allowed_NV = base_V[None] | ((jnp.arange(logp_NV.shape[-1]) == eos)[None] & eos_N[:, None])
  return jax.lax.top_k(jnp.where(allowed_NV, logp_NV, -jnp.inf), k)


@nnx.jit
def _forward_at(model: PushdownLM, tokens_NS, meta, tape_NSS, t):
  """Full forward pass: next-token log-softmax [N, V] and hidden state [N, D] at query t, and
  every hidden state [N, S, D] (the attachment keys)."""
  logits_NSV, h_NSD = model.forward(tokens_NS, meta, tape_NSS)
  logp_NV = jax.nn.log_softmax(logits_NSV[:, t].astype(jnp.float32), axis=-1)
  return logp_NV, h_NSD[:, t], h_NSD


def prefilled(model: PushdownLM, prompt: CompactPrompt, slots: int):
  """(one cache row of `slots` slots holding the prompt, the next-token log-softmax [1, V] and
  hidden state [1, D] after it, its last stack-tape row [1, slots]): `cache.prefill`."""
  P = len(prompt.tokens)
  tokens, kinds, tape = _padded(prompt, 1, slots)
  meta = row_metadata(kinds, (kinds != 0).astype(np.int32))
  one, logp_1V, h_1D = cache.prefill(model, jnp.asarray(tokens), meta, jnp.asarray(tape),
                                     jnp.int32(P - 1), slots=slots)
  return one, logp_1V, h_1D, tape[:, P - 1]


class _ArticleCache:
  """Rows of the key/value cache: the prompt prefilled once, one token per row per step."""

  def __init__(self, model: PushdownLM, prompt: CompactPrompt, rows: int, slots: int):
    one, logp_1V, h_1D, tape_1S = prefilled(model, prompt, slots)
    self.model, self.t = model, len(prompt.tokens) - 1
    self.cache = cache.select(one, jnp.zeros(rows, jnp.int32))
    self.logp = jnp.broadcast_to(logp_1V, (rows, logp_1V.shape[-1]))
    self.h = jnp.broadcast_to(h_1D, (rows, h_1D.shape[-1]))
    self.tape = jnp.asarray(np.repeat(tape_1S, rows, axis=0))

  def attachments(self, pieces_NK):
    return cache.attachments(self.model, self.h, self.cache.h, pieces_NK, self.tape)

  def advance(self, parents_N, tokens_N, tape_NS) -> None:
    self.t += 1
    self.tape = jnp.asarray(tape_NS)
    self.cache = cache.select(self.cache, jnp.asarray(parents_N))
    self.cache, self.logp, self.h = cache.feed(self.model, self.cache, jnp.asarray(tokens_N),
                                               jnp.int32(self.t), self.tape)


class _ArticleRecompute:
  """Every row's whole compact row and stack tape, run through the full forward pass per step."""

  def __init__(self, model: PushdownLM, prompt: CompactPrompt, rows: int, slots: int):
    self.model, self.t = model, len(prompt.tokens) - 1
    self.tokens, self.kinds, self.tape = _padded(prompt, rows, slots)
    self._run()

  def _run(self) -> None:
    meta = row_metadata(self.kinds, (self.kinds != 0).astype(np.int32))
    self.logp, self.h, self.keys = _forward_at(self.model, jnp.asarray(self.tokens), meta,
                                               jnp.asarray(self.tape), jnp.int32(self.t))

  def attachments(self, pieces_NK):
    return cache.attachments(self.model, self.h, self.keys, pieces_NK,
                             jnp.asarray(self.tape[:, self.t]))

  def advance(self, parents_N, tokens_N, tape_NS) -> None:
    self.tokens, self.kinds, self.tape = (a[parents_N] for a in (self.tokens, self.kinds,
                                                                 self.tape))
    self.t += 1
    self.tokens[:, self.t], self.kinds[:, self.t], self.tape[:, self.t] = (tokens_N,
                                                                            TERMINAL_CODE, tape_NS)
    self._run()


def _padded(prompt: CompactPrompt, rows: int, slots: int):
  """tokens, kinds [rows, slots] and tape [rows, slots, slots] holding the prompt."""
  P = len(prompt.tokens)
  tokens, kinds = np.zeros((rows, slots), np.int32), np.zeros((rows, slots), np.int32)
  tape = np.zeros((rows, slots, slots), np.int32)
  tokens[:, :P], kinds[:, :P], tape[:, :P, :P] = prompt.tokens, prompt.kinds, prompt.tape
  return tokens, kinds, tape


@dataclasses.dataclass
class _SummaryHypothesis:
  score: float  # log p(summary so far, its attachments | prompt)
  stack: Stack
  ids: list[int]
  attachments: list[int]


def _candidates(hyps, logp_Nk, pieces_Nk, reduce_NkS, shift_Nk, e: int, eos: int):
  """(score, hypothesis, piece, attachment) arrays of every allowed (piece, attachment) pair."""
  out = []
  for i, hyp in enumerate(hyps):
    options = hyp.stack.options() if hyp.ids else []  # the summary's first word shifts
    logits_kO = np.concatenate([reduce_NkS[i][:, options], shift_Nk[i][:, None]], axis=1)
    logits_kO[pieces_Nk[i] == eos, :-1] = -np.inf  # EOS shifts
    lp_kO = logits_kO - np.logaddexp.reduce(logits_kO, axis=1, keepdims=True)
    total_kO = hyp.score + logp_Nk[i][:, None] + lp_kO
    k, O = total_kO.shape
    out.append((total_kO.ravel(), np.full(k * O, i), np.repeat(pieces_Nk[i], O),
                np.tile(np.asarray(options + [e], np.int64), k)))
  return [np.concatenate(parts) for parts in zip(*out)]


def check_settings(beam: int, max_tokens: int, min_tokens: int) -> None:
  if beam < 1 or max_tokens < 1 or not 0 <= min_tokens < max_tokens:
    raise ValueError(f"pushdown generation: need beam >= 1, max_tokens >= 1, 0 <= min_tokens < "
                     f"max_tokens; got {beam}, {max_tokens}, {min_tokens}")


def cache_slots(prompt: CompactPrompt, max_tokens: int) -> int:
  """Cache slots of an article's search: its prompt and `max_tokens` summary tokens, bucketed."""
  return bucket(len(prompt.tokens) + max_tokens, LENGTH_BUCKET)


def base_pieces(model: PushdownLM, tokenizer: Tokenizer) -> np.ndarray:
  """[V] bool: the pieces a summary may take besides EOS (the tokenizer's base pieces)."""
  allowed = np.zeros(model.config.vocab_size, bool)
  allowed[:tokenizer.base_size] = True
  return allowed


class ArticleSearch:
  """One article's joint beam on the host (module docstring): its hypotheses, finished
  hypotheses and counters; `choose` takes one step's device outputs for its `beam` cache rows."""

  def __init__(self, prompt: CompactPrompt, tokenizer: Tokenizer, *, beam: int, max_tokens: int,
               min_tokens: int, length_penalty: float, slots: int):
    self.P, self.slots, self.tokenizer = len(prompt.tokens), slots, tokenizer
    self.beam, self.max_tokens, self.min_tokens = beam, max_tokens, min_tokens
    self.length_penalty = length_penalty
    self.t = 0  # the step: summary tokens chosen so far by every live hypothesis
    self.hyps = [_SummaryHypothesis(0.0, prompt.stack, [], [])]
    self.done: list[tuple[list[int], list[int], float, int, bool]] = []  # ids, attach, lp, n, end
    self.steps = self.positions = 0

  @property
  def eos_allowed(self) -> bool:
    return self.t >= self.min_tokens

  def choose(self, logp_Nk, pieces_Nk, reduce_NkS, shift_Nk):
    """Step t's pruning from its rows' next-piece log-probs and ids [beam, k] and attachment
    logits; → (parent rows, tokens [beam], tape [beam, slots]) to feed at position P + t (rows
    past the kept ones: row 0, token 0), or None when the search has ended."""
    t, P, beam, eos = self.t, self.P, self.beam, self.tokenizer.eos_id
    self.positions = t + 1
    score, parent, piece, attach = _candidates(self.hyps, logp_Nk.astype(np.float64), pieces_Nk,
                                               reduce_NkS, shift_Nk, P + t, eos)
    order = np.argsort(-score, kind="stable")
    order = order[np.isfinite(score[order])]
    for r in order[:beam][piece[order[:beam]] == eos]:
      hyp = self.hyps[parent[r]]
      self.done.append((hyp.ids, hyp.attachments, float(score[r]), t + 1, True))
    keep = order[piece[order] != eos][:beam]
    if t == self.max_tokens - 1 or not len(keep):
      for r in keep:  # stopped at the limit: kept, marked unfinished
        hyp = self.hyps[parent[r]]
        self.done.append((hyp.ids + [int(piece[r])], hyp.attachments + [int(attach[r])],
                          float(score[r]), t + 1, False))
      return None
    extended, tape = [], np.zeros((beam, self.slots), np.int32)
    for j, r in enumerate(keep):
      hyp = self.hyps[parent[r]]
      stack = hyp.stack.copy()
      stack.push(P + t, int(attach[r]))
      tape[j, :stack.length] = stack.depth
      extended.append(_SummaryHypothesis(float(score[r]), stack, hyp.ids + [int(piece[r])],
                                  hyp.attachments + [int(attach[r])]))
    self.hyps = extended
    parents, tokens = np.zeros(beam, np.int32), np.zeros(beam, np.int32)
    parents[:len(keep)], tokens[:len(keep)] = parent[keep], piece[keep]
    self.steps += 1
    self.t += 1
    if search_done([d[2] for d in self.done], [d[3] for d in self.done],
                   [h.score for h in self.hyps], t + 1, beam, self.length_penalty):
      return None  # the exact early stop: nothing live can rank among the best `beam`
    return parents, tokens, tape

  def result(self) -> Generation:
    done, tokenizer = self.done, self.tokenizer
    if not done:  # nothing finite to choose (cannot happen with finite log-probs)
      return Generation(np.zeros(0, np.int64), np.zeros(0, np.int8), "", -np.inf, False, 0,
                        self.steps, self.positions, attachments=np.zeros(0, np.int64))
    order, ranked = best_first([d[2] for d in done], [d[3] for d in done], self.length_penalty)
    best_ids, best_attach, logprob, _, finished = done[order[0]]
    best_ids = np.asarray(best_ids, np.int64)
    return Generation(best_ids, np.full(len(best_ids), TERMINAL_CODE, np.int8),
                      detokenize(tokenizer, best_ids), logprob, finished, len(best_ids),
                      self.steps, self.positions, ranked[order].tolist(),
                      np.asarray(best_attach, np.int64))


def joint_generate(model: PushdownLM, tokenizer: Tokenizer, prompt_tokens, *, prompt_kinds=None,
                   beam: int = BEAM, max_tokens: int = MAX_TOKENS, min_tokens: int = 0,
                   length_penalty: float = 0.0, recompute: bool = False) -> Generation:
  """The joint beam over summary pieces and attachments after a lin1 prompt (module docstring)."""
  check_settings(beam, max_tokens, min_tokens)
  ids, kinds = prompt_arrays(tokenizer, prompt_tokens, prompt_kinds)
  prompt = compact_prompt(ids, kinds, room=max_tokens)
  slots = cache_slots(prompt, max_tokens)
  engine = (_ArticleRecompute if recompute else _ArticleCache)(model, prompt, beam, slots)
  base = jnp.asarray(base_pieces(model, tokenizer))
  k = min(beam, tokenizer.base_size + 1)
  search = ArticleSearch(prompt, tokenizer, beam=beam, max_tokens=max_tokens,
                         min_tokens=min_tokens, length_penalty=length_penalty, slots=slots)
  while True:
    eos_N = jnp.full(beam, search.eos_allowed)
    logp, pieces = (np.asarray(a) for a in top_pieces(engine.logp, base, eos_N,
                                                      tokenizer.eos_id, k))
    reduce, shift = (np.asarray(a, np.float64) for a in engine.attachments(jnp.asarray(pieces)))
    fed = search.choose(logp, pieces, reduce, shift)
    if fed is None:
      return search.result()
    engine.advance(*fed)
