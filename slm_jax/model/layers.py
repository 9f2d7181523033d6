"""Decoder building blocks (SPEC §6): RMSNorm, RoPE on per-token positions, SwiGLU MLP."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax.model.config import ModelConfig


class RMSNorm(nnx.Module):
  """y = x / rms(x) · weight (+ bias), computed in float32, returned in `dtype`."""

  def __init__(self, features: int, *, eps: float = 1e-6, use_bias: bool = False,
               dtype=jnp.float32, param_dtype=jnp.float32):
    self.eps = eps
    self.dtype = dtype
    self.weight = nnx.Param(jnp.ones((features,), param_dtype))
    self.bias = nnx.Param(jnp.zeros((features,), param_dtype)) if use_bias else None

  def __call__(self, x_BTD: jax.Array) -> jax.Array:
    x = x_BTD.astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.eps)
    y = y * self.weight[...].astype(jnp.float32)
    if self.bias is not None:
      y = y + self.bias[...].astype(jnp.float32)
    return y.astype(self.dtype)


def rope_frequencies(head_dim: int, theta: float) -> jax.Array:
  """Inverse frequencies θ^(-2i/K), i < K/2, float32 [K/2]."""
  return 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))


def apply_rope(x_BTHK: jax.Array, position_BT: jax.Array, theta: float) -> jax.Array:
  """Rotary embedding at per-token positions (Llama/OLMo "rotate half": pairs (i, i + K/2)).

  Positions come from the row metadata, so each packed document starts at 0.
  """
  half = x_BTHK.shape[-1] // 2
  angle_BTF = position_BT.astype(jnp.float32)[..., None] * rope_frequencies(2 * half, theta)
  cos_BT1F = jnp.cos(angle_BTF)[:, :, None, :]
  sin_BT1F = jnp.sin(angle_BTF)[:, :, None, :]
  x = x_BTHK.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:]
  rotated = jnp.concatenate([x1 * cos_BT1F - x2 * sin_BT1F, x2 * cos_BT1F + x1 * sin_BT1F],
                            axis=-1)
  return rotated.astype(x_BTHK.dtype)


def dense(config: ModelConfig, d_in: int, d_out: int, use_bias: bool, *,
          rngs: nnx.Rngs) -> nnx.Linear:
  """A linear layer in the config's dtypes with N(0, init_std²) kernels."""
  return nnx.Linear(d_in, d_out, use_bias=use_bias, dtype=config.compute_dtype,
                    param_dtype=config.param_dtype,
                    kernel_init=nnx.initializers.normal(config.init_std), rngs=rngs)


class SwiGLU(nnx.Module):
  """OLMo SwiGLU: fused up-projection to [value | gate] (mlp_ratio·d), silu(gate)·value, down."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    use_bias = config.mlp_bias or config.include_bias
    self.up = dense(config, config.d_model, 2 * config.mlp_hidden, use_bias, rngs=rngs)
    self.down = dense(config, config.mlp_hidden, config.d_model, use_bias, rngs=rngs)

  def __call__(self, x_BTD: jax.Array) -> jax.Array:
    value_BTF, gate_BTF = jnp.split(self.up(x_BTD), 2, axis=-1)
    return self.down(jax.nn.silu(gate_BTF) * value_BTF)
