"""AdamW with global-norm clipping, warmup + cosine schedule and gradient accumulation (SPEC §7).

`make_optimizer(cfg.optimizer, total_steps)` builds

  [MultiSteps(k)] ∘ clip_by_global_norm(clip) → AdamW(schedule, β1, β2, ε, weight_decay, mask)

Conventions:
- Steps count optimizer updates, not micro-batches. The update number k = 1, 2, …, total_steps
  uses `schedule(k)`: the first update already has a nonzero learning rate (as in OLMo, whose
  trainer increments the step before reading the scheduler) and the last one uses `min_lr`.
- Weight decay (decoupled, multiplied by the scheduled learning rate as in PyTorch AdamW) applies
  to weight matrices only: no decay on embeddings, norm weights or biases, OLMo's default
  (`decay_norm_and_bias = decay_embeddings = False`). See `decay_mask` for the naming rule.
- Gradient accumulation with `optax.MultiSteps` averages the k micro-batch gradients before
  clipping, so it equals one step on the concatenated batch when every micro-batch loss is a mean
  over the same number of targets. A train step that normalizes by the global target count
  should accumulate itself and call `make_optimizer(..., accumulate=False)`.
- Frozen-backbone / LoRA training: `trainable` names the parameter groups that train
  (`TRAINABLE_GROUPS`, comma-joined: "all", "lora", "lora,norms", …). The optimizer then keeps
  state for those leaves only (`optax.masked`; the others hold empty `MaskedNode`s) and returns
  zero updates for the rest. `trainable_mask(params, trainable)` is the same selection as a
  pytree of bools; the train step (`slm_jax.train.steps.make_train_step`) differentiates only those leaves.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import jax.numpy as jnp
import optax

from slm_jax.model.lora import is_lora_path
from slm_jax.sections import Rules, option
from slm_jax.train.sharding import path_string

# A parameter is exempt from weight decay when a component of its path matches this (lowercased).
NO_DECAY_PATTERN = re.compile(r"embed|norm|^bias$|^scale$|^ln(_|\d|$)")

# Parameter groups `optimizer.trainable` may name: group -> predicate of the '/'-joined path.
TRAINABLE_GROUPS = {
    "all": lambda path: True,
    "lora": is_lora_path,
    "embed": lambda path: path.startswith("embed_tokens/"),
    "head": lambda path: path.startswith("lm_head/") and not is_lora_path(path),
    "norms": lambda path: "norm" in path.rsplit("/", 2)[-2],
    "biases": lambda path: path.endswith("/bias") and "norm" not in path.rsplit("/", 2)[-2],
    "attn": lambda path: "/attn/" in path and not is_lora_path(path),
    "mlp": lambda path: "/mlp/" in path and not is_lora_path(path),
    "gtca": lambda path: path.startswith("gtca/"),  # the GTCA branch of a gtca.model.GtcaLM
}


def trainable_groups(trainable: str) -> list[str]:
  """The group names of an `optimizer.trainable` value ("lora, norms" → [lora, norms])."""
  return [g.strip() for g in str(trainable).split(",") if g.strip()]


def is_trainable(path: str, trainable: str) -> bool:
  """Whether the parameter at '/'-joined `path` trains under `optimizer.trainable`."""
  return any(TRAINABLE_GROUPS[g](path) for g in trainable_groups(trainable))


def trainable_mask(params: Any, trainable: str) -> Any:
  """A pytree of bools like `params`: the leaves that train (all of them for "all")."""
  return jax.tree_util.tree_map_with_path(lambda p, _: is_trainable(path_string(p), trainable),
                                          params)


@dataclasses.dataclass(frozen=True)
class OptimizerSection:
  """The `optimizer` section of a run's config (SPEC §7; its rules live here only)."""

  peak_lr: float
  min_lr: float
  warmup_steps: int
  warmup_start_lr: float
  weight_decay: float
  b1: float
  b2: float
  eps: float
  clip: float  # global-norm clip; 0 = off
  grad_accum_steps: int  # micro-batches per update
  trainable: str = option("all", required=False)  # comma-joined TRAINABLE_GROUPS

  def __post_init__(self):
    rules = Rules("optimizer", self)
    if rules.typed:
      need = rules.need
      need(self.peak_lr > 0, f"peak_lr must be positive, got {self.peak_lr}")
      need(0 <= self.min_lr <= self.peak_lr, f"min_lr={self.min_lr} must be in [0, peak_lr]")
      need(0 <= self.warmup_start_lr <= self.peak_lr,
           f"warmup_start_lr={self.warmup_start_lr} must be in [0, peak_lr]")
      need(self.warmup_steps >= 0, "warmup_steps must be ≥ 0")
      need(self.weight_decay >= 0, "weight_decay must be ≥ 0")
      need(0 <= self.b1 < 1 and 0 <= self.b2 < 1, "b1 and optimizer.b2 must be in [0, 1)")
      need(self.eps > 0, "eps must be positive")
      need(self.clip >= 0, "clip must be ≥ 0 (0 turns clipping off)")
      need(self.grad_accum_steps >= 1, "grad_accum_steps must be ≥ 1")
      unknown = [g for g in trainable_groups(self.trainable) if g not in TRAINABLE_GROUPS]
      need(not unknown and bool(trainable_groups(self.trainable)),
           f"trainable={self.trainable!r}: groups must be comma-joined names among "
           f"{', '.join(TRAINABLE_GROUPS)}")
    rules.done()


def warmup_cosine(peak_lr: float, min_lr: float, warmup_steps: int, total_steps: int,
                  warmup_start_lr: float = 0.0) -> optax.Schedule:
  """Linear warmup `warmup_start_lr → peak_lr` over steps [0, warmup], then cosine to `min_lr`.

  Value `min_lr` at `total_steps` and after. A warmup longer than the run is cut to the run
  (short smoke runs override `train.steps` without touching the warmup).
  """
  total = max(int(total_steps), 1)
  warmup = min(max(int(warmup_steps), 0), total)
  decay = total - warmup

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    ramp = warmup_start_lr + (peak_lr - warmup_start_lr) * step / max(warmup, 1)
    progress = jnp.clip((step - warmup) / max(decay, 1), 0.0, 1.0)
    cosine = min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    return jnp.where(step < warmup, ramp, jnp.where(step >= total, min_lr, cosine))

  return schedule


def make_schedule(opt_cfg: Any, total_steps: int) -> optax.Schedule:
  """The learning rate as a function of the update number (1-based; see module docstring)."""
  return warmup_cosine(opt_cfg.peak_lr, opt_cfg.min_lr, opt_cfg.warmup_steps, total_steps,
                       getattr(opt_cfg, "warmup_start_lr", 0.0))


def decays(path, leaf) -> bool:
  """True for a weight matrix: ≥ 2 dims and no path component matching `NO_DECAY_PATTERN`.

  The name rule keeps stacked (scanned-layer) norm weights and biases, which are 2-D, out of
  decay; models should name embedding tables `embed…` and norm modules `…norm…`.
  """
  if getattr(leaf, "ndim", 0) < 2:
    return False
  return not any(NO_DECAY_PATTERN.search(name) for name in path_string(path).lower().split("/"))


def decay_mask(params: Any) -> Any:
  """A pytree of bools like `params`: which leaves get weight decay (works for nnx.State too)."""
  return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(opt_cfg: Any, total_steps: int, *,
                   accumulate: bool = True) -> optax.GradientTransformation:
  """The training optimizer from `cfg.optimizer`; `total_steps` counts optimizer updates.

  With `accumulate` and `grad_accum_steps` k > 1 it is wrapped in `optax.MultiSteps`: call
  `update` once per micro-batch; every k-th call applies the averaged gradient, the others return
  zero updates (`state.mini_step == 0` after a call that applied one).
  """
  schedule = make_schedule(opt_cfg, total_steps)
  parts = []
  if opt_cfg.clip > 0:
    parts.append(optax.clip_by_global_norm(opt_cfg.clip))
  parts.append(optax.adamw(lambda count: schedule(count + 1), b1=opt_cfg.b1, b2=opt_cfg.b2,
                           eps=opt_cfg.eps, weight_decay=opt_cfg.weight_decay, mask=decay_mask))
  tx = optax.chain(*parts)
  trainable = getattr(opt_cfg, "trainable", "all")
  if "all" not in trainable_groups(trainable):  # state for the trainable leaves only
    mask = lambda params: trainable_mask(params, trainable)
    frozen = lambda params: jax.tree.map(lambda t: not t, mask(params))
    tx = optax.chain(optax.masked(tx, mask), optax.masked(optax.set_to_zero(), frozen))
  k = int(opt_cfg.grad_accum_steps)
  if accumulate and k > 1:
    return optax.MultiSteps(tx, every_k_schedule=k).gradient_transformation()
  return tx
