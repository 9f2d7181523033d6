"""Cross-entropy over the target mask with the next-token shift, the kind split, clu metrics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from slm_jax.kinds import Kind
from slm_jax.linearize import linearize
from slm_jax.model import LossMetrics, loss_and_metrics
from slm_jax.structure import parse_attention, target_mask
from slm_jax.trees import Tree

LN = np.log


def hand_example():
  """Row <s> (S cat </s>: logits[t] predict token t + 1; token 2 (`cat`) is not a target."""
  tokens = jnp.array([[0, 1, 2, 1]])
  kinds = jnp.array([[Kind.BOS, Kind.ONT, Kind.TERMINAL, Kind.EOS]])
  targets = jnp.array([[False, True, False, True]])
  logits = jnp.array([[
      [0.0, LN(2.0), 0.0],  # predicts token 1 (ONT): p = 2/4
      [5.0, -3.0, 1.0],  # predicts token 2: not a target
      [LN(3.0), 0.0, 0.0],  # predicts token 3 = id 1 (EOS): p = 1/5
      [9.0, 9.0, 9.0],  # predicts nothing
  ]])
  return logits, tokens, targets, kinds


def test_hand_computed_loss_and_split():
  loss, sums = loss_and_metrics(*hand_example())
  np.testing.assert_allclose(loss, (LN(2) + LN(5)) / 2, rtol=1e-6)
  expected = dict(loss_sum=LN(2) + LN(5), count=2, terminal_loss_sum=LN(5), terminal_count=1,
                  structural_loss_sum=LN(2), structural_count=1, pause_loss_sum=0, pause_count=0)
  assert set(sums) == set(expected)
  for key, value in expected.items():
    np.testing.assert_allclose(sums[key], value, rtol=1e-6, err_msg=key)


def test_targets_mask_and_shift_are_respected():
  logits, tokens, targets, kinds = hand_example()
  loss, _ = loss_and_metrics(logits, tokens, targets, kinds)
  # Logits that predict non-targets, and targets_BT[:, 0] (nothing predicts token 0), are ignored.
  other = logits.at[0, 1].set(jnp.array([-7.0, 4.0, 2.0])).at[0, 3].set(jnp.array([1.0, 2.0, 3.0]))
  np.testing.assert_allclose(loss_and_metrics(other, tokens, targets.at[0, 0].set(True), kinds)[0],
                             loss, rtol=1e-6)
  grad = jax.grad(lambda lg: loss_and_metrics(lg, tokens, targets, kinds)[0])(logits)
  assert np.all(grad[0, 1] == 0) and np.all(grad[0, 3] == 0)
  assert np.all(grad[0, 0] != 0) and np.all(grad[0, 2] != 0)
  # Making token 2 a target adds -log p(cat | ...) from logits[1].
  _, sums = loss_and_metrics(logits, tokens, targets.at[0, 2].set(True), kinds)
  np.testing.assert_allclose(sums["terminal_loss_sum"] - LN(5),
                             jax.nn.logsumexp(logits[0, 1]) - logits[0, 1, 2], rtol=1e-6)


def test_pause_group_and_metrics_are_token_weighted():
  V = 5
  tokens = jnp.array([[0, 3, 4, 3, 4, 2], [0, 3, 2, 0, 0, 0]])
  kinds = jnp.array([[Kind.BOS, Kind.TERMINAL, Kind.PAUSE, Kind.TERMINAL, Kind.PAUSE, Kind.EOS],
                     [Kind.BOS, Kind.TERMINAL, Kind.EOS, Kind.PAD, Kind.PAD, Kind.PAD]])
  targets = (kinds != Kind.PAD) & (kinds != Kind.BOS)
  logits = jax.random.normal(jax.random.key(0), (2, 6, V))
  loss, sums = loss_and_metrics(logits, tokens, targets, kinds)
  nll = -jax.nn.log_softmax(logits[:, :-1])
  nll = np.take_along_axis(np.asarray(nll), np.asarray(tokens[:, 1:, None]), -1)[..., 0]
  pause = np.asarray(kinds[:, 1:] == Kind.PAUSE)
  terminal = np.asarray((kinds[:, 1:] == Kind.TERMINAL) | (kinds[:, 1:] == Kind.EOS))
  np.testing.assert_allclose(sums["pause_loss_sum"], nll[pause].sum(), rtol=1e-5)
  np.testing.assert_allclose(sums["terminal_loss_sum"], nll[terminal].sum(), rtol=1e-5)
  assert float(sums["pause_count"]) == 2 and float(sums["terminal_count"]) == 5
  assert float(sums["count"]) == 7
  np.testing.assert_allclose(loss, (nll[pause].sum() + nll[terminal].sum()) / 7, rtol=1e-5)

  # clu aggregation weights by tokens, not by batch: merge this batch with the hand example.
  hand_loss, hand_sums = loss_and_metrics(*hand_example())
  merged = LossMetrics.single_from_model_output(**sums).merge(
      LossMetrics.single_from_model_output(**hand_sums)).compute()
  np.testing.assert_allclose(merged["loss"], (sums["loss_sum"] + hand_sums["loss_sum"]) / 9,
                             rtol=1e-6)
  np.testing.assert_allclose(merged["terminal_ppl"],
                             np.exp((sums["terminal_loss_sum"] + LN(5)) / 6), rtol=1e-5)
  np.testing.assert_allclose(merged["joint_ppl"],
                             np.exp((sums["loss_sum"] + hand_sums["loss_sum"]) / 6), rtol=1e-5)
  np.testing.assert_allclose(merged["structural_loss"], LN(2), rtol=1e-6)
  np.testing.assert_allclose(merged["pause_loss"], sums["pause_loss_sum"] / 2, rtol=1e-6)
  assert float(merged["target_tokens"]) == 9
  empty = LossMetrics.empty().compute()
  assert all(np.isfinite(v) for v in empty.values())


def test_tg_targets_drop_cnt2_from_the_structural_count():
  seq = linearize(Tree("S", ("Cats", Tree("VP", ("chase", "mice")))), "lin2")
  kinds = seq.kinds[None].astype(np.int32)
  segment = np.ones_like(kinds)
  tokens = jnp.arange(kinds.shape[1])[None]
  logits = jnp.zeros((1, kinds.shape[1], kinds.shape[1]))
  for attention, structural in (("tg", 4), ("causal", 6)):  # (S (VP VP) [VP)] S) [S)]
    targets = target_mask(kinds, segment, "lin2", parse_attention(attention))
    _, sums = loss_and_metrics(logits, tokens, jnp.asarray(targets), jnp.asarray(kinds))
    assert float(sums["structural_count"]) == structural, attention
    assert float(sums["terminal_count"]) == 4  # Cats chase mice </s>
    np.testing.assert_allclose(sums["loss_sum"], sums["count"] * LN(kinds.shape[1]), rtol=1e-6)
