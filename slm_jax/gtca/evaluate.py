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


@cli.options
class GtcaEvaluateOptions:
  """The flags of `python -m slm_jax.gtca.evaluate` (the module docstring)."""

  runs: tuple[str, ...] | None = cli.option(None, help="a folder searched for result.json "
                                            "files (repeatable), or one file")
  out: str = cli.option("", help="also write the tables to this Markdown file")
  run: str | None = cli.option(None, help="instead of --runs: score this finished run on "
                               "--task")
  task: str | None = cli.option(None, help="cloth, mmlu, hellaswag, winogrande, cola or blimp")
  data_root: str | None = cli.option(None, help="the set's Hugging Face download")
  cache: str | None = cli.option(None, help="the parse cache of the set's prompts for the run's "
                                 "backbone")
  limit: int = cli.option(0, help="first N evaluation rows (blimp: N pairs per paradigm; 0: "
                          "all)")
  fit_limit: int = cli.option(0, help="CoLA: first N train rows fit the acceptability threshold "
                              "(0: all)")
  force: bool = cli.option(False, help="--run: evaluate again although DIR/eval_SET.json exists "
                           "(the old file is kept as eval_SET.N.json)")
  cola: str = cli.option("prompt", choices=("prompt", "threshold"), help="CoLA: the prompted 0/1"
                         " judgment, p(1) vs p(0) after Answer: (the paper's), or the sentence "
                         "likelihood against a fitted threshold")

  def validate(self) -> None:
    if bool(self.runs) == bool(self.run):
      raise cli.CliError("give --runs (tables of finished runs) or --run with --task (score "
                         "one)")
    if self.run and (not self.task or not self.data_root or not self.cache):
      raise cli.CliError("--run needs --task, --data_root (the set's download) and --cache "
                         "(its parse cache)")


def evaluate(options: GtcaEvaluateOptions, log=print) -> None:
  """`--run`: scores a finished training run on a real set; `--runs`: the result tables
  (printed, and written to `--out`)."""
  if options.run:
    out = evaluate_saved_run(options.run, options.task, options.data_root, options.cache,
                             limit=options.limit, fit_limit=options.fit_limit,
                             cola=options.cola, force=options.force, log=log)
    written = pathlib.Path(options.run) / f"eval_{options.task}.json"
    log(f"{options.task}: " + ", ".join(f"{k} {v:.3f}" for k, v in out["metrics"].items())
        + f"; truncated {out['counts']['truncated']} -> {written}")
    return
  text = report(collect(list(options.runs)))
  log(text)
  if options.out:
    pathlib.Path(options.out).write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
  options = cli.parse_options(GtcaEvaluateOptions, argv, doc=__doc__.split("\n\n")[0])
  evaluate(options, log=lambda line: print(line, flush=True))
  return 0


if __name__ == "__main__":
  sys.exit(cli.run(main))
