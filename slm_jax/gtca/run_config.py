"""`python -m slm_jax.gtca.train --config=FILE|NAME`: a GTCA sweep as code, read by the one config
loader (`slm_jax.config_files.ConfigLoader`).

`GtcaTrainConfig` is the sweep's section: every config key of `plans.Settings` (`backbone`, `out`,
`stage_steps`, `batch_size`, `lr`, `alpha`, `lora_rank`, `k`, …: one source, the run settings'
own fields and rules) plus the sweep's own keys `methods`, `seeds` and `jit_cache`. `LOADER`
reads it from, lowest precedence first: the defaults, `--config=FILE|NAME` (a file whose
`get_config()` returns a ConfigDict or dict, or a packaged config of `slm_jax/gtca/configs/`:
`toy`, the 5-seed toy sweep of docs/GTCA_TOY.md; `mmlu_qwen`, the README's real-set example),
the train CLI's flags (aliases of the keys of the same name: `--lr=3e-3`) and
`--config.KEY=VALUE`. Tuple keys take a sequence or a comma-separated string. Every problem —
an unknown key (with the closest known one), a value of the wrong type, a missing `backbone`
or `out`, an unknown method, a rule of `Settings` — is reported at once before anything runs
(`config_files.ConfigError`). `runs(config, n_options)` gives every (method × seed) run's
`Settings` (seed-major), each validated.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable

from slm_jax import cli
from slm_jax.config_files import ConfigLoader
from slm_jax.gtca.plans import Settings, variant

CONFIG_DIR = pathlib.Path(__file__).resolve().parent / "configs"
SWEEP_KEYS = ("methods", "seeds", "jit_cache")  # the sweep's keys (not a run's settings)


@dataclasses.dataclass(frozen=True)
class GtcaTrainConfig(Settings):
  """A GTCA sweep: the run settings every run shares, and the (method × seed) grid."""
  methods: tuple[str, ...] = ("gtca",)  # methods and ablations (`plans.variant`)
  seeds: tuple[int, ...] = (0,)
  jit_cache: str = ""  # JAX persistent compilation cache folder ("": none)

  def check(self, need: Callable[[bool, str], None]) -> None:
    super().check(need)
    need(bool(self.backbone), "backbone is required (--backbone=… or `backbone` in the --config "
         "file)")
    need(bool(self.out), "out is required (--out=… or `out` in the --config file)")
    need(bool(self.methods) and bool(self.seeds), "methods and seeds must not be empty")
    for name in self.methods:
      try:
        variant(name)
      except cli.CliError as error:
        need(False, f"methods: {error}")


LOADER = ConfigLoader(GtcaTrainConfig, folder=CONFIG_DIR)


def names() -> list[str]:
  """The packaged config names."""
  return LOADER.names()


def run_settings(config: GtcaTrainConfig, n_options: int) -> list[tuple[str, Settings]]:
  """(method or ablation name, Settings) of every run, seed-major (a stopped sweep has whole
  seeds); one run writes to `out` itself, several to OUT/NAME/seedS."""
  single = len(config.methods) == 1 and len(config.seeds) == 1
  shared = {f.name: getattr(config, f.name) for f in dataclasses.fields(Settings)}
  runs = []
  for seed in config.seeds:
    for name in config.methods:
      method, ablation = variant(name)
      out = config.out if single else str(pathlib.Path(config.out) / name / f"seed{seed}")
      try:
        runs.append((name, Settings(**dict(shared, out=out, method=method, ablation=ablation,
                                           seed=seed, n_options=n_options))))
      except ValueError as error:
        raise cli.CliError(f"{error} (run {name} seed {seed})") from None
  return runs
