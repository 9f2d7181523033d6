"""Packaged parser training configs (`python -m slm_jax.parser.train --config=NAME`): each
`get_config()` returns the keys it changes from `slm_jax.parser.config.ParserTrainConfig`'s defaults."""
