"""A GTCA run (SPEC §10): one method or ablation at one seed — its data, stages, evaluation and
result.json — and a finished run restored for evaluation on other sets or the probe.

- `run(settings)`: encodes the task (the toy task: `toy_encoding`; a real MCQA set: `real_sets`,
  trees from the parse cache), builds the `GtcaLM` (the backbone with LoRA and a fresh branch),
  trains the plan's stages one after the other (`stages.run_stage`; each starts from the previous
  one's result), checks after every stage that every frozen backbone array is bitwise the loaded
  one (`train.params.backbone_check`: the line is printed, a change stops the run), evaluates
  after every stage and at the end, and writes OUT/result.json ({method, seed, metrics, stages,
  counts, backbone_checks, settings, seconds}); the gtca plan's stage-2 result also as the
  `stage2_only` variant (OUT/stage2_only/result.json).
- Metrics (`evaluate_params`): dev and test accuracy at the evaluation α (the test one named
  after the task: `toy`, `mmlu`, …, with per-group accuracies), the toy test items as BLiMP-style
  pairs (`blimp`), and the option drift (the branch at α vs α = 0, same weights). A real set's
  `also` sets (`blimp_mcqa`: `blimp_mcqa_heldout`, `blimp_heldout`) are scored at the end
  (`also_metrics`), their metrics under their own names.
- `restore_run(OUT)`: the run's settings (from its result.json), its backbone reloaded, the
  adapters (LoRA + GTCA) from the last stage's final checkpoint — refused when that checkpoint is
  missing or incomplete or was trained on another backbone (`stages.restore_stage`; a run trained
  before GTCA used `train.steps` restores as well).
- `evaluate_saved_run`: a restored run scored on a real set (`real_sets.score_run`), written to
  OUT/eval_SET.json (with what made it) and merged into its result.json (so the tables show
  it); an earlier OUT/eval_SET.json is refused unless `force`, then kept as eval_SET.N.json.
- Identity: `run_record` (OUT/identity.json: settings + the source backbone's digest) is
  compared before a run resumes or its result is reused (`train.sweep` in `gtca.train`), each
  stage's record in its folder (`stages.stage_record`).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import pathlib
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax import cli
from slm_jax.gtca import metrics, real_sets, scoring
from slm_jax.gtca.backbone import Backbone, load_backbone
from slm_jax.gtca.batches import data_digest, row_width
from slm_jax.gtca.branch import Gtca, GtcaConfig, parameter_counts
from slm_jax.gtca.model import GtcaLM, params_of
from slm_jax.gtca.plans import ABLATION_SWITCHES, Settings, eval_alpha, plan
from slm_jax.gtca.stages import (RECORD, RESUMABLE_KEYS, digest_line, restore_stage, run_stage,
                                 settings_json, stage_dir, stage_record)
from slm_jax.gtca.mcqa_data import PAIRS, set_of
from slm_jax.gtca.toy_encoding import encode_items, encode_pairs
from slm_jax.gtca.toy_task import make_toy_task
from slm_jax import identity
from slm_jax.train.checkpointing import Checkpointer, CheckpointError
from slm_jax.train.params import backbone_check, fingerprints

_SCORER_CACHE: dict = {}  # graphdef -> (letter scorer, sequence scorer)


def make_model(backbone: Backbone, settings: Settings) -> GtcaLM:
  """The backbone with a fresh branch of the run's ablation options (seeded by seed + 1)."""
  options, _ = ABLATION_SWITCHES[settings.ablation]
  sharing = "shared" if settings.shared_cross_attention else "per_layer"
  gtca = Gtca(GtcaConfig.from_model(backbone.decoder.config, k=settings.k,
                                    cross_attention=sharing, **options),
              rngs=nnx.Rngs(settings.seed + 1))
  return GtcaLM(backbone.decoder, gtca)


def load_task(settings: Settings):
  """The toy task, or for a real set its `real_sets.RealData`."""
  if settings.task == "toy":
    return make_toy_task(settings.train_items, settings.dev_items, settings.test_items,
                         settings.task_seed, option_order=settings.option_order)
  return real_sets.load_real(settings.task, settings.data_root, settings.train_items,
                             settings.dev_items, settings.test_items)


def evaluate_params(scorers, params, data: dict, settings: Settings, n_layers: int, width: int,
                    alpha: float, drift: bool) -> dict[str, float]:
  """dev/test accuracies at `alpha` (test under the task's name: `toy`, `mmlu`, …), the toy
  test pairs' BLiMP-style accuracy (`blimp`), and with `drift` the test set's option drift (the
  branch at `alpha` vs α = 0, same weights)."""
  scorer, sequence_scorer = scorers
  out = {}
  if data.get("pairs"):
    good = scoring.sentence_scores(sequence_scorer, params, [p[0] for p in data["pairs"]], alpha,
                                   n_layers=n_layers, k=settings.k)
    bad = scoring.sentence_scores(sequence_scorer, params, [p[1] for p in data["pairs"]], alpha,
                                  n_layers=n_layers, k=settings.k)
    out["blimp"] = metrics.pair_accuracy(good, bad)
  for split, prefix in (("dev", "dev"), ("test", settings.task)):
    if not data[split]:
      continue
    scores = scoring.letter_scores(scorer, params, data[split], alpha, n_layers=n_layers,
                                   k=settings.k, width=width)
    found = metrics.mcqa_metrics(scores, data[split], prefix)
    out.update(found if split == "test" else {"dev": found["dev"]})
    if drift and split == "test":
      off = scoring.letter_scores(scorer, params, data[split], 0.0, n_layers=n_layers,
                                  k=settings.k, width=width)
      out["drift"] = metrics.option_drift(scores, off)
  return out


def toy_data(settings: Settings, backbone: Backbone, task, tree_source: str
             ) -> tuple[dict, dict]:
  """The encoded toy splits and their counts (the task's, and rows cut from the left)."""
  counts = {split: dict(c) for split, c in task.counts.items()}
  data = {}
  for split, items in task.splits.items():
    tally: collections.Counter = collections.Counter()
    data[split] = encode_items(items, backbone, tree_source, settings.seed, tally,
                               weak_parser=settings.weak_parser)
    counts.setdefault(split, {})["truncated"] = tally["truncated"]
  return data, counts


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
    for other, split in real.also.items():  # scored at the end of the run (`also_metrics`)
      tally = collections.Counter()
      if set_of(other).kind == PAIRS:
        data[other] = real_sets.pair_rows(split, backbone.text_tokenizer, cache, fmt, tally,
                                          backbone.context)
      else:
        data[other] = real_sets.encode_cached(split.labeled(), backbone, cache, fmt,
                                              tree_source, settings.seed, tally)
      counts[other]["truncated"] = tally["truncated"]
      counts[other]["over_context"] = tally["over_context"]
  return data, counts


def also_metrics(scorers, params, real: real_sets.RealData, data: dict, settings: Settings,
                 n_layers: int, alpha: float) -> dict[str, float]:
  """The metrics of the set's `also` sets (`mcqa_data.GtcaSet.also`): an MCQA one's accuracy
  under its name (the option drift is the test set's only), a pairs one's `blimp_real` accuracies under its name
  (`blimp_heldout`, `blimp_heldout_<field>`)."""
  scorer, sequence_scorer = scorers
  out: dict[str, float] = {}
  for other, split in real.also.items():
    if set_of(other).kind == PAIRS:
      found, _, _ = real_sets.pair_metrics(sequence_scorer, params, split, data[other], alpha,
                                           n_layers=n_layers, k=settings.k)
      out.update({other + key[len(metrics.REAL_BLIMP):]: v for key, v in found.items()})
      continue
    width = row_width(data[other])
    scores = scoring.letter_scores(scorer, params, data[other], alpha, n_layers=n_layers,
                                   k=settings.k, width=width)
    out.update(metrics.mcqa_metrics(scores, data[other], other))
  return out


def scorers_of(graphdef) -> tuple[Callable, Callable]:
  """(letter scorer, sequence scorer) of a model graph, compiled once per process."""
  if graphdef not in _SCORER_CACHE:
    _SCORER_CACHE[graphdef] = (scoring.make_letter_scorer(graphdef),
                               scoring.make_sequence_scorer(graphdef))
  return _SCORER_CACHE[graphdef]


def run_record(settings: Settings, source: str = "") -> dict:
  """What makes a run (saved as OUT/identity.json, compared before it resumes or its result is
  reused): every setting (`stages.RESUMABLE_KEYS` may change) and the source backbone's digest
  (`train.loading.source_digest`, THE content digest of a checkpoint)."""
  return {"settings": settings_json(settings), "backbone_source": source}


def run(settings: Settings, log: Callable[[str], None] = print, *, backbone: Backbone | None = None,
        task=None, record: dict | None = None, stop_after: int | None = None) -> dict | None:
  """One method (or ablation) at one seed: train its stages, evaluate, write result.json.
  `task`: the toy task, or for a real set its `real_sets.RealData` (read when not given).
  `record`: the run's identity (`run_record`; default: without a source digest), checked
  against OUT/identity.json and written there before anything trains. `stop_after`: end
  each stage call after that many steps (tests: a kill); returns None when a stage stopped
  unfinished."""
  began = time.perf_counter()
  out = pathlib.Path(settings.out)
  record = run_record(settings) if record is None else record
  identity.check_record(out / RECORD, record, what=f"{out} holds a run made with other settings",
                        where="in the run folder", ignore=RESUMABLE_KEYS,
                        hint="use another --out, or the settings it was made with")
  out.mkdir(parents=True, exist_ok=True)
  identity.write_record(out / RECORD, record)
  task = task or load_task(settings)
  log(task.summary())
  backbone = backbone or load_backbone(settings.backbone, seed=settings.seed,
                                       lora_rank=settings.lora_rank,
                                       lora_alpha=settings.lora_alpha,
                                       lora_dropout=settings.lora_dropout,
                                       n_options=settings.n_options)
  _, source = ABLATION_SWITCHES[settings.ablation]
  model = make_model(backbone, settings)
  n_layers = model.config.n_layers
  sizes = parameter_counts(model.gtca.config)
  log(f"GTCA branch ({model.gtca.config.cross_attention} cross-attention): {sizes['total']:,} "
      f"parameters ({sizes['cross_attention']:,} cross-attention, {sizes['chunk']:,} chunk)")
  if settings.task == "toy":
    data, counts = toy_data(settings, backbone, task, source)
    log("truncated from the left: " + ", ".join(f"{split} {c.get('truncated', 0)}"
                                                for split, c in counts.items()))
  else:
    data, counts = real_data(settings, backbone, task, source, log)
    log("truncated from the left: " + ", ".join(f"{split} {c['truncated']}"
                                                for split, c in counts.items()))
  width = row_width([e for split in ("train", "dev", "test") for e in data.get(split, ())])
  if settings.blimp_pairs and settings.task == "toy":
    data["pairs"] = encode_pairs(task.splits["test"], backbone, source, settings.seed,
                                 weak_parser=settings.weak_parser)
  graphdef, params = params_of(model)
  # the step donates what it trains on: the run trains its own copy (the loaded backbone's
  # arrays stay usable by the next run of a sweep)
  params = jax.device_put(jax.tree.map(jnp.copy, params), jax.devices()[0])
  prints = fingerprints(params["backbone"], "lora")
  log(f"backbone {backbone.source}: {len(prints)} frozen arrays, added words "
      f"{' '.join(backbone.added_words) or '(none)'}; rows of {width} tokens")
  scorers = scorers_of(graphdef)
  stages, checks, per_stage = plan(settings), [], []
  test_name = settings.task
  prepared, train_rows = digest_line(prints), data_digest(data["train"])
  for index, stage in enumerate(stages):
    params = run_stage(index, stage, graphdef, params, data["train"], settings, width, n_layers,
                       prints, stage_record(record, index, stage, prepared, train_rows), log,
                       stop_after)
    if params is None:
      return None
    ok, line = backbone_check(prints, params["backbone"], "lora")
    log(f"stage {index + 1} ({stage.name}) {line}")
    checks.append(line)
    if not ok:
      raise RuntimeError(f"stage {index + 1} ({stage.name}): {line}")
    found = evaluate_params(scorers, params, data, settings, n_layers, width,
                            stage.alpha(stage.steps - 1), drift=False)
    per_stage.append({"stage": stage.name, "steps": stage.steps, **found})
    log(f"stage {index + 1} ({stage.name}) dev {found.get('dev', float('nan')):.2f} "
        f"test {found[test_name]:.2f}")
  alpha = eval_alpha(settings)
  found = evaluate_params(scorers, params, data, settings, n_layers, width, alpha,
                          drift=alpha > 0)
  if settings.task != "toy":
    found.update(also_metrics(scorers, params, task, data, settings, n_layers, alpha))
  if alpha > 0:  # the branch's size, for the tables (methods that train one)
    found.update(branch_params=sizes["total"], xattn_params=sizes["cross_attention"])
  result = {"method": settings.name, "seed": settings.seed, "metrics": found,
            "stages": per_stage, "counts": counts, "backbone_checks": checks,
            "settings": settings_json(settings), "seconds": time.perf_counter() - began}
  (out / "result.json").write_text(json.dumps(result, indent=1))
  if settings.method == "gtca" and settings.ablation == "none" and len(per_stage) == 3:
    stage2 = {k: v for k, v in per_stage[1].items() if k not in ("stage", "steps")}
    extra = dict(result, method="stage2_only", metrics=stage2)
    (out / "stage2_only").mkdir(exist_ok=True)
    (out / "stage2_only" / "result.json").write_text(json.dumps(extra, indent=1))
  log(f"{settings.name} seed {settings.seed}: test {found[test_name]:.2f} "
      + " ".join(f"{k} {v:.3f}" for k, v in found.items() if k != test_name)
      + f" ({result['seconds']:.0f}s) -> {out / 'result.json'}")
  return result


# ---- a finished run, restored (evaluation on other sets, the probe) ------------------------------
class RestoredRun(NamedTuple):
  settings: Settings
  backbone: Backbone  # its decoder is `model.backbone` (the restored LoRA adapters in it)
  model: GtcaLM
  graphdef: object
  params: dict
  alpha: float  # α at evaluation


def settings_of(result: dict) -> Settings:
  fields = {f.name for f in dataclasses.fields(Settings)}
  raw = {k: v for k, v in result["settings"].items() if k in fields}
  raw["stage_steps"] = tuple(raw.get("stage_steps", (200, 200, 200)))
  return Settings(**raw)


def restore_run(out: str | pathlib.Path, log: Callable[[str], None] = print) -> RestoredRun:
  """A finished run folder (its result.json) restored (module docstring)."""
  out = pathlib.Path(out)
  path = out / "result.json"
  if not path.is_file():
    raise cli.CliError(f"--run {out}: no result.json (not a finished python -m "
                       "slm_jax.gtca.train run)")
  settings = settings_of(json.loads(path.read_text()))
  backbone = load_backbone(settings.backbone, seed=settings.seed, lora_rank=settings.lora_rank,
                           lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                           n_options=settings.n_options)
  model = make_model(backbone, settings)
  graphdef, params = params_of(model)
  stages = plan(settings)
  if stages:
    index, stage = len(stages) - 1, stages[-1]
    directory = stage_dir(out, index, stage)
    checkpointer = Checkpointer(directory, async_save=False, read_only=True)
    try:
      digest = digest_line(fingerprints(params["backbone"], "lora"))
      restored = (restore_stage(checkpointer, params, None, digest, stage.steps)
                  if checkpointer.steps()[-1:] == [stage.steps] else None)
    finally:
      checkpointer.close()
    if restored is None or restored[2] != stage.steps:
      raise CheckpointError(f"{directory}: no final checkpoint (step {stage.steps}) of the last "
                            "stage")
    params = restored[0]
    log(f"restored {settings.name} seed {settings.seed} from {directory} (step {stage.steps})")
  model = nnx.merge(graphdef, params)
  backbone.decoder = model.backbone
  return RestoredRun(settings, backbone, model, graphdef, params, eval_alpha(settings))


def evaluate_saved_run(run_dir: str | pathlib.Path, task: str, data_root: str, cache: str, *,
                       limit: int = 0, fit_limit: int = 0, force: bool = False,
                       cola: str = "prompt",
                       log: Callable[[str], None] = print) -> dict:
  """`real_sets.score_run` of a restored run, written to RUN/eval_TASK.json with what made it
  (`evaluated`: task, data_root, cache, limit, fit_limit) and merged into its result.json
  (metrics, and the counts under `eval_counts`); returns the scores. An existing
  eval_TASK.json is refused unless `force`: then it is kept as eval_TASK.N.json (N = the first
  free number) and result.json lists it under `eval_history` — never silently overwritten."""
  run_dir = pathlib.Path(run_dir)
  written = run_dir / f"eval_{task}.json"
  if written.exists() and not force:
    raise cli.CliError(f"{written}: exists (an earlier evaluation); give --force to evaluate "
                       "again (the old file is kept as eval_TASK.N.json)")
  restored = restore_run(run_dir, log)
  out = real_sets.score_run(restored, task, data_root, cache, limit=limit, fit_limit=fit_limit,
                            cola=cola, log=log)
  out = {**out, "evaluated": {"task": task, "data_root": str(data_root), "cache": str(cache),
                              "limit": limit, "fit_limit": fit_limit}}
  result = json.loads((run_dir / "result.json").read_text())
  if written.exists():
    kept = next(run_dir / f"eval_{task}.{n}.json" for n in itertools.count(1)
                if not (run_dir / f"eval_{task}.{n}.json").exists())
    written.replace(kept)
    result.setdefault("eval_history", {}).setdefault(task, []).append(kept.name)
    log(f"{written}: the earlier evaluation kept as {kept}")
  written.write_text(json.dumps(out, indent=1))
  result["metrics"].update(out["metrics"])
  result.setdefault("eval_counts", {})[task] = out["counts"]
  (run_dir / "result.json").write_text(json.dumps(result, indent=1))
  return out
