"""The one place tests find `../shared/data` (read-only, not part of the project).

Tests that need it call `require_shared("gum")`, which skips with a stated reason when absent.
Set SLM_JAX_SHARED_DATA to point elsewhere.
"""

from __future__ import annotations

import os
import pathlib

import pytest


def shared_data_dir() -> pathlib.Path | None:
  env = os.environ.get("SLM_JAX_SHARED_DATA")
  if env:
    path = pathlib.Path(env)
    return path if path.is_dir() else None
  here = pathlib.Path(__file__).resolve()
  for parent in here.parents:
    candidate = parent.parent / "shared" / "data"
    if candidate.is_dir():
      return candidate
  return None


def require_shared(name: str) -> pathlib.Path:
  root = shared_data_dir()
  if root is None or not (root / name).exists():
    pytest.skip(f"shared data '{name}' not found (looked for ../shared/data/{name}; "
                "set SLM_JAX_SHARED_DATA to its folder)")
  return root / name
