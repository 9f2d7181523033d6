"""Training: Step Law, optimizer and schedule (the train loop builds on these)."""

from slm_jax.train.optimizer import decay_mask, make_optimizer, make_schedule, warmup_cosine
from slm_jax.train.step_law import StepLaw, step_law

__all__ = ["StepLaw", "decay_mask", "make_optimizer", "make_schedule", "step_law", "warmup_cosine"]
