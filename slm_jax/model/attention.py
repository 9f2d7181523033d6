"""Multi-head self-attention with GQA, RoPE and the SPEC §3 structural masks.

The reference XLA path builds the boolean mask [B, A, T, S] (A = head groups of the attention
spec: 1, or 2 for `mix(A,B)` — heads [0, H/2) get code A, [H/2, H) code B) from the row metadata
with `structure.attends`, and runs the softmax in float32. Padding rows attend themselves, so no
row is empty and nothing is NaN.

The kernel seam: `attention_impl` ∈ {xla, pallas_tpu, triton_gpu, auto} is resolved by
`resolve_attention_impl`; fused kernels live in the `ATTENTION_KERNELS` registry, which the
kernel packages fill. Every implementation has the signature of `xla_attention`.
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.model.config import ATTENTION_IMPLS, ModelConfig
from slm_jax.model.layers import apply_rope, dense
from slm_jax.structure import AttentionSpec, RowMetadata, TokenMeta, attends

_LOG = logging.getLogger(__name__)

# (q_BTHK, k_BSGK, v_BSGK, meta, attention) -> o_BTHK; scale 1/sqrt(K); head h reads KV head
# h // (H/G) and uses attention code attention.head_codes(H)[h].
AttentionFn = Callable[[jax.Array, jax.Array, jax.Array, RowMetadata, AttentionSpec], jax.Array]

# Filled by the kernel packages (`register_attention_kernel`), keyed by attention_impl name.
ATTENTION_KERNELS: dict[str, AttentionFn] = {}
_PROVIDERS = {
    "pallas_tpu": "the Pallas TPU attention kernel (module `pallas_kernels.tpu_attention`)",
    "triton_gpu": "the Triton GPU attention kernel (module `pallas_kernels.triton_attention`, "
                  "needs the `gpu` extra: jax-triton and a GPU jaxlib)",
}
# Imported on first use; importing a module registers its kernel.
_KERNEL_MODULES = {"pallas_tpu": "pallas_kernels.tpu_attention",
                   "triton_gpu": "pallas_kernels.triton_attention"}
_IMPORT_ERRORS: dict[str, str] = {}


def _load_kernel(name: str) -> None:
  """Imports the module providing kernel `name` (once); remembers why it failed, if it did."""
  if name in ATTENTION_KERNELS or name in _IMPORT_ERRORS:
    return
  try:
    importlib.import_module(_KERNEL_MODULES[name])
  except ImportError as error:
    _IMPORT_ERRORS[name] = f"{type(error).__name__}: {error}"
_AUTO_KERNEL = {"tpu": "pallas_tpu", "gpu": "triton_gpu", "cuda": "triton_gpu",
                "rocm": "triton_gpu"}
_LOGGED: set[tuple[str, str, str]] = set()


class KernelNotRegisteredError(LookupError):
  """A fused attention kernel was requested but no package registered it."""


def register_attention_kernel(name: str, fn: AttentionFn) -> None:
  """Makes `fn` the implementation of attention_impl=`name` (pallas_tpu or triton_gpu)."""
  if name not in _PROVIDERS:
    raise ValueError(f"kernel name must be one of {', '.join(_PROVIDERS)}, got {name!r}")
  ATTENTION_KERNELS[name] = fn


def resolve_attention_impl(impl: str, backend: str | None = None) -> str:
  """The concrete implementation for `impl` on `backend` (default: jax's default backend).

  "auto" is "xla" on CPU, and on TPU/GPU the registered fused kernel if any, else "xla".
  An explicitly requested kernel that is not registered raises `KernelNotRegisteredError`.
  """
  if impl not in ATTENTION_IMPLS:
    raise ValueError(f"attention_impl must be one of {', '.join(ATTENTION_IMPLS)}, got {impl!r}")
  backend = (backend or jax.default_backend()).lower()
  resolved = impl
  if impl == "auto":
    kernel = _AUTO_KERNEL.get(backend)
    if kernel is not None:
      _load_kernel(kernel)
    resolved = kernel if kernel in ATTENTION_KERNELS else "xla"
  elif impl != "xla" and (_load_kernel(impl) or impl not in ATTENTION_KERNELS):
    why = f" (import failed: {_IMPORT_ERRORS[impl]})" if impl in _IMPORT_ERRORS else ""
    raise KernelNotRegisteredError(
        f"attention_impl={impl!r} is not registered{why}; it is provided by {_PROVIDERS[impl]}. "
        f"Registered kernels: {sorted(ATTENTION_KERNELS) or 'none'}; use 'xla' or 'auto' "
        "for the reference path.")
  if (impl, backend, resolved) not in _LOGGED:
    _LOGGED.add((impl, backend, resolved))
    _LOG.info("attention_impl=%s on %s: using %s", impl, backend, resolved)
  return resolved


def attention_mask(meta: RowMetadata, codes_C: np.ndarray) -> jax.Array:
  """Boolean mask [B, C, T, S]: slice c is `attends` under attention code codes_C[c]."""
  codes_C11 = jnp.asarray(np.asarray(codes_C, np.int32))[:, None, None]
  query, key = meta.query(jnp), meta.key(jnp)
  lift = lambda m: TokenMeta(m.index, *(x[:, None] for x in m[1:]))  # [B, 1, T|1, 1|S]
  return attends(lift(query), lift(key), codes_C11)


def xla_attention(q_BTHK: jax.Array, k_BSGK: jax.Array, v_BSGK: jax.Array, meta: RowMetadata,
                  attention: AttentionSpec) -> jax.Array:
  """Reference attention: dense mask from `attends`, float32 softmax, GQA without KV copies."""
  B, T, H, K = q_BTHK.shape
  S, G = k_BSGK.shape[1], k_BSGK.shape[2]
  A = len(attention.groups)
  mask_BATS = attention_mask(meta, np.asarray(attention.groups, np.int32))
  q_BTGRK = q_BTHK.reshape(B, T, G, H // G, K)
  logits_BGRTS = jnp.einsum("btgrk,bsgk->bgrts", q_BTGRK, k_BSGK,
                            preferred_element_type=jnp.float32) * (K ** -0.5)
  # Head h = g·R + r = a·(H/A) + j: both are the row-major split of h.
  logits_BAJTS = logits_BGRTS.reshape(B, A, H // A, T, S)
  mask_BA1TS = mask_BATS[:, :, None]
  logits_BAJTS = jnp.where(mask_BA1TS, logits_BAJTS, jnp.finfo(jnp.float32).min)
  # Zero masked probabilities exactly: XLA's fast exp may return ~1e-38 for exp(min - max).
  probs_BAJTS = jnp.where(mask_BA1TS, jax.nn.softmax(logits_BAJTS, axis=-1), 0.0)
  probs_BGRTS = probs_BAJTS.reshape(B, G, H // G, T, S)
  o_BTGRK = jnp.einsum("bgrts,bsgk->btgrk", probs_BGRTS.astype(v_BSGK.dtype), v_BSGK)
  return o_BTGRK.reshape(B, T, H, K)


def attention_fn(impl: str) -> AttentionFn:
  """The function behind a resolved implementation name."""
  return xla_attention if impl == "xla" else ATTENTION_KERNELS[impl]


class SelfAttention(nnx.Module):
  """Self-attention: q/k/v projections (GQA: n_kv_heads ≤ n_heads), RoPE, mask, output proj."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    d, H, G, K = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim
    qkv_bias = config.qkv_bias or config.include_bias
    self.q = dense(config, d, H * K, qkv_bias, rngs=rngs)
    self.k = dense(config, d, G * K, qkv_bias, rngs=rngs)
    self.v = dense(config, d, G * K, qkv_bias, rngs=rngs)
    self.o = dense(config, H * K, d, config.include_bias, rngs=rngs)
    self.shape = (H, G, K)
    self.rope_theta = config.rope_theta
    self.attention = config.attention
    self.impl = resolve_attention_impl(config.attention_impl)

  def __call__(self, x_BTD: jax.Array, meta: RowMetadata) -> jax.Array:
    H, G, K = self.shape
    B, T, _ = x_BTD.shape
    q_BTHK = apply_rope(self.q(x_BTD).reshape(B, T, H, K), meta.position, self.rope_theta)
    k_BTGK = apply_rope(self.k(x_BTD).reshape(B, T, G, K), meta.position, self.rope_theta)
    v_BTGK = self.v(x_BTD).reshape(B, T, G, K)
    o_BTHK = attention_fn(self.impl)(q_BTHK, k_BTGK, v_BTGK, meta, self.attention)
    return self.o(o_BTHK.reshape(B, T, H * K))
