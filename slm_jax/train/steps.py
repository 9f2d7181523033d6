"""Jitted train and eval steps over packed batches (pure functions of params and optimizer state).

Gradient accumulation is explicit: a batch [A·b, T] is scanned as A micro-batches, the summed
NLL gradients are divided by the number of targets in the whole batch, so accumulating over A
micro-batches is exactly one large-batch step (no mean-of-means).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from slm_jax.model.lora import dropout_rng
from slm_jax.train.optimizer import trainable_mask

def _sums(graphdef, params, batch, rest=None, key=None):
  """batch: `Batch.as_dict()` on device — tokens [B, T], meta (`RowMetadata`), targets (a
  decoder's), or the model's own batch (the chart parser's). The model owns its objective
  (`Decoder.loss_sums`, `PushdownLM.loss_sums`, `TrainedParser.loss_sums`). `rest`: the model's
  state besides its parameters (an NNX model's RNG streams); its `dropout` stream is reseeded
  from `key`, so `nnx.Dropout` draws from the step's key."""
  if rest is None:
    return nnx.merge(graphdef, params).loss_sums(batch)
  # A copy made inside the trace: reseeding mutates the RNG variables, which NNX allows only
  # at the trace level that created them.
  model = nnx.merge(graphdef, params, jax.tree.map(lambda x: x, rest))
  nnx.reseed(model, dropout=key)
  return model.loss_sums(batch)


def default_dropout_key(count: jax.Array, index: jax.Array) -> jax.Array:
  """The randomness of micro-batch `index` of update `count` (LoRA dropout, `nnx.Dropout`)."""
  return jax.random.fold_in(jax.random.fold_in(jax.random.key(0), count), index)


def _split(tree: Any, mask: Any, keep: bool) -> Any:
  """The leaves of `tree` whose mask is `keep` (others None)."""
  return jax.tree.map(lambda x, m: x if m == keep else None, tree, mask)


def _join(trained: Any, frozen: Any) -> Any:
  return jax.tree.map(lambda a, b: b if a is None else a, trained, frozen,
                      is_leaf=lambda x: x is None)


def make_train_step(graphdef: Any, tx: optax.GradientTransformation, accumulation: int,
                    shardings: tuple | None = None, trainable: str = "all", *,
                    rest: Any = None,
                    dropout_key: Callable[[jax.Array, jax.Array], jax.Array] = default_dropout_key,
                    scan_one: bool = True) -> Callable:
  """`step(params, opt_state, batch) -> (params, opt_state, sums)`; batch fields [B, T].

  Micro-batch a holds rows a, A + a, 2A + a, … so that, with rows split over devices in
  contiguous blocks, every micro-batch is spread over every device. `shardings` =
  (params, opt_state, micro-batch rows, replicated) NamedShardings keep the state where the
  partition table puts it (see `slm_jax.train.sharding`); None: single device.

  `trainable` (`optimizer.trainable`, frozen-backbone / LoRA training): only those leaves get
  gradients; the frozen ones enter the loss as constants (no cotangents), keep no optimizer
  state (`make_optimizer` masks it) and come out of the step as the same arrays.

  Dropout (LoRA's, and an NNX model's `nnx.Dropout` when `rest` holds its RNG streams) draws
  from `dropout_key(update count, micro-batch index)` (a no-op for models without dropout); the
  update count is the optimizer state's, so a resumed run draws what the uninterrupted one did.
  `rest`: the model's non-parameter state, merged unchanged into every micro-batch's model.
  `scan_one`: one micro-batch (A = 1) is scanned too, as it always was for the decoders: XLA
  rounds a gradient inside a loop differently (a few ulps), and their runs (the README's held-out
  perplexity) keep their bits; a decoder step is as fast either way. False: differentiated
  directly — the chart parser's, whose BiLSTM gradient inside the loop is ~10× slower on CPU
  (benchmarks/parser_bench.py) and whose steps are then bit for bit those of its own step before.
  """

  def step(params, opt_state, batch):
    mask = trainable_mask(params, trainable)
    trained, frozen = _split(params, mask, True), _split(params, mask, False)
    counts = optax.tree_utils.tree_get_all_with_path(opt_state, "count")
    count = counts[0][1] if counts else 0

    def loss(trained_params, micro_batch, micro_key):
      with dropout_rng(micro_key):
        return _sums(graphdef, _join(trained_params, frozen), micro_batch, rest, micro_key)

    if accumulation == 1 and not scan_one:
      (_, sums), grads = jax.value_and_grad(loss, has_aux=True)(trained, batch,
                                                                dropout_key(count, 0))
    else:
      grads, sums = accumulate(loss, trained, batch, count)
    grads = jax.tree.map(lambda g: g / jnp.maximum(sums["count"], 1.0), grads)
    sums["grad_norm"] = optax.tree.norm(grads)
    full = _join(grads, jax.tree.map(jnp.zeros_like, frozen))  # frozen: no update is applied
    updates, opt_state = tx.update(full, opt_state, params)
    new = optax.apply_updates(trained, _split(updates, mask, True))
    return _join(new, frozen), opt_state, sums

  def accumulate(loss, trained, batch, count):
    """The summed gradients and sums of the micro-batches, scanned."""
    micro = jax.tree.map(
        lambda x: x.reshape(-1, accumulation, *x.shape[1:]).swapaxes(0, 1), batch)
    if shardings is not None:
      micro = jax.lax.with_sharding_constraint(micro, shardings[2])

    def body(carry, inputs):
      grads, totals = carry
      index, micro_batch = inputs
      (_, sums), g = jax.value_and_grad(loss, has_aux=True)(
          trained, micro_batch, dropout_key(count, index))
      return (jax.tree.map(jnp.add, grads, g), jax.tree.map(jnp.add, totals, sums)), None

    first = jax.tree.map(lambda x: x[0], micro)
    _, first_sums = jax.eval_shape(lambda: loss(trained, first, dropout_key(count, 0)))
    init = (jax.tree.map(jnp.zeros_like, trained),
            jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), first_sums))
    (grads, sums), _ = jax.lax.scan(body, init, (jnp.arange(accumulation), micro))
    return grads, sums

  if shardings is None:
    return jax.jit(step, donate_argnums=(0, 1))
  param_sh, opt_sh, _, scalar_sh = shardings
  return jax.jit(step, donate_argnums=(0, 1), out_shardings=(param_sh, opt_sh, scalar_sh))


def make_eval_step(graphdef: Any) -> Callable:
  """`eval_step(params, batch) -> sums` (loss and per-kind sums, no update)."""
  return jax.jit(lambda params, batch: _sums(graphdef, params, batch)[1])
