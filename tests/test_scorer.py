"""Scorer: per-token log-probabilities equal a direct forward pass, do not depend on batching, and
sums follow each configuration's targets (SPEC §4); terminal scoring of word sentences."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.buckets import bucket, buckets
from slm_jax.configurations import CONFIGURATIONS, resolve
from slm_jax.data.encode import encode_document
from slm_jax.inference.scorer import Scorer, batched_rows
from slm_jax.kinds import Kind
from slm_jax.model import Decoder, ModelConfig
from slm_jax.structure import row_metadata
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree

WORDS = "cats chase mice will go the hungry cat meows".split()
TOKENIZER = make_tokenizer("word", words=WORDS)
CATS = Tree("S", ("cats", Tree("VP", ("chase", "mice"))))
WILL_GO = Tree("S", ("cats", Tree("VP", ("will", Tree("VP", ("go",))))))
HUNGRY = Tree("S", (Tree("NP", ("the", "hungry", "cat")), Tree("VP", ("meows",))))


def model_for(configuration, seed=0) -> Decoder:
  config = ModelConfig(vocab_size=TOKENIZER.vocab_size, d_model=32, n_layers=2, n_heads=4,
                       compute_dtype=jnp.float32, init_std=0.2,
                       attention=configuration.attention)
  return Decoder(config, rngs=nnx.Rngs(seed))


def scorer_for(name: str, **kwargs) -> Scorer:
  configuration = CONFIGURATIONS[name]
  return Scorer(model_for(configuration), TOKENIZER, configuration, **kwargs)


@nnx.jit
def forward(model, tokens, meta):
  return model(tokens, meta)


def direct_logprobs(model, sequence) -> np.ndarray:
  """The model's own forward pass on the unpadded sequence, log-softmax in float64."""
  tokens = np.asarray(sequence.tokens, np.int32)[None]
  meta = jax.tree.map(jnp.asarray, row_metadata(sequence.kinds[None].astype(np.int32),
                                                np.ones_like(tokens)))
  logits = np.asarray(forward(model, jnp.asarray(tokens), meta), np.float64)[0]
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  return logits[np.arange(len(tokens[0]) - 1), tokens[0, 1:]] - logz[:-1]


def test_logprobs_equal_a_direct_forward_pass_and_ignore_batching():
  scorer = scorer_for("tg", batch_size=2)
  sequences = [encode_document(d, TOKENIZER, "lin2") for d in ([CATS], [WILL_GO, HUNGRY],
                                                                [HUNGRY], [CATS, CATS])]
  together = scorer.logprobs(sequences)
  for i, (sequence, lp) in enumerate(zip(sequences, together)):
    assert lp.dtype == np.float64 and lp.shape == (len(sequence) - 1,)
    if i in (0, 1):
      np.testing.assert_allclose(lp, direct_logprobs(scorer.model, sequence), atol=2e-5)
    np.testing.assert_allclose(lp, scorer.logprobs([sequence])[0], atol=2e-5)
  assert all((lp < 0).all() for lp in together)


def test_score_sums_the_configuration_targets():
  document = [WILL_GO, HUNGRY]
  for name, excluded in (("tg", (Kind.CNT2,)), ("tgnomask_mix_tg", (Kind.CNT2,)),
                         ("tgtree", ()), ("tree_shuffle", (Kind.ONT, Kind.CNT)),
                         ("tree", ())):
    scorer = scorer_for(name)
    sequence = encode_document(document, TOKENIZER, scorer.configuration.linearization, seed=3)
    lp = scorer.logprobs([sequence])[0]
    counted = ~np.isin(sequence.kinds[1:], excluded)
    assert scorer.score([sequence])[0] == pytest.approx(lp[counted].sum(), abs=1e-9), name
    if excluded:
      assert (~counted).any() and lp[~counted].sum() < -0.1  # the exclusion matters
  scorer = scorer_for("tgtree")
  sequence = encode_document([CATS], TOKENIZER, "lin2")
  only_words = lambda kinds: kinds == Kind.TERMINAL
  lp = scorer.logprobs([sequence])[0]
  assert scorer.score([sequence], mask_fn=only_words)[0] == pytest.approx(
      lp[sequence.kinds[1:] == Kind.TERMINAL].sum())


@pytest.mark.parametrize("name,scheme", [("pause2", "pause2"), ("terminal", "lin0"),
                                         ("tree_shuffle", "lin0")])
def test_terminal_scoring_in_the_training_format(name, scheme):
  scorer = scorer_for(name)
  assert scorer.terminal_scheme == scheme
  words = ["the", "hungry", "cat", "meows"]
  sequence = scorer.terminal_sequence([words])
  expected = {"pause2": 1 + 3 * 4 + 1, "lin0": 1 + 4 + 1}[scheme]
  assert len(sequence) == expected
  lp = scorer.logprobs([sequence])[0]
  assert scorer.terminal_logprob(words) == pytest.approx(lp.sum())
  assert scorer.terminal_logprobs([words, words[:2]])[0] == pytest.approx(lp.sum())
  per_word = scorer.terminal_word_logprobs([words])[0]
  assert per_word.shape == (4,)
  # word = its pieces + trailing pauses; everything but EOS
  assert per_word.sum() == pytest.approx(lp[:-1].sum())
  document = scorer.terminal_logprob([words, ["cats", "meows"]])
  assert document < scorer.terminal_logprob(words)


def test_errors_name_the_problem():
  scorer = scorer_for("tree", max_len=8)
  long = encode_document([HUNGRY], TOKENIZER, "lin1")
  with pytest.raises(ValueError, match="sequence 0: 12 tokens exceed max_len=8"):
    scorer.logprobs([long])
  symbols = encode_document.__globals__["base_sequence"]([CATS])
  with pytest.raises(ValueError, match="vocabulary ids"):
    scorer.logprobs([symbols])
  with pytest.raises(ValueError, match="uses attention tg but the model was built with causal"):
    Scorer(model_for(CONFIGURATIONS["tree"]), TOKENIZER, resolve("tg"))


def test_buckets():
  """The one bucketing policy: least·{1, 1.5, 2, 3, 4, 6, …}, capped (rows, lengths, slots)."""
  assert [bucket(n) for n in (1, 16, 17, 64, 65, 200)] == [16, 16, 24, 64, 96, 256]
  assert [bucket(n, 32, cap=300) for n in (1, 33, 49, 97, 257, 1000)] == [32, 48, 64, 128, 300, 300]
  assert buckets(100, 1) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 100]
  assert all(bucket(n, 16) >= n and bucket(n, 16) < 1.5 * n + 16 for n in range(1, 5000))


def test_batched_rows_hands_each_row_its_index_at_a_fixed_shape():
  """GTCA's scorers need each row's own fields (span trees, letters): `with_index` gives the
  call the rows' positions in the input (−1 for padding rows), `width` / `full_rows` one shape;
  outputs come back in input order."""
  arrays = [(np.arange(n, dtype=np.int32) + 1, np.full(n, int(Kind.TERMINAL), np.int32))
            for n in (5, 2, 7, 3, 4)]
  shapes, seen = [], []

  def call(tokens_BT, kinds_BT, segment_BT, index_B):
    shapes.append(tokens_BT.shape)
    seen.append(index_B.tolist())
    assert (segment_BT[index_B < 0] == 0).all() and (kinds_BT[segment_BT == 0] == 0).all()
    return (np.where(index_B >= 0, index_B * 10 + segment_BT.sum(axis=1), -1),)

  out = batched_rows(arrays, call, batch_size=2, pad_id=9, width=24, full_rows=True,
                     with_index=True)
  assert [x for (x,) in out] == [0 + 5, 10 + 2, 20 + 7, 30 + 3, 40 + 4]
  assert shapes == [(2, 24)] * 3 and seen == [[1, 3], [4, 0], [2, -1]]  # sorted by length
  default = batched_rows(arrays, lambda t, k, s: (s.sum(axis=1),), batch_size=2)
  assert [int(x) for (x,) in default] == [5, 2, 7, 3, 4]
  with pytest.raises(ValueError, match="7 tokens does not fit rows of width 6"):
    batched_rows(arrays, call, batch_size=2, width=6, with_index=True)
