"""Frozen configurations of the chart parser: the model (`ParserModelConfig`) and its training
(`ParserTrainConfig`, whose `model` key holds the model's), both `sections` sections with their rules in
`__post_init__` (every problem at once). `LOADER` reads them through the one config loader
(`slm_jax.config_files`: `python -m slm_jax.parser.train --config=FILE|NAME --config.KEY=VALUE`);
the packaged configs (`parser/configs/`) are `tiny` (tests), `default` (CPU) and `gpu` (full
training on an accelerator), `named_config(NAME)` loads one. `ParserModelConfig` is saved beside the
weights (`config.json`), so a shipped model is rebuilt from it alone (`ParserModelConfig.from_json`,
checked by the same loader).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from slm_jax import sections
from slm_jax.config_files import ConfigLoader
from slm_jax.sections import Rules

ENCODERS = ("bilstm", "transformer")
SCHEDULES = ("plateau", "cosine")
CONFIG_DIR = pathlib.Path(__file__).resolve().parent / "configs"


@dataclasses.dataclass(frozen=True)
class ParserModelConfig:
  """Word encoder (character CNN + word embeddings → BiLSTM or transformer) and the label MLP."""

  encoder: str = "bilstm"  # "bilstm" | "transformer"
  char_dim: int = 32
  char_filters: int = 128
  char_kernel: int = 3
  max_word_chars: int = 20  # longer words keep their first and last 10 characters
  word_dim: int = 128
  hidden: int = 200  # per direction (BiLSTM) / half the model width (transformer)
  layers: int = 2
  heads: int = 8  # transformer only
  ff_dim: int = 800  # transformer only
  mlp_dim: int = 250
  dropout: float = 0.2
  word_dropout: float = 0.25  # training: a word id becomes UNK with this probability / count
  max_words: int = 300  # the longest sentence the parser accepts

  def __post_init__(self):
    rules = Rules("model", self)
    if rules.typed:
      rules.need(self.encoder in ENCODERS,
                 f"encoder={self.encoder!r} is not one of {', '.join(ENCODERS)}")
      for name in ("char_dim", "char_filters", "char_kernel", "max_word_chars", "word_dim",
                   "hidden", "layers", "heads", "ff_dim", "mlp_dim", "max_words"):
        rules.need(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
      for name in ("dropout", "word_dropout"):
        rules.need(0 <= getattr(self, name) < 1,
                   f"{name} must be in [0, 1), got {getattr(self, name)}")
      if self.encoder == "transformer" and self.heads > 0:
        rules.need((2 * self.hidden) % self.heads == 0,
                   f"heads: 2 × model.hidden ({2 * self.hidden}) must divide into {self.heads} "
                   "heads")
    rules.done()

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, data: dict[str, Any], source: str | None = None) -> ParserModelConfig:
    """The model of a saved `config.json`'s "model" entry (`source`: the file, for problems)."""
    return MODEL_LOADER.validate(data, source=source)


@dataclasses.dataclass(frozen=True)
class ParserTrainConfig:
  """Optimization, batching, evaluation and stopping."""

  model: ParserModelConfig = ParserModelConfig()
  learning_rate: float = 2e-3
  weight_decay: float = 1e-4
  warmup_steps: int = 200
  clip_norm: float = 5.0
  batch_words: int = 1000  # padded words per batch: batch_words // N sentences of bucket N
  buckets: tuple[int, ...] = (16, 32, 48, 80, 144)  # padded lengths (one compilation each)
  max_train_words: int = 144  # longer training sentences are skipped (counted)
  min_word_count: int = 2  # words seen fewer times in training share the UNK embedding
  max_epochs: int = 60
  eval_every: int = 0  # steps between dev evaluations; 0 = once per epoch
  patience: int = 6  # evaluations without a better dev F1 before stopping
  # "plateau": the learning rate × `lr_decay` after `decay_patience` evaluations without gain;
  # "cosine": warmup, then a cosine from `learning_rate` to `final_lr_fraction` × it over
  # `max_epochs` epochs (a run continued with a larger max_epochs follows the new curve).
  schedule: str = "plateau"
  lr_decay: float = 0.5
  decay_patience: int = 2
  final_lr_fraction: float = 0.02
  # Weight of the auxiliary POS-tagging loss (per word, beside the CRF NLL); 0 = no tagging head.
  # Needs POS preterminals in the training trees (GUM's and PTB's have them; sentences without
  # are tagged by nothing and counted).
  tag_weight: float = 0.0
  # > 1: train this many parsers alike, with seeds seed, seed + 1, … (WORKDIR/memberK), and ship
  # the mean of their span scores (`model.Ensemble`, saved in float16), its ∅ bias tuned on dev.
  members: int = 1
  checkpoint_every_s: float = 300.0  # also checkpointed after every evaluation
  max_minutes: float = 0.0  # stop (checkpointed, resumable) after this wall time; 0 = no limit
  log_every: int = 10
  seed: int = 0

  def __post_init__(self):
    rules = Rules("", self)
    if rules.typed:
      rules.need(self.schedule in SCHEDULES,
                 f"schedule={self.schedule!r} is not one of {', '.join(SCHEDULES)}")
      for name in ("learning_rate", "warmup_steps", "batch_words", "max_train_words",
                   "max_epochs", "patience", "decay_patience", "log_every", "members"):
        rules.need(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
      for name in ("weight_decay", "clip_norm", "min_word_count", "eval_every",
                   "tag_weight", "checkpoint_every_s", "max_minutes"):
        rules.need(getattr(self, name) >= 0, f"{name} must be ≥ 0, got {getattr(self, name)}")
      rules.need(0 < self.lr_decay <= 1, f"lr_decay must be in (0, 1], got {self.lr_decay}")
      rules.need(0 <= self.final_lr_fraction <= 1,
                 f"final_lr_fraction must be in [0, 1], got {self.final_lr_fraction}")
      rules.need(bool(self.buckets) and all(b > 0 for b in self.buckets)
                 and list(self.buckets) == sorted(set(self.buckets)),
                 f"buckets={self.buckets} must be positive padded lengths in increasing order")
    rules.done()

  def to_dict(self) -> dict[str, Any]:
    """Every key and its value, nested like a config file (the model under `model`)."""
    return sections.to_dict(self)


LOADER = ConfigLoader(ParserTrainConfig, folder=CONFIG_DIR)
MODEL_LOADER = ConfigLoader(ParserModelConfig)


def named_config(name: str) -> ParserTrainConfig:
  """The packaged config `name` (`tiny`, `default`, `gpu`)."""
  return LOADER.load(name)
