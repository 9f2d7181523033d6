"""Input discovery: which files under the paths a user gives are read, and as which format.

One rule, `discover(paths, table, fmt)`, for every stage; a `FormatTable` says per stage which
file names mean which format:
- a **file** named explicitly is read whatever its name: as `fmt` when it is given, else as the
  first format whose patterns (or `named` patterns) match its name, else as the table's
  `fallback` (no fallback: an error naming the file and the flag that sets the format);
- a **folder** is searched recursively and contributes every file whose name matches one of the
  table's folder patterns (only `fmt`'s patterns when `fmt` is given); a folder that contributes
  nothing is an error naming it;
- a path that does not exist is an error naming it, and so is an empty list of paths;
- the result is every file once, sorted by path (the order shards are dealt in, the same on
  every host); name patterns are globs matched case-insensitively (`*.PTB` is a `*.ptb` file).
`*.json` names a JSONL file only when given explicitly: in folders, `.json` files are the stages'
own reports and manifests.

Tables: `TREE_INPUTS` (documents of trees: `python -m slm_jax.prepare` and the training
sources), `PARSE_INPUTS` (raw documents: `python -m slm_jax.parse`), `ptb_files(patterns)`
(`slm_jax.ptb`'s folder readers). This module imports nothing from slm_jax (layer 0), so the PTB
reader below the data layer uses it too.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pathlib
from typing import Iterable, Mapping

PTB_PATTERNS = ("*.mrg", "*.ptb", "*.tree", "*.txt")
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class FormatTable:
  """Which file names mean which format for one stage (see the module docstring)."""

  folders: Mapping[str, tuple[str, ...]]  # format → name globs searched in folders, in priority
  named: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # + named files
  fallback: str | None = None  # format of a named file no pattern matches (None: an error)
  flag: str = "--format"  # how the user sets the format (for error messages)

  @property
  def formats(self) -> tuple[str, ...]:
    return tuple(self.folders)

  def patterns(self, fmt: str = AUTO) -> tuple[str, ...]:
    """The folder patterns of `fmt` (all formats' for auto)."""
    return tuple(p for kind, patterns in self.folders.items() if fmt in (AUTO, kind)
                 for p in patterns)

  def check(self, fmt: str) -> None:
    if fmt != AUTO and fmt not in self.folders:
      raise ValueError(f"{self.flag} must be {AUTO} or one of {', '.join(self.formats)}, "
                       f"got {fmt!r}")

  def in_folder(self, relative: pathlib.PurePath) -> str | None:
    """The format of a file found in a folder (`relative` to it), or None: not an input."""
    return _first_match(self.folders, relative)

  def of_named(self, path: pathlib.Path) -> str:
    """The format of a file named explicitly."""
    kind = _first_match(self.folders, path) or _first_match(self.named, path) or self.fallback
    if kind is None:
      raise ValueError(f"{path}: unknown input format (suffix {path.suffix!r}); pass "
                       f"{self.flag}={'|'.join(self.formats)}")
    return kind


def _first_match(table: Mapping[str, tuple[str, ...]], path: pathlib.PurePath) -> str | None:
  lowered = pathlib.PurePosixPath(path.as_posix().lower())
  for kind, patterns in table.items():
    if any(lowered.match(pattern.lower()) for pattern in patterns):
      return kind
  return None


TREE_INPUTS = FormatTable(
    folders={"jsonl": ("*.jsonl",), "parquet": ("*.parquet",), "ptb": PTB_PATTERNS},
    named={"jsonl": ("*.json",)}, fallback="ptb", flag="--format")
PARSE_INPUTS = FormatTable(
    folders={"parquet": ("*.parquet",), "jsonl": ("*.jsonl",), "text": ("*.txt", "*.text")},
    named={"jsonl": ("*.json",)}, fallback=None, flag="--input_format")


def ptb_files(patterns: Iterable[str] = PTB_PATTERNS) -> FormatTable:
  """PTB files only: folders contribute `patterns` files, named files are PTB whatever their
  name (`slm_jax.ptb.read_folder`, `read_documents`)."""
  return FormatTable(folders={"ptb": tuple(patterns)}, fallback="ptb", flag="patterns")


def _not_found(what: str, path: pathlib.Path) -> FileNotFoundError:
  return FileNotFoundError(errno.ENOENT, what, str(path))


def discover(paths: str | os.PathLike | Iterable[str | os.PathLike], table: FormatTable,
             fmt: str = AUTO) -> list[tuple[str, str]]:
  """(path, format) of every input file under `paths`, sorted by path (see the module docstring)."""
  table.check(fmt)
  paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
  if not paths:
    raise ValueError("no input paths given")
  found: dict[str, str] = {}
  for entry in paths:
    path = pathlib.Path(entry)
    if path.is_file():
      found[str(path)] = fmt if fmt != AUTO else table.of_named(path)
    elif path.is_dir():
      matched = {}
      for child in path.rglob("*"):
        kind = table.in_folder(child.relative_to(path))
        if kind is not None and fmt in (AUTO, kind) and child.is_file():
          matched[str(child)] = kind
      if not matched:
        raise _not_found(f"no input files ({', '.join(table.patterns(fmt))}) under", path)
      found.update(matched)
    else:
      raise _not_found("input does not exist", path)
  return sorted(found.items())
