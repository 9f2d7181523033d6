"""GGUF checkpoints (llama.cpp's single-file format) as Hugging Face checkpoints (SPEC §13).

`open_gguf(path)` reads a `.gguf` file with the `gguf` package's `GGUFReader` (memory-mapped:
no tensor is read until asked for) and presents it in the two forms the safetensors import
already consumes, so a GGUF file goes through the same mapping rules as a folder:

- `GgufFile.hf_config`: the `config.json` dict transformers would write for the model
  (`LlamaForCausalLM` for `general.architecture` llama, `Qwen2ForCausalLM` for qwen2), built from
  the `{arch}.*` metadata — hidden size, layers, heads and KV heads, head dim, feed-forward width,
  RMSNorm eps, RoPE θ, context length, vocabulary size, bias tensors present, and tying (llama.cpp
  writes `output.weight` only for an untied head). `slm_jax.hf.config.model_config` maps it, as it
  maps a folder's config.json.
- `GgufFile.tensors`: the file's tensors under their Hugging Face names (`GgufTensors`, the
  interface of `safetensors_io.CheckpointFiles`: `info`, `read(name, index)`), dequantized to
  float32 (`slm_jax.hf.gguf_quant`) a slice of rows at a time. The names come from the decoder's
  own layout (`layout.sources`) through gguf's `TensorNameMap`, the table llama.cpp's converter
  wrote them with. For llama, the converter permuted the rows of q and k (weights and biases) from
  the rotate-half RoPE layout into llama.cpp's interleaved one; `read` undoes it exactly as
  transformers' GGUF loader does (per head: rows (dim, 2) → (2, dim)). qwen2 is stored unpermuted.

RoPE scaling: a `rope_freqs.weight` tensor (llama.cpp's converter writes it for Llama-3.1+ from
the llama3 `rope_scaling`) is turned back into the llama3 parameters (factor = its largest entry;
the interpolated band fitted with low_freq_factor 1, then checked entry by entry); a
`{arch}.rope.scaling.type` other than none (linear, yarn, …), a mixture of experts, per-layer
widths or partial rotary dimensions are refused naming the file and the key, as are other
architectures and tensor types the importer cannot dequantize (named with the tensor).
"""

from __future__ import annotations

import functools
import math
import pathlib
import types
from typing import Any

import numpy as np

from slm_jax.hf.config import HfConfigError
from slm_jax.hf.gguf_quant import check_type, dequantize_rows, type_name
from slm_jax.hf.layout import sources
from slm_jax.hf.safetensors_io import HfCheckpointError, TensorInfo

GGUF_SUFFIX = ".gguf"
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
ROPE_FREQS = "rope_freqs.weight"
_REQUIRED = object()


def is_gguf(path: str | pathlib.Path) -> bool:
  """Whether `path` names a GGUF file (by its suffix; the reader checks the magic)."""
  path = pathlib.Path(path)
  return path.suffix.lower() == GGUF_SUFFIX and not path.is_dir()


class GgufFile:
  """One GGUF file: its metadata, tensors, `hf_config` and `tensors` (see the module docstring)."""

  def __init__(self, path: str | pathlib.Path):
    import gguf  # pylint: disable=import-outside-toplevel
    self.path = pathlib.Path(path)
    if not self.path.is_file():
      raise FileNotFoundError(f"{self.path}: no such GGUF file")
    try:
      self.reader = gguf.GGUFReader(self.path)
    except (ValueError, OSError, KeyError, IndexError) as error:
      raise HfCheckpointError(f"{self.path}: not a readable GGUF file ({error}); it may be "
                            "truncated or still downloading") from None
    self.metadata = {name: field.contents() for name, field in self.reader.fields.items()}
    self.raw = {t.name: t for t in self.reader.tensors}
    self.arch = self.value("general.architecture")
    if self.arch not in ARCHITECTURES:
      raise HfConfigError(f"{self.path}: general.architecture={self.arch!r} is not supported; the "
                          f"GGUF importer reads {', '.join(ARCHITECTURES)}")
    self.hf_config = _hf_config(self)
    self.tensors = GgufTensors(self)

  def value(self, key: str, default: Any = _REQUIRED) -> Any:
    """Metadata `key`; without a default, its absence is an error naming the file and key."""
    if key in self.metadata:
      return self.metadata[key]
    if default is _REQUIRED:
      raise HfConfigError(f"{self.path}: metadata key {key} is missing ({self.arch})")
    return default

  def arch_value(self, key: str, default: Any = _REQUIRED) -> Any:
    return self.value(f"{self.arch}.{key}", default)


@functools.lru_cache(maxsize=4)
def _open_cached(path: str, mtime_ns: int, size: int) -> GgufFile:
  del mtime_ns, size  # part of the key only: a rewritten file is read again
  return GgufFile(path)


def open_gguf(path: str | pathlib.Path) -> GgufFile:
  """The `GgufFile` of `path`, read once per process while the file is unchanged."""
  path = pathlib.Path(path).resolve()
  if not path.is_file():
    raise FileNotFoundError(f"{path}: no such GGUF file")
  stat = path.stat()
  return _open_cached(str(path), stat.st_mtime_ns, stat.st_size)


def _hf_config(g: GgufFile) -> dict[str, Any]:
  """The transformers config.json dict of a llama / qwen2 GGUF file."""
  where = g.path
  experts = g.arch_value("expert_count", 0)
  if experts:
    raise HfConfigError(f"{where}: {g.arch}.expert_count={experts}: mixture-of-experts models are "
                        "not supported")
  scaling = g.arch_value("rope.scaling.type", "none")
  if scaling != "none":
    raise HfConfigError(f"{where}: {g.arch}.rope.scaling.type={scaling!r} is not supported (none, "
                        f"or llama3 factors in {ROPE_FREQS})")
  sizes = {key: g.arch_value(key) for key in ("embedding_length", "block_count",
                                              "feed_forward_length", "attention.head_count")}
  sizes["attention.head_count_kv"] = g.arch_value("attention.head_count_kv",
                                                  sizes["attention.head_count"])
  for key, value in sizes.items():
    if not isinstance(value, int):
      raise HfConfigError(f"{where}: {g.arch}.{key}={value!r}: one value for all layers is "
                          "supported")
  d, heads = sizes["embedding_length"], sizes["attention.head_count"]
  head_dim = g.arch_value("attention.key_length", d // heads)
  for key in ("attention.value_length", "rope.dimension_count"):
    if g.arch_value(key, head_dim) != head_dim:
      raise HfConfigError(f"{where}: {g.arch}.{key}={g.arch_value(key)} differs from the head "
                          f"dimension {head_dim} (partial rotary / other value widths are not "
                          "supported)")
  tokens = g.value("tokenizer.ggml.tokens", None)
  embed = g.raw.get("token_embd.weight")
  vocab = g.arch_value("vocab_size", len(tokens) if tokens is not None else
                       int(embed.shape[-1]) if embed is not None else _REQUIRED)
  theta = float(g.arch_value("rope.freq_base", 10000.0))
  rope = {"rope_type": "default", "rope_theta": theta}
  if ROPE_FREQS in g.raw:
    rope = _llama3_rope(g, theta, head_dim)
  out = {
      "architectures": [ARCHITECTURES[g.arch]], "model_type": g.arch, "hidden_size": d,
      "intermediate_size": sizes["feed_forward_length"],
      "num_hidden_layers": sizes["block_count"], "num_attention_heads": heads,
      "num_key_value_heads": sizes["attention.head_count_kv"],
      "head_dim": head_dim, "vocab_size": int(vocab), "hidden_act": "silu",
      "rms_norm_eps": float(g.arch_value("attention.layer_norm_rms_epsilon")),
      "max_position_embeddings": g.arch_value("context_length", None),
      "tie_word_embeddings": "output.weight" not in g.raw,
      "rope_parameters": rope, "rope_theta": theta,
      "bos_token_id": g.value("tokenizer.ggml.bos_token_id", None),
      "eos_token_id": g.value("tokenizer.ggml.eos_token_id", None),
      "pad_token_id": g.value("tokenizer.ggml.padding_token_id", None),
  }
  if g.arch == "llama":
    out.update(attention_bias="blk.0.attn_q.bias" in g.raw,
               mlp_bias="blk.0.ffn_up.bias" in g.raw)
  else:
    out.update(use_sliding_window=False)
  return out


def llama3_factors(theta: float, head_dim: int, factor: float, low_freq_factor: float,
                   high_freq_factor: float, original_max_position: int) -> np.ndarray:
  """The `rope_freqs` divisors llama.cpp's converter writes for llama3 RoPE scaling."""
  inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
  wavelen = 2 * math.pi / inv_freq
  smooth = ((original_max_position / wavelen - low_freq_factor)
            / (high_freq_factor - low_freq_factor))
  out = 1 / ((1 - smooth) / factor + smooth)
  out = np.where(wavelen < original_max_position / high_freq_factor, 1.0, out)
  out = np.where(wavelen > original_max_position / low_freq_factor, factor, out)
  return out.astype(np.float32)


def _llama3_rope(g: GgufFile, theta: float, head_dim: int) -> dict[str, Any]:
  """llama3 `rope_parameters` whose divisors are the file's `rope_freqs.weight`."""
  tensor = g.raw[ROPE_FREQS]
  check_type(str(g.path), ROPE_FREQS, tensor.tensor_type)
  factors = dequantize_rows(tensor.data, tensor.tensor_type).reshape(-1).astype(np.float64)
  problem = f"{g.path}: {ROPE_FREQS} is not llama3 RoPE scaling"
  if factors.shape != (head_dim // 2,):
    raise HfConfigError(f"{problem}: {factors.size} entries for head dimension {head_dim}")
  factor = float(factors.max())
  if np.allclose(factors, 1.0, rtol=0, atol=1e-6):
    return {"rope_type": "default", "rope_theta": theta}
  inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
  band = (factors > 1 + 1e-6) & (factors < factor * (1 - 1e-6))
  if band.sum() < 2:
    raise HfConfigError(f"{problem} that can be recovered: {band.sum()} interpolated entries "
                        "(at least 2 are needed to fit the band)")
  # llama3: 1/f = (1 - s)/factor + s, s = original/(wavelen·(high - low)) - low/(high - low).
  smooth = (1 / factors[band] - 1 / factor) / (1 - 1 / factor)
  slope, intercept = np.polyfit(inv_freq[band] / (2 * math.pi), smooth, 1)
  if intercept >= 0:
    raise HfConfigError(f"{problem}: its interpolated band does not fall with the wavelength")
  original = int(round(-slope / intercept))
  high = float(np.round(-(1 - intercept) / intercept, 6))
  params = dict(factor=factor, low_freq_factor=1.0, high_freq_factor=high,
                original_max_position_embeddings=original)
  expected = llama3_factors(theta, head_dim, factor, 1.0, high, original)
  if not np.allclose(expected, factors, rtol=1e-4, atol=0):
    raise HfConfigError(f"{problem}: the best llama3 fit {params} differs from it by "
                        f"{np.max(np.abs(expected / factors - 1)):.2e} (relative)")
  return {"rope_type": "llama3", "rope_theta": theta, **params}


def _qk_rows(rows: int, heads: int) -> np.ndarray:
  """Row order undoing llama.cpp's q/k permutation: out row (h, j, d) ← stored (h, d, j)."""
  return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(-1)


class GgufTensors:
  """A GGUF file's tensors under Hugging Face names (the `CheckpointFiles` interface)."""

  def __init__(self, g: GgufFile):
    import gguf  # pylint: disable=import-outside-toplevel
    self.folder = g.path  # where the tensors live, as CheckpointFiles names it in errors
    hf = g.hf_config
    layers = hf["num_hidden_layers"]
    arch = hf["architectures"][0]
    everything = types.SimpleNamespace(n_layers=layers, tie_embeddings=False, qkv_bias=True,
                                       o_bias=True, mlp_bias=True, qk_norm=False)
    name_map = gguf.get_tensor_name_map(
        next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == g.arch), layers)
    self._where: dict[str, tuple[Any, np.ndarray | None]] = {}
    self.tensors: dict[str, TensorInfo] = {}
    heads = {"q_proj": hf["num_attention_heads"], "k_proj": hf["num_key_value_heads"]}
    for name in sorted({n for s in sources(everything, arch).values() for n in s.names}):
      module, suffix = name.rsplit(".", 1)
      stored = name_map.get_name(module)
      tensor = g.raw.get(f"{stored}.{suffix}") if stored else None
      if tensor is None:
        continue
      check_type(str(g.path), tensor.name, tensor.tensor_type)
      shape = tuple(int(n) for n in reversed(tensor.shape))
      permute = g.arch == "llama" and module.rsplit(".", 1)[-1] in heads
      rows = _qk_rows(shape[0], heads[module.rsplit(".", 1)[-1]]) if permute else None
      self._where[name] = (tensor, rows)
      self.tensors[name] = TensorInfo(g.path, shape, "F32")
    mapped = {t.name for t, _ in self._where.values()} | {ROPE_FREQS}
    for tensor in g.reader.tensors:  # listed under their own names: reported as unused
      if tensor.name not in mapped:
        self.tensors[tensor.name] = TensorInfo(g.path, tuple(int(n) for n in reversed(
            tensor.shape)), type_name(tensor.tensor_type))

  def __contains__(self, name: str) -> bool:
    return name in self._where

  @property
  def hf_names(self) -> list[str]:
    """The HF names of the tensors the file holds (sorted)."""
    return list(self._where)

  @property
  def unnamed(self) -> list[str]:
    """The file's tensors without an HF name (besides rope_freqs), under their GGUF names."""
    return [name for name in self.tensors if name not in self._where]

  def info(self, name: str) -> TensorInfo:
    if name not in self._where:
      raise HfCheckpointError(f"{self.folder}: tensor {name} not found in the GGUF file")
    return self.tensors[name]

  def nbytes(self) -> int:
    return self.folder.stat().st_size

  def read(self, name: str, index: tuple[slice, ...] | None = None) -> np.ndarray:
    """float32 tensor `name` (HF layout), or its slice `index`, dequantizing only those rows."""
    tensor, order = self._where[name] if name in self._where else (None, None)
    if tensor is None:
      raise HfCheckpointError(f"{self.folder}: tensor {name} not found in the GGUF file")
    shape = self.tensors[name].shape
    index = tuple(index or ()) + (slice(None),) * (len(shape) - len(index or ()))
    rows = np.arange(shape[0])[index[0]]
    if order is not None:
      rows = order[rows]
    if len(shape) == 1:
      return dequantize_rows(tensor.data, tensor.tensor_type).reshape(shape)[rows]
    data = tensor.data[rows[0]:rows[-1] + 1] if _contiguous(rows) else tensor.data[rows]
    values = dequantize_rows(data, tensor.tensor_type).reshape(len(rows), *shape[1:])
    return values[(slice(None), *index[1:])]


def _contiguous(rows: np.ndarray) -> bool:
  return len(rows) > 0 and bool(np.all(np.diff(rows) == 1))

