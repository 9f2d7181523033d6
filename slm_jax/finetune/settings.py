"""The settings of an XSum / BoolQ fine-tune (SPEC §11, paper App. C): a `sections` section, read
by `python -m slm_jax.finetune` through the one config loader (`slm_jax.config_files`).

`FinetuneSettings` holds everything that fixes a fine-tuning trajectory but the seed; its record
(`to_dict`, with the source run) is saved in every seed folder's `finetune.json` and compared
before a seed folder is reused (`slm_jax.finetune.trainer`). `epochs`, `lr` and `batch_size`
left at None take the task's paper values (`TASK_DEFAULTS`). `LOADER` reads them from
`--config=FILE|NAME` (packaged configs in `finetune/configs/`: `tiny`) and overrides.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from slm_jax.config_files import ConfigLoader
from slm_jax.sections import Rules, option

TASK_DEFAULTS = {  # SPEC §11 / paper App. C
    "xsum": {"epochs": 3, "lr": 6e-5, "batch_size": 40},
    "boolq": {"epochs": 5, "lr": 3e-4, "batch_size": 40},
}
CONFIG_DIR = pathlib.Path(__file__).resolve().parent / "configs"


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
  """Everything that fixes a fine-tuning trajectory (but the seed), saved in `finetune.json`."""
  task: str  # xsum | boolq
  source: str = option(config=False)  # the trained run's workdir (set from --workdir)
  epochs: int | None = None  # None: the task's (TASK_DEFAULTS)
  lr: float | None = None  # None: the task's
  batch_size: int | None = None  # None: the task's
  max_len: int = 2048  # tokens per row
  warmup_steps: int = 100
  min_lr: float = 1e-6
  weight_decay: float = 0.1
  b1: float = 0.9
  b2: float = 0.95
  eps: float = 1e-8
  clip: float = 1.0
  micro_batches: int = 1  # gradient accumulation inside one step (same update)
  limit: int = 0  # first N training examples only (0 = all)
  tree_source: str = "parser"  # parser | parser:DIR | flat | file:PATH
  xsum_train: str = "subset"  # subset (the paper's 17,904 rows) | full (`downstream.xsum_subset`)
  xsum_train_ids: str = ""  # a JSON list of ids for `subset` ("" = the derived rule)
  log_every: int = 10
  checkpoint_every: int = 500

  RESUMABLE = ("log_every", "checkpoint_every")  # may change when a seed resumes

  def __post_init__(self):
    rules = Rules("", self)
    if rules.typed:
      known = self.task in TASK_DEFAULTS
      rules.need(known, f"task={self.task!r} is not one of {', '.join(TASK_DEFAULTS)}")
      for name in ("epochs", "lr", "batch_size"):
        if getattr(self, name) is None and known:
          object.__setattr__(self, name, TASK_DEFAULTS[self.task][name])
      for name in ("epochs", "lr", "batch_size", "max_len", "micro_batches", "log_every",
                   "checkpoint_every"):
        value = getattr(self, name)
        rules.need(value is None or value > 0, f"{name} must be positive, got {value}")
      rules.need(self.xsum_train in ("subset", "full"),
                 f"xsum_train must be subset or full, got {self.xsum_train!r}")
      for name in ("warmup_steps", "limit"):
        rules.need(getattr(self, name) >= 0, f"{name} must be ≥ 0, got {getattr(self, name)}")
      if self.batch_size is not None and self.micro_batches > 0:
        rules.need(self.batch_size % self.micro_batches == 0,
                   f"batch_size={self.batch_size} is not a multiple of "
                   f"micro_batches={self.micro_batches}")
    rules.done()

  def to_dict(self) -> dict[str, Any]:
    """The record of `finetune.json` (every field, the source run included)."""
    return dataclasses.asdict(self)


LOADER = ConfigLoader(FinetuneSettings, folder=CONFIG_DIR)
