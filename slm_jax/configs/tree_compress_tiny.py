"""tree_compress (SPEC §5) at scale tiny; every setting comes from slm_jax.train.run_config."""

from slm_jax.train import run_config


def get_config():
  return run_config.build("tree_compress", "tiny")
