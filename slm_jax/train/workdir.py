"""A training workdir knows what it is: the run config it holds, checked before anything is written.

`check_workdir(run, workdir)` compares the command's config with the workdir's `config.json` (by
the one identity rule, `slm_jax.identity`) and refuses (`WorkdirError`, naming every differing key and saying "use a new --workdir") when the
command would continue another run: another configuration, model shape, data source, tokenizer,
optimizer or seed. Keys that may change on resume are `RESUMABLE_KEYS`: the step budget, logging,
evaluation, live-metric and checkpoint cadence, held-out evaluation settings, data worker count and prefetch
(a Grain state saved with another worker count is still refused by the data pipeline itself), and
the multi-host start-up mode and the mesh shape (checkpoints restore onto another mesh).

It also refuses a workdir whose `checkpoints/` holds only steps moved aside as unreadable
(starting over there would silently drop the earlier run). `NothingToDo` is what the trainer
raises, after restoring, when the newest readable step is already at `train.steps`; it writes
nothing then (config.json is written only after that point).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from slm_jax.cli import CliError
from slm_jax import identity

CONFIG_FILE = "config.json"
CHECKPOINTS = "checkpoints"
RESUMABLE_KEYS = frozenset({
    "train.steps", "train.log_every", "train.eval_every", "train.checkpoint_every",
    # live syntactic metrics read the parameters only: they never change the trajectory
    "train.eval_syntax_every", "train.eval_syntax_sg_items", "train.eval_syntax_blimp_pairs",
    "train.eval_syntax_beam", "train.eval_syntax_data",
    "eval.split", "eval.batch_size", "eval.max_batches", "eval.proposals",
    "checkpoint.dir", "checkpoint.max_to_keep", "checkpoint.resume",
    "data.worker_count", "data.prefetch", "model.attention_impl", "mesh.distributed",
    "mesh.data", "mesh.fsdp",  # checkpoints restore onto another mesh (checkpointing.py)
})


class WorkdirError(CliError):
  """The workdir holds another run (or an unusable one); nothing was written."""


class NothingToDo(CliError):
  """The workdir's newest checkpoint is already at (or past) `train.steps`."""

  exit_code = 0

  def __init__(self, step: int, steps: int, workdir: pathlib.Path):
    self.step, self.steps = step, steps
    super().__init__(f"already at step {step}: nothing to do ({workdir} asks for train.steps="
                     f"{steps}; raise --config.train.steps to train further)")


def differences(saved: dict, now: dict) -> list[tuple[str, Any, Any]]:
  """(key, saved value, new value) of every key that differs and may not change on resume
  (`slm_jax.identity.differences` without `RESUMABLE_KEYS`)."""
  return identity.differences(saved, now, RESUMABLE_KEYS)


def checkpoint_steps(workdir: pathlib.Path) -> tuple[list[int], list[str]]:
  """(committed step numbers, names moved aside as unreadable) under `workdir/checkpoints`."""
  folder = workdir / CHECKPOINTS
  if not folder.is_dir():
    return [], []
  steps = sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
  unreadable = sorted(p.name for p in folder.iterdir() if ".unreadable" in p.name)
  return steps, unreadable


def check_workdir(run: Any, workdir: pathlib.Path) -> None:
  """Refuses a workdir that holds another run (see the module docstring); reads only."""
  from slm_jax.train.run_config import ConfigError, validate  # pylint: disable=g-import-not-at-top
  config_path = workdir / CONFIG_FILE
  steps, unreadable = checkpoint_steps(workdir)
  if config_path.exists():
    try:
      saved = validate(json.loads(config_path.read_text())).to_dict()
    except (json.JSONDecodeError, ConfigError) as error:
      raise WorkdirError(f"{config_path} cannot be read as a run config ({error}); this workdir "
                         "is not a run this slm_jax can continue: use a new --workdir") from None
    diff = differences(saved, run.to_dict())
    if diff:
      raise WorkdirError(f"{workdir} holds another run ({identity.describe(diff, 'in the workdir')}"
                         "); use a new --workdir (or give "
                         "the workdir's own settings). May change on resume: "
                         + ", ".join(sorted(RESUMABLE_KEYS)))
  elif steps:
    raise WorkdirError(f"{workdir}/{CHECKPOINTS} holds checkpoints {steps} but no {CONFIG_FILE}: "
                       "cannot tell which run they belong to; use a new --workdir")
  if unreadable and not steps:
    raise WorkdirError(f"{workdir}/{CHECKPOINTS} holds only checkpoints moved aside as unreadable "
                       f"({', '.join(unreadable)}); starting over would drop that run: move "
                       "the folder away first, or use a new --workdir")
