"""pushdown (SPEC §14, the Pushdown reference) at scale tiny; every setting comes from
slm_jax.train.run_config."""

from slm_jax.train import run_config


def get_config():
  return run_config.build("pushdown", "tiny")
