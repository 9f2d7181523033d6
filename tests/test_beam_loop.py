"""The compiled word loop (`inference.beam_loop`) equals the one-sentence search
(`BeamSearcher.search`, the oracle) bit for bit — the same hypotheses in the same order, the same
float64 scores, the same counters — with sentences refilled into finished slots, the EOS step,
prefixes, word pieces and arena compactions; the host is visited once per word; its float64 top-k is
the host's rule."""

from __future__ import annotations

import functools

import hypothesis
import hypothesis.strategies as st
import jax
import numpy as np
import pytest

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.inference import beam_loop
from slm_jax.inference.beam import BeamSearcher
from slm_jax.inference.beam_batch import top_k as host_top_k
from slm_jax.inference.incremental import IncrementalDecoder
from slm_jax.kinds import Kind
from slm_jax.tokenizer import make_tokenizer

# `compare`: the one-sentence search vs `search_many` (the compiled loop for these searchers).
from tests.test_beam_batch import SENTENCES, TOKENIZER, compare, model_for

LABELS = ("S", "NP", "VP")
OPTIONS = dict(beam=12, fast_track=3, labels=LABELS, sentences_per_batch=3)
_TOP_K = beam_loop._in_x64(jax.jit(beam_loop.top_k, static_argnums=1))


def test_the_compiled_loop_equals_the_one_sentence_search():
  """7 sentences through 3 slots (refills), with the EOS step; the host is visited once per
  word at most (`rounds` calls ≤ words searched, EOS steps included)."""
  searcher = BeamSearcher(model_for("tgtree"), TOKENIZER, CONFIGURATIONS["tgtree"],
                          compiled=True, **OPTIONS)
  results = compare(searcher, SENTENCES, complete=True)
  assert sum(len(r.complete) for r in results) > 0
  assert searcher.decoder(0).batch == 3 * searcher.capacity
  loop, calls = searcher._word_loop, []
  rounds = loop.rounds
  loop.rounds = lambda *args: calls.append(1) or rounds(*args)
  searcher.search_many(SENTENCES, complete=True)
  assert 0 < len(calls) <= sum(len(s) + 1 for s in SENTENCES)
  assert sum(r.steps for r in results) > len(calls)  # many rounds per visit


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tgtree", "tree", "tg", "tree_triplecnt", "tree_noont",
                                  "tree_compress"])
def test_the_compiled_loop_equals_the_one_sentence_search_for_every_linearization(name):
  searcher = BeamSearcher(model_for(name), TOKENIZER, CONFIGURATIONS[name], compiled=True,
                          **OPTIONS)
  for complete in (False, True):
    compare(searcher, SENTENCES, complete=complete)


@pytest.mark.slow
def test_prefixes_word_pieces_and_a_full_arena():
  """A prefix before some sentences, words of several pieces (GPT-2's vocabulary), and an arena
  so small that the loop stops for compactions: still the one-sentence search's results."""
  tokenizer = make_tokenizer("gpt2")
  assert len(tokenizer.encode_word("meows")) == 2
  searcher = BeamSearcher(model_for("tree", tokenizer), tokenizer, CONFIGURATIONS["tree"],
                          compiled=True, beam=6, fast_track=2, labels=("S", "NP"),
                          sentences_per_batch=2,
                          decoder_cls=functools.partial(IncrementalDecoder, arena_factor=0.05))
  sentences = [["cats", "meows"], ["the", "dog", "meows", "loudly"], ["meows"]]
  history = [tokenizer.bos_id] + list(tokenizer.encode_word("Yesterday"))
  kinds = [int(Kind.BOS)] + [int(Kind.TERMINAL)] * (len(history) - 1)
  prefixes = [([tokenizer.bos_id], [int(Kind.BOS)]), (history, kinds), (history, kinds)]
  compare(searcher, sentences, complete=True, prefixes=prefixes)
  assert searcher.decoder(0).compactions > 0


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(rows=st.just(3), columns=st.sampled_from([1, 7, 40, 120]),
                  k=st.sampled_from([1, 3, 12, 40]),
                  seed=st.integers(0, 2 ** 16), kind=st.sampled_from(["normal", "ties", "near"]))
def test_top_k_is_the_host_rule_exactly(rows, columns, k, seed, kind):
  """Ranks by float64 value, ties by index, −inf never kept: the host's `top_k` — also where
  float32 cannot tell values apart (`near`: 1e-12 apart) or many values are equal (`ties`), the
  cases that take the exact fallback."""
  rng = np.random.default_rng(seed)
  if kind == "normal":
    values = rng.standard_normal((rows, columns))
  elif kind == "ties":
    values = rng.integers(-3, 2, (rows, columns)).astype(np.float64)
  else:
    values = -1.0 - 1e-12 * rng.integers(0, 3, (rows, columns))
  values[rng.random((rows, columns)) < 0.3] = -np.inf
  got = np.asarray(_TOP_K(values, k))
  for r in range(rows):
    want = host_top_k(values[r], np.flatnonzero(np.isfinite(values[r])), k)
    np.testing.assert_array_equal(got[r, :len(want)], want)
