"""THE set-up of a training run, shared by every trainer (levanter's `initial_state`).

    state = initial_state(graphdef, params, optimizer, total_steps, batch_rows=B, mesh=mesh)
    trainer = Trainer(state, directory, persist=Persist(...), log=print, label="seed 42 ")
    start = trainer.resume()
    result = trainer.run(batch_at, cadence=Cadence(...), progress=..., writer=...)

- `initial_state` builds what a run holds before its first step: the mesh (given, or every
  device for data parallelism), the batch layout over it (`sharding.check_batch`: micro-batches
  that divide over the devices, padding rows counted), the optimizer (`make_optimizer` of an
  `optimizer` section, or a ready `optax` transformation) and its schedule, the parameter and
  optimizer-state shardings of the partition table, the optimizer state (initialized on the
  mesh) and the compiled step (`steps.make_train_step` on the model's own `loss_sums`, through
  the process's step cache `step_cache.compiled_step` when a key is given).
- `TrainState.step_fn` is the one wrapper of that step the loop runs:
  `(state, batch, step) -> (state, step outputs)`; hyperparameters decided while the run goes
  (the chart parser's plateau learning rate, halved when dev F1 stalls) are set in the
  optimizer state (`optax.inject_hyperparams`) before the step and reported in its outputs.
- `Trainer` owns the checkpointer and the loop (`train.loop.Loop`: resume, the per-step loss
  check, progress, checkpoints, hooks) over that state; `resume(restore=…)` takes a caller's own
  restore rule (GTCA's stages read an older checkpoint layout too) instead of setting the loop's
  start by hand.

Pre-training (`train.trainer`), fine-tuning (`finetune.trainer`), GTCA stages
(`gtca.stages`), the structural probe (`gtca.structural_probe`) and the chart parser
(`parser.train`: its loss `TrainedParser.loss_sums`, its RNG streams as `rest`, its seeded
dropout key, its learning rate through `hyperparams`) run through it.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Hashable, Sequence

import jax
import jax.numpy as jnp
import optax

from slm_jax.train import sharding
from slm_jax.train.checkpointing import Checkpointer
from slm_jax.train.loop import Cadence, Hook, Loop, LoopResult, Persist, Window, sums_loss
from slm_jax.train.optimizer import make_optimizer, make_schedule
from slm_jax.train.step_cache import compiled_step
from slm_jax.train.steps import default_dropout_key, make_train_step


@dataclasses.dataclass
class TrainState:
  """What `initial_state` built (module docstring)."""

  mesh: Any
  layout: sharding.BatchLayout
  tx: optax.GradientTransformation
  schedule: Callable[[int], float] | None
  state: dict  # {"params", "opt_state"}
  param_sh: Any
  opt_sh: Any
  train_step: Callable  # (params, opt_state, batch) -> (params, opt_state, sums)

  def step_fn(self, place: Callable[[Any], Any] | None = None,
              extra: Callable[[Any, dict], dict] | None = None,
              hyperparams: Callable[[int], dict[str, float]] | None = None
              ) -> Callable[[dict, Any, int], tuple[dict, dict]]:
    """The loop's step: `train_step` on the state and the batch (`place(batch)`: the batch put
    on the devices first); `extra(batch, sums)` adds host values to the step's outputs (a
    fine-tuning batch's token count, GTCA's mean loss); `hyperparams(step)` → {name: value}
    set in the optimizer state (an `optax.inject_hyperparams` transformation's) before the
    step, and added to its outputs."""
    train_step = self.train_step

    def step(state, batch, step):
      arrays = place(batch) if place is not None else batch
      opt_state, values = state["opt_state"], {}
      if hyperparams is not None:
        values = hyperparams(step)
        opt_state = optax.tree_utils.tree_set(opt_state, **{
            name: jnp.asarray(value, jnp.float32) for name, value in values.items()})
      params, opt_state, sums = train_step(state["params"], opt_state, arrays)
      out = {"params": params, "opt_state": opt_state}
      sums = {**sums, **values}
      return out, ({**sums, **extra(batch, sums)} if extra is not None else sums)

    return step


def initial_state(graphdef: Any, params: Any, optimizer: Any, total_steps: int, *,
                  batch_rows: int, micro_batches: int = 1, mesh: Any = None,
                  trainable: str = "all", flag: str = "train.global_batch",
                  cache_key: Hashable | None = None, place_params: bool = False,
                  shard: bool = True, rest: Any = None,
                  dropout_key: Callable[[jax.Array, jax.Array], jax.Array] = default_dropout_key,
                  scan_one: bool = True) -> TrainState:
  """A run's state before its first step (module docstring). `optimizer`: an `optimizer`
  section (`make_optimizer`, its schedule) or an optax transformation (no schedule);
  `place_params`: put the parameters on their shardings first (a loaded run's host arrays);
  `shard=False`: one device, no sharding annotations on the step (GTCA's stages, the parser);
  `rest`, `dropout_key`, `scan_one`: the model's non-parameter state, its dropout randomness and
  whether one micro-batch is scanned (`steps.make_train_step`)."""
  mesh = mesh if mesh is not None else sharding.make_mesh(-1, 1)
  layout = sharding.check_batch(batch_rows, micro_batches, mesh, flag)
  if isinstance(optimizer, optax.GradientTransformation):
    tx, schedule = optimizer, None
  else:
    tx = make_optimizer(optimizer, total_steps, accumulate=False)
    schedule = make_schedule(optimizer, total_steps)
  param_sh = sharding.tree_shardings(params, mesh)
  opt_sh = sharding.tree_shardings(jax.eval_shape(tx.init, params), mesh)
  if place_params:
    params = jax.device_put(params, param_sh)
  if shard:
    opt_state = jax.jit(tx.init, out_shardings=opt_sh)(params)
    step_shardings = (param_sh, opt_sh, sharding.batch_sharding(mesh, leading=1),
                      sharding.replicated(mesh))
  else:
    opt_state, step_shardings = tx.init(params), None

  def build():
    return make_train_step(graphdef, tx, layout.accumulation, step_shardings, trainable,
                           rest=rest, dropout_key=dropout_key, scan_one=scan_one)

  train_step = (compiled_step((cache_key, layout.accumulation, mesh, shard), build)
                if cache_key is not None else build())
  return TrainState(mesh, layout, tx, schedule, {"params": params, "opt_state": opt_state},
                    param_sh, opt_sh, train_step)


class Trainer:
  """The checkpointer and the loop of one run over a state (module docstring)."""

  def __init__(self, state: Any, total_steps: int, directory: str | pathlib.Path | None = None,
               *, checkpointer: Checkpointer | None = None, persist: Persist = Persist(),
               log: Callable[[str], None] = print, label: str = "", max_to_keep: int = 2,
               async_save: bool = True):
    if checkpointer is None:
      checkpointer = Checkpointer(pathlib.Path(directory), max_to_keep=max_to_keep,
                                  async_save=async_save)
    self.checkpointer = checkpointer
    self.loop = Loop(checkpointer, state, total_steps, persist=persist, log=log, label=label)

  @property
  def state(self) -> Any:
    return self.loop.state

  @property
  def start(self) -> int:
    return self.loop.start

  def resume(self, restore: Callable[[Any], tuple[Any, int] | None] | None = None) -> int:
    """The step to start from: the newest readable checkpoint (`Loop.resume`), or the caller's
    own `restore(state) -> (state, step) | None`."""
    if restore is None:
      return self.loop.resume()
    restored = restore(self.loop.state)
    if restored is not None:
      self.loop.state, self.loop.start = restored
    return self.loop.start

  def run(self, step_fn: Callable[[Any, Any, int], tuple[Any, dict]],
          batch_at: Callable[[int], Any], *, cadence: Cadence = Cadence(),
          progress: Callable[[Window, int], tuple[dict, list[str]]] | None = None,
          writer: Any = None, hooks: Sequence[Hook] = (),
          loss_of: Callable[[dict], float] = sums_loss, hint: str = "") -> LoopResult:
    kwargs = {} if progress is None else {"progress": progress}
    return self.loop.run(step_fn, batch_at, cadence=cadence, writer=writer, hooks=hooks,
                         loss_of=loss_of, hint=hint, **kwargs)

  def close(self) -> None:
    self.checkpointer.close()


__all__ = ["TrainState", "Trainer", "initial_state"]
