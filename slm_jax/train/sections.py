"""The `train` and `eval` sections of a run's config: the loop's cadence and its held-out eval.

Each is a frozen dataclass whose `__post_init__` holds its rules (`slm_jax.sections`); rules that
join sections (the global batch against the optimizer's accumulation steps) live in
`run_config.RunConfig`.
"""

from __future__ import annotations

import dataclasses

from slm_jax.sections import Rules, option

EVAL_SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class TrainSection:
  steps: int  # optimizer updates of the whole run
  global_batch: int  # sequences per update, all hosts
  log_every: int
  eval_every: int  # 0 = never (the final evaluation always runs)
  checkpoint_every: int  # 0 = only the final step
  seed: int
  train_tokens: int  # D of the Step Law (SPEC §7), for the record
  # Live syntactic metrics (slm_jax.eval.live): every N steps a fixed SG / BLiMP subset is
  # scored and logged beside the loss. 0 = never; keys absent from older configs take these.
  eval_syntax_every: int = option(0, required=False)
  eval_syntax_sg_items: int = option(1, required=False)  # items of each of the 6 live suites
  eval_syntax_blimp_pairs: int = option(1, required=False)  # pairs of each BLiMP phenomenon
  eval_syntax_beam: int = option(4, required=False)  # tree models' beam b (= fast track)
  eval_syntax_data: str = option("", required=False)  # "" = the shared data folder

  def __post_init__(self):
    rules = Rules("train", self)
    if rules.typed:
      for key in ("steps", "global_batch", "log_every", "train_tokens", "eval_syntax_sg_items",
                  "eval_syntax_blimp_pairs", "eval_syntax_beam"):
        rules.need(getattr(self, key) > 0, f"{key} must be positive, got {getattr(self, key)}")
      for key in ("eval_every", "checkpoint_every", "eval_syntax_every"):
        rules.need(getattr(self, key) >= 0,
                   f"{key} must be ≥ 0 (0 = never), got {getattr(self, key)}")
    rules.done()


@dataclasses.dataclass(frozen=True)
class EvalSection:
  split: str
  batch_size: int
  max_batches: int  # 0 = all
  proposals: int  # doc-PPL K

  def __post_init__(self):
    rules = Rules("eval", self)
    if rules.typed:
      rules.need(self.batch_size > 0 and self.max_batches >= 0 and self.proposals > 0,
                 "batch_size and eval.proposals must be positive, eval.max_batches ≥ 0 (0 = all)")
      rules.need(self.split in EVAL_SPLITS,
                 f"split={self.split!r} is not one of {', '.join(EVAL_SPLITS)}")
    rules.done()
