"""Several articles' Pushdown joint summary searches run together
(`pushdown.generate_batch.joint_generate_many`) give exactly the summaries of one
article at a time (`pushdown.generate.joint_generate`, the oracle): the same ids, attachments,
log-prob and ranked scores bit for bit, the same counters; prompts of different lengths (so
different positions and two cache widths), articles ending at different steps (early stop, EOS,
the token limit), fewer lanes than articles (refills)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.encode import encode_document
from slm_jax.downstream.protocol import protocol
from slm_jax.pushdown.generate import cache_slots, compact_prompt, joint_generate
from slm_jax.pushdown.generate_batch import joint_generate_many
from slm_jax.tokenizer import make_tokenizer
from tests.test_pushdown_model import tiny_model

ARTICLES = ["(S (NP a b) (VP b a)) (S b (VP a))", "(S a (VP b))",
            "(S (NP c a) (VP b (NP a c))) (S (NP a) (VP c (NP b a))) (S c (VP a b))",
            "(S (NP c a) (VP b (NP a c)))",
            "(S (NP a c) (VP c)) (S (NP b) (VP a (NP c a) (PP b c)))"]
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def setup():
  tokenizer = make_tokenizer("word", words=["a", "b", "c"])
  model = tiny_model(seed=2, n_layers=1, vocab_size=tokenizer.vocab_size)
  model.depth_embed[...] = model.depth_embed[...] * 30  # attachments change the word scores
  model.attach_depth[...] = model.attach_depth[...] * 30
  prompts = []
  for text in ARTICLES:
    sequence = encode_document(ptb.parse_trees(text), tokenizer, "lin1")
    prompts.append(sequence.take(np.arange(len(sequence) - 1)))  # the summary follows: no EOS
  return tokenizer, model, prompts


def same(a, b) -> None:
  assert a.ids.tolist() == b.ids.tolist() and a.attachments.tolist() == b.attachments.tolist()
  assert a.text == b.text and a.finished == b.finished
  assert a.logprob == b.logprob and a.ranked == b.ranked  # bit for bit
  assert (a.steps, a.positions, a.words) == (b.steps, b.positions, b.words)


@pytest.mark.parametrize("options, concurrent", [
    (dict(beam=2, min_tokens=1), 2),  # 4 articles of one width through 2 lanes: refills
    (dict(beam=3, min_tokens=2, length_penalty=1.0), 8)])
def test_batched_generation_equals_one_article_at_a_time(setup, options, concurrent):
  tokenizer, model, prompts = setup
  widths = {cache_slots(compact_prompt(p.tokens, p.kinds, room=MAX_TOKENS), MAX_TOKENS)
            for p in prompts}
  assert len(widths) == 2  # two cache widths, searched one after the other
  alone = [joint_generate(model, tokenizer, p, max_tokens=MAX_TOKENS, **options)
           for p in prompts]
  together = joint_generate_many(model, tokenizer, prompts, max_tokens=MAX_TOKENS,
                                 concurrent=concurrent, **options)
  assert len(together) == len(prompts)
  for a, b in zip(alone, together):
    same(a, b)
  assert len({a.text for a in alone}) > 1  # the summaries differ: no mix-up possible
  assert len({a.steps for a in alone}) > 1 and {a.finished for a in alone} == {True, False}
  assert any(len(a.ranked) > 1 for a in alone)


def test_a_small_memory_budget_takes_fewer_articles_and_changes_no_summary(setup, caplog):
  tokenizer, model, prompts = setup
  free = joint_generate_many(model, tokenizer, prompts, max_tokens=MAX_TOKENS, beam=2)
  assert not caplog.records
  tight = joint_generate_many(model, tokenizer, prompts, max_tokens=MAX_TOKENS, beam=2,
                              memory_budget=1)
  assert "articles of 16 slots in flight: 1, not 4" in caplog.text  # the other width holds one
  for a, b in zip(free, tight, strict=True):
    same(a, b)


def test_the_protocol_generates_several_summaries_as_one_at_a_time(setup):
  tokenizer, model, prompts = setup
  run = types.SimpleNamespace(model=model, tokenizer=tokenizer,
                              configuration=CONFIGURATIONS["pushdown"])
  encoded = [(np.asarray(p.tokens), np.asarray(p.kinds)) for p in prompts[:3]]
  options = dict(beam=2, max_tokens=4, max_words=3, max_open=2)
  search = protocol(run.configuration)
  for (ids, kinds), summary in zip(encoded, search.generate_many(run, encoded, **options),
                                   strict=True):
    same(search.generate(run, ids, kinds, **options), summary)


def test_bad_input_is_named(setup):
  tokenizer, model, prompts = setup
  with pytest.raises(ValueError, match="concurrent must be >= 1, got 0"):
    joint_generate_many(model, tokenizer, prompts, concurrent=0)
  with pytest.raises(ValueError, match="2 prompts but 1 prompt_kinds"):
    joint_generate_many(model, tokenizer, [prompts[0].tokens] * 2,
                        prompt_kinds=[prompts[0].kinds])
  with pytest.raises(ValueError, match="prompt 1: .*token 0 has kind"):
    joint_generate_many(model, tokenizer, [prompts[0].tokens, prompts[0].tokens[1:]],
                        prompt_kinds=[prompts[0].kinds, prompts[0].kinds[1:]])
  with pytest.raises(ValueError, match="min_tokens"):
    joint_generate_many(model, tokenizer, prompts, beam=2, max_tokens=2, min_tokens=2)
