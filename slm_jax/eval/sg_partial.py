"""Finished SyntaxGym suites of the run in flight, kept so a killed evaluation resumes (issue #35).

A tree model's SG takes minutes a suite; `evaluate` keeps the runs it finished in
`OUT/results.partial.json`, and `SuitesInFlight` keeps the suites the run being evaluated has
finished under its `sg_in_flight` key: `{"key": {...}, "suites": {name: suite result}}`. The key
is what made the results (the run's workdir and checkpoint step, the items, suites, scoring and
beam settings); a later evaluation reuses the saved suites only when its key is the same
(`slm_jax.identity.differences`; otherwise it says which keys differ and starts the suites over).

Every `keep` rewrites the file atomically (a temporary file renamed over it: a kill mid-write
leaves the old file or the new one) and leaves its other keys as they are (the finished runs).
The file is Python's JSON with NaN / Infinity tokens (a suite's surprisals may be infinite) so
the reused results are the computed ones exactly; `evaluate` replaces the file (without the
key) once the run is done, and removes it once results.json is written.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping

from slm_jax.identity import describe, differences, flatten, read_record

KEY = "sg_in_flight"


class SuitesInFlight:
  """The finished suites of one run's SG in `path` (module docstring): `done` (name → result)
  holds those a previous evaluation with the same `key` finished; `keep(name, result)` is the
  `on_suite` callback of `evaluate_syntaxgym`."""

  def __init__(self, path: str | pathlib.Path, key: Mapping[str, Any]):
    self.path = pathlib.Path(path)
    self.key = json.loads(json.dumps(dict(key)))  # as the file holds it (tuples → lists)
    self.done: dict[str, dict] = {}
    self.note = ""  # one line on what was reused or why not (empty: nothing was saved)
    saved = self._read().get(KEY)
    if not saved:
      return
    diff = differences(flatten(saved.get("key", {})), flatten(self.key))
    if diff:
      self.note = (f"{self.path}: {len(saved.get('suites', {}))} saved SG suites not reused "
                   f"({describe(diff, 'saved')})")
    else:
      self.done = dict(saved.get("suites", {}))
      self.note = f"{self.path}: {len(self.done)} finished SG suites reused"

  def keep(self, name: str, result: dict) -> None:
    """Adds a finished suite and rewrites the file atomically."""
    self.done[name] = result
    record = self._read()
    record[KEY] = {"key": self.key, "suites": self.done}
    self.path.parent.mkdir(parents=True, exist_ok=True)
    temporary = self.path.with_name(self.path.name + ".partial")
    temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    temporary.replace(self.path)

  def _read(self) -> dict:
    return read_record(self.path) or {}
