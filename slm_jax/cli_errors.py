"""Errors → exit codes: how every `python -m slm_jax.…` command ends (re-exported by `slm_jax.cli`).

`run(main, argv)` turns an expected failure into one line on stderr, `error: <what and where>`,
and an exit code (`EXIT_*`: 0 done, 1 incomplete, 2 user error, 3 non-finite loss; anything else
is a bug and keeps its traceback). Expected failures are the usual user-input errors (ValueError,
KeyError, OSError, ImportError) and any exception that carries an `exit_code`; `--debug` (every
CLI has it) shows their traceback too. An "error" with exit code 0 (e.g. "already at step N:
nothing to do") is printed as a plain line. Ctrl-C is `error: interrupted`, exit 130; a command
line (`argv` None) then ends at once instead of joining the background threads the interrupted
work left (an Orbax save in flight waits for signals that never come): what was committed before
stays, nothing more is printed.

A full disk is one line, `No space left on device: FILE` (`full_disk`: an OSError's errno 28, or
a library's message that says so — TensorStore's, Orbax's — with the file it names), said once:
its echoes from background threads and `atexit` are silenced.

The lowest of the CLI modules: it imports none of them (`cli_flags`, `cli_options` and `cli`
import it).
"""

from __future__ import annotations

import errno
import os
import re
import sys
import threading
import warnings
from typing import Callable, Sequence

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # ran, but the result is not complete (e.g. shards still missing)
EXIT_USAGE = 2  # bad input: flags, config, files, data
EXIT_NONFINITE = 3  # training stopped on a NaN/Inf loss (nothing saved)
EXIT_INTERRUPTED = 130


class CliError(Exception):
  """An expected failure with a message for the user; `exit_code` says how the command ends."""

  exit_code = EXIT_USAGE

  def __init__(self, message: str, exit_code: int | None = None):
    super().__init__(message)
    if exit_code is not None:
      self.exit_code = exit_code


# Expected failures: reported in one line, never as a traceback.
_EXPECTED = (CliError, ValueError, KeyError, LookupError, OSError, ImportError)


def one_line(text: str) -> str:
  """A multi-line message as one line: lines joined by "; " (after a trailing ":" by a space),
  list bullets dropped."""
  out = ""
  for line in (l.strip().removeprefix("- ") for l in text.splitlines()):
    if line:
      out += ("" if not out else " " if out.endswith(":") else "; ") + line
  return out


# A module of an optional extra (pyproject.toml) → the extra that installs it.
EXTRAS = {"apache_beam": "beam", "tensorflow_datasets": "tfds", "importlib_resources": "tfds",
          "benepar": "parse", "nltk": "parse", "pysbd": "parse", "torch": "hf",
          "transformers": "hf", "safetensors": "hf", "accelerate": "hf", "libtpu": "aot",
          "jax_triton": "gpu"}


NO_SPACE = "No space left on device"


def full_disk(error: BaseException) -> str | None:
  """`No space left on device: FILE` when `error` (or an error it was raised from) is a full
  disk: an OSError with errno ENOSPC (its filename), or a message that says so — TensorStore's
  `Failed writing: "FILE": … No space left on device` as Orbax passes it on: the last absolute
  path quoted before those words —; None for any other error."""
  chain: list[BaseException] = []
  while error is not None and error not in chain and len(chain) < 8:
    chain.append(error)
    error = error.__cause__ or error.__context__
  for one in chain:
    text = str(one)
    if not ((isinstance(one, OSError) and one.errno == errno.ENOSPC) or NO_SPACE in text
            or "os_error_code='28'" in text):
      continue
    path = one.filename if isinstance(one, OSError) else None
    if not path:
      quoted = re.findall(r"[\"'](/[^\"']+)[\"']", text.split(NO_SPACE)[0])
      path = quoted[-1] if quoted else _written_path(one)
    return f"{NO_SPACE}: {path}" if path else f"{NO_SPACE} ({type(one).__name__} names no file)"
  return None


def _written_path(error: BaseException) -> str | None:
  """The file a failed write was writing, when the error does not name it (a write or close of
  an open file: `Path.write_text` in a library): the innermost frame of its traceback holding a
  path as `self` or `path`."""
  frames, tb = [], error.__traceback__
  while tb is not None:
    frames.append(tb.tb_frame)
    tb = tb.tb_next
  for frame in reversed(frames):
    for name in ("self", "path", "filename"):
      value = frame.f_locals.get(name)
      if isinstance(value, os.PathLike):
        return os.fspath(value)
  return None


def describe_error(error: BaseException) -> str:
  """The one line shown for an expected error (KeyError's repr quotes are dropped; a missing
  module of an optional extra says how to install it; a full disk is `full_disk`'s line unless
  the error is one of ours, whose message says what was being written)."""
  if not isinstance(error, CliError) and getattr(error, "exit_code", None) is None:
    disk = full_disk(error)
    if disk:
      return disk
  if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
    return one_line(error.args[0])
  module = (getattr(error, "name", None) or "").split(".")[0]
  if isinstance(error, ModuleNotFoundError) and module in EXTRAS:
    return (f"{error}: the '{EXTRAS[module]}' extra is not installed "
            f"(pip install -e '.[{EXTRAS[module]}]')")
  text = str(error) or type(error).__name__
  if isinstance(error, OSError) and error.filename and str(error.filename) not in text:
    text = f"{text}: {error.filename}"
  return one_line(text)


def exit_code_of(error: BaseException) -> int:
  code = getattr(error, "exit_code", None)
  return int(code) if isinstance(code, int) else EXIT_USAGE


def expected(error: BaseException) -> bool:
  return isinstance(error, _EXPECTED) or isinstance(getattr(error, "exit_code", None), int)


def run(main: Callable[[list[str] | None], int | None], argv: Sequence[str] | None = None, *,
        debug: bool | None = None) -> int:
  """Calls `main(argv)`; expected errors become `error: …` on stderr and their exit code.
  `debug` (default: `--debug` among the arguments) re-raises them with their traceback."""
  if debug is None:
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
  if not debug:
    _quiet_full_disk_echoes()
  try:
    return int(main(None if argv is None else list(argv)) or EXIT_OK)
  except KeyboardInterrupt:
    print("error: interrupted", file=sys.stderr, flush=True)
    if argv is None and _background_threads():
      sys.stdout.flush()
      os._exit(EXIT_INTERRUPTED)  # not sys.exit: that would join them
    return EXIT_INTERRUPTED
  except Exception as error:  # pylint: disable=broad-except
    if debug or not expected(error):
      raise
    code = exit_code_of(error)
    if code == EXIT_OK:
      print(describe_error(error), flush=True)
    else:
      line = describe_error(error)
      if NO_SPACE in line and not _FULL_DISK["reported"]:
        _FULL_DISK["reported"] = True
        # The failed save's unfinished async writes, collected at exit, are its echoes too.
        warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited",
                                category=RuntimeWarning)
      print(f"error: {line}", file=sys.stderr, flush=True)
    return code


_FULL_DISK = {"reported": False, "warned": False}


def _quiet_full_disk_echoes() -> None:
  """A full disk is said once (issue #47): writers that fail again in a background thread
  (TensorBoard's flush) print one `warning:` line for the first, nothing after; and once the
  command's own error line said "No space left on device", its echoes at exit — an OSError of
  an `atexit` flush ("Exception ignored in atexit callback" and its traceback), of a writer
  thread whose queue was closed, or an async write coroutine never awaited — print nothing."""
  if getattr(sys.unraisablehook, "full_disk_quiet", False):
    return
  unraisable, thread_hook = sys.unraisablehook, threading.excepthook

  def echo(error) -> bool:  # after the full disk was reported: its failures at exit (a closed
    # writer's flush, its worker finding its queue closed) are the same failure
    return _FULL_DISK["reported"] and isinstance(error, OSError)

  def on_unraisable(info):
    return None if echo(info.exc_value) else unraisable(info)

  def on_thread_error(args):
    disk = full_disk(args.exc_value) if args.exc_value is not None else None
    if echo(args.exc_value):
      return None
    if not disk:
      return thread_hook(args)
    if not _FULL_DISK["warned"] and not _FULL_DISK["reported"]:
      _FULL_DISK["warned"] = True
      thread = args.thread.name if args.thread is not None else "?"
      print(f"warning: {disk} (a background write, thread {thread})", file=sys.stderr,
            flush=True)
    return None

  on_unraisable.full_disk_quiet = True
  sys.unraisablehook, threading.excepthook = on_unraisable, on_thread_error


def _background_threads() -> list[threading.Thread]:
  """The live non-daemon threads besides this one: Python's exit would wait for each."""
  return [t for t in threading.enumerate()
          if t is not threading.current_thread() and not t.daemon and t.is_alive()]
