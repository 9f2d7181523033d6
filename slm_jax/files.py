"""THE file rules of every command: how a user's text file is read as lines, and how an output
file or folder is written.

- **Lines** are split exactly on "\\n" (a "\\r" before it dropped: a `\\r\\n` file reads the same),
  never on the other separators `str.splitlines` knows (\\v, \\f, \\x1c–\\x1e, \\x85, \\u2028,
  \\u2029): those are characters inside a line, and splitting on them gave one input line two
  output rows. `text_lines(text)`; `read_lines(path)` for a UTF-8 file (`cli.read_utf8`: invalid
  UTF-8 names file, line and byte); `iter_lines(path)` streams (number, line) of a large file by
  the same rule, decoding line by line (invalid UTF-8 names file, line and byte too).
- **Output files** are written atomically: `write_text(path, text)` writes a temporary file beside
  `path` (`.NAME.tmp`) and renames it over `path`, so a kill or a full disk leaves the previous
  file (or none), never a cut or 0-byte one, and a failed write removes its temporary and names
  `path` (an `OSError` with its errno); `write_bytes` likewise (charts). `appending(path)` is an
  append stream (JSON-lines item files, metrics.jsonl) whose failed write names the file.
- **Output folders** are written whole: `replace_folder(out)` yields a temporary folder beside
  `out` (`.NAME.partial-PID`); when the block ends without error it becomes `out` by rename (an
  existing `out` renamed away first and deleted after), else it is deleted. So `--force` replaces
  a folder's whole content — nothing of another model's files survives — and a failed write
  leaves the old folder as it was. `check_replaceable(out, force)` is the up-front refusal of a
  non-empty `out` without `--force` (before any slow work).

Layer 0: the stdlib and `slm_jax.cli` (whose `describe_error` words a full disk: `cli.full_disk`).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
from typing import Iterator

from slm_jax import cli


def text_lines(text: str) -> list[str]:
  """The lines of `text`, split on "\\n" only (module docstring); a final "\\n" ends the last
  line (no empty line after it), as `str.splitlines` does."""
  lines = text.split("\n")
  if lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path: str | os.PathLike) -> list[str]:
  """The lines of UTF-8 file `path` (`text_lines`; invalid UTF-8 names file, line and byte)."""
  return text_lines(cli.read_utf8(path))


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
  """(1-based number, line) of UTF-8 file `path`, streamed; split as `text_lines` splits (binary
  reads split on b"\\n" only); a line of invalid UTF-8 is a `CliError` naming file, line and
  byte, as `cli.read_utf8` words it."""
  offset = 0
  with open(path, "rb") as handle:
    for number, raw in enumerate(handle, 1):
      start = 3 if number == 1 and raw.startswith(b"\xef\xbb\xbf") else 0
      try:
        line = raw[start:].decode("utf-8")
      except UnicodeDecodeError as error:
        raise cli.CliError(f"{path}:{number}: invalid UTF-8 at byte {offset + start + error.start}"
                           f" ({error.reason}); save the file as UTF-8") from None
      offset += len(raw)
      line = line[:-1] if line.endswith("\n") else line
      yield number, line[:-1] if line.endswith("\r") else line


def _named(error: OSError, path: pathlib.Path) -> OSError:
  """`error` naming `path` (an OSError raised by a write on an open file names no file)."""
  return error if error.filename else OSError(error.errno, error.strerror, str(path))


def write_text(path: str | os.PathLike, text: str) -> pathlib.Path:
  """Writes `text` (UTF-8) to `path` atomically (module docstring); returns `path`."""
  return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | os.PathLike, data: bytes) -> pathlib.Path:
  """Writes `data` to `path` atomically (module docstring); returns `path`."""
  path = pathlib.Path(path)
  temporary = path.with_name(f".{path.name}.tmp")
  try:
    with temporary.open("wb") as handle:
      handle.write(data)
  except OSError as error:
    temporary.unlink(missing_ok=True)
    raise _named(error, path) from None
  temporary.replace(path)
  return path


class Appending:
  """A UTF-8 text stream appending to `path` whose failed write, flush or close names `path`
  (a write on an open file raises an OSError without a file name); a context manager."""

  def __init__(self, path: str | os.PathLike):
    self.path = pathlib.Path(path)
    self._handle = self.path.open("a", encoding="utf-8")

  def write(self, text: str) -> int:
    try:
      return self._handle.write(text)
    except OSError as error:
      raise _named(error, self.path) from None

  def flush(self) -> None:
    try:
      self._handle.flush()
    except OSError as error:
      raise _named(error, self.path) from None

  def close(self) -> None:
    try:
      self._handle.close()  # the last buffered write may fail here
    except OSError as error:
      raise _named(error, self.path) from None

  def __enter__(self) -> "Appending":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def appending(path: str | os.PathLike) -> Appending:
  """`with appending(path) as sink: sink.write(line)`: `Appending`."""
  return Appending(path)


def check_replaceable(out: str | os.PathLike, force: bool, flag: str = "--out") -> None:
  """Refuses (`CliError`, one line) an `out` that is a file, or a non-empty folder without
  `force`."""
  out = pathlib.Path(out)
  if out.exists() and not out.is_dir():
    raise cli.CliError(f"{flag}={out}: is a file; give a folder path")
  if out.is_dir() and any(out.iterdir()) and not force:
    raise cli.CliError(f"{flag}={out}: exists and is not empty; pass --force to replace the "
                       "whole folder")


@contextlib.contextmanager
def replace_folder(out: str | os.PathLike, *, force: bool = False,
                   flag: str = "--out") -> Iterator[pathlib.Path]:
  """Yields a temporary folder beside `out` to write into; it becomes `out` when the block ends
  without error (the old `out`, if any, removed whole), else it is deleted (module docstring)."""
  out = pathlib.Path(out)
  check_replaceable(out, force, flag)
  out.parent.mkdir(parents=True, exist_ok=True)
  temporary = out.with_name(f".{out.name}.partial-{os.getpid()}")
  shutil.rmtree(temporary, ignore_errors=True)  # a leftover of this pid's earlier attempt
  temporary.mkdir()
  try:
    yield temporary
    if out.exists():
      old = out.with_name(f".{out.name}.old-{os.getpid()}")
      out.rename(old)
      temporary.rename(out)
      shutil.rmtree(old, ignore_errors=True)
    else:
      temporary.rename(out)
  except BaseException:
    shutil.rmtree(temporary, ignore_errors=True)
    raise
