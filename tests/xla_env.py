"""The XLA flags of the test run, for this process and for the processes tests start.

The suite's programs are tiny and each is compiled once, so on 2 CPU cores most of a test's time
is XLA compiling, not running. Tests therefore compile with LLVM's optimizations off
(`--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true`): the same HLO,
the same fusions and results within float rounding, compiled faster (0.73x the time on
test_incremental + test_generate, measured back to back). Users' runs never set them.
SLM_TEST_FAST_XLA=0 turns them off. The AOT tests drop them (their memory table is XLA's own).
"""

from __future__ import annotations

import os

FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


def fast_flags() -> list[str]:
  """The flags every test process compiles with (none when SLM_TEST_FAST_XLA=0)."""
  return list(FAST_COMPILE) if os.environ.get("SLM_TEST_FAST_XLA", "1") == "1" else []


def use_test_flags() -> None:
  """Adds the test flags to this process's XLA_FLAGS (before JAX starts its backend)."""
  flags = os.environ.get("XLA_FLAGS", "").split()
  os.environ["XLA_FLAGS"] = " ".join(flags + [f for f in fast_flags() if f not in flags])


def child_env(devices: int | None = None) -> dict[str, str]:
  """The environment for a process a test starts: the test flags, plus `devices` forced host
  CPU devices when given (any XLA_FLAGS of this process beyond those are left out)."""
  env = dict(os.environ)
  flags = fast_flags()
  if devices is not None:
    flags.append(f"--xla_force_host_platform_device_count={devices}")
  env["XLA_FLAGS"] = " ".join(flags)
  return env
