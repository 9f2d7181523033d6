"""What a killed evaluation keeps and reuses (issues #35, #47): the runs it finished, here, and the
SG suites and BLiMP paradigms of the run in flight (`eval.sg_partial.InFlight`).

- `model_key(path)`: the identity of a model to evaluate — its resolved path, the step evaluated
  (a workdir's newest checkpoint; 0 for a pretrained checkpoint) and THE content digest of what
  is there (`train.loading.source_digest`). Another model put at the same path, or a newer
  step, has another key, so nothing it did not score is reused for it.
- `FinishedRuns(path, settings)`: the runs an earlier evaluation into the same `--out` finished
  (`OUT/results.partial.json`: each entry with its `identity` and, under `_arrays`, the per-item
  arrays the paired bootstrap reads). `take(key)` hands one back only when the evaluation's
  settings are the ones saved and the key matches (each saved run at most once); `note` says
  what was reused or why not. `keep(entry, arrays)` rewrites the file after each run
  (atomically, `files.write_text`; Python's JSON, NaN kept, as `eval.sg_partial` writes it).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping

import numpy as np

from slm_jax import files, identity
from slm_jax.eval.report import json_default

ARRAYS = "_arrays"  # an entry's per-item arrays in the partial file (never in results.json)


def model_key(path: str | pathlib.Path) -> dict[str, Any]:
  """{"path", "step", "digest"} of a workdir's newest checkpoint or a pretrained checkpoint."""
  from slm_jax.train.loading import source_digest  # pylint: disable=g-import-not-at-top
  step, digest = source_digest(path)
  return {"path": str(pathlib.Path(path).resolve()), "step": step, "digest": digest}


def _encode(value: Any) -> Any:
  if isinstance(value, np.ndarray):
    return {"array": value.dtype.str, "values": value.tolist()}
  if isinstance(value, tuple):
    return {"tuple": [_encode(v) for v in value]}
  if isinstance(value, dict):
    return {k: _encode(v) for k, v in value.items()}
  return value.item() if isinstance(value, np.generic) else value


def _decode(value: Any) -> Any:
  if isinstance(value, dict) and set(value) == {"array", "values"}:
    return np.asarray(value["values"], np.dtype(value["array"]))
  if isinstance(value, dict) and set(value) == {"tuple"}:
    return tuple(_decode(v) for v in value["tuple"])
  if isinstance(value, dict):
    return {k: _decode(v) for k, v in value.items()}
  return value


class FinishedRuns:
  """The finished runs of `OUT/results.partial.json` (module docstring)."""

  def __init__(self, path: str | pathlib.Path, settings: Mapping[str, Any]):
    self.path = pathlib.Path(path)
    self.settings = json.loads(json.dumps(dict(settings), default=str))
    self.saved: list[dict] = []
    self.note = ""
    record = identity.read_record(self.path) or {}
    models = [m for m in record.get("models", []) if isinstance(m, dict) and "identity" in m]
    if not models:
      return
    diff = identity.differences(record.get("settings", {}), self.settings, ignore=("wall_s",))
    if diff:
      self.note = (f"{self.path}: {len(models)} finished runs not reused (settings "
                   f"{identity.describe(diff, 'saved')})")
    else:
      self.saved = models

  def take(self, key: Mapping[str, Any]) -> tuple[dict, dict] | None:
    """(entry, arrays) of a saved run with this key, removed from the saved ones; None when
    there is none."""
    for n, model in enumerate(self.saved):
      if model["identity"] == dict(key):
        del self.saved[n]
        entry = {k: v for k, v in model.items() if k != ARRAYS}
        return entry, _decode(model.get(ARRAYS, {}))
    return None

  def keep(self, entries: list[dict], arrays: list[dict]) -> None:
    """Rewrites the file with the runs finished so far (`entries`, their `arrays`)."""
    models = [{**entry, ARRAYS: _encode(arr)} for entry, arr in zip(entries, arrays)]
    self.path.parent.mkdir(parents=True, exist_ok=True)
    files.write_text(self.path, json.dumps(
        {"settings": self.settings, "complete": False, "models": models}, indent=1,
        default=json_default) + "\n")

