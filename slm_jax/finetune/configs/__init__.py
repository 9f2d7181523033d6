"""Packaged fine-tuning configs (`python -m slm_jax.finetune --config=NAME`); the keys are
`slm_jax.finetune.settings.FinetuneSettings`'s fields."""
