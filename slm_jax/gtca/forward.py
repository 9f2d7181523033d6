"""A (frozen) decoder run with the GTCA branch, and training the branch with optax.

The decoder owns its forward pass: `gtca_hidden` computes every layer's chunk memory once from
the embedded inputs (`decoder.embed(tokens)` = E[tokens], SPEC §10) and hands the branch to the
decoder's per-layer `side` hook; no block is restated here.

Training (SPEC §10 stages): the parameters are one pytree `{"backbone": …, "gtca": …}` (pure
dicts; `split_models` / `merge_models`). `trainable` names what trains: "gtca" (stage 2), "lora"
(stage 1), "lora,gtca" (stage 3); other `optimizer.trainable` groups are allowed for the
backbone. `partition` splits the tree into the trained leaves and the frozen ones (each with None
where the other has a leaf): the optimizer sees only the trained part (`tx.init(trained)`), the
step differentiates only it, and the frozen part is an input the step never returns, so the
backbone comes out bitwise what went in (`changed_arrays` says which arrays differ). Without a
"gtca" entry the same step trains the plain decoder (the benchmark's baseline).

Shape letters: B batch rows, T tokens, D d_model, V vocabulary (see `slm_jax.gtca.branch`).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from slm_jax.gtca.branch import Gtca
from slm_jax.model.decoder import Decoder, LayerSide
from slm_jax.model.lora import dropout_rng
from slm_jax.model.loss import loss_and_metrics
from slm_jax.structure import RowMetadata
from slm_jax.train.optimizer import trainable_groups, trainable_mask as backbone_mask
from slm_jax.train.sharding import path_string


def check_fits(decoder: Decoder, gtca: Gtca) -> None:
  """Raises ValueError unless the branch was built for this backbone's sizes."""
  m, g = decoder.config, gtca.config
  names = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim")
  wrong = [f"{n}: backbone {getattr(m, n)}, branch {getattr(g, n)}" for n in names
           if getattr(m, n) != getattr(g, n)]
  if wrong:
    raise ValueError("the GTCA branch does not fit the decoder (GtcaConfig.from_model builds "
                     "one that does): " + "; ".join(wrong))


def gtca_hidden(decoder: Decoder, gtca: Gtca, x_BTD: jax.Array, meta: RowMetadata, chunks: Any,
                alpha: float | jax.Array | None = None,
                observe: LayerSide | None = None) -> jax.Array:
  """Final-normed hidden states [B, T, D] from the embedded inputs x_BTD = E[tokens]; the
  chunk memories are computed from the same x (differentiating with respect to x reaches
  both paths, which is what the causality tests need)."""
  check_fits(decoder, gtca)
  memory = gtca.memories(x_BTD, chunks)
  return decoder.hidden(x_BTD, meta, side=gtca.side(memory, alpha), observe=observe)


def gtca_logits(decoder: Decoder, gtca: Gtca, tokens_BT: jax.Array, meta: RowMetadata,
                chunks: Any, alpha: float | jax.Array | None = None) -> jax.Array:
  """float32 logits [B, T, V] of the decoder with the branch (α None: gtca.config.alpha)."""
  return decoder.logits(gtca_hidden(decoder, gtca, decoder.embed(tokens_BT), meta, chunks,
                                    alpha))


def split_models(decoder: Decoder, gtca: Gtca | None) -> tuple[tuple, dict]:
  """(graphdefs, params): params = {"backbone": …, "gtca": …} pure dicts of `nnx.Param`s
  (LoRA adapters included); without `gtca` only the backbone."""
  ddef, dstate = nnx.split(decoder, nnx.Param)
  params = {"backbone": nnx.to_pure_dict(dstate)}
  if gtca is None:
    return (ddef, None), params
  gdef, gstate = nnx.split(gtca, nnx.Param)
  params["gtca"] = nnx.to_pure_dict(gstate)
  return (ddef, gdef), params


def merge_models(graphdefs: tuple, params: dict) -> tuple[Decoder, Gtca | None]:
  """The modules of `split_models`'s output (inside jit too)."""
  ddef, gdef = graphdefs
  decoder = nnx.merge(ddef, params["backbone"])
  gtca = None if gdef is None or "gtca" not in params else nnx.merge(gdef, params["gtca"])
  return decoder, gtca


def trainable_mask(params: dict, trainable: str = "gtca") -> dict:
  """bools like `params`: "gtca" selects the branch, the other groups (`optimizer.trainable`'s,
  e.g. "lora") select backbone leaves."""
  groups = trainable_groups(trainable)
  rest = ",".join(g for g in groups if g != "gtca")
  mask = {"backbone": (backbone_mask(params["backbone"], rest) if rest
                       else jax.tree.map(lambda _: False, params["backbone"]))}
  if "gtca" in params:
    mask["gtca"] = jax.tree.map(lambda _: "gtca" in groups, params["gtca"])
  if not any(jax.tree.leaves(mask)):
    raise ValueError(f"trainable={trainable!r} selects no parameter (LoRA needs "
                     "model.lora_rank > 0; 'gtca' needs the branch)")
  return mask


def partition(params: dict, trainable: str = "gtca") -> tuple[dict, dict]:
  """(trained, frozen): `params` split by `trainable_mask`, None where the other has a leaf."""
  mask = trainable_mask(params, trainable)
  pick = lambda keep: jax.tree.map(lambda x, m: x if m == keep else None, params, mask)
  return pick(True), pick(False)


def combine(trained: dict, frozen: dict) -> dict:
  """The inverse of `partition`."""
  return jax.tree.map(lambda a, b: b if a is None else a, trained, frozen,
                      is_leaf=lambda x: x is None)


def changed_arrays(before: dict, after: dict) -> list[str]:
  """Paths of the arrays whose bit patterns differ between two equal-structure trees."""
  flat = lambda tree: {path_string(p): np.asarray(x)
                       for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
  a, b = flat(before), flat(after)
  return sorted(p for p in a if p not in b or a[p].dtype != b[p].dtype
                or a[p].shape != b[p].shape or a[p].tobytes() != b[p].tobytes())


def batch_loss(graphdefs: tuple, params: dict, batch: dict,
               alpha: float | jax.Array) -> tuple[jax.Array, dict]:
  """(summed target NLL, sums) of batch {tokens, meta, targets[, chunks]}; the branch runs when
  params has a "gtca" entry."""
  decoder, gtca = merge_models(graphdefs, params)
  meta: RowMetadata = batch["meta"]
  if gtca is None:
    logits_BTV = decoder(batch["tokens"], meta)
  else:
    logits_BTV = gtca_logits(decoder, gtca, batch["tokens"], meta, batch["chunks"], alpha)
  _, sums = loss_and_metrics(logits_BTV, batch["tokens"], batch["targets"], meta.kind)
  return sums["loss_sum"], sums


def make_gtca_train_step(graphdefs: tuple, tx: optax.GradientTransformation) -> Callable:
  """`step(trained, frozen, opt_state, batch, alpha) -> (trained, opt_state, sums)`, jitted.

  `trained`, `frozen` from `partition`; `opt_state = tx.init(trained)`; batch fields [B, T]
  plus `chunks` (a `ChunkBatch`); `alpha` a scalar (traced: a ramp does not recompile).
  Gradients are divided by the batch's target count (a mean NLL); LoRA dropout draws its
  randomness from the update count.
  """

  def step(trained, frozen, opt_state, batch, alpha):
    counts = optax.tree_utils.tree_get_all_with_path(opt_state, "count")
    key = jax.random.fold_in(jax.random.key(0), counts[0][1] if counts else 0)

    def loss(trained_params):
      with dropout_rng(key):
        return batch_loss(graphdefs, combine(trained_params, frozen), batch, alpha)

    (_, sums), grads = jax.value_and_grad(loss, has_aux=True)(trained)
    grads = jax.tree.map(lambda g: g / jnp.maximum(sums["count"], 1.0), grads)
    sums["grad_norm"] = optax.tree.norm(grads)
    updates, opt_state = tx.update(grads, opt_state, trained)
    return optax.apply_updates(trained, updates), opt_state, sums

  return jax.jit(step, donate_argnums=(0, 2))
