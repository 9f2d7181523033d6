"""THE identity rule of derived outputs: what made an output is recorded next to it and compared
before the output is reused or continued; a difference names every differing key.

A record is a JSON object (nested objects are compared key by key, as dotted paths:
`settings.lr`, `model.d_model`; tuples and lists compare as lists). `differences(saved, now,
ignore)` lists (key, saved value, value now) of every key that differs and is not in `ignore`
(the keys that may change on resume: logging and checkpoint cadence, the step budget, …);
`describe` words them the one way every refusal words them (`lr: 0.003 in the seed folder, 0.001
now`). `read_record` reads a record file (None when absent; an unreadable one is an error naming
the file), `check_record` compares a folder's record with the command's and raises the caller's
error class naming the differing keys.

Users: `train.workdir.check_workdir` (a training workdir's config.json), the fine-tuning seed
folders (`downstream.finetune`: finetune.json), the parser's workdirs (`parser.train`:
identity.json), the parse shards (`parse.stage.claim_shard`, for the shard CLI and the Beam
pipeline alike), GTCA runs and stages, the evaluation's item files, and `train.sweep` (a
finished item is reused only when its record matches). Layer 0 (json and `cli` only), so every
layer that writes an output can use it.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Collection, Mapping

from slm_jax.cli import CliError


class IdentityError(CliError):
  """An output holds what another command made (or a record that cannot be read)."""


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """Dotted key → value of a nested record (tuples as lists, as JSON stores them)."""
  out: dict[str, Any] = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
  return out


def differences(saved: Mapping[str, Any], now: Mapping[str, Any],
                ignore: Collection[str] = ()) -> list[tuple[str, Any, Any]]:
  """(dotted key, saved value, value now) of every key that differs and is not in `ignore`
  (a key missing on one side reads as None), sorted by key."""
  before, after = flatten(saved), flatten(now)
  return [(key, before.get(key), after.get(key)) for key in sorted(set(before) | set(after))
          if key not in ignore and before.get(key) != after.get(key)]


def describe(diff: list[tuple[str, Any, Any]], where: str) -> str:
  """`key: saved WHERE, now now; …` — the one wording of a refused identity."""
  return "; ".join(f"{key}: {saved!r} {where}, {now!r} now" for key, saved, now in diff)


def read_record(path: str | pathlib.Path) -> dict[str, Any] | None:
  """The JSON object in `path`, None when there is no such file; a file that is not a JSON
  object raises `IdentityError` naming it."""
  path = pathlib.Path(path)
  if not path.is_file():
    return None
  try:
    record = json.loads(path.read_text(encoding="utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as error:
    raise IdentityError(f"{path}: not a readable record ({error}); move it away or use another "
                        "output folder") from None
  if not isinstance(record, dict):
    raise IdentityError(f"{path}: expected a JSON object, found {type(record).__name__}")
  return record


def write_record(path: str | pathlib.Path, record: Mapping[str, Any]) -> None:
  """Writes `record` atomically (a temporary file renamed over `path`): a kill mid-write leaves
  the old record or the new one, never half of one."""
  path = pathlib.Path(path)
  partial = path.with_name(path.name + ".partial")
  partial.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n", encoding="utf-8")
  partial.replace(path)


def check_record(path: str | pathlib.Path, now: Mapping[str, Any], *, what: str, where: str,
                 hint: str, ignore: Collection[str] = (),
                 error: type[CliError] = IdentityError) -> bool:
  """Compares the record in `path` with `now`; raises `error` (`"{what} ({differences});
  {hint}"`) when they differ. True when a record was there (and matches), False when there was
  none. Reads only."""
  saved = read_record(path)
  if saved is None:
    return False
  diff = differences(saved, now, ignore)
  if diff:
    raise error(f"{what} ({describe(diff, where)}); {hint}")
  return True
