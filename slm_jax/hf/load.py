"""Import a Hugging Face checkpoint into the NNX decoder, tensor by tensor, onto its shards.

A checkpoint `path` is a folder (`config.json` + safetensors) or a `.gguf` file
(`slm_jax.hf.gguf`: its metadata as a config.json dict, its tensors dequantized under HF names);
both go through the same mapping. `load_checkpoint(path, ...)` is the one entry every consumer
calls: → `Checkpoint(path, config, model, tokenizer)`. Underneath, `import_config(path,
**overrides)` is the `ModelConfig` of a checkpoint (SPEC §13 mapping in `slm_jax.hf.config`);
`load_params(path, cfg, shardings=...)` reads its weights and `load_model(path, ...)` returns a
ready `Decoder`. `config_values(path)` is what a run config's model section takes from a
checkpoint (`train.run_config.load_config` with `model.init_from`); `check_matches(cfg, path)`
lists every architecture key of a run's model section that disagrees with the checkpoint.

Placement: the abstract model (`nnx.eval_shape`, no allocation) gives every parameter's path and
shape; `shardings(abstract_params)` (a run passes `slm_jax.train.sharding.tree_shardings` over
its mesh: THE partition table; default: the first device) says where each one lives; then each
parameter is built by `jax.make_array_from_callback`, whose callback reads exactly the slice a
device holds from the safetensors file (`layout.read_slice`). A host never holds more than one
device's slice of one tensor; the file is opened per read, so its pages do not stay mapped.
Vocabulary rows the checkpoint lacks (reserved structural tokens appended after a pretrained
vocabulary) start as the mean of the checkpoint's rows. LoRA adapters get their fresh init
(`model.lora.adapter_init`, one key per adapter from the seed), without tracing the model.
"""

from __future__ import annotations

import logging
import math
import pathlib
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.hf.config import CONFIG_FILE, architecture, model_config, read_config
from slm_jax.hf.gguf import GgufTensors, is_gguf, open_gguf
from slm_jax.hf.layout import hf_shapes, read_slice, sources
from slm_jax.hf.safetensors_io import HfCheckpointError, CheckpointFiles
from slm_jax.hf.tokenizer import TOKENIZER_FILE, CheckpointTokenizer
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder
from slm_jax.model.lora import LORA_PARAM_NAMES, adapter_init

_LOG = logging.getLogger(__name__)
FLOAT_DTYPES = ("F32", "BF16", "F16")
# Buffers some older checkpoints carry that are not weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# The ModelConfig keys a checkpoint determines (vocab_size may grow: reserved tokens).
ARCHITECTURE_KEYS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "mlp_hidden",
                     "norm_eps", "tie_embeddings", "rope_theta", "rope_scaling", "rope_factor",
                     "rope_low_freq_factor", "rope_high_freq_factor",
                     "rope_original_max_position", "qkv_bias", "o_bias", "mlp_bias", "qk_norm",
                     "norm_position", "norm_cast_first", "include_bias")

Shardings = Callable[[Any], Any]  # abstract params pytree -> pytree of jax.sharding.Sharding


def checkpoint_config(path: str | pathlib.Path) -> tuple[dict[str, Any], str]:
  """The HF config dict of checkpoint `path` (a folder's config.json, a GGUF file's metadata)
  and where it was read (for messages)."""
  path = pathlib.Path(path)
  if is_gguf(path):
    return open_gguf(path).hf_config, str(path)
  return read_config(path), str(path / CONFIG_FILE)


def checkpoint_files(path: str | pathlib.Path) -> CheckpointFiles | GgufTensors:
  """The tensors of checkpoint `path` under their HF names (`info`, `read(name, index)`)."""
  return open_gguf(path).tensors if is_gguf(path) else CheckpointFiles(path)


def import_config(path: str | pathlib.Path, **overrides) -> ModelConfig:
  """The `ModelConfig` of checkpoint `path` with `overrides` (dtypes, vocab_size, LoRA, …)."""
  hf, where = checkpoint_config(path)
  return ModelConfig(**{**model_config(hf, where), **overrides})


def config_values(path: str | pathlib.Path) -> dict[str, Any]:
  """The model-section config keys checkpoint `path` determines (`ARCHITECTURE_KEYS`, with
  `mlp_ratio` for `mlp_hidden`) and their values: what `--config=hf` takes from it."""
  cfg = import_config(path)
  return {("mlp_ratio" if key == "mlp_hidden" else key):
          (cfg.mlp_ratio if key == "mlp_hidden" else getattr(cfg, key))
          for key in ARCHITECTURE_KEYS}


def check_matches(cfg: ModelConfig, path: str | pathlib.Path) -> None:
  """Raises ValueError listing every architecture key where `cfg` and the checkpoint differ."""
  want = import_config(path, vocab_size=cfg.vocab_size)
  where = checkpoint_config(path)[1]
  problems = [f"model.{key}={getattr(cfg, key)!r} but {where} gives {getattr(want, key)!r}"
              for key in ARCHITECTURE_KEYS if getattr(cfg, key) != getattr(want, key)]
  if problems:
    raise ValueError("the model section does not match the checkpoint it starts from: "
                     + "; ".join(problems))


def _check_tensors(files: CheckpointFiles | GgufTensors, srcs: dict, shapes: dict,
                   hf_vocab: int, hf: dict, config_path: str) -> None:
  """Every tensor the model needs exists with the right shape and a float dtype."""
  if "lm_head/kernel" in srcs and "lm_head.weight" not in files:
    raise HfCheckpointError(f"{config_path} says tie_word_embeddings="
                          f"{str(hf.get('tie_word_embeddings', False)).lower()} (an untied "
                          f"head) but no checkpoint file in {files.folder} holds lm_head.weight")
  for path, source in srcs.items():
    for name, shape in hf_shapes(source, shapes[path], hf_vocab).items():
      info = files.info(name)
      if info.shape != shape:
        raise HfCheckpointError(f"{info.file}: tensor {name} has shape {list(info.shape)}, but "
                              f"{config_path} implies {list(shape)} (for {path})")
      if info.dtype not in FLOAT_DTYPES:
        raise HfCheckpointError(f"{info.file}: tensor {name} has dtype {info.dtype}; expected "
                              f"one of {', '.join(FLOAT_DTYPES)}")
  used = {n for s in srcs.values() for n in s.names}
  unused = sorted(n for n in files.tensors if n not in used and not n.endswith(_IGNORED_SUFFIXES)
                  and not (n == "lm_head.weight" and "lm_head/kernel" not in srcs))
  if unused:
    _LOG.warning("%d checkpoint tensors are not used by the decoder: %s", len(unused),
                 ", ".join(unused[:5]))


def _default_shardings(abstract: Any) -> Any:
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.tree.map(lambda _: device, abstract)


def _flat(tree: Any) -> dict[str, Any]:
  return {jax.tree_util.keystr(p, simple=True, separator="/"): x
          for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _unflat(template: Any, flat: dict[str, Any]) -> Any:
  return jax.tree_util.tree_map_with_path(
      lambda p, _: flat[jax.tree_util.keystr(p, simple=True, separator="/")], template)


def load_params(path: str | pathlib.Path, cfg: ModelConfig, *,
                shardings: Shardings | None = None, seed: int = 0, strict: bool = True) -> dict:
  """The parameters of `Decoder(cfg)` from checkpoint `path` (folder or .gguf), as a pure dict
  of arrays placed by `shardings` (see the module docstring). `cfg` must match the checkpoint's
  architecture (`strict=False`: only the tensor shapes must, for experiments that change e.g.
  the RoPE)."""
  build = lambda: nnx.state(Decoder(cfg, rngs=nnx.Rngs(seed)), nnx.Param)
  return _load_params(path, cfg, nnx.to_pure_dict(nnx.eval_shape(build)), shardings=shardings,
                      seed=seed, strict=strict)


def _load_params(checkpoint: str | pathlib.Path, cfg: ModelConfig, abstract: dict, *,
                 shardings: Shardings | None, seed: int, strict: bool) -> dict:
  """`load_params` given the abstract parameters (pure dict of shapes) of `Decoder(cfg)`."""
  hf, config_path = checkpoint_config(checkpoint)
  arch = architecture(hf, config_path)
  if strict:
    check_matches(cfg, checkpoint)
  files = checkpoint_files(checkpoint)
  hf_vocab = int(hf["vocab_size"])
  if cfg.vocab_size < hf_vocab:
    _LOG.warning("vocab_size=%d is below the checkpoint's %d: its last rows are dropped",
                 cfg.vocab_size, hf_vocab)
  build = lambda: nnx.state(Decoder(cfg, rngs=nnx.Rngs(seed)), nnx.Param)
  placement = _flat((shardings or _default_shardings)(abstract))
  shapes = {path: tuple(x.shape) for path, x in _flat(abstract).items()}
  srcs = sources(cfg, arch)
  _check_tensors(files, srcs, shapes, hf_vocab, hf, config_path)
  dtype = np.dtype(cfg.param_dtype)
  flat: dict[str, Any] = {}
  for path, source in srcs.items():
    reader = (lambda index, source=source, shape=shapes[path]: read_slice(
        source, index, shape, hf_vocab, files.read).astype(dtype))
    flat[path] = jax.make_array_from_callback(shapes[path], placement[path], reader)
  fresh = [path for path in shapes if path not in srcs]  # LoRA adapters: their own init
  adapters = [p for p in fresh if p.rsplit("/", 1)[-1] in LORA_PARAM_NAMES]
  flat.update(_fresh_adapters(adapters, shapes, placement, seed))
  others = [p for p in fresh if p not in adapters]
  if others:  # anything else the checkpoint lacks: the model's own init (traces the model)
    init = jax.jit(lambda: {p: x for p, x in _flat(nnx.to_pure_dict(build())).items()
                            if p in others}, out_shardings={p: placement[p] for p in others})
    flat.update(init())
  if cfg.vocab_size > hf_vocab:
    for path, axis in (("embed_tokens/embedding", 0), ("lm_head/kernel", 1)):
      if path in flat:
        flat[path] = _fill_new_rows(flat[path], hf_vocab, axis, placement[path])
  _LOG.info("imported %s (%s, %.2f GB on disk) into %d parameters", checkpoint, arch,
            files.nbytes() / 1e9, sum(math.prod(s) for s in shapes.values()))
  return _unflat(abstract, flat)


def _fresh_adapters(paths: list[str], shapes: dict[str, tuple], placement: dict[str, Any],
                    seed: int) -> dict[str, jax.Array]:
  """The LoRA adapters a checkpoint lacks, by the adapters' own rule (`lora.adapter_init`), one
  key per adapter folded from `seed` — not by initializing the whole model under jit, whose trace
  and compile took minutes for a 30-layer checkpoint (SmolLM2-135M) on CPU."""
  key = jax.random.key(seed)
  return {path: jax.device_put(adapter_init(path.rsplit("/", 1)[-1],
                                            jax.random.fold_in(key, n), shapes[path]),
                               placement[path])
          for n, path in enumerate(paths)}


def _fill_new_rows(table: jax.Array, rows: int, axis: int, sharding) -> jax.Array:
  """Vocabulary entries past `rows` (along `axis`) set to the mean of the first `rows`."""
  def fill(x):
    old = jax.lax.slice_in_dim(x, 0, rows, axis=axis)
    mean = jnp.mean(old.astype(jnp.float32), axis=axis, keepdims=True).astype(x.dtype)
    index = jnp.arange(x.shape[axis]).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
    return jnp.where(index < rows, x, mean)
  return jax.jit(fill, out_shardings=sharding, donate_argnums=0)(table)


def load_model(path: str | pathlib.Path, cfg: ModelConfig | None = None, *,
               shardings: Shardings | None = None, seed: int = 0, strict: bool = True,
               **overrides) -> Decoder:
  """A `Decoder` holding checkpoint `path` (its own config, or `cfg`, with `overrides`)."""
  cfg = import_config(path, **overrides) if cfg is None else cfg.replace(**overrides)
  model = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(seed)))
  state = nnx.state(model, nnx.Param)
  params = _load_params(path, cfg, nnx.to_pure_dict(state), shardings=shardings, seed=seed,
                        strict=strict)  # one abstract model for both: tracing it takes seconds
  nnx.replace_by_pure_dict(state, params)
  nnx.update(model, state)
  return model


class Checkpoint(NamedTuple):
  """A loaded pretrained checkpoint: what `load_checkpoint` returns."""

  path: pathlib.Path  # the folder or .gguf file
  config: ModelConfig
  model: Decoder
  tokenizer: CheckpointTokenizer | None  # None: a folder without tokenizer.json


def load_checkpoint(path: str | pathlib.Path, cfg: ModelConfig | None = None, *,
                    shardings: Shardings | None = None, seed: int = 0, strict: bool = True,
                    **overrides) -> Checkpoint:
  """The model and tokenizer of checkpoint `path`: a Hugging Face folder or a `.gguf` file
  (arguments as `load_model`: e.g. `compute_dtype=`, `param_dtype=`, `lora_rank=`)."""
  path = pathlib.Path(path)
  model = load_model(path, cfg, shardings=shardings, seed=seed, strict=strict, **overrides)
  has_tokenizer = is_gguf(path) or (path / TOKENIZER_FILE).is_file()
  return Checkpoint(path, model.config, model,
                    CheckpointTokenizer(path) if has_tokenizer else None)
