"""The one place tests find `../shared/data` (read-only, not part of the project).

Tests that need it call `require_shared("gum")`, which skips with a stated reason when absent.
The lookup is the project's own (`slm_jax.cli.shared_data_dir`, as the evaluators use it); set
SLM_JAX_SHARED_DATA to point elsewhere.
"""

from __future__ import annotations

import pathlib

import pytest

from slm_jax.cli import shared_data_dir  # noqa: F401  (the tests' entry point too)


def require_shared(name: str) -> pathlib.Path:
  root = shared_data_dir()
  if root is None or not (root / name).exists():
    pytest.skip(f"shared data '{name}' not found (looked for ../shared/data/{name}; "
                "set SLM_JAX_SHARED_DATA to its folder)")
  return root / name
