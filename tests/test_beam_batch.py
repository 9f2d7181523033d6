"""The batched beam search (`inference.beam_batch`) equals the one-sentence search
(`BeamSearcher.search`, the oracle) bit for bit: the same hypotheses in the same order, the same
scores and counters, for every tree linearization, with sentences refilled into finished slots,
prefixes, word pieces, and a decoder whose rows hold fewer sentences than asked."""

from __future__ import annotations

import functools
import logging

import hypothesis
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.eval.proposals import BeamProposals
from slm_jax.eval.syntaxgym import evaluate_syntaxgym
from slm_jax.inference.beam import BeamSearcher
from slm_jax.inference.beam_batch import select_per_slot
from slm_jax.inference.incremental import IncrementalDecoder, arena_bytes
from slm_jax.inference.scorer import Scorer
from slm_jax.kinds import Kind
from slm_jax.model import Decoder, ModelConfig
from slm_jax.tokenizer import make_tokenizer

VOCAB = "the cat cats chase mice meows dog dogs sees a big small".split()
TOKENIZER = make_tokenizer("word", words=VOCAB)
SENTENCES = [["the", "cat", "meows"], ["dogs"], ["a", "big", "dog", "sees", "the", "cats"],
             ["cats", "chase", "mice"], ["the", "small", "dog"], ["mice", "meows"],
             ["a", "cat", "sees", "a", "dog"]]


@functools.lru_cache(None)
def model_for(name: str, tokenizer=TOKENIZER, seed: int = 1) -> Decoder:
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2, n_heads=4,
                       compute_dtype=jnp.float32, init_std=0.3,
                       attention=CONFIGURATIONS[name].attention)
  return Decoder(config, rngs=nnx.Rngs(seed))


def assert_same(one, many) -> None:
  """Every field of two BeamResults equal (arrays bit for bit, nan == nan)."""
  assert one.words == many.words and one.cap == many.cap
  for field in ("prefix_logprobs", "terminal_prefix_logprobs", "beam_sizes"):
    np.testing.assert_array_equal(getattr(one, field), getattr(many, field), err_msg=field)
  for field in ("sentence_logprob", "sentence_terminal_logprob"):
    np.testing.assert_array_equal(getattr(one, field), getattr(many, field), err_msg=field)
  assert (one.best, one.best_complete) == (many.best, many.best_complete)
  assert (one.steps, one.expansions, one.pruned) == (many.steps, many.expansions, many.pruned)
  assert len(one.complete) == len(many.complete)
  for a, b in zip(one.complete, many.complete):
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.kinds, b.kinds)
    assert (a.symbols, a.logprob, a.terminal_logprob) == (b.symbols, b.logprob, b.terminal_logprob)


def compare(searcher: BeamSearcher, sentences, **options) -> list:
  one = searcher.search_many(sentences, batched=False, **options)
  many = searcher.search_many(sentences, batched=True, **options)
  for a, b in zip(one, many):
    assert_same(a, b)
  return many


@pytest.mark.parametrize("name", ["tgtree", "tree", "tg", "tree_triplecnt", "tree_noont",
                                  "tree_compress"])
def test_batched_equals_one_sentence_search(name):
  configuration = CONFIGURATIONS[name]
  searcher = BeamSearcher(model_for(name), TOKENIZER, configuration, beam=12, fast_track=3,
                          labels=("S", "NP", "VP"), sentences_per_batch=3)
  for complete in (False, True):
    results = compare(searcher, SENTENCES, complete=complete)
    assert sum(len(r.complete) for r in results) > 0 or not complete
  assert searcher.decoder(0).batch == 3 * searcher.capacity  # three sentences in flight


def test_search_rules_that_prune_differ_from_a_wide_beam_and_still_agree():
  """A narrow beam (pruning, depth-first continuation, fast track all active) and a word beam
  wider than the sub-beam."""
  searcher = BeamSearcher(model_for("tgtree"), TOKENIZER, CONFIGURATIONS["tgtree"], beam=4,
                          fast_track=2, word_beam=7, sentences_per_batch=4)
  results = compare(searcher, SENTENCES, complete=True)
  assert all(r.pruned > 0 for r in results if len(r.words) > 2)


@pytest.mark.slow  # ~60 s: the searched space; its fixed-input twin above stays in the default run
@hypothesis.settings(max_examples=12, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5), min_size=1,
                           max_size=6),
                  st.sampled_from([(1, 0), (3, 1), (6, 2), (10, 0)]), st.integers(1, 4),
                  st.booleans(), st.sampled_from(["tgtree", "tree"]))
def test_batched_equals_one_sentence_search_on_any_input(sentences, beams, concurrent, complete,
                                                          name):
  beam, fast_track = beams
  searcher = BeamSearcher(model_for(name), TOKENIZER, CONFIGURATIONS[name], beam=beam,
                          fast_track=fast_track, labels=("S", "NP"),
                          sentences_per_batch=concurrent)
  compare(searcher, sentences, complete=complete)


def test_prefixes_and_word_pieces():
  tokenizer = make_tokenizer("gpt2")
  assert len(tokenizer.encode_word("meows")) == 2
  name = "tree"
  searcher = BeamSearcher(model_for(name, tokenizer), tokenizer, CONFIGURATIONS[name], beam=6,
                          fast_track=2, labels=("S", "NP"), sentences_per_batch=2)
  sentences = [["cats", "meows"], ["the", "dog", "meows", "loudly"], ["meows"]]
  history = [tokenizer.bos_id] + list(tokenizer.encode_word("Yesterday"))
  kinds = [int(Kind.BOS)] + [int(Kind.TERMINAL)] * (len(history) - 1)
  prefixes = [([tokenizer.bos_id], [int(Kind.BOS)]), (history, kinds), (history, kinds)]
  results = compare(searcher, sentences, complete=True, prefixes=prefixes)
  alone = searcher.search(sentences[1], prefix_ids=history, prefix_kinds=kinds)
  assert_same(alone, results[1])
  plain = searcher.search(sentences[1])
  assert plain.prefix_logprobs[0] != results[1].prefix_logprobs[0]  # the prefix matters


def test_a_given_decoder_bounds_the_sentences_in_flight():
  name = "tg"
  model = model_for(name)
  searcher = BeamSearcher(model, TOKENIZER, CONFIGURATIONS[name], beam=5, fast_track=1,
                          labels=("S", "NP"))
  decoder = IncrementalDecoder(model, CONFIGURATIONS[name], max_len=64,
                               batch=2 * searcher.capacity + 3)
  fixed = BeamSearcher(decoder, TOKENIZER, CONFIGURATIONS[name], beam=5, fast_track=1,
                       labels=("S", "NP"), sentences_per_batch=6)
  for a, b in zip(searcher.search_many(SENTENCES, batched=False), fixed.search_many(SENTENCES)):
    assert_same(a, b)
  with pytest.raises(ValueError, match="at least one word"):
    fixed.search_many([["cats"], []])


def test_arena_bytes_is_what_a_decoder_allocates():
  model = model_for("tgtree")
  decoder = IncrementalDecoder(model, CONFIGURATIONS["tgtree"], max_len=48, batch=70)
  decoder.start([TOKENIZER.bos_id], [int(Kind.BOS)])
  allocated = sum(a.nbytes for a in decoder.cache.k + decoder.cache.v)
  assert arena_bytes(model.config, 70, 48) == allocated > 0


def test_a_memory_budget_bounds_the_sentences_in_flight(caplog):
  """Fewer sentences in flight where their arena would pass the budget (logged once), the
  same results; a budget below one sentence still searches one at a time."""
  name = "tgtree"
  model = model_for(name)
  options = dict(beam=5, fast_track=1, labels=("S", "NP"))
  free = BeamSearcher(model, TOKENIZER, CONFIGURATIONS[name], sentences_per_batch=6, **options)
  max_len = 64
  three = arena_bytes(model.config, 3 * free.capacity, max_len)
  four = arena_bytes(model.config, 4 * free.capacity, max_len)
  bounded = BeamSearcher(model, TOKENIZER, CONFIGURATIONS[name], sentences_per_batch=6,
                         memory_budget=(three + four) // 2, decoder_len=max_len, **options)
  with caplog.at_level(logging.WARNING, logger="slm_jax.inference.beam"):
    assert bounded.in_flight(max_len, 6) == 3
    assert bounded.in_flight(max_len, 6) == 3
  assert len(caplog.records) == 1 and "sentences in flight: 3, not 6" in caplog.text
  for a, b in zip(free.search_many(SENTENCES, batched=False), bounded.search_many(SENTENCES)):
    assert_same(a, b)
  assert bounded.decoder(0).batch == 3 * bounded.capacity
  assert free.in_flight(max_len, 6) == 6  # the default budget: half of this machine's memory
  tight = BeamSearcher(model, TOKENIZER, CONFIGURATIONS[name], sentences_per_batch=6,
                       memory_budget=1, **options)
  assert tight.in_flight(max_len, 6) == 1


def test_syntaxgym_and_beam_proposals_take_the_batched_search(tmp_path):
  import json
  suite = {"meta": {"name": "toy"}, "region_meta": {"1": "subject", "2": "verb"},
           "predictions": [{"type": "formula", "formula": "(2;%plural%) > (2;%singular%)"}],
           "items": [{"item_number": n, "conditions": [
               {"condition_name": "singular", "regions": [
                   {"region_number": 1, "content": f"the {s}"},
                   {"region_number": 2, "content": "meows"}]},
               {"condition_name": "plural", "regions": [
                   {"region_number": 1, "content": f"the {p}"},
                   {"region_number": 2, "content": "meows"}]}]}
               for n, (s, p) in enumerate([("cat", "cats"), ("dog", "dogs")], 1)]}
  (tmp_path / "json").mkdir()
  (tmp_path / "json" / "toy.json").write_text(json.dumps(suite))
  name = "tgtree"
  scorer = Scorer(model_for(name), TOKENIZER, CONFIGURATIONS[name])
  options = dict(beam=8, fast_track=2, labels=("S", "NP", "VP"), suites=["toy"])
  done = []
  batched = evaluate_syntaxgym(scorer, tmp_path / "json", on_suite=lambda n, r: done.append(n),
                               **options)
  one = evaluate_syntaxgym(scorer, tmp_path / "json", batched=False, **options)
  assert done == ["toy"]
  assert batched["suites"]["toy"]["surprisals"] == one["suites"]["toy"]["surprisals"]
  # BLiMP / doc-PPL proposals: prefetched sentences are searched together, the same trees.
  sentences = [tuple(s) for s in SENTENCES[:4]]
  batched_source = BeamProposals.for_model(scorer, TOKENIZER, CONFIGURATIONS[name], k=5,
                                           beam=8, fast_track=2, labels=("S", "NP", "VP"))
  alone_source = BeamProposals.for_model(scorer, TOKENIZER, CONFIGURATIONS[name], k=5, beam=8,
                                         fast_track=2, labels=("S", "NP", "VP"))
  batched_source.prefetch(sentences)
  for words in sentences:
    assert batched_source.proposals(words) == alone_source.proposals(words)
  assert batched_source.stats == alone_source.stats
  assert batched_source.last is None  # nothing was searched alone


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 8),
                  st.integers(0, 4), st.integers(0, 2**16))
def test_select_per_slot_is_the_stable_sort_rule_per_slot(rows_per_slot, beam, fast_track,
                                                          seed):
  """Per slot: the `beam` best candidates (a stable sort by score, ties by flat index), then
  the `fast_track` best fast-column candidates not among them — written out with full sorts."""
  rng = np.random.default_rng(seed)
  slot = np.repeat(np.arange(len(rows_per_slot)), rows_per_slot)
  cand = rng.integers(-3, 3, (len(slot), 5)).astype(float)  # ties on purpose
  cand[rng.random(cand.shape) < 0.3] = -np.inf
  fast_columns = np.arange(5) == 4
  expected = []
  for s in range(len(rows_per_slot)):
    (rows,) = np.nonzero(slot == s)
    flat = (rows[:, None] * 5 + np.arange(5)).ravel()
    flat = flat[np.isfinite(cand.ravel()[flat])]
    ranked = flat[np.argsort(-cand.ravel()[flat], kind="stable")]
    sub = list(ranked[:beam])
    fast = [i for i in ranked if fast_columns[i % 5]][:fast_track]
    expected += sub + [i for i in fast if i not in sub]
  f, c = select_per_slot(cand, slot, beam, fast_track, fast_columns)
  assert (f * 5 + c).tolist() == [int(i) for i in expected]
