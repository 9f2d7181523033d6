"""Where each decoder parameter lives in a Hugging Face checkpoint, in both directions.

`sources(cfg, arch)` maps every parameter path of `Decoder(cfg)` (`blocks/3/attn/q/kernel`) to
its `TensorSource`: the HF tensor(s) it is made of and how. HF `nn.Linear` weights are [out, in], our
kernels [in, out] (`transpose`); our fused up-projection is [up | gate] (`layers.SwiGLU`), two
HF tensors concatenated along the last axis; the embedding and an untied head carry the
vocabulary on HF axis 0 (`vocab`): rows past the checkpoint's are new (reserved structural
tokens) and rows past the model's are dropped. RoPE needs no permutation: HF's weights are
already in the rotate-half layout the decoder uses (SPEC §13). LoRA adapters have no source.

`read_slice(source, index, shape, fetch)` builds one shard of a parameter from slices of its HF
tensors only (what `jax.make_array_from_callback` asks for), and `to_hf(source, array)` turns a
parameter back into its HF tensors for export.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

# OLMo-2 (post-norm) keeps its two block norms under other names than Llama / Qwen2 (pre-norm).
_BLOCK_NORMS = {
    "Olmo2ForCausalLM": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "LlamaForCausalLM": ("input_layernorm", "post_attention_layernorm"),
    "Qwen2ForCausalLM": ("input_layernorm", "post_attention_layernorm"),
}


class TensorSource(NamedTuple):
  """HF tensors `names` (concatenated along the parameter's last axis), transposed or not."""

  names: tuple[str, ...]
  transpose: bool = False
  vocab: bool = False  # HF axis 0 is the vocabulary


def sources(cfg, arch: str) -> dict[str, TensorSource]:
  """Parameter path → TensorSource for `Decoder(cfg)` stored as architecture `arch`."""
  attn_norm, mlp_norm = _BLOCK_NORMS[arch]
  out = {"embed_tokens/embedding": TensorSource(("model.embed_tokens.weight",), vocab=True),
         "final_norm/weight": TensorSource(("model.norm.weight",))}
  if not cfg.tie_embeddings:
    out["lm_head/kernel"] = TensorSource(("lm_head.weight",), transpose=True, vocab=True)
  for i in range(cfg.n_layers):
    hf, ours = f"model.layers.{i}.", f"blocks/{i}/"
    out[ours + "attn_norm/weight"] = TensorSource((hf + attn_norm + ".weight",))
    out[ours + "mlp_norm/weight"] = TensorSource((hf + mlp_norm + ".weight",))
    biased = {"q": cfg.qkv_bias, "k": cfg.qkv_bias, "v": cfg.qkv_bias, "o": cfg.o_bias}
    for name, bias in biased.items():
      out[f"{ours}attn/{name}/kernel"] = TensorSource((f"{hf}self_attn.{name}_proj.weight",), True)
      if bias:
        out[f"{ours}attn/{name}/bias"] = TensorSource((f"{hf}self_attn.{name}_proj.bias",))
    if cfg.qk_norm:
      for name in ("q_norm", "k_norm"):
        out[f"{ours}attn/{name}/weight"] = TensorSource((f"{hf}self_attn.{name}.weight",))
    up = (f"{hf}mlp.up_proj", f"{hf}mlp.gate_proj")
    out[ours + "mlp/up/kernel"] = TensorSource(tuple(n + ".weight" for n in up), True)
    out[ours + "mlp/down/kernel"] = TensorSource((f"{hf}mlp.down_proj.weight",), True)
    if cfg.mlp_bias:
      out[ours + "mlp/up/bias"] = TensorSource(tuple(n + ".bias" for n in up))
      out[ours + "mlp/down/bias"] = TensorSource((f"{hf}mlp.down_proj.bias",))
  return out


def hf_shapes(source: TensorSource, shape: tuple[int, ...], hf_vocab: int) -> dict[str, tuple]:
  """The shape each HF tensor of `source` must have for a parameter of `shape`."""
  part = (*shape[:-1], shape[-1] // len(source.names))
  hf = part[::-1] if source.transpose else part
  if source.vocab:
    hf = (hf_vocab, *hf[1:])
  return {name: tuple(hf) for name in source.names}


Fetch = Callable[[str, tuple[slice, ...]], np.ndarray]


def _bounds(index: tuple, shape: tuple[int, ...]) -> list[tuple[int, int]]:
  index = tuple(index) + (slice(None),) * (len(shape) - len(index))
  return [s.indices(n)[:2] for s, n in zip(index, shape)]


def read_slice(source: TensorSource, index: tuple, shape: tuple[int, ...], hf_vocab: int,
               fetch: Fetch) -> np.ndarray:
  """The block `index` of a parameter of `shape`, read from its HF tensors' slices only.

  Vocabulary rows past the checkpoint's `hf_vocab` come back as zeros (filled in later).
  """
  bounds = _bounds(index, shape)
  last = len(shape) - 1
  width = shape[last] // len(source.names)
  lo, hi = bounds[last]
  pieces = []
  for p, name in enumerate(source.names):
    start, stop = max(lo, p * width), min(hi, (p + 1) * width)
    if start >= stop:
      continue
    local = [*bounds[:last], (start - p * width, stop - p * width)]
    hf_bounds = local[::-1] if source.transpose else local
    block = _fetch_rows(name, hf_bounds, hf_vocab if source.vocab else None, fetch)
    pieces.append(block.T if source.transpose else block)
  return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=last)


def _fetch_rows(name: str, bounds: list[tuple[int, int]], rows: int | None,
                fetch: Fetch) -> np.ndarray:
  start, stop = bounds[0]
  available = stop if rows is None else min(stop, rows)
  block = fetch(name, tuple(slice(a, b) for a, b in [(start, max(start, available)),
                                                     *bounds[1:]]))
  missing = (stop - start) - block.shape[0]
  if missing > 0:
    block = np.concatenate([block, np.zeros((missing, *block.shape[1:]), block.dtype)])
  return block


def to_hf(source: TensorSource, array: np.ndarray) -> dict[str, np.ndarray]:
  """The HF tensors of one parameter (export)."""
  parts = np.split(np.asarray(array), len(source.names), axis=-1)
  return {name: np.ascontiguousarray(part.T if source.transpose else part)
          for name, part in zip(source.names, parts)}
