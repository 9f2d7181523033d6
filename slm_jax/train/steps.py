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

from slm_jax.model.loss import loss_and_metrics
from slm_jax.structure import RowMetadata

BATCH_FIELDS = ("tokens", "kinds", "segment", "position", "depth", "pop", "targets")


def metadata(batch: dict[str, jax.Array]) -> RowMetadata:
  return RowMetadata(batch["kinds"], batch["segment"], batch["position"], batch["depth"],
                     batch["pop"])


def _sums(graphdef, params, batch):
  model = nnx.merge(graphdef, params)
  logits_BTV = model(batch["tokens"], metadata(batch))
  _, sums = loss_and_metrics(logits_BTV, batch["tokens"], batch["targets"], batch["kinds"])
  return sums["loss_sum"], sums


def make_train_step(graphdef: Any, tx: optax.GradientTransformation, accumulation: int,
                    shardings: tuple | None = None) -> Callable:
  """`step(params, opt_state, batch) -> (params, opt_state, sums)`; batch fields [B, T].

  Micro-batch a holds rows a, A + a, 2A + a, … so that, with rows split over devices in
  contiguous blocks, every micro-batch is spread over every device. `shardings` =
  (params, opt_state, micro-batch rows, replicated) NamedShardings keep the state where the
  partition table puts it (see `slm_jax.train.sharding`); None: single device.
  """

  def step(params, opt_state, batch):
    micro = jax.tree.map(
        lambda x: x.reshape(-1, accumulation, *x.shape[1:]).swapaxes(0, 1), batch)
    if shardings is not None:
      micro = jax.lax.with_sharding_constraint(micro, shardings[2])
    zeros = jax.tree.map(jnp.zeros_like, params)

    def body(carry, micro_batch):
      grads, totals = carry
      (_, sums), g = jax.value_and_grad(_sums, argnums=1, has_aux=True)(graphdef, params,
                                                                        micro_batch)
      return (jax.tree.map(jnp.add, grads, g), jax.tree.map(jnp.add, totals, sums)), None

    _, first_sums = jax.eval_shape(_sums, graphdef, params, jax.tree.map(lambda x: x[0], micro))
    init = (zeros, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), first_sums))
    (grads, sums), _ = jax.lax.scan(body, init, micro)
    grads = jax.tree.map(lambda g: g / jnp.maximum(sums["count"], 1.0), grads)
    sums["grad_norm"] = optax.tree.norm(grads)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, sums

  if shardings is None:
    return jax.jit(step, donate_argnums=(0, 1))
  param_sh, opt_sh, _, scalar_sh = shardings
  return jax.jit(step, donate_argnums=(0, 1), out_shardings=(param_sh, opt_sh, scalar_sh))


def make_eval_step(graphdef: Any) -> Callable:
  """`eval_step(params, batch) -> sums` (loss and per-kind sums, no update)."""
  return jax.jit(lambda params, batch: _sums(graphdef, params, batch)[1])
