"""The one place tests find libtpu and make a TPU topology's devices (no chip needed).

.ci/run installs libtpu outside the environment's site-packages (`.venv/libtpu`), so no other test
process loads it; tests that need it call `require_libtpu()` (skips with the reason when absent)
and `topology_devices(name)` (an `aot.TOPOLOGIES` name), which sets libtpu's environment only
while the topology is made, so processes started by later tests never see it.
"""

from __future__ import annotations

import functools
import os
import pathlib
import sys

import pytest

LIBTPU_ENV = {"TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


def libtpu_path() -> str | None:
  """libtpu.so: TPU_LIBRARY_PATH, or where .ci/run puts it, or an installed `libtpu`."""
  candidates = [os.environ.get("TPU_LIBRARY_PATH", ""),
                str(pathlib.Path(sys.prefix) / "libtpu" / "libtpu" / "libtpu.so")]
  try:
    import libtpu  # pylint: disable=g-import-not-at-top
    candidates.append(libtpu.get_library_path())
  except ImportError:
    pass
  return next((c for c in candidates if c and pathlib.Path(c).is_file()), None)


def require_libtpu() -> str:
  path = libtpu_path()
  if path is None:
    pytest.skip("no libtpu (pip install -e '.[aot]', or set TPU_LIBRARY_PATH)")
  return path


@functools.cache
def topology_devices(name: str) -> tuple:
  """The devices of TPU topology `name`, made by libtpu in this process (cached)."""
  from slm_jax import aot  # pylint: disable=g-import-not-at-top
  path = require_libtpu()
  with pytest.MonkeyPatch.context() as patch:
    for key, value in {**LIBTPU_ENV, "TPU_LIBRARY_PATH": path}.items():
      patch.setenv(key, value)
    return tuple(aot.tpu_devices(name))
