"""Frozen configurations of the chart parser: the model (`ModelConfig`) and its training
(`TrainConfig`), with the named presets `tiny` (tests), `default` (CPU) and `gpu` (full training on
an accelerator). `ModelConfig` is saved beside the weights (`config.json`), so a shipped model is
rebuilt from it alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ModelConfig:
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
    if self.encoder not in ("bilstm", "transformer"):
      raise ValueError(f"encoder must be 'bilstm' or 'transformer', got {self.encoder!r}")
    if self.encoder == "transformer" and (2 * self.hidden) % self.heads:
      raise ValueError(f"2 × hidden ({2 * self.hidden}) must divide into {self.heads} heads")

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, data: dict[str, Any]) -> ModelConfig:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
      raise ValueError(f"unknown parser model settings: {', '.join(unknown)}")
    return cls(**data)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Optimization, batching, evaluation and stopping."""

  model: ModelConfig = ModelConfig()
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
    if self.schedule not in ("plateau", "cosine"):
      raise ValueError(f"schedule must be 'plateau' or 'cosine', got {self.schedule!r}")
    if self.tag_weight < 0:
      raise ValueError(f"tag_weight must be ≥ 0, got {self.tag_weight}")
    if self.members < 1:
      raise ValueError(f"members must be ≥ 1, got {self.members}")


TINY = TrainConfig(
    model=ModelConfig(char_dim=8, char_filters=16, max_word_chars=12, word_dim=16, hidden=16,
                      layers=1, heads=2, ff_dim=32, mlp_dim=16, dropout=0.1, max_words=160),
    learning_rate=5e-3, warmup_steps=5, batch_words=120, buckets=(8, 16, 32, 64),
    max_train_words=64, min_word_count=1, max_epochs=3, patience=2, log_every=2,
    checkpoint_every_s=1e9, tag_weight=0.5)
# CPU: 20 epochs of a cosine with the POS head, three seeds ensembled (the shipped GUM model;
# 40–75 min per member on 2 cores).
DEFAULT = TrainConfig(schedule="cosine", max_epochs=20, tag_weight=0.5, members=3)
# The default's recipe (cosine, POS head) on a wider, deeper encoder; not yet run on an accelerator.
GPU = TrainConfig(
    model=ModelConfig(char_filters=256, word_dim=300, hidden=400, layers=3, mlp_dim=500),
    batch_words=3000, max_train_words=304, max_epochs=60, patience=8, schedule="cosine",
    tag_weight=0.5)
CONFIGS = {"tiny": TINY, "default": DEFAULT, "gpu": GPU}


def named_config(name: str) -> TrainConfig:
  try:
    return CONFIGS[name]
  except KeyError:
    raise ValueError(f"unknown parser config {name!r}; choose from {', '.join(CONFIGS)}") from None
