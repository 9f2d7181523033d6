"""`ModelConfig`: the OLMo-style decoder's hyperparameters (SPEC §6) and the paper's three scales.

Parameter counts (checked by `tests/test_model.py`): "non-embedding" is every parameter except
the token embedding (and the output head when untied), RMSNorm weights included. The paper's
models (OLMo `include_bias=True`) also carry a bias on every linear layer and every norm;
`include_bias=True` reproduces them: 500M → 507,896,576 non-embedding parameters, exactly the
N = 507.9M that paper Table 8's learning rates imply, and 578.7M ≈ 579M total with the 50,320
vocabulary. Bias-free (the default): 100M → 70.80M (109.4M total), 500M → 507.56M (578.4M),
1B → 1.074B.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from slm_jax.sections import Rules, option
from slm_jax.structure import AttentionSpec, parse_attention

ATTENTION_IMPLS = ("xla", "pallas_tpu", "triton_gpu", "auto")
NORM_POSITIONS = ("pre", "post")  # pre: x + f(norm(x)); post (OLMo-2): x + norm(f(x))
ROPE_SCALINGS = ("none", "llama3")
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")  # the projections adapters may adapt

# Paper Table 7 (App. A): d_model, mlp_ratio, layers, heads.
SCALES = {
    "100m": dict(d_model=768, mlp_ratio=4, n_layers=12, n_heads=12),
    "500m": dict(d_model=1408, mlp_ratio=8, n_layers=16, n_heads=16),
    "1b": dict(d_model=2048, mlp_ratio=8, n_layers=16, n_heads=16),
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder hyperparameters: the `model` section of a run's config (its rules live here only).

  mlp_ratio follows OLMo: the fused up-projection has mlp_ratio·d_model outputs (value and gate
  halves), the down-projection mlp_ratio·d_model/2 inputs. `vocab_size` None = the run's
  tokenizer's size (set before the model is built); `n_kv_heads` (GQA) None (or 0) = n_heads,
  `head_dim` None = d_model // n_heads. `qkv_bias` (Qwen-2.5) biases q/k/v only, `mlp_bias` the
  MLP projections, `include_bias` (OLMo) every linear layer and norm of the blocks; `qk_norm`
  (OLMo-2) RMS-normalizes the projected queries and keys over their whole width before RoPE.
  `attention` (an `AttentionSpec` or its name, `mix(A,B)`) is not a key of the model section: a
  run takes it from its configuration section.

  Options for imported checkpoints (SPEC §13; `slm_jax.hf` sets them from a `config.json`):
  `o_bias` biases the output projection (Llama/OLMo-2 `attention_bias`); `norm_position` "post"
  is OLMo-2's block (x + norm(attn(x)), x + norm(mlp(x)), no input norms); `norm_cast_first`
  casts the normalized value to the compute dtype before the norm weight (Llama/Qwen2);
  `rope_scaling` "llama3" rescales the inverse frequencies with `rope_factor`,
  `rope_low_freq_factor`, `rope_high_freq_factor`, `rope_original_max_position`. `init_from` is
  a Hugging Face checkpoint folder a run starts from ("" = random init).
  LoRA (`slm_jax.model.lora`): `lora_rank` > 0 adds adapters of that rank, scaled by
  lora_alpha / lora_rank, with input dropout `lora_dropout`, to the projections named in
  `lora_targets` (q, k, v, o, gate, up, down).
  `pushdown_depths` > 0 makes the model the Pushdown reference (SPEC §14, `slm_jax.pushdown`)
  with that many stack-tape depth embeddings (deeper tokens share the last); 0 = the decoder.
  """

  d_model: int
  n_layers: int
  n_heads: int
  vocab_size: int | None = option(None, required=False)
  n_kv_heads: int | None = None
  mlp_ratio: float = 4
  head_dim: int | None = option(None, required=False)
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6
  tie_embeddings: bool = True
  qkv_bias: bool = False
  mlp_bias: bool = False
  include_bias: bool = False
  qk_norm: bool = option(False, required=False)
  init_std: float = 0.02
  param_dtype: Any = jnp.float32
  compute_dtype: Any = jnp.bfloat16
  attention: Any = option("causal", config=False)
  attention_impl: str = "auto"
  o_bias: bool = option(False, required=False)
  norm_position: str = option("pre", required=False)
  norm_cast_first: bool = option(False, required=False)
  rope_scaling: str = option("none", required=False)
  rope_factor: float = option(8.0, required=False)
  rope_low_freq_factor: float = option(1.0, required=False)
  rope_high_freq_factor: float = option(4.0, required=False)
  rope_original_max_position: int = option(8192, required=False)
  init_from: str = option("", required=False)
  lora_rank: int = option(0, required=False)
  lora_alpha: float = option(16.0, required=False)
  lora_dropout: float = option(0.0, required=False)
  lora_targets: tuple[str, ...] = option(LORA_TARGETS, required=False)
  pushdown_depths: int = option(0, required=False)

  def __post_init__(self):
    rules = Rules("model", self)
    set_ = lambda name, value: object.__setattr__(self, name, value)
    if rules.typed:
      self._check(rules, set_)
    rules.done()

  def _check(self, rules: Rules, set_) -> None:
    need = rules.need
    for name in ("d_model", "n_layers", "n_heads"):
      need(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be positive")
    need(self.vocab_size is None or self.vocab_size > 0,
         f"vocab_size={self.vocab_size} must be positive (or None: the tokenizer's)")
    if self.n_kv_heads in (None, 0):
      set_("n_kv_heads", self.n_heads)
    need(self.n_kv_heads > 0, f"n_kv_heads={self.n_kv_heads} must be positive (or None)")
    if self.n_heads > 0 and self.n_kv_heads > 0:
      need(self.n_heads % self.n_kv_heads == 0,
           f"n_kv_heads={self.n_kv_heads} must divide model.n_heads={self.n_heads}")
    if self.head_dim is None and self.n_heads > 0:
      if self.d_model % self.n_heads:
        rules.need(False, f"head_dim: model.d_model={self.d_model} is not divisible by "
                   f"model.n_heads={self.n_heads}; set model.head_dim explicitly")
      else:
        set_("head_dim", self.d_model // self.n_heads)
    if self.head_dim is not None:
      need(self.head_dim > 0 and self.head_dim % 2 == 0,
           f"head_dim={self.head_dim} must be positive and even for RoPE")
    hidden = self.mlp_ratio * self.d_model
    need(self.mlp_ratio > 0 and hidden == int(hidden) and int(hidden) % 2 == 0,
         f"mlp_ratio={self.mlp_ratio!r}: mlp_ratio·d_model must be a positive even integer "
         f"(gate and value halves), got {hidden}")
    for name in ("rope_theta", "norm_eps", "init_std"):
      need(getattr(self, name) > 0, f"{name}={getattr(self, name)!r} must be positive")
    for name in ("param_dtype", "compute_dtype"):
      try:
        dtype = jnp.dtype(getattr(self, name))
      except TypeError as error:
        need(False, f"{name}={getattr(self, name)!r}: {error}")
        continue
      need(jnp.issubdtype(dtype, jnp.floating), f"{name} must be a floating dtype, got {dtype}")
      set_(name, dtype)
    if isinstance(self.attention, str):
      try:
        set_("attention", parse_attention(self.attention))
      except ValueError as error:
        need(False, f"attention: {error}")
    if isinstance(self.attention, AttentionSpec):
      groups = len(self.attention.groups)
      need(self.n_heads % groups == 0,
           f"n_heads={self.n_heads} must be divisible by {groups}, the head groups of attention "
           f"{self.attention.name}")
    elif not isinstance(self.attention, str):
      need(False, f"attention must be an AttentionSpec or a name, got {self.attention!r}")
    need(self.attention_impl in ATTENTION_IMPLS,
         f"attention_impl={self.attention_impl!r} is not one of {', '.join(ATTENTION_IMPLS)}")
    self._check_imported(need)

  def _check_imported(self, need) -> None:
    """Rules of the checkpoint-import and LoRA options."""
    need(self.norm_position in NORM_POSITIONS,
         f"norm_position={self.norm_position!r} is not one of {', '.join(NORM_POSITIONS)}")
    need(self.rope_scaling in ROPE_SCALINGS,
         f"rope_scaling={self.rope_scaling!r} is not one of {', '.join(ROPE_SCALINGS)}")
    if self.rope_scaling == "llama3":
      need(self.rope_factor > 0, f"rope_factor={self.rope_factor} must be positive")
      need(0 < self.rope_low_freq_factor < self.rope_high_freq_factor,
           f"rope_low_freq_factor={self.rope_low_freq_factor} must be positive and below "
           f"model.rope_high_freq_factor={self.rope_high_freq_factor}")
      need(self.rope_original_max_position > 0,
           f"rope_original_max_position={self.rope_original_max_position} must be positive")
    need(self.lora_rank >= 0, f"lora_rank={self.lora_rank} must be ≥ 0 (0 = no adapters)")
    need(self.lora_alpha > 0, f"lora_alpha={self.lora_alpha} must be positive")
    need(0 <= self.lora_dropout < 1, f"lora_dropout={self.lora_dropout} must be in [0, 1)")
    unknown = [t for t in self.lora_targets if t not in LORA_TARGETS]
    need(not unknown, f"lora_targets: {unknown} not among {', '.join(LORA_TARGETS)}")
    need(self.lora_rank == 0 or bool(self.lora_targets),
         f"lora_targets is empty but model.lora_rank={self.lora_rank}")
    need(self.pushdown_depths >= 0,
         f"pushdown_depths={self.pushdown_depths} must be ≥ 0 (0 = not a Pushdown model)")

  @property
  def mlp_hidden(self) -> int:
    """Width of the SwiGLU hidden layer (the down-projection's inputs): mlp_ratio·d/2."""
    return int(self.mlp_ratio * self.d_model) // 2

  def replace(self, **changes) -> "ModelConfig":
    """A copy with `changes`; head_dim and n_kv_heads left at their defaults are re-derived."""
    if "head_dim" not in changes and self.head_dim == self.d_model // self.n_heads:
      changes["head_dim"] = None
    if "n_kv_heads" not in changes and self.n_kv_heads == self.n_heads:
      changes["n_kv_heads"] = None
    return dataclasses.replace(self, **changes)


def scale_config(scale: str, vocab_size: int, **overrides) -> ModelConfig:
  """The paper's `100m` / `500m` / `1b` decoder (Table 7) with `overrides` applied."""
  if scale not in SCALES:
    raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALES)}")
  return ModelConfig(vocab_size=vocab_size, **{**SCALES[scale], **overrides})
