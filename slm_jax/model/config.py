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
import numpy as np

from slm_jax.structure import AttentionSpec, parse_attention

ATTENTION_IMPLS = ("xla", "pallas_tpu", "triton_gpu", "auto")

# Paper Table 7 (App. A): d_model, mlp_ratio, layers, heads.
SCALES = {
    "100m": dict(d_model=768, mlp_ratio=4, n_layers=12, n_heads=12),
    "500m": dict(d_model=1408, mlp_ratio=8, n_layers=16, n_heads=16),
    "1b": dict(d_model=2048, mlp_ratio=8, n_layers=16, n_heads=16),
}


def _positive(name: str, value: Any) -> None:
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
    raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder hyperparameters. `attention` accepts an `AttentionSpec` or its name (`mix(A,B)`).

  mlp_ratio follows OLMo: the fused up-projection has mlp_ratio·d_model outputs (value and gate
  halves), the down-projection mlp_ratio·d_model/2 inputs. `n_kv_heads` (GQA) defaults to
  n_heads, `head_dim` to d_model // n_heads. `qkv_bias` (Qwen-2.5) biases q/k/v only, `mlp_bias`
  the MLP projections, `include_bias` (OLMo) every linear layer and norm of the blocks.
  """

  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int | None = None
  mlp_ratio: float = 4
  head_dim: int | None = None
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6
  tie_embeddings: bool = True
  qkv_bias: bool = False
  mlp_bias: bool = False
  include_bias: bool = False
  init_std: float = 0.02
  param_dtype: Any = jnp.float32
  compute_dtype: Any = jnp.bfloat16
  attention: AttentionSpec | str = "causal"
  attention_impl: str = "auto"

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "n_layers", "n_heads"):
      _positive(name, getattr(self, name))
    set_ = lambda name, value: object.__setattr__(self, name, value)
    if self.n_kv_heads is None:
      set_("n_kv_heads", self.n_heads)
    _positive("n_kv_heads", self.n_kv_heads)
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"ModelConfig.n_kv_heads={self.n_kv_heads} must divide "
                       f"n_heads={self.n_heads}")
    if self.head_dim is None:
      if self.d_model % self.n_heads:
        raise ValueError(f"ModelConfig.head_dim: d_model={self.d_model} is not divisible by "
                         f"n_heads={self.n_heads}; set head_dim explicitly")
      set_("head_dim", self.d_model // self.n_heads)
    _positive("head_dim", self.head_dim)
    if self.head_dim % 2:
      raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")
    hidden = self.mlp_ratio * self.d_model
    if (isinstance(self.mlp_ratio, bool) or self.mlp_ratio <= 0 or hidden != int(hidden)
        or int(hidden) % 2):
      raise ValueError(f"ModelConfig.mlp_ratio={self.mlp_ratio!r}: mlp_ratio·d_model must be a "
                       f"positive even integer (gate and value halves), got {hidden}")
    if not self.rope_theta > 0:
      raise ValueError(f"ModelConfig.rope_theta must be > 0, got {self.rope_theta!r}")
    if not self.norm_eps > 0:
      raise ValueError(f"ModelConfig.norm_eps must be > 0, got {self.norm_eps!r}")
    if not self.init_std > 0:
      raise ValueError(f"ModelConfig.init_std must be > 0, got {self.init_std!r}")
    for name in ("param_dtype", "compute_dtype"):
      try:
        dtype = jnp.dtype(getattr(self, name))
      except TypeError as error:
        raise ValueError(f"ModelConfig.{name}: {error}") from None
      if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"ModelConfig.{name} must be a floating dtype, got {dtype}")
      set_(name, dtype)
    if isinstance(self.attention, str):
      try:
        set_("attention", parse_attention(self.attention))
      except ValueError as error:
        raise ValueError(f"ModelConfig.attention: {error}") from None
    if not isinstance(self.attention, AttentionSpec):
      raise ValueError(f"ModelConfig.attention must be an AttentionSpec or a name, "
                       f"got {self.attention!r}")
    if self.n_heads % len(self.attention.groups):
      raise ValueError(f"ModelConfig.n_heads={self.n_heads} must be divisible by the "
                       f"{len(self.attention.groups)} head groups of {self.attention.name}")
    if self.attention_impl not in ATTENTION_IMPLS:
      raise ValueError(f"ModelConfig.attention_impl must be one of {', '.join(ATTENTION_IMPLS)}, "
                       f"got {self.attention_impl!r}")

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
