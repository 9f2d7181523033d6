"""Typed options: a CLI's flags declared as a frozen dataclass (re-exported by `slm_jax.cli`).

Flags → typed options → one library call: a CLI declares its flags as an `@options` class (a
frozen, keyword-only dataclass) of `option(...)` fields (type from the annotation, help, choices,
aliases, `renamed=` old spellings with their notice, `Exclusive` groups) and `main(argv)` is
`parse_options(XOptions, argv, prog=…, doc=…)` → one library function called with the typed
options → print. The dataclass's `validate()` says a bad value in one line naming the flag;
`parse_known_options` passes undeclared arguments on, `parse_command` reads subcommands,
`shard_option` is the `--shard=i/n` field. No function below `main` receives an argparse
Namespace. The flags are spelled by `cli_flags.ArgumentParser`.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import typing
from typing import Callable, Sequence

from slm_jax import sections
from slm_jax.cli_errors import CliError
from slm_jax.cli_flags import ArgumentParser, parse_shard


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


def shard_option(what: str = "input files"):
  """The `--shard=i/n` field of an options class (`tuple[int, int]`, default (0, 1))."""
  return option((0, 1), type=parse_shard,
                help=f"i/n: this process's share of the {what} (default 0/1: all)")
