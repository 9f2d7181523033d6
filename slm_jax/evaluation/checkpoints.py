"""Pretrained checkpoints as evaluated models: `python -m slm_jax.evaluate --checkpoint=DIR|FILE.gguf`.

A checkpoint (a Hugging Face folder or a `.gguf` file, `hf.load.load_checkpoint`) is a read-only
terminal baseline beside the trained `--workdir` runs: named in the tables by its folder or file
name, scored as raw text (SPEC §13: its own tokenizer, its BOS as the one prefix token, no added
tokens; `eval.raw_text`) through the protocol `downstream.protocol` gives its configuration
(`reference = "checkpoint"`). Tasks: SG, BLiMP, doc-PPL and the multiple-choice tasks
(`CHECKPOINT_TASKS`); XSum and BoolQ, which evaluate fine-tuned runs, are refused before anything
is scored (`check_checkpoints`).

- `check_checkpoints(paths, tasks)` → the problems (one line each) of the `--checkpoint` inputs,
  every checkpoint's header read up front (a GGUF file's metadata and tensor index, a folder's
  config.json, safetensors headers and tokenizer, `hf.tokenizer_fit`), so a corrupt one fails
  the command before any run is scored.
- `load_checkpoint_run(path, dtype)` → `CheckpointRun` (model, tokenizer, configuration, `cfg`
  with `data.seq_len` = the checkpoint's context length `max_position_embeddings`, …: what
  `evaluation.run` and `downstream.run` read of a loaded run).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Sequence

import ml_collections

from slm_jax.configurations import Configuration
from slm_jax.downstream.protocol import CHECKPOINT
from slm_jax.structure import parse_attention

CHECKPOINT_TASKS = ("sg", "blimp", "docppl", "mc")
DEFAULT_CONTEXT = 2048  # a checkpoint's context length when its config does not state one


def checkpoint_configuration(path: str | pathlib.Path) -> Configuration:
  """The configuration a checkpoint is evaluated as: a causal terminal model named by its file
  or folder, dispatched to raw-text scoring (`reference = "checkpoint"`)."""
  return Configuration(pathlib.Path(path).name, "lin0", parse_attention("causal"), CHECKPOINT)


@dataclasses.dataclass
class CheckpointRun:
  """A loaded checkpoint in the shape `evaluation.run` reads a run."""

  path: pathlib.Path
  configuration: Configuration
  model: Any  # model.decoder.Decoder
  tokenizer: Any  # hf.tokenizer.CheckpointTokenizer
  cfg: Any = None  # ml_collections.ConfigDict: data.seq_len, the context length
  step: int = 0
  skipped: tuple = ()


def check_checkpoints(paths: Sequence[str], tasks: Sequence[str]) -> list[str]:
  """Every problem of the `--checkpoint` inputs (one line each): a path that is neither a
  `.gguf` file nor a checkpoint folder with config.json and tokenizer.json, a checkpoint whose
  header cannot be read (`read_header`), or a task raw-text scoring does not cover."""
  from slm_jax.hf.gguf import is_gguf  # pylint: disable=g-import-not-at-top
  problems = []
  for path in map(pathlib.Path, paths):
    if is_gguf(path):
      if not path.is_file():
        problems.append(f"--checkpoint={path}: no such GGUF file")
        continue
    else:
      missing = [f for f in ("config.json", "tokenizer.json") if not (path / f).is_file()]
      if not path.is_dir():
        problems.append(f"--checkpoint={path}: neither a .gguf file nor a folder")
        continue
      if missing:
        problems.append(f"--checkpoint={path}: not a Hugging Face checkpoint folder (no "
                        f"{' or '.join(missing)})")
        continue
    problem = read_header(path)
    if problem:
      problems.append(f"--checkpoint={path}: {problem}")
  other = [t for t in tasks if t not in CHECKPOINT_TASKS]
  if paths and other:
    problems.append(f"--checkpoint: tasks {', '.join(other)} are not scored for pretrained "
                    f"checkpoints (raw-text scoring covers {', '.join(CHECKPOINT_TASKS)}; XSum "
                    "and BoolQ evaluate fine-tuned runs); drop them from --tasks or evaluate "
                    "the checkpoints separately")
  return problems


def read_header(path: pathlib.Path) -> str | None:
  """What is wrong with checkpoint `path`'s header, read without its weights (None: nothing): a
  GGUF file's metadata, tensor index and architecture, a folder's config.json and safetensors
  headers, and its tokenizer against them (`hf.tokenizer_fit`)."""
  from slm_jax import cli  # pylint: disable=g-import-not-at-top
  from slm_jax.hf.gguf import is_gguf  # pylint: disable=g-import-not-at-top
  from slm_jax.hf.load import checkpoint_files, import_config  # pylint: disable=g-import-not-at-top
  from slm_jax.hf.tokenizer import CheckpointTokenizer  # pylint: disable=g-import-not-at-top
  from slm_jax.hf.tokenizer_fit import tokenizer_problems  # pylint: disable=g-import-not-at-top
  try:
    import_config(path)  # config.json / GGUF metadata: an architecture the importer maps
    checkpoint_files(path)  # every safetensors header, or the GGUF tensor index and types
    if is_gguf(path):
      CheckpointTokenizer(path)  # the vocabulary in the file, as scoring will rebuild it
    problems = tokenizer_problems(path)
  except (OSError, ValueError, KeyError, cli.CliError) as error:
    return cli.describe_error(error)
  if problems:
    return "tokenizer and model disagree: " + "; ".join(problems[:4])
  return None


def load_checkpoint_run(path: str | pathlib.Path, dtype: str = "float32") -> CheckpointRun:
  """The model (parameters float32, computed in `dtype`) and tokenizer of checkpoint `path`."""
  from slm_jax.hf.load import (checkpoint_config,  # pylint: disable=g-import-not-at-top
                               load_checkpoint)
  loaded = load_checkpoint(path, compute_dtype=dtype)
  if loaded.tokenizer is None:
    raise FileNotFoundError(f"{path}: no tokenizer.json: raw-text scoring needs the checkpoint's "
                            "own tokenizer")
  context = checkpoint_config(path)[0].get("max_position_embeddings") or DEFAULT_CONTEXT
  cfg = ml_collections.ConfigDict({"data": {"seq_len": int(context)}})
  return CheckpointRun(loaded.path, checkpoint_configuration(path), loaded.model,
                       loaded.tokenizer, cfg)
