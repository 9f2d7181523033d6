"""The Pushdown joint summary search of several articles at once (issue #35 item 3).

`generate.joint_generate` (the oracle) searches one article: `beam` cache
rows, one `top_pieces`, one `cache.attachments` and one `select` + `cache.feed` per step.
`joint_generate_many` runs the same search for `concurrent` articles in one key/value cache:

  widths   articles are searched one cache width at a time (`cache_slots`: the slots the one-
           article search gives each), longest first within a width: XLA:CPU's attention over
           16 slots and over 24 rounds differently
  lanes    each article in flight holds a lane of `beam` consecutive cache rows (its hypotheses,
           as the one-article search's rows); the lanes in flight are the first ones, so the
           device computes only them (`live`)
  a step   one `top_pieces` over every row (EOS allowed per row, by its article's step), one
           `cache.attachments_chunks` and one `select` + `cache.feed_chunks` (each row at its own
           article's position) for every article in flight; the device computes one lane per
           call of the chunk loop (`cache.in_chunks` with chunks of `beam` rows): XLA:CPU's
           matmul kernels round by row count, so each row's numbers are those of the one-article
           search's `beam`-row calls
  the host each article's pruning, finished hypotheses, early stop and counters are the one-
           article search's own (`ArticleSearch.choose`: a loop over its ≤ `beam` hypotheses'
           `Stack`s; benchmarks/pushdown_beam_bench.py --generate times it)
  refill   an article whose search ended gives up its lane; the lanes still searching move up
           (the `select` gather reorders them) and the next articles of the queue are prefilled
           (one `cache.prefill` each, as alone) into the free lanes

The results are in the input order and equal `joint_generate`'s one article at a time bit for
bit (ids, attachments, log-prob, ranked scores, steps, positions);
tests/test_pushdown_generate_batch.py compares the two. `recompute=True` runs the full-forward
reference one article after another.
"""

from __future__ import annotations

import collections
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from slm_jax.inference.beam import fit_in_memory
from slm_jax.inference.generate import BEAM, MAX_TOKENS, Generation, prompt_arrays
from slm_jax.inference.generate_batch import CONCURRENT  # articles searched together
from slm_jax.pushdown import cache
from slm_jax.pushdown.generate import (ArticleSearch, CompactPrompt, base_pieces, cache_slots,
                                       check_settings, compact_prompt, joint_generate, prefilled,
                                       top_pieces)
from slm_jax.pushdown.model import PushdownLM
from slm_jax.tokenizer import Tokenizer


def joint_generate_many(model: PushdownLM, tokenizer: Tokenizer, prompts: Sequence, *,
                        prompt_kinds: Sequence | None = None, beam: int = BEAM,
                        max_tokens: int = MAX_TOKENS, min_tokens: int = 0,
                        length_penalty: float = 0.0, recompute: bool = False,
                        concurrent: int = CONCURRENT,
                        memory_budget: int | None = None) -> list[Generation]:
  """`joint_generate` of every prompt (a `linearize.Sequence`, or ids with `prompt_kinds[i]`),
  `concurrent` articles searched together (module docstring; fewer where their cache,
  `cache.peak_bytes`, would pass `memory_budget` bytes: `inference.beam.fit_in_memory`); results
  in the input order."""
  check_settings(beam, max_tokens, min_tokens)
  if concurrent < 1:
    raise ValueError(f"pushdown generation: concurrent must be >= 1, got {concurrent}")
  kinds = list(prompt_kinds) if prompt_kinds is not None else [None] * len(prompts)
  if len(kinds) != len(prompts):
    raise ValueError(f"pushdown generation: {len(prompts)} prompts but {len(kinds)} "
                     "prompt_kinds")
  options = dict(beam=beam, max_tokens=max_tokens, min_tokens=min_tokens,
                 length_penalty=length_penalty)
  if recompute:
    return [joint_generate(model, tokenizer, p, prompt_kinds=k, recompute=True, **options)
            for p, k in zip(prompts, kinds)]
  compact = []
  for i, (p, k) in enumerate(zip(prompts, kinds)):
    try:
      compact.append(compact_prompt(*prompt_arrays(tokenizer, p, k), room=max_tokens))
    except ValueError as error:
      raise ValueError(f"prompt {i}: {error}") from None
  widths = np.array([cache_slots(c, max_tokens) for c in compact], np.int64)
  out: list[Generation | None] = [None] * len(compact)
  for width in sorted(set(widths.tolist()), reverse=True):
    group = np.flatnonzero(widths == width)
    lanes = fit_in_memory(lambda n: cache.peak_bytes(model.config, n * beam, int(width)),
                          min(concurrent, len(group)), f"articles of {width} slots",
                          budget=memory_budget)
    found = _Lanes(model, tokenizer, [compact[i] for i in group], int(width), lanes,
                   **options).run()
    for i, result in zip(group, found):
      out[i] = result
  return out


@functools.partial(jax.jit, static_argnums=(7,))
def _place(kv: cache.Cache, logp_NV, h_ND, one: cache.Cache, logp_1V, h_1D, start, rows: int):
  """The state with rows start … start + rows − 1 set to one prefilled article's."""
  put = lambda into, x, axis=0: jax.lax.dynamic_update_slice_in_dim(
      into, jnp.repeat(x, rows, axis=axis).astype(into.dtype), start, axis)
  return (cache.Cache(put(kv.k, one.k, 1), put(kv.v, one.v, 1), put(kv.h, one.h)),
          put(logp_NV, logp_1V), put(h_ND, h_1D))


class _Lanes:
  """The batched search of the articles of one cache width (module docstring)."""

  def __init__(self, model: PushdownLM, tokenizer: Tokenizer, prompts: list[CompactPrompt],
               slots: int, concurrent: int, **options):
    self.model, self.tokenizer, self.prompts, self.slots = model, tokenizer, prompts, slots
    self.options, self.beam = options, options["beam"]
    self.lanes = min(concurrent, len(prompts))
    N, c = self.lanes * self.beam, model.config
    self.kv = cache.empty(model, N, slots)
    self.logp = jnp.zeros((N, c.vocab_size), jnp.float32)
    self.h = jnp.zeros((N, c.d_model), c.compute_dtype)
    self.tape = np.zeros((N, slots), np.int32)
    self.base = jnp.asarray(base_pieces(model, tokenizer))
    self.k = min(self.beam, tokenizer.base_size + 1)
    lengths = np.array([len(p.tokens) for p in prompts])
    self.queue = collections.deque(np.argsort(-lengths, kind="stable").tolist())
    self.flight: list[tuple[int, ArticleSearch]] = []  # (prompt index, its search) by lane
    self.results: list[Generation | None] = [None] * len(prompts)

  def run(self) -> list[Generation]:
    self._refill()
    while self.flight:
      self._step()
    return self.results

  def _refill(self) -> None:
    while len(self.flight) < self.lanes and self.queue:
      i = self.queue.popleft()
      prompt, start = self.prompts[i], len(self.flight) * self.beam
      one, logp_1V, h_1D, tape_1S = prefilled(self.model, prompt, self.slots)
      self.kv, self.logp, self.h = _place(self.kv, self.logp, self.h, one, logp_1V, h_1D,
                                          jnp.int32(start), self.beam)
      self.tape[start:start + self.beam] = tape_1S
      self.flight.append((i, ArticleSearch(prompt, self.tokenizer, slots=self.slots,
                                           **self.options)))

  def _step(self) -> None:
    beam, live = self.beam, len(self.flight) * self.beam
    eos_N = np.zeros(len(self.tape), bool)
    for lane, (_, search) in enumerate(self.flight):
      eos_N[lane * beam:(lane + 1) * beam] = search.eos_allowed
    logp, pieces = top_pieces(self.logp, self.base, jnp.asarray(eos_N), self.tokenizer.eos_id,
                              self.k)
    reduce, shift = cache.attachments_chunks(self.model, self.h, self.kv.h, pieces,
                                             jnp.asarray(self.tape), chunk=beam,
                                             live=jnp.int32(live))
    logp, pieces = np.asarray(logp)[:live], np.asarray(pieces)[:live]
    reduce, shift = (np.asarray(a, np.float64)[:live] for a in (reduce, shift))
    parents = np.zeros(len(self.tape), np.int32)
    tokens, t_N = np.zeros_like(parents), np.zeros_like(parents)
    tape = np.zeros_like(self.tape)
    going = []
    for lane, (i, search) in enumerate(self.flight):
      rows = slice(lane * beam, (lane + 1) * beam)
      fed = search.choose(logp[rows], pieces[rows], reduce[rows], shift[rows])
      if fed is None:
        self.results[i] = search.result()
        continue
      into = slice(len(going) * beam, (len(going) + 1) * beam)
      parents[into], tokens[into], tape[into] = lane * beam + fed[0], fed[1], fed[2]
      t_N[into] = search.P + search.t - 1  # the position of the token just chosen
      going.append((i, search))
    self.flight, self.tape = going, tape
    if going:
      self.kv = cache.select(self.kv, jnp.asarray(parents))
      self.kv, self.logp, self.h = cache.feed_chunks(
          self.model, self.kv, jnp.asarray(tokens), jnp.asarray(t_N), jnp.asarray(tape),
          chunk=beam, live=jnp.int32(len(going) * beam))
    self._refill()
