"""Load a trained run from its workdir: config, configuration, tokenizer and model parameters.

Evaluation, beam search and scoring start here: `run = load_run("runs/tgtree_tiny")` then
`run.model(tokens_BT, meta)` gives logits. Reads `config.json`, `tokenizer_spec.json` and the
newest readable Orbax checkpoint (the same fallback rules as training).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import jax
import ml_collections
from flax import nnx

from slm_jax.configurations import Configuration, resolve
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import SPEC_FILE_NAME, Tokenizer
from slm_jax.train.checkpointing import Checkpointer
from slm_jax.train.optimizer import make_optimizer
from slm_jax.train.trainer import CONFIG_FILE, model_config


@dataclasses.dataclass
class LoadedRun:
  cfg: Any
  configuration: Configuration
  tokenizer: Tokenizer
  model: Decoder
  step: int
  workdir: pathlib.Path


def run_config(workdir: str | pathlib.Path) -> tuple[Any, Configuration]:
  """The saved config of training workdir `workdir` and its configuration (no model loaded)."""
  workdir = pathlib.Path(workdir)
  config_path = workdir / CONFIG_FILE
  if not config_path.exists():
    raise FileNotFoundError(f"{config_path} not found: is {workdir} a slm_jax training workdir?")
  cfg = ml_collections.ConfigDict(json.loads(config_path.read_text()))
  configuration = resolve(linearization=cfg.configuration.linearization,
                          attention=cfg.configuration.attention)
  return cfg, dataclasses.replace(configuration, name=cfg.configuration.name)


def load_run(workdir: str | pathlib.Path, step: int | None = None) -> LoadedRun:
  """The model of `workdir` at its newest readable checkpoint."""
  workdir = pathlib.Path(workdir)
  cfg, configuration = run_config(workdir)
  tokenizer = Tokenizer.load(workdir / SPEC_FILE_NAME)
  model = Decoder(model_config(cfg, tokenizer.vocab_size), rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  checkpointer = Checkpointer(workdir / "checkpoints", async_save=False)
  params = nnx.to_pure_dict(params)
  tx = make_optimizer(cfg.optimizer, cfg.train.steps, accumulate=False)
  abstract = {"params": params, "opt_state": jax.eval_shape(tx.init, params)}
  restored = checkpointer.restore_latest(abstract, step=step)
  checkpointer.close()
  if restored is None:
    raise FileNotFoundError(f"no checkpoint in {workdir / 'checkpoints'}")
  state = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(state, restored.state["params"])
  nnx.update(model, state)
  return LoadedRun(cfg, configuration, tokenizer, model, restored.step, workdir)
