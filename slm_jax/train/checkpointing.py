"""Orbax checkpoints of a run: model parameters, optimizer state, step and data position.

Saves are asynchronous (training continues while the previous step is written). Orbax writes
into a temporary folder and commits by rename, so a run killed mid-save leaves no half-written
step behind. On resume the newest step is restored; a step that fails to restore (a corrupt or
truncated file) is reported, moved aside as `<step>.unreadable`, and the previous one is tried.
If checkpoints exist but none can be read, `CheckpointError` stops the run: it never silently restarts from step 0.

Restores go onto the mesh of the state given (Orbax with the target's shardings): a checkpoint
written on 4 devices (fsdp 2) resumes on 2 or on 8. A checkpoint whose parameters do not fit the
state (another model shape: a changed width, depth or vocabulary) is `CheckpointMismatchError`,
naming the parameters that differ; it is not "unreadable" and is never moved aside.

A failed save (a full disk, a lost mount) is one `CheckpointError` line naming the folder and
what failed — a full disk says `No space left on device: FILE` (`cli.full_disk`, from TensorStore's
message) —, and a Ctrl-C inside a save is the one `interrupted` line of `cli.run` (exit 130):
the failure is reported once, by that line, so Orbax's own error records from its save threads,
asyncio's "Task exception was never retrieved" records of Orbax's write tasks and TensorStore
writes completing into Orbax's closed event loop print nothing (`quiet_orbax_errors`; Orbax's
warnings stay, one line each); `wait` and `close` after it do not raise it again. The step being saved is left as Orbax's
uncommitted temporary folder, which a resume ignores: the last complete step is restored.

Multi-process runs: every host's data iterator state is kept (`data_extra` / `host_data`), since
each host reads its own share of the data and Orbax writes the JSON items from process 0 only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import sys
from typing import Any, Callable

import jax
import numpy as np
import orbax.checkpoint as ocp

from slm_jax import cli
from slm_jax.sections import Rules

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CheckpointSection:
  """The `checkpoint` section of a run's config."""

  dir: str  # default workdir when --workdir is not given
  max_to_keep: int
  resume: bool  # restore the newest readable step of the workdir

  def __post_init__(self):
    rules = Rules("checkpoint", self)
    if rules.typed:
      rules.need(bool(self.dir), "dir is empty")
      rules.need(self.max_to_keep > 0, "max_to_keep must be positive")
    rules.done()


# Orbax's warnings at every read-only open (an evaluation's): what read-only means, not news.
READ_ONLY_NOTICES = ("CheckpointManagerOptions.read_only=True, setting",
                     "Given directory is read only=")


class _OrbaxErrors(logging.Filter):
  """Orbax's records (absl logging, from its background save threads): errors dropped (the
  failure they describe surfaces as the one `CheckpointError` line), warnings as one line
  without a traceback (its notices of a read-only open dropped); nothing once a failure was
  reported (`silence`). On asyncio's logger:
  its "Task exception was never retrieved" records of Orbax's write tasks, dropped."""

  silenced = False

  def filter(self, record: logging.LogRecord) -> bool:
    if record.name == "asyncio":
      return "/orbax/" not in record.getMessage().replace("\\", "/")
    if "/orbax/" not in record.pathname.replace("\\", "/") or record.levelno < logging.WARNING:
      return True
    if self.silenced or record.levelno >= logging.ERROR:
      return False
    if any(notice in record.getMessage() for notice in READ_ONLY_NOTICES):
      return False  # what read_only=True means, said at every read-only open (evaluations)
    record.msg, record.args = record.getMessage().splitlines()[0][:300], ()
    record.exc_info = record.exc_text = record.stack_info = None
    return True


_ORBAX_ERRORS = _OrbaxErrors()


def _is_late_completion(unraisable: Any) -> bool:
  """A write that finished after its save was abandoned: TensorStore's I/O threads hand each
  completed write to the asyncio loop that awaited it, and after a failed save Orbax has closed
  that loop. The error surfaces from C as an unraisable exception, outside any Python thread."""
  error, tb = unraisable.exc_value, unraisable.exc_traceback
  return (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"
          and tb is not None and tb.tb_frame.f_code.co_name == "call_soon_threadsafe")


def _late_completion_hook(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
  def hook(unraisable):
    if not _is_late_completion(unraisable):
      return previous(unraisable)
    return None  # a write of a save that failed: the failure itself is the one line
  hook.late_completions = True
  return hook


def quiet_orbax_errors(silence: bool = False) -> None:
  """Installs the filter of Orbax's records on absl's and asyncio's loggers (once) and the
  `sys.unraisablehook` that drops late write completions; `silence` drops Orbax's warnings too
  from now on (the failure they describe was reported in one line)."""
  for logger in (logging.getLogger("absl"), logging.getLogger("asyncio")):
    if _ORBAX_ERRORS not in logger.filters:
      logger.addFilter(_ORBAX_ERRORS)
  if not getattr(sys.unraisablehook, "late_completions", False):
    sys.unraisablehook = _late_completion_hook(sys.unraisablehook)
  _OrbaxErrors.silenced = _OrbaxErrors.silenced or silence


def _reason(error: BaseException) -> str:
  """What failed, in one line: a full disk names the file (`cli.full_disk`), else the error's
  type and first line."""
  return cli.full_disk(error) or f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"


class CheckpointError(RuntimeError):
  """Checkpoints exist in the workdir but none could be restored, or one could not be saved."""

  exit_code = 2


def data_extra(state: dict) -> dict:
  """The checkpoint's `extra` entries for the data iterator's `state` on this host. Orbax writes
  `extra` from process 0 only, so with several processes every host's state (each reads its own
  share of the data) is gathered into `data_by_process`; `data` stays process 0's."""
  if jax.process_count() == 1:
    return {"data": state}
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  encoded = np.frombuffer(json.dumps(state).encode("utf-8"), np.uint8)
  lengths = multihost_utils.process_allgather(np.asarray([len(encoded)], np.int64)).reshape(-1)
  padded = np.zeros(int(lengths.max()), np.uint8)
  padded[:len(encoded)] = encoded
  rows = multihost_utils.process_allgather(padded).reshape(len(lengths), -1)
  states = [json.loads(bytes(row[:n]).decode("utf-8")) for row, n in zip(rows, lengths)]
  return {"data": states[0], "data_by_process": states}


def host_data(extra: dict) -> dict:
  """This host's data iterator state from a restored `extra` (see `data_extra`)."""
  states = extra.get("data_by_process")
  if states is None:
    if jax.process_count() > 1:
      raise CheckpointError("the checkpoint holds one data iterator state, written by a "
                            f"single-process run; this run has {jax.process_count()} processes")
    return extra["data"]
  if len(states) != jax.process_count():
    raise CheckpointError(f"the checkpoint was written by {len(states)} processes, this run has "
                          f"{jax.process_count()}: restart with {len(states)} hosts (each reads "
                          "its own share of the data)")
  return states[jax.process_index()]


class CheckpointMismatchError(CheckpointError):
  """A checkpoint's parameters have other names or shapes than the state it should restore."""


def _shapes(tree: Any) -> dict[str, tuple[int, ...]]:
  """Parameter path → shape of a tree of arrays, ShapeDtypeStructs or Orbax array metadata."""
  leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
  return {jax.tree_util.keystr(path, simple=True, separator="/"): tuple(leaf.shape)
          for path, leaf in leaves}


def layout_mismatch(saved: Any, target: Any, limit: int = 4) -> list[str]:
  """How the parameter trees `saved` and `target` differ (missing / unexpected / reshaped
  parameters, at most `limit` of each), empty when they fit."""
  have, want = _shapes(saved), _shapes(target)
  problems = [f"{p}: {have[p]} saved, {want[p]} now" for p in want
              if p in have and have[p] != want[p]][:limit]
  problems += [f"{p}: not in the checkpoint" for p in want if p not in have][:limit]
  problems += [f"{p}: in the checkpoint only" for p in have if p not in want][:limit]
  return problems


@dataclasses.dataclass
class Restored:
  step: int
  state: Any  # pytree like the abstract state given to `restore_latest`
  extra: dict  # JSON: data position, tokenizer hash, …
  skipped: list[tuple[int, str]]  # newer steps that could not be read, with the reason


class Checkpointer:
  """A thin wrapper around `ocp.CheckpointManager` with fallback on unreadable steps."""

  def __init__(self, directory: str | pathlib.Path, max_to_keep: int = 3,
               async_save: bool = True, read_only: bool = False):
    """`read_only` (evaluation): nothing in the directory is created, moved or written; an
    unreadable newest step is skipped (and reported in `Restored.skipped`), not moved aside."""
    self.directory = pathlib.Path(directory).absolute()
    self.read_only = read_only
    self.failed = False  # a save failed or was interrupted: reported once, not again
    quiet_orbax_errors()
    if read_only and not self.directory.is_dir():
      raise CheckpointError(f"no checkpoints in {self.directory} (the folder does not exist)")
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                             enable_async_checkpointing=async_save,
                                             create=not read_only, read_only=read_only))

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state: Any, extra: dict) -> None:
    """Starts saving `step` (asynchronously); a failure of this or the previous save (a full
    disk, a lost mount) raises `CheckpointError` naming the folder, so training stops at once."""
    if self.read_only:
      raise CheckpointError(f"{self.directory} was opened read-only")
    try:
      self.manager.check_for_errors()  # the previous asynchronous save
    except Exception as error:  # pylint: disable=broad-except  # its write failed meanwhile
      self._failed()
      raise CheckpointError(f"cannot save a checkpoint in {self.directory} (an earlier save, "
                            f"found at step {step}): {_reason(error)}") from error
    try:
      self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                      extra=ocp.args.JsonSave(extra)),
                        force=True)
    except KeyboardInterrupt:  # Ctrl-C mid-save: `cli.run` says "interrupted", nothing more
      self._failed()
      raise
    except Exception as error:  # pylint: disable=broad-except  # any failed write
      self._failed()
      raise CheckpointError(f"cannot save a checkpoint in {self.directory} (at step {step}): "
                            f"{_reason(error)}") from error

  def _failed(self) -> None:
    self.failed = True
    quiet_orbax_errors(silence=True)

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
      self._check_layout(step, target)
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
      if not self.read_only:
        self._quarantine([s for s, _ in skipped])
      return Restored(step, restored.state, dict(restored.extra), skipped)
    if steps:
      details = "; ".join(f"step {s}: {r}" for s, r in skipped)
      raise CheckpointError(
          f"{self.directory} holds checkpoints {steps} but none can be restored ({details}). "
          "Refusing to restart from step 0: move the directory away to start over.")
    return None

  def _check_layout(self, step: int, target: Any) -> None:
    """Raises `CheckpointMismatchError` when the saved parameters (`target["params"]`, where the
    state has them) do not fit; a step whose metadata cannot be read is left to the restore."""
    if not isinstance(target, dict) or "params" not in target:
      return
    try:
      saved = ocp.StandardCheckpointHandler().metadata(
          self.directory / str(step) / "state").tree["params"]
    except Exception:  # pylint: disable=broad-except  # unreadable metadata: restore decides
      return
    problems = layout_mismatch(saved, target["params"])
    if problems:
      raise CheckpointMismatchError(
          f"checkpoint step {step} in {self.directory} does not fit this model: "
          f"{'; '.join(problems)}. It was written by a run with another model shape (width, "
          "depth, heads or vocabulary): resume with that run's config, or use a new --workdir")

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
    """Waits for the pending save; its failure raises `CheckpointError` naming the folder (once:
    after a reported failure or an interrupted save, the wait raises nothing more)."""
    try:
      self.manager.wait_until_finished()
      self.manager.check_for_errors()
    except CheckpointError:
      raise
    except Exception as error:  # pylint: disable=broad-except
      if self.failed:
        return
      self._failed()
      raise CheckpointError(f"cannot save a checkpoint in {self.directory}: "
                            f"{_reason(error)}") from error

  def close(self) -> None:
    """Finishes the pending save and stops Orbax's threads (a failure: as `wait`)."""
    try:
      self.wait()
    finally:
      try:
        self.manager.close()
      except Exception:  # pylint: disable=broad-except  # the failure wait() reported
        if not self.failed:
          raise
