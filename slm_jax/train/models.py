"""THE answer to "which model is this path?": a slm_jax training workdir, a Hugging Face
checkpoint folder or a `.gguf` file — for every CLI that reads a model (`--checkpoint=PATH` of
`score`, `evaluate`, `export` and GTCA's commands).

- `model_kind(path)` → `WORKDIR` (a folder with `config.json` and `checkpoints/` or the
  tokenizer spec, what `python -m slm_jax.main` writes), `HF_FOLDER` (a folder with
  `config.json` and safetensors weights) or `GGUF` (a `.gguf` file); anything else is one
  `ModelPathError` line saying what was found and what each kind needs.
- `model_context(path)` → the context length without loading the weights: a workdir's
  `data.seq_len`, a checkpoint's `max_position_embeddings` (None when it states none).
- `open_model(path, …)` → `OpenModel`: kind, model, tokenizer, context, and for a workdir its
  `LoadedRun` (configuration, step, config), loaded by `train.loading.load_run` or
  `hf.load.load_checkpoint` (the one loader of each kind).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from slm_jax import cli
from slm_jax.tokenizer import SPEC_FILE_NAME
from slm_jax.train.workdir import CONFIG_FILE

WORKDIR, HF_FOLDER, GGUF = "workdir", "huggingface", "gguf"
KINDS = (WORKDIR, HF_FOLDER, GGUF)


class ModelPathError(cli.CliError):
  """A path that is none of the model kinds (the message says what each needs)."""


def model_kind(path: str | pathlib.Path, flag: str = "--checkpoint") -> str:
  """`WORKDIR`, `HF_FOLDER` or `GGUF` (module docstring)."""
  path = pathlib.Path(path)
  if path.suffix.lower() == ".gguf":
    if not path.is_file():
      raise ModelPathError(f"{flag}={path}: no such GGUF file")
    return GGUF
  if not path.exists():
    raise ModelPathError(f"{flag}={path}: no such folder or file")
  if path.is_dir() and (path / CONFIG_FILE).is_file():
    from slm_jax.train.loading import is_workdir  # pylint: disable=g-import-not-at-top
    if is_workdir(path) or (path / SPEC_FILE_NAME).is_file():  # not yet checkpointed: its spec
      return WORKDIR
    if any(path.glob("*.safetensors")) or (path / "model.safetensors.index.json").is_file():
      return HF_FOLDER
  raise ModelPathError(
      f"{flag}={path}: not a model — a training workdir has config.json and checkpoints/ "
      "(python -m slm_jax.main writes one), a Hugging Face folder config.json and *.safetensors, "
      "a GGUF checkpoint is a .gguf file")


def kind_or_none(path: str | pathlib.Path) -> str | None:
  """`model_kind`, or None for a path of no kind (for callers whose own check reports it)."""
  try:
    return model_kind(path)
  except ModelPathError:
    return None


def model_context(path: str | pathlib.Path) -> int | None:
  """The context a model was trained at, read without its weights (module docstring)."""
  kind = model_kind(path)
  if kind == WORKDIR:
    from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
    return int(run_config(path)[0].data.seq_len)
  from slm_jax.hf.load import checkpoint_config  # pylint: disable=g-import-not-at-top
  value = checkpoint_config(path)[0].get("max_position_embeddings")
  return int(value) if value else None


@dataclasses.dataclass
class OpenModel:
  """A model read from a path (module docstring)."""

  kind: str
  path: pathlib.Path
  model: Any  # model.decoder.Decoder
  tokenizer: Any  # a workdir's Tokenizer, a checkpoint's CheckpointTokenizer (None: none)
  context: int | None
  run: Any = None  # train.loading.LoadedRun of a workdir
  config: Any = None  # hf.load's ModelConfig of a checkpoint

  @property
  def step(self) -> int:
    return int(self.run.step) if self.run is not None else 0


def open_model(path: str | pathlib.Path, *, dtype: str | None = "float32",
               step: int | None = None, flag: str = "--checkpoint", **checkpoint_kwargs
               ) -> OpenModel:
  """The model at `path`, whatever its kind; `dtype` the compute dtype (a workdir: None = its
  own), `step` a workdir's checkpoint step (default: the newest); `checkpoint_kwargs` go to
  `hf.load.load_checkpoint` (parameter dtype, shardings)."""
  path = pathlib.Path(path)
  kind = model_kind(path, flag)
  if kind == WORKDIR:
    from slm_jax.train.loading import load_run  # pylint: disable=g-import-not-at-top
    run = load_run(path, step=step, dtype=dtype)
    return OpenModel(kind, path, run.model, run.tokenizer, int(run.cfg.data.seq_len), run=run)
  if step is not None:
    raise ModelPathError(f"{flag}={path}: --step reads a training workdir's checkpoints; a "
                         f"{kind} checkpoint has one state")
  from slm_jax.hf.load import load_checkpoint  # pylint: disable=g-import-not-at-top
  if dtype is not None:
    checkpoint_kwargs.setdefault("compute_dtype", dtype)
  loaded = load_checkpoint(path, **checkpoint_kwargs)
  return OpenModel(kind, path, loaded.model, loaded.tokenizer, model_context(path),
                   config=loaded.config)


__all__ = ["GGUF", "HF_FOLDER", "KINDS", "ModelPathError", "OpenModel", "WORKDIR",
           "kind_or_none", "model_context", "model_kind", "open_model"]
