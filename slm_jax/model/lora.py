"""LoRA adapters (Hu et al. 2021) on the decoder's projections: `LoraLinear`, merge and unmerge.

`y = x W + b + (alpha / rank) · dropout(x) A B`, A [D_in, r] uniform(±1/√D_in) (PEFT's
kaiming-uniform), B [r, W] zeros, so a fresh adapter leaves the model's outputs unchanged. The
model builds a `LoraLinear` wherever `ModelConfig.lora_rank > 0` and `lora_targets` names the
projection (`layers.dense(..., target=...)`): q, k, v, o of attention, up, gate, down of the MLP.
The fused up-projection's output is [up | gate] (`layers.SwiGLU`), so its adapters are per column
block: `parts` says which of its equal column blocks are adapted, each with its own A and B
(`lora_a` [P, D_in, r], `lora_b` [P, r, W] over the P adapted blocks). Adapters are float32
`nnx.LoRAParam`s (a kind of `nnx.Param`) named `lora_a` / `lora_b`, so checkpoints, the
partition table (replicated: they are small) and the trainable filters (`TRAINABLE_GROUPS` in
`slm_jax.train.optimizer`) see them by name.

Dropout needs randomness only while training: `dropout_rng(key)` around the traced loss turns it
on (each adapter call folds its call index into the key); everywhere else it is the identity.
`merge(model)` adds every adapter into its kernel (the forward then skips the adapters);
`unmerge(model)` subtracts it again.

Why our own module and not `qwix`: qwix adds LoRA by intercepting `dot_general` in the model's
`__call__` only (not `hidden`/`logits`, which GTCA and the scorer call), after one forward pass
with example inputs, and rewrites the model's class; its adapters take the base weight's dtype
(bf16 adapters on a bf16 backbone), its dropout is always on (no eval mode), it has no merge, and
it sees the fused up-projection as one matrix, so `gate` and `up` could not be targeted apart.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import jax
import jax.numpy as jnp
from flax import nnx

LORA_PARAM_NAMES = ("lora_a", "lora_b")
_DROPOUT: list[list] = []  # stack of [key, calls so far] while a training loss is traced


def lora_parts(config, target: str | tuple[str, ...]) -> tuple[bool, ...] | None:
  """Which column blocks of a projection named `target` get adapters (None: no adapter)."""
  names = (target,) if isinstance(target, str) else tuple(target)
  if not names or getattr(config, "lora_rank", 0) <= 0:
    return None
  parts = tuple(name in config.lora_targets for name in names)
  return parts if any(parts) else None


def adapter_init(name: str, key: jax.Array | None, shape: tuple[int, ...]) -> jax.Array:
  """A fresh adapter (float32): `lora_a` [P, D_in, r] uniform(±1/√D_in) from `key`, `lora_b`
  zeros (the one init rule: `LoraLinear`, and `hf.load` for adapters a checkpoint lacks)."""
  if name == "lora_a":
    bound = shape[-2] ** -0.5
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)
  if name == "lora_b":
    return jnp.zeros(shape, jnp.float32)
  raise ValueError(f"{name!r} is not a LoRA adapter ({', '.join(LORA_PARAM_NAMES)})")


@contextlib.contextmanager
def dropout_rng(key: jax.Array) -> Iterator[None]:
  """LoRA dropout on (with randomness from `key`) for the forward passes traced inside."""
  _DROPOUT.append([key, 0])
  try:
    yield
  finally:
    _DROPOUT.pop()


def _dropout(x: jax.Array, rate: float) -> jax.Array:
  if rate <= 0 or not _DROPOUT:
    return x
  state = _DROPOUT[-1]
  key = jax.random.fold_in(state[0], state[1])
  state[1] += 1
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


class LoraLinear(nnx.Linear):
  """`nnx.Linear` plus low-rank adapters on the column blocks marked in `parts`."""

  def __init__(self, in_features: int, out_features: int, *, parts: tuple[bool, ...],
               rank: int, alpha: float, dropout: float, rngs: nnx.Rngs, **kwargs):
    super().__init__(in_features, out_features, rngs=rngs, **kwargs)
    if out_features % len(parts):
      raise ValueError(f"{out_features} outputs do not split into {len(parts)} LoRA blocks")
    self.parts = tuple(bool(p) for p in parts)
    self.rank, self.scale, self.dropout = int(rank), float(alpha) / rank, float(dropout)
    self.merged = False
    adapted, width = sum(self.parts), out_features // len(parts)
    self.lora_a = nnx.LoRAParam(adapter_init("lora_a", rngs.params(),
                                             (adapted, in_features, rank)))
    self.lora_b = nnx.LoRAParam(adapter_init("lora_b", None, (adapted, rank, width)))

  def delta(self) -> jax.Array:
    """The adapters as a kernel update, float32 [D_in, D_out] (zero on unadapted blocks)."""
    a_PDR, b_PRW = self.lora_a[...], self.lora_b[...]
    update_PDW = jnp.einsum("pdr,prw->pdw", a_PDR, b_PRW) * self.scale
    blocks, i = [], 0
    for adapted in self.parts:
      if adapted:
        blocks.append(update_PDW[i])
        i += 1
      else:
        blocks.append(jnp.zeros_like(update_PDW[0]))
    return jnp.concatenate(blocks, axis=-1)

  def __call__(self, x: jax.Array) -> jax.Array:
    y = super().__call__(x)
    if self.merged:
      return y
    dtype = y.dtype
    h_PR = jnp.einsum("...d,pdr->...pr", _dropout(x, self.dropout).astype(dtype),
                      self.lora_a[...].astype(dtype))
    d_PW = jnp.einsum("...pr,prw->...pw", h_PR, self.lora_b[...].astype(dtype)) * self.scale
    blocks, i = [], 0
    for adapted in self.parts:
      if adapted:
        blocks.append(d_PW[..., i, :])
        i += 1
      else:
        blocks.append(jnp.zeros(d_PW.shape[:-2] + d_PW.shape[-1:], dtype))
    return y + jnp.concatenate(blocks, axis=-1).astype(dtype)


def lora_layers(model: nnx.Module) -> list[tuple[tuple, LoraLinear]]:
  """(path, layer) of every adapted projection of `model`."""
  return [(path, m) for path, m in nnx.iter_modules(model) if isinstance(m, LoraLinear)]


def _shift(model: nnx.Module, sign: float, merged: bool) -> int:
  count = 0
  for _, layer in lora_layers(model):
    if layer.merged == merged:
      continue
    kernel = layer.kernel[...]
    layer.kernel[...] = (kernel.astype(jnp.float32) + sign * layer.delta()).astype(kernel.dtype)
    layer.merged = merged
    count += 1
  return count


def merge(model: nnx.Module) -> int:
  """Adds every adapter into its kernel (in place); the forward then skips them. Returns how
  many layers were merged (already merged ones are left alone)."""
  return _shift(model, 1.0, True)


def unmerge(model: nnx.Module) -> int:
  """Subtracts merged adapters from their kernels again (equal up to float rounding)."""
  return _shift(model, -1.0, False)


def is_lora_path(path: str) -> bool:
  """Whether a '/'-joined parameter path is an adapter matrix."""
  return path.rsplit("/", 1)[-1] in LORA_PARAM_NAMES
