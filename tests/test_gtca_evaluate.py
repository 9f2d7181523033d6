"""GTCA evaluation: letter scoring (fake and real models), MCC, option drift, seeds, tables, CLI."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest
from flax import nnx

from slm_jax.gtca import evaluate
from slm_jax.gtca.branch import Gtca, GtcaConfig
from slm_jax.gtca.forward import gtca_logits, split_models
from slm_jax.gtca.spans import SpanNode, SpanTree
from slm_jax.hf.scoring import plain_rows
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder


def _example(n_prompt, letters=(7, 8), answer=0, group="", seed=0):
  ids = np.random.default_rng(seed).integers(1, 20, n_prompt + 1)
  tree = SpanTree(SpanNode("ROOT", 0, n_prompt, (SpanNode("a", 0, 1), SpanNode("b", 1, n_prompt))),
                  n_prompt)
  return evaluate.Encoded(ids, tree, letters, answer, group, f"e{seed}")


def test_mcqa_correct_handles_ties_padding_and_bad_answers():
  scores = [[-1.0, -2.0], [-1.0, -1.0], [-3.0, -0.5, -0.1], [np.nan, -1.0]]
  assert evaluate.mcqa_correct(scores, [0, 0, 2, 0]).tolist() == [True, False, True, False]
  assert evaluate.accuracy([True, False, True, True]) == 75.0
  with pytest.raises(ValueError, match="question 1: answer -1"):
    evaluate.mcqa_correct(scores, [0, -1, 0, 0])
  assert evaluate.pair_accuracy([-1.0, -5.0, -2.0], [-2.0, -1.0, -2.0]) == pytest.approx(100 / 3)


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
  scores = evaluate.letter_scores(fake, None, examples, 0.5, n_layers=2, k=4, batch_size=3)
  for e, row in zip(examples, scores):
    want = [-(e.position + 0.1 * x) for x in e.letter_ids]
    np.testing.assert_allclose(row[:len(want)], want, rtol=1e-6)
    assert np.isnan(row[len(want):]).all()
  metrics = evaluate.mcqa_metrics(scores, examples)
  # the lowest letter id (option 0) always wins, so exactly the answer-0 examples are right
  assert metrics["toy"] == pytest.approx(100 * 4 / 7)
  assert set(metrics) == {"toy", "toy_pp", "toy_rc"}


def test_make_batch_marks_only_the_answer_letter_as_target():
  e = _example(5, answer=1)
  batch = evaluate.make_batch([e], 16, n_layers=2, k=4, rows=2)
  assert batch["targets"].sum() == 1 and batch["targets"][0, 5]  # the letter after 5 prompt ids
  assert batch["positions"][0] == 4 and batch["answers"].tolist() == [1, -1]
  assert batch["chunks"].start_BLK.shape == (2, 2, 4)
  with pytest.raises(ValueError, match="prompt \\+ 1 letter"):
    evaluate.Encoded(np.arange(4), e.tree, (1, 2), 0)


def test_real_scorer_matches_the_decoder_with_and_without_the_branch():
  """Jitted letter / sentence scores equal an eager forward pass (jit vs eager agree to ~5e-4
  on CPU here), read at the prompt's last position (the neighbouring one differs)."""
  cfg = ModelConfig(vocab_size=24, d_model=16, n_layers=2, n_heads=2, mlp_ratio=2)
  decoder = Decoder(cfg, rngs=nnx.Rngs(0))
  gtca = Gtca(GtcaConfig.from_model(decoder.config, k=4), rngs=nnx.Rngs(1))
  graphdefs, params = split_models(decoder, gtca)
  examples = [_example(n, seed=n) for n in (4, 6, 5)]
  scorer = evaluate.make_letter_scorer(graphdefs)
  batch = evaluate.make_batch(examples, 16, 2, 4)
  chunks = jax.tree.map(np.asarray, batch["chunks"])
  scores = {}
  for alpha in (0.0, 0.7):
    got = evaluate.letter_scores(scorer, params, examples, alpha, n_layers=2, k=4, batch_size=4)
    logits = np.asarray(gtca_logits(decoder, gtca, batch["tokens"], batch["meta"], chunks, alpha))
    logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    for i, e in enumerate(examples):
      letters = list(e.letter_ids)
      np.testing.assert_allclose(got[i], logp[i, e.position, letters], atol=2e-3)
      assert np.abs(got[i] - logp[i, e.position - 1, letters]).max() > 1e-2
    scores[alpha] = got
  assert np.abs(scores[0.0] - scores[0.7]).max() > 1e-3  # the branch is live at α > 0
  plain = evaluate.make_letter_scorer((graphdefs[0], None))
  base = evaluate.letter_scores(plain, {"backbone": params["backbone"]}, examples, 0.0,
                                n_layers=2, k=4, batch_size=4)
  np.testing.assert_allclose(base, scores[0.0], atol=2e-3)  # α = 0 is the plain decoder
  seq = evaluate.make_sequence_scorer(graphdefs)
  rows = [(e.ids_T, SpanTree(SpanNode("ROOT", 0, len(e.ids_T)), len(e.ids_T))) for e in examples]
  sums = evaluate.sentence_scores(seq, params, rows, 0.0, n_layers=2, k=4, batch_size=4)
  tokens, meta = plain_rows([e.ids_T for e in examples], 16, 3)
  logp = np.asarray(jax.nn.log_softmax(np.asarray(decoder(tokens, meta)), axis=-1))
  for i, e in enumerate(examples):
    ids = e.ids_T
    want = sum(logp[i, t - 1, ids[t]] for t in range(1, len(ids)))
    assert sums[i] == pytest.approx(want, abs=5e-3)


def test_matthews_corrcoef_against_a_hand_computation():
  labels, preds = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # tp 2, tn 1, fp 1, fn 1
  assert evaluate.matthews_corrcoef(labels, preds) == pytest.approx((2 * 1 - 1 * 1) / 6)
  assert evaluate.matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
  assert evaluate.matthews_corrcoef([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
  assert evaluate.matthews_corrcoef([1, 0, 1], [1, 1, 1]) == 0.0
  with pytest.raises(ValueError, match="3 labels but 2"):
    evaluate.matthews_corrcoef([1, 0, 1], [1, 0])


def test_option_drift_on_constructed_scores():
  with_ = [[0.0, 1.0], [2.0, 0.0, 1.0]]
  without = [[0.0, 0.0], [2.0, 2.0, 2.0]]
  # gaps: q0 (0−1) vs 0 → 1; q1 (2−0) vs 0 → 2, (2−1) → 1, (0−1) → 1: mean 5/4
  assert evaluate.option_drift(with_, without) == pytest.approx(1.25)
  tokens = [[1, 2], [1, 1, 1]]  # q0 per token: (0 − 0.5) vs 0 → 0.5
  assert evaluate.option_drift(with_, without, tokens) == pytest.approx((0.5 + 4) / 4)
  assert evaluate.option_drift([[1.0, 2.0]], [[1.0, 2.0]]) == 0.0
  assert math.isnan(evaluate.option_drift([[1.0]], [[2.0]]))
  with pytest.raises(ValueError, match="differ"):
    evaluate.option_drift([[1.0, 2.0]], [[1.0, 2.0, 3.0]])


def test_mean_sd_and_tables(tmp_path):
  assert evaluate.mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
  assert evaluate.mean_sd([5.0]) == (5.0, 0.0)
  assert evaluate.format_mean_sd([80.0, 82.0]) == "81.00 ± 1.41"
  assert evaluate.format_mean_sd([]) == "–"
  results = {"backbone": {"toy": [50.0, 50.0]}, "lora_only": {"toy": [60.0, 62.0]},
             "gtca": {"toy": [70.0, 74.0], "drift": [0.01, 0.03]},
             "no_mask": {"toy": [71.0], "drift": [0.05]}}
  table = evaluate.main_table(results, metrics=("toy",))
  lines = table.splitlines()
  assert lines[0] == "| Method | Toy MCQA↑ | n |"
  assert [line.split(" | ")[0] for line in lines[2:]] == ["| Backbone", "| LoRA-only", "| GTCA"]
  assert "**72.00 ± 2.83**" in lines[-1]
  ablation = evaluate.ablation_table(results, metrics=("toy", "drift"))
  assert "**0.020 ± 0.014**" in ablation  # lower drift is better
  # the toy's BLiMP-style pairs and the real BLiMP are two columns, never one
  both = evaluate.report({"gtca": {"blimp": [60.0], evaluate.REAL_BLIMP: [70.0, 72.0]},
                          "lora_only": {"blimp": [50.0]}})
  assert "| Method | BLiMP(-style pairs)↑ | BLiMP (67 paradigms)↑ | n |" in both
  assert "| GTCA | **60.00** | 71.00 ± 1.41 | 2 |" in both and "| LoRA-only | 50.00 | – | 1 |" in both
  for i, (name, seed) in enumerate([("gtca", 0), ("gtca", 1), ("lora_only", 0)]):
    path = tmp_path / name / f"seed{seed}"
    path.mkdir(parents=True)
    (path / "result.json").write_text(json.dumps({"method": name, "metrics": {"toy": 60.0 + i}}))
  grouped = evaluate.collect([tmp_path])
  assert grouped == {"gtca": {"toy": [60.0, 61.0]}, "lora_only": {"toy": [62.0]}}
  out = tmp_path / "tables.md"
  assert evaluate.main(["--runs", str(tmp_path), "--out", str(out)]) == 0
  assert "| GTCA | **60.50 ± 0.71** |" in out.read_text() or "| GTCA | 60.50 ± 0.71 |" in out.read_text()
  (tmp_path / "bad").mkdir()
  (tmp_path / "bad" / "result.json").write_text("{}")
  with pytest.raises(ValueError, match="not a GTCA result"):
    evaluate.collect([tmp_path / "bad"])
  with pytest.raises(FileNotFoundError):
    evaluate.collect([tmp_path / "absent"])
