"""Several articles generated together (inference.generate_batch) give exactly the summaries of
one article at a time (inference.generate.word_synchronous_generate, the oracle): the same ids,
text, log-probs bit for bit, ranked scores and counters; prompts of different lengths share the
decoder; more articles than slots refill the freed slots."""

from __future__ import annotations

import types

import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.downstream.protocol import protocol
from slm_jax.inference.generate import word_synchronous_generate
from slm_jax.inference.generate_batch import word_synchronous_generate_many
from slm_jax.trees import Tree
from tests.test_generate import ARTICLE, TOKENIZER, cached_model, prompt_for

ARTICLES = [ARTICLE, ARTICLE[:1], ARTICLE[1:],
            [Tree("S", (Tree("NP", ("the", "cat")), Tree("VP", ("will", "go"))))] + ARTICLE,
            ARTICLE[::-1]]


def same(a, b) -> None:
  assert a.ids.tolist() == b.ids.tolist() and a.kinds.tolist() == b.kinds.tolist()
  assert a.text == b.text and a.finished == b.finished and a.words == b.words
  assert a.logprob == b.logprob and a.ranked == b.ranked  # bit for bit
  assert (a.steps, a.positions) == (b.steps, b.positions)


@pytest.mark.parametrize("name,options,concurrent", [
    ("tgtree", dict(beam=3, max_words=3), 2),  # 5 articles through 2 slots: refills
    ("tgtree", dict(beam=2, max_words=4, fast_track=2, max_open=2), 8),
    pytest.param("tree", dict(beam=4, max_words=3, length_penalty=1.0), 3,
                 marks=pytest.mark.slow)])
def test_batched_generation_equals_one_article_at_a_time(name, options, concurrent):
  prompts = [prompt_for(name, article) for article in ARTICLES]
  model, configuration = cached_model(name), CONFIGURATIONS[name]
  alone = [word_synchronous_generate(model, TOKENIZER, configuration, ids, prompt_kinds=kinds,
                                     **options) for ids, kinds in prompts]
  together = word_synchronous_generate_many(
      model, TOKENIZER, configuration, [ids for ids, _ in prompts],
      prompt_kinds=[kinds for _, kinds in prompts], concurrent=concurrent, **options)
  assert len(together) == len(prompts)
  for a, b in zip(alone, together):
    same(a, b)
  assert len({a.text for a in alone}) > 1  # the articles' summaries differ: no mix-up possible
  assert all(np.isfinite(a.logprob) for a in alone)


def test_a_small_memory_budget_takes_fewer_articles_and_changes_no_summary(caplog):
  """Past the memory budget fewer articles share the decoder (here one at a time, said once);
  the summaries stay those of the default."""
  prompts = [prompt_for("tgtree", article) for article in ARTICLES[:3]]
  model, configuration = cached_model("tgtree"), CONFIGURATIONS["tgtree"]
  options = dict(beam=2, max_words=3, prompt_kinds=[kinds for _, kinds in prompts])
  ids = [i for i, _ in prompts]
  free = word_synchronous_generate_many(model, TOKENIZER, configuration, ids, **options)
  assert not caplog.records
  tight = word_synchronous_generate_many(model, TOKENIZER, configuration, ids, memory_budget=1,
                                         **options)
  assert "articles in flight: 1, not 3" in caplog.text
  for a, b in zip(free, tight, strict=True):
    same(a, b)


def test_the_protocol_hands_on_the_articles_per_batch(monkeypatch):
  from slm_jax.downstream import protocol as protocol_lib  # pylint: disable=g-import-not-at-top
  seen = []
  monkeypatch.setattr(protocol_lib, "word_synchronous_generate_many",
                      lambda *a, **k: seen.append(k["concurrent"]) or [])
  run = types.SimpleNamespace(model=None, tokenizer=TOKENIZER,
                              configuration=CONFIGURATIONS["tgtree"])
  options = dict(beam=2, max_tokens=5, max_words=3, max_open=2)
  protocol(run.configuration).generate_many(run, [], concurrent=3, **options)
  protocol(run.configuration).generate_many(run, [], **options)
  assert seen == [3, 8]


def test_downstream_options_refuse_no_articles_per_batch():
  import pathlib  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.run import DownstreamOptions  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="articles_per_batch must be >= 1, got 0"):
    DownstreamOptions(pathlib.Path("."), articles_per_batch=0)
  assert DownstreamOptions(pathlib.Path(".")).articles_per_batch == 8


def test_options_are_checked_and_kinds_must_match():
  ids, kinds = prompt_for("tgtree")
  with pytest.raises(ValueError, match="2 prompts but 1 prompt_kinds"):
    word_synchronous_generate_many(cached_model("tgtree"), TOKENIZER, CONFIGURATIONS["tgtree"],
                                   [ids, ids], prompt_kinds=[kinds])
  with pytest.raises(ValueError, match="concurrent must be >= 1, got 0"):
    word_synchronous_generate_many(cached_model("tgtree"), TOKENIZER, CONFIGURATIONS["tgtree"],
                                   [ids, ids], prompt_kinds=[kinds, kinds], concurrent=0)
  with pytest.raises(ValueError, match="no word-synchronous search"):
    word_synchronous_generate_many(cached_model("terminal"), TOKENIZER,
                                   CONFIGURATIONS["terminal"], [ids, ids], prompt_kinds=[kinds, kinds])


@pytest.mark.parametrize("name", ["tgtree", "terminal"])
def test_the_protocol_generates_several_summaries_as_one_at_a_time(name):
  run = types.SimpleNamespace(model=cached_model(name), tokenizer=TOKENIZER,
                              configuration=CONFIGURATIONS[name])
  prompts = [prompt_for(name, article) for article in ARTICLES[:3]]
  options = dict(beam=2, max_tokens=5, max_words=3, max_open=2)
  search = protocol(run.configuration)
  together = search.generate_many(run, prompts, **options)
  for (ids, kinds), summary in zip(prompts, together, strict=True):
    same(search.generate(run, ids, kinds, **options), summary)
