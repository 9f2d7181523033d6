"""One writer per output folder: `writer_lock(folder, what=…)` around everything a CLI writes there.

  with locks.writer_lock(workdir, what="training"):
    ...  # only this process writes under workdir

The lock is `FOLDER/.lock`, a JSON record (pid, host, started, command, what) plus an
`fcntl.flock` held on it for the lifetime of the `with`. A second writer is refused with
`FolderInUseError` (exit 2), one line: "FOLDER: in use by pid N on HOST since TIME (what); …".
Because the kernel drops the flock when its process ends (also after `kill -9`), a lock file left
by a dead process is stale: it is taken over with a warning on stderr. A lock written on another
host cannot be checked from here (its pid means nothing on this host, and flock over a network
file system is not reliable), so it is refused naming that host and how to clear it. The folder is
created when missing; a path that is a file, or a folder this process cannot write, is refused in
one line (before the command does any work). The lock is re-entrant inside
one process (a nested `writer_lock` of the same folder is a no-op), and the lock file is removed
on exit (and the folder too when the lock made it and nothing was written into it).

Layer 0: imports only the stdlib and `slm_jax.cli`.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import pathlib
import socket
import sys
from typing import Iterator

from slm_jax import cli

LOCK_FILE = ".lock"

_HELD: dict[str, int] = {}  # resolved folder → nesting depth, for this process


class FolderInUseError(cli.CliError):
  """Another process writes into the folder (or a lock from another host cannot be checked)."""


def _record(what: str) -> dict:
  return {"pid": os.getpid(), "host": socket.gethostname(),
          "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
          "command": " ".join(sys.argv)[:500], "what": what}


def read_lock(folder: str | os.PathLike, part: str = "") -> dict | None:
  """The record in `folder/.lock` (`.lock.PART`; None when there is none, or it is empty or
  unreadable: a process killed while writing its record)."""
  name = LOCK_FILE + (f".{part}" if part else "")
  try:
    record = json.loads((pathlib.Path(folder) / name).read_text(encoding="utf-8"))
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) else None


def _holder(record: dict | None) -> str:
  if not record:
    return "another process (its lock record is not written yet)"
  return (f"pid {record.get('pid')} on {record.get('host')} since {record.get('started')} "
          f"({record.get('what') or record.get('command')})")


def _open_locked(path: pathlib.Path, folder: pathlib.Path, what: str, part: str) -> int:
  """An fd of `path` holding its exclusive flock (retried when the file was replaced or
  removed between open and flock, so two processes never hold two different inodes)."""
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      record = read_lock(folder, part)
      pid = (record or {}).get("pid")
      raise FolderInUseError(
          f"{folder}: in use by {_holder(record)}{f' (share {part})' if part else ''}; this "
          f"{what} is refused: one writer per folder — wait for it to end"
          + (f" (or stop it: kill {pid})" if pid else "") + ", or use another folder") from None
    try:
      same = os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
      same = False
    if same:
      return fd
    os.close(fd)  # the holder removed the file as we opened it: open the new one


@contextlib.contextmanager
def writer_lock(folder: str | os.PathLike, *, what: str,
                part: str = "") -> Iterator[pathlib.Path]:
  """Holds `folder`'s writer lock for the `with` block (see the module docstring); yields the
  folder (created when missing). `part` names a share of the folder that writers fill side by
  side (`--shard=i/n` writes only its own files): its lock is `.lock.PART`, so shards run
  together (also from many hosts) and only two writers of one share collide."""
  folder = pathlib.Path(folder)
  if folder.exists() and not folder.is_dir():
    raise cli.CliError(f"{folder}: is a file, not a folder; the {what} writes a folder there: "
                       "give a folder path")
  created = not folder.exists()
  try:
    folder.mkdir(parents=True, exist_ok=True)
    if not os.access(folder, os.W_OK | os.X_OK):
      raise PermissionError(13, "Permission denied")
  except OSError as error:  # checked before any work: a read-only output fails at once
    raise cli.CliError(f"{folder}: cannot write there ({error.strerror or error}); the {what} "
                       "needs a writable folder") from None
  key = f"{folder.resolve()}/{part}"
  if key in _HELD:  # this process holds it already: nested writer
    _HELD[key] += 1
    try:
      yield folder
    finally:
      _HELD[key] -= 1
    return
  path = folder / (LOCK_FILE + (f".{part}" if part else ""))
  fd = _open_locked(path, folder, what, part)
  try:
    previous = read_lock(folder, part)
    here = socket.gethostname()
    if previous and previous.get("host") not in (None, here):
      raise FolderInUseError(
          f"{folder}: in use by {_holder(previous)}; a lock from another host cannot be "
          f"checked from {here}: if that process has ended, delete {path} and rerun")
    if previous:
      print(f"warning: {folder}: taking over the stale lock of {_holder(previous)}: that "
            "process has ended", file=sys.stderr, flush=True)
    try:
      os.ftruncate(fd, 0)
      os.pwrite(fd, (json.dumps(_record(what)) + "\n").encode(), 0)
      os.fsync(fd)
    except OSError as error:  # a full disk: named, as every write names its file
      raise OSError(error.errno, error.strerror, str(path)) from None
  except BaseException:
    os.close(fd)
    raise
  _HELD[key] = 1
  try:
    yield folder
  finally:
    del _HELD[key]
    with contextlib.suppress(OSError):
      path.unlink()  # while the flock is held: a waiting opener re-checks the inode
    os.close(fd)
    if created:  # a command that wrote nothing leaves no empty folder behind
      with contextlib.suppress(OSError):
        folder.rmdir()
