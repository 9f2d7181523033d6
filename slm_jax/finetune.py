"""Fine-tune a trained run on XSum or BoolQ, one resumable run per seed (SPEC §11).

  python -m slm_jax.finetune --task=xsum --workdir=runs/tree_1b --out=runs/tree_1b_xsum
  python -m slm_jax.finetune --task=boolq --workdir=RUN --out=OUT --data_dir=DIR --seeds=42,2026
      [--epochs=E] [--lr=LR] [--batch_size=B] [--max_len=2048] [--warmup_steps=100]
      [--limit=N] [--micro_batches=1] [--tree_source=parser|parser:DIR|flat|file:PATH]
      [--log_every=10] [--checkpoint_every=500]

Defaults (paper App. C): XSum 3 epochs, LR 6e-5, batch 40; BoolQ 5 epochs, LR 3e-4, batch 40;
AdamW (0.9, 0.95), weight decay 0.1, clip 1.0, 100 warmup steps, cosine to 1e-6; seeds 42, 2026,
6198, 13171, 31723. The train split of `--data_dir` (default `../shared/data/<task>`) is read by
`slm_jax.downstream.tasks.read_task`, encoded once for the run's tokenizer and linearization
(`slm_jax.downstream.encoding`, trees from `--tree_source`) into rows
(`slm_jax.downstream.finetune_data`: instruction, loss mask, truncation), and each seed trains in
`OUT/seed<S>/`, a workdir `load_run` reads (`slm_jax.downstream.finetune`). Rerunning the command
resumes an interrupted seed and reuses finished ones; a seed folder made with other settings,
source or data is refused (every seed checked before any trains), naming the differing keys.
`--epochs`, `--batch_size`, `--limit`, `--max_len` and `--warmup_steps` shrink a run for tests. Exit codes (`slm_jax.cli`): 0 done, 2 bad
input, 3 non-finite loss; `--debug` shows tracebacks.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Sequence

from slm_jax import cli

TASKS = ("xsum", "boolq")
DEFAULT_SEEDS = "42,2026,6198,13171,31723"


def _seeds(text: str) -> tuple[int, ...]:
  try:
    seeds = tuple(int(part) for part in text.split(",") if part.strip())
  except ValueError:
    raise cli.CliError(f"--seeds={text!r}: expected comma-separated integers") from None
  if not seeds or len(set(seeds)) != len(seeds):
    raise cli.CliError(f"--seeds={text!r}: give one or more distinct integers")
  return seeds


def parse_args(argv: Sequence[str] | None):
  parser = cli.ArgumentParser(prog="slm_jax.finetune", description=__doc__.split("\n\n")[0])
  parser.add_argument("--task", required=True, choices=TASKS)
  parser.add_argument("--workdir", required=True, help="the trained run to start from")
  parser.add_argument("--out", required=True, help="output folder: one OUT/seed<S>/ per seed")
  parser.add_argument("--data_dir", default=None,
                      help="the task's data folder (default: ../shared/data/<task>)")
  parser.add_argument("--seeds", default=DEFAULT_SEEDS, type=_seeds)
  parser.add_argument("--epochs", type=int, default=None, help="default: 3 (xsum), 5 (boolq)")
  parser.add_argument("--lr", type=float, default=None, help="default: 6e-5 (xsum), 3e-4 (boolq)")
  parser.add_argument("--batch_size", type=int, default=None, help="default: 40")
  parser.add_argument("--max_len", type=int, default=2048, help="tokens per row")
  parser.add_argument("--warmup_steps", type=int, default=100)
  parser.add_argument("--limit", type=int, default=0, help="first N training examples (0 = all)")
  parser.add_argument("--micro_batches", type=int, default=1,
                      help="gradient accumulation inside a step (the same update, less memory)")
  parser.add_argument("--tree_source", default="parser",
                      help="trees of the text: parser | parser:DIR | flat | file:PATH")
  parser.add_argument("--log_every", type=int, default=10)
  parser.add_argument("--checkpoint_every", type=int, default=500)
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  workdir = pathlib.Path(args.workdir)
  if not workdir.is_dir():
    raise cli.CliError(f"--workdir={workdir}: no such folder (give a trained run's workdir)")
  data_dir = (pathlib.Path(args.data_dir) if args.data_dir
              else cli.shared_data(args.task, "--data_dir"))
  if not data_dir.is_dir():
    raise cli.CliError(f"--data_dir={data_dir}: no such folder (the {args.task} data)")
  from slm_jax.downstream import finetune  # pylint: disable=g-import-not-at-top  # after flags
  from slm_jax.downstream.finetune_data import encode_rows  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.tasks import read_task  # pylint: disable=g-import-not-at-top
  from slm_jax.train.loading import load_run  # pylint: disable=g-import-not-at-top
  defaults = finetune.TASK_DEFAULTS[args.task]
  settings = finetune.FinetuneSettings(
      task=args.task, source=str(workdir.resolve()),
      epochs=args.epochs if args.epochs is not None else defaults["epochs"],
      lr=args.lr if args.lr is not None else defaults["lr"],
      batch_size=args.batch_size if args.batch_size is not None else defaults["batch_size"],
      max_len=args.max_len, warmup_steps=args.warmup_steps, micro_batches=args.micro_batches,
      limit=args.limit, tree_source=args.tree_source, log_every=args.log_every,
      checkpoint_every=args.checkpoint_every)
  loaded = load_run(workdir, dtype=None)  # train in the run's own compute dtype
  print(f"source: {workdir} step {loaded.step} ({loaded.configuration.name})", flush=True)
  examples = read_task(args.task, data_dir, "train", limit=settings.limit or None)
  log = lambda line: print(line, flush=True)
  encoder = finetune.make_encoder(loaded, settings.tree_source)
  rows, stats = encode_rows(examples, encoder.encode, settings.max_len, prefetch=encoder.prefetch,
                            log=log)
  trees = dict(encoder.tree_source.stats) if encoder.tree_source is not None else {}
  log(f"{args.task} train: {stats.summary()}" + (f"; trees {trees}" if trees else ""))
  summaries = finetune.finetune_seeds(loaded, rows, stats, settings, args.seeds, args.out,
                                      log=log)
  for summary in summaries:
    print(f"seed {summary['seed']}: {summary['steps']} steps, final loss "
          f"{summary['final_loss']:.4f} -> {summary['workdir']}")
  return cli.EXIT_OK


if __name__ == "__main__":
  sys.exit(cli.run(main))
