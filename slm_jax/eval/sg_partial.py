"""Finished SyntaxGym suites and BLiMP paradigms of the run in flight, kept so a killed evaluation
resumes (issues #35, #47).

A tree model's SG takes minutes a suite, and a full BLiMP hours on CPU; `evaluate` keeps the runs
it finished in `OUT/results.partial.json` (`evaluation.resume`), and `InFlight` keeps the units
the run being evaluated has finished under a key per task: `sg_in_flight: {"key": {...},
"suites": {name: suite result}}`, `blimp_in_flight: {"key": {...}, "paradigms": {uid: pair
scores}}` (`TASKS`). The key is what made the results (the model's path, step and content digest —
`train.loading.source_digest`, so another model put at the same path is never reused —, the
items, suites or paradigms, scoring and beam settings); a later evaluation reuses the saved units
only when its key is the same (`slm_jax.identity.differences`; otherwise it says which keys differ
and starts over). `SuitesInFlight(path, key)` is SG's.

Every `keep` rewrites the file atomically (`files.write_text`: a kill or a full disk mid-write
leaves the old file, and no temporary) and leaves its other keys as they are (the finished runs).
The file is Python's JSON with NaN / Infinity tokens (a suite's surprisals may be infinite) so
the reused results are the computed ones exactly; `evaluate` replaces the file (without the
key) once the run is done, and removes it once results.json is written.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping

from slm_jax import files
from slm_jax.identity import describe, differences, flatten, read_record

# task → (key in the file, field of the finished units, how a note names them)
TASKS = {"sg": ("sg_in_flight", "suites", "SG suites"),
         "blimp": ("blimp_in_flight", "paradigms", "BLiMP paradigms")}
KEY = TASKS["sg"][0]


class InFlight:
  """The finished units of one run's `task` in `path` (module docstring): `done` (name → result)
  holds those a previous evaluation with the same `key` finished; `keep(name, result)` is the
  callback the task calls after each unit."""

  def __init__(self, path: str | pathlib.Path, key: Mapping[str, Any], task: str = "sg"):
    self.path = pathlib.Path(path)
    self.record_key, self.field, self.what = TASKS[task]
    self.key = json.loads(json.dumps(dict(key)))  # as the file holds it (tuples → lists)
    self.done: dict[str, dict] = {}
    self.note = ""  # one line on what was reused or why not (empty: nothing was saved)
    saved = self._read().get(self.record_key)
    if not saved:
      return
    diff = differences(flatten(saved.get("key", {})), flatten(self.key))
    if diff:
      self.note = (f"{self.path}: {len(saved.get(self.field, {}))} saved {self.what} not reused "
                   f"({describe(diff, 'saved')})")
    else:
      self.done = dict(saved.get(self.field, {}))
      self.note = f"{self.path}: {len(self.done)} finished {self.what} reused"

  def keep(self, name: str, result: dict) -> None:
    """Adds a finished unit and rewrites the file atomically."""
    self.done[name] = result
    record = self._read()
    record[self.record_key] = {"key": self.key, self.field: self.done}
    self.path.parent.mkdir(parents=True, exist_ok=True)
    files.write_text(self.path, json.dumps(record, indent=1) + "\n")

  def _read(self) -> dict:
    return read_record(self.path) or {}


class SuitesInFlight(InFlight):
  """SG's finished suites (`evaluate_syntaxgym`'s `done` / `on_suite`)."""

  def __init__(self, path: str | pathlib.Path, key: Mapping[str, Any]):
    super().__init__(path, key, "sg")
