"""Tiny GGUF files written with `gguf.GGUFWriter`, the way llama.cpp's converter writes them.

`write_model(path, arch, model, types, ...)` stores a transformers model's weights as a GGUF file:
each 2-D weight in the ggml type `types` gives it (quantized with `gguf.quants.quantize` where gguf
has a quantizer, else — the K-quants — as random blocks with small scales), llama's q/k rows
permuted into llama.cpp's interleaved RoPE layout (the converter's `permute`, written out here),
norms and biases F32, the tensor names from GGUF's naming table (spelled out below, not taken
from the importer). It returns the weights the file holds in HF layout (the dequantized values,
unpermuted), which the tests load into the transformers model as the reference.
`byte_level_vocab()` / `sentencepiece_vocab()` train small vocabularies with `tokenizers` and
return their GGUF tokenizer metadata.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

import pytest

gguf = pytest.importorskip("gguf")

# HF module → GGUF tensor name (GGUF spec "Standardized tensor names").
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_BLOCK = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
          "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down"}
QUANTIZABLE = ("Q8_0", "Q4_0", "Q4_1", "BF16")  # gguf.quants.quantize exists for these
# K-quant super-blocks: (bytes, byte offsets of the f16 scales `d` (and `dmin`), their size).
K_BLOCKS = {"Q4_K": (144, (0, 2), 6e-5), "Q5_K": (176, (0, 2), 3e-5), "Q6_K": (210, (208,), 1e-5),
            "Q2_K": (84, (80, 82), 1e-4)}  # Q2_K: a type the importer refuses
TEXTS = ["The cats chase the mice, don't they?", "A hungry cat meows at the door 24 times.",
         "Mice will go where cats are not; the door is open.", "  two spaces\tand a tab\n",
         "héllo wörld – naïve café ☃ 3.14159", "<|im_start|>user\nHi<|im_end|>",
         "Numbers: 1234567, 2024 and 42!", "<s> inside text </s> and <think>"]


def gguf_name(hf_name: str) -> str:
  module, suffix = hf_name.rsplit(".", 1)
  if module in _TOP:
    return f"{_TOP[module]}.{suffix}"
  _, _, layer, rest = module.split(".", 3)
  return f"blk.{layer}.{_BLOCK[rest]}.{suffix}"


def permute(rows: np.ndarray, heads: int) -> np.ndarray:
  """llama.cpp convert_hf_to_gguf.py LlamaModel.permute: rotate-half → interleaved rows."""
  return (rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:])
          .swapaxes(1, 2).reshape(rows.shape))


def quantize(values: np.ndarray, kind: str, rng: np.random.Generator):
  """(what the file stores, float32 values it means) for float32 rows `values` in type `kind`."""
  qtype = gguf.GGMLQuantizationType[kind]
  if kind == "F32":
    return values, values
  if kind == "F16":
    return values.astype(np.float16), values.astype(np.float16).astype(np.float32)
  if kind in QUANTIZABLE:
    stored = gguf.quants.quantize(values, qtype)
  else:  # random super-blocks with small scales: gguf has no K-quant quantizer
    size, offsets, scale = K_BLOCKS[kind]
    blocks = values.size // 256
    stored = rng.integers(0, 256, (blocks, size), dtype=np.uint8)
    for offset in offsets:
      d = (rng.uniform(0.5, 1.5, blocks) * scale).astype(np.float16)
      stored[:, offset:offset + 2] = d.view(np.uint8).reshape(blocks, 2)
    stored = stored.reshape(values.shape[0], -1)
  return stored, gguf.quants.dequantize(stored, qtype).astype(np.float32)


def write_model(path: pathlib.Path, arch: str, model, types: dict[str, str], *,
                tokenizer: dict[str, Any], seed: int = 0, rope_freqs: np.ndarray | None = None,
                extra: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
  """Writes `model` (transformers, float32) as GGUF `path` (see the module docstring); `types`
  maps HF weight names to ggml types (others: F32). Returns the weights it holds, HF layout."""
  cfg = model.config
  rng = np.random.default_rng(seed)
  writer = gguf.GGUFWriter(str(path), arch)
  writer.add_block_count(cfg.num_hidden_layers)
  writer.add_context_length(cfg.max_position_embeddings)
  writer.add_embedding_length(cfg.hidden_size)
  writer.add_feed_forward_length(cfg.intermediate_size)
  writer.add_head_count(cfg.num_attention_heads)
  writer.add_head_count_kv(cfg.num_key_value_heads)
  writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
  writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
  if arch == "llama":
    writer.add_rope_dimension_count(cfg.head_dim)
  for key, value in (extra or {}).items():
    writer.add_key_value(key, *value)
  write_tokenizer(writer, tokenizer)
  heads = {"q_proj": cfg.num_attention_heads, "k_proj": cfg.num_key_value_heads}
  truth = {}
  for name, tensor in model.state_dict().items():
    if name == "lm_head.weight" and cfg.tie_word_embeddings:
      continue
    values = tensor.detach().numpy().astype(np.float32)
    kind = types.get(name, "F32") if values.ndim == 2 else "F32"
    stored, truth[name] = quantize(values, kind, rng)
    projection = name.split(".")[-2]
    if arch == "llama" and projection in heads:
      stored = permute(stored, heads[projection])
    raw = gguf.GGMLQuantizationType[kind] if stored.dtype == np.uint8 else None
    writer.add_tensor(gguf_name(name), stored, raw_dtype=raw)
  if rope_freqs is not None:
    writer.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return truth


def write_tokenizer(writer, tokenizer: dict[str, Any]) -> None:
  """GGUF tokenizer metadata from a dict of `tokenizer.ggml.*` / `tokenizer.*` values."""
  adders = {"model": writer.add_tokenizer_model, "pre": writer.add_tokenizer_pre,
            "tokens": writer.add_token_list, "token_type": writer.add_token_types,
            "merges": writer.add_token_merges, "scores": writer.add_token_scores,
            "bos_token_id": writer.add_bos_token_id, "eos_token_id": writer.add_eos_token_id,
            "unknown_token_id": writer.add_unk_token_id,
            "padding_token_id": writer.add_pad_token_id,
            "add_bos_token": writer.add_add_bos_token, "add_eos_token": writer.add_add_eos_token,
            "add_space_prefix": writer.add_add_space_prefix,
            "chat_template": writer.add_chat_template}
  for key, value in tokenizer.items():
    adders[key](value)


def write_tokenizer_only(path: pathlib.Path, tokenizer: dict[str, Any]) -> pathlib.Path:
  """A llama GGUF file with tokenizer metadata and sizes but no tensors."""
  writer = gguf.GGUFWriter(str(path), "llama")
  for adder, value in ((writer.add_block_count, 1), (writer.add_embedding_length, 64),
                       (writer.add_feed_forward_length, 128), (writer.add_head_count, 4),
                       (writer.add_layer_norm_rms_eps, 1e-5)):
    adder(value)
  write_tokenizer(writer, tokenizer)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


def _trained(pre_tokenizer, specials: list[str], size: int, alphabet=()) -> tuple[dict, list]:
  import tokenizers  # pylint: disable=import-outside-toplevel
  from tokenizers import models, trainers  # pylint: disable=import-outside-toplevel
  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizer
  trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=specials,
                                initial_alphabet=list(alphabet), show_progress=False)
  corpus = [t for t in TEXTS if "<" not in t] + ["the cat sat on the mat and the dog ran"] * 5
  tok.train_from_iterator(corpus * 10, trainer)
  vocab = tok.get_vocab()
  import json  # pylint: disable=import-outside-toplevel
  merges = json.loads(tok.to_str())["model"]["merges"]
  return vocab, [" ".join(m) if isinstance(m, list) else m for m in merges]


def byte_level_vocab(pre: str = "qwen2", template: str | None = None,
                     split_digits: bool = False) -> dict[str, Any]:
  """GGUF metadata of a trained byte-level BPE: three CONTROL tokens, one USER_DEFINED
  (`split_digits`: trained on single digits, as SmolLM's vocabulary was)."""
  from tokenizers import pre_tokenizers  # pylint: disable=import-outside-toplevel
  specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  split = pre_tokenizers.ByteLevel(add_prefix_space=False)
  if split_digits:
    split = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split])
  vocab, merges = _trained(split, specials, 380, pre_tokenizers.ByteLevel.alphabet())
  tokens = sorted(vocab, key=vocab.get) + ["<think>"]
  types = [3 if t in specials else 4 if t == "<think>" else 1 for t in tokens]
  out = {"model": "gpt2", "pre": pre, "tokens": tokens, "token_type": types, "merges": merges,
         "bos_token_id": 1, "eos_token_id": 2, "unknown_token_id": 0, "padding_token_id": 2,
         "add_bos_token": False}
  return {**out, **({"chat_template": template} if template else {})}


def sentencepiece_vocab(with_merges: bool = True, template: str | None = None) -> dict[str, Any]:
  """GGUF metadata of a SentencePiece-style BPE: <unk>, <s>, </s>, 256 byte tokens, pieces."""
  from tokenizers import pre_tokenizers  # pylint: disable=import-outside-toplevel
  vocab, merges = _trained(pre_tokenizers.Metaspace(prepend_scheme="first"), [], 220)
  head = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
  tokens = head + [t for t in sorted(vocab, key=vocab.get) if t not in head]
  types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - len(head))
  out = {"model": "llama", "tokens": tokens, "token_type": types,
         "scores": [-float(i) for i in range(len(tokens))], "bos_token_id": 1,
         "eos_token_id": 2, "unknown_token_id": 0, "add_bos_token": True}
  if with_merges:
    out["merges"] = merges
  return {**out, **({"chat_template": template} if template else {})}
