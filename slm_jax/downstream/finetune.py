"""XSum / BoolQ full fine-tuning of a trained run, one resumable run per seed (SPEC §11).

`finetune_seed(loaded, rows, settings, seed, out)` trains every parameter of `loaded` (a
`load_run` result) on the rows of `slm_jax.downstream.finetune_data` with a fresh optimizer:

- **Optimizer**: the run's `optimizer` section with the fine-tuning values (`finetune_config`):
  AdamW β (0.9, 0.95), ε 1e-8, weight decay 0.1 (weight matrices only, the pre-training
  convention of `train.optimizer.decays`), clip 1.0, linear warmup from 0 over `warmup_steps`
  then cosine to 1e-6 at the last step — exactly `train.optimizer.make_optimizer`, whose
  `warmup_cosine` expresses this schedule. Steps = epochs × ⌈rows / batch⌉.
- **Step**: `train.steps.make_train_step` (the loss is summed over the batch's targets, which
  `FinetuneBatches` restricts to the summary + EOS / answer tokens, and divided by their count).
- **Layout** of `OUT/seed<S>/`, a workdir `train.loading.load_run` reads like any run:
    config.json          the source run's config with the fine-tuning optimizer, train.steps
                         and train.seed (so `load_run` rebuilds this optimizer's state shape)
    tokenizer_spec.json  the source run's tokenizer
    checkpoints/<step>/  Orbax {params, opt_state} (+ extra: step, task) every
                         `checkpoint_every` steps and at the end
    metrics.jsonl        step, loss, lr, grad_norm, examples_per_s, tokens_per_s (+ TensorBoard)
    finetune.json        the settings, the source run and step, the row counts
    summary.json         written last: its presence marks the seed finished (it is skipped)
- **Resume**: a killed seed restarts from its newest readable checkpoint; the batches of step k
  are a function of (seed, k), so the result equals an uninterrupted run. A seed folder that
  holds another fine-tune (different settings, source run or data) is refused
  (`FinetuneMismatchError`, nothing written); `log_every` / `checkpoint_every` may change.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax import cli
from slm_jax.downstream.encoding import TextEncoder, make_tree_source
from slm_jax.downstream.finetune_data import FinetuneBatches, FinetuneRow, RowStats
from slm_jax.downstream.finetune_settings import FinetuneSettings  # a config section, own module
from slm_jax.train import sharding
from slm_jax.train.checkpointing import Checkpointer
from slm_jax.train.loading import LoadedRun
from slm_jax.train.metrics_io import MetricsWriter
from slm_jax.train.optimizer import make_optimizer, make_schedule
from slm_jax.train.steps import make_train_step
from slm_jax.train.workdir import CHECKPOINTS, CONFIG_FILE, check_workdir

SEEDS = (42, 2026, 6198, 13171, 31723)
SETTINGS_FILE = "finetune.json"
_STEP_CACHE: dict = {}  # (graphdef, optimizer section, steps, accumulation, mesh) -> jitted step
SUMMARY_FILE = "summary.json"


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


def _record(loaded: LoadedRun, settings: FinetuneSettings, seed: int, stats: RowStats,
            total_steps: int) -> dict[str, Any]:
  return {"settings": settings.to_dict(), "seed": seed, "source_step": loaded.step,
          "rows": stats.to_dict(), "steps": total_steps}


def check_seed_dir(directory: pathlib.Path, record: dict[str, Any]) -> None:
  """Refuses a seed folder holding another fine-tune (or something else); reads only."""
  path = directory / SETTINGS_FILE
  if not path.exists():
    if (directory / CONFIG_FILE).exists() or (directory / CHECKPOINTS).exists():
      raise FinetuneMismatchError(f"{directory} holds a run but no {SETTINGS_FILE}: it is not a "
                                  "fine-tuning seed folder; use another --out")
    return
  saved = json.loads(path.read_text())
  skip = set(FinetuneSettings.RESUMABLE)
  flat = lambda r: {**{f"settings.{k}": v for k, v in r["settings"].items() if k not in skip},
                    **{k: v for k, v in r.items() if k != "settings"}}
  before, now = flat(saved), flat(record)
  diff = [f"{k}: {before.get(k)!r} saved, {now.get(k)!r} now"
          for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]
  if diff:
    raise FinetuneMismatchError(f"{directory} holds another fine-tune ({'; '.join(diff)}); use "
                                "another --out, or the settings it was started with")


def _fresh_params(loaded: LoadedRun) -> tuple[Any, dict]:
  """(graphdef, a copy of the loaded parameters): the step donates its inputs, and every seed
  must start from the loaded weights."""
  graphdef, state = nnx.split(loaded.model, nnx.Param)
  return graphdef, jax.tree.map(jnp.array, nnx.to_pure_dict(state))


def finetune_seed(loaded: LoadedRun, rows: Sequence[FinetuneRow], stats: RowStats,
                  settings: FinetuneSettings, seed: int, out: str | pathlib.Path, *,
                  log: Callable[[str], None] = print, stop_after: int | None = None
                  ) -> dict[str, Any]:
  """Fine-tunes one seed in `out/seed<seed>` (layout in the module docstring) and returns its
  summary. `stop_after` ends the call after that many steps of this call (a checkpoint is
  written there), as a kill right after a checkpoint would."""
  directory = pathlib.Path(out) / f"seed{seed}"
  batches = FinetuneBatches(rows, settings.batch_size, seed, loaded.configuration,
                            loaded.tokenizer.pad_id, settings.max_len)
  total = settings.epochs * batches.steps_per_epoch
  record = _record(loaded, settings, seed, stats, total)
  check_seed_dir(directory, record)
  cfg = finetune_config(loaded, settings, total, seed)
  check_workdir(cfg, directory)  # the workdir rule of training, on the config we write
  started = time.time()

  mesh = sharding.make_mesh(-1, 1)
  layout = sharding.check_batch(settings.batch_size, settings.micro_batches, mesh, "--batch_size")
  tx = make_optimizer(cfg.optimizer, total, accumulate=False)
  schedule = make_schedule(cfg.optimizer, total)
  graphdef, params = _fresh_params(loaded)
  param_sh = sharding.tree_shardings(params, mesh)
  opt_sh = sharding.tree_shardings(jax.eval_shape(tx.init, params), mesh)
  params = jax.device_put(params, param_sh)
  opt_state = jax.jit(tx.init, out_shardings=opt_sh)(params)

  directory.mkdir(parents=True, exist_ok=True)
  checkpointer = Checkpointer(directory / CHECKPOINTS, max_to_keep=2)
  start = 0
  restored = checkpointer.restore_latest({"params": params, "opt_state": opt_state})
  if restored is not None:
    params, opt_state, start = (restored.state["params"], restored.state["opt_state"],
                                restored.step)
    for step, reason in restored.skipped:
      log(f"warning: checkpoint step {step} unreadable ({reason}); resumed from {start}")
    log(f"seed {seed}: resumed at step {start}/{total} from {checkpointer.directory}")
  (directory / SETTINGS_FILE).write_text(json.dumps(record, indent=1))
  (directory / CONFIG_FILE).write_text(cfg.to_json())
  loaded.tokenizer.save(directory)

  writer = MetricsWriter(directory, resume_step=start)
  step_shardings = (param_sh, opt_sh, sharding.batch_sharding(mesh, leading=1),
                    sharding.replicated(mesh))
  key = (graphdef, cfg.optimizer, total, layout.accumulation, mesh)
  if key not in _STEP_CACHE:  # seeds of one sweep share the compiled step
    _STEP_CACHE.clear()
    _STEP_CACHE[key] = make_train_step(graphdef, tx, layout.accumulation, step_shardings)
  train_step = _STEP_CACHE[key]
  save = lambda step: checkpointer.save(step, {"params": params, "opt_state": opt_state},
                                        {"step": step, "task": settings.task, "seed": seed})
  window, began, last_loss = [], time.time(), float("nan")
  window_began, done = began, start
  try:
    for step in range(start, total):
      batch = batches.batch(step).pad_rows(layout.padded_rows)
      params, opt_state, sums = train_step(
          params, opt_state, sharding.place_batch(batch.as_dict(), mesh, host_local=False))
      window.append((sums["loss_sum"], sums["count"], sums["grad_norm"],
                     int((batch.meta.segment != 0).sum())))
      done = step + 1
      stopping = stop_after is not None and done - start >= stop_after
      if done % settings.log_every == 0 or done == total or stopping:
        got = jax.device_get(window)
        loss = sum(float(l) for l, _, _, _ in got) / max(sum(float(c) for _, c, _, _ in got), 1.0)
        if not math.isfinite(loss):
          last = checkpointer.steps()[-1:] or "none"
          raise cli.CliError(f"seed {seed}: non-finite loss ({loss}) at step {done}; stopping "
                             f"without saving (last checkpoint {last}); lower --lr",
                             cli.EXIT_NONFINITE)
        now = time.time()
        rate = len(got) / max(now - window_began, 1e-9)
        overall = (done - start) / max(now - began, 1e-9)
        writer.write({"step": done, "loss": loss, "lr": float(schedule(done)),
                      "grad_norm": sum(float(g) for _, _, g, _ in got) / len(got),
                      "examples_per_s": rate * settings.batch_size,
                      "tokens_per_s": sum(n for *_, n in got) / max(now - window_began, 1e-9)})
        log(f"{settings.task} seed {seed} step {done}/{total} | loss {loss:.4f} | "
            f"{rate:.2f} steps/s | lr {float(schedule(done)):.2e} | "
            f"ETA {(total - done) / max(overall, 1e-9):.0f}s")
        last_loss, window, window_began = loss, [], now
      if done % settings.checkpoint_every == 0 or done == total or stopping:
        save(done)
      if stopping:
        break
  finally:
    checkpointer.wait()
    checkpointer.close()
    writer.close()
  summary = {"task": settings.task, "seed": seed, "steps": done, "total_steps": total,
             "final_loss": last_loss, "resumed_from": start, "source": settings.source,
             "source_step": loaded.step, "seconds": time.time() - started,
             "workdir": str(directory)}
  if done >= total:
    (directory / SUMMARY_FILE).write_text(json.dumps(summary, indent=1, allow_nan=False))
  return summary


def make_encoder(loaded: LoadedRun, tree_source: str) -> TextEncoder:
  """The `downstream.encoding` encoder of the run's tokenizer and configuration (parsed trees
  for tree models, SPEC §11)."""
  return TextEncoder(loaded.tokenizer, loaded.configuration, make_tree_source(tree_source))


def finetune_seeds(loaded: LoadedRun, rows: Sequence[FinetuneRow], stats: RowStats,
                   settings: FinetuneSettings, seeds: Sequence[int], out: str | pathlib.Path,
                   log: Callable[[str], None] = print) -> list[dict[str, Any]]:
  """Every seed in turn; a seed whose `summary.json` exists is skipped (its summary is read)."""
  summaries = []
  for index, seed in enumerate(seeds):
    finished = pathlib.Path(out) / f"seed{seed}" / SUMMARY_FILE
    if finished.exists():
      log(f"[{index + 1}/{len(seeds)}] seed {seed}: {finished} exists, skipped")
      summaries.append(json.loads(finished.read_text()))
      continue
    summaries.append(finetune_seed(loaded, rows, stats, settings, seed, out, log=log))
    log(f"[{index + 1}/{len(seeds)}] seed {seed} done: loss {summaries[-1]['final_loss']:.4f}")
  return summaries
