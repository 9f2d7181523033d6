"""Typed config sections: frozen dataclasses whose `__post_init__` holds every rule of a section.

A run's config (`slm_jax.train.run_config`) has sections (`configuration`, `model`, `data`,
`optimizer`, `train`, `eval`, `checkpoint`, `mesh`), each mapped to ONE frozen dataclass that lives
next to the code it configures (`ModelConfig` in `model/config.py`, `DataSection` in
`data/config.py`, `MeshSection` in `train/sharding.py`, …); the other training CLIs' settings are
sections too (`FinetuneSettings`, the parser's `TrainConfig`). A section's `__post_init__` is the
only home of its rules, and it reports every problem at once (`SectionError.problems`), so the
config loader (`slm_jax.config_files`) can list all problems of all sections in one message.

This module is the machinery they share:
- `Rules(section, instance)` collects problems: the field types first (from the annotations:
  `int`, `float`, `bool`, `str`, `tuple[str, ...]`, and `X | None` for optional values), then
  `need(ok, message)` for each rule; `done()` raises `SectionError` if any failed.
- `option(default, scales=..., config=..., required=...)`: a field that exists only at some
  scales (a config of another scale must not have the key), that is not a config key at all
  (`config=False`, e.g. the model's attention comes from the configuration section), or that a
  config may leave out (`required=False`: keys added later, so older saved configs still load
  with the default). Every other key must be present.
- `config_fields(cls, scale)` lists a section's config keys at a scale.
- A section may nest sections (a field whose type is a section dataclass: the parser's
  `TrainConfig.model`, every section of a run's `RunConfig`): `schema(cls, scale)` gives every
  dotted key of such a tree, `to_dict(instance)` its values as JSON-ready nested dicts. The root
  of a tree names its problems without a prefix (`Rules("", self)`: `lr must be positive`).
  `slm_jax.config_files` loads such trees from files and command lines.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
import types
import typing
from typing import Any, Iterable

import numpy as np


class SectionError(ValueError):
  """A config section with invalid values; `problems` lists every one (`section.key ...`)."""

  def __init__(self, problems: Iterable[str]):
    self.problems = list(problems)
    super().__init__("; ".join(self.problems))


def option(default: Any = dataclasses.MISSING, *, scales: tuple[str, ...] | None = None,
           config: bool = True, required: bool = True, **kwargs) -> Any:
  """A dataclass field with config metadata: `scales` (the scales at which the key exists;
  None = all), `config` (False: not a config key, set by code), `required` (False: a config
  without the key takes the default)."""
  metadata = {"scales": scales, "config": config, "required": required}
  return dataclasses.field(default=default, metadata=metadata, **kwargs)


def _hints(cls: type) -> dict[str, Any]:
  return typing.get_type_hints(cls)


def config_fields(cls: type, scale: str | None = None) -> list[dataclasses.Field]:
  """The fields of section `cls` that are config keys (at `scale`, when given)."""
  out = []
  for field in dataclasses.fields(cls):
    if not field.metadata.get("config", True):
      continue
    scales = field.metadata.get("scales")
    if scale is not None and scales is not None and scale not in scales:
      continue
    out.append(field)
  return out


def optional_type(hint: Any) -> tuple[Any, bool]:
  """(inner type, optional?) of `X | None` / `Optional[X]`."""
  origin = typing.get_origin(hint)
  if origin in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and len(typing.get_args(hint)) == 2:
      return args[0], True
  return hint, False


def type_problem(hint: Any, value: Any) -> str | None:
  """Why `value` does not fit annotation `hint` (None when it does)."""
  inner, optional = optional_type(hint)
  if value is None:
    return None if optional else "must be set (None is not allowed)"
  if inner is Any:
    return None
  origin = typing.get_origin(inner)
  if origin is tuple:
    args = typing.get_args(inner)
    item = args[0] if args else Any
    if not isinstance(value, (tuple, list)):
      return f"should be of type tuple, got {type(value).__name__}"
    if item is not Any and not all(isinstance(v, item) and not isinstance(v, bool) for v in value):
      return f"should be of type tuple of {item.__name__}"
    return None
  got = type(value).__name__
  if inner is bool:
    return None if isinstance(value, bool) else f"should be of type bool, got {got}"
  if inner is float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return None if ok else f"should be of type float, got {got}"
  if inner is int:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return None if ok else f"should be of type int, got {got}"
  if isinstance(inner, type) and not isinstance(value, inner):
    return f"should be of type {inner.__name__}, got {got}"
  return None


def inner_type(cls: type, name: str) -> Any:
  """The type a field holds when set (`int` for `int | None`)."""
  inner, _ = optional_type(_hints(cls)[name])
  return typing.get_origin(inner) or inner


def key_type(cls: type, name: str) -> str:
  """A readable form of a field's annotation (for messages)."""
  hint = _hints(cls)[name]
  inner, optional = optional_type(hint)
  text = getattr(inner, "__name__", None) or str(inner).replace("typing.", "")
  return f"{text} or None" if optional else text


class Rules:
  """Problem collector of one section instance (see the module docstring)."""

  def __init__(self, section: str, instance: Any, *, types_only: Iterable[str] = ()):
    self.section = section
    self.problems: list[str] = []
    hints = _hints(type(instance))
    skip = set(types_only)
    for field in dataclasses.fields(instance):
      if field.name in skip:
        continue
      problem = type_problem(hints[field.name], getattr(instance, field.name))
      if problem:
        self.problems.append(f"{self._key(field.name)} = {getattr(instance, field.name)!r} "
                             f"{problem}")

  def _key(self, name: str) -> str:
    return f"{self.section}.{name}" if self.section else name

  @property
  def typed(self) -> bool:
    """True when every field has its declared type (value rules may compare them safely)."""
    return not self.problems

  def need(self, ok: bool, message: str) -> None:
    if not ok:
      named = not self.section or message.startswith((self.section + ".", self.section + ":"))
      self.problems.append(message if named else f"{self.section}.{message}")

  def done(self) -> None:
    if self.problems:
      raise SectionError(self.problems)


def section_type(hint: Any) -> type | None:
  """The section class a field of type `hint` holds (None for a plain value)."""
  return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def field_types(cls: type) -> dict[str, Any]:
  """Field name → annotation (resolved) of section `cls`."""
  return _hints(cls)


def schema(cls: type, scale: str | None = None, prefix: str = ""
           ) -> dict[str, tuple[type, dataclasses.Field]]:
  """Dotted key → (the section class that owns it, its field), for every config key of the tree
  rooted at `cls` (at `scale`, when given); nested sections are walked, not keys themselves."""
  out: dict[str, tuple[type, dataclasses.Field]] = {}
  hints = _hints(cls)
  for field in config_fields(cls, scale):
    nested = section_type(hints[field.name])
    if nested is not None:
      out.update(schema(nested, scale, f"{prefix}{field.name}."))
    else:
      out[f"{prefix}{field.name}"] = (cls, field)
  return out


def has_default(field: dataclasses.Field) -> bool:
  return (field.default is not dataclasses.MISSING
          or field.default_factory is not dataclasses.MISSING)


def plain(value: Any) -> Any:
  """A value as a config writes it: dtypes by name (`float32`), everything else as it is."""
  if isinstance(value, np.dtype):
    return value.name
  return value


def to_dict(instance: Any, scale: str | None = None) -> dict[str, Any]:
  """The config keys of a section tree and their values, nested like the tree (tuples kept:
  `json.dumps` writes them as lists, which the config loader reads back as tuples)."""
  hints = _hints(type(instance))
  out = {}
  for field in config_fields(type(instance), scale):
    value = getattr(instance, field.name)
    out[field.name] = (to_dict(value, scale) if section_type(hints[field.name]) is not None
                       else plain(value))
  return out


_KEY_AT_START = re.compile(r"[A-Za-z_][\w.]*")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def keys_named(problem: str, known) -> list[str]:
  """The config keys a problem message names: its leading key (`lr must be …`,
  `model.d_model=…`) and every dotted key in it, in order, among `known`."""
  lead = _KEY_AT_START.match(problem)
  found = ([lead.group(0).rstrip(".")] if lead else []) + _DOTTED.findall(problem)
  return [key for key in dict.fromkeys(found) if key in known]
