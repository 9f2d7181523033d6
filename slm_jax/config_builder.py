"""The old name of `slm_jax.train.run_config`, kept so users' own config files keep working.

`from slm_jax import config_builder; config_builder.build("tgtree", "1b")` (and `validate`,
`load_config`, `RunConfig`, `ConfigError`, `did_you_mean`, …) are the same objects as in
`slm_jax.train.run_config` and `slm_jax.config_files`. Code inside `slm_jax` imports those
(tests/test_config_files.py checks that nothing imports this module); new config files should too.
"""

from slm_jax.config_files import did_you_mean  # noqa: F401  # pylint: disable=unused-import
from slm_jax.train.run_config import *  # noqa: F401,F403  # pylint: disable=wildcard-import
