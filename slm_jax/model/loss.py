"""Next-token cross-entropy over the target mask, split by token kind, and its clu metrics.

Shift convention: `targets_BT[b, t]` marks token t as a target, predicted by the logits at
position t − 1 (so `targets_BT[:, 0]` is never used: nothing in the row predicts its first token;
`structure.target_mask` already leaves it out). Kind groups (SPEC §4): terminal = TERMINAL + EOS
(the perplexity normalizer), structural = ONT/CNT/CNT1/CNT2, pause = PAUSE.
"""
# No `from __future__ import annotations`: clu's Collection reads its field annotations as classes.

from typing import ClassVar

import flax
import jax
import jax.numpy as jnp
from clu import metrics as clu_metrics

from slm_jax.kinds import STRUCTURAL_KINDS, Kind

KIND_GROUPS = {
    "terminal": (Kind.TERMINAL, Kind.EOS),
    "structural": STRUCTURAL_KINDS,
    "pause": (Kind.PAUSE,),
}


def loss_and_metrics(logits_BTV: jax.Array, tokens_BT: jax.Array, targets_BT: jax.Array,
                     kinds_BT: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Mean NLL over target tokens, and float32 sums for `LossMetrics`.

  Sums: `loss_sum`/`count` over all targets, `{group}_loss_sum`/`{group}_count` for each of
  `KIND_GROUPS` (terminal_loss_sum/terminal_count give the terminal perplexity, normalized by
  terminal + EOS tokens).
  """
  logits_BSV = logits_BTV[:, :-1].astype(jnp.float32)  # S = T - 1 predictions
  labels_BS = tokens_BT[:, 1:]
  weight_BS = targets_BT[:, 1:].astype(bool)
  kinds_BS = kinds_BT[:, 1:]
  label_logit_BS = jnp.take_along_axis(logits_BSV, labels_BS[..., None], axis=-1)[..., 0]
  nll_BS = jax.nn.logsumexp(logits_BSV, axis=-1) - label_logit_BS
  nll_BS = jnp.where(weight_BS, nll_BS, 0.0)
  metrics = {"loss_sum": nll_BS.sum(), "count": weight_BS.sum(dtype=jnp.float32)}
  for group, kinds in KIND_GROUPS.items():
    in_group_BS = weight_BS & jnp.isin(kinds_BS, jnp.asarray([int(k) for k in kinds]))
    metrics[f"{group}_loss_sum"] = jnp.where(in_group_BS, nll_BS, 0.0).sum()
    metrics[f"{group}_count"] = in_group_BS.sum(dtype=jnp.float32)
  loss = metrics["loss_sum"] / jnp.maximum(metrics["count"], 1.0)
  return loss, metrics


@flax.struct.dataclass
class Ratio(clu_metrics.Metric):
  """Σ numerator / Σ denominator over merged batches (optionally exp'd, for perplexities).

  Subclasses (see `ratio`) name the `loss_and_metrics` keys they read. An empty denominator
  gives 0 (exp: 1), not NaN.
  """

  numerator: jax.Array
  denominator: jax.Array
  numerator_key: ClassVar[str] = "loss_sum"
  denominator_key: ClassVar[str] = "count"
  exp: ClassVar[bool] = False

  @classmethod
  def empty(cls) -> "Ratio":
    return cls(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))

  @classmethod
  def from_model_output(cls, **outputs) -> "Ratio":
    return cls(jnp.asarray(outputs[cls.numerator_key], jnp.float32),
               jnp.asarray(outputs[cls.denominator_key], jnp.float32))

  def merge(self, other: "Ratio") -> "Ratio":
    return type(self)(self.numerator + other.numerator, self.denominator + other.denominator)

  def compute(self) -> jax.Array:
    value = self.numerator / jnp.maximum(self.denominator, 1.0)
    return jnp.exp(value) if self.exp else value


def ratio(numerator_key: str, denominator_key: str, exp: bool = False) -> type[Ratio]:
  """A `Ratio` metric reading two `loss_and_metrics` sums."""
  attributes = dict(numerator_key=numerator_key, denominator_key=denominator_key, exp=exp)
  name = f"Ratio_{numerator_key}_{denominator_key}{'_exp' if exp else ''}"
  return flax.struct.dataclass(type(name, (Ratio,), attributes))


@flax.struct.dataclass
class Total(clu_metrics.Metric):
  """Σ of one `loss_and_metrics` sum (the number of target tokens)."""

  total: jax.Array

  @classmethod
  def empty(cls) -> "Total":
    return cls(jnp.zeros((), jnp.float32))

  @classmethod
  def from_model_output(cls, count: jax.Array, **_) -> "Total":
    return cls(jnp.asarray(count, jnp.float32))

  def merge(self, other: "Total") -> "Total":
    return type(self)(self.total + other.total)

  def compute(self) -> jax.Array:
    return self.total


@flax.struct.dataclass
class LossMetrics(clu_metrics.Collection):
  """Token-weighted training/eval metrics: `LossMetrics.single_from_model_output(**sums)`.

  terminal_ppl = exp(NLL of terminal + EOS targets / their count); joint_ppl = exp(NLL of all
  targets / terminal + EOS count), the SPEC §4/§9 normalization of the joint probability.
  """

  loss: ratio("loss_sum", "count")
  terminal_loss: ratio("terminal_loss_sum", "terminal_count")
  structural_loss: ratio("structural_loss_sum", "structural_count")
  pause_loss: ratio("pause_loss_sum", "pause_count")
  terminal_ppl: ratio("terminal_loss_sum", "terminal_count", exp=True)
  joint_ppl: ratio("loss_sum", "terminal_count", exp=True)
  target_tokens: Total
