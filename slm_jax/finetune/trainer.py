"""XSum / BoolQ full fine-tuning of a trained run, one resumable run per seed (SPEC §11).

`finetune_seed(loaded, rows, settings, seed, out)` trains every parameter of `loaded` (a
`load_run` result) on the rows of `slm_jax.downstream.finetune_data` with a fresh optimizer:

- **Optimizer**: the run's `optimizer` section with the fine-tuning values (`finetune_config`):
  AdamW β (0.9, 0.95), ε 1e-8, weight decay 0.1 (weight matrices only, the pre-training
  convention of `train.optimizer.decays`), clip 1.0, linear warmup from 0 over `warmup_steps`
  then cosine to 1e-6 at the last step — exactly `train.optimizer.make_optimizer`, whose
  `warmup_cosine` expresses this schedule. Steps = epochs × ⌈rows / batch⌉.
- **Step**: `train.steps.make_train_step` (the loss is summed over the batch's targets, which
  `FinetuneBatches` restricts to the summary + EOS / answer tokens, and divided by their count),
  run by the one training loop (`train.loop.Loop`: the loss checked at every step, nothing
  saved after a non-finite one); the seeds of one process share the compiled step
  (`train.step_cache`).
- **Layout** of `OUT/seed<S>/`, a workdir `train.loading.load_run` reads like any run:
    config.json          the source run's config with the fine-tuning optimizer, train.steps
                         and train.seed (so `load_run` rebuilds this optimizer's state shape)
    tokenizer_spec.json  the source run's tokenizer
    checkpoints/<step>/  Orbax {params, opt_state} (+ extra: step, task) every
                         `checkpoint_every` steps and at the end
    metrics.jsonl        step, loss, lr, grad_norm, examples_per_s, tokens_per_s (+ TensorBoard)
    finetune.json        what makes the seed: the settings, the seed, the source run and step,
                         the row counts, the steps (`seed_record`)
    summary.json         written last: its presence marks the seed finished
- **Resume**: a killed seed restarts from its newest readable checkpoint; the batches of step k
  are a function of (seed, k), so the result equals an uninterrupted run. A seed folder that
  holds another fine-tune (different settings, source run or data) is refused
  (`FinetuneMismatchError`, nothing written; `slm_jax.identity` compares the records, naming the
  differing keys); `log_every` / `checkpoint_every` may change. `finetune_seeds` runs the seeds
  as a `train.sweep`: every seed folder is checked before the first seed trains, and a finished
  seed is reused only when its `finetune.json` matches this command's (never another
  fine-tune's result printed as this one's).
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax import cli, files, identity
from slm_jax.downstream.encoding import TextEncoder, make_tree_source
from slm_jax.downstream.finetune_data import (SETTINGS_FILE, SUMMARY_FILE, FinetuneBatches,
                                              FinetuneRow, RowStats)
from slm_jax.finetune.settings import FinetuneSettings  # a config section, own module
from slm_jax.train import sharding
from slm_jax.train.loading import LoadedRun, run_identity
from slm_jax.train.loop import Cadence, Persist, Window, rate_text
from slm_jax.train.metrics_io import MetricsWriter
from slm_jax.train.state import Trainer, initial_state
from slm_jax.train.sweep import SweepItem, run_sweep
from slm_jax.train.workdir import CHECKPOINTS, CONFIG_FILE, check_workdir

SEEDS = (42, 2026, 6198, 13171, 31723)


class FinetuneMismatchError(cli.CliError):
  """The seed folder holds another fine-tune; nothing was written."""


def finetune_config(loaded: LoadedRun, settings: FinetuneSettings, total_steps: int, seed: int):
  """The source run's config with the fine-tuning optimizer, steps and seed (config.json)."""
  return loaded.cfg.replace(**{
      "optimizer.peak_lr": settings.lr, "optimizer.min_lr": settings.min_lr,
      "optimizer.warmup_steps": settings.warmup_steps, "optimizer.warmup_start_lr": 0.0,
      "optimizer.weight_decay": settings.weight_decay, "optimizer.b1": settings.b1,
      "optimizer.b2": settings.b2, "optimizer.eps": settings.eps, "optimizer.clip": settings.clip,
      "optimizer.grad_accum_steps": 1, "optimizer.trainable": "all",
      "train.steps": total_steps, "train.seed": seed, "train.global_batch": settings.batch_size,
      "train.checkpoint_every": settings.checkpoint_every, "train.log_every": settings.log_every,
      "train.eval_every": 0, "train.eval_syntax_every": 0})


def seed_record(loaded: LoadedRun, settings: FinetuneSettings, seed: int, stats: RowStats,
                total_steps: int) -> dict[str, Any]:
  """What makes seed `seed`'s fine-tune (saved as `finetune.json`, compared before any reuse)."""
  return {"settings": settings.to_dict(), "seed": seed, "source_step": loaded.step,
          "source_digest": run_identity(loaded)["digest"],  # another model at that path: refused
          "rows": stats.to_dict(), "steps": total_steps}


RESUMABLE_KEYS = frozenset(f"settings.{name}" for name in FinetuneSettings.RESUMABLE)


def check_seed_dir(directory: pathlib.Path, record: dict[str, Any]) -> None:
  """Refuses a seed folder holding another fine-tune (or something else); reads only."""
  path = directory / SETTINGS_FILE
  if not path.exists():
    if (directory / CONFIG_FILE).exists() or (directory / CHECKPOINTS).exists():
      raise FinetuneMismatchError(f"{directory} holds a run but no {SETTINGS_FILE}: it is not a "
                                  "fine-tuning seed folder; use another --out")
    return
  identity.check_record(path, record, what=f"{directory} holds another fine-tune",
                        where="in the seed folder", ignore=RESUMABLE_KEYS,
                        error=FinetuneMismatchError,
                        hint="use another --out, or the settings it was started with")


def _fresh_params(loaded: LoadedRun) -> tuple[Any, dict]:
  """(graphdef, a copy of the loaded parameters): the step donates its inputs, and every seed
  must start from the loaded weights."""
  graphdef, state = nnx.split(loaded.model, nnx.Param)
  return graphdef, jax.tree.map(jnp.array, nnx.to_pure_dict(state))


def _batches(loaded: LoadedRun, rows: Sequence[FinetuneRow], settings: FinetuneSettings,
             seed: int) -> FinetuneBatches:
  return FinetuneBatches(rows, settings.batch_size, seed, loaded.configuration,
                         loaded.tokenizer.pad_id, settings.max_len)


def _progress(schedule, settings: FinetuneSettings, last: dict):
  """The fine-tuning window: loss over the window's targets, grad norm, lr, steps/s,
  examples/s, tokens/s; `last["loss"]` keeps the latest window's loss (the summary's)."""

  def progress(window: Window, done: int) -> tuple[dict, list[str]]:
    got = jax.device_get([(out["loss_sum"], out["count"], out["grad_norm"])
                          for out in window.outs])
    loss = sum(float(l) for l, _, _ in got) / max(sum(float(c) for _, c, _ in got), 1.0)
    rate, lr = window.per_second(), float(schedule(done))
    last["loss"] = loss
    record = {"loss": loss, "lr": lr, "grad_norm": sum(float(g) for _, _, g in got) / len(got),
              "examples_per_s": rate * settings.batch_size,
              "tokens_per_s": window.per_second(lambda out: out["tokens"])}
    return record, [f"loss {loss:.4f}", rate_text(rate, "steps/s", 2), f"lr {lr:.2e}"]

  return progress


def finetune_seed(loaded: LoadedRun, rows: Sequence[FinetuneRow], stats: RowStats,
                  settings: FinetuneSettings, seed: int, out: str | pathlib.Path, *,
                  log: Callable[[str], None] = print, stop_after: int | None = None
                  ) -> dict[str, Any]:
  """Fine-tunes one seed in `out/seed<seed>` (layout in the module docstring) and returns its
  summary. `stop_after` ends the call after that many steps of this call (a checkpoint is
  written there), as a kill right after a checkpoint would."""
  directory = pathlib.Path(out) / f"seed{seed}"
  batches = _batches(loaded, rows, settings, seed)
  total = settings.epochs * batches.steps_per_epoch
  record = seed_record(loaded, settings, seed, stats, total)
  check_seed_dir(directory, record)
  cfg = finetune_config(loaded, settings, total, seed)
  check_workdir(cfg, directory)  # the workdir rule of training, on the config we write
  started = time.time()

  graphdef, params = _fresh_params(loaded)
  mesh = sharding.make_mesh(-1, 1)
  setup = initial_state(  # the seeds of one sweep share the compiled step (train.step_cache)
      graphdef, params, cfg.optimizer, total, batch_rows=settings.batch_size,
      micro_batches=settings.micro_batches, mesh=mesh, flag="--batch_size", place_params=True,
      cache_key=("finetune", graphdef, cfg.optimizer, total))
  schedule, layout = setup.schedule, setup.layout

  directory.mkdir(parents=True, exist_ok=True)
  label = f"{settings.task} seed {seed} "
  trainer = Trainer(setup.state, total, directory / CHECKPOINTS, max_to_keep=2,
                    persist=Persist(extra=lambda step: {"step": step, "task": settings.task,
                                                        "seed": seed}),
                    log=log, label=label)
  start = trainer.resume()
  identity.write_record(directory / SETTINGS_FILE, record)
  files.write_text(directory / CONFIG_FILE, cfg.to_json())
  loaded.tokenizer.save(directory)

  writer = MetricsWriter(directory, resume_step=start)
  step_fn = setup.step_fn(
      place=lambda batch: sharding.place_batch(batch.as_dict(), mesh, host_local=False),
      extra=lambda batch, sums: {"tokens": int((batch.meta.segment != 0).sum())})

  def batch_at(step):
    return batches.batch(step).pad_rows(layout.padded_rows)

  last = {"loss": float("nan")}
  try:
    result = trainer.run(step_fn, batch_at,
                         cadence=Cadence(log_every=settings.log_every,
                                         checkpoint_every=settings.checkpoint_every,
                                         stop_after=stop_after),
                         progress=_progress(schedule, settings, last), writer=writer,
                         hint="lower --lr")
  finally:
    trainer.close()
    writer.close()
  summary = {"task": settings.task, "seed": seed, "steps": result.step, "total_steps": total,
             "final_loss": last["loss"], "resumed_from": start, "source": settings.source,
             "source_step": loaded.step, "seconds": time.time() - started,
             "workdir": str(directory)}
  if result.step >= total:
    files.write_text(directory / SUMMARY_FILE, json.dumps(summary, indent=1, allow_nan=False))
  return summary


def make_encoder(loaded: LoadedRun, tree_source: str) -> TextEncoder:
  """The `downstream.encoding` encoder of the run's tokenizer and configuration (parsed trees
  for tree models, SPEC §11)."""
  return TextEncoder(loaded.tokenizer, loaded.configuration, make_tree_source(tree_source))


def finetune_seeds(loaded: LoadedRun, rows: Sequence[FinetuneRow], stats: RowStats,
                   settings: FinetuneSettings, seeds: Sequence[int], out: str | pathlib.Path,
                   log: Callable[[str], None] = print) -> list[dict[str, Any]]:
  """Every seed in turn (`train.sweep`): every seed folder's record is checked first; a seed
  whose `summary.json` exists is reused (its summary is read) only when its `finetune.json`
  matches this command's."""
  items = []
  for seed in seeds:
    total = settings.epochs * _batches(loaded, rows, settings, seed).steps_per_epoch
    items.append(SweepItem(f"seed {seed}", pathlib.Path(out) / f"seed{seed}",
                           seed_record(loaded, settings, seed, stats, total), seed))
  result = run_sweep(
      items, lambda item: finetune_seed(loaded, rows, stats, settings, item.key, out, log=log),
      record=SETTINGS_FILE, marker=SUMMARY_FILE, check=lambda item: check_seed_dir(
          item.folder, item.identity),
      describe=lambda summary: f"loss {summary['final_loss']:.4f}", log=log)
  return result.results
