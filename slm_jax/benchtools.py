"""What every benchmark script (`benchmarks/*.py`) shares: argument parser, timing, tables.

Benchmarks print tables and never assert on time (machines here are shared and noisy); compare
numbers within one table, as ratios measured in the same run.

- `parser(doc)`: `slm_jax.cli.ArgumentParser` (underscore flags, dashed spellings accepted, one
  error line) with the script's docstring as its help.
- `best_of(repeats, fn)` / `median_of(repeats, fn, warmup=1)`: seconds of `fn()` (results
  blocked on, so JAX's asynchronous dispatch is timed to completion) and the last result.
- `split_names(text)`: a comma-separated list whose names may hold commas in parentheses
  (`mix(causal,tg)`).
- `table(headers, rows)`: a Markdown table as one string (`slm_jax.tables.markdown`; a script
  printing rows as they are measured uses `tables.header` and `tables.row`).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable

from slm_jax import cli
from slm_jax.cli import shared_data_dir  # noqa: F401  (re-exported for the scripts)
from slm_jax.tables import markdown as table  # noqa: F401  (re-exported for the scripts)


def parser(doc: str | None) -> cli.ArgumentParser:
  return cli.ArgumentParser(description=doc)


def _block(result: Any) -> Any:
  if "jax" in sys.modules:
    import jax  # pylint: disable=g-import-not-at-top
    return jax.block_until_ready(result)
  return result


def seconds_of(fn: Callable[[], Any]) -> tuple[float, Any]:
  """Wall seconds of one call of `fn` (blocked until its JAX results are ready)."""
  start = time.perf_counter()
  result = _block(fn())
  return time.perf_counter() - start, result


def best_of(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
  """The fastest of `repeats` calls, and the last result."""
  best, result = float("inf"), None
  for _ in range(max(repeats, 1)):
    seconds, result = seconds_of(fn)
    best = min(best, seconds)
  return best, result


def median_of(repeats: int, fn: Callable[[], Any], warmup: int = 1) -> tuple[float, Any]:
  """The median of `repeats` calls after `warmup` untimed ones (compilation), and the last
  result."""
  result = None
  for _ in range(warmup):
    result = _block(fn())
  times = []
  for _ in range(max(repeats, 1)):
    seconds, result = seconds_of(fn)
    times.append(seconds)
  return statistics.median(times), result


def split_names(text: str) -> list[str]:
  """Comma-separated names in order, where a comma inside parentheses stays in its name
  (`tg,mix(causal,tg):2048` → ["tg", "mix(causal,tg):2048"]); empty names are dropped."""
  names, depth, part = [], 0, ""
  for char in text + ",":
    depth += (char == "(") - (char == ")")
    if char == "," and depth == 0:
      if part.strip():
        names.append(part.strip())
      part = ""
    else:
      part += char
  return names
