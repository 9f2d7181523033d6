"""Orbax checkpoints of a run: model parameters, optimizer state, step and data position.

Saves are asynchronous (training continues while the previous step is written). Orbax writes
into a temporary folder and commits by rename, so a run killed mid-save leaves no half-written
step behind. On resume the newest step is restored; a step that fails to restore (a corrupt or
truncated file) is reported, moved aside as `<step>.unreadable`, and the previous one is tried.
If checkpoints exist but none can be read, `CheckpointError` stops the run: it never silently restarts from step 0.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Any

import jax
import orbax.checkpoint as ocp

_LOG = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
  """Checkpoints exist in the workdir but none could be restored."""


@dataclasses.dataclass
class Restored:
  step: int
  state: Any  # pytree like the abstract state given to `restore_latest`
  extra: dict  # JSON: data position, tokenizer hash, …
  skipped: list[tuple[int, str]]  # newer steps that could not be read, with the reason


class Checkpointer:
  """A thin wrapper around `ocp.CheckpointManager` with fallback on unreadable steps."""

  def __init__(self, directory: str | pathlib.Path, max_to_keep: int = 3,
               async_save: bool = True):
    self.directory = pathlib.Path(directory).absolute()
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                             enable_async_checkpointing=async_save,
                                             create=True))

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state: Any, extra: dict) -> None:
    self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                    extra=ocp.args.JsonSave(extra)),
                      force=True)

  def restore_latest(self, abstract_state: Any, step: int | None = None) -> Restored | None:
    """The newest readable step (or exactly `step`), None when the directory holds none."""
    steps = self.steps()
    if step is not None:
      if step not in steps:
        raise CheckpointError(f"no checkpoint for step {step} in {self.directory} (has {steps})")
      steps = [step]
    skipped: list[tuple[int, str]] = []
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
    for step in reversed(steps):
      try:
        restored = self.manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                          extra=ocp.args.JsonRestore()))
      except Exception as error:  # pylint: disable=broad-except  # any unreadable step
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
        _LOG.warning("checkpoint step %d in %s cannot be restored (%s); trying the previous one",
                     step, self.directory, reason)
        skipped.append((step, reason))
        continue
      self._quarantine([s for s, _ in skipped])
      return Restored(step, restored.state, dict(restored.extra), skipped)
    if steps:
      details = "; ".join(f"step {s}: {r}" for s, r in skipped)
      raise CheckpointError(
          f"{self.directory} holds checkpoints {steps} but none can be restored ({details}). "
          "Refusing to restart from step 0: move the directory away to start over.")
    return None

  def _quarantine(self, steps: list[int]) -> None:
    """Moves unreadable steps aside (`<step>.unreadable`, kept for inspection, never deleted),
    so the resumed run can write those step numbers again."""
    for step in steps:
      source = self.directory / str(step)
      target = self.directory / f"{step}.unreadable"
      suffix = 1
      while target.exists():
        suffix += 1
        target = self.directory / f"{step}.unreadable{suffix}"
      source.rename(target)
      _LOG.warning("moved unreadable checkpoint %s to %s", source, target)
    if steps:
      self.manager.reload()

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.close()
