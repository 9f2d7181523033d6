"""Train a syntactic language model.

  python -m slm_jax.main --config=configs/tgtree_tiny.py --workdir=runs/tgtree_tiny
  python -m slm_jax.main --config=configs/tg_tiny.py --config.train.steps=50 --workdir=/tmp/tg

The config is validated at start-up (unknown keys and impossible combinations fail with a clear
message). Rerunning the same command in the same workdir resumes from the newest checkpoint; a
command for another run (configuration, model, data, tokenizer, …) is refused before anything is
written (`slm_jax/train/workdir.py`). Exit codes: 0 done (or nothing to do), 2 bad input, 3
non-finite loss; `--debug` shows tracebacks.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from slm_jax import cli, config_builder, configs

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A config: configs/<name>_<scale>.py, or a packaged name such as tgtree_1b.",
    lock_config=True)
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
  from slm_jax.train import sharding, trainer  # pylint: disable=g-import-not-at-top  # after flags
  if _CONFIG.value is None:
    raise cli.CliError("--config is required: configs/<name>_<scale>.py or a packaged name "
                       "(e.g. --config=tgtree_tiny)")
  cfg = config_builder.validate(_CONFIG.value)
  workdir = _WORKDIR.value or cfg.checkpoint.dir
  sharding.initialize_distributed(cfg.mesh.distributed)  # before any device query
  from slm_jax.eval.live import LiveSyntax  # pylint: disable=g-import-not-at-top
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


def resolve_config_argv(argv: list[str]) -> list[str]:
  """`--config=tgtree_1b` (a packaged config name) → the packaged file; paths are kept."""
  out = list(argv)
  for i, arg in enumerate(out):
    if arg.startswith("--config="):
      out[i] = "--config=" + configs.config_path(arg.removeprefix("--config="))
    elif arg == "--config" and i + 1 < len(out):
      out[i + 1] = configs.config_path(out[i + 1])
  return out


def _override_problems(argv: list[str]) -> list[str]:
  """Unknown keys among the `--config.a.b=v` overrides, with did-you-mean hints."""
  known = config_builder.schema()
  problems = []
  for arg in argv:
    if arg.startswith("--config."):
      key = arg.removeprefix("--config.").split("=", 1)[0]
      if key not in known:
        problems.append(f"unknown key {key} in {arg}{config_builder.did_you_mean(key, known)}")
  return problems


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with the CLI error contract: a bad flag, an unknown config key or an
  unloadable config file is one `error: …` line and exit 2 (absl would print a traceback)."""
  problems = _override_problems(argv)
  for arg in argv:
    path = arg.removeprefix("--config=").partition(":")[0]
    if arg.startswith("--config=") and not os.path.isfile(path):
      problems.append(f"config file {path} not found (give configs/<name>_<scale>.py or a "
                      "packaged name, e.g. --config=tgtree_tiny)")
  if problems:
    print("error: invalid config: " + "; ".join(problems), file=sys.stderr)
    sys.exit(cli.EXIT_USAGE)
  try:
    return flags.FLAGS(argv)
  except Exception as error:  # pylint: disable=broad-except  # flags.Error, config file errors
    if "--debug" in argv:
      raise
    print(f"error: {cli.describe_error(error)}", file=sys.stderr)
    sys.exit(cli.EXIT_USAGE)


def run() -> None:
  sys.argv = resolve_config_argv(sys.argv)
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  run()
