"""Paired bootstrap: the vectorized version equals a slow per-resample loop drawing the same
stream; known cases (identical models, a clear winner) give the expected CIs and p-values."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.eval.bootstrap import (p_value, paired_bootstrap, point_statistic,
                                    resampled_statistics)


def slow_reference(values_NM, statistic, resamples, seed=2027, denominators_NM=None, groups=None,
                   scale=1.0):
  """One resample at a time: rng.integers(0, n, size=n), then the statistic of every model."""
  rng = np.random.default_rng(seed)
  values = np.asarray(values_NM, float)
  if statistic == "group_mean":
    labels = list(dict.fromkeys(groups.tolist()))
    out = np.zeros((resamples, values.shape[1]))
    for g in labels:
      members = values[groups == g]
      for b in range(resamples):
        idx = rng.integers(0, len(members), size=len(members))
        out[b] += members[idx].mean(axis=0)
    return out * scale / len(labels)
  out = []
  for _ in range(resamples):
    idx = rng.integers(0, len(values), size=len(values))
    if statistic == "mean":
      out.append(values[idx].mean(axis=0) * scale)
    else:
      den = np.broadcast_to(denominators_NM, values.shape)
      out.append(np.exp(-values[idx].sum(axis=0) / den[idx].sum(axis=0)))
  return np.array(out)


def test_vectorized_equals_the_slow_loop():
  rng = np.random.default_rng(0)
  acc = (rng.random((137, 3)) < [0.6, 0.7, 0.65]).astype(float)
  fast = resampled_statistics(acc, "mean", scale=100, resamples=300)
  np.testing.assert_allclose(fast, slow_reference(acc, "mean", 300, scale=100), rtol=1e-12)
  # Chunked draws (a few rows at a time) are the same stream as one resample at a time.
  from slm_jax.eval import bootstrap
  chunked = bootstrap._resampled_sums(np.random.default_rng(2027), acc, 300, max_cells=137 * 7)
  np.testing.assert_allclose(chunked * 100 / 137, fast, rtol=1e-12)

  logp = -rng.gamma(20.0, 5.0, size=(40, 2))
  tokens = rng.integers(20, 60, size=40)
  fast = resampled_statistics(logp, "ppl", denominators_NM=tokens[:, None], resamples=200)
  slow = slow_reference(logp, "ppl", 200, denominators_NM=tokens[:, None])
  np.testing.assert_allclose(fast, slow, rtol=1e-12)

  groups = np.repeat(np.array([3, 1, 2]), [10, 25, 7])
  fast = resampled_statistics(acc[:42], "group_mean", groups_N=groups, scale=100, resamples=150)
  slow = slow_reference(acc[:42], "group_mean", 150, groups=groups, scale=100)
  np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_identical_models_have_p_one_and_a_zero_delta():
  rng = np.random.default_rng(1)
  same = (rng.random(500) < 0.7).astype(float)
  result = paired_bootstrap({"a": same, "b": same.copy()}, "mean", scale=100, resamples=2000)
  pair = result.pairs[0]
  assert pair["delta"] == 0.0 and pair["p"] == 1.0
  assert pair["ci"][0] <= 0.0 <= pair["ci"][1]
  lo, hi = result.ci["a"]
  assert lo < result.estimate["a"] < hi and result.ci["a"] == result.ci["b"]
  assert result.estimate["a"] == pytest.approx(100 * same.mean())


def test_a_clear_winner_is_significant_and_noise_is_not():
  rng = np.random.default_rng(2)
  good = (rng.random(2000) < 0.8).astype(float)
  bad = (rng.random(2000) < 0.6).astype(float)
  result = paired_bootstrap({"good": good, "bad": bad}, "mean", scale=100, resamples=2000)
  pair = result.pairs[0]
  assert pair["p"] < 0.001 and pair["ci"][0] > 10
  noisy = good.copy()  # 10 right answers turned wrong and 10 wrong turned right: Δ = 0
  flip = np.r_[rng.choice(np.flatnonzero(good == 1), 10, replace=False),
               rng.choice(np.flatnonzero(good == 0), 10, replace=False)]
  noisy[flip] = 1 - noisy[flip]
  pair = paired_bootstrap({"a": good, "b": noisy}, "mean", resamples=2000).pairs[0]
  assert pair["p"] > 0.05 and pair["ci"][0] <= 0.0 <= pair["ci"][1]


def test_ppl_statistic_and_p_value_formula():
  logp = np.array([[-10.0, -12.0], [-20.0, -19.0], [-5.0, -7.0]])
  tokens = np.array([4, 8, 2])
  np.testing.assert_allclose(point_statistic(logp, "ppl", denominators_NM=tokens[:, None]),
                             np.exp(-logp.sum(0) / tokens.sum()))
  assert p_value(np.array([-1.0, 1.0, 2.0, 3.0])) == 0.5
  assert p_value(np.array([1.0, 2.0])) == 0.0
  assert p_value(np.zeros(5)) == 1.0
  with pytest.raises(ValueError, match="different example counts"):
    paired_bootstrap({"a": np.ones(3), "b": np.ones(4)})


def test_macro_average_resamples_tasks():
  """Per-task scores of three models on 11 tasks: each resample draws 11 task indices (shared),
  the macro average is their mean; the interval is the percentile of that, like a slow loop."""
  from slm_jax.eval.bootstrap import macro_bootstrap
  rng = np.random.default_rng(5)
  tasks = rng.uniform(40, 75, size=(11, 1)) + rng.normal(0, 1, size=(11, 3)) + [0, 0.5, 2.0]
  scores = {"a": tasks[:, 0], "b": tasks[:, 1], "c": tasks[:, 2]}
  res = macro_bootstrap(scores, resamples=2000, seed=2027)
  slow_rng = np.random.default_rng(2027)
  slow = np.array([tasks[slow_rng.integers(0, 11, size=11)].mean(axis=0) for _ in range(2000)])
  assert res.unit == "tasks" and res.examples == 11
  assert res.estimate["c"] == pytest.approx(tasks[:, 2].mean())
  assert res.ci["a"] == pytest.approx(tuple(np.percentile(slow[:, 0], [2.5, 97.5])))
  # Task resampling measures suite composition: far wider than the model gap.
  assert res.ci["a"][1] - res.ci["a"][0] > 4
  first = slow.argmax(axis=1)
  assert res.rank_first == pytest.approx({m: float(np.mean(first == i))
                                          for i, m in enumerate("abc")})
  assert sum(res.rank_first.values()) == pytest.approx(1.0) and res.rank_first["c"] > 0.9
  assert macro_bootstrap(scores, resamples=200, seed=2026).ci != macro_bootstrap(
      scores, resamples=200, seed=2027).ci  # the seed is a parameter (2026: App. F)
  c_vs_a = next(p for p in res.to_json()["pairs"] if (p["a"], p["b"]) == ("a", "c"))
  assert c_vs_a["ci"][1] < 0 and c_vs_a["p"] < 0.01
  with pytest.raises(ValueError, match="finite"):
    macro_bootstrap({"a": [1.0, np.nan]})


def test_rank_first_shares_split_ties_and_follow_the_direction():
  from slm_jax.eval.bootstrap import rank_first
  boot = np.array([[1.0, 2.0, 2.0], [3.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 5.0, 2.0]])
  assert rank_first(boot).tolist() == pytest.approx([(0 + 1 + 1 / 3 + 0) / 4,
                                                     (0.5 + 0 + 1 / 3 + 1) / 4,
                                                     (0.5 + 0 + 1 / 3 + 0) / 4])
  assert rank_first(boot, lower_better=True)[2] == pytest.approx((0 + 1 + 1 / 3 + 0) / 4)
  acc = (np.random.default_rng(1).random((300, 2)) < [0.5, 0.8]).astype(float)
  res = paired_bootstrap({"weak": acc[:, 0], "strong": acc[:, 1]}, resamples=500)
  assert res.rank_first == pytest.approx({"weak": 0.0, "strong": 1.0})
  assert res.to_json()["models"]["strong"]["rank_first"] == 1.0
