"""pause1 (SPEC §5) at scale 500m; every setting comes from slm_jax.train.run_config."""

from slm_jax.train import run_config


def get_config():
  return run_config.build("pause1", "500m")
