"""`python -m slm_jax.gtca.train --config=FILE`: a GTCA sweep as code, validated at start-up.

A config is a Python file whose `get_config()` returns an `ml_collections.ConfigDict` (or a
plain dict) with any of the keys of `defaults()`: the train CLI's flags under the same names
(`backbone`, `out`, `methods`, `seeds`, `stage_steps`, `batch_size`, `lr`, …) plus the run
settings that have no flag (`lora_rank`, `lora_alpha`, `lora_dropout`, `k`, `blimp_pairs`,
`checkpoint_every`). `--config=NAME` also finds the packaged configs of
`slm_jax/gtca/configs/` (`toy`: the 5-seed toy sweep of docs/GTCA_TOY.md; `mmlu_qwen`: the
README's real-set example). `methods`, `seeds` and `stage_steps` may be written as sequences or
as the flags' comma-separated strings.

Precedence: the defaults (`plans.Settings`'s, the CLI's) < the config file < the command line,
where a flag may be given as the train CLI spells it (`--lr=3e-3`) or as `--config.lr=3e-3`, the
override spelling of `python -m slm_jax.main`. An unknown key (in the file or an override) or a
value of the wrong type is refused before anything runs, naming the key and the file, with the
closest known key; `slm_jax.gtca.train` then builds every run's `Settings` (which validates the
combination) before the first one starts.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
from typing import Any, Mapping, Sequence

import ml_collections

from slm_jax.config_files import did_you_mean
from slm_jax.gtca.plans import Settings

CONFIG_DIR = pathlib.Path(__file__).resolve().parent / "configs"
# Settings fields a config does not set: one run's own (from methods × seeds) and the derived one.
_PER_RUN = ("out", "method", "ablation", "seed", "n_options")
_CLI_ONLY = {"out": "", "methods": ("gtca",), "seeds": (0,), "jit_cache": ""}
_SEQUENCES = {"methods": str, "seeds": int, "stage_steps": int}


class GtcaConfigError(ValueError):
  """A config file or override the train CLI refuses (names the key and where it came from)."""


def defaults() -> ml_collections.ConfigDict:
  """Every key a GTCA train config may set, with its default value (and so its type)."""
  values: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Settings)
                            if f.name not in _PER_RUN and f.default is not dataclasses.MISSING}
  values["backbone"] = ""
  values.update(_CLI_ONLY)
  return ml_collections.ConfigDict(dict(sorted(values.items())))


def config_file(arg: str) -> pathlib.Path:
  """The file of `--config=arg`: an existing path, else a packaged config named `arg`."""
  path = pathlib.Path(arg)
  if path.is_file():
    return path
  packaged = CONFIG_DIR / f"{path.name.removesuffix('.py')}.py"
  if packaged.is_file() and path.parent == pathlib.Path("."):
    return packaged
  known = ", ".join(names())
  raise GtcaConfigError(f"--config={arg}: no such file, and no packaged GTCA config of that "
                        f"name (packaged: {known})")


def names() -> list[str]:
  return sorted(p.stem for p in CONFIG_DIR.glob("*.py") if p.stem != "__init__")


def _read(path: pathlib.Path) -> Mapping[str, Any]:
  spec = importlib.util.spec_from_file_location(f"gtca_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
      raise GtcaConfigError(f"{path}: defines no get_config()")
    config = module.get_config()
  except GtcaConfigError:
    raise
  except Exception as error:  # the user's file: say which one failed to run
    raise GtcaConfigError(f"{path}: cannot run the config file ({error!r})") from error
  if isinstance(config, ml_collections.ConfigDict):
    config = config.to_dict()
  if not isinstance(config, Mapping):
    raise GtcaConfigError(f"{path}: get_config() returned {type(config).__name__}, expected a "
                          "ConfigDict or dict")
  return config


def _coerce(key: str, value: Any, where: str) -> Any:
  """A sequence key's value as a tuple of its element type (from a string or a sequence)."""
  if key not in _SEQUENCES:
    return value
  kind = _SEQUENCES[key]
  items = value.split(",") if isinstance(value, str) else value
  if isinstance(items, (int, float)) and not isinstance(items, bool):
    items = [items]
  try:
    out = tuple(kind(x.strip() if isinstance(x, str) else x) for x in items
                if not (isinstance(x, str) and not x.strip()))
  except (TypeError, ValueError):
    raise GtcaConfigError(f"{where}: {key}={value!r} is not a comma-separated list of "
                          f"{kind.__name__}") from None
  if not out:
    raise GtcaConfigError(f"{where}: {key} is empty")
  return out


def _parse_text(key: str, text: str, like: Any, where: str) -> Any:
  """A `--config.key=text` value as the type of the key's default."""
  if key in _SEQUENCES:
    return text
  if isinstance(like, bool):
    if text.lower() in ("true", "1", "yes"):
      return True
    if text.lower() in ("false", "0", "no"):
      return False
    raise GtcaConfigError(f"{where}: {key}={text!r} is not true or false")
  try:
    return type(like)(text)
  except ValueError:
    raise GtcaConfigError(f"{where}: {key}={text!r} is not a {type(like).__name__}") from None


def _assign(config: ml_collections.ConfigDict, key: str, value: Any, where: str,
            problems: list[str]) -> None:
  if key not in config:
    problems.append(f"{where}: unknown key {key!r}{did_you_mean(key, config.keys())}")
    return
  try:
    value = _coerce(key, value, where)
    setattr(config, key, value)
  except GtcaConfigError as error:
    problems.append(str(error))
  except (TypeError, ValueError) as error:
    problems.append(f"{where}: {key}={value!r}: {error}")


def resolve(path: str | None, flags: Mapping[str, Any],
            overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
  """defaults < the config file at `path` < `flags` (given flags only) < `--config.key=value`."""
  config = defaults()
  problems: list[str] = []
  if path:
    file = config_file(path)
    for key, value in _read(file).items():
      _assign(config, key, value, str(file), problems)
  for key, value in flags.items():
    _assign(config, key, value, f"--{key}", problems)
  for override in overrides:
    text = override.removeprefix("--config.")
    key, sep, value = text.partition("=")
    if not sep:
      problems.append(f"{override}: expected --config.KEY=VALUE")
      continue
    try:  # an unknown key goes to _assign unparsed, which names it
      parsed = _parse_text(key, value, config[key], override) if key in config else value
      _assign(config, key, parsed, override, problems)
    except GtcaConfigError as error:
      problems.append(str(error))
  for key in ("backbone", "out"):
    if not config[key]:
      problems.append(f"{key} is required (--{key}=… or `{key}` in the --config file)")
  if problems:
    raise GtcaConfigError("gtca.train config: " + "; ".join(problems))
  return config


def settings_kwargs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The `Settings` fields a resolved config sets (everything but the per-run ones)."""
  fields = {f.name for f in dataclasses.fields(Settings)} - set(_PER_RUN)
  return {key: config[key] for key in sorted(fields)}
