"""Word-synchronous beam search: the grammar admits exactly the linearizations of trees, and with a
beam wider than the number of structures the prefix / sentence probabilities equal brute-force
enumeration of every tree within the length cap (a narrow beam gives lower bounds)."""

from __future__ import annotations

import functools

import hypothesis
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.configurations import CONFIGURATIONS, resolve
from slm_jax.corpus.treebank import embedded_corpus
from slm_jax.data.encode import encode_document
from slm_jax.eval.beam import BeamSearcher, _top_k, word_synchronous_beam
from slm_jax.eval.grammaticality import (AFTER_CLOSE, AFTER_ONT, AFTER_WORD, START, Grammar,
                                         GrammarState)
from slm_jax.eval.scorer import Scorer, logsumexp
from slm_jax.kinds import PTB_LABELS, Kind
from slm_jax.model import Decoder, ModelConfig
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree

WORD_TOKENIZER = make_tokenizer("word", words="cats chase mice meows".split())
LABELS = ("S", "NP")
CLOSING_NODES = {"lin1": 2, "lin2": 3, "lin3": 4, "lin1_noont": 1, "lin1_merge": 1}


def model_for(configuration, tokenizer, seed=1) -> Decoder:
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2, n_heads=4,
                       compute_dtype=jnp.float32, init_std=0.3, attention=configuration.attention)
  return Decoder(config, rngs=nnx.Rngs(seed))


def trees_over(words, labels, max_nodes) -> list[Tree]:
  """Every tree (one root, no empty constituent) over `words` with at most max_nodes nodes."""
  words = tuple(words)

  @functools.lru_cache(None)
  def trees(i, j, budget):  # [(tree over words[i:j], nodes)]
    return [(Tree(label, kids), used + 1) for kids, used in children(i, j, budget - 1)
            for label in labels] if budget >= 1 else []

  @functools.lru_cache(None)
  def children(i, j, budget):  # [(non-empty child tuple covering words[i:j], nodes)]
    if i == j:
      return [((), 0)]
    out = [((words[i],) + rest, used) for rest, used in children(i + 1, j, budget)]
    for k in range(i + 1, j + 1):
      for tree, n in trees(i, k, budget):
        out += [((tree,) + rest, n + used) for rest, used in children(k, j, budget - n)]
    return out

  return [tree for tree, _ in trees(0, len(words), max_nodes)]


def brute_force(scorer: Scorer, words, cap) -> tuple[list[float], float, int]:
  """log Σ over distinct prefixes ending with word w, and over distinct full sequences."""
  lin = scorer.configuration.linearization
  terminals = sum(len(scorer.tokenizer.encode_word(w)) for w in words)
  max_nodes = (cap - terminals) // CLOSING_NODES[lin] if lin != "lin1_noont" else cap - terminals
  sequences = {}
  for tree in trees_over(words, LABELS, max_nodes):
    sequence = encode_document([tree], scorer.tokenizer, lin)
    if len(sequence) - 2 <= cap:
      sequences[(sequence.tokens.tobytes(), sequence.kinds.tobytes())] = sequence
  sequences = list(sequences.values())
  prefixes = [{} for _ in words]
  for sequence, lp in zip(sequences, scorer.logprobs(sequences)):
    counted = np.where(scorer.target_mask(sequence.kinds)[1:], lp, 0.0)
    unit = sequence.unit
    word_units = np.unique(unit[sequence.kinds == Kind.TERMINAL])
    for w, u in enumerate(word_units):
      end = np.flatnonzero(unit == u)[-1]  # last piece of word w
      key = (sequence.tokens[:end + 1].tobytes(), sequence.kinds[:end + 1].tobytes())
      prefixes[w][key] = counted[:end].sum()
  full = logsumexp(scorer.score(sequences))
  return [logsumexp(list(p.values())) for p in prefixes], full, len(sequences)


EXACT_CASES = [  # configuration, words, cap
    ("tree", ("cats", "chase"), 8),
    ("tree", ("cats", "chase", "mice"), 9),
    ("tgtree", ("cats", "chase"), 11),
    ("tg", ("cats", "chase"), 11),
    ("tree_noont", ("cats", "chase"), 6),
    ("tree_compress", ("cats", "chase"), 7),
]


@pytest.mark.parametrize("name,words,cap", EXACT_CASES)
def test_wide_beam_equals_brute_force_and_narrow_beam_is_a_lower_bound(name, words, cap):
  configuration = CONFIGURATIONS[name]
  model = model_for(configuration, WORD_TOKENIZER)
  scorer = Scorer(model, WORD_TOKENIZER, configuration, batch_size=64)
  exact, sentence, count = brute_force(scorer, words, cap)
  assert count > 10  # many structures: the equality is not trivial
  options = dict(labels=LABELS, max_len_factor=0, min_len=cap)
  searcher = BeamSearcher(scorer, WORD_TOKENIZER, configuration, beam=256, fast_track=0,
                          decoder_len=16, **options)
  wide = searcher.search(words)
  assert wide.pruned == 0 and wide.expansions > count
  np.testing.assert_allclose(wide.prefix_logprobs, exact, atol=1e-4)
  assert wide.sentence_logprob == pytest.approx(sentence, abs=1e-4)
  assert wide.cap == cap and len(wide.best) == len(words)
  # The completed hypotheses: every structure once, best first, summing to sentence_logprob.
  scores = [c.logprob for c in wide.complete]
  assert len(wide.complete) == count and scores == sorted(scores, reverse=True)
  assert logsumexp(scores) == pytest.approx(wide.sentence_logprob, abs=1e-9)
  first = wide.complete[0]
  assert first.symbols == wide.best_complete[:-1] and Kind.EOS not in first.kinds
  assert first.ids.tolist() == WORD_TOKENIZER.encode_symbols(first.symbols, first.kinds)[0].tolist()
  assert len({(c.ids.tobytes(), c.kinds.tobytes()) for c in wide.complete}) == count
  assert searcher.search(words, complete=False).complete == []
  narrow = BeamSearcher(searcher.decoder(16), WORD_TOKENIZER, configuration, beam=1,
                        fast_track=1, **options).search(words)  # reuses the decoder
  assert (narrow.prefix_logprobs <= np.asarray(exact) + 1e-5).all()
  assert narrow.sentence_logprob <= sentence + 1e-5
  assert narrow.prefix_logprobs[-1] < exact[-1] - 1e-5 and narrow.pruned > 0
  assert narrow.best_complete[-1] == "</s>"


def test_multi_piece_words_are_emitted_whole():
  tokenizer = make_tokenizer("gpt2")
  words = ("cats", "meows")  # meows: two pieces
  assert len(tokenizer.encode_word("meows")) == 2
  configuration = CONFIGURATIONS["tree"]
  model = model_for(configuration, tokenizer)
  scorer = Scorer(model, tokenizer, configuration, batch_size=16)
  result = word_synchronous_beam(scorer, tokenizer, configuration, words, beam=64, fast_track=0,
                                 labels=LABELS, max_len_factor=3, min_len=8)  # cap 3·3 = 9
  assert result.cap == 9 and result.pruned == 0
  exact, sentence, _ = brute_force(scorer, words, 9)
  np.testing.assert_allclose(result.prefix_logprobs, exact, atol=1e-4)
  assert result.sentence_logprob == pytest.approx(sentence, abs=1e-4)
  pieces = tokenizer.decode(list(tokenizer.encode_word("meows")))
  best = result.best_complete
  start = best.index(pieces[0])
  assert best[start:start + 2] == pieces  # the pieces of a word are never split


def walk(grammar: Grammar, sequence, tokenizer) -> None:
  """Feeds a real linearization through the grammar; every token must be a valid choice."""
  kinds, tokens, unit = sequence.kinds, sequence.tokens, sequence.unit
  word_units = list(dict.fromkeys(unit[kinds == Kind.TERMINAL].tolist()))
  pieces = [int((unit == u).sum()) for u in word_units]
  state = GrammarState.initial(1, 64)
  position, w = 1, 0
  while position < len(tokens):
    kind = kinds[position]
    at_end = w == len(pieces)
    word_len = 1 if at_end else pieces[w]
    valid = grammar.valid(state, at_end=at_end, remaining=sum(pieces[w:]), word_len=word_len,
                          cap=10**6)[0]
    ids = grammar.slot_token_ids(state, tokenizer.eos_id if at_end else int(tokens[position]))[0]
    if kind == Kind.ONT:
      slot = PTB_LABELS.index(tokenizer.decode([tokens[position]])[0][1:])
      width = 1
    elif kind in (Kind.CNT, Kind.CNT1):
      slot = grammar.n_ont + (PTB_LABELS.index(tokenizer.decode([tokens[position]])[0][:-1])
                              if grammar.linearization == "lin1_noont" else 0)
      width = grammar.copies
      assert ids[slot] == tokens[position]  # the closing label is the innermost one
    else:
      assert kind in (Kind.TERMINAL, Kind.EOS), kind
      slot, width = grammar.word_slot, word_len
    assert valid[slot], (grammar.linearization, position, tokenizer.decode(tokens))
    state = grammar.advance(state, np.asarray([slot]), at_end=at_end, word_len=word_len)
    w += slot == grammar.word_slot
    position += width
  assert w == len(pieces) + 1  # ended with EOS


@pytest.mark.parametrize("linearization", ["lin1", "lin2", "lin3", "lin1_noont", "lin1_merge"])
def test_every_tree_linearization_is_grammatical(linearization):
  trees = [t for d in embedded_corpus("validation", 15, seed=4) for t in d][:40]
  tokenizer = make_tokenizer("word", words=(w for t in trees for w in t.leaves()))
  grammar = Grammar(linearization, tokenizer, cnt2_scored=True)
  assert grammar.copies == {"lin2": 2, "lin3": 3}.get(linearization, 1)
  for tree in trees:
    walk(grammar, encode_document([tree], tokenizer, linearization), tokenizer)


def state(**fields) -> GrammarState:
  s = GrammarState.initial(1, 8)
  for name, value in fields.items():
    if name == "stack":
      s.stack[0, :len(value)] = [PTB_LABELS.index(v) for v in value]
    else:
      getattr(s, name)[0] = value
  return s


def slots(grammar, s, at_end=False, remaining=2, cap=100) -> dict[str, bool]:
  valid = grammar.valid(s, at_end=at_end, remaining=remaining, word_len=1, cap=cap)[0]
  return {"ont": bool(valid[:grammar.n_ont].any()) if grammar.n_ont else False,
          "close": bool(valid[grammar.n_ont:grammar.word_slot].any()),
          "word": bool(valid[grammar.word_slot])}


def test_invalid_continuations_are_refused():
  lin1 = Grammar("lin1", WORD_TOKENIZER, cnt2_scored=True)
  assert slots(lin1, state()) == {"ont": True, "close": False, "word": False}  # root first
  just_opened = state(length=2, open=2, last=AFTER_ONT, stack=["S", "NP"])
  assert slots(lin1, just_opened)["close"] is False  # no empty constituent
  root_only = state(length=2, open=1, last=AFTER_WORD, stack=["S"])
  assert slots(lin1, root_only)["close"] is False  # the root closes after the last word only
  assert slots(lin1, root_only, at_end=True, remaining=0) == {"ont": False, "close": True,
                                                              "word": False}  # EOS needs it
  inner = state(length=3, open=2, last=AFTER_WORD, stack=["S", "NP"])
  ids = lin1.slot_token_ids(inner, 0)[0]
  assert ids[lin1.n_ont] == WORD_TOKENIZER.cnt_id("NP")  # the innermost label
  assert slots(lin1, inner, cap=3 + 2 + 2 - 1)["word"] is False  # 2 words + 2 closings left
  assert slots(lin1, inner, cap=3 + 2 + 2)["word"] is True
  noont = Grammar("lin1_noont", WORD_TOKENIZER, cnt2_scored=True)
  assert slots(noont, state()) == {"ont": False, "close": False, "word": True}
  assert slots(noont, state(length=1, last=AFTER_WORD))["close"] is True
  assert noont.n_close == 26
  merge = Grammar("lin1_merge", WORD_TOKENIZER, cnt2_scored=True)
  after_close = state(length=4, open=2, last=AFTER_CLOSE)
  assert slots(merge, after_close)["close"] is False  # runs of closings are one `)`
  assert slots(merge, state(length=3, open=1, last=AFTER_WORD))["close"] is False
  assert slots(merge, state(length=3, open=2, last=AFTER_WORD))["close"] is True
  limited = Grammar("lin2", WORD_TOKENIZER, cnt2_scored=False, max_open=2)
  assert slots(limited, state(length=2, open=2, last=AFTER_ONT, run_onts=2))["ont"] is False
  assert START == 0


def test_refuses_models_without_a_tree_to_search():
  for name in ("terminal", "pause1", "tree_shuffle"):
    configuration = CONFIGURATIONS[name]
    with pytest.raises(ValueError, match="tree linearization"):
      BeamSearcher(model_for(configuration, WORD_TOKENIZER), WORD_TOKENIZER, configuration)
  with pytest.raises(ValueError, match="labels"):
    Grammar("lin1", WORD_TOKENIZER, cnt2_scored=True, labels=("SS",))
  assert resolve("tg").linearization == "lin2"


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(st.lists(st.one_of(st.integers(-3, 3).map(float), st.just(-np.inf)),
                           max_size=60), st.integers(1, 40), st.integers(0, 2**16))
def test_top_k_is_the_stable_sort_prefix(values, k, seed):
  values = np.asarray(values, float)
  index = np.flatnonzero(np.isfinite(values))
  index = index[np.random.default_rng(seed).random(len(index)) < 0.8]  # any increasing subset
  expected = index[np.argsort(-values[index], kind="stable")[:k]]
  np.testing.assert_array_equal(_top_k(values, index, k), expected)


def test_the_decoder_cache_only_grows():
  """Sentences of any length share the live cache while it is large enough; a longer one
  replaces it with a larger cache."""
  configuration = CONFIGURATIONS["tg"]
  searcher = BeamSearcher(model_for(configuration, WORD_TOKENIZER), WORD_TOKENIZER,
                          configuration, beam=4, fast_track=0)
  large = searcher.decoder(32)
  assert searcher.decoder(16) is large and searcher.decoder(32) is large
  larger = searcher.decoder(64)
  assert larger is not large and larger.max_len == 64 and searcher.decoder(8) is larger
