"""Packaged evaluation configs (`python -m slm_jax.evaluate --protocol=NAME` or `--config=NAME`)."""
