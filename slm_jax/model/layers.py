"""Decoder building blocks (SPEC §6): RMSNorm, RoPE on per-token positions, SwiGLU MLP.

The options that imported checkpoints need (SPEC §13) live here, once: RMSNorm's cast order
(`cast_first`: Llama/Qwen2 cast the normalized value to the compute dtype before the weight;
OLMo-2 and our own models multiply in float32, then cast), Llama-3 RoPE scaling (`RopeScaling`,
applied to the inverse frequencies once for all positions), and LoRA adapters on any projection
(`dense(..., target=...)` builds a `slm_jax.model.lora.LoraLinear` when the config targets it).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax.model.config import ModelConfig
from slm_jax.model.lora import LoraLinear, lora_parts


class RMSNorm(nnx.Module):
  """y = x / rms(x) · weight (+ bias), normalized in float32, returned in `dtype`.

  `cast_first=False` (ours, OLMo-2): the weight multiplies in float32, then the cast;
  `cast_first=True` (Llama, Qwen2): the normalized value is cast to `dtype` first and the weight
  multiplies in `dtype`. In float32 the two are the same.
  """

  def __init__(self, features: int, *, eps: float = 1e-6, use_bias: bool = False,
               dtype=jnp.float32, param_dtype=jnp.float32, cast_first: bool = False):
    self.eps = eps
    self.dtype = dtype
    self.cast_first = cast_first
    self.weight = nnx.Param(jnp.ones((features,), param_dtype))
    self.bias = nnx.Param(jnp.zeros((features,), param_dtype)) if use_bias else None

  def __call__(self, x_BTD: jax.Array) -> jax.Array:
    x = x_BTD.astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.eps)
    compute = self.dtype if self.cast_first else jnp.float32
    y = y.astype(compute) * self.weight[...].astype(compute)
    if self.bias is not None:
      y = y + self.bias[...].astype(compute)
    return y.astype(self.dtype)


class RopeScaling(NamedTuple):
  """Llama-3 ("llama3") scaling of the inverse frequencies: wavelengths above
  original_max / low_freq_factor are divided by `factor`, those below original_max /
  high_freq_factor kept, the band between interpolated (transformers' `_compute_llama3_parameters`)."""

  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_position: int


def rope_scaling_of(config: ModelConfig) -> RopeScaling | None:
  """The RoPE scaling a config asks for (None: plain RoPE)."""
  if config.rope_scaling == "none":
    return None
  return RopeScaling(config.rope_factor, config.rope_low_freq_factor,
                     config.rope_high_freq_factor, config.rope_original_max_position)


def rope_frequencies(head_dim: int, theta: float,
                     scaling: RopeScaling | None = None) -> jax.Array:
  """Inverse frequencies θ^(-2i/K), i < K/2, float32 [K/2] (Llama-3 `scaling` applied)."""
  inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  if scaling is None:
    return inv_freq
  factor, low, high, original = scaling
  wavelen = 2 * math.pi / inv_freq
  scaled = jnp.where(wavelen > original / low, inv_freq / factor, inv_freq)
  smooth = (original / wavelen - low) / (high - low)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  medium = ~(wavelen < original / high) & ~(wavelen > original / low)
  return jnp.where(medium, smoothed, scaled)


def apply_rope(x_BTHK: jax.Array, position_BT: jax.Array, theta: float,
               scaling: RopeScaling | None = None) -> jax.Array:
  """Rotary embedding at per-token positions (Llama/OLMo "rotate half": pairs (i, i + K/2)).

  Positions come from the row metadata, so each packed document starts at 0. Angles are float32.
  """
  half = x_BTHK.shape[-1] // 2
  angle_BTF = (position_BT.astype(jnp.float32)[..., None]
               * rope_frequencies(2 * half, theta, scaling))
  cos_BT1F = jnp.cos(angle_BTF)[:, :, None, :]
  sin_BT1F = jnp.sin(angle_BTF)[:, :, None, :]
  x = x_BTHK.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:]
  rotated = jnp.concatenate([x1 * cos_BT1F - x2 * sin_BT1F, x2 * cos_BT1F + x1 * sin_BT1F],
                            axis=-1)
  return rotated.astype(x_BTHK.dtype)


def dense(config: ModelConfig, d_in: int, d_out: int, use_bias: bool, *,
          rngs: nnx.Rngs, target: str | tuple[str, ...] = ()) -> nnx.Linear:
  """A linear layer in the config's dtypes with N(0, init_std²) kernels.

  `target`: the LoRA target name(s) of its output columns (a tuple: equal column blocks, e.g.
  the fused up-projection's ("up", "gate")); a `LoraLinear` when the config adapts any of them.
  """
  kwargs = dict(use_bias=use_bias, dtype=config.compute_dtype, param_dtype=config.param_dtype,
                kernel_init=nnx.initializers.normal(config.init_std), rngs=rngs)
  parts = lora_parts(config, target)
  if parts is None:
    return nnx.Linear(d_in, d_out, **kwargs)
  return LoraLinear(d_in, d_out, parts=parts, rank=config.lora_rank, alpha=config.lora_alpha,
                    dropout=config.lora_dropout, **kwargs)


class SwiGLU(nnx.Module):
  """OLMo SwiGLU: fused up-projection to [value | gate] (mlp_ratio·d), silu(gate)·value, down."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    use_bias = config.mlp_bias or config.include_bias
    self.up = dense(config, config.d_model, 2 * config.mlp_hidden, use_bias, rngs=rngs,
                    target=("up", "gate"))
    self.down = dense(config, config.mlp_hidden, config.d_model, use_bias, rngs=rngs,
                      target="down")

  def __call__(self, x_BTD: jax.Array) -> jax.Array:
    value_BTF, gate_BTF = jnp.split(self.up(x_BTD), 2, axis=-1)
    return self.down(jax.nn.silu(gate_BTF) * value_BTF)
