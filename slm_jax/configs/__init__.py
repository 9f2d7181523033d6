"""The run configs: the 60 `<name>_<scale>.py` for the 14 configurations and the Pushdown
reference × tiny/100m/500m/1b, each a thin call into `slm_jax.config_builder.build`, and the
`hf_<model>.py` presets that start from a Hugging Face checkpoint
(`slm_jax.train.params.hf_preset`).

They ship inside the package, so `python -m slm_jax.main --config=tgtree_1b` works from an
installed wheel; a checkout also has them at `configs/` (a link to this folder), so
`--config=configs/tgtree_1b.py` works there. `config_path(arg)` turns either form into a file.
"""

from __future__ import annotations

import os
import pathlib

FOLDER = pathlib.Path(__file__).resolve().parent


def names() -> list[str]:
  """Every packaged config name (`tgtree_1b`, …), sorted."""
  return sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")


def config_path(arg: str) -> str:
  """The config file for `--config=arg`: an existing path as given (with an optional `:arg`
  suffix for config_flags), else a packaged config named `arg` (`tgtree_1b` or
  `tgtree_1b.py`); other values are returned unchanged (config_flags reports them)."""
  path, sep, suffix = arg.partition(":")
  if os.path.exists(path):
    return arg
  stem = pathlib.Path(path).name.removesuffix(".py")
  packaged = FOLDER / f"{stem}.py"
  if packaged.is_file() and (path == stem or path.endswith(f"{stem}.py")):
    return str(packaged) + sep + suffix
  return arg
