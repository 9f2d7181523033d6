"""The training run: data, model, optimizer, loop, metrics, checkpoints, resume, summary.

`train(cfg, workdir)` is what `python -m slm_jax.main` calls; its steps run in the one training loop
(`slm_jax.train.loop.Loop`). A run in an existing workdir resumes
from its newest readable checkpoint (parameters, optimizer state, step, data position), so a run
killed at any point and restarted produces the same loss curve as one that never stopped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pathlib
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

from slm_jax import files
from slm_jax.train import run_config as config_builder
from slm_jax.data.config import DROP_WARNING
from slm_jax.data.loader import BatchIterator, PackedDataset
from slm_jax.data.sources import load_corpus, load_or_build_tokenizer
from slm_jax.hf.tokenizer_fit import check_tokenizer_fits
from slm_jax.model.decoder import non_embedding_param_count, param_count
from slm_jax.model.loss import LossMetrics
from slm_jax.train import mfu, sharding
from slm_jax.train.checkpointing import data_extra, host_data
from slm_jax.train.loop import (Cadence, Hook, Loop, NonFiniteLossError,  # noqa: F401  (re-exported)
                                Persist, Window, every, rate_text)
from slm_jax.train.metrics_io import MetricsWriter
from slm_jax.train.params import backbone_check, build_params, fingerprints
from slm_jax.train.state import Trainer, initial_state
from slm_jax.train.steps import make_eval_step
from slm_jax.train.workdir import CHECKPOINTS, CONFIG_FILE, NothingToDo, check_workdir

_LOG = logging.getLogger(__name__)


def window_counts(metrics: LossMetrics, group: str) -> float:
  """How many target tokens of a kind group the merged metrics saw."""
  return float(getattr(metrics, f"{group}_loss").denominator)


@dataclasses.dataclass
class RunSummary:
  """What a run did; the eval fields are None when it has no held-out documents."""

  steps: int
  tokens_trained: int
  final_train_loss: float
  eval_terminal_ppl: float | None  # exp(NLL of terminal + EOS targets / their count), gold tree
  eval_loss: float | None
  eval_joint_ppl: float | None  # exp(NLL of all targets / terminal + EOS count): bounds p(words)
  seconds: float
  resumed_from: int
  workdir: str
  backbone_unchanged: bool | None = None  # frozen arrays bitwise as loaded (None: none frozen)

  def to_json(self) -> str:
    """Strict JSON (never a bare NaN)."""
    return json.dumps(dataclasses.asdict(self), indent=2, allow_nan=False)


def save_config(run: config_builder.RunConfig, workdir: pathlib.Path) -> None:
  """The run's full config, so evaluation can rebuild the model from the workdir alone."""
  files.write_text(workdir / CONFIG_FILE, run.to_json())


def _device_batch(batch, mesh=None, host_local: bool = False,
                  padded_rows: int | None = None) -> dict[str, jax.Array]:
  """A host batch as device arrays, rows split over the mesh. Rows without targets pad it to
  `padded_rows` (a training `BatchLayout`; this host's share if host_local), else (evaluation)
  to a multiple of the devices."""
  if mesh is None:
    return jax.tree.map(jnp.asarray, batch.as_dict())
  if padded_rows is not None:
    batch = batch.pad_rows(padded_rows // jax.process_count() if host_local else padded_rows)
  elif not host_local:
    batch = batch.pad_rows(sharding.batch_divisor(mesh))
  return sharding.place_batch(batch.as_dict(), mesh, host_local)


def evaluate(eval_step, params, dataset: PackedDataset, batch_size: int,
             max_batches: int = 0, mesh=None) -> dict[str, float]:
  """Held-out loss and terminal perplexity (normalized by terminal + EOS tokens, SPEC §4)."""
  metrics = LossMetrics.empty()
  for i, batch in enumerate(dataset.batches(batch_size)):
    if max_batches and i >= max_batches:
      break
    metrics = metrics.merge(LossMetrics.single_from_model_output(
        **eval_step(params, _device_batch(batch, mesh))))
  result = {k: float(v) for k, v in metrics.compute().items()}
  return {"eval_loss": result["loss"], "eval_terminal_ppl": result["terminal_ppl"],
          "eval_joint_ppl": result["joint_ppl"], "eval_terminal_loss": result["terminal_loss"],
          "eval_target_tokens": result["target_tokens"]}


class DataDropError(ValueError):
  """More of the training tokens were dropped than `data.max_drop_fraction` allows."""


def check_dropped(tokens: int, dropped: int, limit: float, what: str) -> None:
  """Warns loudly when a run drops most of its tokens (sentences longer than a row), and stops
  it above `data.max_drop_fraction` (SPEC §8: drops are counted, never silent)."""
  fraction = dropped / max(tokens, 1)
  message = (f"{what}: {dropped:,} of {tokens:,} tokens ({fraction:.1%}) dropped in sentences "
             "longer than a row (data.seq_len)")
  if fraction > limit:
    raise DataDropError(f"{message}; above data.max_drop_fraction={limit}: raise data.seq_len "
                        "or the limit")
  if fraction > DROP_WARNING:
    print(f"WARNING: {message}. Most of the corpus is not trained on; raise data.seq_len "
          "(data.max_drop_fraction makes this an error)", flush=True)


class _TrainStream:
  """The training batches with one state interface for both loaders (saved in checkpoints)."""

  def __init__(self, iterator, state, restore, describe: str, host_local: bool):
    self.iterator, self.state, self.restore, self.describe = iterator, state, restore, describe
    self.host_local = host_local  # batches hold this host's rows only (else the global batch)

  def __next__(self):
    return next(self.iterator)


def _train_stream(cfg: Any, corpus, tokenizer, configuration) -> _TrainStream:
  if corpus.train is None:  # streamed: the Grain pipeline
    from slm_jax.data.grain_pipeline import make_train_iterator  # pylint: disable=g-import-not-at-top
    iterator, describe = make_train_iterator(cfg, tokenizer, configuration)
    return _TrainStream(iterator, iterator.get_state, iterator.set_state, describe, True)
  data = PackedDataset(corpus.train, tokenizer, configuration, cfg.data.seq_len,
                       seed=cfg.data.linearization_seed)
  check_dropped(data.stats.tokens, data.stats.tokens_dropped, cfg.data.max_drop_fraction,
                "training data")
  iterator = BatchIterator(data, cfg.train.global_batch, seed=cfg.train.seed)
  return _TrainStream(iterator, iterator.state, iterator.restore, data.stats.summary(), False)


LiveMetrics = Callable[[Any, Any, Any, Any], Callable[[Any], dict]]


def slm_progress(schedule, tokens_per_step: int, flops_per_token: float, chips: int,
                 device_kind: str) -> Callable[[Window, int], tuple[dict, list[str]]]:
  """The pre-training window: token-weighted losses (overall and per kind group, clu
  `LossMetrics` merged step by step), mean grad norm, lr, tokens/s and MFU."""

  def progress(window: Window, done: int) -> tuple[dict, list[str]]:
    metrics, grad_norm_sum = LossMetrics.empty(), 0.0
    for out in window.outs:
      metrics = metrics.merge(LossMetrics.single_from_model_output(
          **{k: v for k, v in out.items() if k != "grad_norm"}))
      grad_norm_sum += float(out["grad_norm"])
    computed = {k: float(v) for k, v in metrics.compute().items()}
    record = {"loss": computed["loss"], "lr": float(schedule(done)),
              "grad_norm": grad_norm_sum / len(window.outs),
              "tokens_per_s": window.per_second() * tokens_per_step}
    record.update(mfu.throughput(record["tokens_per_s"], chips, flops_per_token, device_kind))
    for group in ("terminal", "structural", "pause"):
      if window_counts(metrics, group):
        record[f"loss_{group}"] = computed[f"{group}_loss"]
    rate = rate_text(record["tokens_per_s"], "tok/s")
    if "mfu" in record and math.isfinite(record["mfu"]):
      rate += f" (MFU {100 * record['mfu']:.1f}%)"
    return record, [f"loss {record['loss']:.4f}", rate, f"lr {record['lr']:.2e}"]

  return progress


def train(cfg: Any, workdir: str | pathlib.Path,
          live_metrics: LiveMetrics | None = None) -> RunSummary:
  """Trains the run of `cfg` (a `RunConfig`, or a ConfigDict validated here) in `workdir`.

  `live_metrics(train_section, graphdef, tokenizer, configuration)` builds the callable that
  `train.eval_syntax_every` calls with the parameters (`slm_jax.eval.live.LiveSyntax`; the
  entry point passes it in, so training never imports the evaluation layer)."""
  started = time.time()
  cfg = config_builder.validate(cfg)
  workdir = pathlib.Path(workdir)
  check_workdir(cfg, workdir)  # another run's workdir is refused before any write
  if cfg.model.init_from and cfg.data.tokenizer == "hf":  # another model's tokenizer: refused
    check_tokenizer_fits(cfg.model.init_from, cfg.data.tokenizer_path,
                         what=f"data.tokenizer_path={cfg.data.tokenizer_path} with "
                         f"model.init_from={cfg.model.init_from}")
  workdir.mkdir(parents=True, exist_ok=True)
  lead = jax.process_index() == 0  # the one host that writes run files (all hosts checkpoint)
  configuration = cfg.resolved
  corpus = load_corpus(cfg.data)
  tokenizer = load_or_build_tokenizer(cfg.data, corpus, workdir, save=lead)
  batches = _train_stream(cfg, corpus, tokenizer, configuration)
  eval_data = (PackedDataset(corpus.evaluation, tokenizer, configuration, cfg.data.seq_len,
                             seed=cfg.data.linearization_seed) if corpus.evaluation else None)
  print(f"data: {corpus.description}\n  train: {batches.describe}\n  eval: "
        f"{eval_data.stats.summary() if eval_data else 'none (no held-out documents)'}",
        flush=True)

  mesh = sharding.make_mesh(cfg.mesh.data, cfg.mesh.fsdp)
  sharding.check_batch(cfg.train.global_batch, cfg.optimizer.grad_accum_steps, mesh)  # first
  mconfig = cfg.model.replace(vocab_size=tokenizer.vocab_size)
  graphdef, params = build_params(mconfig, mesh, cfg.train.seed)
  trainable = cfg.optimizer.trainable
  loaded = fingerprints(params, trainable)
  total_steps = cfg.train.steps
  setup = initial_state(graphdef, params, cfg.optimizer, total_steps,
                        batch_rows=cfg.train.global_batch,
                        micro_batches=cfg.optimizer.grad_accum_steps, mesh=mesh,
                        trainable=trainable)
  layout, schedule = setup.layout, setup.schedule
  if layout.padded_rows != layout.rows:
    print(f"batch: {layout.rows} rows do not split into {cfg.optimizer.grad_accum_steps} "
          f"micro-batches over {sharding.batch_divisor(mesh)} devices; running "
          f"{layout.accumulation} micro-batches of {layout.micro_rows} rows, "
          f"{layout.padded_rows - layout.rows} of them padding without targets", flush=True)
  print(sharding.describe(mesh), flush=True)
  print(f"model: {configuration.name} ({configuration.linearization} + "
        f"{configuration.attention.name}), {param_count(mconfig):,} parameters "
        f"({non_embedding_param_count(mconfig):,} non-embedding), vocab {tokenizer.vocab_size}",
        flush=True)

  def restore(state, restored):
    batches.restore(host_data(restored.extra))
    return restored.state

  trainer = Trainer(setup.state, total_steps, workdir / CHECKPOINTS,
                    max_to_keep=cfg.checkpoint.max_to_keep,
                    persist=Persist(extra=lambda step: {**data_extra(batches.state()),
                                                        "step": step}, restore=restore),
                    log=lambda line: print(line, flush=True))
  checkpointer = trainer.checkpointer
  start_step = trainer.resume() if cfg.checkpoint.resume else 0
  if start_step >= total_steps:
    checkpointer.close()
    raise NothingToDo(start_step, total_steps, workdir)
  if lead:  # the workdir's record of the run (after the checks: an intact run stays intact)
    save_config(cfg, workdir)

  writer = MetricsWriter(workdir, resume_step=start_step, enabled=lead)
  live = None  # live SG / BLiMP metrics, built by the caller's factory (before any step)
  if 0 < cfg.train.eval_syntax_every <= total_steps:
    if live_metrics is None:
      raise config_builder.ConfigError(
          "train.eval_syntax_every is set but no live-metrics factory was given: run through "
          "`python -m slm_jax.main` or pass live_metrics=slm_jax.eval.live.LiveSyntax")
    live = live_metrics(cfg.train, graphdef, tokenizer, configuration)
  eval_step = make_eval_step(graphdef)
  tokens_per_step = cfg.train.global_batch * cfg.data.seq_len
  step_fn = setup.step_fn()

  def held_out(done, state):
    result = evaluate(eval_step, state["params"], eval_data, cfg.eval.batch_size,
                      cfg.eval.max_batches, mesh)
    writer.write({"step": done, **result})
    print(f"eval @ {done}: loss {result['eval_loss']:.4f}, terminal ppl "
          f"{result['eval_terminal_ppl']:.3f}", flush=True)

  hooks = []
  if eval_data:
    hooks.append(Hook(every(cfg.train.eval_every, but=total_steps), held_out))
  if live:
    hooks.append(Hook(every(cfg.train.eval_syntax_every),
                      lambda done, state: writer.write({"step": done, **live(state["params"])})))
  progress = slm_progress(schedule, tokens_per_step,
                          mfu.model_flops_per_token(mconfig, cfg.data.seq_len),
                          mesh.devices.size, mesh.devices.flat[0].device_kind)
  result = trainer.run(
      step_fn, lambda step: _device_batch(next(batches), mesh, batches.host_local,
                                          layout.padded_rows),
      cadence=Cadence(log_every=cfg.train.log_every, checkpoint_every=cfg.train.checkpoint_every),
      progress=progress, writer=writer, hooks=hooks,
      hint="lower optimizer.peak_lr or check the data")
  params = result.state["params"]

  final = (evaluate(eval_step, params, eval_data, cfg.eval.batch_size, cfg.eval.max_batches, mesh)
           if eval_data else {})
  if final:
    writer.write({"step": total_steps, **final})
  writer.close()
  checkpointer.close()
  unchanged, backbone = backbone_check(loaded, params, trainable)
  print(backbone, flush=True)
  summary = RunSummary(total_steps, (total_steps - start_step) * tokens_per_step,
                       result.last_loss, final.get("eval_terminal_ppl"), final.get("eval_loss"),
                       final.get("eval_joint_ppl"), time.time() - started, start_step,
                       str(workdir), unchanged)
  if lead:
    files.write_text(workdir / "summary.json", summary.to_json())
  return summary
