"""GTCA's stages (SPEC §10): one stage of a plan trained on the frozen backbone, chained, resumable.

- **Step**: the project's one train step, `slm_jax.train.steps.make_train_step`, over a `GtcaLM`
  (`slm_jax.gtca.model`: the model owns its objective, reading the chunk layout and α from the
  batch), with `optimizer.trainable` = the stage's groups ("lora", "gtca", "lora,gtca"): only those
  leaves get gradients and optimizer state; the frozen backbone enters the loss as a constant and
  comes out of the step as the same bits. α is a float32 [B] row field of the batch (traced: a
  ramp does not recompile). The compiled step is reused by every run of one process with the same
  model graph, trainable groups, step count and learning rate.
- **Optimizer** (`stage_optimizer`): `train.optimizer.make_optimizer` with AdamW (β = 0.9, 0.999,
  ε = 1e-8, no weight decay), global-norm clip 1.0, warm-up over 5% of the stage's steps (at
  least 1; none for a 1-step stage) from 0, cosine decay to lr / 10 at the last step — SPEC §7's
  schedule convention: the first update already has a nonzero learning rate.
- **Batches** (`batch_indices`): the rows of step s are positions s·B … s·B + B − 1 of the
  epoch-wise permutations `default_rng([seed, stage, epoch])`, so a resumed stage sees the batches
  it would have seen.
- **Checkpoints**: stage i writes Orbax checkpoints of the adapters (LoRA + GTCA leaves; the
  backbone is never written: `adapters_of`) and the optimizer state under `OUT/stage{i}_{name}`,
  with extra {backbone digest, stage, settings}. A stage whose last step is on disk is restored
  (its adapters only, so a finished stage written with another optimizer-state layout — before
  GTCA trained through `train.steps` — is reused as well); a partial one resumes from its newest
  step (refused, naming the folder, when its optimizer state has another layout); a checkpoint
  trained on another backbone (digest) is refused.
- **Progress**: `stage i (name) step s/S: loss …, α …, R steps/s, ETA Ns`; the rate and ETA are
  measured from the end of this process' first step, so they exclude its compilation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from slm_jax import cli
from slm_jax.gtca.batches import Encoded, make_batch, train_batch
from slm_jax.gtca.plans import Settings, Stage
from slm_jax.train.checkpointing import Checkpointer, CheckpointError, layout_mismatch
from slm_jax.train.optimizer import OptimizerSection, make_optimizer, trainable_mask
from slm_jax.train.steps import make_train_step

ADAPTERS = "lora,gtca"  # the `optimizer.trainable` groups a checkpoint stores


def digest_line(prints: dict[str, tuple[int, int]]) -> str:
  """One sha256 over the frozen arrays' digests (what a checkpoint records)."""
  text = json.dumps(sorted(prints.items()))
  return hashlib.sha256(text.encode()).hexdigest()


def settings_json(settings: Settings) -> dict:
  return {k: list(v) if isinstance(v, tuple) else v
          for k, v in dataclasses.asdict(settings).items()}


def stage_optimizer(settings: Settings, stage: Stage) -> OptimizerSection:
  """The optimizer section of one stage (module docstring)."""
  return OptimizerSection(
      peak_lr=float(settings.lr), min_lr=float(settings.lr) * 0.1,
      warmup_steps=min(max(1, stage.steps // 20), stage.steps - 1), warmup_start_lr=0.0,
      weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, clip=1.0, grad_accum_steps=1,
      trainable=stage.trainable)


def stage_tx(settings: Settings, stage: Stage) -> optax.GradientTransformation:
  return make_optimizer(stage_optimizer(settings, stage), stage.steps, accumulate=False)


def batch_indices(n: int, batch: int, step: int, seed: int, stage: int) -> np.ndarray:
  """The rows of training step `step`: positions step·B … step·B + B − 1 of the epoch-wise
  permutations `default_rng([seed, stage, epoch]).permutation(n)` (resumable exactly)."""
  positions = step * batch + np.arange(batch)
  epochs = positions // n
  out = np.empty(batch, np.int64)
  for epoch in np.unique(epochs):
    perm = np.random.default_rng([seed, stage, int(epoch)]).permutation(n)
    sel = epochs == epoch
    out[sel] = perm[positions[sel] % n]
  return out


def adapters_of(params: dict) -> dict:
  """params with every frozen backbone array replaced by None (what a checkpoint stores): the
  LoRA adapters and the branch."""
  return jax.tree.map(lambda x, keep: x if keep else None, params,
                      trainable_mask(params, ADAPTERS))


def with_adapters(params: dict, adapters: dict) -> dict:
  """params with the adapters of a checkpoint (`adapters_of`'s layout) put back in."""
  return jax.tree.map(lambda a, x: x if a is None else a, adapters, params,
                      is_leaf=lambda x: x is None)


def stage_dir(out: str | pathlib.Path, index: int, stage: Stage) -> pathlib.Path:
  return pathlib.Path(out) / f"stage{index + 1}_{stage.name}"


def restore_stage(checkpointer: Checkpointer, params: dict, opt_state: Any, digest: str,
                  final_step: int) -> tuple[dict, Any, int] | None:
  """(params with the checkpoint's adapters, optimizer state — None for a finished stage —,
  step) of the newest step in `checkpointer`, or None when it holds none (module docstring)."""
  steps = checkpointer.steps()
  if not steps:
    return None
  directory = checkpointer.directory
  saved = _saved_opt_state(directory, steps[-1])
  finished = steps[-1] >= final_step
  if not finished and saved is not None and layout_mismatch(saved, opt_state):
    raise CheckpointError(
        f"{directory}: step {steps[-1]} holds an optimizer state of another layout (written "
        "before GTCA stages trained through train.steps); it cannot resume this stage: move "
        "the folder away to train the stage again")
  target = saved if finished and saved is not None else opt_state
  restored = checkpointer.restore_latest({"adapters": adapters_of(params), "opt_state": target})
  if restored is None:
    return None
  if restored.extra.get("backbone") != digest:
    raise CheckpointError(f"{directory}: the checkpoint was trained on another backbone "
                          f"(digest {restored.extra.get('backbone')}, now {digest})")
  state = None if finished else restored.state["opt_state"]
  return with_adapters(params, restored.state["adapters"]), state, restored.step


def _saved_opt_state(directory: pathlib.Path, step: int) -> Any:
  """The saved optimizer state's layout (Orbax array metadata), None when unreadable."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  try:
    return ocp.StandardCheckpointHandler().metadata(directory / str(step) / "state"
                                                    ).tree["opt_state"]
  except Exception:  # pylint: disable=broad-except  # an unreadable step: the restore decides
    return None


_STEP_CACHE: dict = {}  # (graphdef, trainable, steps, lr) -> jitted step (runs in one process)


def _train_step(graphdef, settings: Settings, stage: Stage,
                tx: optax.GradientTransformation) -> Callable:
  key = (graphdef, stage.trainable, stage.steps, settings.lr)
  if key not in _STEP_CACHE:
    _STEP_CACHE[key] = make_train_step(graphdef, tx, 1, trainable=stage.trainable)
  return _STEP_CACHE[key]


def run_stage(index: int, stage: Stage, graphdef, params: dict, train_set: Sequence[Encoded],
              settings: Settings, width: int, n_layers: int, prints: dict,
              log: Callable[[str], None] = print) -> dict:
  """Trains one stage (resuming from its own newest checkpoint) and returns the full params.
  `params` are donated to the step (the caller's arrays are consumed: give it its own copy);
  the stage's frozen leaves come out as the same bits, its trained leaves are checkpointed
  together with every other adapter, so the next stage starts from this stage's result."""
  directory = stage_dir(settings.out, index, stage)
  checkpointer = Checkpointer(directory, max_to_keep=2, async_save=False)
  tx = stage_tx(settings, stage)
  opt_state = tx.init(params)
  digest = digest_line(prints)
  start = 0
  restored = restore_stage(checkpointer, params, opt_state, digest, stage.steps)
  if restored is not None:
    params, saved_state, start = restored
    opt_state = opt_state if saved_state is None else saved_state
    log(f"stage {index + 1} ({stage.name}): resumed at step {start}/{stage.steps} from {directory}")
  device = jax.devices()[0]  # committed inputs: the step compiles once, not twice
  params, opt_state = jax.device_put((params, opt_state), device)
  if start < stage.steps:
    step_fn = _train_step(graphdef, settings, stage, tx)
    began, timed_from, losses = None, start, []
    for step in range(start, stage.steps):
      rows = batch_indices(len(train_set), settings.batch_size, step, settings.seed, index)
      batch = make_batch([train_set[i] for i in rows], width, n_layers, settings.k, pad_id=0)
      params, opt_state, sums = step_fn(
          params, opt_state, jax.device_put(train_batch(batch, stage.alpha(step)), device))
      losses.append(sums["loss_sum"] / jnp.maximum(sums["count"], 1.0))
      done = step + 1
      if began is None:  # this process' first step compiles: the rate starts after it
        jax.block_until_ready(sums)
        began, timed_from = time.perf_counter(), done
      if done % settings.log_every == 0 or done == stage.steps:
        loss = float(np.mean(np.asarray(jax.device_get(losses))))
        if not math.isfinite(loss):
          raise cli.CliError(f"stage {index + 1} ({stage.name}) step {done}: loss is {loss}",
                             cli.EXIT_NONFINITE)
        losses = []
        log(f"stage {index + 1} ({stage.name}) step {done}/{stage.steps}: loss {loss:.4f}, "
            f"α {stage.alpha(step):.3f}, {_pace(done, timed_from, began, stage.steps)}")
      if done % settings.checkpoint_every == 0 or done == stage.steps:
        checkpointer.save(done, {"adapters": adapters_of(params), "opt_state": opt_state},
                          {"backbone": digest, "stage": stage.name,
                           "settings": settings_json(settings)})
    checkpointer.wait()
  checkpointer.close()
  return params


def _pace(done: int, timed_from: int, began: float, total: int) -> str:
  """`R steps/s, ETA Ns` over the steps after this process' first (compiling) one."""
  if done <= timed_from:
    return "first step (compiled): rate and ETA from the next line"
  rate = (done - timed_from) / max(time.perf_counter() - began, 1e-9)
  return f"{rate:.1f} steps/s, ETA {(total - done) / rate:.0f}s"
