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
from slm_jax.inference.beam import BeamSearcher, word_synchronous_beam
from slm_jax.inference.beam_batch import top_k as _top_k
from slm_jax.inference.grammaticality import (AFTER_CLOSE, AFTER_ONT, AFTER_WORD, START, Grammar,
                                              GrammarState)
from slm_jax.inference.scorer import Scorer, logsumexp
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


def brute_force(scorer: Scorer, words, cap, labels=LABELS, mask_fn=None, terminal=False):
  """(log Σ over distinct prefixes ending with word w, log Σ over distinct full sequences,
  their count); `mask_fn(kinds)` picks the scored tokens (default: the targets). terminal=True
  also returns, per word and for the full sequences, the largest terminal(+EOS)-only sum."""
  lin = scorer.configuration.linearization
  select = mask_fn or scorer.target_mask
  terminals = sum(len(scorer.tokenizer.encode_word(w)) for w in words)
  max_nodes = (cap - terminals) // CLOSING_NODES[lin] if lin != "lin1_noont" else cap - terminals
  sequences = {}
  for tree in trees_over(words, labels, max_nodes):
    sequence = encode_document([tree], scorer.tokenizer, lin)
    if len(sequence) - 2 <= cap:
      sequences[(sequence.tokens.tobytes(), sequence.kinds.tobytes())] = sequence
  sequences = list(sequences.values())
  prefixes = [{} for _ in words]
  best_terminal = np.full(len(words), -np.inf)
  for sequence, lp in zip(sequences, scorer.logprobs(sequences)):
    counted = np.where(select(sequence.kinds)[1:], lp, 0.0)
    word_lp = np.where(sequence.kinds[1:] == Kind.TERMINAL, lp, 0.0)
    unit = sequence.unit
    word_units = np.unique(unit[sequence.kinds == Kind.TERMINAL])
    for w, u in enumerate(word_units):
      end = np.flatnonzero(unit == u)[-1]  # last piece of word w
      key = (sequence.tokens[:end + 1].tobytes(), sequence.kinds[:end + 1].tobytes())
      prefixes[w][key] = counted[:end].sum()
      best_terminal[w] = max(best_terminal[w], word_lp[:end].sum())
  full = logsumexp(scorer.score(sequences, mask_fn))
  out = [logsumexp(list(p.values())) for p in prefixes], full, len(sequences)
  if terminal:
    ends = scorer.score(sequences, lambda k: (k == Kind.TERMINAL) | (k == Kind.EOS))
    return out + (best_terminal, float(ends.max()))
  return out


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
  exact, sentence, count, terminal, sentence_terminal = brute_force(scorer, words, cap,
                                                                    terminal=True)
  assert count > 10  # many structures: the equality is not trivial
  options = dict(labels=LABELS, max_len_factor=0, min_len=cap)
  searcher = BeamSearcher(scorer, WORD_TOKENIZER, configuration, beam=256, fast_track=0,
                          decoder_len=16, **options)
  wide = searcher.search(words)
  assert wide.pruned == 0 and wide.expansions > count
  np.testing.assert_allclose(wide.prefix_logprobs, exact, atol=1e-4)
  assert wide.sentence_logprob == pytest.approx(sentence, abs=1e-4)
  # Terminal-only reading: the best hypothesis' terminal log-probs (structure as context).
  np.testing.assert_allclose(wide.terminal_prefix_logprobs, terminal, atol=1e-4)
  assert wide.sentence_terminal_logprob == pytest.approx(sentence_terminal, abs=1e-4)
  assert max(c.terminal_logprob for c in wide.complete) == wide.sentence_terminal_logprob
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


# ---- the paper's search rules (SPEC §9) on a scripted model


class ScriptedDecoder:
  """An `IncrementalDecoder` stand-in: log p(token | history) from a table keyed by (tokens fed
  after the prefix, token); every other token costs `default` nats."""

  def __init__(self, table, batch=64, max_len=64, default=-50.0):
    self.table, self.batch, self.max_len, self.default = table, batch, max_len, default
    self.rows = [()] * batch

  def start(self, prefix_ids, prefix_kinds):
    self.rows = [()] * self.batch

  def step_rows(self, rows, tokens, kinds):
    for r, t in zip(np.asarray(rows).tolist(), np.asarray(tokens).tolist()):
      self.rows[r] = self.rows[r] + (t,)

  def copy_rows(self, dst, src):
    copied = [self.rows[r] for r in np.asarray(src).tolist()]
    for r, history in zip(np.asarray(dst).tolist(), copied):
      self.rows[r] = history

  def gather(self, query_NC):
    return np.asarray([[self.table.get((self.rows[r], int(t)), self.default) for t in row]
                       for r, row in enumerate(np.asarray(query_NC).tolist())])


SCRIPT_TOKENIZER = make_tokenizer("word", words=["cats", "chase"])


def scripted_searcher(table, **options) -> BeamSearcher:
  return BeamSearcher(ScriptedDecoder(table), SCRIPT_TOKENIZER, CONFIGURATIONS["tree"],
                      labels=("S", "NP", "VP"), **options)


def dfs_scenario_table() -> dict:
  """Word 1: `(S cats` costs nothing. Word 2 from there: `chase` -0.3, `(NP` -0.32; after `(NP`:
  `chase` -0.08 (total -0.4), `(VP` -0.03 (-0.35); after `(VP`: `chase` -0.01 (-0.36)."""
  tok = SCRIPT_TOKENIZER
  s, np_, vp = tok.ont_id("S"), tok.ont_id("NP"), tok.ont_id("VP")
  cats, chase = tok.encode_word("cats")[0], tok.encode_word("chase")[0]
  a = (s, cats)
  return {((), s): 0.0, ((s,), cats): 0.0, (a, chase): -0.3, (a, np_): -0.32,
          (a + (np_,), chase): -0.08, (a + (np_,), vp): -0.03, (a + (np_, vp), chase): -0.01}


@pytest.mark.parametrize("fast_track", [1, 0])
def test_depth_first_continuation_beyond_a_full_word_beam(fast_track):
  """beam = word beam = 2: the second round fills the pool with {-0.3, -0.4} while a structural
  hypothesis at -0.35 remains; it still beats the pool's 2nd word hypothesis, so it is expanded
  and its -0.36 replaces -0.4 (the paper's rule). Stopping at a full pool keeps {-0.3, -0.4}."""
  searcher = scripted_searcher(dfs_scenario_table(), beam=2, fast_track=fast_track)
  result = searcher.search(["cats", "chase"], complete=False)
  assert result.beam_sizes.tolist() == [2, 2]
  assert result.prefix_logprobs[1] == pytest.approx(logsumexp([-0.3, -0.36]), abs=1e-9)
  assert result.best[1] == ["(S", "cats", "chase"]
  # Terminal-only reading: `cats` 0 and `chase` -0.01 on the -0.36 hypothesis.
  assert result.terminal_prefix_logprobs.tolist() == pytest.approx([0.0, -0.01])


def test_the_fast_track_unions_with_the_sub_beam():
  """The fast track's best word candidates that the sub-beam already holds are not added twice,
  and no other word takes their place (the paper's union); others are added."""
  searcher = scripted_searcher({}, beam=2, fast_track=1)
  word = searcher.grammar.word_slot
  cand = np.full((3, searcher.grammar.n_slots), -np.inf)
  cand[0, word], cand[0, 0], cand[1, word], cand[2, word] = -1.0, -2.0, -3.0, -4.0
  f, c = searcher._select(cand)
  assert sorted(zip(f.tolist(), c.tolist())) == [(0, 0), (0, word)]
  cand[0, 1] = -1.5  # the sub-beam is now (0, word), (0, 1): the best word is in it
  assert sorted(zip(*map(np.ndarray.tolist, searcher._select(cand)))) == [(0, 1), (0, word)]
  wide = scripted_searcher({}, beam=4, fast_track=2)
  cand = np.full((3, wide.grammar.n_slots), -np.inf)
  cand[0, :4] = [-1.0, -1.1, -1.2, -1.3]  # the sub-beam: four structural candidates
  cand[:, word] = [-2.0, -3.0, -4.0]
  f, c = wide._select(cand)
  assert len(f) == 6 and set(zip(f[4:].tolist(), c[4:].tolist())) == {(0, word), (1, word)}


def test_the_length_cap_boundary_for_two_one_piece_words_in_lin1():
  """L = 2 one-piece words: the cap is max(6·2, 10) = 12 tokens between BOS and EOS, the
  closings of every open constituent reserved inside it; trees of 5 constituents (12 tokens)
  are reached, 6 (14 tokens) are not."""
  configuration = CONFIGURATIONS["tree"]
  scorer = Scorer(model_for(configuration, WORD_TOKENIZER), WORD_TOKENIZER, configuration,
                  batch_size=64)
  words = ("cats", "chase")
  searcher = BeamSearcher(scorer, WORD_TOKENIZER, configuration, beam=128, fast_track=0,
                          labels=("S",))
  result = searcher.search(words)
  _, sentence, count = brute_force(scorer, words, 12, labels=("S",))
  assert result.cap == 12 and result.pruned == 0
  assert count == len(trees_over(words, ("S",), 5)) == 35 < len(trees_over(words, ("S",), 6))
  assert len(result.complete) == count and result.sentence_logprob == pytest.approx(sentence,
                                                                                     abs=1e-4)
  assert max(len(c.ids) for c in result.complete) == 12
  assert searcher.cap(1) == 10  # the minimum takes over below L = 2


def test_cnt2_scoring_in_the_beam_is_a_switch():
  """TGTree scores CNT2 inside the beam by default (a target, SPEC §4); `score_cnt2=False` is the
  paper's code, which never scores it: then the beam equals enumeration with CNT2 unscored."""
  configuration = CONFIGURATIONS["tgtree"]
  scorer = Scorer(model_for(configuration, WORD_TOKENIZER), WORD_TOKENIZER, configuration,
                  batch_size=64)
  words, cap = ("cats", "chase"), 11
  no_cnt2 = lambda kinds: scorer.target_mask(kinds) & (np.asarray(kinds) != Kind.CNT2)
  exact, sentence, _ = brute_force(scorer, words, cap, mask_fn=no_cnt2)
  options = dict(beam=256, fast_track=0, labels=LABELS, max_len_factor=0, min_len=cap)
  searcher = BeamSearcher(scorer, WORD_TOKENIZER, configuration, score_cnt2=False, **options)
  result = searcher.search(words)
  np.testing.assert_allclose(result.prefix_logprobs, exact, atol=1e-4)
  assert result.sentence_logprob == pytest.approx(sentence, abs=1e-4)
  scored = BeamSearcher(scorer, WORD_TOKENIZER, configuration, **options).search(words)
  assert scored.sentence_logprob < result.sentence_logprob - 1e-3  # CNT2 terms cost something


def test_one_slot_bucket_decodes_the_same():
  """`IncrementalDecoder(slot_bucket=…)` ≥ max_len reads every cache slot in one compiled variant
  (live metrics): the same search results as the default buckets."""
  import functools
  from slm_jax.inference.incremental import IncrementalDecoder
  configuration = CONFIGURATIONS["tgtree"]
  scorer = Scorer(model_for(configuration, WORD_TOKENIZER), WORD_TOKENIZER, configuration)
  words = ("cats", "chase", "mice")
  default = BeamSearcher(scorer, WORD_TOKENIZER, configuration, beam=8, fast_track=2,
                         labels=LABELS).search(words)
  one = BeamSearcher(scorer, WORD_TOKENIZER, configuration, beam=8, fast_track=2, labels=LABELS,
                     decoder_cls=functools.partial(IncrementalDecoder, slot_bucket=1 << 30),
                     decoder_len=32)
  result = one.search(words)
  np.testing.assert_allclose(result.prefix_logprobs, default.prefix_logprobs, atol=1e-5)
  assert result.sentence_logprob == pytest.approx(default.sentence_logprob, abs=1e-5)
  assert one.decoder(32).slot_bucket == 1 << 30
  with pytest.raises(ValueError, match="slot_bucket"):
    IncrementalDecoder(scorer.model, configuration, max_len=16, batch=4, slot_bucket=0)
