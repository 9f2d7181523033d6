"""pushdown (SPEC §14, the Pushdown reference) at scale 1b; every setting comes from
slm_jax.config_builder."""

from slm_jax import config_builder


def get_config():
  return config_builder.build("pushdown", "1b")
