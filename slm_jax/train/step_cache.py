"""The one cache of compiled train steps in a process: runs of one process that build the same
step (the seeds of a fine-tuning sweep, the methods and seeds of a GTCA sweep) compile it once.

`compiled_step(key, build)` returns the step cached under `key` (anything hashable that fixes
the compiled program: the model's graphdef, the optimizer settings, the step count of its
schedule, the accumulation, the mesh, …), calling `build()` only on a miss. The cache keeps the
`CAPACITY` most recently used steps, so a long sweep over many shapes does not keep every
executable alive.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Hashable

CAPACITY = 8
_STEPS: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()


def compiled_step(key: Hashable, build: Callable[[], Any]) -> Any:
  """The step cached under `key`, built (and cached) on a miss."""
  if key in _STEPS:
    _STEPS.move_to_end(key)
    return _STEPS[key]
  step = _STEPS[key] = build()
  while len(_STEPS) > CAPACITY:
    _STEPS.popitem(last=False)
  return step


def clear() -> None:
  """Forgets every cached step (tests)."""
  _STEPS.clear()
