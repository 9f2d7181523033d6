"""GTCA, gated tree cross-attention (SPEC §10, seed 001): the side branch of a frozen decoder.

Shape letters (docs/ARCHITECTURE.md, except K and E): B batch rows · T tokens · D d_model ·
L layers · K chunk slots per layer (SPEC §10's K = 64) · H query heads · G key/value heads
(GQA: head h reads KV head h // (H/G)) · E head dim (attention.py's K) · X cross-attention
parameter sets (1 shared, or L per layer).

Per layer ℓ the branch reads the chunks of one tree height (`slm_jax.gtca.spans.ChunkBatch`:
int32 `start_BLK`, `end_BLK`, `last_BLK` = end − 1 = r_n, padding start = end = 0, last = −1;
float32 `update_mask_BT` = m_t; any object with those four attributes will do):

- chunk memory c_n = LayerNorm_ℓ(W_ℓ · mean_{i ∈ [start, end)} E[token_i]), E the frozen input
  embeddings (`Gtca.memories`: span means from one cumulative sum over T, all layers at once; a
  padding chunk's mean is 0, never 0/0);
- in block ℓ, from the normalized input x that self-attention reads: Q = x W_q (H heads, no
  RoPE), K, V = c W_k, c W_v (the backbone's G KV heads, shared by H/G query heads like the
  backbone's GQA); chunk n is visible to token t iff 0 ≤ r_n ≤ t, the softmax runs over visible
  chunks only (THE softmax, `attention_core`), and a token that sees no chunk gets exactly 0;
  g = σ(x W_g + b_g) one gate per head; δ = α · m_t · W_o(concat_h g_h ⊙ O_h) (`Gtca.delta`).

One cross-attention module per layer by default (X = L), as the reference builds it
(`ParseTreeCrossAttention` per decoder layer) and SPEC §10 prescribes: layer ℓ has its own
W_q, W_k, W_v, W_o, W_g, b_g. `cross_attention="shared"` (`--shared_cross_attention`) keeps one
set read by every layer (X = 1) as an ablation; the parameters are stacked over X either way
(`parameter_counts` gives the sizes of both parts).

Known defects of the public reference code, not copied (SPEC §10): its mask is inverted (tokens
see chunks that end AFTER them); α defaults to 1.0 (here 0.0, so a fresh branch is the identity).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax.model.attention import attention_core
from slm_jax.model.config import ModelConfig

GATES = ("learned", "one")  # "one": the gate ≡ 1 ablation
CROSS_ATTENTION = ("shared", "per_layer")


@dataclasses.dataclass(frozen=True)
class GtcaConfig:
  """The branch's sizes (the backbone's d_model, heads, KV heads, head dim, layers) and options.

  `k` chunk slots per layer; `alpha` the structural coefficient used when a call passes none
  (0.0: the branch starts as the identity; training ramps it, SPEC §10); `gate` "learned" or
  "one" (ablation); `cross_attention` "per_layer" (one module per layer, the default) or
  "shared" (one module for all layers, ablation); `use_update_mask` False is the m ≡ 1
  ablation; `dtype` the compute dtype, `param_dtype` the parameters' (trainable: float32 by
  default).
  """

  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  k: int = 64
  alpha: float = 0.0
  gate: str = "learned"
  use_update_mask: bool = True
  cross_attention: str = "per_layer"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  init_std: float = 0.02
  ln_eps: float = 1e-5

  def __post_init__(self):
    problems = [f"{name}={getattr(self, name)} must be positive"
                for name in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "k")
                if getattr(self, name) <= 0]
    if not problems and self.n_heads % self.n_kv_heads:
      problems.append(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
    if self.gate not in GATES:
      problems.append(f"gate={self.gate!r} is not one of {', '.join(GATES)}")
    if self.cross_attention not in CROSS_ATTENTION:
      problems.append(f"cross_attention={self.cross_attention!r} is not one of "
                      f"{', '.join(CROSS_ATTENTION)}")
    if self.alpha < 0:
      problems.append(f"alpha={self.alpha} must be ≥ 0")
    if problems:
      raise ValueError("invalid GtcaConfig: " + "; ".join(problems))

  @classmethod
  def from_model(cls, model: ModelConfig, **options) -> "GtcaConfig":
    """The branch for backbone `model` (its sizes and compute dtype) with `options`."""
    sizes = dict(d_model=model.d_model, n_layers=model.n_layers, n_heads=model.n_heads,
                 n_kv_heads=model.n_kv_heads, head_dim=model.head_dim,
                 dtype=model.compute_dtype)
    return cls(**{**sizes, **options})


def parameter_counts(config: GtcaConfig) -> dict[str, int]:
  """Trainable parameters of a branch: `chunk` (W_ℓ and LayerNorm_ℓ, L of each),
  `cross_attention` (q, k, v, o and the gate, X sets) and `total`."""
  c = config
  D, L, H, G, E = c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim
  X = L if c.cross_attention == "per_layer" else 1
  one_set = D * H * E + 2 * D * G * E + H * E * D + ((D * H + H) if c.gate == "learned" else 0)
  chunk = L * (D * D + 2 * D)
  return {"chunk": chunk, "cross_attention": X * one_set, "total": chunk + X * one_set}


class ChunkMemory(NamedTuple):
  """What every layer's cross-attention reads: memories, right boundaries, the token mask."""

  c_BLKD: jax.Array  # chunk memories, compute dtype
  last_BLK: jax.Array  # int32 r_n (−1: padding)
  update_mask_BT: jax.Array  # float32 m_t (all 1 under the m ≡ 1 ablation)


def span_means(x_BTD: jax.Array, start_BLK: jax.Array, end_BLK: jax.Array) -> jax.Array:
  """float32 mean of x over [start, end) per chunk, [B, L, K, D]; empty spans give 0.

  One cumulative sum over T (float32) and two gathers: mean = (cs[end] − cs[start]) / (end −
  start), cs[0] = 0. cs[j] sums tokens < j only, so a chunk's mean reads nothing after r_n.
  """
  B, T, D = x_BTD.shape
  _, L, K = start_BLK.shape
  cs_BSD = jnp.cumsum(x_BTD.astype(jnp.float32), axis=1)
  cs_BSD = jnp.concatenate([jnp.zeros((B, 1, D), jnp.float32), cs_BSD], axis=1)  # S = T + 1
  start_BN = jnp.clip(start_BLK.reshape(B, L * K), 0, T)
  end_BN = jnp.clip(end_BLK.reshape(B, L * K), 0, T)
  take = lambda i_BN: jnp.take_along_axis(cs_BSD, i_BN[:, :, None], axis=1)  # [B, N, D]
  count_BN1 = (end_BN - start_BN).astype(jnp.float32)[:, :, None]
  mean_BND = jnp.where(count_BN1 > 0, (take(end_BN) - take(start_BN))
                       / jnp.maximum(count_BN1, 1.0), 0.0)
  return mean_BND.reshape(B, L, K, D)


def check_chunks(chunks: Any, n_layers: int, k: int, batch: int, length: int) -> None:
  """Raises ValueError unless `chunks` has the static shapes this branch needs."""
  want = {"start_BLK": (batch, n_layers, k), "end_BLK": (batch, n_layers, k),
          "last_BLK": (batch, n_layers, k), "update_mask_BT": (batch, length)}
  problems = []
  for name, shape in want.items():
    value = getattr(chunks, name, None)
    if value is None:
      problems.append(f"{name} missing")
    elif tuple(value.shape) != shape:
      problems.append(f"{name} has shape {tuple(value.shape)}, expected {shape}")
  if problems:
    raise ValueError(f"chunks do not fit (B={batch}, L={n_layers}, K={k}, T={length}): "
                     + "; ".join(problems))


class Gtca(nnx.Module):
  """The branch's parameters and its two steps: `memories` (once per forward) and `delta`
  (inside every block, through the decoder's `side` hook: `side(memory, alpha)`).

  Parameters (paths under the module): `chunk_proj` W_ℓ [L, D, D] (no bias), `chunk_norm_scale`
  / `chunk_norm_bias` [L, D] (LayerNorm_ℓ); `q` [X, D, H·E], `k` / `v` [X, D, G·E], `o`
  [X, H·E, D] (no biases: a token seeing nothing gets exactly 0), `gate_w` [X, D, H] and
  `gate_b` [X, H] (absent under gate "one").
  """

  def __init__(self, config: GtcaConfig, *, rngs: nnx.Rngs):
    self.config = config
    c = config
    D, L, H, G, E = c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim
    X = L if c.cross_attention == "per_layer" else 1
    shapes = {"chunk_proj": (L, D, D), "q": (X, D, H * E), "k": (X, D, G * E),
              "v": (X, D, G * E), "o": (X, H * E, D)}
    if c.gate == "learned":
      shapes["gate_w"] = (X, D, H)
    # N(0, init_std²) kernels from one draw (one random-number program, not one per shape).
    sizes = [math.prod(shape) for shape in shapes.values()]
    flat = c.init_std * jax.random.normal(rngs.params(), (sum(sizes),), jnp.float32)
    for (name, shape), part in zip(shapes.items(),
                                   jnp.split(flat, list(itertools.accumulate(sizes))[:-1])):
      setattr(self, name, nnx.Param(part.reshape(shape).astype(c.param_dtype)))
    self.chunk_norm_scale = nnx.Param(jnp.ones((L, D), c.param_dtype))
    self.chunk_norm_bias = nnx.Param(jnp.zeros((L, D), c.param_dtype))
    if c.gate == "learned":
      self.gate_b = nnx.Param(jnp.zeros((X, H), c.param_dtype))
    else:
      self.gate_w = self.gate_b = None

  def memories(self, x_BTD: jax.Array, chunks: Any) -> ChunkMemory:
    """Every layer's chunk memory from the embedded inputs x = E[tokens] (SPEC §10)."""
    c = self.config
    B, T, D = x_BTD.shape
    if D != c.d_model:
      raise ValueError(f"x_BTD has width {D}, the branch d_model={c.d_model}")
    check_chunks(chunks, c.n_layers, c.k, B, T)
    mean_BLKD = span_means(x_BTD, chunks.start_BLK, chunks.end_BLK)
    z_BLKD = jnp.einsum("blkd,lde->blke", mean_BLKD, self.chunk_proj[...].astype(jnp.float32))
    mu_BLK1 = jnp.mean(z_BLKD, axis=-1, keepdims=True)
    var_BLK1 = jnp.mean(jnp.square(z_BLKD - mu_BLK1), axis=-1, keepdims=True)
    z_BLKD = (z_BLKD - mu_BLK1) * jax.lax.rsqrt(var_BLK1 + c.ln_eps)
    c_BLKD = (z_BLKD * self.chunk_norm_scale[...].astype(jnp.float32)[None, :, None]
              + self.chunk_norm_bias[...].astype(jnp.float32)[None, :, None])
    mask_BT = jnp.asarray(chunks.update_mask_BT, jnp.float32)
    if not c.use_update_mask:
      mask_BT = jnp.ones_like(mask_BT)
    # r_n as the visibility rule uses it: an empty span is padding whatever its `last`, and a
    # `last` below end − 1 cannot make a chunk visible before its memory's last token.
    start_BLK, end_BLK = jnp.asarray(chunks.start_BLK), jnp.asarray(chunks.end_BLK)
    last_BLK = jnp.where(end_BLK > start_BLK,
                         jnp.maximum(jnp.asarray(chunks.last_BLK, jnp.int32), end_BLK - 1), -1)
    return ChunkMemory(c_BLKD.astype(c.dtype), last_BLK.astype(jnp.int32), mask_BT)

  def visible(self, last_BK: jax.Array, length: int) -> jax.Array:
    """bool [B, T, K]: chunk n is visible to token t iff 0 ≤ r_n ≤ t (causal: its span ends
    at or before t, so its memory reads no token after t)."""
    t_1T1 = jnp.arange(length, dtype=jnp.int32)[None, :, None]
    last_B1K = last_BK[:, None, :]
    return (last_B1K >= 0) & (last_B1K <= t_1T1)

  def delta(self, layer: int, x_BTD: jax.Array, memory: ChunkMemory,
            alpha: float | jax.Array | None = None) -> jax.Array:
    """δ [B, T, D] of block `layer` from its normalized input x (compute dtype).

    δ = α · m_t · W_o(concat_h g_h ⊙ O_h); rows that see no chunk are exactly 0. α: a scalar
    or float32 [B] (one per row); None: `config.alpha`.
    """
    c = self.config
    B, T, D = x_BTD.shape
    if D != c.d_model:
      raise ValueError(f"x_BTD has width {D}, the branch d_model={c.d_model}")
    if memory.c_BLKD.shape[:1] != (B,) or memory.update_mask_BT.shape != (B, T):
      raise ValueError(f"memory of batch {memory.c_BLKD.shape[0]} / mask "
                       f"{memory.update_mask_BT.shape} does not fit x_BTD {x_BTD.shape}")
    H, G, E, K = c.n_heads, c.n_kv_heads, c.head_dim, c.k
    i = layer if c.cross_attention == "per_layer" else 0
    dtype = c.dtype
    param = lambda p: p[i].astype(dtype)
    x_BTD = x_BTD.astype(dtype)
    c_BKD = memory.c_BLKD[:, layer].astype(dtype)
    q_BTHE = (x_BTD @ param(self.q)).reshape(B, T, H, E)
    k_BKGE = (c_BKD @ param(self.k)).reshape(B, K, G, E)
    v_BKGE = (c_BKD @ param(self.v)).reshape(B, K, G, E)
    visible_BTK = self.visible(memory.last_BLK[:, layer], T)
    o_BTHE = attention_core(q_BTHE, k_BKGE, v_BKGE, visible_BTK[:, None])
    if self.gate_w is None:
      gated_BTHE = o_BTHE
    else:
      g_BTH = jax.nn.sigmoid((x_BTD @ param(self.gate_w)).astype(jnp.float32)
                             + self.gate_b[i].astype(jnp.float32))
      gated_BTHE = o_BTHE * g_BTH[..., None].astype(o_BTHE.dtype)
    y_BTD = gated_BTHE.reshape(B, T, H * E).astype(dtype) @ param(self.o)
    alpha = jnp.asarray(c.alpha if alpha is None else alpha, jnp.float32)
    if alpha.ndim == 1:  # one α per row [B] (a training batch's field)
      alpha = alpha[:, None]
    scale_BT1 = (alpha * memory.update_mask_BT)[..., None]
    delta_BTD = (scale_BT1 * y_BTD.astype(jnp.float32)).astype(dtype)
    return jnp.where(visible_BTK.any(axis=-1)[..., None], delta_BTD, jnp.zeros((), dtype))

  def side(self, memory: ChunkMemory,
           alpha: float | jax.Array | None = None) -> Callable[[int, jax.Array], jax.Array]:
    """The decoder's `side(layer, x_BTD) → delta_BTD` hook over `memory`."""
    return lambda layer, x_BTD: self.delta(layer, x_BTD, memory, alpha)
