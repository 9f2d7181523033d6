"""GTCA's batches and scorers: letter scores of a fake model in input order across padded batches,
the answer letter as the only target, α as a row field, and the jitted scorers against an eager
forward pass of the model with and without the branch."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from slm_jax.gtca import batches, scoring
from slm_jax.gtca.batches import EncodedExample
from slm_jax.gtca.branch import Gtca, GtcaConfig
from slm_jax.gtca.metrics import mcqa_metrics
from slm_jax.gtca.model import GtcaLM, params_of
from slm_jax.gtca.spans import SpanNode, SpanTree
from slm_jax.hf.scoring import plain_rows
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder


def _example(n_prompt, letters=(7, 8), answer=0, group="", seed=0):
  ids = np.random.default_rng(seed).integers(1, 20, n_prompt + 1)
  tree = SpanTree(SpanNode("ROOT", 0, n_prompt, (SpanNode("a", 0, 1), SpanNode("b", 1, n_prompt))),
                  n_prompt)
  return EncodedExample(ids, tree, letters, answer, group, f"e{seed}")


def test_letter_scores_with_a_fake_model_whose_log_probs_are_known():
  """The fake scorer gives option o of a row: −(position + 0.1·letter id); letter_scores must
  return them per example in input order across padded batches, NaN beyond its options."""
  def fake(params, batch, alpha):
    del params
    assert alpha == 0.5
    out = -(batch["positions"][:, None] + 0.1 * batch["letters"]).astype(np.float32)
    return np.where(batch["options"], out, -np.inf)

  examples = [_example(3 + i % 4, letters=(7, 8, 9)[: 2 + i % 2], answer=i % 2, seed=i,
                       group="pp" if i % 3 else "rc") for i in range(7)]
  scores = scoring.letter_scores(fake, None, examples, 0.5, n_layers=2, k=4, batch_size=3)
  for e, row in zip(examples, scores):
    want = [-(e.position + 0.1 * x) for x in e.letter_ids]
    np.testing.assert_allclose(row[:len(want)], want, rtol=1e-6)
    assert np.isnan(row[len(want):]).all()
  found = mcqa_metrics(scores, examples)
  # the lowest letter id (option 0) always wins, so exactly the answer-0 examples are right
  assert found["toy"] == pytest.approx(100 * 4 / 7)
  assert set(found) == {"toy", "toy_pp", "toy_rc"}


def test_make_batch_marks_only_the_answer_letter_as_target():
  e = _example(5, answer=1)
  batch = batches.make_batch([e], 16, n_layers=2, k=4, rows=2)
  assert batch["targets"].sum() == 1 and batch["targets"][0, 5]  # the letter after 5 prompt ids
  assert batch["positions"][0] == 4 and batch["answers"].tolist() == [1, -1]
  assert batch["chunks"].start_BLK.shape == (2, 2, 4)
  with pytest.raises(ValueError, match="prompt \\+ 1 letter"):
    EncodedExample(np.arange(4), e.tree, (1, 2), 0)


def test_real_scorer_matches_the_decoder_with_and_without_the_branch():
  """Jitted letter / sentence scores equal an eager forward pass (jit vs eager agree to ~5e-4
  on CPU here), read at the prompt's last position (the neighbouring one differs)."""
  cfg = ModelConfig(vocab_size=24, d_model=16, n_layers=2, n_heads=2, mlp_ratio=2)
  decoder = Decoder(cfg, rngs=nnx.Rngs(0))
  gtca = Gtca(GtcaConfig.from_model(decoder.config, k=4), rngs=nnx.Rngs(1))
  model = GtcaLM(decoder, gtca)
  graphdef, params = params_of(model)
  examples = [_example(n, seed=n) for n in (4, 6, 5)]
  scorer = scoring.make_letter_scorer(graphdef)
  batch = batches.make_batch(examples, 16, 2, 4)
  chunks = jax.tree.map(np.asarray, batch["chunks"])
  scores = {}
  for alpha in (0.0, 0.7):
    got = scoring.letter_scores(scorer, params, examples, alpha, n_layers=2, k=4, batch_size=4)
    logits = np.asarray(model.logits(batch["tokens"], batch["meta"], chunks, alpha))
    logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    for i, e in enumerate(examples):
      letters = list(e.letter_ids)
      np.testing.assert_allclose(got[i], logp[i, e.position, letters], atol=2e-3)
      assert np.abs(got[i] - logp[i, e.position - 1, letters]).max() > 1e-2
    scores[alpha] = got
  assert np.abs(scores[0.0] - scores[0.7]).max() > 1e-3  # the branch is live at α > 0
  plain_graph, plain_params = params_of(GtcaLM(decoder))  # the backbone alone
  base = scoring.letter_scores(scoring.make_letter_scorer(plain_graph), plain_params, examples,
                               0.0, n_layers=2, k=4, batch_size=4)
  np.testing.assert_allclose(base, scores[0.0], atol=2e-3)  # α = 0 is the plain decoder
  seq = scoring.make_sequence_scorer(graphdef)
  rows = [(e.ids_T, SpanTree(SpanNode("ROOT", 0, len(e.ids_T)), len(e.ids_T))) for e in examples]
  sums = scoring.sentence_scores(seq, params, rows, 0.0, n_layers=2, k=4, batch_size=4)
  tokens, meta = plain_rows([e.ids_T for e in examples], 16, 3)
  logp = np.asarray(jax.nn.log_softmax(np.asarray(decoder(tokens, meta)), axis=-1))
  for i, e in enumerate(examples):
    ids = e.ids_T
    want = sum(logp[i, t - 1, ids[t]] for t in range(1, len(ids)))
    assert sums[i] == pytest.approx(want, abs=5e-3)


def test_train_batch_carries_alpha_as_a_row_field():
  examples = [_example(4, seed=1), _example(6, seed=2)]
  batch = batches.make_batch(examples, 16, n_layers=2, k=4, rows=3)
  fields = batches.train_batch(batch, 0.15)
  assert set(fields) == {"tokens", "meta", "targets", "chunks", "alpha"}
  assert fields["alpha"].dtype == np.float32 and fields["alpha"].shape == (3,)
  assert (fields["alpha"] == np.float32(0.15)).all()
  assert fields["tokens"] is batch["tokens"] and fields["chunks"] is batch["chunks"]


def test_logits_at_is_the_full_logits_read_at_each_rows_position():
  """The letter scorer's head at one position per row (`GtcaLM.logits_at`) equals the [B, T, V]
  logits read there, with and without the branch."""
  cfg = ModelConfig(vocab_size=24, d_model=16, n_layers=2, n_heads=2, mlp_ratio=2)
  decoder = Decoder(cfg, rngs=nnx.Rngs(0))
  model = GtcaLM(decoder, Gtca(GtcaConfig.from_model(decoder.config, k=4), rngs=nnx.Rngs(1)))
  batch = batches.make_batch([_example(n, seed=n) for n in (4, 6, 5)], 16, 2, 4)
  chunks = jax.tree.map(np.asarray, batch["chunks"])
  for alpha in (0.0, 0.7):
    full = np.asarray(model.logits(batch["tokens"], batch["meta"], chunks, alpha))
    at = np.asarray(model.logits_at(batch["tokens"], batch["meta"], chunks, alpha,
                                    batch["positions"]))
    np.testing.assert_allclose(at, full[np.arange(3), batch["positions"]], rtol=1e-5,
                               atol=1e-5)
