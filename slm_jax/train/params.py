"""Starting a run from a Hugging Face checkpoint, and training only some parameter groups.

`build_params(mconfig, mesh, seed)` is how the trainer gets its model: `Decoder(mconfig)` at
random, or, with `model.init_from` set, the checkpoint imported by `slm_jax.hf.load_params`
straight onto the shards the partition table gives each parameter on `mesh` (`tree_shardings`),
never as one host copy. It returns the graphdef and the placed pure-dict parameters.

Frozen-backbone / LoRA training (`optimizer.trainable` ≠ "all") runs in the one train step
(`slm_jax.train.steps.make_train_step(..., trainable=...)`: gradients and optimizer state for the
trainable leaves only). `fingerprints` / `backbone_check` prove afterwards that every
frozen array is bitwise what was loaded: per array two 32-bit digests of its bit pattern
(a wrapping sum weighted by position and an xor), compared with those taken at load time. (What an evaluation's item files record of the model
that scored them is `train.loading.run_identity`: THE content digest of its checkpoint.)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax.hf.load import load_params
from slm_jax.model.decoder import Decoder
from slm_jax.pushdown.model import PushdownLM
from slm_jax.train import sharding
from slm_jax.train.optimizer import trainable_mask


def build_params(mconfig, mesh, seed: int) -> tuple[Any, dict]:
  """(graphdef, params) of the run's decoder, placed on `mesh` (see the module docstring); the
  Pushdown reference (`model.pushdown_depths` > 0) is built at random only."""
  if mconfig.pushdown_depths:
    if mconfig.init_from:
      raise ValueError("model.init_from: the Pushdown reference (model.pushdown_depths > 0) "
                       "trains from scratch; a Hugging Face checkpoint has no attachment head")
    graphdef, params = nnx.split(PushdownLM(mconfig, rngs=nnx.Rngs(seed)), nnx.Param)
    params = nnx.to_pure_dict(params)
    return graphdef, jax.device_put(params, sharding.tree_shardings(params, mesh))
  if mconfig.init_from:
    params = load_params(mconfig.init_from, mconfig, seed=seed,
                         shardings=lambda abstract: sharding.tree_shardings(abstract, mesh))
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: Decoder(mconfig, rngs=nnx.Rngs(seed))))
    return graphdef, params
  graphdef, params = nnx.split(Decoder(mconfig, rngs=nnx.Rngs(seed)), nnx.Param)
  params = nnx.to_pure_dict(params)
  return graphdef, jax.device_put(params, sharding.tree_shardings(params, mesh))


def _digest(x: jax.Array) -> jax.Array:
  bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32).reshape(-1)
  weights = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(2654435761) + jnp.uint32(1)
  return jnp.stack([jnp.sum(bits * weights, dtype=jnp.uint32),
                    jax.lax.reduce(bits, jnp.uint32(0), jax.lax.bitwise_xor, (0,))])


def fingerprints(params: Any, trainable: str) -> dict[str, tuple[int, int]]:
  """Path → bit-pattern digests of every frozen parameter (empty when everything trains).
  A selection that trains nothing is an error (e.g. "lora" without model.lora_rank)."""
  mask = trainable_mask(params, trainable)
  if not any(jax.tree.leaves(mask)):
    raise ValueError(f"optimizer.trainable={trainable!r} selects no parameter of the model "
                     "(LoRA adapters need model.lora_rank > 0)")
  out = {}
  for (path, x), (_, m) in zip(jax.tree_util.tree_flatten_with_path(params)[0],
                               jax.tree_util.tree_flatten_with_path(mask)[0]):
    if not m:
      out[sharding.path_string(path)] = tuple(int(v) for v in _digest(x))
  return out


def backbone_check(before: dict[str, tuple[int, int]], params: Any, trainable: str
                   ) -> tuple[bool | None, str]:
  """(all frozen arrays unchanged?, the summary line); (None, …) when nothing was frozen."""
  if not before:
    return None, "backbone: none frozen (optimizer.trainable=all)"
  after = fingerprints(params, trainable)
  changed = sorted(p for p in before if after.get(p) != before[p])
  if changed:
    return False, (f"backbone: {len(changed)} of {len(before)} frozen arrays CHANGED: "
                   + ", ".join(changed[:5]))
  return True, f"backbone: all {len(before)} frozen arrays bitwise equal to the loaded ones"


# A preset's defaults on top of `config_builder.build(configuration, "1b")`: LoRA on every
# projection over a frozen bf16 backbone, the checkpoint's own tokenizer (+ reserved tokens),
# ZeRO-3 over one 8-chip host.
PRESET = {
    "model.param_dtype": "bfloat16", "model.compute_dtype": "bfloat16",
    "model.include_bias": False, "model.lora_rank": 16, "model.lora_alpha": 32.0,
    "model.lora_dropout": 0.05, "data.tokenizer": "hf", "data.seq_len": 2048,
    "optimizer.trainable": "lora", "optimizer.peak_lr": 2e-4, "optimizer.min_lr": 2e-5,
    "optimizer.warmup_steps": 100, "optimizer.weight_decay": 0.0,
    "train.steps": 2000, "train.global_batch": 64, "optimizer.grad_accum_steps": 4,
    "mesh.data": 1, "mesh.fsdp": 8,
}


def hf_preset(name: str, configuration: str, folder: str, model: dict[str, Any]):
  """The locked ConfigDict of preset `name`: `configuration` trained from checkpoint `folder`
  (downloaded there first, see the README), `model` its architecture keys, `PRESET` the rest.
  `folder` "": given as --config.model.init_from, which sets the architecture keys and the
  tokenizer (`run_config.checkpoint_overrides`)."""
  from slm_jax.train import run_config as config_builder  # pylint: disable=import-outside-toplevel
  cfg = config_builder.build(configuration, "1b")
  values = {**PRESET, **{f"model.{k}": v for k, v in model.items()},
            "model.init_from": folder, "data.tokenizer_path": f"{folder}/tokenizer.json",
            "checkpoint.dir": f"runs/{name}"}
  if not folder:  # `--config=hf`: the checkpoint (and its tokenizer) come from the command line
    del values["data.tokenizer"], values["data.tokenizer_path"]
  train_tokens = values["train.steps"] * values["train.global_batch"] * values["data.seq_len"]
  values["train.train_tokens"] = train_tokens
  with cfg.unlocked(), cfg.ignore_type():  # e.g. a fractional mlp_ratio over the scale's int
    for key, value in values.items():
      section, field = key.split(".")
      cfg[section][field] = value
  config_builder.validate(cfg)
  return cfg
