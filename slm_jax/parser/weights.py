"""Saving and loading a parser: `model.safetensors` (weights under `/`-joined NNX paths, float32
or float16 on disk, float32 in memory), `config.json` (the `ParserModelConfig`, the label vocabulary
and, for an `Ensemble`, its number of `members`; their weights sit under `members/K/…`) and
`vocab.json` (words, characters).

Every problem on loading — a missing or corrupt file, a weight missing, unexpected or of the
wrong shape — is a `ParserFileError` that names the file.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
from flax import nnx

from slm_jax.parser.config import ParserModelConfig
from slm_jax.parser.labels import LabelVocab
from slm_jax.parser.model import Ensemble, SpanScorer
from slm_jax.parser.vocab import Vocab

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
VOCAB = "vocab.json"
FORMAT = "slm_jax.parser/1"


class ParserFileError(ValueError):
  """A parser folder that cannot be loaded; the message starts with the file."""


def _flat(tree, prefix: str = "") -> dict:
  out = {}
  for key, value in tree.items():
    name = f"{prefix}{key}"
    if isinstance(value, dict):
      out.update(_flat(value, name + "/"))
    else:
      out[name] = value
  return out


def _assign(tree, flat: dict, prefix: str = "") -> None:
  for key, value in tree.items():
    name = f"{prefix}{key}"
    if isinstance(value, dict):
      _assign(value, flat, name + "/")
    else:
      tree[key] = flat[name]


DTYPES = {"float32": np.float32, "float16": np.float16}


def model_arrays(model: SpanScorer | Ensemble, dtype: str = "float32") -> dict[str, np.ndarray]:
  """The model's parameters as {path: array of `dtype`}."""
  pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  return {name: np.asarray(value, np.float32).astype(DTYPES[dtype])
          for name, value in _flat(pure).items()}


def save_parser(folder: str | pathlib.Path, model: SpanScorer | Ensemble, vocab: Vocab,
                labels: LabelVocab, extra: dict | None = None,
                dtype: str = "float32") -> pathlib.Path:
  """Writes the parser folder; `dtype` "float16" halves the file (the shipped ensemble: its GUM
  dev F1 is unchanged from float32's)."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  if dtype not in DTYPES:
    raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  save_file(model_arrays(model, dtype), str(folder / WEIGHTS), metadata={"format": FORMAT})
  config = {"format": FORMAT, "model": model.cfg.to_json(), "labels": labels.to_json(),
            **({"members": len(model.members)} if isinstance(model, Ensemble) else {}),
            **(extra or {})}
  (folder / CONFIG).write_text(json.dumps(config, indent=1, ensure_ascii=False) + "\n",
                               encoding="utf-8")
  (folder / VOCAB).write_text(json.dumps(vocab.to_json(), ensure_ascii=False) + "\n",
                              encoding="utf-8")
  return folder


def _read_json(path: pathlib.Path) -> dict:
  if not path.is_file():
    raise ParserFileError(f"{path}: missing (a parser folder holds {WEIGHTS}, {CONFIG}, {VOCAB})")
  try:
    return json.loads(path.read_text(encoding="utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as error:
    raise ParserFileError(f"{path}: not valid JSON ({error})") from None


def load_parts(folder: str | pathlib.Path
               ) -> tuple[SpanScorer | Ensemble, Vocab, LabelVocab, dict]:
  """(model, vocabulary, labels, config JSON) of a saved parser folder."""
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise ParserFileError(f"{folder}: no such parser folder")
  config = _read_json(folder / CONFIG)
  try:
    if config.get("format") != FORMAT:
      raise ValueError(f"format {config.get('format')!r}, expected {FORMAT!r}")
    cfg = ParserModelConfig.from_json(config["model"])
    labels = LabelVocab.from_json(config["labels"])
    members = config.get("members", 1)  # absent: one scorer; an ensemble has ≥ 2
    if "members" in config and (type(members) is not int or members < 2):
      raise ValueError(f"members must be an integer ≥ 2, got {members!r}")
  except (KeyError, TypeError, ValueError) as error:
    raise ParserFileError(f"{folder / CONFIG}: not a parser config ({error})") from None
  try:
    vocab = Vocab.from_json(_read_json(folder / VOCAB))
  except (KeyError, TypeError, ValueError) as error:
    raise ParserFileError(f"{folder / VOCAB}: not a parser vocabulary ({error})") from None
  path = folder / WEIGHTS
  if not path.is_file():
    raise ParserFileError(f"{path}: missing")
  from safetensors import SafetensorError  # pylint: disable=g-import-not-at-top
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  try:
    arrays = load_file(str(path))
  except (SafetensorError, OSError, ValueError) as error:
    raise ParserFileError(f"{path}: not a readable safetensors file ({error})") from None
  scorers = [SpanScorer(cfg, len(vocab.words), len(vocab.chars), len(labels), nnx.Rngs(0))
             for _ in range(members)]
  model = scorers[0] if members == 1 else Ensemble(scorers)
  state = nnx.state(model, nnx.Param)
  pure = nnx.to_pure_dict(state)
  expected = {name: np.shape(value) for name, value in _flat(pure).items()}
  missing = sorted(set(expected) - set(arrays))
  unexpected = sorted(set(arrays) - set(expected))
  wrong = sorted(n for n in expected if n in arrays and arrays[n].shape != expected[n])
  if missing or unexpected or wrong:
    parts = [f"{what}: {', '.join(names[:5])}" for what, names in
             (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)) if names]
    raise ParserFileError(f"{path}: weights do not fit {CONFIG} ({'; '.join(parts)})")
  _assign(pure, {name: np.asarray(a, np.float32) for name, a in arrays.items()})
  nnx.replace_by_pure_dict(state, pure)
  nnx.update(model, state)
  model.eval()
  return model, vocab, labels, config
