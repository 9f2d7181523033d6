"""GTCA training on a frozen backbone: the three stages, the baselines and the ablations (SPEC §10).

`python -m slm_jax.gtca.train --backbone=RUN --out=DIR --methods=gtca,… [--seeds=0,1,…]`, or
`python -m slm_jax.gtca.train --config=FILE|toy [--lr=…|--config.lr=…]` (`slm_jax.gtca.run_config`:
a sweep as code, every key validated before the first run starts; flags override the file).

- **Backbone**: a slm_jax training workdir (`load_run`), e.g. a terminal model trained on the
  embedded corpus. Its word vocabulary lacks the prompt's words (`Question:`, `Options:`,
  `Answer:`, `A.`, the letters, the slot `___`), so `prepare_backbone` appends one embedding row
  per missing word after the reserved ids (ids V, V+1, …: no existing id moves), frozen like
  every other backbone array: a random direction with the norm of the loaded table's largest row.
  (Why that norm: the letters are also output rows of the tied head, and at a fresh model's
  init scale, std 0.02, their logits stay below the trained words' whatever the hidden state —
  the answer loss then stalls at ≈ 3.7 nats on the terminal_tiny backbone; at the largest row's
  norm it falls below ln 2 within 200 steps); LoRA adapters (r = 8, alpha 16,
  dropout 0.05 on q, k, v, o, gate, up, down; `slm_jax.model.lora`) are added, and the loaded
  arrays are checked to be copied bit for bit. A Hugging Face checkpoint folder (Llama, Qwen2,
  OLMo2) is a backbone as well (`backbone.hf_backbone`: imported with LoRA adapters, its own
  tokenizer, BOS and chat template; nothing appended).
- **Loss** on the answer completion only: the letter token after `Answer:`
  (`evaluate.make_batch` marks it as the row's one target).
- **Methods** (`plans.plan`): `backbone` (no training), `lora_only` (LoRA, α = 0), `direct_joint`
  (LoRA + GTCA from the start, α = 0.15), `gtca` (stage 1 LoRA only at α = 0; stage 2 GTCA only,
  α = 0.15 · min(1, (s + 1) / ⌈0.1 · steps⌉) at 0-based step s, i.e. linear over the first 10%;
  stage 3 both at α = 0.15). A baseline trains as many steps as the three stages together.
- **Ablations** (`plans.ABLATION_SWITCHES`): `no_gate` (g ≡ 1), `no_mask` (m ≡ 1), `weak_parser`
  (right-branching trees), `random_trees`, `permuted_trees` (`slm_jax.gtca.ablations`); each
  runs the `gtca` plan. The `gtca` plan's result also reports its stage-2 checkpoint as the
  `stage2_only` variant (stages 1+2, no stage 3).
- **Stages are chained and resumable**: stage i writes Orbax checkpoints of the adapters (LoRA +
  GTCA; the backbone is never written) and optimizer state under `DIR/stage{i}_{name}`; a stage
  whose last step is on disk is skipped, a partial one resumes from its newest step, and stage i+1
  starts from stage i's final adapters. The batch order is a function of (seed, stage, step), so a
  resumed stage sees the batches it would have seen.
- **Frozen backbone**: digests of every non-LoRA backbone array are taken after loading and
  compared at the end of every stage (`slm_jax.train.params.backbone_check`); the line is
  printed and a change stops the run. They are also stored in each checkpoint, so resuming on a
  different backbone is refused.

- **Real sets** (`--task=cloth|mmlu|hellaswag|winogrande --data_root=DOWNLOAD --cache=FILE`):
  instead of the toy task, the set's training split (dev = its first `--dev_items` labeled rows)
  and evaluation split (`--test_items`; ≤ 0 = all) read from its Hugging Face layout
  (`slm_jax.gtca.real_sets`, `slm_jax.gtca.mcqa_data`); the backbone gets the set's option
  letters; prompts use the cache's own prompt format and span trees come from the cache (a miss
  stops the run naming the example). Unlabeled rows and left-truncated prompts are counted in
  the log and in result.json's `counts`. `weak_parser` / `random_trees` need a cache built with
  `--parser=right_branching` / `--parser=random`. The test metric is named after the set
  (`mmlu`, …). `python -m slm_jax.gtca.evaluate --run=DIR --task=…` scores a finished run on
  another set (CoLA as MCC included) and `python -m slm_jax.gtca.probe --gtca=DIR` probes it.

Writes `DIR/result.json` ({method, seed, metrics, stages, counts, backbone_checks, settings}).
Metrics: `toy` (test accuracy, %), `toy_pp` / `toy_src` / `toy_orc` (by attractor), `dev`,
`blimp` (the test items as minimal pairs — agreeing vs other verb form in the sentence, summed
log-likelihood with the branch at the evaluation α, m ≡ 1, trees from the same source), `drift`
(option drift, branch methods only). Evaluation α: 0 for backbone / LoRA-only, 0.15 otherwise.
Several `--methods` × `--seeds` run in one process (seed-major, so a stopped sweep has whole
seeds), sharing the loaded backbone, the task and the compiled steps; `--jit_cache` keeps
compilations across processes. `--option_order=fixed` is the easy toy variant (singular first).
`python -m slm_jax.gtca.evaluate --runs=…` turns many result files into tables.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import pathlib
import sys
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from slm_jax import cli
from slm_jax.gtca import ablations, evaluate, real_sets, run_config
from slm_jax.gtca.backbone import (Backbone, hf_backbone, is_hf_checkpoint,  # noqa: F401
                                   load_backbone, prepare_backbone)
from slm_jax.gtca.branch import Gtca, GtcaConfig
from slm_jax.gtca.forward import (combine, make_gtca_train_step, merge_models, partition,
                                 split_models)
from slm_jax.gtca.mcqa_data import MCQA_SETS, SETS
from slm_jax.gtca.plans import (  # noqa: F401  (re-exported: the CLI's vocabulary)
    ABLATION_SWITCHES, ALPHA, METHODS, WARM_FRACTION, Settings, Stage, eval_alpha, plan, ramp)
from slm_jax.gtca.prompts import PromptFormat, sentence_prompt
from slm_jax.gtca.spans import span_tree
from slm_jax.gtca.toy_task import ToyItem, filled, make_toy_task
from slm_jax.train.checkpointing import Checkpointer, CheckpointError
from slm_jax.train.params import backbone_check, fingerprints
from slm_jax.train.loading import load_run

def digest_line(prints: dict[str, tuple[int, int]]) -> str:
  """One sha256 over the frozen arrays' digests (what a checkpoint records)."""
  text = json.dumps(sorted(prints.items()))
  return hashlib.sha256(text.encode()).hexdigest()


# ---- data ----------------------------------------------------------------------------------------
def encode_items(items: Sequence[ToyItem], backbone: Backbone, tree_source: str,
                 seed: int, counts: collections.Counter | None = None) -> list[evaluate.Encoded]:
  """Prompt + answer-letter rows and span trees of toy items under `tree_source`; the random
  and permuted sources draw from `SeedSequence([seed, split stream, item index])`. A row is cut
  from the left to the backbone's context, letter included (`counts["truncated"]` counts them)."""
  counts = collections.Counter() if counts is None else counts
  fmt = PromptFormat(max_len=backbone.context, bos=True,
                     chat=backbone.text_tokenizer.chat_template is not None)
  streams = {"train": 0, "dev": 1, "test": 2}
  out = []
  for item in items:
    example_id = f"{item.split}:{item.index}"
    rng = np.random.default_rng(np.random.SeedSequence(
        [seed, streams.get(item.split, 3), item.index]))
    prompt = fmt.prompt({"question": item.question, "options": list(item.options)},
                        backbone.text_tokenizer, example_id)
    counts["truncated"] += prompt.truncated > 0
    tree = span_tree(prompt, [ablations.question_tree(item.tree, tree_source, rng)])
    if tree_source == "permuted":
      tree = ablations.permute_leaves(tree, rng)
    ids = np.concatenate([prompt.ids_T, [backbone.letter_ids[item.answer]]])
    out.append(evaluate.Encoded(ids, tree, backbone.letter_ids[:len(item.options)], item.answer,
                                item.attractor, example_id))
  return out


def encode_pairs(items: Sequence[ToyItem], backbone: Backbone, tree_source: str,
                 seed: int) -> list[tuple[tuple, tuple]]:
  """BLiMP-style minimal pairs of toy items: ((good ids, span tree), (bad ids, span tree)) —
  the sentence with the agreeing verb vs the other form, each a sentence prompt (BOS + words,
  m ≡ 1) with its tree under `tree_source` (drawn like `encode_items`, stream + 10)."""
  out = []
  for item in items:
    pair = []
    for option in (item.answer, 1 - item.answer):
      words, tree = filled(item, option)
      rng = np.random.default_rng(np.random.SeedSequence([seed, 10 + item.index, option]))
      prompt = sentence_prompt(" ".join(words), backbone.text_tokenizer,
                               example_id=f"{item.split}:{item.index}:{option}",
                               max_len=backbone.context, bos_id=backbone.text_tokenizer.bos_id)
      span = span_tree(prompt, [ablations.question_tree(tree, tree_source, rng)])
      if tree_source == "permuted":
        span = ablations.permute_leaves(span, rng)
      pair.append((prompt.ids_T.astype(np.int32), span))
    out.append(tuple(pair))
  return out


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


# ---- stages --------------------------------------------------------------------------------------
def adapters_of(params: dict) -> dict:
  """params with every non-LoRA backbone array replaced by None (what a checkpoint stores)."""
  trained, _ = partition(params, "lora,gtca" if "gtca" in params else "lora")
  return trained


def run_stage(index: int, stage: Stage, graphdefs: tuple, params: dict, train_set, settings: Settings,
              width: int, n_layers: int, prints: dict, log: Callable[[str], None] = print) -> dict:
  """Trains one stage (resuming from its own newest checkpoint) and returns the full params.
  The stage's frozen leaves go through unchanged; its trained leaves are checkpointed together
  with every other adapter, so the next stage can start from this stage's result."""
  directory = pathlib.Path(settings.out) / f"stage{index + 1}_{stage.name}"
  checkpointer = Checkpointer(directory, max_to_keep=2, async_save=False)
  tx = make_tx(settings, stage)
  trained, frozen = partition(params, stage.trainable)
  opt_state = tx.init(trained)
  digest = digest_line(prints)
  start = 0
  restored = checkpointer.restore_latest({"adapters": adapters_of(params), "opt_state": opt_state})
  if restored is not None:
    if restored.extra.get("backbone") != digest:
      raise CheckpointError(f"{directory}: the checkpoint was trained on another backbone "
                            f"(digest {restored.extra.get('backbone')}, now {digest})")
    params = combine(restored.state["adapters"], _frozen_backbone(params))
    trained, frozen = partition(params, stage.trainable)
    opt_state, start = restored.state["opt_state"], restored.step
    log(f"stage {index + 1} ({stage.name}): resumed at step {start}/{stage.steps} from {directory}")
  device = jax.devices()[0]  # committed inputs: the step compiles once, not twice
  trained, frozen, opt_state = jax.device_put((trained, frozen, opt_state), device)
  if start < stage.steps:
    key = (graphdefs, stage.trainable, stage.steps, settings.lr)
    if key not in _STEP_CACHE:
      _STEP_CACHE[key] = make_gtca_train_step(graphdefs, tx)
    step_fn = _STEP_CACHE[key]
    began, losses = time.perf_counter(), []
    for step in range(start, stage.steps):
      rows = batch_indices(len(train_set), settings.batch_size, step, settings.seed, index)
      batch = evaluate.make_batch([train_set[i] for i in rows], width, n_layers, settings.k,
                                  pad_id=0)
      trained, opt_state, sums = step_fn(
          trained, frozen, opt_state, jax.device_put(evaluate.device_batch(batch), device),
          jax.device_put(jnp.asarray(stage.alpha(step), jnp.float32), device))
      losses.append(sums["loss_sum"] / jnp.maximum(sums["count"], 1.0))
      done = step + 1
      if done % settings.log_every == 0 or done == stage.steps:
        loss = float(np.mean(np.asarray(jax.device_get(losses))))
        if not math.isfinite(loss):
          raise cli.CliError(f"stage {index + 1} ({stage.name}) step {done}: loss is {loss}",
                             cli.EXIT_NONFINITE)
        losses = []
        rate = (done - start) / max(time.perf_counter() - began, 1e-9)
        log(f"stage {index + 1} ({stage.name}) step {done}/{stage.steps}: loss {loss:.4f}, "
            f"α {stage.alpha(step):.3f}, {rate:.1f} steps/s, ETA {(stage.steps - done) / rate:.0f}s")
      if done % settings.checkpoint_every == 0 or done == stage.steps:
        full = combine(trained, frozen)
        checkpointer.save(done, {"adapters": adapters_of(full), "opt_state": opt_state},
                          {"backbone": digest, "stage": stage.name,
                           "settings": _settings_json(settings)})
    checkpointer.wait()
  checkpointer.close()
  return combine(trained, frozen)


_STEP_CACHE: dict = {}  # (graphdefs, trainable, steps, lr) -> jitted step (runs in one process)
_SCORER_CACHE: dict = {}  # graphdefs -> (letter scorer, sequence scorer)


def _frozen_backbone(params: dict) -> dict:
  _, frozen = partition(params, "lora,gtca" if "gtca" in params else "lora")
  return frozen


def _settings_json(settings: Settings) -> dict:
  return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(settings).items()}


# ---- a run ---------------------------------------------------------------------------------------
def evaluate_params(scorers, params, data: dict, settings: Settings, n_layers: int, width: int,
                    alpha: float, drift: bool) -> dict[str, float]:
  """dev/test accuracies at `alpha` (test under the task's name: `toy`, `mmlu`, …), the toy
  test pairs' BLiMP-style accuracy (`blimp`), and with `drift` the test set's option drift (the
  branch at `alpha` vs α = 0, same weights)."""
  scorer, sequence_scorer = scorers
  out = {}
  if data.get("pairs"):
    good = evaluate.sentence_scores(sequence_scorer, params, [p[0] for p in data["pairs"]], alpha,
                                    n_layers=n_layers, k=settings.k)
    bad = evaluate.sentence_scores(sequence_scorer, params, [p[1] for p in data["pairs"]], alpha,
                                   n_layers=n_layers, k=settings.k)
    out["blimp"] = evaluate.pair_accuracy(good, bad)
  for split, prefix in (("dev", "dev"), ("test", settings.task)):
    if not data[split]:
      continue
    scores = evaluate.letter_scores(scorer, params, data[split], alpha, n_layers=n_layers,
                                    k=settings.k, width=width)
    metrics = evaluate.mcqa_metrics(scores, data[split], prefix)
    out.update(metrics if split == "test" else {"dev": metrics["dev"]})
    if drift and split == "test":
      off = evaluate.letter_scores(scorer, params, data[split], 0.0, n_layers=n_layers,
                                   k=settings.k, width=width)
      out["drift"] = evaluate.option_drift(scores, off)
  return out


def real_data(settings: Settings, backbone: Backbone, real: real_sets.RealData,
              tree_source: str, log: Callable[[str], None] = print) -> tuple[dict, dict]:
  """The encoded train / dev / test of a real set (trees from the parse cache) and the counts
  (rows cut from the left, rows over the backbone's context when the cache allowed them)."""
  cache, fmt = real_sets.open_cache(settings.cache, backbone.text_tokenizer,
                                    settings.n_options)
  warning = real_sets.context_warning(fmt, backbone.context, settings.cache)
  if warning:
    log(warning)
  counts = {split: dict(c) for split, c in real.counts.items()}
  data = {}
  with cache:
    for split, examples in real.splits.items():
      tally: dict = collections.Counter()
      data[split] = real_sets.encode_cached(examples, backbone, cache, fmt, tree_source,
                                            settings.seed, tally)
      counts[split]["truncated"] = tally["truncated"]
      counts[split]["over_context"] = tally["over_context"]
  return data, counts


def run(settings: Settings, log: Callable[[str], None] = print, *, backbone: Backbone | None = None,
        task=None) -> dict:
  """One method (or ablation) at one seed: train its stages, evaluate, write result.json.
  `task`: the toy task, or for a real set its `real_sets.RealData` (read when not given)."""
  began = time.perf_counter()
  out = pathlib.Path(settings.out)
  out.mkdir(parents=True, exist_ok=True)
  if settings.task == "toy":
    task = task or make_toy_task(settings.train_items, settings.dev_items, settings.test_items,
                                 settings.task_seed, option_order=settings.option_order)
  else:
    task = task or real_sets.load_real(settings.task, settings.data_root, settings.train_items,
                                       settings.dev_items, settings.test_items)
  log(task.summary())
  backbone = backbone or load_backbone(settings.backbone, seed=settings.seed,
                                       lora_rank=settings.lora_rank,
                                       lora_alpha=settings.lora_alpha,
                                       lora_dropout=settings.lora_dropout,
                                       n_options=settings.n_options)
  options, source = ABLATION_SWITCHES[settings.ablation]
  mcfg = backbone.decoder.config
  gtca = Gtca(GtcaConfig.from_model(mcfg, k=settings.k, **options), rngs=nnx.Rngs(settings.seed + 1))
  if settings.task == "toy":
    counts = {split: dict(c) for split, c in task.counts.items()}
    data = {}
    for split, items in task.splits.items():
      tally: collections.Counter = collections.Counter()
      data[split] = encode_items(items, backbone, source, settings.seed, tally)
      counts.setdefault(split, {})["truncated"] = tally["truncated"]
    log("truncated from the left: " + ", ".join(f"{split} {c.get('truncated', 0)}"
                                                for split, c in counts.items()))
  else:
    data, counts = real_data(settings, backbone, task, source, log)
    log("truncated from the left: " + ", ".join(f"{split} {c['truncated']}"
                                                for split, c in counts.items()))
  width = evaluate.row_width([e for split in data.values() for e in split])
  if settings.blimp_pairs and settings.task == "toy":
    data["pairs"] = encode_pairs(task.splits["test"], backbone, source, settings.seed)
  graphdefs, params = split_models(backbone.decoder, gtca)
  params = jax.device_put(params, jax.devices()[0])
  prints = fingerprints(params["backbone"], "lora")
  log(f"backbone {backbone.source}: {len(prints)} frozen arrays, added words "
      f"{' '.join(backbone.added_words) or '(none)'}; rows of {width} tokens")
  if graphdefs not in _SCORER_CACHE:
    _SCORER_CACHE[graphdefs] = (evaluate.make_letter_scorer(graphdefs),
                                evaluate.make_sequence_scorer(graphdefs))
  scorer = _SCORER_CACHE[graphdefs]
  stages, checks, per_stage = plan(settings), [], []
  test_name = settings.task
  for index, stage in enumerate(stages):
    params = run_stage(index, stage, graphdefs, params, data["train"], settings, width,
                       mcfg.n_layers, prints, log)
    ok, line = backbone_check(prints, params["backbone"], "lora")
    log(f"stage {index + 1} ({stage.name}) {line}")
    checks.append(line)
    if not ok:
      raise RuntimeError(f"stage {index + 1} ({stage.name}): {line}")
    metrics = evaluate_params(scorer, params, data, settings, mcfg.n_layers, width,
                              stage.alpha(stage.steps - 1), drift=False)
    per_stage.append({"stage": stage.name, "steps": stage.steps, **metrics})
    log(f"stage {index + 1} ({stage.name}) dev {metrics.get('dev', float('nan')):.2f} "
        f"test {metrics[test_name]:.2f}")
  alpha = eval_alpha(settings)
  metrics = evaluate_params(scorer, params, data, settings, mcfg.n_layers, width, alpha,
                            drift=alpha > 0)
  result = {"method": settings.name, "seed": settings.seed, "metrics": metrics,
            "stages": per_stage, "counts": counts, "backbone_checks": checks,
            "settings": _settings_json(settings), "seconds": time.perf_counter() - began}
  (out / "result.json").write_text(json.dumps(result, indent=1))
  if settings.method == "gtca" and settings.ablation == "none" and len(per_stage) == 3:
    stage2 = {k: v for k, v in per_stage[1].items() if k not in ("stage", "steps")}
    extra = dict(result, method="stage2_only", metrics=stage2)
    (out / "stage2_only").mkdir(exist_ok=True)
    (out / "stage2_only" / "result.json").write_text(json.dumps(extra, indent=1))
  log(f"{settings.name} seed {settings.seed}: test {metrics[test_name]:.2f} "
      + " ".join(f"{k} {v:.3f}" for k, v in metrics.items() if k != test_name)
      + f" ({result['seconds']:.0f}s) -> {out / 'result.json'}")
  return result


# ---- a finished run, restored (evaluation on other sets, the probe) ------------------------------
def make_tx(settings: Settings, stage: Stage) -> optax.GradientTransformation:
  """AdamW, warm-up over 5% of the stage's steps (at least 1; none for a 1-step stage, which
  optax's cosine part needs a step for), cosine decay to lr / 10."""
  warmup = min(max(1, stage.steps // 20), stage.steps - 1)
  return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
      optax.warmup_cosine_decay_schedule(0.0, settings.lr, warmup, stage.steps,
                                         settings.lr * 0.1), weight_decay=0.0))


def settings_of(result: dict) -> Settings:
  fields = {f.name for f in dataclasses.fields(Settings)}
  raw = {k: v for k, v in result["settings"].items() if k in fields}
  raw["stage_steps"] = tuple(raw.get("stage_steps", (200, 200, 200)))
  return Settings(**raw)


def restore_run(out: str | pathlib.Path, log: Callable[[str], None] = print):
  """(settings, backbone, gtca, graphdefs, params, α at evaluation) of a finished run folder
  (its result.json): the backbone reloaded from its workdir, the adapters (LoRA + GTCA) from
  the last stage's final checkpoint — refused when that checkpoint is missing or incomplete or
  was trained on another backbone."""
  out = pathlib.Path(out)
  path = out / "result.json"
  if not path.is_file():
    raise cli.CliError(f"--run {out}: no result.json (not a finished python -m "
                       "slm_jax.gtca.train run)")
  settings = settings_of(json.loads(path.read_text()))
  backbone = load_backbone(settings.backbone, seed=settings.seed, lora_rank=settings.lora_rank,
                           lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                           n_options=settings.n_options)
  options, _ = ABLATION_SWITCHES[settings.ablation]
  gtca = Gtca(GtcaConfig.from_model(backbone.decoder.config, k=settings.k, **options),
              rngs=nnx.Rngs(settings.seed + 1))
  graphdefs, params = split_models(backbone.decoder, gtca)
  stages = plan(settings)
  if stages:
    index, stage = len(stages) - 1, stages[-1]
    directory = out / f"stage{index + 1}_{stage.name}"
    trained, _ = partition(params, stage.trainable)
    abstract = {"adapters": adapters_of(params),
                "opt_state": make_tx(settings, stage).init(trained)}
    checkpointer = Checkpointer(directory, async_save=False, read_only=True)
    restored = checkpointer.restore_latest(abstract)
    checkpointer.close()
    if restored is None or restored.step != stage.steps:
      raise CheckpointError(f"{directory}: no final checkpoint (step {stage.steps}) of the last "
                            "stage")
    digest = digest_line(fingerprints(params["backbone"], "lora"))
    if restored.extra.get("backbone") != digest:
      raise CheckpointError(f"{directory}: trained on another backbone than {settings.backbone}")
    params = combine(restored.state["adapters"], _frozen_backbone(params))
    log(f"restored {settings.name} seed {settings.seed} from {directory} (step {restored.step})")
  backbone.decoder, gtca = merge_models(graphdefs, params)
  return settings, backbone, gtca, graphdefs, params, eval_alpha(settings)


def variant(name: str) -> tuple[str, str]:
  """A table row name → (method, ablation): `gtca`, `lora_only`, … or an ablation (`no_gate`)."""
  if name in METHODS:
    return name, "none"
  if name in ABLATION_SWITCHES and name != "none":
    return "gtca", name
  raise cli.CliError(f"unknown method or ablation {name!r}; expected one of "
                     f"{', '.join(METHODS + tuple(a for a in ABLATION_SWITCHES if a != 'none'))}")


def main(argv: Sequence[str] | None = None) -> int:
  base = run_config.defaults()
  parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=(
      "--config=FILE|NAME (slm_jax.gtca.run_config) sets any of these keys; a flag, or "
      "--config.KEY=VALUE, overrides the file. Packaged configs: "
      + ", ".join(run_config.names())))
  given = lambda key, text: f"{text} (default {base[key]!r})" if text else f"default {base[key]!r}"
  parser.add_argument("--config", default=None,
                      help="a GTCA train config (a file with get_config(), or a packaged name)")
  parser.add_argument("--backbone", default=None,
                      help="slm_jax training workdir, or a Hugging Face checkpoint folder")
  parser.add_argument("--out", default=None,
                      help="output folder: one run writes OUT/result.json; with several "
                      "--methods or --seeds each run writes OUT/NAME/seedS/result.json")
  parser.add_argument("--methods", default=None,
                      help=given("methods", f"comma-separated: {', '.join(METHODS)} or an ablation "
                                 f"({', '.join(a for a in ABLATION_SWITCHES if a != 'none')})"))
  parser.add_argument("--seeds", default=None, help=given("seeds", "comma-separated training seeds"))
  parser.add_argument("--stage_steps", default=None, help=given("stage_steps", "steps of stages 1,2,3"))
  parser.add_argument("--batch_size", type=int, default=None, help=given("batch_size", ""))
  parser.add_argument("--lr", type=float, default=None, help=given("lr", ""))
  parser.add_argument("--alpha", type=float, default=None, help=given("alpha", ""))
  parser.add_argument("--train_items", type=int, default=None, help=given("train_items", ""))
  parser.add_argument("--dev_items", type=int, default=None, help=given("dev_items", ""))
  parser.add_argument("--test_items", type=int, default=None, help=given("test_items", ""))
  parser.add_argument("--task_seed", type=int, default=None, help=given("task_seed", ""))
  parser.add_argument("--option_order", choices=("random", "fixed"), default=None,
                      help=given("option_order", "toy options in a seeded order, or singular "
                                 "first (easier)"))
  parser.add_argument("--task", default=None, choices=("toy", *MCQA_SETS),
                      help=given("task", "the embedded-grammar toy task, or a real MCQA set read "
                                 "from --data_root with its span trees from --cache"))
  parser.add_argument("--data_root", default=None, help="the real set's Hugging Face download")
  parser.add_argument("--cache", default=None, help="the parse cache of the real set's prompts "
                      "(python -m slm_jax.gtca.cache --task=… --workdir=BACKBONE)")
  parser.add_argument("--log_every", type=int, default=None, help=given("log_every", ""))
  parser.add_argument("--jit_cache", default=None,
                      help="JAX persistent compilation cache folder (reused across runs)")
  args, rest = parser.parse_known_args(argv)
  overrides = [r for r in rest if r.startswith("--config.")]
  if len(overrides) != len(rest):
    parser.error("unrecognized arguments: " + " ".join(r for r in rest if r not in overrides))
  flags = {k: v for k, v in vars(args).items() if v is not None and k not in ("config", "debug")}
  config = run_config.resolve(args.config, flags, overrides)
  log = lambda line: print(line, flush=True)
  log("config: " + " ".join(f"{k}={_shown(v)}" for k, v in config.items()))
  if config.jit_cache:
    jax.config.update("jax_compilation_cache_dir", config.jit_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  if config.task != "toy" and (not config.data_root or not config.cache):
    raise cli.CliError(f"--task={config.task} needs --data_root (its download) and --cache (its "
                       "parse cache)")
  n_options = 2 if config.task == "toy" else SETS[config.task].n_options
  common = run_config.settings_kwargs(config)
  names, seeds = config.methods, config.seeds
  single = len(names) == 1 and len(seeds) == 1
  runs = []  # every run's Settings, validated before the first one starts
  for seed, name in [(s, n) for s in seeds for n in names]:
    method, ablation = variant(name)
    out = pathlib.Path(config.out) if single else pathlib.Path(config.out) / name / f"seed{seed}"
    try:
      runs.append((name, Settings(out=str(out), method=method, ablation=ablation, seed=seed,
                                  n_options=n_options, **common)))
    except ValueError as error:
      raise cli.CliError(f"{error} (run {name} seed {seed})") from None
  hf = is_hf_checkpoint(config.backbone)
  loaded = None if hf else load_run(config.backbone)
  if config.task == "toy":
    task = make_toy_task(config.train_items, config.dev_items, config.test_items,
                         config.task_seed, option_order=config.option_order)
  else:
    task = real_sets.load_real(config.task, config.data_root, config.train_items,
                               config.dev_items, config.test_items)
  began, total = time.perf_counter(), len(runs)
  for done, (name, settings) in enumerate(runs):
    out, seed = pathlib.Path(settings.out), settings.seed
    if (out / "result.json").exists():
      log(f"[{done + 1}/{total}] {name} seed {seed}: {out / 'result.json'} exists, skipped")
      continue
    lora = dict(seed=seed, lora_rank=settings.lora_rank, lora_alpha=settings.lora_alpha,
                lora_dropout=settings.lora_dropout, n_options=n_options)
    backbone = (hf_backbone(config.backbone, **lora) if hf else
                prepare_backbone(loaded.model, loaded.tokenizer, source=config.backbone, **lora))
    run(settings, log, backbone=backbone, task=task)
    elapsed = time.perf_counter() - began
    log(f"[{done + 1}/{total}] {name} seed {seed} done; {elapsed:.0f}s elapsed, ETA "
        f"{elapsed / (done + 1) * (total - done - 1):.0f}s")
  return 0


def _shown(value) -> str:
  return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


if __name__ == "__main__":
  sys.exit(cli.run(main))
