"""Hugging Face `config.json` ↔ `ModelConfig` (SPEC §13): the three imported architectures.

`model_config(hf, path)` maps a config dict of `LlamaForCausalLM`, `Qwen2ForCausalLM` or
`Olmo2ForCausalLM` to `ModelConfig` keyword arguments (vocabulary included); `llama_config(cfg)`
is the export direction (a causal slm_jax decoder as `LlamaForCausalLM`). RoPE settings are read
from `rope_parameters` first (transformers ≥ 5), else from top-level `rope_theta` /
`rope_scaling` (older hub configs). Anything the decoder cannot reproduce exactly (another
activation, a sliding window that is on, partial rotary, another RoPE type) is an error naming
the file and the key, never silently approximated.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Olmo2ForCausalLM")
CONFIG_FILE = "config.json"
_DEFAULT_EPS = {"LlamaForCausalLM": 1e-6, "Qwen2ForCausalLM": 1e-6, "Olmo2ForCausalLM": 1e-5}


class HfConfigError(ValueError):
  """A config.json the importer cannot map (names the file and the key)."""


def read_config(folder: str | pathlib.Path) -> dict[str, Any]:
  """The parsed `config.json` of a checkpoint folder."""
  path = pathlib.Path(folder) / CONFIG_FILE
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: is {folder} a Hugging Face checkpoint folder (or "
                            "a .gguf file)?")
  try:
    return json.loads(path.read_text(encoding="utf-8"))
  except json.JSONDecodeError as error:
    raise HfConfigError(f"{path}: not valid JSON ({error})") from None


def architecture(hf: dict[str, Any], path: str = CONFIG_FILE) -> str:
  """The checkpoint's architecture, one of `ARCHITECTURES`."""
  names = hf.get("architectures") or []
  known = [n for n in names if n in ARCHITECTURES]
  if not known:
    raise HfConfigError(f"{path}: architectures={names!r} is not supported; the importer reads "
                        f"{', '.join(ARCHITECTURES)}")
  return known[0]


def rope_settings(hf: dict[str, Any], path: str = CONFIG_FILE) -> dict[str, Any]:
  """`ModelConfig` RoPE keys from `rope_parameters`, else `rope_theta` + `rope_scaling`."""
  params = hf.get("rope_parameters")
  if params is None:
    params = dict(hf.get("rope_scaling") or {})
    params.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
  if not isinstance(params, dict) or any(isinstance(v, dict) for v in params.values()):
    raise HfConfigError(f"{path}: rope_parameters={params!r}: one RoPE setting for all layers "
                        "is supported")
  kind = params.get("rope_type", params.get("type", "default"))
  partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
  if partial != 1.0:
    raise HfConfigError(f"{path}: partial_rotary_factor={partial} is not supported (1.0 only)")
  out: dict[str, Any] = {"rope_theta": float(params.get("rope_theta", 10000.0))}
  if kind == "default":
    return {**out, "rope_scaling": "none"}
  if kind != "llama3":
    raise HfConfigError(f"{path}: rope_type={kind!r} is not supported (default or llama3)")
  try:
    original = params.get("original_max_position_embeddings",
                          hf.get("max_position_embeddings"))
    return {**out, "rope_scaling": "llama3", "rope_factor": float(params["factor"]),
            "rope_low_freq_factor": float(params["low_freq_factor"]),
            "rope_high_freq_factor": float(params["high_freq_factor"]),
            "rope_original_max_position": int(original)}
  except (KeyError, TypeError) as error:
    raise HfConfigError(f"{path}: llama3 RoPE scaling is missing {error}") from None


def model_config(hf: dict[str, Any], path: str = CONFIG_FILE) -> dict[str, Any]:
  """`ModelConfig` keyword arguments (architecture, sizes, vocabulary) of a HF config dict."""
  arch = architecture(hf, path)

  def need(key: str):
    if hf.get(key) is None:
      raise HfConfigError(f"{path}: {key} is missing ({arch})")
    return hf[key]

  if hf.get("hidden_act", "silu") != "silu":
    raise HfConfigError(f"{path}: hidden_act={hf['hidden_act']!r} is not supported (silu)")
  d, heads = int(need("hidden_size")), int(need("num_attention_heads"))
  hidden = int(need("intermediate_size"))
  out = dict(d_model=d, n_layers=int(need("num_hidden_layers")), n_heads=heads,
             n_kv_heads=int(hf.get("num_key_value_heads") or heads),
             head_dim=int(hf.get("head_dim") or d // heads), mlp_ratio=2 * hidden / d,
             vocab_size=int(need("vocab_size")),
             norm_eps=float(hf.get("rms_norm_eps", _DEFAULT_EPS[arch])),
             tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
             **rope_settings(hf, path))
  if int(out["mlp_ratio"] * d) // 2 != hidden:
    raise HfConfigError(f"{path}: intermediate_size={hidden} is not representable as "
                        f"mlp_ratio·hidden_size/2")
  if arch == "Qwen2ForCausalLM":
    types = hf.get("layer_types") or []
    if hf.get("use_sliding_window", False) or "sliding_attention" in types:
      raise HfConfigError(f"{path}: use_sliding_window / sliding_attention layers are not "
                          "supported (full attention only; a sliding_window with "
                          "use_sliding_window: false is ignored, as transformers does)")
    return {**out, "qkv_bias": True, "norm_cast_first": True}
  bias = bool(hf.get("attention_bias", False))
  if arch == "Olmo2ForCausalLM":
    return {**out, "qkv_bias": bias, "o_bias": bias, "qk_norm": True, "norm_position": "post"}
  return {**out, "qkv_bias": bias, "o_bias": bias, "mlp_bias": bool(hf.get("mlp_bias", False)),
          "norm_cast_first": True}


class ExportError(ValueError):
  """A model that `LlamaForCausalLM` cannot express (says which setting and why)."""


def llama_config(cfg, *, max_position_embeddings: int, torch_dtype: str = "float32",
                 bos_token_id: int | None = None, eos_token_id: int | None = None,
                 pad_token_id: int | None = None) -> dict[str, Any]:
  """The `LlamaForCausalLM` config.json of a causal slm_jax decoder `cfg` (a ModelConfig) trained
  on rows of `max_position_embeddings` tokens (the context lm-eval and transformers read)."""
  problems = []
  if cfg.attention.name != "causal":
    problems.append(f"attention {cfg.attention.name!r}: transformers' Llama attends causally; "
                    "the Transformer-Grammar masks depend on each token's structural kind and "
                    "stack position, which a LlamaForCausalLM cannot compute")
  if cfg.include_bias:
    problems.append("include_bias=True: Llama has no norm biases")
  if cfg.qkv_bias != cfg.o_bias:
    problems.append(f"qkv_bias={cfg.qkv_bias} with o_bias={cfg.o_bias}: Llama's attention_bias "
                    "biases q, k, v and o together")
  if cfg.qk_norm or cfg.norm_position != "pre":
    problems.append("qk_norm / post-norm blocks are OLMo-2's, not Llama's")
  if problems:
    raise ExportError("cannot export as LlamaForCausalLM: " + "; ".join(problems))
  rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(cfg.rope_theta)}
  if cfg.rope_scaling == "llama3":
    rope = {"rope_type": "llama3", "rope_theta": float(cfg.rope_theta),
            "factor": cfg.rope_factor, "low_freq_factor": cfg.rope_low_freq_factor,
            "high_freq_factor": cfg.rope_high_freq_factor,
            "original_max_position_embeddings": cfg.rope_original_max_position}
  return {
      "architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": cfg.d_model, "intermediate_size": cfg.mlp_hidden,
      "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
      "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
      "vocab_size": cfg.vocab_size, "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu",
      "tie_word_embeddings": cfg.tie_embeddings, "attention_bias": cfg.qkv_bias,
      "mlp_bias": cfg.mlp_bias, "max_position_embeddings": int(max_position_embeddings),
      # Both RoPE layouts, so transformers 4.x (rope_theta/rope_scaling) and 5.x read it.
      "rope_parameters": rope, "rope_theta": float(cfg.rope_theta),
      "rope_scaling": None if rope["rope_type"] == "default" else rope,
      "bos_token_id": bos_token_id, "eos_token_id": eos_token_id, "pad_token_id": pad_token_id,
      "torch_dtype": torch_dtype, "dtype": torch_dtype,
  }
