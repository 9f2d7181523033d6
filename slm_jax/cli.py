"""The one command-line layer every `python -m slm_jax.…` command is built on: `from slm_jax import
cli`, then `cli.option`, `cli.parse_options`, `cli.run`, `cli.CliError`, … Three concepts live in
their own modules and are re-exported here, so a CLI needs only this one:

- **Flag spelling** (`slm_jax.cli_flags`): `ArgumentParser` — long options spelled with
  underscores (`--batch_size`), the dashed spelling accepted everywhere as an alias (argument
  groups and mutually exclusive groups too), `aliases=` for renamed flags, `--debug`, a usage
  error as one line (exit 2) —, `boolean` (`--flag=true|false`), `parse_shard` (`--shard=i/n`
  means the same in every stage).
- **Typed options** (`slm_jax.cli_options`): flags → typed options → one library call; an
  `@options` class of `option(...)` fields (`Exclusive` groups, `renamed=` old spellings,
  `shard_option`), read by `parse_options` / `parse_known_options` / `parse_command`. No
  function below `main` receives an argparse Namespace.
- **Errors → exit codes** (`slm_jax.cli_errors`): `run(main, argv)` turns an expected failure
  into one line `error: <what and where>` and an exit code (`EXIT_*`: 0 done, 1 incomplete, 2
  user error, 3 non-finite loss, 130 interrupted); `CliError`, `describe_error`, `one_line`; a
  full disk is one line (`full_disk`), its echoes from threads and `atexit` silenced.

Here itself:
- **Config**: a training CLI's `--config=FILE|NAME` and `--config.KEY=VALUE` are read by the one
  config loader, `slm_jax.config_files`.
- **Text input**: `read_utf8(path)`: invalid UTF-8 names file, line and byte (lines:
  `slm_jax.files`).
- **Shared data**: `shared_data_dir()` finds `../shared/data` (or `$SLM_JAX_SHARED_DATA`), the same
  lookup the evaluators and the tests use.
- **Progress**: the progress line of long CLI work (`Progress`).
"""

from __future__ import annotations

import math
import os
import pathlib
import sys
import time

from slm_jax.cli_errors import (EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_NONFINITE, EXIT_OK,
                                EXIT_USAGE, EXTRAS, NO_SPACE, CliError, describe_error,
                                exit_code_of, expected, full_disk, one_line, run)
from slm_jax.cli_flags import ArgumentParser, boolean, parse_shard
from slm_jax.cli_options import (Exclusive, add_options, option, options, options_from,
                                 options_parser, parse_command, parse_known_options,
                                 parse_options, shard_option)

# Re-exported: every CLI reads them as `cli.NAME`.
__all__ = [
    "EXIT_INCOMPLETE", "EXIT_INTERRUPTED", "EXIT_NONFINITE", "EXIT_OK", "EXIT_USAGE", "EXTRAS",
    "NO_SPACE", "CliError", "describe_error", "exit_code_of", "expected", "full_disk", "one_line",
    "run",  # cli_errors
    "ArgumentParser", "boolean", "parse_shard",  # cli_flags
    "Exclusive", "add_options", "option", "options", "options_from", "options_parser",
    "parse_command", "parse_known_options", "parse_options", "shard_option",  # cli_options
    "SHARED_DATA_ENV", "shared_data_dir", "shared_data", "read_utf8", "Progress",  # here
]

SHARED_DATA_ENV = "SLM_JAX_SHARED_DATA"
_REPO = pathlib.Path(__file__).resolve().parents[1]


def shared_data_dir(start: str | os.PathLike | None = None) -> pathlib.Path | None:
  """The shared data folder: `$SLM_JAX_SHARED_DATA` if set (None if it is not a folder), else the
  first `shared/data` found beside the checkout or any folder above `start` (default: the
  working directory); None when there is none."""
  env = os.environ.get(SHARED_DATA_ENV)
  if env:
    path = pathlib.Path(env)
    return path if path.is_dir() else None
  bases = [pathlib.Path(start or os.getcwd()).resolve(), _REPO]
  for base in bases:
    for parent in (base, *base.parents):
      candidate = parent.parent / "shared" / "data"
      if candidate.is_dir():
        return candidate
  return None


def shared_data(name: str, flag: str | None = None) -> pathlib.Path:
  """`shared_data_dir() / name`, or a CliError saying where it was looked for and which flag
  gives it explicitly."""
  root = shared_data_dir()
  if root is None or not (root / name).exists():
    looked = (f"${SHARED_DATA_ENV}={os.environ[SHARED_DATA_ENV]}" if os.environ.get(
        SHARED_DATA_ENV) else "../shared/data beside the checkout and the working directory")
    hint = f"pass {flag}=DIR or " if flag else ""
    raise CliError(f"shared data '{name}' not found (looked in {looked}); {hint}set "
                   f"{SHARED_DATA_ENV} to the folder that holds it")
  return root / name


def read_utf8(path: str | os.PathLike) -> str:
  """The text of a UTF-8 file (a BOM dropped); invalid UTF-8 is a CliError naming the file, the
  line and the byte ("FILE:3: invalid UTF-8 at byte 25"), as the PTB readers word it."""
  data = pathlib.Path(path).read_bytes()
  bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
  try:
    return data[bom:].decode("utf-8")
  except UnicodeDecodeError as error:
    start = bom + error.start  # the byte offset in the file
    line = data.count(b"\n", 0, start) + 1
    raise CliError(f"{path}:{line}: invalid UTF-8 at byte {start} ({error.reason}); "
                   "save the file as UTF-8") from None


class Progress:
  """The progress line of long CLI work: `label: done/total unit, rate unit/s, ETA Ns` on stderr,
  at most every `every` seconds and always at the end. The rate counts only this process' work
  (`done` at construction, e.g. items a resumed run found finished, is excluded). Call it with
  the count done so far (and the total, when it is only known later)."""

  def __init__(self, label: str, total: int | None = None, *, unit: str = "items", done: int = 0,
               every: float = 2.0, stream=None):
    self.label, self.total, self.unit, self.every = label, total, unit, every
    self.start_done, self.stream = done, stream
    self.start, self.last = time.monotonic(), -math.inf

  def __call__(self, done: int, total: int | None = None) -> None:
    total = self.total if total is None else total
    now = time.monotonic()
    if now - self.last < self.every and (total is None or done < total):
      return
    self.last = now
    rate = (done - self.start_done) / max(now - self.start, 1e-9)
    eta = (total - done) / rate if rate > 0 and total is not None else math.inf
    print(f"{self.label}: {done}/{total if total is not None else '?'} {self.unit}, "
          f"{rate:.2f} {self.unit}/s, ETA {eta:.0f}s", file=self.stream or sys.stderr, flush=True)
