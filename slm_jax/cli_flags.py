"""Flag spelling: the project's `ArgumentParser` and the flag values every CLI reads the same way
(re-exported by `slm_jax.cli`).

Long options are spelled with underscores (`--batch_size`, `--max_items`), as absl
(`slm_jax.main`) and the config keys (`--config.train.global_batch`) spell them; the dashed
spelling (`--batch-size`) is accepted everywhere as an alias (in argument groups and mutually
exclusive groups too), so older command lines keep working.
`ArgumentParser.add_argument(..., aliases=("--old_name",))` keeps a renamed flag working too.
Every parser has `--debug`; a usage error is one `error: …` line, exit 2. Values: `boolean`
(`--flag=true|false`), `parse_shard` (`--shard=i/n`, the same in every stage).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from slm_jax.cli_errors import EXIT_USAGE, CliError


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


def boolean(text: str) -> bool:
  """A `--flag=true|false` value (argparse `type=`), the one spelling every CLI accepts."""
  value = str(text).strip().lower()
  if value not in ("true", "false", "1", "0", "yes", "no"):
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
  return value in ("true", "1", "yes")


def parse_shard(text: str) -> tuple[int, int]:
  """`"3/16"` → (3, 16): this process's share `i` of `n` (0 <= i < n)."""
  try:
    index, count = (int(part) for part in str(text).split("/"))
  except ValueError:
    raise CliError(f"--shard must look like i/n (e.g. 3/16), got {text!r}") from None
  if not 0 <= index < count:
    raise CliError(f"--shard {text}: need 0 <= i < n")
  return index, count
