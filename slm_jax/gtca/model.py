"""GTCA as a model (SPEC §10): a frozen decoder with the gated tree cross-attention branch.

`GtcaLM(backbone, gtca)` holds the backbone `Decoder` (LoRA adapters included) and the `Gtca`
branch; without a branch (`gtca=None`) it is exactly the plain decoder, bit for bit. It owns
its one forward pass and its objective, like every model the train step trains:

- `logits(tokens, meta, chunks, alpha)`: every layer's chunk memory is computed once from the
  embedded inputs (E[tokens], SPEC §10) and the branch is handed to the decoder's per-layer
  `side` hook — no block is restated here. `logits_at(…, positions)` is the same at one
  position per row, the head applied there only (what the letter scorer reads).
- `loss_sums(batch)`: the next-token NLL over the batch's targets (the answer letter), reading
  the chunk layout (`chunks`, a `spans.ChunkBatch`) and α (`alpha`, float32 [B]: one value per
  row, so `train.steps.make_train_step`'s micro-batch reshape splits it like any row field)
  from the batch.

Its parameters (`nnx.split(model, nnx.Param)`) are one tree `{"backbone": …, "gtca": …}`, so
`optimizer.trainable` picks what a stage trains by path: "lora" (stage 1), "gtca" (stage 2),
"lora,gtca" (stage 3); the rest stays frozen and comes out of the step bitwise what went in
(`changed_arrays` lists the arrays that differ).

Shape letters: B batch rows, T tokens, D d_model, V vocabulary (see `slm_jax.gtca.branch`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.gtca.branch import Gtca
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder, LayerSide
from slm_jax.model.loss import loss_and_metrics
from slm_jax.structure import RowMetadata
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


class GtcaLM(nnx.Module):
  """The backbone decoder and the (optional) GTCA branch (module docstring)."""

  def __init__(self, backbone: Decoder, gtca: Gtca | None = None):
    if gtca is not None:
      check_fits(backbone, gtca)
    self.backbone = backbone
    self.gtca = gtca

  @property
  def config(self) -> ModelConfig:
    """The backbone's config (sizes, vocabulary, LoRA)."""
    return self.backbone.config

  def embed(self, tokens_BT: jax.Array) -> jax.Array:
    """E[tokens] [B, T, D]: what the blocks and the chunk memories read."""
    return self.backbone.embed(tokens_BT)

  def hidden(self, x_BTD: jax.Array, meta: RowMetadata, chunks: Any = None,
             alpha: float | jax.Array | None = None,
             observe: LayerSide | None = None) -> jax.Array:
    """Final-normed hidden states [B, T, D] from the embedded inputs x_BTD = E[tokens]; the
    chunk memories are computed from the same x (differentiating with respect to x reaches
    both paths, which is what the causality tests need). α: a scalar or float32 [B] (None:
    the branch's `config.alpha`)."""
    if self.gtca is None:
      return self.backbone.hidden(x_BTD, meta, observe=observe)
    memory = self.gtca.memories(x_BTD, chunks)
    return self.backbone.hidden(x_BTD, meta, side=self.gtca.side(memory, alpha),
                                observe=observe)

  def logits(self, tokens_BT: jax.Array, meta: RowMetadata, chunks: Any = None,
             alpha: float | jax.Array | None = None) -> jax.Array:
    """float32 logits [B, T, V] of the backbone with the branch (when there is one)."""
    return self.backbone.logits(self.hidden(self.embed(tokens_BT), meta, chunks, alpha))

  def logits_at(self, tokens_BT: jax.Array, meta: RowMetadata, chunks: Any,
                alpha: float | jax.Array | None, positions_B: jax.Array) -> jax.Array:
    """float32 logits [B, V] at one position per row: `logits` there, the head applied to that
    position only (a [B, T, V] array of a 49k-word vocabulary over long prompts — HellaSwag's
    10-shot rows, 1,500 tokens — is gigabytes)."""
    h_BTD = self.hidden(self.embed(tokens_BT), meta, chunks, alpha)
    return self.backbone.logits(jnp.take_along_axis(h_BTD, positions_B[:, None, None], axis=1)
                                )[:, 0]

  def loss_sums(self, batch: dict) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(loss_sum, sums) of a batch {tokens, meta, targets, chunks, alpha} (`batches.
    train_batch`): the NLL over its targets (`loss.loss_and_metrics`). With a branch, `chunks`
    and `alpha` are required (a batch without them would silently train at the config's α)."""
    if self.gtca is not None:
      missing = [name for name in ("chunks", "alpha") if batch.get(name) is None]
      if missing:
        raise ValueError(f"GtcaLM.loss_sums: the batch has no {' or '.join(missing)} "
                         "(batches.train_batch puts the chunk layout and α in it)")
    logits_BTV = self.logits(batch["tokens"], batch["meta"], batch.get("chunks"),
                             batch.get("alpha"))
    _, sums = loss_and_metrics(logits_BTV, batch["tokens"], batch["targets"], batch["meta"].kind)
    return sums["loss_sum"], sums


def changed_arrays(before: Any, after: Any) -> list[str]:
  """Paths of the arrays whose bit patterns differ between two equal-structure trees."""
  flat = lambda tree: {path_string(p): np.asarray(x)
                       for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
  a, b = flat(before), flat(after)
  return sorted(p for p in a if p not in b or a[p].dtype != b[p].dtype
                or a[p].shape != b[p].shape or a[p].tobytes() != b[p].tobytes())


def params_of(model: GtcaLM) -> tuple[Any, dict]:
  """(graphdef, params): params = {"backbone": …[, "gtca": …]} pure dicts of the model's
  `nnx.Param`s (LoRA adapters included); `nnx.merge(graphdef, params)` is the model again."""
  graphdef, state = nnx.split(model, nnx.Param)
  return graphdef, nnx.to_pure_dict(state)
