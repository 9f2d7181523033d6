"""`python -m slm_jax.gtca.evaluate`: GTCA result tables, or one finished run scored on a real set.

`python -m slm_jax.gtca.evaluate --runs=DIR [--runs=DIR …] [--out=FILE.md]` reads every
`result.json` that `python -m slm_jax.gtca.train` wrote under the DIRs (one per method, ablation
and seed), groups them by method and prints both tables (`slm_jax.gtca.report`: the paper's main
and ablation layouts, mean ± SD over seeds, the columns some run measured).
`python -m slm_jax.gtca.evaluate --run=DIR --task=SET --data_root=DOWNLOAD --cache=FILE` scores
one finished run on a real set (CLOTH, MMLU, HellaSwag, WinoGrande by letter log-likelihood;
CoLA as MCC of the prompted 0/1 judgment, `--cola=threshold` the likelihood-threshold variant;
BLiMP's pairs, `--limit` = pairs per paradigm; `slm_jax.gtca.real_sets`), writes
DIR/eval_SET.json and adds the metrics (and the counts, under `eval_counts`) to its result.json
(`slm_jax.gtca.runs.evaluate_saved_run`); an existing eval_SET.json is refused unless `--force`,
which keeps it as eval_SET.N.json. The metrics: `slm_jax.gtca.metrics`.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Sequence

from slm_jax import cli
from slm_jax.gtca.report import collect, report
from slm_jax.gtca.runs import evaluate_saved_run


def _evaluate_run(args) -> int:
  """`--run=DIR --task=SET`: score a finished training run on a real set."""
  if not args.task or not args.data_root or not args.cache:
    raise cli.CliError("--run needs --task, --data_root (the set's download) and --cache (its "
                       "parse cache)")
  log = lambda line: print(line, flush=True)
  out = evaluate_saved_run(args.run, args.task, args.data_root, args.cache, limit=args.limit,
                           fit_limit=args.fit_limit, cola=args.cola, force=args.force,
                           log=log)
  written = pathlib.Path(args.run) / f"eval_{args.task}.json"
  log(f"{args.task}: " + ", ".join(f"{k} {v:.3f}" for k, v in out["metrics"].items())
      + f"; truncated {out['counts']['truncated']} -> {written}")
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--runs", action="append",
                      help="a folder searched for result.json files (repeatable), or one file")
  parser.add_argument("--out", default="", help="also write the tables to this Markdown file")
  parser.add_argument("--run", help="instead of --runs: score this finished run on --task")
  parser.add_argument("--task", help="cloth, mmlu, hellaswag, winogrande, cola or blimp")
  parser.add_argument("--data_root", help="the set's Hugging Face download")
  parser.add_argument("--cache", help="the parse cache of the set's prompts for the run's backbone")
  parser.add_argument("--limit", type=int, default=0,
                      help="first N evaluation rows (blimp: N pairs per paradigm; 0: all)")
  parser.add_argument("--fit_limit", type=int, default=0,
                      help="CoLA: first N train rows fit the acceptability threshold (0: all)")
  parser.add_argument("--force", action="store_true",
                      help="--run: evaluate again although DIR/eval_SET.json exists (the old "
                      "file is kept as eval_SET.N.json)")
  parser.add_argument("--cola", choices=("prompt", "threshold"), default="prompt",
                      help="CoLA: the prompted 0/1 judgment, p(1) vs p(0) after Answer: (the "
                      "paper's), or the sentence likelihood against a fitted threshold")
  args = parser.parse_args(argv)
  if bool(args.runs) == bool(args.run):
    raise cli.CliError("give --runs (tables of finished runs) or --run with --task (score one)")
  if args.run:
    return _evaluate_run(args)
  text = report(collect(args.runs))
  print(text)
  if args.out:
    pathlib.Path(args.out).write_text(text)
  return 0


if __name__ == "__main__":
  sys.exit(cli.run(main))
