"""GTCA's methods, ablation switches and stage plans, and the settings a run depends on (SPEC §10).

`Settings` is everything a run depends on (stored in result.json and every checkpoint's extra,
validated at construction: a typed `slm_jax.sections` section, the root of
`run_config.GtcaTrainConfig`). `plan(settings)` gives its stages: `backbone` none, `lora_only` one
LoRA stage at α = 0, `direct_joint` one LoRA + GTCA stage at α = 0.15, `gtca` the paper's three
(LoRA at α = 0; GTCA with α warmed linearly over the first 10% of its steps, `ramp`; both at
α = 0.15). `ABLATION_SWITCHES` maps each ablation to its branch options and tree source; every
ablation runs the `gtca` plan; `variant` maps a table row (a method or an ablation) to both.
`slm_jax.gtca.runs` runs them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from slm_jax import cli
from slm_jax.gtca.mcqa_data import MCQA_SETS
from slm_jax.gtca.spans import K
from slm_jax.sections import Rules, option

METHODS = ("backbone", "lora_only", "direct_joint", "gtca")
ABLATION_SWITCHES = {  # ablation -> (gtca config options, tree source)
    "none": ({}, "gold"),
    "no_gate": ({"gate": "one"}, "gold"),
    "no_mask": ({"use_update_mask": False}, "gold"),
    "weak_parser": ({}, "weak"),  # trees of a genuinely weaker trained parser (weak_parser)
    "right_branching": ({}, "right_branching"),
    "random_trees": ({}, "random"),
    "permuted_trees": ({}, "permuted"),
}
ALPHA = 0.15
WARM_FRACTION = 0.1


# ---- settings -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Settings:
  """Everything a run depends on (stored in result.json and every checkpoint's extra): a
  `slm_jax.sections` section (types, then every rule at once: `SectionError`). The fields
  without `config=False` are also keys of `gtca.train --config` (`run_config.GtcaTrainConfig`)."""
  backbone: str
  out: str
  method: str = option("gtca", config=False)  # one run's: from the sweep's methods × seeds
  ablation: str = option("none", config=False)
  seed: int = option(0, config=False)
  stage_steps: tuple[int, ...] = (200, 200, 200)
  batch_size: int = 16
  lr: float = 1e-3
  alpha: float = ALPHA
  lora_rank: int = 8
  lora_alpha: float = 16.0
  lora_dropout: float = 0.05
  k: int = K
  task_seed: int = 0
  train_items: int = 2000
  dev_items: int = 200
  test_items: int = 500
  option_order: str = "random"
  blimp_pairs: bool = True  # also score the test items as BLiMP-style minimal pairs
  checkpoint_every: int = 100
  log_every: int = 50
  task: str = "toy"  # or a real MCQA set (`mcqa_data.MCQA_SETS`) read from data_root
  data_root: str = ""
  cache: str = ""  # the parse cache of the real set's prompts (python -m slm_jax.gtca.cache)
  n_options: int = option(2, config=False)  # option letters the backbone's prompt tokenizer has
  shared_cross_attention: bool = False  # one cross-attention module for all layers (ablation)
  weak_parser: str = ""  # the weak-parser ablation's parser folder (toy task)

  def __post_init__(self):
    rules = Rules("", self)
    if rules.typed:
      self.check(rules.need)
    rules.done()

  def check(self, need: Callable[[bool, str], None]) -> None:
    """The value rules (the types are checked first, by `sections.Rules`)."""
    need(self.task == "toy" or self.task in MCQA_SETS,
         f"task {self.task!r} is not toy or one of {', '.join(MCQA_SETS)}")
    need(self.task == "toy" or bool(self.data_root and self.cache),
         f"task {self.task!r} needs data_root (its download) and cache")
    need(self.method in METHODS, f"method {self.method!r} is not one of {', '.join(METHODS)}")
    need(self.ablation in ABLATION_SWITCHES,
         f"ablation {self.ablation!r} is not one of {', '.join(ABLATION_SWITCHES)}")
    need(self.ablation == "none" or self.method == "gtca",
         f"ablation {self.ablation!r} applies to method gtca, not {self.method!r}")
    need(len(self.stage_steps) == 3 and min(self.stage_steps, default=0) >= 1,
         f"stage_steps {self.stage_steps} must be three positive step counts")
    need(self.option_order in ("random", "fixed"),
         f"option_order {self.option_order!r} is not random or fixed")
    need(self.batch_size >= 1 and self.lr > 0 and self.alpha >= 0,
         "batch_size ≥ 1, lr > 0 and alpha ≥ 0 are required")
    need(self.log_every >= 1 and self.checkpoint_every >= 1,
         "log_every and checkpoint_every must be positive")
    need(not (self.ablation == "weak_parser" and self.task == "toy" and not self.weak_parser),
         "ablation weak_parser needs weak_parser=FOLDER (a weaker trained parser)")

  @property
  def name(self) -> str:
    """The row of the result tables: the method, or the ablation of the gtca plan."""
    return self.method if self.ablation == "none" else self.ablation


@dataclasses.dataclass(frozen=True)
class Stage:
  name: str
  trainable: str  # optimizer.trainable groups: "lora", "gtca", "lora,gtca"
  steps: int
  alpha: Callable[[int], float]  # step (0-based) -> α


def ramp(alpha: float, steps: int, fraction: float = WARM_FRACTION) -> Callable[[int], float]:
  """α at 0-based step s: alpha · min(1, (s + 1) / ⌈fraction · steps⌉) (linear warm-up)."""
  warm = max(1, math.ceil(fraction * steps))
  return lambda step: alpha * min(1.0, (step + 1) / warm)


def plan(settings: Settings) -> list[Stage]:
  """The stages of a method (module docstring)."""
  s1, s2, s3 = settings.stage_steps
  total, a = s1 + s2 + s3, settings.alpha
  if settings.method == "backbone":
    return []
  if settings.method == "lora_only":
    return [Stage("lora", "lora", total, lambda _: 0.0)]
  if settings.method == "direct_joint":
    return [Stage("joint", "lora,gtca", total, lambda _: a)]
  return [Stage("lora", "lora", s1, lambda _: 0.0), Stage("gtca", "gtca", s2, ramp(a, s2)),
          Stage("joint", "lora,gtca", s3, lambda _: a)]


def eval_alpha(settings: Settings) -> float:
  """α at evaluation: 0 for methods without a trained branch."""
  return 0.0 if settings.method in ("backbone", "lora_only") else settings.alpha


def variant(name: str) -> tuple[str, str]:
  """A table row name → (method, ablation): `gtca`, `lora_only`, … or an ablation (`no_gate`)."""
  if name in METHODS:
    return name, "none"
  if name in ABLATION_SWITCHES and name != "none":
    return "gtca", name
  raise cli.CliError(f"unknown method or ablation {name!r}; expected one of "
                     f"{', '.join(METHODS + tuple(a for a in ABLATION_SWITCHES if a != 'none'))}")
