"""The one config builder (`configs/<name>_<scale>.py` call it) and start-up validation.

`build(name, scale)` gives a locked `ml_collections.ConfigDict` with sections `configuration`,
`model`, `data`, `optimizer`, `train`, `eval`, `checkpoint` (plus the string `scale`); every config
has exactly the keys listed in `build`. Scales: `tiny` (a few CPU minutes on the embedded corpus,
explicit hyperparameters) and `100m`, `500m`, `1b` (SPEC §6 dims; peak LR and global batch from
the Step Law, SPEC §7, for the configuration's training-token budget D).

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

import dataclasses
import difflib
import functools
import math
from typing import Any, Sequence

import ml_collections

from slm_jax import configurations
from slm_jax.structure import parse_attention
from slm_jax.train.sharding import DISTRIBUTED_MODES
from slm_jax.train.step_law import step_law

SCALES = ("tiny", "100m", "500m", "1b")
DATA_PARALLEL = 2  # the paper's replica count, used by the Step Law batch rounding
DTYPES = ("float32", "bfloat16", "float16")
SOURCES = ("embedded", "ptb", "arrayrecord", "parquet")  # the last two stream through Grain
TOKENIZERS = ("word", "gpt2", "qwen", "hf")

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
_TINY = dict(seq_len=256, global_batch=16, steps=400, peak_lr=3e-3, min_lr=1e-4, warmup_steps=40)


class ConfigError(ValueError):
  """An invalid configuration; the message lists every problem found."""


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

  cfg = ml_collections.ConfigDict()
  cfg.scale = scale
  cfg.configuration = dict(name=conf.name, linearization=conf.linearization,
                           attention=conf.attention.name)
  cfg.model = dict(
      d_model=spec.d_model, n_layers=spec.n_layers, n_heads=spec.n_heads,
      n_kv_heads=0, mlp_ratio=spec.mlp_ratio, rope_theta=10_000.0, norm_eps=1e-6,
      tie_embeddings=True, qkv_bias=False, mlp_bias=False, include_bias=not tiny,
      init_std=0.02, param_dtype="float32",
      compute_dtype="float32" if tiny else "bfloat16", attention_impl="auto")
  cfg.data = dict(
      source="embedded", embedded_train_documents=5_000 if tiny else 10_000,
      embedded_eval_documents=200 if tiny else 500, embedded_seed=0, ptb_paths=(),
      seq_len=seq_len, tokenizer="word" if tiny else "gpt2", tokenizer_path="",
      linearization_seed=0,
      # Streamed sources (Grain pipeline): prepared ArrayRecord folders or parsed Parquet.
      paths=(), eval_paths=(), shuffle_seed=0, worker_count=0, prefetch=2,
      window_shuffle=1000, parquet_column="text")
  cfg.optimizer = dict(
      peak_lr=float(peak_lr), min_lr=min_lr, warmup_steps=warmup, warmup_start_lr=0.0,
      weight_decay=0.1, b1=0.9, b2=0.95, eps=1e-8, clip=1.0,
      grad_accum_steps=_grad_accum(global_batch, spec.micro_batch))
  cfg.train = dict(
      steps=int(steps), global_batch=int(global_batch), log_every=10,
      eval_every=100 if tiny else 1000, checkpoint_every=200 if tiny else 1000,
      seed=0 if tiny else 6198, train_tokens=int(train_tokens))
  cfg.eval = dict(split="validation", batch_size=global_batch if tiny else 16, max_batches=0,
                  proposals=20 if tiny else 300)
  cfg.checkpoint = dict(dir=f"runs/{name}_{scale}", max_to_keep=3, resume=True)
  cfg.mesh = dict(data=-1, fsdp=1, distributed="auto")
  cfg.lock()
  return cfg


# ---------------------------------------------------------------- validation


def _flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
  out = {}
  for key, value in cfg.items():
    path = f"{prefix}{key}"
    if isinstance(value, (ml_collections.ConfigDict, dict)):
      out.update(_flatten(value, path + "."))
    else:
      out[path] = value
  return out


@functools.cache
def _schema() -> dict[str, Any]:
  return _flatten(build("terminal", "tiny"))


def schema() -> dict[str, Any]:
  """Dotted key → example value of every config key (all configs share these keys)."""
  return dict(_schema())


def _type_ok(expected: Any, value: Any) -> bool:
  if isinstance(expected, bool) or isinstance(value, bool):
    return isinstance(expected, bool) and isinstance(value, bool)
  if isinstance(expected, float):
    return isinstance(value, (int, float))
  if isinstance(expected, tuple):
    return isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value)
  return isinstance(value, type(expected))


def _key_problems(flat: dict[str, Any]) -> list[str]:
  known = schema()
  problems = []
  for key in flat:
    if key not in known:
      close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
      hint = f"; did you mean {close[0]}?" if close else ""
      problems.append(f"unknown key {key}{hint}")
    elif not _type_ok(known[key], flat[key]):
      problems.append(f"{key} = {flat[key]!r} should be of type {type(known[key]).__name__}")
  problems += [f"missing key {key}" for key in known if key not in flat]
  return problems


def _semantic_problems(cfg: Any) -> list[str]:
  problems = []

  def need(ok: bool, message: str) -> None:
    if not ok:
      problems.append(message)

  c, m, d, o, t, e = cfg.configuration, cfg.model, cfg.data, cfg.optimizer, cfg.train, cfg.eval
  need(cfg.scale in SCALES, f"scale {cfg.scale!r} is not one of {', '.join(SCALES)}")
  spec = None
  try:
    spec = parse_attention(c.attention)
    configurations.check_combination(c.linearization, spec)
  except ValueError as err:
    problems.append(f"configuration: {err}")
  else:
    table = configurations.CONFIGURATIONS.get(c.name)
    same = [x.name for x in configurations.CONFIGURATIONS.values()
            if x.linearization == c.linearization and x.attention == spec]
    if table is not None and (table.linearization, table.attention) != (c.linearization, spec):
      hint = (f"set configuration.name={same[0]}" if same else
              "give the run a name outside the table (e.g. configuration.name=custom)")
      problems.append(
          f"configuration.name={c.name} means {table.linearization} + {table.attention.name}, "
          f"but linearization/attention are {c.linearization} + {spec.name}; {hint}")
  need(bool(c.name), "configuration.name is empty")

  for key in ("d_model", "n_layers", "n_heads", "mlp_ratio"):
    need(m[key] > 0, f"model.{key} must be positive, got {m[key]}")
  need(m.n_kv_heads >= 0, "model.n_kv_heads must be ≥ 0 (0 = n_heads)")
  if m.n_heads > 0 and m.n_kv_heads >= 0 and m.d_model > 0:
    if m.d_model % m.n_heads:
      problems.append(f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}")
    else:
      need((m.d_model // m.n_heads) % 2 == 0,
           f"head dim {m.d_model // m.n_heads} must be even for RoPE")
    need(m.n_heads % (m.n_kv_heads or m.n_heads) == 0,
         f"model.n_heads={m.n_heads} is not divisible by model.n_kv_heads={m.n_kv_heads}")
    need(m.mlp_ratio * m.d_model % 2 == 0, "model.mlp_ratio·d_model must be even (SwiGLU halves)")
    if spec is not None and m.n_heads % len(spec.groups):
      problems.append(f"attention {spec.name} mixes {len(spec.groups)} head groups: model.n_heads="
                      f"{m.n_heads} must be divisible by {len(spec.groups)}")
  need(m.rope_theta > 0 and m.norm_eps > 0 and m.init_std > 0,
       "model.rope_theta, model.norm_eps and model.init_std must be positive")
  for key in ("param_dtype", "compute_dtype"):
    need(m[key] in DTYPES, f"model.{key}={m[key]!r} is not one of {', '.join(DTYPES)}")
  need(bool(m.attention_impl), "model.attention_impl is empty (use 'auto')")

  need(d.source in SOURCES, f"data.source={d.source!r} is not one of {', '.join(SOURCES)}")
  need(d.source not in ("arrayrecord", "parquet") or len(d.paths) > 0,
       f"data.source={d.source} needs data.paths (prepared folders or Parquet files), e.g. "
       "--config.data.paths=\"('/data/prepared',)\"")
  need(d.source != "parquet" or d.tokenizer != "word",
       "data.source=parquet streams text without a vocabulary pass: use a BPE tokenizer "
       "(data.tokenizer=gpt2|qwen|hf) or prepare the corpus (data.source=arrayrecord)")
  need(d.worker_count >= 0 and d.prefetch >= 0 and d.window_shuffle >= 1,
       "data.worker_count and data.prefetch must be ≥ 0, data.window_shuffle ≥ 1")
  need(d.source != "ptb" or len(d.ptb_paths) > 0,
       "data.source=ptb needs data.ptb_paths (files or folders), e.g. "
       "--config.data.ptb_paths=\"('treebank/',)\"")
  need(d.embedded_train_documents > 0 and d.embedded_eval_documents > 0,
       "data.embedded_*_documents must be positive")
  need(d.seq_len >= 16, f"data.seq_len must be at least 16, got {d.seq_len}")
  need(d.tokenizer in TOKENIZERS,
       f"data.tokenizer={d.tokenizer!r} is not one of {', '.join(TOKENIZERS)}")
  need(d.tokenizer != "hf" or bool(d.tokenizer_path),
       "data.tokenizer=hf needs data.tokenizer_path (a tokenizer.json)")

  need(o.peak_lr > 0, f"optimizer.peak_lr must be positive, got {o.peak_lr}")
  need(0 <= o.min_lr <= o.peak_lr, f"optimizer.min_lr={o.min_lr} must be in [0, peak_lr]")
  need(0 <= o.warmup_start_lr <= o.peak_lr,
       f"optimizer.warmup_start_lr={o.warmup_start_lr} must be in [0, peak_lr]")
  need(o.warmup_steps >= 0, "optimizer.warmup_steps must be ≥ 0")
  need(o.weight_decay >= 0, "optimizer.weight_decay must be ≥ 0")
  need(0 <= o.b1 < 1 and 0 <= o.b2 < 1, "optimizer.b1 and optimizer.b2 must be in [0, 1)")
  need(o.eps > 0, "optimizer.eps must be positive")
  need(o.clip >= 0, "optimizer.clip must be ≥ 0 (0 turns clipping off)")
  need(o.grad_accum_steps >= 1, "optimizer.grad_accum_steps must be ≥ 1")

  for key in ("steps", "global_batch", "log_every", "train_tokens"):
    need(t[key] > 0, f"train.{key} must be positive, got {t[key]}")
  for key in ("eval_every", "checkpoint_every"):
    need(t[key] >= 0, f"train.{key} must be ≥ 0 (0 = never), got {t[key]}")
  if o.grad_accum_steps >= 1 and t.global_batch > 0:
    need(t.global_batch % o.grad_accum_steps == 0,
         f"train.global_batch={t.global_batch} is not divisible by "
         f"optimizer.grad_accum_steps={o.grad_accum_steps}")
  need(e.batch_size > 0 and e.max_batches >= 0 and e.proposals > 0,
       "eval.batch_size and eval.proposals must be positive, eval.max_batches ≥ 0 (0 = all)")
  need(e.split in ("train", "validation", "test"), f"eval.split={e.split!r} is not a split")
  need(cfg.mesh.data == -1 or cfg.mesh.data >= 1, "mesh.data must be ≥ 1, or -1 (every device "
       "left after mesh.fsdp)")
  need(cfg.mesh.fsdp >= 1, "mesh.fsdp must be ≥ 1")
  need(cfg.mesh.distributed in DISTRIBUTED_MODES,
       f"mesh.distributed={cfg.mesh.distributed!r} is not one of {', '.join(DISTRIBUTED_MODES)}")
  need(bool(cfg.checkpoint.dir), "checkpoint.dir is empty")
  need(cfg.checkpoint.max_to_keep > 0, "checkpoint.max_to_keep must be positive")
  return problems


def validate(cfg: Any) -> Any:
  """Raises ConfigError listing every problem (unknown keys first); returns `cfg` when valid."""
  problems = _key_problems(_flatten(cfg))
  if not problems:
    problems = _semantic_problems(cfg)
  if problems:
    raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))
  return cfg


def _override_flag(override: str) -> str:
  text = override.strip().removeprefix("--").removeprefix("config.")
  return f"--config.{text}"


def load_config(path: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
  """A config file plus `key=value` overrides (`model.d_model=256`, `--config.` prefix optional),
  parsed exactly as `config_flags.DEFINE_config_file("config")` parses them, then validated."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

  known = schema()
  unknown = []
  for override in overrides:
    key = _override_flag(override).removeprefix("--config.").split("=", 1)[0]
    if key not in known:
      close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
      unknown.append(f"unknown key {key} in override {override!r}"
                     + (f"; did you mean {close[0]}?" if close else ""))
  if unknown:
    raise ConfigError("invalid config:\n  - " + "\n  - ".join(unknown))
  argv = ["slm_jax", f"--config={path}", *map(_override_flag, overrides)]
  values = flags.FlagValues()
  # config_flags finds override names in sys.argv unless given the argv explicitly.
  config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
  try:
    values(argv)
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as err:
    raise ConfigError(f"cannot load {path} with overrides {list(overrides)}: {err}") from err
  return validate(values.config)
