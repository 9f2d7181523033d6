"""Run metrics as JSON lines (always) and TensorBoard (when the `tf` extra is installed).

On resume, lines from steps after the restored checkpoint are dropped, so `metrics.jsonl` is one
consistent curve even when a run was killed between a checkpoint and its next log line.
"""

from __future__ import annotations

import json
import logging
import pathlib

_LOG = logging.getLogger(__name__)


def _tensorboard(workdir: pathlib.Path):
  try:  # clu.metric_writers imports TensorFlow, which is optional
    from clu import metric_writers  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return metric_writers.create_default_writer(str(workdir / "tensorboard"), asynchronous=False)


class MetricsWriter:
  """`enabled=False` (every host but process 0 of a multi-host run) writes nothing."""

  def __init__(self, workdir: pathlib.Path, resume_step: int = 0, enabled: bool = True):
    self.path = workdir / "metrics.jsonl"
    self.enabled = enabled
    if not enabled:
      return
    if self.path.exists():
      kept = [line for line in self.path.read_text().splitlines()
              if line.strip() and json.loads(line).get("step", 0) <= resume_step]
      self.path.write_text("".join(line + "\n" for line in kept))
    self.file = self.path.open("a")
    self.tensorboard = _tensorboard(workdir)

  def write(self, record: dict) -> None:
    if not self.enabled:
      return
    self.file.write(json.dumps(record) + "\n")
    self.file.flush()
    if self.tensorboard is not None:
      scalars = {k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float))}
      self.tensorboard.write_scalars(record["step"], scalars)

  def close(self) -> None:
    if not self.enabled:
      return
    self.file.close()
    if self.tensorboard is not None:
      self.tensorboard.close()
