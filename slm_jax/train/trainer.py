"""The training run: data, model, optimizer, loop, metrics, checkpoints, resume, summary.

`train(cfg, workdir)` is what `python -m slm_jax.main` calls. A run in an existing workdir resumes
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
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax.configurations import resolve
from slm_jax.data.loader import BatchIterator, PackedDataset
from slm_jax.data.sources import load_corpus, load_or_build_tokenizer
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder, non_embedding_param_count, param_count
from slm_jax.model.loss import LossMetrics
from slm_jax.train import sharding
from slm_jax.train.checkpointing import Checkpointer
from slm_jax.train.metrics_io import MetricsWriter
from slm_jax.train.optimizer import make_optimizer, make_schedule
from slm_jax.train.steps import make_eval_step, make_train_step  # noqa: F401  (re-exported)

_LOG = logging.getLogger(__name__)


def window_counts(metrics: LossMetrics, group: str) -> float:
  """How many target tokens of a kind group the merged metrics saw."""
  return float(getattr(metrics, f"{group}_loss").denominator)


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or Inf; the run stops instead of writing a broken checkpoint."""


@dataclasses.dataclass
class RunSummary:
  steps: int
  tokens_trained: int
  final_train_loss: float
  eval_terminal_ppl: float  # exp(NLL of terminal + EOS targets / their count), gold structure given
  eval_loss: float
  eval_joint_ppl: float  # exp(NLL of all targets / terminal + EOS count): bounds p(words) for trees
  seconds: float
  resumed_from: int
  workdir: str


def model_config(cfg: Any, vocab_size: int) -> ModelConfig:
  m = cfg.model
  return ModelConfig(vocab_size=vocab_size, d_model=m.d_model, n_layers=m.n_layers,
                     n_heads=m.n_heads, n_kv_heads=m.n_kv_heads or None, mlp_ratio=m.mlp_ratio,
                     rope_theta=m.rope_theta, norm_eps=m.norm_eps,
                     tie_embeddings=m.tie_embeddings, qkv_bias=m.qkv_bias, mlp_bias=m.mlp_bias,
                     include_bias=m.include_bias, init_std=m.init_std, param_dtype=m.param_dtype,
                     compute_dtype=m.compute_dtype, attention=cfg.configuration.attention,
                     attention_impl=m.attention_impl)


CONFIG_FILE = "config.json"


def save_config(cfg: Any, workdir: pathlib.Path) -> None:
  """The run's full config, so evaluation can rebuild the model from the workdir alone."""
  (workdir / CONFIG_FILE).write_text(cfg.to_json_best_effort(indent=2))


def _device_batch(batch, mesh=None, host_local: bool = False,
                  padded_rows: int | None = None) -> dict[str, jax.Array]:
  """A host batch as device arrays, rows split over the mesh. Rows without targets pad it to
  `padded_rows` (a training `BatchLayout`; this host's share if host_local), else (evaluation)
  to a multiple of the devices."""
  if mesh is None:
    return {k: jnp.asarray(v) for k, v in batch.as_dict().items()}
  if padded_rows is not None:
    batch = batch.pad_rows(padded_rows // jax.process_count() if host_local else padded_rows)
  elif not host_local:
    batch = batch.pad_rows(sharding.batch_divisor(mesh))
  return sharding.global_batch(batch.as_dict(), mesh, host_local)


def _fmt_seconds(seconds: float) -> str:
  seconds = int(max(0, seconds))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
      f"{seconds // 60}m{seconds % 60:02d}s"


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
  iterator = BatchIterator(data, cfg.train.global_batch, seed=cfg.train.seed)
  return _TrainStream(iterator, iterator.state, iterator.restore, data.stats.summary(), False)


def train(cfg: Any, workdir: str | pathlib.Path) -> RunSummary:
  started = time.time()
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  lead = jax.process_index() == 0  # the one host that writes run files (all hosts checkpoint)
  if lead:
    save_config(cfg, workdir)
  configuration = resolve(linearization=cfg.configuration.linearization,
                          attention=cfg.configuration.attention)
  corpus = load_corpus(cfg.data)
  tokenizer = load_or_build_tokenizer(cfg.data, corpus, workdir, save=lead)
  batches = _train_stream(cfg, corpus, tokenizer, configuration)
  eval_data = (PackedDataset(corpus.evaluation, tokenizer, configuration, cfg.data.seq_len,
                             seed=cfg.data.linearization_seed) if corpus.evaluation else None)
  print(f"data: {corpus.description}\n  train: {batches.describe}\n  eval: "
        f"{eval_data.stats.summary() if eval_data else 'none (no held-out documents)'}",
        flush=True)

  mesh = sharding.make_mesh(cfg.mesh.data, cfg.mesh.fsdp)
  layout = sharding.check_batch(cfg.train.global_batch, cfg.optimizer.grad_accum_steps, mesh)
  if layout.padded_rows != layout.rows:
    print(f"batch: {layout.rows} rows do not split into {cfg.optimizer.grad_accum_steps} "
          f"micro-batches over {sharding.batch_divisor(mesh)} devices; running "
          f"{layout.accumulation} micro-batches of {layout.micro_rows} rows, "
          f"{layout.padded_rows - layout.rows} of them padding without targets", flush=True)
  mconfig = model_config(cfg, tokenizer.vocab_size)
  model = Decoder(mconfig, rngs=nnx.Rngs(cfg.train.seed))
  graphdef, params = nnx.split(model, nnx.Param)
  params = nnx.to_pure_dict(params)
  total_steps = cfg.train.steps
  tx = make_optimizer(cfg.optimizer, total_steps, accumulate=False)
  schedule = make_schedule(cfg.optimizer, total_steps)
  param_sh = sharding.tree_shardings(params, mesh)
  opt_sh = sharding.tree_shardings(jax.eval_shape(tx.init, params), mesh)
  params = jax.device_put(params, param_sh)
  opt_state = jax.jit(tx.init, out_shardings=opt_sh)(params)
  print(sharding.describe(mesh), flush=True)
  print(f"model: {configuration.name} ({configuration.linearization} + "
        f"{configuration.attention.name}), {param_count(mconfig):,} parameters "
        f"({non_embedding_param_count(mconfig):,} non-embedding), vocab {tokenizer.vocab_size}",
        flush=True)

  checkpointer = Checkpointer(workdir / "checkpoints", max_to_keep=cfg.checkpoint.max_to_keep)
  start_step = 0
  if cfg.checkpoint.resume:
    restored = checkpointer.restore_latest({"params": params, "opt_state": opt_state})
    if restored is not None:
      params, opt_state = restored.state["params"], restored.state["opt_state"]
      batches.restore(restored.extra["data"])
      start_step = restored.step
      for step, reason in restored.skipped:
        print(f"warning: checkpoint step {step} unreadable ({reason}); resumed from "
              f"{restored.step}", flush=True)
      print(f"resumed from step {start_step} ({checkpointer.directory})", flush=True)

  writer = MetricsWriter(workdir, resume_step=start_step, enabled=lead)
  train_step = make_train_step(graphdef, tx, layout.accumulation,
                               (param_sh, opt_sh, sharding.batch_sharding(mesh, leading=1),
                                sharding.replicated(mesh)))
  eval_step = make_eval_step(graphdef)
  tokens_per_step = cfg.train.global_batch * cfg.data.seq_len
  window = LossMetrics.empty()  # clu metrics over the steps since the last log line
  window_start, window_steps, grad_norm_sum = time.time(), 0, 0.0
  last_loss = float("nan")

  def save(step: int) -> None:
    checkpointer.save(step, {"params": params, "opt_state": opt_state},
                      {"data": batches.state(), "step": step})

  try:
    for step in range(start_step, total_steps):
      batch = _device_batch(next(batches), mesh, batches.host_local, layout.padded_rows)
      params, opt_state, sums = train_step(params, opt_state, batch)
      loss = float(sums["loss_sum"]) / max(float(sums["count"]), 1.0)
      if not math.isfinite(loss):
        raise NonFiniteLossError(
            f"non-finite loss ({loss}) at step {step + 1}; stopping without saving. Last "
            f"checkpoint: {checkpointer.steps()[-1:] or 'none'}. Lower optimizer.peak_lr or "
            "check the data.")
      last_loss = loss
      grad_norm = sums.pop("grad_norm")
      window = window.merge(LossMetrics.single_from_model_output(**sums))
      grad_norm_sum += float(grad_norm)
      window_steps += 1
      done = step + 1
      if done % cfg.train.log_every == 0 or done == total_steps:
        elapsed = time.time() - window_start
        computed = {k: float(v) for k, v in window.compute().items()}
        record = {"step": done, "loss": computed["loss"], "lr": float(schedule(done)),
                  "grad_norm": grad_norm_sum / window_steps,
                  "tokens_per_s": window_steps * tokens_per_step / max(elapsed, 1e-9)}
        for group in ("terminal", "structural", "pause"):
          if window_counts(window, group):
            record[f"loss_{group}"] = computed[f"{group}_loss"]
        writer.write(record)
        eta = (total_steps - done) * elapsed / window_steps
        print(f"step {done}/{total_steps} | loss {record['loss']:.4f} | "
              f"{record['tokens_per_s']:,.0f} tok/s | lr {record['lr']:.2e} | "
              f"ETA {_fmt_seconds(eta)}", flush=True)
        window, window_start, window_steps = LossMetrics.empty(), time.time(), 0
        grad_norm_sum = 0.0
      if (eval_data and cfg.train.eval_every and done % cfg.train.eval_every == 0
          and done != total_steps):
        result = evaluate(eval_step, params, eval_data, cfg.eval.batch_size, cfg.eval.max_batches,
                          mesh)
        writer.write({"step": done, **result})
        print(f"eval @ {done}: loss {result['eval_loss']:.4f}, terminal ppl "
              f"{result['eval_terminal_ppl']:.3f}", flush=True)
      if (cfg.train.checkpoint_every and done % cfg.train.checkpoint_every == 0) or \
          done == total_steps:
        save(done)
  finally:
    checkpointer.wait()

  nan = float("nan")
  final = (evaluate(eval_step, params, eval_data, cfg.eval.batch_size, cfg.eval.max_batches, mesh)
           if eval_data else {"eval_terminal_ppl": nan, "eval_loss": nan, "eval_joint_ppl": nan})
  writer.write({"step": total_steps, **final})
  writer.close()
  checkpointer.close()
  summary = RunSummary(total_steps, (total_steps - start_step) * tokens_per_step, last_loss,
                       final["eval_terminal_ppl"], final["eval_loss"], final["eval_joint_ppl"],
                       time.time() - started,
                       start_step, str(workdir))
  if lead:
    (workdir / "summary.json").write_text(json.dumps(dataclasses.asdict(summary), indent=2))
  return summary
