"""The run configs: the 60 `<name>_<scale>.py` for the 14 configurations and the Pushdown
reference × tiny/100m/500m/1b, each a thin call into `slm_jax.train.run_config.build`, and the
`hf_<model>.py` presets that start from a Hugging Face checkpoint
(`slm_jax.train.params.hf_preset`).

They ship inside the package, so `python -m slm_jax.main --config=tgtree_1b` works from an
installed wheel; a checkout also has them at `configs/` (a link to this folder), so
`--config=configs/tgtree_1b.py` works there. `config_path(arg)` turns either form into a file (the
one rule of `slm_jax.config_files.find_config`, which `main` applies through its loader).
"""

from __future__ import annotations

import pathlib

from slm_jax import config_files

FOLDER = pathlib.Path(__file__).resolve().parent


def names() -> list[str]:
  """Every packaged config name (`tgtree_1b`, …), sorted."""
  return config_files.config_names(FOLDER)


def config_path(arg: str) -> str:
  """The config file for `--config=arg`: an existing path as given (with an optional `:arg`
  suffix, the argument of `get_config`), else a packaged config named `arg` (`tgtree_1b` or
  `tgtree_1b.py`); other values are returned unchanged (the loader reports them)."""
  try:
    path, suffix = config_files.find_config(arg, FOLDER)
  except config_files.ConfigError:
    return arg
  if path == pathlib.Path(arg.partition(":")[0]):
    return arg
  return str(path) + ("" if suffix is None else f":{suffix}")
