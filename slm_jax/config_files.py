"""The one config loader of the training CLIs: `--config=FILE|NAME`, `--config.KEY=VALUE`, and
the CLI's own flags as aliases of keys.

A CLI's settings are a tree of `slm_jax.sections` dataclasses: a root whose fields are values or
nested sections (`RunConfig` of `python -m slm_jax.main`, one section per part of a run;
`FinetuneSettings` of `python -m slm_jax.finetune`; the parser's `TrainConfig` with its `model`;
`EvaluationConfig` of `python -m slm_jax.evaluate`, `slm_jax.evaluation.config`).
`ConfigLoader(root, folder=…, aliases=…)` builds one from, lowest precedence first:

1. the dataclasses' defaults;
2. `--config=FILE|NAME`: a Python file whose `get_config()` returns an `ml_collections.ConfigDict`
   or a dict nested like the tree (`FILE:ARG` calls `get_config("ARG")`), or a packaged config of
   the CLI's `folder` (`NAME`, `NAME.py`, or a `…/NAME.py` path that does not exist here);
3. the CLI's flags (`aliases`: flag → key, e.g. `--lr` → `lr`, `--encoder` → `model.encoder`),
   then the `--config.KEY=VALUE` overrides (`--config.model.hidden=64`).

A file's values are taken as written (lists become tuples; a tuple key also takes a
comma-separated string or a single item). Command-line text is parsed by the key's type: `int`,
`float`, `bool` (`cli.boolean`'s spellings), `str`, tuples (`a,b`, or a literal `('a', 'b')`),
`None` for an `X | None` key; `Any` keys keep the text.

Every problem is reported at once in one `ConfigError` ("invalid config:" and a line per problem;
`cli.run` prints it as the one line `error: invalid config: …; …` of every CLI): unknown keys with
the closest known key, keys of another scale (`sections.option(scales=…)`), missing keys
(`complete=True`: the file gives every required key, as a run's config does; otherwise only keys
without a default), text that does not parse, then every section's own rules (`sections.Rules`:
types, then values). A problem names where its value came from: the flag or override that gave
it, or the config file.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import importlib.util
import pathlib
import textwrap
import typing
from typing import Any, Callable, Iterable, Mapping, Sequence

import ml_collections

from slm_jax import cli, sections

OVERRIDE_PREFIX = "--config."


class ConfigError(ValueError):
  """An invalid configuration; `problems` lists every one (the message: one a line)."""

  def __init__(self, problems: str | Iterable[str]):
    self.problems = [problems] if isinstance(problems, str) else list(problems)
    super().__init__("invalid config:\n  - " + "\n  - ".join(self.problems))


def did_you_mean(key: str, known: Iterable[str]) -> str:
  close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
  return f"; did you mean {close[0]}?" if close else ""


# ------------------------------------------------------------------------------ values


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """A nested mapping as {dotted key: value}."""
  out = {}
  for key, value in values.items():
    if isinstance(value, (Mapping, ml_collections.ConfigDict)):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def put(values: dict[str, Any], key: str, value: Any) -> None:
  """Sets dotted `key` in nested dict `values` (sections created as needed)."""
  *path, last = key.split(".")
  for part in path:
    if not isinstance(values.get(part), dict):
      values[part] = {}
    values = values[part]
  values[last] = value


def _tuple_item(inner: Any) -> Any:
  args = typing.get_args(inner)
  return args[0] if args and args[0] is not Ellipsis else Any


def parse_text(hint: Any, text: str) -> Any:
  """Command-line `text` as a value of annotation `hint` (module docstring); ValueError says
  what was expected ("an int", …)."""
  inner, optional = sections.optional_type(hint)
  if optional and text in ("None", "none"):
    return None
  if typing.get_origin(inner) is tuple:
    item = _tuple_item(inner)
    stripped = text.strip()
    if stripped[:1] in ("(", "["):
      try:
        value = ast.literal_eval(stripped)
      except (ValueError, SyntaxError):
        raise ValueError("a tuple literal") from None
      if not isinstance(value, (tuple, list)):
        raise ValueError("a tuple literal")
      return tuple(value)
    try:
      return tuple(parse_text(item, part.strip()) for part in text.split(",") if part.strip())
    except ValueError:
      raise ValueError(f"a comma-separated list of {getattr(item, '__name__', item)}") from None
  if inner is bool:
    try:
      return cli.boolean(text)
    except argparse.ArgumentTypeError:
      raise ValueError("true or false") from None
  for kind, what in ((int, "an int"), (float, "a float")):
    if inner is kind:
      try:
        return kind(text)
      except ValueError:
        raise ValueError(what) from None
  return text


def file_value(hint: Any, value: Any) -> Any:
  """A config file's value for a key of annotation `hint`: lists become tuples; a tuple key also
  takes a comma-separated string or a single item. ValueError: a string that does not parse."""
  inner, _ = sections.optional_type(hint)
  if typing.get_origin(inner) is tuple and value is not None:
    if isinstance(value, str):
      return parse_text(inner, value)
    if not isinstance(value, (tuple, list)):
      return (value,)
  return tuple(value) if isinstance(value, list) else value


# ------------------------------------------------------------------------------ files


def config_names(folder: pathlib.Path | None) -> list[str]:
  """The packaged config names of `folder`, sorted."""
  if folder is None:
    return []
  return sorted(p.stem for p in pathlib.Path(folder).glob("*.py") if p.stem != "__init__")


def find_config(arg: str, folder: pathlib.Path | None = None) -> tuple[pathlib.Path, str | None]:
  """(file, get_config argument or None) of `--config=arg`: an existing file as given (an
  optional `:ARG` suffix is the argument), else the packaged config of `folder` named `arg`
  (`NAME`, `NAME.py`, or a path ending in `NAME.py`). ConfigError when there is neither."""
  path, sep, suffix = str(arg).partition(":")
  if pathlib.Path(path).is_file():
    return pathlib.Path(path), suffix if sep else None
  stem = pathlib.Path(path).name.removesuffix(".py")
  if folder is not None and stem != "__init__":
    packaged = pathlib.Path(folder) / f"{stem}.py"
    if packaged.is_file() and (path == stem or path.endswith(f"{stem}.py")):
      return packaged, suffix if sep else None
  names = config_names(folder)
  shown = ", ".join(names) if len(names) <= 8 else (
      f"{', '.join(names[:3])}, … ({len(names)} in {folder})")
  packaged_hint = f", or a packaged name: {shown}" if names else ""
  raise ConfigError(f"config file {path} not found (give a Python file whose get_config() "
                    f"returns the settings{packaged_hint})")


def read_config(path: pathlib.Path, arg: str | None = None) -> dict[str, Any]:
  """The nested dict `get_config()` (or `get_config(arg)`) of config file `path` returns."""
  spec = importlib.util.spec_from_file_location(f"slm_jax_config_{path.stem}", path)
  if spec is None or spec.loader is None:
    raise ConfigError(f"{path}: not a Python config file (a .py file with get_config())")
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
      raise ConfigError(f"{path}: defines no get_config()")
    config = module.get_config() if arg is None else module.get_config(arg)
  except ConfigError:
    raise
  except Exception as error:  # pylint: disable=broad-except  # the user's code: name the file
    raise ConfigError(f"{path}: cannot run the config file ({error!r})") from error
  if isinstance(config, ml_collections.ConfigDict):
    config = config.to_dict()
  if not isinstance(config, Mapping):
    raise ConfigError(f"{path}: get_config() returned {type(config).__name__}, expected a "
                      "ConfigDict or a dict")
  return dict(config)


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """(the `--config.KEY=VALUE` arguments, the others) of a command line."""
  overrides = [a for a in argv if a.startswith(OVERRIDE_PREFIX)]
  return overrides, [a for a in argv if not a.startswith(OVERRIDE_PREFIX)]


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
  out = dict(a)
  for key, value in b.items():
    both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
    out[key] = _merge(out[key], value) if both else value
  return out


# ------------------------------------------------------------------------------ the loader


@dataclasses.dataclass(frozen=True)
class ConfigLoader:
  """How one CLI reads its settings (module docstring).

  `root`: the tree's root section class. `folder`: its packaged configs (`--config=NAME`).
  `aliases`: flag name (underscored) → dotted key, for every flag of the CLI that sets a key.
  `complete`: a config must give every required key itself (`python -m slm_jax.main`).
  `scales`: the values of the root's `scale` key that select `option(scales=…)` keys.
  `derive`: values that are not config keys, from the merged nested values (`extra` layout:
  {section: {field: value}}, e.g. the model section's attention from the configuration's).
  """

  root: type
  folder: pathlib.Path | None = None
  aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
  complete: bool = False
  scales: tuple[str, ...] = ()
  derive: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None

  def keys(self, scale: str | None = None) -> dict[str, tuple[type, dataclasses.Field]]:
    """Dotted key → (owning section class, field) of every key (at `scale`, when given)."""
    return sections.schema(self.root, scale)

  def names(self) -> list[str]:
    return config_names(self.folder)

  def default(self, key: str) -> Any:
    """The default value of `key` (for help texts)."""
    field = self.keys()[key][1]
    return field.default if field.default_factory is dataclasses.MISSING else (
        field.default_factory())

  def flag_values(self, args: Any) -> dict[str, Any]:
    """The alias flags given on the command line (`args`: a CLI's options or an argparse
    namespace; None = not given)."""
    return {name: getattr(args, name) for name in self.aliases
            if getattr(args, name, None) is not None}

  def describe(self) -> str:
    """The help paragraph of `--config` and `--config.KEY=VALUE`."""
    packaged = f" Packaged: {', '.join(self.names())}." if self.names() else ""
    return textwrap.fill(
        "--config=FILE|NAME: a Python file whose get_config() returns these settings (a "
        f"ConfigDict or dict), or a packaged config.{packaged} --config.KEY=VALUE sets one key; "
        "flags and --config.KEY override the file. Keys: " + ", ".join(self.keys()) + ".",
        width=100, break_on_hyphens=False, break_long_words=False)

  def add_config_argument(self, parser: argparse.ArgumentParser, default: str | None = None
                          ) -> None:
    """`--config` on an argparse CLI, and the paragraph of `describe()` after its help."""
    parser.add_argument("--config", default=default, help="FILE|NAME (see below)" + (
        f"; default {default}" if default else ""))
    parser.epilog = "\n\n".join(p for p in (parser.epilog, self.describe()) if p)

  # ---------------------------------------------------------------- loading

  def load(self, config: str | None = None, overrides: Sequence[str] = (),
           flags: Mapping[str, Any] | None = None, *,
           extra: Mapping[str, Any] | None = None) -> Any:
    """The settings of `--config=config`, the given alias `flags` ({flag name: value, text is
    parsed}) and the `--config.KEY=VALUE` `overrides` (the `--config.` prefix is optional)."""
    data: dict[str, Any] = {}
    origins: dict[str, str] = {}  # key -> the file that set it (keys set on the command line: none)
    problems: list[str] = []
    unread = None
    if config:
      try:
        path, arg = find_config(config, self.folder)
        for key, value in flatten(read_config(path, arg)).items():
          put(data, key, value)
          origins[key] = str(path)
      except ConfigError as error:
        unread = error.problems
    for name, value in (flags or {}).items():
      self._set(data, origins, problems, self.aliases.get(name, name), value, f"--{name}={value}")
    for override in overrides:
      text = override.strip().removeprefix("--").removeprefix("config.")
      key, sep, value = text.partition("=")
      if not sep:
        problems.append(f"{override}: expected --config.KEY=VALUE")
        continue
      self._set(data, origins, problems, key.replace("-", "_"), value, f"--config.{text}")
    if unread:  # no settings to check beyond the command line's
      raise ConfigError(unread + problems)
    return self._validate(data, origins, problems, extra, source=None)

  def validate(self, data: Mapping[str, Any], *, source: str | None = None,
               extra: Mapping[str, Any] | None = None) -> Any:
    """The settings of nested mapping `data` (e.g. a saved JSON record); `source` names where it
    came from in the problems."""
    data = data.to_dict() if isinstance(data, ml_collections.ConfigDict) else dict(data)
    origins = {key: source for key in flatten(data)} if source else {}
    return self._validate(data, origins, [], extra, source=source)

  def _set(self, data, origins, problems, key: str, value: Any, where: str) -> None:
    known = self.keys()
    if key not in known:
      problems.append(f"unknown key {key} in {where}{did_you_mean(key, known)}")
      return
    owner, field = known[key]
    if isinstance(value, str):
      try:
        value = parse_text(sections.field_types(owner)[field.name], value)
      except ValueError as what:
        problems.append(f"{where}: {key}={value!r} is not {what}")
        return
    put(data, key, value)
    origins.pop(key, None)

  def _validate(self, data, origins, problems, extra, *, source) -> Any:
    flat = flatten(data)
    scale = flat.get("scale") if self.scales else None
    problems = problems + self._key_problems(flat, scale if scale in self.scales else None,
                                             origins, source)
    extra = _merge(self.derive(data) if self.derive else {}, extra or {})
    built = self._build(self.root, data, extra, problems, origins, "")
    if problems:
      raise ConfigError(problems)
    return built

  def _flag_of(self, key: str) -> str | None:
    return next((name for name, target in self.aliases.items() if target == key), None)

  def _key_problems(self, flat, scale, origins, source) -> list[str]:
    here, anywhere = self.keys(scale), self.keys()
    problems = []
    for key in flat:
      if key in here:
        continue
      where = f" in {origins[key]}" if key in origins else ""
      if key in anywhere:
        scales = anywhere[key][1].metadata.get("scales")
        problems.append(f"key {key}{where} exists only at scale {', '.join(scales)}, not {scale}")
      else:
        problems.append(f"unknown key {key}{where}{did_you_mean(key, anywhere)}")
    for key, (_, field) in here.items():
      required = self.complete and field.metadata.get("required", True)
      if key in flat or (sections.has_default(field) and not required):
        continue
      flag = self._flag_of(key)
      hint = (f" (--{flag}=… or `{key}` in the --config file)" if flag
              else f" in {source}" if source else "")
      problems.append(f"missing key {key}{hint}")
    return problems

  def _annotated(self, problem: str, origins: Mapping[str, str]) -> str:
    """`problem` with the file that set the first key it names, if a file did."""
    named = sections.keys_named(problem, origins)
    return f"{problem} (in {origins[named[0]]})" if named else problem

  def _build(self, cls: type, values: Mapping[str, Any], extra: Mapping[str, Any],
             problems: list[str], origins: Mapping[str, str], prefix: str) -> Any:
    """An instance of section `cls` from `values`, or None after adding its problems (and
    those of its nested sections) to `problems`; a section missing a key is not built."""
    hints = sections.field_types(cls)
    kwargs: dict[str, Any] = {}
    whole = True
    for field in dataclasses.fields(cls):
      if not field.metadata.get("config", True):
        if field.name in extra:
          kwargs[field.name] = extra[field.name]
        continue
      nested = sections.section_type(hints[field.name])
      if nested is not None:
        given = values.get(field.name, {})
        built = self._build(nested, given if isinstance(given, Mapping) else {},
                            extra.get(field.name, {}), problems, origins,
                            f"{prefix}{field.name}.")
        whole = whole and built is not None
        if built is not None:
          kwargs[field.name] = built
      elif field.name in values:
        try:
          kwargs[field.name] = file_value(hints[field.name], values[field.name])
        except ValueError as what:
          key = prefix + field.name
          problems.append(f"{origins.get(key, 'config')}: {key}={values[field.name]!r} is not "
                          f"{what}")
          whole = False
      elif not sections.has_default(field):
        whole = False  # reported as a missing key
    if not whole:
      return None
    try:
      return cls(**kwargs)
    except (sections.SectionError, ConfigError) as error:
      problems.extend(self._annotated(p, origins) for p in error.problems)
      return None
