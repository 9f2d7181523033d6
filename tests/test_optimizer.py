"""Schedule, clipping, weight-decay mask and gradient accumulation of the training optimizer."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from slm_jax.train import optimizer


def opt_cfg(**overrides) -> ml_collections.ConfigDict:
  base = dict(peak_lr=1e-2, min_lr=1e-5, warmup_steps=10, warmup_start_lr=0.0, weight_decay=0.1,
              b1=0.9, b2=0.95, eps=1e-8, clip=1.0, grad_accum_steps=1)
  base.update(overrides)
  return ml_collections.ConfigDict(base)


def test_schedule_values():
  schedule = optimizer.warmup_cosine(1e-3, 1e-5, warmup_steps=2000, total_steps=10_000)
  assert float(schedule(0)) == 0.0
  assert float(schedule(1000)) == pytest.approx(5e-4)
  assert float(schedule(2000)) == pytest.approx(1e-3)
  assert float(schedule(6000)) == pytest.approx((1e-3 + 1e-5) / 2)  # middle of the decay
  assert float(schedule(10_000)) == pytest.approx(1e-5)
  assert float(schedule(20_000)) == pytest.approx(1e-5)
  values = np.asarray(schedule(jnp.arange(2000, 10_001)))
  assert np.all(np.diff(values) <= 1e-12)  # monotone decay after warmup


def test_schedule_start_and_short_runs():
  schedule = optimizer.warmup_cosine(1e-3, 1e-5, 100, 1000, warmup_start_lr=1e-4)
  assert float(schedule(0)) == pytest.approx(1e-4)
  short = optimizer.make_schedule(opt_cfg(warmup_steps=2000), total_steps=5)  # warmup cut to 5
  assert float(short(5)) == pytest.approx(1e-5)
  assert 0 < float(short(1)) < float(short(4)) <= 1e-2


def test_first_update_uses_step_one():
  """Update k uses schedule(k): nonzero at the first update, min_lr at the last."""
  cfg = opt_cfg(warmup_steps=4, weight_decay=0.0, clip=0.0, b1=0.0, b2=0.0, eps=1e-30)
  tx = optimizer.make_optimizer(cfg, total_steps=8)
  schedule = optimizer.make_schedule(cfg, 8)
  params = {"w": jnp.zeros(3)}
  state = tx.init(params)
  for k in range(1, 9):
    updates, state = tx.update({"w": jnp.ones(3)}, state, params)
    # b1 = b2 = 0: Adam's step is exactly -lr·sign(g).
    np.testing.assert_allclose(updates["w"], -float(schedule(k)) * np.ones(3), rtol=1e-5)
  assert float(schedule(8)) == pytest.approx(cfg.min_lr)


def test_clipping_in_chain():
  """With a huge eps Adam's first step is ≈ -lr·g/eps, so it shows the clipped gradient."""
  grads = {"w": jnp.array([6.0, 8.0])}  # norm 10
  params = {"w": jnp.zeros(2)}
  steps = {}
  for clip in (0.0, 1.0):
    tx = optimizer.make_optimizer(opt_cfg(clip=clip, eps=1e6, weight_decay=0.0), 100)
    steps[clip], _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(steps[1.0]["w"], steps[0.0]["w"] / 10, rtol=1e-4)


def test_decay_mask():
  d = 4
  params = {
      "embed": {"embedding": jnp.ones((10, d))},
      "layers_0": {"attn": {"qkv": {"kernel": jnp.ones((d, 3 * d)), "bias": jnp.ones(3 * d)}},
                   "attn_norm": {"scale": jnp.ones(d)}},
      "layers": {"mlp": {"up": {"kernel": jnp.ones((2, d, 8))}},  # scanned: leading layer axis
                 "mlp_norm": {"scale": jnp.ones((2, d))}, "out": {"bias": jnp.ones((2, d))}},
      "final_norm": {"scale": jnp.ones(d)},
  }
  mask = optimizer.decay_mask(params)
  flat = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(mask)}
  decayed = sorted(k for k, v in flat.items() if v)
  assert decayed == ["['layers']['mlp']['up']['kernel']", "['layers_0']['attn']['qkv']['kernel']"]


def test_decay_mask_nnx():
  nnx = pytest.importorskip("flax.nnx")

  class Model(nnx.Module):
    def __init__(self, rngs):
      self.embed = nnx.Embed(10, 4, rngs=rngs)
      self.proj = nnx.Linear(4, 4, rngs=rngs)
      self.norm = nnx.RMSNorm(4, rngs=rngs)

  state = nnx.state(Model(nnx.Rngs(0)), nnx.Param)
  mask = optimizer.decay_mask(state)
  flat = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(mask)}
  assert [k for k, v in flat.items() if v] == ["['proj']['kernel'].value"]


def test_weight_decay_applies_to_matrices_only():
  params = {"dense": {"kernel": jnp.full((2, 2), 2.0), "bias": jnp.full(2, 2.0)},
            "embed": {"embedding": jnp.full((3, 2), 2.0)}}
  cfg = opt_cfg(weight_decay=0.5)
  tx = optimizer.make_optimizer(cfg, 100)
  zeros = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zeros, tx.init(params), params)
  lr = float(optimizer.make_schedule(cfg, 100)(1))
  np.testing.assert_allclose(updates["dense"]["kernel"], -lr * 0.5 * 2.0, rtol=1e-6)
  np.testing.assert_array_equal(updates["dense"]["bias"], 0.0)
  np.testing.assert_array_equal(updates["embed"]["embedding"], 0.0)


def _quadratic_loss(params, x, y):
  return jnp.mean(jnp.sum((x @ params["dense"]["kernel"] + params["dense"]["bias"] - y) ** 2, -1))


def test_accumulation_equals_big_batch():
  """k micro-steps with MultiSteps == one step on the whole batch (clip and decay active)."""
  k, micro = 4, 3
  rng = np.random.default_rng(0)
  params0 = {"dense": {"kernel": jnp.asarray(rng.normal(size=(5, 2)), jnp.float32),
                       "bias": jnp.zeros(2, jnp.float32)}}
  batches = [(jnp.asarray(rng.normal(size=(k * micro, 5)), jnp.float32),
              jnp.asarray(rng.normal(size=(k * micro, 2)) * 5, jnp.float32)) for _ in range(3)]
  grad = jax.jit(jax.grad(_quadratic_loss))
  cfg = dict(clip=0.5, weight_decay=0.1, warmup_steps=1)

  big_tx = optimizer.make_optimizer(opt_cfg(**cfg), total_steps=3)
  big, big_state, big_update = params0, big_tx.init(params0), jax.jit(big_tx.update)
  for x, y in batches:
    updates, big_state = big_update(grad(big, x, y), big_state, big)
    big = optax.apply_updates(big, updates)

  acc_tx = optimizer.make_optimizer(opt_cfg(grad_accum_steps=k, **cfg), total_steps=3)
  acc, acc_state, acc_update = params0, acc_tx.init(params0), jax.jit(acc_tx.update)
  for x, y in batches:
    for i in range(k):
      part = slice(i * micro, (i + 1) * micro)
      updates, acc_state = acc_update(grad(acc, x[part], y[part]), acc_state, acc)
      acc = optax.apply_updates(acc, updates)
      assert (int(acc_state.mini_step) == 0) == (i == k - 1)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), acc, big)
  assert not np.allclose(big["dense"]["kernel"], params0["dense"]["kernel"])


def test_accumulate_false_leaves_accumulation_to_caller():
  tx = optimizer.make_optimizer(opt_cfg(grad_accum_steps=4), 10, accumulate=False)
  params = {"w": jnp.zeros(2)}
  updates, _ = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
  assert np.all(np.asarray(updates["w"]) < 0)
