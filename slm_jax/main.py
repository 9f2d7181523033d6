"""Train a syntactic language model.

  python -m slm_jax.main --config=configs/tgtree_tiny.py --workdir=runs/tgtree_tiny
  python -m slm_jax.main --config=configs/tg_tiny.py --config.train.steps=50 --workdir=/tmp/tg

The config is validated at start-up (unknown keys and impossible combinations fail with a clear
message). Rerunning the same command in the same workdir resumes from the newest checkpoint.
"""

from __future__ import annotations

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from slm_jax import config_builder

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>_<scale>.py file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder: checkpoints, metrics, tokenizer. "
                               "Default: the config's checkpoint.dir.")


def main(argv: list[str]) -> int:
  del argv
  if not flags.FLAGS["verbosity"].present:  # Orbax logs every save at INFO; keep the console readable
    logging.set_verbosity(logging.WARNING)
  from slm_jax.train import trainer  # pylint: disable=g-import-not-at-top  # after flag parsing
  cfg = _CONFIG.value
  if cfg is None:
    print("error: --config=configs/<name>_<scale>.py is required", file=sys.stderr)
    return 2
  try:
    config_builder.validate(cfg)
  except ValueError as error:
    print(f"error: invalid config: {error}", file=sys.stderr)
    return 2
  workdir = _WORKDIR.value or cfg.checkpoint.dir
  from slm_jax.train import sharding  # pylint: disable=g-import-not-at-top
  try:
    sharding.initialize_distributed(cfg.mesh.distributed)  # before any device query
    summary = trainer.train(cfg, workdir)
  except trainer.NonFiniteLossError as error:
    print(f"error: {error}", file=sys.stderr)
    return 3
  except sharding.MeshError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  print("\n".join([
      "=" * 72,
      f"run       {cfg.configuration.name} ({cfg.configuration.linearization} + "
      f"{cfg.configuration.attention}), scale {cfg.scale}",
      f"workdir   {summary.workdir}" + (f" (resumed from step {summary.resumed_from})"
                                        if summary.resumed_from else ""),
      f"steps     {summary.steps}   tokens trained this run {summary.tokens_trained:,}",
      f"train     final loss {summary.final_train_loss:.4f}",
      f"held-out  loss {summary.eval_loss:.4f}   terminal perplexity "
      f"{summary.eval_terminal_ppl:.3f} (terminal + EOS tokens, given the gold tree)",
      f"          joint perplexity {summary.eval_joint_ppl:.3f} (all targets per terminal + EOS "
      "token; an upper bound on the marginal for tree models)",
      f"time      {summary.seconds:.0f} s",
      "=" * 72]))
  return 0


def run() -> None:
  app.run(main)


if __name__ == "__main__":
  run()
