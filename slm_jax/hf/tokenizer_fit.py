"""Does a tokenizer fit a checkpoint? The one check before a tokenizer and a checkpoint's weights
are used together (issue #47): `tokenizer_problems(checkpoint, tokenizer_json=None)` → one
short phrase per disagreement, each naming both numbers (empty: they fit).

- Every id of the tokenizer (its largest id + 1, added tokens included) must be a row of the
  checkpoint's embedding (`model.embed_tokens.weight`; config.json's vocab_size may be larger:
  padded rows): else ids past the rows would read rows that were never trained, or the vocabulary
  would silently grow.
- Where the checkpoint has a vocabulary of its own — a GGUF file's, or the folder's tokenizer.json
  when another file is given — the given one must be the same: as many ids, the same token at
  every id (the count of ids that differ and the first one are named).
- The checkpoint's BOS / EOS / PAD ids (config.json, GGUF metadata) must name tokens of the
  tokenizer; and the special tokens its `tokenizer_config.json` declares (beside the file) must
  sit at those ids.

`check_tokenizer_fits(checkpoint, tokenizer_json, what)` raises `TokenizerMismatchError` (one
line) when there is a problem. Users: training from a checkpoint (`--config.model.init_from` with
`--config.data.tokenizer_path`, `train.trainer`), `score` and `evaluate --checkpoint` (a folder's
own tokenizer.json against its config.json).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from slm_jax import cli
from slm_jax.hf.gguf import is_gguf
from slm_jax.hf.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE, CheckpointTokenizer

EMBEDDING = "model.embed_tokens.weight"
SPECIAL_IDS = (("bos_token_id", "bos_token"), ("eos_token_id", "eos_token"),
               ("pad_token_id", "pad_token"))


class TokenizerMismatchError(cli.CliError):
  """A tokenizer that does not fit the checkpoint it is used with (names both numbers)."""


def _id_to_token(tokenizer: Any) -> dict[int, str]:
  return {i: t for t, i in tokenizer.get_vocab(with_added_tokens=True).items()}


def _read(path: pathlib.Path) -> Any:
  import tokenizers  # pylint: disable=import-outside-toplevel
  if not path.is_file():
    raise TokenizerMismatchError(f"{path}: no such tokenizer.json")
  try:
    return tokenizers.Tokenizer.from_file(str(path))
  except Exception as error:  # tokenizers raises a bare Exception on malformed files
    raise TokenizerMismatchError(f"cannot read {path}: {cli.one_line(str(error))}") from None


def _ids(value: Any) -> list[int]:
  values = value if isinstance(value, list) else [value]
  return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


def tokenizer_problems(checkpoint: str | pathlib.Path,
                       tokenizer_json: str | pathlib.Path | None = None) -> list[str]:
  """The disagreements of `tokenizer_json` (default: a folder's own tokenizer.json; a GGUF file
  without one: none, its vocabulary is its own) with `checkpoint` (module docstring)."""
  from slm_jax.hf.load import (checkpoint_config,  # pylint: disable=import-outside-toplevel
                               checkpoint_files)
  checkpoint = pathlib.Path(checkpoint)
  gguf = is_gguf(checkpoint)
  own_file = None if gguf else checkpoint / TOKENIZER_FILE
  path = pathlib.Path(tokenizer_json) if tokenizer_json else own_file
  if path is None:
    return []
  given = _read(path)
  own = None
  if gguf:
    own = CheckpointTokenizer(checkpoint).tokenizer
  elif own_file.is_file() and own_file.resolve() != path.resolve():
    own = _read(own_file)
  hf, where = checkpoint_config(checkpoint)
  files = checkpoint_files(checkpoint)
  rows = (files.info(EMBEDDING).shape[0] if EMBEDDING in files.tensors
          else int(hf.get("vocab_size") or 0))
  tokens = _id_to_token(given)
  size = max(tokens) + 1 if tokens else 0
  problems = []
  if size > rows:
    problems.append(f"{path} has {size:,} token ids but the checkpoint's embedding has {rows:,} "
                    f"rows ({where}: vocab_size {hf.get('vocab_size')})")
  if own is not None:
    theirs = _id_to_token(own)
    own_size = max(theirs) + 1 if theirs else 0
    if own_size != size:
      problems.append(f"{path} has {size:,} token ids, the checkpoint's own vocabulary "
                      f"{own_size:,}")
    differ = sorted(i for i in set(tokens) & set(theirs) if tokens[i] != theirs[i])
    if differ:
      i = differ[0]
      problems.append(f"{len(differ):,} ids name other tokens than in the checkpoint's "
                      f"vocabulary (first: id {i} is {tokens[i]!r} in {path}, {theirs[i]!r} in "
                      f"{checkpoint})")
  declared = _declared(path.parent / TOKENIZER_CONFIG)
  for key, name in SPECIAL_IDS:
    for token_id in _ids(hf.get(key)):
      if token_id not in tokens:
        problems.append(f"{where}: {key} {token_id} is no token of {path} ({size:,} ids)")
      elif declared.get(name) and given.token_to_id(declared[name]) not in (None, token_id):
        problems.append(f"{path.parent / TOKENIZER_CONFIG} says {name} {declared[name]!r}, id "
                        f"{given.token_to_id(declared[name])}, but {where} says {key} {token_id}")
  return problems


def _declared(config: pathlib.Path) -> dict[str, str]:
  """The special tokens a tokenizer_config.json declares (name → content)."""
  if not config.is_file():
    return {}
  try:
    data = json.loads(config.read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError, UnicodeDecodeError):
    return {}
  out = {}
  for _, name in SPECIAL_IDS:
    value = data.get(name)
    value = value.get("content") if isinstance(value, dict) else value
    if isinstance(value, str):
      out[name] = value
  return out


def check_tokenizer_fits(checkpoint: str | pathlib.Path,
                         tokenizer_json: str | pathlib.Path | None = None, what: str = "") -> None:
  """Raises `TokenizerMismatchError` naming every problem of `tokenizer_problems` (one line)."""
  problems = tokenizer_problems(checkpoint, tokenizer_json)
  if problems:
    raise TokenizerMismatchError(
        f"{what or checkpoint}: tokenizer and model disagree: {'; '.join(problems[:4])} (a "
        "tokenizer of another model? use the checkpoint's own tokenizer: a GGUF file's is "
        "exported with it, python -m slm_jax.export --checkpoint=FILE.gguf --out=DIR)")
