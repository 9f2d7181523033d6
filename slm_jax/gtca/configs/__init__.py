"""Packaged GTCA train configs (`python -m slm_jax.gtca.train --config=NAME`); the keys and the
precedence rules are `slm_jax.gtca.run_config`'s."""
