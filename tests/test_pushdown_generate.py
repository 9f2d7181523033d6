"""The Pushdown joint summary search: a wide enough beam equals exhaustive enumeration over (piece
sequence, attachment sequence) scored teacher-forced; the cached path equals the recompute path."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.data.encode import encode_document
from slm_jax.kinds import EOS_CODE, TERMINAL_CODE
from slm_jax.pushdown.beam import joint_log_prob
from slm_jax.pushdown.generate import compact_prompt, joint_generate
from slm_jax.pushdown.structure import pushdown_rows
from slm_jax.tokenizer import make_tokenizer
from tests.test_pushdown_model import tiny_model

PROMPT = "(S (NP a b) (VP b a)) (S b (VP a))"


@pytest.fixture(scope="module")
def setup():
  tokenizer = make_tokenizer("word", words=["a", "b"])
  model = tiny_model(seed=4, n_layers=1, vocab_size=tokenizer.vocab_size)
  model.depth_embed[...] = model.depth_embed[...] * 30  # attachments change the word scores
  model.attach_depth[...] = model.attach_depth[...] * 30
  sequence = encode_document(ptb.parse_trees(PROMPT), tokenizer, "lin1")
  prompt = sequence.take(np.arange(len(sequence) - 1))  # the summary follows: no EOS
  return tokenizer, model, prompt


def _summaries(tokenizer, prompt, max_tokens: int):
  """Every (pieces, attachments, finished) a search of `max_tokens` chosen tokens can end with:
  EOS after 0 … max_tokens − 1 pieces, or max_tokens pieces at the limit; all attachments."""
  P = len(compact_prompt(prompt.tokens, prompt.kinds, room=max_tokens).tokens)
  out = []

  def walk(stack, pieces, attachments):
    if len(pieces) < max_tokens:
      out.append((pieces, attachments, True))  # EOS next (it shifts)
    else:
      out.append((pieces, attachments, False))
      return
    e = P + len(pieces)
    for piece in range(tokenizer.base_size):
      for option in (stack.options() if pieces else []) + [e]:
        child = stack.copy()
        child.push(e, option)
        walk(child, pieces + [piece], attachments + [option])

  walk(compact_prompt(prompt.tokens, prompt.kinds, room=max_tokens).stack, [], [])
  return out


def _teacher_forced(model, tokenizer, prompt, pieces, attachments, finished) -> float:
  """log p(summary, its attachments | prompt) by the training loss's code over the whole row."""
  kinds = np.asarray(prompt.kinds)
  rows = pushdown_rows(kinds[None], np.ones((1, len(kinds)), np.int32))
  P = int((rows.source < len(kinds)).sum())
  tokens = list(np.asarray(prompt.tokens)[rows.source[0, :P]]) + pieces
  row_kinds = list(rows.kind[0, :P]) + [TERMINAL_CODE] * len(pieces)
  sentence = list(rows.sentence[0, :P]) + [rows.sentence[0, :P].max() + 1] * len(pieces)
  attach = list(rows.attach[0, :P]) + attachments
  if finished:
    tokens, row_kinds = tokens + [tokenizer.eos_id], row_kinds + [EOS_CODE]
    sentence, attach = sentence + [sentence[-1]], attach + [len(attach)]
  return joint_log_prob(model, tokens, row_kinds, sentence, attach, first=P)


def test_a_wide_beam_equals_exhaustive_enumeration(setup):
  tokenizer, model, prompt = setup
  max_tokens = 3
  every = _summaries(tokenizer, prompt, max_tokens)
  exact = [(_teacher_forced(model, tokenizer, prompt, *s), s) for s in every]
  exact.sort(key=lambda x: -x[0])
  wide = joint_generate(model, tokenizer, prompt, beam=len(every), max_tokens=max_tokens)
  best_score, (pieces, attachments, finished) = exact[0]
  assert wide.logprob == pytest.approx(best_score, abs=1e-4)
  assert wide.ids.tolist() == pieces and wide.attachments.tolist() == attachments
  assert wide.finished == finished
  # Nothing was pruned: every summary finished or stopped at the limit, with its exact score.
  np.testing.assert_allclose(wide.ranked, [s for s, _ in exact], atol=1e-4)
  assert len({tuple(s[1]) for _, s in exact if s[0]}) > 1  # attachments were really searched
  narrow = joint_generate(model, tokenizer, prompt, beam=2, max_tokens=max_tokens)
  assert narrow.logprob <= wide.logprob + 1e-6


@pytest.mark.parametrize("beam, max_tokens, min_tokens", [(2, 5, 0), (3, 4, 2)])
def test_the_cached_path_equals_the_recompute_path(setup, beam, max_tokens, min_tokens):
  tokenizer, model, prompt = setup
  cached = joint_generate(model, tokenizer, prompt, beam=beam, max_tokens=max_tokens,
                          min_tokens=min_tokens)
  again = joint_generate(model, tokenizer, prompt, beam=beam, max_tokens=max_tokens,
                         min_tokens=min_tokens, recompute=True)
  assert cached.ids.tolist() == again.ids.tolist()
  assert cached.attachments.tolist() == again.attachments.tolist()
  assert cached.logprob == pytest.approx(again.logprob, abs=1e-4)
  np.testing.assert_allclose(cached.ranked, again.ranked, atol=1e-4)
  assert (cached.steps, cached.positions, cached.finished) == (again.steps, again.positions,
                                                               again.finished)
  assert len(cached.ids) >= min_tokens and cached.text == " ".join(
      tokenizer.base.decode_piece(i) for i in cached.ids)


def test_bad_prompts_and_settings_are_named(setup):
  tokenizer, model, prompt = setup
  with pytest.raises(ValueError, match="token 0 has kind"):
    joint_generate(model, tokenizer, prompt.tokens[1:], prompt_kinds=prompt.kinds[1:])
  eos = np.append(prompt.kinds, EOS_CODE)
  with pytest.raises(ValueError, match=f"token {len(prompt)} has kind {EOS_CODE}"):
    joint_generate(model, tokenizer, np.append(prompt.tokens, tokenizer.eos_id), prompt_kinds=eos)
  with pytest.raises(ValueError, match="no tree"):
    joint_generate(model, tokenizer, [tokenizer.bos_id, 1, 2])
  with pytest.raises(ValueError, match="min_tokens"):
    joint_generate(model, tokenizer, prompt, beam=2, max_tokens=2, min_tokens=2)
