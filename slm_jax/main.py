"""Train a syntactic language model.

  python -m slm_jax.main --config=configs/tgtree_tiny.py --workdir=runs/tgtree_tiny
  python -m slm_jax.main --config=configs/tg_tiny.py --config.train.steps=50 --workdir=/tmp/tg

`--config=FILE|NAME` is a config file or a packaged name (`--config=tgtree_tiny`); each
`--config.KEY=VALUE` overrides one key. The config is read and validated at start-up by the one
config loader (`slm_jax.config_files`: unknown keys with did-you-mean hints, wrong types and
impossible combinations, every problem in one line naming the file or flag). Rerunning the same
command in the same workdir resumes from the newest checkpoint; a command for another run
(configuration, model, data, tokenizer, …) is refused before anything is written
(`slm_jax/train/workdir.py`); a second trainer on a workdir in use is refused
(`slm_jax.locks`: "WORKDIR: in use by pid N on HOST since TIME"). Exit codes: 0 done (or
nothing to do), 2 bad input, 3 non-finite loss; `--debug` shows tracebacks.
"""

from __future__ import annotations

import contextlib
import sys

from absl import app, flags, logging

from slm_jax import cli, config_files, configs, locks

_CONFIG = flags.DEFINE_string(
    "config", None, "FILE|NAME: a config file (configs/<name>_<scale>.py: get_config() returns "
    "the run's config) or a packaged name such as tgtree_1b; --config.KEY=VALUE overrides a key "
    "(--config.train.steps=50).")
_OVERRIDES: list[str] = []  # the --config.KEY=VALUE arguments (parse_flags takes them from argv)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder: checkpoints, metrics, tokenizer. "
                               "Default: the config's checkpoint.dir.")


_DEBUG = flags.DEFINE_bool("debug", False, "Show the traceback of an error (default: one line).")


def _fmt(value: float | None, digits: int) -> str:
  return "none" if value is None else f"{value:.{digits}f}"


def summary_lines(cfg, summary) -> list[str]:
  """The one-screen summary printed at the end of a run."""
  held_out = (["held-out  none (the run has no held-out documents)"]
              if summary.eval_loss is None else [
                  f"held-out  loss {_fmt(summary.eval_loss, 4)}   terminal perplexity "
                  f"{_fmt(summary.eval_terminal_ppl, 3)} (terminal + EOS tokens, given the gold "
                  "tree)",
                  f"          joint perplexity {_fmt(summary.eval_joint_ppl, 3)} (all targets "
                  "per terminal + EOS token; an upper bound on the marginal for tree models)"])
  return [
      "=" * 72,
      f"run       {cfg.configuration.name} ({cfg.configuration.linearization} + "
      f"{cfg.configuration.attention}), scale {cfg.scale}",
      f"workdir   {summary.workdir}" + (f" (resumed from step {summary.resumed_from})"
                                        if summary.resumed_from else ""),
      f"steps     {summary.steps}   tokens trained this run {summary.tokens_trained:,}",
      f"train     final loss {summary.final_train_loss:.4f}",
      *held_out,
      f"time      {summary.seconds:.0f} s",
      "=" * 72]


def _train() -> int:
  # pylint: disable-next=g-import-not-at-top  # after flags
  from slm_jax.train import run_config, sharding, trainer
  if _CONFIG.value is None:
    raise cli.CliError("--config is required: configs/<name>_<scale>.py or a packaged name "
                       "(e.g. --config=tgtree_tiny)")
  cfg = run_config.load_config(_CONFIG.value, _OVERRIDES, folder=configs.FOLDER)
  workdir = _WORKDIR.value or cfg.checkpoint.dir
  sharding.initialize_distributed(cfg.mesh.distributed)  # before any device query
  import jax  # pylint: disable=g-import-not-at-top
  from slm_jax.eval.live import LiveSyntax  # pylint: disable=g-import-not-at-top
  # one writer per workdir (the lead process of a multi-host run holds it for all)
  with (locks.writer_lock(workdir, what="training") if jax.process_index() == 0
        else contextlib.nullcontext()):
    summary = trainer.train(cfg, workdir, live_metrics=LiveSyntax)
  print("\n".join(summary_lines(cfg, summary)))
  return cli.EXIT_OK


def main(argv: list[str]) -> int:
  """absl entry point: every expected error is one `error: …` line and an exit code
  (`slm_jax.cli`: 2 bad input, 3 non-finite loss; --debug shows the traceback)."""
  del argv
  if not flags.FLAGS["verbosity"].present:  # Orbax logs every save at INFO: keep the console
    logging.set_verbosity(logging.WARNING)   # readable
  return cli.run(lambda _: _train(), [], debug=_DEBUG.value)


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing of every flag but the `--config.KEY=VALUE` overrides (kept for the config
  loader), with the CLI error contract: a bad flag is one `error: …` line and exit 2 (absl would
  print a traceback)."""
  _OVERRIDES[:], argv = config_files.split_overrides(argv)
  try:
    return flags.FLAGS(argv)
  except Exception as error:  # pylint: disable=broad-except  # flags.Error
    if "--debug" in argv:
      raise
    print(f"error: {cli.describe_error(error)}", file=sys.stderr)
    sys.exit(cli.EXIT_USAGE)


def run() -> None:
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  run()
