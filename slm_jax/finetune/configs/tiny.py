"""A fine-tune of a few CPU seconds per seed, to check the wiring (not for results): one epoch of
the first 16 examples, batch 4, rows of at most 256 tokens, no warm-up, a log line every step.

  python -m slm_jax.finetune --config=tiny --task=xsum --workdir=runs/tree_tiny --out=/tmp/ft
"""


def get_config():
  return {"epochs": 1, "batch_size": 4, "max_len": 256, "warmup_steps": 0, "limit": 16,
          "log_every": 1}
