"""GTCA's stages (SPEC §10): one stage of a plan trained on the frozen backbone, chained, resumable.

- **Step**: the project's one train step, `slm_jax.train.steps.make_train_step`, over a `GtcaLM`
  (`slm_jax.gtca.model`: the model owns its objective, reading the chunk layout and α from the
  batch), with `optimizer.trainable` = the stage's groups ("lora", "gtca", "lora,gtca"): only those
  leaves get gradients and optimizer state; the frozen backbone enters the loss as a constant and
  comes out of the step as the same bits. α is a float32 [B] row field of the batch (traced: a
  ramp does not recompile). The compiled step is reused by every run of one process with the same
  model graph, trainable groups, step count and learning rate (`train.step_cache`).
- **Optimizer** (`stage_optimizer`): `train.optimizer.make_optimizer` with AdamW (β = 0.9, 0.999,
  ε = 1e-8, no weight decay), global-norm clip 1.0, warm-up over 5% of the stage's steps (at
  least 1; none for a 1-step stage) from 0, cosine decay to lr / 10 at the last step — SPEC §7's
  schedule convention: the first update already has a nonzero learning rate.
- **Batches** (`batch_indices`): the rows of step s are positions s·B … s·B + B − 1 of the
  epoch-wise permutations `default_rng([seed, stage, epoch])`, so a resumed stage sees the batches
  it would have seen.
- **Loop**: a stage runs through the project's one training loop (`train.loop.Loop`): every
  step's loss is checked (a non-finite one stops the run, exit 3, nothing saved after it); the
  progress line `stage i (name) step s/S | loss … | α … | R steps/s | ETA …` (the window's mean
  per-step loss; rate and ETA exclude this process' compiling first step); checkpoints every
  `checkpoint_every` steps and at the last one (`Persist`: the adapter-only layout below).
- **Checkpoints**: stage i writes Orbax checkpoints of the adapters (LoRA + GTCA leaves; the
  backbone is never written: `adapters_of`) and the optimizer state under `OUT/stage{i}_{name}`,
  with extra {backbone digest, stage, settings, step}. A stage whose last step is on disk is
  restored (its adapters only, so a finished stage written with another optimizer-state layout —
  before GTCA trained through `train.steps` — is reused as well); a partial one resumes from its
  newest step (refused, naming the folder, when its optimizer state has another layout); a
  checkpoint trained on another backbone (digest) is refused.
- **Identity**: the stage folder's `identity.json` (`stage_record`: the run's record — its
  settings, the source backbone's digest —, the stage, the prepared backbone's digest, the
  training rows' digest) is compared before the stage resumes or is reused: a folder trained
  under other settings is refused naming the differing keys (`RESUMABLE_KEYS` may change).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from slm_jax.gtca.batches import EncodedExample, make_batch, train_batch
from slm_jax.gtca.plans import Settings, Stage
from slm_jax import identity
from slm_jax.train.checkpointing import Checkpointer, CheckpointError, layout_mismatch
from slm_jax.train import sharding
from slm_jax.train.loop import Cadence, Persist, Window, rate_text
from slm_jax.train.optimizer import OptimizerSection, make_optimizer, trainable_mask
from slm_jax.train.state import Trainer, initial_state

ADAPTERS = "lora,gtca"  # the `optimizer.trainable` groups a checkpoint stores
RECORD = "identity.json"  # a run's and a stage's identity record (slm_jax.identity)
# settings that may change when a run resumes or is reused: cadence, where it is, the backbone's
# path (its arrays are compared by digest)
RESUMABLE_KEYS = frozenset(f"settings.{key}" for key in (
    "log_every", "checkpoint_every", "out", "backbone"))


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


def stage_record(run_record: dict, index: int, stage: Stage, prepared: str, data: str) -> dict:
  """What makes stage `index` (saved as `identity.json` in its folder, compared before it resumes
  or is reused): the run's record, the stage, the prepared backbone's digest and the digest of
  the encoded training rows (`batches.data_digest`)."""
  return {**run_record, "stage": {"index": index + 1, "name": stage.name,
                                  "trainable": stage.trainable, "steps": stage.steps},
          "prepared_backbone": prepared, "train_data": data}


def check_stage_dir(directory: pathlib.Path, record: dict) -> None:
  """Refuses a stage folder trained under other settings (naming the differing keys)."""
  identity.check_record(directory / RECORD, record,
                        what=f"{directory} holds a stage trained under other settings",
                        where="in the stage folder", ignore=RESUMABLE_KEYS,
                        hint="use another --out, or the settings it was started with")


def _progress(stage: Stage):
  """The stage's progress fields: the window's mean per-step loss (float32 mean of the steps'
  float32 losses), α of the window's last step, steps/s after the compiling first step."""

  def progress(window: Window, done: int) -> tuple[dict, list[str]]:
    loss = float(np.mean(np.asarray(jax.device_get([out["loss"] for out in window.outs]))))
    rate, alpha = window.per_second(), stage.alpha(done - 1)
    return ({"loss": loss, "alpha": alpha, "steps_per_s": rate},
            [f"loss {loss:.4f}", f"α {alpha:.3f}", rate_text(rate, "steps/s", 1)])

  return progress


def run_stage(index: int, stage: Stage, graphdef, params: dict, train_set: Sequence[EncodedExample],
              settings: Settings, width: int, n_layers: int, prints: dict, record: dict,
              log: Callable[[str], None] = print, stop_after: int | None = None) -> dict | None:
  """Trains one stage through `train.loop.Loop` (resuming from its own newest checkpoint) and
  returns the full params, or None when `stop_after` ended it unfinished. `record` is the
  stage's identity (`stage_record`): a folder holding another one is refused before anything
  is read. `params` are donated to the step (the caller's arrays are consumed: give it its own
  copy); the stage's frozen leaves come out as the same bits, its trained leaves are
  checkpointed together with every other adapter, so the next stage starts from this stage's
  result."""
  directory = stage_dir(settings.out, index, stage)
  check_stage_dir(directory, record)
  device = jax.devices()[0]  # committed inputs: the step compiles once, not twice
  setup = initial_state(graphdef, params, stage_tx(settings, stage), stage.steps,
                        batch_rows=settings.batch_size,
                        mesh=sharding.make_mesh(1, 1, devices=[device]),
                        trainable=stage.trainable, shard=False,
                        cache_key=("gtca", graphdef, stage.trainable, stage.steps, settings.lr))
  digest = digest_line(prints)
  label = f"stage {index + 1} ({stage.name}) "
  extra = {"backbone": digest, "stage": stage.name, "settings": settings_json(settings)}
  trainer = Trainer(jax.device_put(setup.state, device), stage.steps, directory, max_to_keep=2,
                    async_save=False, log=log, label=label, persist=Persist(
                        target=lambda state: {"adapters": adapters_of(state["params"]),
                                              "opt_state": state["opt_state"]},
                        extra=lambda step: dict(extra, step=step)))

  def restore(state):  # restore_stage also reads the older checkpoint layout
    restored = restore_stage(trainer.checkpointer, state["params"], state["opt_state"], digest,
                             stage.steps)
    if restored is None:
      return None
    params, saved_state, start = restored
    log(f"{label.rstrip()}: resumed at step {start}/{stage.steps} from {directory}")
    state = {"params": params, "opt_state": state["opt_state"] if saved_state is None
             else saved_state}
    return jax.device_put(state, device), start

  try:
    start = trainer.resume(restore)
    if start >= stage.steps:
      return trainer.state["params"]
    identity.write_record(directory / RECORD, record)
    step_fn = setup.step_fn(extra=lambda batch, sums: {
        "loss": sums["loss_sum"] / jnp.maximum(sums["count"], 1.0)})

    def batch_at(step):
      rows = batch_indices(len(train_set), settings.batch_size, step, settings.seed, index)
      batch = make_batch([train_set[i] for i in rows], width, n_layers, settings.k, pad_id=0)
      return jax.device_put(train_batch(batch, stage.alpha(step)), device)

    result = trainer.run(step_fn, batch_at, progress=_progress(stage),
                         cadence=Cadence(log_every=settings.log_every,
                                         checkpoint_every=settings.checkpoint_every,
                                         stop_after=stop_after),
                         loss_of=lambda out: float(out["loss"]), hint="lower --lr")
  finally:
    trainer.close()
  return result.state["params"] if result.step >= stage.steps else None
