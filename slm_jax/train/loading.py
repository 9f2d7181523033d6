"""Load a trained run from its workdir: config, configuration, tokenizer and model parameters.

Evaluation, beam search and scoring start here: `run = load_run("runs/tgtree_tiny")` then
`run.model(tokens_BT, meta)` gives logits. Reads `config.json`, `tokenizer_spec.json` and the
newest readable Orbax checkpoint (the same fallback rules as training).

`source_digest(path, step)` is what names a model source in every identity record (evaluation
resume, item files, fine-tune seeds, GTCA runs): a workdir's checkpoint step — the step folder
and the workdir's tokenizer files — or a pretrained checkpoint (a Hugging Face folder, a `.gguf`
file), digested by THE one rule, `slm_jax.identity.content_digest`; `run_identity(run)` is that
of a loaded run (its step and digest).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
from flax import nnx

from slm_jax import identity

from slm_jax.train.run_config import ConfigError, RunConfig, validate
from slm_jax.configurations import Configuration
from slm_jax.model.decoder import Decoder
from slm_jax.pushdown.model import PushdownLM
from slm_jax.tokenizer import SPEC_FILE_NAME, Tokenizer
from slm_jax.train.checkpointing import Checkpointer
from slm_jax.train.optimizer import make_optimizer
from slm_jax.train.workdir import CHECKPOINTS, CONFIG_FILE


@dataclasses.dataclass
class LoadedRun:
  cfg: RunConfig
  configuration: Configuration
  tokenizer: Tokenizer
  model: Decoder  # or a `PushdownLM` (model.pushdown_depths > 0)
  step: int
  workdir: pathlib.Path
  newest_step: int = -1  # the newest checkpoint on disk (== step unless it was unreadable)
  skipped: tuple = ()    # (step, reason) of newer checkpoints that could not be read


def run_config(workdir: str | pathlib.Path) -> tuple[RunConfig, Configuration]:
  """The saved config of training workdir `workdir`, validated, and its configuration (no
  model loaded). A config.json that is not valid JSON or not a valid config (an older slm_jax,
  an edit) is an error naming the file and every problem."""
  workdir = pathlib.Path(workdir)
  config_path = workdir / CONFIG_FILE
  if not config_path.exists():
    raise FileNotFoundError(f"{config_path} not found: is {workdir} a slm_jax training workdir?")
  try:
    run = validate(json.loads(config_path.read_text()))
  except json.JSONDecodeError as error:
    raise ConfigError([f"{config_path}: not valid JSON ({error})"]) from None
  except ConfigError as error:
    raise ConfigError([f"{config_path}: {p}" for p in error.problems]) from None
  return run, run.resolved


def load_run(workdir: str | pathlib.Path, step: int | None = None,
             dtype: str | None = "float32") -> LoadedRun:
  """The model of `workdir` at its newest readable checkpoint (or `step`).

  `dtype`: the compute dtype the model is built with — float32 by default, as the paper
  evaluates (SPEC §9), `"bfloat16"` optional, None = the run's own `model.compute_dtype`.
  Parameters are float32 either way; `run.cfg.model` is the config the model was built with.
  """
  workdir = pathlib.Path(workdir)
  cfg, configuration = run_config(workdir)
  if dtype is not None:
    cfg = dataclasses.replace(cfg, model=cfg.model.replace(compute_dtype=dtype))
  tokenizer = Tokenizer.load(workdir / SPEC_FILE_NAME)
  model_class = PushdownLM if cfg.model.pushdown_depths else Decoder
  model = model_class(cfg.model.replace(vocab_size=tokenizer.vocab_size), rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  # Read-only: evaluating never moves, creates or writes anything in the training workdir.
  checkpointer = Checkpointer(workdir / "checkpoints", async_save=False, read_only=True)
  steps = checkpointer.steps()
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
  return LoadedRun(cfg, configuration, tokenizer, model, restored.step, workdir,
                   newest_step=max(steps) if steps else restored.step,
                   skipped=tuple(restored.skipped))


def is_workdir(path: str | pathlib.Path) -> bool:
  """Whether `path` is a training workdir (config.json and a checkpoints folder)."""
  path = pathlib.Path(path)
  return (path / CONFIG_FILE).is_file() and (path / CHECKPOINTS).is_dir()


def source_digest(path: str | pathlib.Path, step: int | None = None) -> tuple[int, str]:
  """(step, content digest) of a model source (module docstring): a training workdir at its
  checkpoint `step` (None: the newest on disk), else a checkpoint folder or file (step 0)."""
  path = pathlib.Path(path)
  if not is_workdir(path):
    return 0, identity.content_digest(path)
  if step is None:
    steps = [int(p.name) for p in (path / CHECKPOINTS).iterdir() if p.name.isdigit()]
    if not steps:
      raise FileNotFoundError(f"no checkpoint in {path / CHECKPOINTS}")
    step = max(steps)
  tokenizer_files = sorted(p for p in path.iterdir() if p.is_file() and "tokenizer" in p.name)
  return step, identity.content_digest(path / CHECKPOINTS / str(step), *tokenizer_files)


def run_identity(run) -> dict:
  """{"step", "digest"} of a loaded run (a `LoadedRun`, or a pretrained checkpoint's run with a
  `path`): what an evaluation's item files record of the model that scored them."""
  source = getattr(run, "workdir", None) or run.path
  step, digest = source_digest(source, int(run.step) if is_workdir(source) else None)
  return {"step": step, "digest": digest}
