"""A run's config: the one builder (`configs/<name>_<scale>.py` call it) and start-up validation.

`build(name, scale)` gives a locked `ml_collections.ConfigDict` with sections `configuration`,
`model`, `data`, `optimizer`, `train`, `eval`, `checkpoint`, `mesh` (plus the string `scale`).
Each section is ONE frozen dataclass next to the code it configures (`SECTIONS`), whose
`__post_init__` holds its rules; the schema (keys, types, optional values, keys that exist at
one scale only) is read from those dataclasses (`slm_jax.sections`). `validate(cfg)` builds the
typed `RunConfig` and `load_config(FILE|NAME, overrides)` reads a config file with
`--config.KEY=VALUE` overrides, both through the one config loader (`slm_jax.config_files`:
unknown keys with did-you-mean hints, types, every problem of every section at once, the file
named); rules that join sections live in `RunConfig.__post_init__`. (`slm_jax.config_builder` is
this module's old name, kept for users' own config files.)

Scales: `tiny` (a few CPU minutes on the embedded corpus, explicit hyperparameters) and `100m`,
`500m`, `1b` (SPEC §6 dims; peak LR and global batch from the Step Law, SPEC §7, for the
configuration's training-token budget D).

D (tokens incl. BOS/EOS and structural/pause positions; `TRAIN_TOKENS`): 100m/500m use the
deduplicated BBC corpus of SPEC §7 / paper Table 8 (exact); 1b uses FineWeb-Edu, paper Table 2
(lin0 ~98B, lin1 ~233B, lin2 ~301B; pause1/2 = 2×/3× lin0). Other linearizations are derived
from the node count `lin2 - lin1` (one NT token per node per extra copy): lin1_noont = lin0 +
nodes and lin3 = lin2 + nodes (both exact identities; BBC noont matches Table 8), lin1_shuf = lin1;
lin1_merge = lin0 + nodes + closing runs, with runs ≈ 0.4557·nodes as measured on the PTB WSJ
sample (an estimate). The paper's historical 100M runs saw more BBC tokens (10.061B terminal,
24.71B lin1, 32.03B lin2; paper App. D); we use the deduplicated counts at 100m as well.

N for the Step Law is `non_embedding_params` with OLMo's `include_bias=True` (a bias on every
linear layer and norm), the count that reproduces Table 8 (see `slm_jax.train.step_law`); the
paper scales therefore set `model.include_bias=True`, so N is the model's own count. `train.steps` is one epoch, D // (global_batch·seq_len), the
paper's final steps. These values are computed once here: overriding `train.global_batch` or
`data.seq_len` does not recompute LR or steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
from typing import Any, Mapping, Sequence

import ml_collections

from slm_jax import cli, config_files, configurations, sections
from slm_jax.config_files import ConfigError
from slm_jax.data.config import DataSection
from slm_jax.model.config import ModelConfig
from slm_jax.train.checkpointing import CheckpointSection
from slm_jax.train.optimizer import OptimizerSection
from slm_jax.train.sections import EvalSection, TrainSection
from slm_jax.train.sharding import MeshSection
from slm_jax.train.step_law import step_law

SCALES = ("tiny", "100m", "500m", "1b")
DATA_PARALLEL = 2  # the paper's replica count, used by the Step Law batch rounding

_BBC_NODES = 2_544_658_027 - 1_963_388_153
_FINEWEB_NODES = 301_000_000_000 - 233_000_000_000
_MERGE_RUNS_PER_NODE = 33_474 / 73_461  # closing runs per node, PTB WSJ sample (lin1_merge)
TRAIN_TOKENS = {  # corpus -> linearization -> D
    "bbc": {
        "lin0": 800_848_405, "lin1": 1_963_388_153, "lin2": 2_544_658_027,
        "lin3": 2_544_658_027 + _BBC_NODES, "lin1_noont": 1_382_118_279,
        "lin1_merge": 800_848_405 + _BBC_NODES + round(_BBC_NODES * _MERGE_RUNS_PER_NODE),
        "lin1_shuf": 1_963_388_153, "pause1": 1_601_696_810, "pause2": 2_402_545_215,
    },
    "fineweb": {
        "lin0": 98_000_000_000, "lin1": 233_000_000_000, "lin2": 301_000_000_000,
        "lin3": 301_000_000_000 + _FINEWEB_NODES, "lin1_noont": 98_000_000_000 + _FINEWEB_NODES,
        "lin1_merge": 197_000_000_000, "lin1_shuf": 233_000_000_000,
        "pause1": 196_000_000_000, "pause2": 294_000_000_000,
    },
}


@dataclasses.dataclass(frozen=True)
class Scale:
  d_model: int
  n_layers: int
  n_heads: int
  mlp_ratio: int
  corpus: str | None  # TRAIN_TOKENS key; None = explicit hyperparameters (tiny)
  micro_batch: int  # rough target of sequences per micro-step, all devices (grad_accum_steps)


SCALE_SPECS = {
    "tiny": Scale(128, 2, 4, 4, None, 16),
    "100m": Scale(768, 12, 12, 4, "bbc", 32),
    "500m": Scale(1408, 16, 16, 8, "bbc", 16),
    "1b": Scale(2048, 16, 16, 8, "fineweb", 8),
}
PUSHDOWN_DEPTHS = 50  # stack-tape depth embeddings of the Pushdown reference (its code's max_depth)
_TINY = dict(seq_len=256, global_batch=16, steps=400, peak_lr=3e-3, min_lr=1e-4, warmup_steps=40)


SECTIONS = {
    "configuration": configurations.ConfigurationSection,
    "model": ModelConfig,
    "data": DataSection,
    "optimizer": OptimizerSection,
    "train": TrainSection,
    "eval": EvalSection,
    "checkpoint": CheckpointSection,
    "mesh": MeshSection,
}


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """A validated run config: one typed section per `SECTIONS` entry (attribute access as on the
  ConfigDict: `run.train.steps`). The model section carries the configuration's attention."""

  scale: str
  configuration: configurations.ConfigurationSection
  model: ModelConfig
  data: DataSection
  optimizer: OptimizerSection
  train: TrainSection
  eval: EvalSection
  checkpoint: CheckpointSection
  mesh: MeshSection

  def __post_init__(self):
    problems = []
    if self.scale not in SCALES:
      problems.append(f"scale {self.scale!r} is not one of {', '.join(SCALES)}")
    if self.train.global_batch % self.optimizer.grad_accum_steps:
      problems.append(f"train.global_batch={self.train.global_batch} is not divisible by "
                      f"optimizer.grad_accum_steps={self.optimizer.grad_accum_steps}")
    pushdown = self.configuration.resolve().reference == "pushdown"
    if pushdown != (self.model.pushdown_depths > 0):
      problems.append(f"configuration.name={self.configuration.name} "
                      + ("is the Pushdown reference: model.pushdown_depths must be > 0" if pushdown
                         else "is not the Pushdown reference: model.pushdown_depths must be 0"))
    if pushdown and self.train.eval_syntax_every:
      problems.append("train.eval_syntax_every: live SG/BLiMP metrics do not score the Pushdown "
                      "reference (its attachment beam runs in `python -m slm_jax.evaluate`); "
                      "set it to 0")
    if problems:
      raise ConfigError(problems)

  @property
  def resolved(self) -> configurations.Configuration:
    """The run's `Configuration` (name, linearization, attention spec)."""
    return self.configuration.resolve()

  def to_dict(self) -> dict[str, Any]:
    """Every config key and its value (dtypes by name), the layout of `config.json`."""
    return sections.to_dict(self, self.scale)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2)

  def replace(self, **dotted: Any) -> "RunConfig":
    """A copy with `section.key` values changed (`run.replace(**{"train.steps": 8})`),
    validated again."""
    data = self.to_dict()
    for key, value in dotted.items():
      config_files.put(data, key, value)
    return validate(data)


def non_embedding_params(d_model: int, n_layers: int, mlp_ratio: int, n_heads: int = 1,
                         n_kv_heads: int | None = None, *, biases: bool = True,
                         qkv_bias: bool = False, mlp_bias: bool = False) -> int:
  """OLMo-style count: attention q,k,v,o + SwiGLU (up mlp_ratio·d, down mlp_ratio·d/2) + norms.

  Per layer 4·d² attention (less with GQA) and 1.5·mlp_ratio·d² MLP weights, two RMSNorms per
  layer and a final one (d weights each). `biases` is OLMo's `include_bias`: a bias on every linear
  layer and norm; `qkv_bias`/`mlp_bias` add only those. The defaults give the paper's N (500M:
  507,896,576) and agree with `slm_jax.model.decoder.non_embedding_param_count`.
  """
  kv_dim = d_model // n_heads * (n_kv_heads or n_heads)
  hidden = mlp_ratio * d_model
  attention = 2 * d_model * d_model + 2 * d_model * kv_dim
  mlp = d_model * hidden + hidden // 2 * d_model
  bias = ((d_model + 2 * kv_dim if biases or qkv_bias else 0) + (d_model if biases else 0)
          + (hidden + d_model if biases or mlp_bias else 0))
  norm = d_model * (2 if biases else 1)
  return n_layers * (attention + mlp + bias + 2 * norm) + norm


def count_non_embedding(model_cfg: Any) -> int:
  """`non_embedding_params` of a `cfg.model` section."""
  return non_embedding_params(model_cfg.d_model, model_cfg.n_layers, model_cfg.mlp_ratio,
                              model_cfg.n_heads, model_cfg.n_kv_heads,
                              biases=model_cfg.include_bias, qkv_bias=model_cfg.qkv_bias,
                              mlp_bias=model_cfg.mlp_bias)


def _grad_accum(global_batch: int, micro_batch: int) -> int:
  """Micro-steps per update: the divisor k of `global_batch / DATA_PARALLEL` (so micro-batches stay
  multiples of the replica count) whose micro-batch `global_batch / k` is nearest `micro_batch`
  in ratio (ties: the smaller micro-batch). A rough memory guess; override as needed."""
  replicas = DATA_PARALLEL if global_batch % DATA_PARALLEL == 0 else 1
  share = global_batch // replicas
  divisors = [k for k in range(1, share + 1) if share % k == 0]
  return min(divisors, key=lambda k: (abs(math.log(global_batch / k / micro_batch)), -k))


def build(name: str, scale: str) -> ml_collections.ConfigDict:
  """The config of configuration `name` (SPEC §5) at `scale` (one of SCALES), locked.

  Keys: scale; configuration.{name, linearization, attention}; model.{d_model, n_layers, n_heads,
  n_kv_heads (0 = n_heads), mlp_ratio, rope_theta, norm_eps, tie_embeddings, qkv_bias, mlp_bias,
  include_bias, init_std, param_dtype, compute_dtype, attention_impl}; data.{source (embedded|ptb),
  embedded_train_documents, embedded_eval_documents, embedded_seed, ptb_paths (tuple), seq_len,
  tokenizer (word|gpt2|qwen|hf), tokenizer_path, linearization_seed}; optimizer.{peak_lr, min_lr,
  warmup_steps, warmup_start_lr, weight_decay, b1, b2, eps, clip (0 = off), grad_accum_steps};
  train.{steps, global_batch (sequences per update), log_every, eval_every, checkpoint_every
  (0 = never), seed, train_tokens (D)}; eval.{split, batch_size, max_batches (0 = all),
  proposals (Doc-PPL K)}; checkpoint.{dir, max_to_keep, resume}; mesh.{data (-1 = fill), fsdp,
  distributed (auto|on|off)}.
  """
  conf = configurations.get_configuration(name)
  if scale not in SCALES:
    raise ConfigError(f"unknown scale {scale!r}; expected one of {', '.join(SCALES)}")
  spec = SCALE_SPECS[scale]
  tiny = spec.corpus is None
  seq_len = _TINY["seq_len"] if tiny else (2049 if conf.linearization == "pause2" else 2048)
  if tiny:
    peak_lr, global_batch, steps = _TINY["peak_lr"], _TINY["global_batch"], _TINY["steps"]
    train_tokens = steps * global_batch * seq_len
    min_lr, warmup = _TINY["min_lr"], _TINY["warmup_steps"]
  else:
    train_tokens = TRAIN_TOKENS[spec.corpus][conf.linearization]
    n = non_embedding_params(spec.d_model, spec.n_layers, spec.mlp_ratio, spec.n_heads)
    law = step_law(n, train_tokens, seq_len, DATA_PARALLEL)  # n: include_bias=True, as below
    peak_lr, global_batch = law.peak_lr, law.global_batch
    steps = train_tokens // (global_batch * seq_len)
    min_lr, warmup = 1e-5, 2000

  raw = dict(
      configuration=dict(name=conf.name, linearization=conf.linearization,
                         attention=conf.attention.name),
      model=dict(
          d_model=spec.d_model, n_layers=spec.n_layers, n_heads=spec.n_heads, vocab_size=None,
          n_kv_heads=None, mlp_ratio=spec.mlp_ratio, head_dim=None, rope_theta=10_000.0,
          norm_eps=1e-6, tie_embeddings=True, qkv_bias=False, mlp_bias=False,
          include_bias=not tiny, qk_norm=False, init_std=0.02, param_dtype="float32",
          compute_dtype="float32" if tiny else "bfloat16", attention_impl="auto",
          o_bias=False, norm_position="pre", norm_cast_first=False, rope_scaling="none",
          rope_factor=8.0, rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
          rope_original_max_position=8192, init_from="", lora_rank=0, lora_alpha=16.0,
          lora_dropout=0.0, lora_targets=("q", "k", "v", "o", "gate", "up", "down"),
          pushdown_depths=PUSHDOWN_DEPTHS if conf.reference == "pushdown" else 0),
      data=dict(
          source="embedded", embedded_train_documents=5_000 if tiny else 10_000,
          embedded_eval_documents=200 if tiny else 500, embedded_seed=0, ptb_paths=(),
          seq_len=seq_len, tokenizer="word" if tiny else "gpt2", tokenizer_path="",
          linearization_seed=0,
          # Streamed sources (Grain pipeline): prepared ArrayRecord folders or parsed Parquet.
          paths=(), eval_paths=(), shuffle_seed=0, worker_count=0, prefetch=2,
          window_shuffle=1000, parquet_column="text", max_drop_fraction=1.0,
          tfds_name="", tfds_dir=""),  # source=tfds: a TFDS build (slm_jax.tfds_build)
      optimizer=dict(
          peak_lr=float(peak_lr), min_lr=min_lr, warmup_steps=warmup, warmup_start_lr=0.0,
          weight_decay=0.1, b1=0.9, b2=0.95, eps=1e-8, clip=1.0,
          grad_accum_steps=_grad_accum(global_batch, spec.micro_batch), trainable="all"),
      train=dict(
          steps=int(steps), global_batch=int(global_batch), log_every=10,
          eval_every=100 if tiny else 1000, checkpoint_every=200 if tiny else 1000,
          seed=0 if tiny else 6198, train_tokens=int(train_tokens),
          # live SG/BLiMP metrics: off by default (they need ../shared/data; README)
          eval_syntax_every=0, eval_syntax_sg_items=1,
          eval_syntax_blimp_pairs=1, eval_syntax_beam=4, eval_syntax_data=""),
      eval=dict(split="validation", batch_size=global_batch if tiny else 16, max_batches=0,
                proposals=20 if tiny else 300),
      checkpoint=dict(dir=f"runs/{name}_{scale}", max_to_keep=3, resume=True),
      mesh=dict(data=-1, fsdp=1, distributed="auto"))
  validate({"scale": scale, **raw})  # every rule, at build time too
  return _config_dict(scale, raw)


def _config_dict(scale: str, raw: dict[str, dict[str, Any]]) -> ml_collections.ConfigDict:
  """The locked ConfigDict of the given section values (None values become typed placeholders,
  so a command line can still override them). Derived values (a model's head_dim, …) are not
  written: an override of d_model re-derives them."""
  cfg = ml_collections.ConfigDict()
  cfg.scale = scale
  for name, cls in SECTIONS.items():
    section = ml_collections.ConfigDict()
    for field in sections.config_fields(cls, scale):
      value = raw[name][field.name]
      if value is None:
        value = ml_collections.config_dict.placeholder(sections.inner_type(cls, field.name))
      section[field.name] = value
    cfg[name] = section
  cfg.lock()
  return cfg


# ---------------------------------------------------------------- validation


def _attention(data: Mapping[str, Any]) -> dict[str, Any]:
  """The model section's attention, which a config sets in its configuration section."""
  configuration = data.get("configuration")
  attention = configuration.get("attention") if isinstance(configuration, Mapping) else None
  return {"model": {"attention": attention}} if isinstance(attention, str) else {}


# A run's config gives every key itself (`complete`): it is the whole record of the run.
LOADER = config_files.ConfigLoader(RunConfig, complete=True, scales=SCALES, derive=_attention)


def schema(scale: str | None = None) -> dict[str, dataclasses.Field]:
  """Dotted key → its dataclass field, for every config key (at `scale`, when given)."""
  return {key: field for key, (_, field) in LOADER.keys(scale).items()}


def validate(cfg: Any, *, source: str | None = None) -> RunConfig:
  """The typed `RunConfig` of `cfg` (a ConfigDict or a nested dict, e.g. a saved config.json;
  `source` names it in the problems).

  Raises ConfigError listing every problem: unknown, misplaced and missing keys, the values of
  every section (types, then rules), then rules that join sections.
  """
  if isinstance(cfg, RunConfig):
    return cfg
  return LOADER.validate(cfg, source=source)


def load_config(path: str, overrides: Sequence[str] = (), *,
                folder: str | pathlib.Path | None = None) -> RunConfig:
  """A config file (or a packaged name of `folder`, e.g. `slm_jax.configs.FOLDER`) with
  `key=value` overrides (`model.d_model=256`, `--config.` prefix optional), validated.
  `model.init_from=DIR|FILE.gguf` on the command line: every architecture key is taken from
  that checkpoint (`checkpoint_overrides`); `--config=hf` needs it."""
  loader = LOADER if folder is None else dataclasses.replace(LOADER, folder=pathlib.Path(folder))
  return loader.load(path, checkpoint_overrides(path, overrides))


def _given(overrides: Sequence[str]) -> dict[str, str]:
  """key → text of `key=value` overrides (as the loader reads them)."""
  out = {}
  for override in overrides:
    key, _, value = override.strip().removeprefix("--").removeprefix("config.").partition("=")
    out[key.replace("-", "_")] = value
  return out


def _text(value: Any) -> str:
  return str(value).lower() if isinstance(value, bool) else str(value)


def checkpoint_overrides(path: str, overrides: Sequence[str]) -> list[str]:
  """`overrides` after the architecture keys of the checkpoint `model.init_from` names on the
  command line (`hf.load.config_values`: d_model, heads, KV heads, head_dim, MLP ratio, RoPE θ
  and scaling, tying, norm eps, biases) and its tokenizer (`data.tokenizer=hf`; for a folder
  its `tokenizer.json` as `data.tokenizer_path`), unless given. An override contradicting the checkpoint is refused
  naming both values; `--config=hf` without `model.init_from` is refused."""
  given = _given(overrides)
  source = given.get("model.init_from", "")
  if not source:
    if pathlib.Path(path.partition(":")[0]).stem == "hf":
      raise ConfigError(["--config=hf takes every model dimension from a checkpoint: give "
                         "--config.model.init_from=DIR|FILE.gguf"])
    return list(overrides)
  from slm_jax.hf.gguf import is_gguf  # pylint: disable=g-import-not-at-top
  from slm_jax.hf.load import config_values  # pylint: disable=g-import-not-at-top
  try:
    values = config_values(source)
  except (FileNotFoundError, ValueError) as error:
    raise ConfigError([f"--config.model.init_from={source}: {error}"]) from None
  derived = [f"model.{k}={_text(v)}" for k, v in values.items()]
  problems = []
  for key, value in values.items():
    text = given.get(f"model.{key}")
    if text is not None and _differs(text, value):
      problems.append(f"--config.model.{key}={text} contradicts the checkpoint "
                      f"{source}: {key}={_text(value)}")
  if "data.tokenizer" not in given:
    derived.append("data.tokenizer=hf")  # the checkpoint's own vocabulary (+ reserved tokens)
  if "data.tokenizer_path" not in given:
    if is_gguf(source):
      problems.append(f"--config.model.init_from={source}: training reads the tokenizer from a "
                      "tokenizer.json: export the GGUF first (python -m slm_jax.export "
                      "--checkpoint=FILE.gguf --out=DIR) and start from DIR, or give "
                      "--config.data.tokenizer_path=DIR/tokenizer.json")
    else:
      derived.append(f"data.tokenizer_path={pathlib.Path(source) / 'tokenizer.json'}")
  if problems:
    raise ConfigError(problems)
  return [*derived, *overrides]


def _differs(text: str, value: Any) -> bool:
  """Whether command-line `text` means something else than the checkpoint's `value`."""
  try:
    given = cli.boolean(text) if isinstance(value, bool) else type(value)(text)
  except (ValueError, TypeError, argparse.ArgumentTypeError):
    return True
  return given != value
