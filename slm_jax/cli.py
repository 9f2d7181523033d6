"""The one command-line layer every `python -m slm_jax.…` command is built on.

- **Flag spelling**: long options are spelled with underscores (`--batch_size`, `--max_items`), as
  absl (`slm_jax.main`) and the config keys (`--config.train.global_batch`) spell them; the dashed
  spelling (`--batch-size`) is accepted everywhere as an alias (in argument groups and mutually
  exclusive groups too), so older command lines keep working.
  `ArgumentParser.add_argument(..., aliases=("--old_name",))` keeps a renamed flag working too.
- **Typed options** (flags → typed options → one library call): a CLI declares its flags as an
  `@options` class (a frozen, keyword-only dataclass) of `option(...)` fields (type from the annotation, help, choices, aliases,
  `renamed=` old spellings with their notice, `Exclusive` groups) and `main(argv)` is
  `parse_options(XOptions, argv, prog=…, doc=…)` → one library function called with the typed
  options → print. The dataclass's `validate()` says a bad value in one line naming the flag;
  `parse_known_options` passes undeclared arguments on, `parse_command` reads subcommands. No
  function below `main` receives an argparse Namespace.
- **Config**: a training CLI's `--config=FILE|NAME` and `--config.KEY=VALUE` are read by the one
  config loader, `slm_jax.config_files`.
- **Shards**: `--shard=i/n` (`shard_option`, `parse_shard`) means the same in every stage.
- **Errors → exit codes**: `run(main, argv)` turns an expected failure into one line on stderr,
  `error: <what and where>`, and an exit code (`EXIT_*`: 0 done, 1 incomplete, 2 user error, 3
  non-finite loss; anything else is a bug and keeps its traceback). Expected failures are the
  usual user-input errors (ValueError, KeyError, OSError, ImportError) and any exception that
  carries an `exit_code`; `--debug` (every CLI has it) shows their traceback too. An "error" with
  exit code 0 (e.g. "already at step N: nothing to do") is printed as a plain line. Ctrl-C is
  `error: interrupted`, exit 130; a command line (`argv` None) then ends at once instead of
  joining the background threads the interrupted work left (an Orbax save in flight waits for
  signals that never come): what was committed before stays, nothing more is printed.
- **Text input**: `read_utf8(path)`: invalid UTF-8 names file, line and byte (lines:
  `slm_jax.files`).
- **A full disk** is one line, `No space left on device: FILE` (`full_disk`: an OSError's errno
  28, or a library's message that says so — TensorStore's, Orbax's — with the file it names).
- **Shared data**: `shared_data_dir()` finds `../shared/data` (or `$SLM_JAX_SHARED_DATA`), the same
  lookup the evaluators and the tests use.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import math
import os
import pathlib
import re
import sys
import threading
import time
import typing
from typing import Callable, Sequence

from slm_jax import sections

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # ran, but the result is not complete (e.g. shards still missing)
EXIT_USAGE = 2  # bad input: flags, config, files, data
EXIT_NONFINITE = 3  # training stopped on a NaN/Inf loss (nothing saved)
EXIT_INTERRUPTED = 130

SHARED_DATA_ENV = "SLM_JAX_SHARED_DATA"
_REPO = pathlib.Path(__file__).resolve().parents[1]


class CliError(Exception):
  """An expected failure with a message for the user; `exit_code` says how the command ends."""

  exit_code = EXIT_USAGE

  def __init__(self, message: str, exit_code: int | None = None):
    super().__init__(message)
    if exit_code is not None:
      self.exit_code = exit_code


def _spellings(name: str) -> list[str]:
  """`--batch_size` → [`--batch_size`, `--batch-size`] (canonical first); short options as
  given."""
  if not name.startswith("--"):
    return [name]
  body = name[2:]
  canonical = "--" + body.replace("-", "_")
  dashed = "--" + body.replace("_", "-")
  return [canonical] if canonical == dashed else [canonical, dashed]


def _spelled(names: Sequence[str], aliases: Sequence[str]) -> list[str]:
  """Every spelling of an option's names and aliases (canonical first); positionals as given."""
  if not names or not names[0].startswith("-"):
    return list(names)
  spelled: list[str] = []
  for name in (*names, *aliases):
    for spelling in _spellings(name):
      if spelling not in spelled:
        spelled.append(spelling)
  return spelled


class _Spelling:
  """The spelling rule for `add_argument` of a parser and of every group made from it (argparse
  groups have their own `add_argument`, which would skip the rule)."""

  def add_argument(self, *names, aliases: Sequence[str] = (), **kwargs):
    return super().add_argument(*_spelled(names, aliases), **kwargs)

  def add_argument_group(self, *args, **kwargs):
    group = _ArgumentGroup(self, *args, **kwargs)
    self._action_groups.append(group)
    return group

  def add_mutually_exclusive_group(self, **kwargs):
    group = _MutuallyExclusiveGroup(self, **kwargs)
    self._mutually_exclusive_groups.append(group)
    return group


# pylint: disable=protected-access  # argparse's group classes, as its own factories use them
class _ArgumentGroup(_Spelling, argparse._ArgumentGroup):
  pass


class _MutuallyExclusiveGroup(_Spelling, argparse._MutuallyExclusiveGroup):
  pass
# pylint: enable=protected-access


class ArgumentParser(_Spelling, argparse.ArgumentParser):
  """argparse with the project's spelling rule: every long option also answers to its dashed (or
  underscored) twin, also inside argument groups and mutually exclusive groups, and `aliases=`
  keeps renamed flags working. Help shows the canonical name."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    kwargs.setdefault("allow_abbrev", False)  # an abbreviation must not change meaning later
    super().__init__(*args, **kwargs)
    self.add_argument("--debug", action="store_true",
                      help="show the traceback of an error (default: one line)")

  def error(self, message: str):
    """Usage errors end like every other error: one `error: …` line (with the --help hint), exit
    2 — not argparse's usage block, which for a CLI with many flags buries the message."""
    print(f"error: {self.prog}: {message} (--help lists the flags)", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def parse_shard(text: str) -> tuple[int, int]:
  """`"3/16"` → (3, 16): this process's share `i` of `n` (0 <= i < n)."""
  try:
    index, count = (int(part) for part in str(text).split("/"))
  except ValueError:
    raise CliError(f"--shard must look like i/n (e.g. 3/16), got {text!r}") from None
  if not 0 <= index < count:
    raise CliError(f"--shard {text}: need 0 <= i < n")
  return index, count


def shard_option(what: str = "input files"):
  """The `--shard=i/n` field of an options class (`tuple[int, int]`, default (0, 1))."""
  return option((0, 1), type=parse_shard,
                help=f"i/n: this process's share of the {what} (default 0/1: all)")


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


def boolean(text: str) -> bool:
  """A `--flag=true|false` value (argparse `type=`), the one spelling every CLI accepts."""
  value = str(text).strip().lower()
  if value not in ("true", "false", "1", "0", "yes", "no"):
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
  return value in ("true", "1", "yes")


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
      _FULL_DISK["reported"] = _FULL_DISK["reported"] or NO_SPACE in line
      print(f"error: {line}", file=sys.stderr, flush=True)
    return code


_FULL_DISK = {"reported": False, "warned": False}


def _quiet_full_disk_echoes() -> None:
  """A full disk is said once (issue #47): writers that fail again in a background thread
  (TensorBoard's flush) print one `warning:` line for the first, nothing after; and once the
  command's own error line said "No space left on device", its echoes at exit — an OSError of
  an `atexit` flush ("Exception ignored in atexit callback" and its traceback) or of a writer
  thread whose queue was closed — print nothing."""
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


# --- typed options: a CLI's flags declared as a frozen dataclass --------------------------------


@dataclasses.dataclass(frozen=True)
class Exclusive:
  """A mutually exclusive group of options (`option(exclusive=GROUP)` on each member): at most
  one of them given; exactly one when `required`. Declare it once, beside the options class."""

  name: str
  required: bool = False


_OPTION = "slm_jax.cli.option"


def options(cls):
  """The decorator of an options class: a frozen, keyword-only dataclass (a required flag may
  follow one with a default)."""
  return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


def option(default=dataclasses.MISSING, *, help: str | None = None,  # pylint: disable=redefined-builtin
           choices: Sequence | None = None, aliases: Sequence[str] = (),
           type: Callable | None = None, metavar: str | None = None,  # pylint: disable=redefined-builtin
           nargs: str | int | None = None, positional: bool = False,
           exclusive: Exclusive | None = None, group: str | None = None,
           renamed: dict[str, str] | None = None, renamed_note: str | None = None,
           repeat: bool | None = None):
  """A dataclass field that is a flag (`--NAME`, NAME the field's name) or, `positional`, an
  argument. The annotation gives the type: `str`, `int`, `float`, `pathlib.Path`, `bool` (a
  `store_true` flag; with `type=cli.boolean` a `--flag=true|false` value), `X | None`, `tuple[X, ...]` (a repeated
  flag; a positional's `nargs` is `+` without a default, `*` with one). No default: required.
  `type` converts the text instead (e.g. `parse_shard`); `aliases` are further spellings (the
  dashed twins come by themselves); `renamed` maps old flags to their help: each is still
  accepted, prints `note: OLD is the old spelling of --NAME (renamed_note)` and gives the value;
  `exclusive` puts the flag (and its old spellings) in a mutually exclusive group; `group` is the
  title of the help section it is listed under; `repeat=False` keeps a `tuple[X, ...]` field
  one flag (its `type` converts the whole text)."""
  meta = dict(help=help, choices=choices, aliases=tuple(aliases), type=type, metavar=metavar,
              nargs=nargs, positional=positional, exclusive=exclusive, group=group,
              renamed=dict(renamed or {}), renamed_note=renamed_note, repeat=repeat)
  return dataclasses.field(default=default, metadata={_OPTION: meta})


def _meta(field: dataclasses.Field) -> dict:
  return field.metadata.get(_OPTION) or option().metadata[_OPTION]


def _unwrap(annotation) -> tuple[object, bool]:
  """(the value type, repeated: `tuple[X, ...]` / `list[X]`) of an option's annotation (`| None`
  dropped)."""
  annotation = sections.optional_type(annotation)[0]
  arguments = typing.get_args(annotation)
  repeated = (typing.get_origin(annotation) is list
              or typing.get_origin(annotation) is tuple and arguments[1:] == (Ellipsis,))
  return (arguments or (str,))[0] if repeated else annotation, repeated


def _fields(options_class) -> list[tuple[dataclasses.Field, object]]:
  if not (dataclasses.is_dataclass(options_class)
          and options_class.__dataclass_params__.frozen):
    raise TypeError(f"{options_class.__name__}: options are a frozen dataclass")
  hints = typing.get_type_hints(options_class)
  return [(field, hints[field.name]) for field in dataclasses.fields(options_class)
          if field.init]


def _default(field: dataclasses.Field):
  if field.default is not dataclasses.MISSING:
    return field.default
  if field.default_factory is not dataclasses.MISSING:
    return field.default_factory()
  return dataclasses.MISSING


def add_options(parser: argparse.ArgumentParser, options_class) -> None:
  """Adds the flags of `options_class` (a frozen dataclass of `option` fields) to `parser`."""
  containers: dict[object, object] = {}

  def container(meta):
    if meta["group"] is not None and meta["group"] not in containers:
      containers[meta["group"]] = parser.add_argument_group(meta["group"])
    where = containers[meta["group"]] if meta["group"] is not None else parser
    exclusive = meta["exclusive"]
    if exclusive is None:
      return where
    if exclusive not in containers:
      containers[exclusive] = where.add_mutually_exclusive_group(required=exclusive.required)
    return containers[exclusive]

  for field, annotation in _fields(options_class):
    meta = _meta(field)
    value_type, repeated = _unwrap(annotation)
    repeated = repeated if meta["repeat"] is None else meta["repeat"]
    default = _default(field)
    kwargs: dict = {"help": meta["help"]}
    for key in ("choices", "metavar", "nargs"):
      if meta[key] is not None:
        kwargs[key] = meta[key]
    if value_type is bool and meta["type"] is None and not repeated:
      if default not in (False, dataclasses.MISSING):
        raise TypeError(f"{options_class.__name__}.{field.name}: a bool flag's default is False "
                        "(type=cli.boolean for --flag=true|false)")
      kwargs.update(action="store_true")
    else:
      convert = meta["type"] or (value_type if value_type in (int, float, pathlib.Path)
                                      else None)
      if convert is not None:
        kwargs["type"] = convert
      if repeated and "nargs" not in kwargs:
        if meta["positional"]:
          kwargs["nargs"] = "+" if default is dataclasses.MISSING else "*"
        else:
          kwargs["action"] = "append"
    if default is not dataclasses.MISSING:  # append would extend a tuple default in place
      kwargs["default"] = list(default) if isinstance(default, tuple) and repeated else default
    if meta["positional"]:
      container(meta).add_argument(field.name, **kwargs)
      continue
    if default is dataclasses.MISSING:
      kwargs["required"] = True
    container(meta).add_argument(f"--{field.name}", aliases=meta["aliases"], dest=field.name,
                                 **kwargs)
    for old, old_help in meta["renamed"].items():
      old_kwargs = {k: v for k, v in kwargs.items() if k not in ("help", "required", "default")}
      container(meta).add_argument(old, dest=old.lstrip("-").replace("-", "_"), help=old_help,
                                   **old_kwargs)


def options_from(options_class, namespace: argparse.Namespace):
  """The `options_class` instance of a parsed namespace: repeated values as tuples, an old
  spelling's value under its new name (with its notice), then `validate()` if the class has
  one (its error — a CliError naming the flag — is the command's one-line error)."""
  values = vars(namespace)
  kwargs = {}
  for field, annotation in _fields(options_class):
    meta = _meta(field)
    value = values.get(field.name, _default(field))
    for old in meta["renamed"]:
      old_value = values.get(old.lstrip("-").replace("-", "_"))
      if old_value is None:
        continue
      if value is not None and value != _default(field):
        raise CliError(f"give --{field.name} or its old spelling {old}, not both")
      note = f" ({meta['renamed_note']})" if meta["renamed_note"] else ""
      print(f"note: {old} is the old spelling of --{field.name}{note}", file=sys.stderr,
            flush=True)
      value = old_value
    if _unwrap(annotation)[1] and meta["repeat"] is not False and isinstance(value, list):
      value = tuple(value)
    kwargs[field.name] = value
  options = options_class(**kwargs)
  validate = getattr(options, "validate", None)
  if validate is not None:
    validate()
  return options


def options_parser(options_class, *, prog: str | None = None, doc: str | None = None,
                   epilog: str | None = None) -> ArgumentParser:
  """The one ArgumentParser of `options_class` (its `--help`: `doc` above the flags, `epilog`
  below)."""
  parser = ArgumentParser(prog=prog, description=doc, epilog=epilog)
  add_options(parser, options_class)
  return parser


def parse_options(options_class, argv: Sequence[str] | None, *, prog: str | None = None,
                  doc: str | None = None, epilog: str | None = None):
  """`argv` (None: the command line) parsed into an `options_class` instance; a bad flag is the
  parser's one-line error (exit 2), a bad value `validate()`'s."""
  namespace = options_parser(options_class, prog=prog, doc=doc, epilog=epilog).parse_args(argv)
  return options_from(options_class, namespace)


def parse_known_options(options_class, argv: Sequence[str] | None, *, prog: str | None = None,
                        doc: str | None = None, epilog: str | None = None):
  """(options, the arguments the class does not declare) — for a CLI that passes the rest on
  (config overrides, Beam pipeline options)."""
  namespace, rest = options_parser(options_class, prog=prog, doc=doc,
                                   epilog=epilog).parse_known_args(argv)
  return options_from(options_class, namespace), rest


def parse_command(commands: dict[str, tuple[type, str | None]], argv: Sequence[str] | None, *,
                  prog: str | None = None, doc: str | None = None, known: bool = False):
  """A CLI of subcommands (`prog NAME …`): `commands` maps each name to (its options class, its
  help text). Returns (name, options) — with `known`, (name, options, the undeclared
  arguments)."""
  parser = ArgumentParser(prog=prog, description=doc)
  names = parser.add_subparsers(dest="command", required=True)
  for name, (options_class, help_text) in commands.items():
    add_options(names.add_parser(name, description=help_text), options_class)
  if known:
    namespace, rest = parser.parse_known_args(argv)
  else:
    namespace, rest = parser.parse_args(argv), []
  options = options_from(commands[namespace.command][0], namespace)
  return (namespace.command, options, rest) if known else (namespace.command, options)
