"""Combining trained parsers into one `model.Ensemble` folder: the members' saved folders must share
one vocabulary, one label set and one `ParserModelConfig` (members of one `ParserTrainConfig.members` run do:
the vocabularies are built from the same training trees; only the seed differs). The result is an
ordinary parser folder (`weights.save_parser`; `config.json` gains `members` and each member's dev
F1), loaded by `api.load_parser` like a single model.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

from slm_jax.parser.model import Ensemble
from slm_jax.parser.weights import ParserFileError, load_parts, save_parser


def combine(member_folders: Sequence[str | pathlib.Path], out: str | pathlib.Path,
            dtype: str = "float16") -> pathlib.Path:
  """Writes the ensemble of the parsers in `member_folders` to `out`; a member that does not fit
  the first one (vocabulary, labels, model settings, itself an ensemble) is a `ParserFileError`
  naming it."""
  if len(member_folders) < 2:
    raise ValueError(f"an ensemble needs at least 2 member folders, got {len(member_folders)}")
  parts = [load_parts(folder) for folder in member_folders]
  first_model, vocab, labels, _ = parts[0]
  for folder, (model, member_vocab, member_labels, _) in zip(member_folders, parts):
    problem = ("is itself an ensemble" if isinstance(model, Ensemble)
               else "has another vocabulary" if member_vocab.to_json() != vocab.to_json()
               else "has another label set" if member_labels.to_json() != labels.to_json()
               else "has other model settings" if model.cfg != first_model.cfg else None)
    if problem:
      raise ParserFileError(f"{folder}: {problem} than {member_folders[0]}; the members of an "
                            "ensemble are trained alike on the same data")
  extra = {"member_dev_f1": [config.get("dev_f1") for *_, config in parts]}
  return save_parser(out, Ensemble([model for model, *_ in parts]), vocab, labels, extra,
                     dtype=dtype)
