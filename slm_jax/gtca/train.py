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
  (`batches.make_batch` marks it as the row's one target).
- **Methods** (`plans.plan`): `backbone` (no training), `lora_only` (LoRA, α = 0), `direct_joint`
  (LoRA + GTCA from the start, α = 0.15), `gtca` (stage 1 LoRA only at α = 0; stage 2 GTCA only,
  α = 0.15 · min(1, (s + 1) / ⌈0.1 · steps⌉) at 0-based step s, i.e. linear over the first 10%;
  stage 3 both at α = 0.15). A baseline trains as many steps as the three stages together.
- **Ablations** (`plans.ABLATION_SWITCHES`): `no_gate` (g ≡ 1), `no_mask` (m ≡ 1), `weak_parser`
  (a weaker trained parser's trees, `--weak_parser=FOLDER`), `right_branching`, `random_trees`, `permuted_trees` (`slm_jax.gtca.ablations`); each
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
  the log and in result.json's `counts`. `weak_parser` / `right_branching` / `random_trees`
  need a cache built with `--parser=WEAK_FOLDER` / `--parser=right_branching` /
  `--parser=random`. The test metric is named after the set (`mmlu`, …). `python -m slm_jax.gtca.evaluate --run=DIR --task=…` scores a finished run on
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

import pathlib
import sys
import time
from typing import Sequence

import jax

from slm_jax import cli
from slm_jax.gtca import run_config
from slm_jax.gtca.backbone import hf_backbone, is_hf_checkpoint, prepare_backbone
from slm_jax.gtca.mcqa_data import MCQA_SETS, SETS
from slm_jax.gtca.plans import ABLATION_SWITCHES, METHODS, Settings, variant
from slm_jax.gtca.runs import load_task, run
from slm_jax.train.loading import load_run


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
  parser.add_argument("--weak_parser", default=None,
                      help="parser folder of the weak_parser ablation (a genuinely weaker "
                      "trained parser; right_branching is its own ablation)")
  parser.add_argument("--shared_cross_attention", type=cli.boolean, nargs="?", const=True,
                      default=None, help=given("shared_cross_attention", "one cross-attention "
                                           "module for all layers (ablation; default: one per "
                                           "layer, as the reference)"))
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
  task = load_task(runs[0][1])  # the task settings are the same for every run
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
