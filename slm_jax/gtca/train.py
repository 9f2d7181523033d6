"""GTCA training on a frozen backbone: the three stages, the baselines and the ablations (SPEC §10).

`python -m slm_jax.gtca.train --backbone=RUN --out=DIR --methods=gtca,… [--seeds=0,1,…]`, or
`python -m slm_jax.gtca.train --config=FILE|toy [--lr=…|--config.lr=…]` (`slm_jax.gtca.run_config`:
a sweep as code through the one config loader, every key validated before the first run starts;
the flags are aliases of the keys of the same name and override the file).

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
seeds), sharing the loaded backbone, the task and the compiled steps, as one `train.sweep`: each
run folder's `identity.json` (`runs.run_record`: its settings and the source backbone's digest)
is compared with this command's before the first run trains, and a finished run (result.json)
is reused only when it matches — another run's folder is refused naming the differing keys;
each stage folder has its own record (`stages.stage_record`). `--jit_cache` keeps
compilations across processes. `--option_order=fixed` is the easy toy variant (singular first).
`python -m slm_jax.gtca.evaluate --runs=…` turns many result files into tables.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Sequence

import jax

from slm_jax import cli, config_files, locks
from slm_jax.gtca import run_config
from slm_jax.gtca.backbone import hf_backbone, is_hf_checkpoint, prepare_backbone
from slm_jax.gtca.mcqa_data import MCQA_SETS, SETS
from slm_jax.gtca.plans import ABLATION_SWITCHES, METHODS
from slm_jax.gtca.runs import load_task, run, run_record
from slm_jax.gtca.stages import RECORD, RESUMABLE_KEYS
from slm_jax.train.loading import load_run, source_digest
from slm_jax.train.sweep import SweepItem, run_sweep


FLAGS = {  # the train CLI's flags: aliases of the config keys of the same name, with their help
    "backbone": "slm_jax training workdir, or a Hugging Face checkpoint folder",
    "out": "output folder: one run writes OUT/result.json; with several --methods or --seeds "
           "each run writes OUT/NAME/seedS/result.json",
    "methods": f"comma-separated: {', '.join(METHODS)} or an ablation "
               f"({', '.join(a for a in ABLATION_SWITCHES if a != 'none')})",
    "seeds": "comma-separated training seeds", "stage_steps": "steps of stages 1,2,3",
    "batch_size": "", "lr": "", "alpha": "", "train_items": "", "dev_items": "",
    "test_items": "", "task_seed": "",
    "option_order": "random, or fixed (singular first: the easier toy variant)",
    "task": f"toy (the embedded-grammar task), or a real MCQA set ({', '.join(MCQA_SETS)}) read "
            "from --data_root with its span trees from --cache",
    "data_root": "the real set's Hugging Face download",
    "cache": "the parse cache of the real set's prompts (python -m slm_jax.gtca.cache)",
    "log_every": "", "jit_cache": "JAX persistent compilation cache folder (reused across runs)",
    "weak_parser": "parser folder of the weak_parser ablation (a genuinely weaker trained parser; "
                   "right_branching is its own ablation)",
    "shared_cross_attention": "one cross-attention module for all layers (ablation; default: one "
                              "per layer, as the reference); a bare flag means true",
}
BARE_FLAGS = ("shared_cross_attention",)  # booleans: `--flag` alone means true
CONFIG = dataclasses.replace(run_config.LOADER, aliases={name: name for name in FLAGS})


def main(argv: Sequence[str] | None = None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
  CONFIG.add_config_argument(parser)
  for name, text in FLAGS.items():
    default = CONFIG.default(name) if name not in ("backbone", "out") else None
    shown = "" if default is None else f"default {_shown(default)!r}"
    bare = {"nargs": "?", "const": "true"} if name in BARE_FLAGS else {}
    parser.add_argument(f"--{name}", default=None, **bare,
                        help="; ".join(part for part in (text, shown) if part))
  overrides, rest = config_files.split_overrides(sys.argv[1:] if argv is None else argv)
  args = parser.parse_args(rest)
  config = CONFIG.load(args.config, overrides, CONFIG.flag_values(args))
  log = lambda line: print(line, flush=True)
  log("config: " + " ".join(f"{k}={_shown(v)}" for k, v in sorted(
      dataclasses.asdict(config).items()) if k not in PER_RUN))
  if config.jit_cache:
    jax.config.update("jax_compilation_cache_dir", config.jit_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  n_options = 2 if config.task == "toy" else SETS[config.task].n_options
  runs = run_config.run_settings(config, n_options)  # every run validated before the first
  hf = is_hf_checkpoint(config.backbone)
  loaded = None if hf else load_run(config.backbone)
  source = source_digest(config.backbone, None if hf else loaded.step)[1]
  items = [SweepItem(f"{name} seed {settings.seed}", pathlib.Path(settings.out),
                     run_record(settings, source), settings) for name, settings in runs]
  task = load_task(runs[0][1])  # the task settings are the same for every run

  def train(item: SweepItem):
    settings = item.key
    lora = dict(seed=settings.seed, lora_rank=settings.lora_rank, lora_alpha=settings.lora_alpha,
                lora_dropout=settings.lora_dropout, n_options=n_options)
    try:  # e.g. option letters that are not distinct single ids: refused before training
      backbone = (hf_backbone(config.backbone, **lora) if hf else
                  prepare_backbone(loaded.model, loaded.tokenizer, source=config.backbone,
                                   **lora))
    except ValueError as error:
      raise cli.CliError(str(error)) from None
    return run(settings, log, backbone=backbone, task=task, record=item.identity)

  with locks.writer_lock(config.out, what="GTCA training"):  # one writer per --out
    run_sweep(items, train, record=RECORD, marker="result.json", ignore=RESUMABLE_KEYS,
              describe=lambda result: f"test {result['metrics'][config.task]:.2f}", log=log)
  return 0


PER_RUN = ("method", "ablation", "seed", "n_options")  # set per run, not by the config


def _shown(value) -> str:
  return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


if __name__ == "__main__":
  sys.exit(cli.run(main))
