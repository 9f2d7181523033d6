"""Multi-head self-attention with GQA, RoPE and the SPEC §3 structural masks.

Shape letters: B batch rows, T query tokens, S key tokens, H query heads, G key/value heads
(GQA: head h reads KV head h // (H/G)), R = H/G, K head dim, A head groups of the attention spec
(1, or 2 for `mix(A,B)`: heads [0, H/2) get code A, [H/2, H) code B), J = H/A, D d_model.

Attention is two steps, and everything that attends goes through them:
- `SelfAttention.project(x_BTD, position_BT) → q_BTHK, k_BTGK, v_BTGK` (projections, optional
  QK-norm, RoPE at the tokens' positions);
- an **attention function** with the kernel-seam signature `AttentionFn(q_BTHK, k_BSGK, v_BSGK,
  meta, attention) → o_BTHK`. The reference is `xla_attention` (dense mask from
  `structure.attends`, then `attention_core`); fused kernels (`KERNELS`) compute the same in tiles;
  a KV cache is one too: it receives the new tokens' q/k/v through the decoder's per-layer hook,
  stores k/v, and calls `attention_core` over the cached keys with the mask of its own metadata.

`attention_core` is THE softmax attention (float32 logits and softmax, masked probabilities
zeroed exactly, GQA without KV copies); no other module restates it.

The kernel seam: `attention_impl` ∈ {xla, pallas_tpu, triton_gpu, auto} is resolved when the
model first runs (never at construction: building or counting a model needs no kernel). `KERNELS`
is the static table name → (module, function); the module is imported on first use, and a module
that fails to import is reported with the reason. `register_attention_kernel` adds or replaces an
implementation at run time (tests, experiments).
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.kernels import target
from slm_jax.model.config import ATTENTION_IMPLS, ModelConfig
from slm_jax.model.layers import RMSNorm, apply_rope, dense, rope_scaling_of
from slm_jax.structure import AttentionSpec, RowMetadata, TokenMeta, attends

_LOG = logging.getLogger(__name__)

# (q_BTHK, k_BSGK, v_BSGK, meta, attention) -> o_BTHK; scale 1/sqrt(K); head h reads KV head
# h // (H/G) and uses attention code attention.head_codes(H)[h].
AttentionFn = Callable[[jax.Array, jax.Array, jax.Array, RowMetadata, AttentionSpec], jax.Array]


class KernelEntry(NamedTuple):
  module: str
  function: str
  provider: str  # what it is and what it needs, for error messages


# The fused kernels of the package: attention_impl name -> where its function lives.
KERNELS = {
    "pallas_tpu": KernelEntry("slm_jax.kernels.tpu_attention", "pallas_attention",
                              "the Pallas TPU attention kernel"),
    "triton_gpu": KernelEntry("slm_jax.kernels.triton_attention", "triton_attention",
                              "the Triton GPU attention kernel (needs the `gpu` extra: "
                              "jax-triton and a GPU jaxlib)"),
}
_AUTO_KERNEL = {"tpu": "pallas_tpu", "gpu": "triton_gpu", "cuda": "triton_gpu",
                "rocm": "triton_gpu"}
# Loaded (or registered) implementations by name; filled on first use.
ATTENTION_KERNELS: dict[str, AttentionFn] = {}
_IMPORT_ERRORS: dict[str, str] = {}
_LOGGED: set[tuple[str, str, str]] = set()


class KernelNotRegisteredError(LookupError):
  """A fused attention kernel was requested but cannot be loaded."""


def register_attention_kernel(name: str, fn: AttentionFn) -> None:
  """Makes `fn` the implementation of attention_impl=`name` (one of `KERNELS`)."""
  if name not in KERNELS:
    raise ValueError(f"kernel name must be one of {', '.join(KERNELS)}, got {name!r}")
  ATTENTION_KERNELS[name] = fn


def _load_kernel(name: str) -> None:
  """Imports kernel `name` from its table entry (once); remembers why it failed, if it did."""
  if name in ATTENTION_KERNELS or name in _IMPORT_ERRORS:
    return
  entry = KERNELS[name]
  try:
    ATTENTION_KERNELS[name] = getattr(importlib.import_module(entry.module), entry.function)
  except (ImportError, AttributeError) as error:
    _IMPORT_ERRORS[name] = f"{type(error).__name__}: {error}"


def resolve_attention_impl(impl: str, backend: str | None = None) -> str:
  """The concrete implementation for `impl` on `backend` (default: the platform compiled for,
  `kernels.target.platform`: the mesh in force — e.g. a TPU topology's devices on a CPU host —
  else jax's default backend).

  "auto" is "xla" on CPU, and on TPU/GPU that backend's fused kernel if it loads, else "xla".
  An explicitly requested kernel that cannot be loaded raises `KernelNotRegisteredError`.
  """
  if impl not in ATTENTION_IMPLS:
    raise ValueError(f"attention_impl must be one of {', '.join(ATTENTION_IMPLS)}, got {impl!r}")
  backend = (backend or target.platform()).lower()
  resolved = impl
  if impl == "auto":
    kernel = _AUTO_KERNEL.get(backend)
    if kernel is not None:
      _load_kernel(kernel)
    resolved = kernel if kernel in ATTENTION_KERNELS else "xla"
  elif impl != "xla":
    _load_kernel(impl)
    if impl not in ATTENTION_KERNELS:
      entry = KERNELS[impl]
      raise KernelNotRegisteredError(
          f"attention_impl={impl!r} is not available (import failed: {_IMPORT_ERRORS[impl]}); "
          f"it is {entry.provider}, `{entry.module}.{entry.function}`. Use 'xla' or 'auto' for "
          "the reference path.")
  if (impl, backend, resolved) not in _LOGGED:
    _LOGGED.add((impl, backend, resolved))
    _LOG.info("attention_impl=%s on %s: using %s", impl, backend, resolved)
  return resolved


def attention_fn(impl: str) -> AttentionFn:
  """The function behind a resolved implementation name."""
  return xla_attention if impl == "xla" else ATTENTION_KERNELS[impl]


def attention_mask(meta: RowMetadata, codes_C: np.ndarray) -> jax.Array:
  """Boolean mask [B, C, T, S]: slice c is `attends` under attention code codes_C[c]."""
  codes_C11 = jnp.asarray(np.asarray(codes_C, np.int32))[:, None, None]
  query, key = meta.query(jnp), meta.key(jnp)
  lift = lambda m: TokenMeta(m.index, *(x[:, None] for x in m[1:]))  # [B, 1, T|1, 1|S]
  return attends(lift(query), lift(key), codes_C11)


def attention_core(q_BTHK: jax.Array, k_BSGK: jax.Array, v_BSGK: jax.Array,
                   mask_BATS: jax.Array, bias_BHTS: jax.Array | None = None) -> jax.Array:
  """Softmax attention of T queries over S keys under a mask per head group (A divides H).

  Scores in float32 scaled by K^-1/2, plus `bias_BHTS` when given (added after the scaling; the
  Pushdown model's stack-tape term); masked probabilities are zeroed exactly (XLA's fast exp
  may return ~1e-38 for exp(min - max)); a query must see at least one key.
  """
  B, T, H, K = q_BTHK.shape
  S, G = k_BSGK.shape[1], k_BSGK.shape[2]
  A = mask_BATS.shape[1]
  q_BTGRK = q_BTHK.reshape(B, T, G, H // G, K)
  logits_BGRTS = jnp.einsum("btgrk,bsgk->bgrts", q_BTGRK, k_BSGK,
                            preferred_element_type=jnp.float32) * (K ** -0.5)
  if bias_BHTS is not None:
    logits_BGRTS = logits_BGRTS + bias_BHTS.astype(jnp.float32).reshape(B, G, H // G, T, S)
  # Head h = g·R + r = a·J + j: both are the row-major split of h.
  logits_BAJTS = logits_BGRTS.reshape(B, A, H // A, T, S)
  mask_BA1TS = mask_BATS[:, :, None]
  logits_BAJTS = jnp.where(mask_BA1TS, logits_BAJTS, jnp.finfo(jnp.float32).min)
  probs_BAJTS = jnp.where(mask_BA1TS, jax.nn.softmax(logits_BAJTS, axis=-1), 0.0)
  probs_BGRTS = probs_BAJTS.reshape(B, G, H // G, T, S)
  o_BTGRK = jnp.einsum("bgrts,bsgk->btgrk", probs_BGRTS.astype(v_BSGK.dtype), v_BSGK)
  return o_BTGRK.reshape(B, T, H, K)


def xla_attention(q_BTHK: jax.Array, k_BSGK: jax.Array, v_BSGK: jax.Array, meta: RowMetadata,
                  attention: AttentionSpec) -> jax.Array:
  """Reference attention: the dense mask of `attends` per head group, then `attention_core`."""
  mask_BATS = attention_mask(meta, np.asarray(attention.groups, np.int32))
  return attention_core(q_BTHK, k_BSGK, v_BSGK, mask_BATS)


class SelfAttention(nnx.Module):
  """Self-attention: q/k/v projections (GQA: n_kv_heads ≤ n_heads), optional QK-norm (OLMo-2:
  RMSNorm over the whole projected width), RoPE, an attention function, output projection."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    d, H, G, K = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim
    qkv_bias = config.qkv_bias or config.include_bias
    self.q = dense(config, d, H * K, qkv_bias, rngs=rngs, target="q")
    self.k = dense(config, d, G * K, qkv_bias, rngs=rngs, target="k")
    self.v = dense(config, d, G * K, qkv_bias, rngs=rngs, target="v")
    self.o = dense(config, H * K, d, config.include_bias or config.o_bias, rngs=rngs,
                   target="o")
    norm = lambda width: RMSNorm(width, eps=config.norm_eps, dtype=config.compute_dtype,
                                 param_dtype=config.param_dtype,
                                 cast_first=config.norm_cast_first)
    self.q_norm = norm(H * K) if config.qk_norm else None
    self.k_norm = norm(G * K) if config.qk_norm else None
    self.shape = (H, G, K)
    self.rope_theta = config.rope_theta
    self.rope_scaling = rope_scaling_of(config)
    self.attention = config.attention
    self.attention_impl = config.attention_impl

  @property
  def impl(self) -> str:
    """The resolved attention implementation (resolved on use, not at construction)."""
    return resolve_attention_impl(self.attention_impl)

  def project(self, x_BTD: jax.Array, position_BT: jax.Array):
    """q [B, T, H, K], k and v [B, T, G, K] of the tokens at `position_BT` (RoPE applied)."""
    H, G, K = self.shape
    B, T, _ = x_BTD.shape
    q, k = self.q(x_BTD), self.k(x_BTD)
    if self.q_norm is not None:
      q, k = self.q_norm(q), self.k_norm(k)
    q_BTHK = apply_rope(q.reshape(B, T, H, K), position_BT, self.rope_theta, self.rope_scaling)
    k_BTGK = apply_rope(k.reshape(B, T, G, K), position_BT, self.rope_theta, self.rope_scaling)
    return q_BTHK, k_BTGK, self.v(x_BTD).reshape(B, T, G, K)

  def __call__(self, x_BTD: jax.Array, meta: RowMetadata,
               attend: AttentionFn | None = None) -> jax.Array:
    """Attention output [B, T, D]; `attend` (a KV cache, say) replaces the model's attention
    function and receives this layer's q/k/v."""
    B, T, _ = x_BTD.shape
    q_BTHK, k_BTGK, v_BTGK = self.project(x_BTD, meta.position)
    o_BTHK = (attend or attention_fn(self.impl))(q_BTHK, k_BTGK, v_BTGK, meta, self.attention)
    return self.o(o_BTHK.reshape(B, T, -1))
