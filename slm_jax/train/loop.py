"""THE training loop: resume, steps, the non-finite-loss stop, progress lines, metrics windows,
checkpoints, hooks and stops, for every trainer of the project (SLM pre-training, XSum / BoolQ
fine-tuning, the chart parser; GTCA stages fit the same contract).

    loop = Loop(checkpointer, state, total_steps, persist=Persist(...), log=print)
    start = loop.resume()          # the newest readable checkpoint, or 0
    result = loop.run(step_fn, batch_at, cadence=Cadence(log_every=10, checkpoint_every=500),
                      progress=..., writer=MetricsWriter(...), hooks=[Hook(when, call)])

- **State** is any pytree the step function carries (`{"params", "opt_state"}`, the parser's
  nnx states, GTCA's trained/frozen split). `Persist` says what of it a checkpoint holds
  (`target`: e.g. only the adapters and the optimizer state), the JSON `extra` saved beside it
  (data position, task and seed, the parser's meta, a backbone digest) and how a restored
  checkpoint becomes the state again (`restore`: where a caller checks the extra, sets its data
  iterator, reads its meta).
- **Steps**: `batch_at(step)` gives the batch of 0-based step `step` (a pure function of the
  step, or the next batch of a stateful iterator whose state travels in `extra`);
  `step_fn(state, batch, step) -> (state, out)` runs it (a jitted step and whatever per-step
  inputs it takes: a learning rate, a dropout key, GTCA's α). `out` is a dict of the step's
  values (device scalars, host numbers); `loss_of(out)` is its loss.
- **Non-finite loss**: every step's loss is checked — one step late, so the host prepares the
  next batch while the device runs, and always before anything is logged, evaluated or saved.
  The first non-finite loss raises `NonFiniteLossError` (exit code 3) naming the step and the
  last checkpoint; nothing is saved after it. A save first checks that the state's floating
  arrays are finite (an update can overflow while its step's loss, computed before it, is
  finite): non-finite parameters raise the same error instead of being saved.
- **Progress**: every `log_every` steps, at epoch ends, at a stop and at the last step,
  `progress(window, step)` turns the window's step outputs into a metrics record (written with
  `step` to the `MetricsWriter`) and the fields of the one progress line,
  `{label}step N/TOTAL | field | … | ETA 1m05s`. Rates and the ETA leave out the first step of
  the call (its compilation): `Window.per_second` counts the window's steps after it, the ETA
  uses the steps/s since it ended.
- **Checkpoints** every `checkpoint_every` steps, every `checkpoint_every_s` seconds, at epoch
  ends, at the last step, at every stop, and when a hook asks.
- **Hooks** (`Hook(when, call)`) run after the progress line of the steps `when(step)` selects
  (evaluation, live metrics, dev F1 with early stopping); `call(step, state)` may return an
  `Action` asking for a checkpoint or a stop.
- **Stops**: `stop_after` (tests: end after N steps of this call, as a kill right after a
  checkpoint would), `max_seconds` (a wall-time limit: checkpointed, resumable), a hook's stop.
  `LoopResult.stop` says which: `"end"`, `"stop_after"`, `"time"` or the hook's reason.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from slm_jax import cli
from slm_jax.train.checkpointing import Checkpointer, Restored

END, STOP_AFTER, TIME = "end", "stop_after", "time"


class NonFiniteLossError(cli.CliError):
  """The loss became NaN or Inf; the run stops instead of writing a broken checkpoint."""

  exit_code = cli.EXIT_NONFINITE


def fmt_seconds(seconds: float) -> str:
  """`1h05m`, `3m07s`; `?` when unknown."""
  if not math.isfinite(seconds):
    return "?"
  seconds = int(max(0, seconds))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
      f"{seconds // 60}m{seconds % 60:02d}s"


def sums_loss(out: dict) -> float:
  """The loss of a step whose outputs are target sums (`loss_sum`, `count`)."""
  return float(out["loss_sum"]) / max(float(out["count"]), 1.0)


@dataclasses.dataclass
class Window:
  """The step outputs since the last progress line; `timed` of the last of them count for rates
  (the call's first step, compilation included, does not), over `seconds`."""

  outs: list[dict]
  timed: int
  seconds: float

  def per_second(self, amount: Callable[[dict], float] | None = None) -> float:
    """Steps (or `amount(out)` summed) per second over the timed steps; NaN when none is."""
    if self.timed <= 0:
      return float("nan")
    timed = self.outs[len(self.outs) - self.timed:]
    total = len(timed) if amount is None else sum(amount(out) for out in timed)
    return total / max(self.seconds, 1e-9)


def rate_text(value: float, unit: str, digits: int = 0) -> str:
  """`12,345 tok/s`, or `- tok/s` while no step was timed yet."""
  return f"{value:,.{digits}f} {unit}" if math.isfinite(value) else f"- {unit}"


def mean_loss_progress(window: Window, step: int) -> tuple[dict, list[str]]:
  """The default progress: the mean of the window's per-step losses and steps/s."""
  del step
  loss = sum(sums_loss(out) for out in window.outs) / len(window.outs)
  rate = window.per_second()
  return ({"loss": loss, "steps_per_s": rate},
          [f"loss {loss:.4f}", rate_text(rate, "steps/s", 2)])


@dataclasses.dataclass(frozen=True)
class Action:
  """What a hook asks of the loop after its step."""

  stop: str | None = None  # end the run (a checkpoint is written); the reason
  checkpoint: bool = False


@dataclasses.dataclass(frozen=True)
class Hook:
  """`call(step, state)` after every step `when(step)` is true for (1-based: steps done)."""

  when: Callable[[int], bool]
  call: Callable[[int, Any], Action | None]


def every(n: int, *, but: int | None = None) -> Callable[[int], bool]:
  """`when` of every n-th step (never when n ≤ 0), except step `but` (e.g. the last one, when
  the caller does that one after the loop)."""
  return lambda step: n > 0 and step % n == 0 and step != but


@dataclasses.dataclass(frozen=True)
class Cadence:
  """When the loop logs, checkpoints and stops (0 / None: never)."""

  log_every: int = 0
  checkpoint_every: int = 0
  checkpoint_every_s: float = 0.0  # also a checkpoint when this long passed since the last
  epoch_steps: int = 0  # steps per epoch: a progress line and a checkpoint at each epoch end
  max_seconds: float = 0.0  # stop (checkpointed, resumable) after this wall time of the call
  stop_after: int | None = None  # end after this many steps of the call (checkpointed)


def _same(state: Any) -> Any:
  return state


def _step_extra(step: int) -> dict:
  return {"step": step}


def _restored_state(state: Any, restored: Restored) -> Any:
  del state
  return restored.state


@dataclasses.dataclass(frozen=True)
class Persist:
  """How the loop's state goes into a checkpoint and comes back."""

  target: Callable[[Any], Any] = _same  # state → the pytree saved (and the restore's template)
  extra: Callable[[int], dict] = _step_extra  # step → the JSON saved beside it (a fresh dict)
  restore: Callable[[Any, Restored], Any] = _restored_state  # (state, restored) → state
  describe: Callable[[int], str] | None = None  # step → where the resumed run is, for the log


@dataclasses.dataclass
class LoopResult:
  state: Any
  start: int  # the step this call started at
  step: int  # the step it ended at
  stop: str  # END, STOP_AFTER, TIME or a hook's reason
  last_loss: float  # the loss of the last step (NaN when no step ran)
  seconds: float


class Loop:
  """One training run's loop over `total_steps` steps (see the module docstring)."""

  def __init__(self, checkpointer: Checkpointer, state: Any, total_steps: int, *,
               persist: Persist = Persist(), log: Callable[[str], None] = print, label: str = ""):
    self.checkpointer, self.state, self.total_steps = checkpointer, state, int(total_steps)
    self.persist, self.log, self.label = persist, log, label
    self.start = 0

  def resume(self) -> int:
    """Restores the newest readable checkpoint into the state (unreadable newer ones are moved
    aside by the checkpointer and reported here); the step to start from (0: none)."""
    restored = self.checkpointer.restore_latest(self.persist.target(self.state))
    if restored is None:
      return self.start
    for step, reason in restored.skipped:
      self.log(f"warning: {self.label}checkpoint step {step} unreadable ({reason}); resumed "
               f"from {restored.step}")
    self.state = self.persist.restore(self.state, restored)
    self.start = restored.step
    where = self.persist.describe(self.start) if self.persist.describe else str(
        self.checkpointer.directory)
    self.log(f"{self.label}resumed from step {self.start} ({where})")
    return self.start

  def save(self, step: int, hint: str = "") -> None:
    """Saves the state of `step`, after checking that every floating array in it is finite: a
    step's loss is computed before its update, so an update that overflows (a huge learning rate)
    makes the parameters NaN while the loss that step reports is still finite."""
    target = self.persist.target(self.state)
    # arrays spread over several processes are left out: an eager check of them made the
    # processes of a multi-host run wait for each other for good (tests/test_multiprocess.py);
    # there the per-step loss check is the guard
    floats = [(path, leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]
              if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact)
              and getattr(leaf, "is_fully_addressable", True)]
    finite_A = [jnp.isfinite(leaf).all() for _, leaf in floats]
    if finite_A and not bool(jnp.stack(finite_A).all()):  # one host sync for the whole state
      bad = [jax.tree_util.keystr(path) for (path, _), ok in zip(floats, finite_A) if not ok]
      raise self._non_finite(f"parameters after the update of step {step} ({len(bad)} arrays, "
                             f"first {bad[0]})", hint)
    self.checkpointer.save(step, target, self.persist.extra(step))

  def _non_finite(self, what: str, hint: str) -> NonFiniteLossError:
    """The one stop line of a non-finite loss or state: what, the last checkpoint, the hint."""
    self.checkpointer.wait()  # the saves already under way are the last ones
    last = self.checkpointer.steps()[-1:]
    return NonFiniteLossError(
        f"{self.label}non-finite {what}; stopping without saving (last checkpoint: "
        f"{f'step {last[0]}' if last else 'none'} in {self.checkpointer.directory})"
        + (f"; {hint}" if hint else ""))

  def _checked(self, step: int, out: dict, loss_of: Callable[[dict], float], hint: str) -> float:
    loss = loss_of(out)
    if not math.isfinite(loss):
      raise self._non_finite(f"loss ({loss}) at step {step}", hint)
    return loss

  def run(self, step_fn: Callable[[Any, Any, int], tuple[Any, dict]],
          batch_at: Callable[[int], Any], *, cadence: Cadence = Cadence(),
          progress: Callable[[Window, int], tuple[dict, list[str]]] = mean_loss_progress,
          writer: Any = None, hooks: Sequence[Hook] = (),
          loss_of: Callable[[dict], float] = sums_loss, hint: str = "") -> LoopResult:
    """Runs steps `self.start` … `total_steps - 1` (or until a stop) from `self.state`."""
    total, start = self.total_steps, self.start
    began = last_save = time.monotonic()
    first_end = None  # when the call's first step ended: rates and the ETA start there
    outs: list[dict] = []
    timed, window_start = 0, began
    pending: tuple[int, dict] | None = None  # the last step, its loss not checked yet
    last_loss, stop, step = float("nan"), None, start
    try:
      while step < total and stop is None:
        self.state, out = step_fn(self.state, batch_at(step), step)
        if pending is not None:  # the previous step's loss, while this one runs
          last_loss = self._checked(*pending, loss_of, hint)
        step += 1
        pending = (step, out)
        outs.append(out)
        if first_end is None:
          last_loss, pending = self._checked(*pending, loss_of, hint), None
          first_end = window_start = time.monotonic()
        else:
          timed += 1
        now = time.monotonic()
        if cadence.stop_after is not None and step - start >= cadence.stop_after:
          stop = STOP_AFTER
        elif cadence.max_seconds and now - began > cadence.max_seconds:
          stop = TIME
        epoch_end = bool(cadence.epoch_steps) and step % cadence.epoch_steps == 0
        log_due = (bool(cadence.log_every) and step % cadence.log_every == 0) or epoch_end \
            or step == total or stop is not None
        save_due = (bool(cadence.checkpoint_every) and step % cadence.checkpoint_every == 0) \
            or epoch_end or step == total or (bool(cadence.checkpoint_every_s)
                                              and now - last_save > cadence.checkpoint_every_s)
        due = [hook for hook in hooks if hook.when(step)]
        if not (log_due or save_due or due or stop):
          continue
        if pending is not None:
          last_loss, pending = self._checked(*pending, loss_of, hint), None
        if log_due:
          now = time.monotonic()
          record, fields = progress(Window(outs, timed, now - window_start), step)
          if writer is not None:
            writer.write({"step": step, **record})
          rate = (step - start - 1) / max(now - first_end, 1e-9) if step - start > 1 else 0.0
          eta = (total - step) / rate if rate > 0 else (0.0 if step == total else math.inf)
          self.log(f"{self.label}step {step}/{total} | " + " | ".join(fields)
                   + f" | ETA {fmt_seconds(eta)}")
          outs, timed, window_start = [], 0, now
        for hook in due:
          action = hook.call(step, self.state)
          if action is not None:
            save_due = save_due or action.checkpoint
            stop = action.stop or stop
        if save_due or stop is not None:
          self.save(step, hint)
          last_save = time.monotonic()
    finally:
      self.checkpointer.wait()
    return LoopResult(self.state, start, step, stop or END, last_loss, time.monotonic() - began)
