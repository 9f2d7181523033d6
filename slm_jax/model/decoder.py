"""The OLMo-style decoder (SPEC §6): embedding, pre-norm blocks, final RMSNorm, (tied) head.

`Decoder(tokens_BT, meta)` → float32 logits [B, T, V]. The pieces are public so callers can
start from precomputed embeddings (`embed`, `hidden`, `logits`): the causality tests
differentiate with respect to the input embeddings, and GTCA reads hidden states.

The per-layer hooks of `hidden`/`__call__`:
- `attend(layer, q_BTHK, k_BSGK, v_BSGK, meta, attention) → o_BTHK`, the kernel seam with the layer
  index in front. When given, every block's self-attention calls it with its own q/k/v instead of
  the model's attention function: a KV cache (`slm_jax.inference.incremental`) stores the new
  keys/values and attends over its cache this way, so decoding runs the model's own blocks and
  head; a block feature added here is decoded for free.
- `side(layer, x_BTD) → delta_BTD`: a side branch (GTCA's gated tree cross-attention, SPEC §10)
  reads the block's attention input (the normalized x self-attention reads; the raw x for
  post-norm blocks) and its output is added to the residual stream together with the
  self-attention output. Its parameters live outside the decoder, so the backbone stays frozen.
- `observe(layer, x_BTD)`: called with each block's output (the residual stream after layer
  `layer`), e.g. to collect per-layer states for a probe; its return value is ignored.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from slm_jax.model.attention import AttentionFn, SelfAttention
from slm_jax.model.config import ModelConfig
from slm_jax.model.layers import RMSNorm, SwiGLU, dense
from slm_jax.model.loss import loss_and_metrics
from slm_jax.structure import RowMetadata

# attend(layer, q_BTHK, k_BSGK, v_BSGK, meta, attention) -> o_BTHK (see the module docstring).
LayerAttention = Callable[..., jax.Array]
# side(layer, x_BTD) -> delta_BTD; observe(layer, x_BTD) -> ignored (see the module docstring).
LayerSide = Callable[[int, jax.Array], jax.Array]


def _norm(config: ModelConfig) -> RMSNorm:
  return RMSNorm(config.d_model, eps=config.norm_eps, use_bias=config.include_bias,
                 dtype=config.compute_dtype, param_dtype=config.param_dtype,
                 cast_first=config.norm_cast_first)


class Block(nnx.Module):
  """Pre-norm: x + attn(norm(x)); x + mlp(norm(x)). Post-norm (`norm_position="post"`, OLMo-2):
  x + norm(attn(x)); x + norm(mlp(x)) — the same two norms, applied to the branch outputs."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    self.attn_norm = _norm(config)
    self.attn = SelfAttention(config, rngs=rngs)
    self.mlp_norm = _norm(config)
    self.mlp = SwiGLU(config, rngs=rngs)
    self.post_norm = config.norm_position == "post"

  def __call__(self, x_BTD: jax.Array, meta: RowMetadata,
               attend: AttentionFn | None = None,
               side: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:
    if self.post_norm:
      update_BTD = self.attn_norm(self.attn(x_BTD, meta, attend)).astype(x_BTD.dtype)
      if side is not None:
        update_BTD = update_BTD + side(x_BTD).astype(x_BTD.dtype)
      x_BTD = x_BTD + update_BTD
      return x_BTD + self.mlp_norm(self.mlp(x_BTD)).astype(x_BTD.dtype)
    xn_BTD = self.attn_norm(x_BTD)
    update_BTD = self.attn(xn_BTD, meta, attend).astype(x_BTD.dtype)
    if side is not None:
      update_BTD = update_BTD + side(xn_BTD).astype(x_BTD.dtype)
    x_BTD = x_BTD + update_BTD
    return x_BTD + self.mlp(self.mlp_norm(x_BTD)).astype(x_BTD.dtype)


class Decoder(nnx.Module):
  """Token embedding, `n_layers` blocks, final RMSNorm, output head tied to the embedding."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    if config.vocab_size is None:
      raise ValueError("ModelConfig.vocab_size is not set (a run sets it from its tokenizer: "
                       "config.replace(vocab_size=tokenizer.vocab_size))")
    self.config = config
    self.embed_tokens = nnx.Embed(config.vocab_size, config.d_model, dtype=config.compute_dtype,
                                  param_dtype=config.param_dtype,
                                  embedding_init=nnx.initializers.normal(config.init_std),
                                  rngs=rngs)
    self.blocks = nnx.List([Block(config, rngs=rngs) for _ in range(config.n_layers)])
    self.final_norm = _norm(config)
    self.lm_head = (None if config.tie_embeddings
                    else dense(config, config.d_model, config.vocab_size, False, rngs=rngs))

  def embed(self, tokens_BT: jax.Array) -> jax.Array:
    """Input embeddings [B, T, D] in the compute dtype."""
    return self.embed_tokens(tokens_BT)

  def hidden(self, x_BTD: jax.Array, meta: RowMetadata,
             attend: LayerAttention | None = None, side: LayerSide | None = None,
             observe: LayerSide | None = None) -> jax.Array:
    """Final-normed hidden states [B, T, D] from input embeddings; meta fields are [B, T].
    `attend`, `side`, `observe`: the per-layer hooks (module docstring)."""
    x_BTD = x_BTD.astype(self.config.compute_dtype)
    for layer, block in enumerate(self.blocks):
      x_BTD = block(x_BTD, meta, None if attend is None else functools.partial(attend, layer),
                    None if side is None else functools.partial(side, layer))
      if observe is not None:
        observe(layer, x_BTD)
    return self.final_norm(x_BTD)

  def logits(self, h_BTD: jax.Array) -> jax.Array:
    """Output head, float32 [B, T, V] (accumulated in float32)."""
    dtype = self.config.compute_dtype
    if self.lm_head is None:
      w_VD = self.embed_tokens.embedding[...].astype(dtype)
      return jnp.einsum("btd,vd->btv", h_BTD.astype(dtype), w_VD,
                        preferred_element_type=jnp.float32)
    w_DV = self.lm_head.kernel[...].astype(dtype)
    return jnp.einsum("btd,dv->btv", h_BTD.astype(dtype), w_DV,
                      preferred_element_type=jnp.float32)

  def __call__(self, tokens_BT: jax.Array, meta: RowMetadata,
               attend: LayerAttention | None = None, side: LayerSide | None = None,
               observe: LayerSide | None = None) -> jax.Array:
    return self.logits(self.hidden(self.embed(tokens_BT), meta, attend, side, observe))

  def loss_sums(self, batch: dict) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(loss_sum, sums) of the train/eval step for a batch (`Batch.as_dict()`: tokens, meta,
    targets): the next-token NLL over its targets (`loss.loss_and_metrics`)."""
    logits_BTV = self(batch["tokens"], batch["meta"])
    _, sums = loss_and_metrics(logits_BTV, batch["tokens"], batch["targets"], batch["meta"].kind)
    return sums["loss_sum"], sums


def _abstract_params(config: ModelConfig) -> dict[str, int]:
  """Parameter sizes by top-level attribute, from shapes only (`nnx.eval_shape`, no allocation)."""
  model = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
  sizes: dict[str, int] = {}
  for path, leaf in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    sizes[str(path[0])] = sizes.get(str(path[0]), 0) + math.prod(leaf.shape)
  return sizes


def param_count(config: ModelConfig) -> int:
  """All parameters (a tied embedding counted once)."""
  return sum(_abstract_params(config).values())


def non_embedding_param_count(config: ModelConfig) -> int:
  """Parameters other than the token embedding and an untied output head (SPEC §6, §7 N)."""
  sizes = _abstract_params(config)
  return sum(n for name, n in sizes.items() if name not in ("embed_tokens", "lm_head"))
