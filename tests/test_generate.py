"""Summary generation (SPEC §11): the KV-cache searches equal the recompute oracle, beam 1 is
greedy decoding by the model's own forward pass, a wide beam equals exhaustive enumeration, tree
outputs are always well-formed trees within the word / token / open-bracket limits, pauses are
generated as trained and dropped from the text, and detokenization handles both bases."""

from __future__ import annotations

import itertools

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.encode import encode_document
from slm_jax.inference.generate import (beam_generate, detokenize, generate, piece_classes,
                                        word_synchronous_generate)
from slm_jax.kinds import Kind
from slm_jax.linearize import delinearize
from slm_jax.model import Decoder, ModelConfig
from slm_jax.structure import row_metadata
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree

TOKENIZER = make_tokenizer("word", words="cats chase mice will go the hungry cat meows".split())
TINY = make_tokenizer("word", words="a b c".split())  # 4 base ids (<unk> a b c) + EOS to choose
ARTICLE = [Tree("S", ("cats", Tree("VP", ("chase", "mice")))),
           Tree("S", (Tree("NP", ("the", "hungry", "cat")), Tree("VP", ("meows",))))]
TOL = 1e-4


def model_for(name, tokenizer=TOKENIZER, seed=0) -> Decoder:
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=4,
                       compute_dtype=jnp.float32, init_std=0.2,
                       attention=CONFIGURATIONS[name].attention)
  return Decoder(config, rngs=nnx.Rngs(seed))


MODELS = {}


def cached_model(name):
  if name not in MODELS:
    MODELS[name] = model_for(name)
  return MODELS[name]


def prompt_for(name, document=ARTICLE):
  """The article in the configuration's linearization, without its final EOS."""
  sequence = encode_document(document, TOKENIZER, CONFIGURATIONS[name].linearization)
  return sequence.tokens[:-1], sequence.kinds[:-1]


def search(name, **options):
  ids, kinds = prompt_for(name)
  return generate(cached_model(name), TOKENIZER, CONFIGURATIONS[name], ids, prompt_kinds=kinds,
                  **options)


@pytest.mark.parametrize("name,options", [
    ("terminal", dict(max_tokens=6)), ("pause1", dict(max_tokens=4, min_tokens=2)),
    ("tree", dict(max_words=3)), ("tgtree", dict(max_words=3)),
    pytest.param("tg", dict(max_words=2), marks=pytest.mark.slow)])  # TG masks: ~20 s
def test_kv_cache_equals_the_recompute_oracle(name, options):
  cached = search(name, beam=3, **options)
  oracle = search(name, beam=3, recompute=True, **options)
  assert cached.ids.tolist() == oracle.ids.tolist() and cached.text == oracle.text
  assert cached.logprob == pytest.approx(oracle.logprob, abs=TOL)
  np.testing.assert_allclose(cached.ranked, oracle.ranked, atol=TOL)
  assert np.isfinite(cached.logprob) and cached.steps == oracle.steps


@nnx.jit
def _forward(model, tokens, meta):
  return model(tokens, meta)


def next_logprobs(model, ids, kinds, width: int = 48) -> np.ndarray:
  """log p(next | ids) by the model's own forward pass (float64); the row is padded to `width`
  tokens (padding is segment 0, after the real ones: causal, so it changes nothing before)."""
  n = len(ids)
  tokens, kinds_, segment = (np.zeros((1, width), np.int32) for _ in range(3))
  tokens[0, :n], kinds_[0, :n], segment[0, :n] = ids, kinds, 1
  meta = jax.tree.map(jnp.asarray, row_metadata(kinds_, segment))
  logits = np.asarray(_forward(model, jnp.asarray(tokens), meta), np.float64)[0, n - 1]
  return logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())


def allowed_ids(tokenizer):
  return np.append(np.arange(tokenizer.base_size), tokenizer.eos_id)


def sequence_logprob(model, tokenizer, prompt, continuation) -> float:
  ids, kinds = list(prompt[0]), list(prompt[1])
  total = 0.0
  for token in continuation:
    total += next_logprobs(model, ids, kinds)[token]
    ids.append(token)
    kinds.append(Kind.EOS if token == tokenizer.eos_id else Kind.TERMINAL)
  return total


@pytest.mark.parametrize("seed", [0, 3])
def test_beam_one_is_greedy_decoding(seed):
  model = model_for("terminal", seed=seed)
  prompt = prompt_for("terminal")
  ids, kinds, total, allowed = list(prompt[0]), list(prompt[1]), 0.0, allowed_ids(TOKENIZER)
  greedy = []
  for _ in range(8):
    lp = next_logprobs(model, ids, kinds)
    token = int(allowed[np.argmax(lp[allowed])])
    total += lp[token]
    if token == TOKENIZER.eos_id:
      break
    greedy.append(token)
    ids.append(token)
    kinds.append(int(Kind.TERMINAL))
  out = beam_generate(model, TOKENIZER, CONFIGURATIONS["terminal"], prompt[0],
                      prompt_kinds=prompt[1], beam=1, max_tokens=8)
  assert out.ids.tolist() == greedy and out.logprob == pytest.approx(total, abs=TOL)
  assert out.finished == (len(greedy) < 8)


@pytest.mark.parametrize("max_tokens,seed", [(2, 0), (3, 1), (3, 2)])
def test_wide_beam_equals_exhaustive_enumeration(max_tokens, seed):
  model = model_for("terminal", TINY, seed=seed)
  prompt = ([TINY.bos_id, TINY.encode_word("a")[0]], [int(Kind.BOS), int(Kind.TERMINAL)])
  base, eos = list(range(TINY.base_size)), TINY.eos_id
  # Every output: j < max_tokens pieces then EOS, or max_tokens pieces (stopped at the limit).
  outputs = [list(p) + [eos] for j in range(max_tokens) for p in itertools.product(base, repeat=j)]
  outputs += [list(p) for p in itertools.product(base, repeat=max_tokens)]
  scores = [sequence_logprob(model, TINY, prompt, o) for o in outputs]
  best = outputs[int(np.argmax(scores))]
  out = beam_generate(model, TINY, CONFIGURATIONS["terminal"], prompt[0], prompt_kinds=prompt[1],
                      beam=len(base) ** (max_tokens - 1), max_tokens=max_tokens)
  assert out.ids.tolist() == [t for t in best if t != eos]
  assert out.finished == (best[-1] == eos)
  assert out.logprob == pytest.approx(max(scores), abs=TOL)


def test_pauses_follow_every_chosen_piece_and_leave_the_text():
  for name, k in (("pause1", 1), ("pause2", 2)):
    out = search(name, beam=2, max_tokens=4, min_tokens=3)
    kinds = out.kinds.tolist()
    pattern = ([int(Kind.TERMINAL)] + [int(Kind.PAUSE)] * k) * out.words
    # A hypothesis stopped at the limit ends with its last piece (its pauses are not generated).
    assert out.words >= 3 and kinds == (pattern if out.finished else pattern[:-k])
    assert "<P>" not in out.text and len(out.text.split()) == out.words


def test_terminal_limits_and_no_structure():
  for max_tokens in (1, 3, 5):
    out = search("terminal", beam=3, max_tokens=max_tokens)
    assert len(out.ids) <= max_tokens and (out.finished or len(out.ids) == max_tokens)
    assert out.positions <= max_tokens and out.words == len(out.ids)
    assert (out.ids < TOKENIZER.base_size).all()  # never structure, pause, BOS or EOS
  longer = search("terminal", beam=3, max_tokens=5, min_tokens=4)
  assert len(longer.ids) >= 4
  with pytest.raises(ValueError, match="word_synchronous_generate"):
    beam_generate(cached_model("tree"), TOKENIZER, CONFIGURATIONS["tree"], [TOKENIZER.bos_id])
  with pytest.raises(ValueError, match="no word-synchronous search"):
    word_synchronous_generate(cached_model("terminal"), TOKENIZER,
                              CONFIGURATIONS["tree_shuffle"], [TOKENIZER.bos_id])


def check_tree_output(out, name, *, max_words, max_open, max_tokens):
  """One well-formed tree: balanced, label-matched brackets (delinearize checks both, and the
  CNT2 copies), ≤ max_open consecutive ONTs, within the word and token limits; the text is its
  terminals."""
  symbols = TOKENIZER.decode(out.ids)
  kinds = out.kinds.tolist()
  trees = delinearize(symbols, kinds, CONFIGURATIONS[name].linearization)
  assert len(trees) == 1 and out.finished
  runs = [len(list(g)) for is_ont, g in itertools.groupby(k == Kind.ONT for k in kinds) if is_ont]
  assert max(runs) <= max_open
  assert 1 <= out.words <= max_words and len(out.ids) <= max_tokens
  assert out.positions <= max_words + 1  # word steps, then the one that may only close and end
  assert out.text == " ".join(trees[0].leaves()) and out.words == len(out.text.split())


@pytest.mark.parametrize("name", [pytest.param("tree", marks=pytest.mark.slow), "tgtree"])
@hypothesis.settings(max_examples=3, deadline=None, derandomize=True,
                     suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(sentences=st.integers(1, 2), beam=st.integers(1, 4), max_words=st.integers(1, 4),
                  max_open=st.integers(1, 4))
def test_tree_generation_is_always_a_well_formed_tree(name, sentences, beam, max_words,
                                                      max_open):
  ids, kinds = prompt_for(name, ARTICLE[:sentences])
  out = word_synchronous_generate(cached_model(name), TOKENIZER, CONFIGURATIONS[name], ids,
                                  prompt_kinds=kinds, beam=beam, max_words=max_words,
                                  max_open=max_open)
  check_tree_output(out, name, max_words=max_words, max_open=max_open,
                    max_tokens=max(6 * max_words, 10))


def test_tree_token_limit_and_bos_prompt():
  out = search("tree", beam=2, max_words=6, max_tokens=9)
  check_tree_output(out, "tree", max_words=6, max_open=4, max_tokens=9)
  alone = word_synchronous_generate(cached_model("tgtree"), TOKENIZER, CONFIGURATIONS["tgtree"],
                                    [TOKENIZER.bos_id], beam=2, max_words=2, max_open=1)
  check_tree_output(alone, "tgtree", max_words=2, max_open=1, max_tokens=12)


def test_detokenize_word_and_bpe_bases():
  ptb = make_tokenizer("word", words="-LRB- cats `` meow '' -RRB-".split())
  ids = [ptb.ont_id("S")] + [ptb.encode_word(w)[0] for w in "-LRB- cats `` meow ''".split()]
  ids += [ptb.cnt_id("S"), ptb.pause_id, ptb.eos_id]
  assert detokenize(ptb, ids) == '( cats " meow "'
  assert (piece_classes(ptb)[:ptb.base_size] == 1).all() and piece_classes(ptb)[ptb.eos_id] == 0
  gpt2 = make_tokenizer("gpt2")
  words = "The xylophonist -LRB- quietly -RRB- left .".split()
  pieces = [p for w in words for p in gpt2.encode_word(w)]
  assert detokenize(gpt2, [gpt2.ont_id("S")] + pieces + [gpt2.cnt_id("S")]) == (
      "The xylophonist ( quietly ) left .")
  classes = piece_classes(gpt2)
  starts = [gpt2.encode_word(w)[0] for w in words]
  assert (classes[starts] == 1).all() and len(pieces) > len(words)
  continuation = [p for w in words for p in gpt2.encode_word(w)[1:]]
  assert (classes[continuation] == 2).all()
