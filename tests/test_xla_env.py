"""The test run's XLA flags reach this process and the processes tests start (tests/xla_env.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests import xla_env


def test_this_process_compiles_with_the_test_flags():
  assert set(xla_env.fast_flags()) <= set(os.environ.get("XLA_FLAGS", "").split())


def test_a_child_gets_the_flags_and_its_devices():
  script = "import os, jax; print(jax.device_count(), os.environ['XLA_FLAGS'])"
  done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        env=xla_env.child_env(devices=3), check=True, timeout=120)
  count, *flags = done.stdout.split()
  assert count == "3" and set(xla_env.fast_flags()) <= set(flags)
