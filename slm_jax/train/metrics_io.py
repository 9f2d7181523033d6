"""Run metrics as JSON lines and as TensorBoard event files (tensorboardX: no TensorFlow needed).

On resume, lines from steps after the restored checkpoint are dropped, so `metrics.jsonl` is one
consistent curve even when a run was killed between a checkpoint and its next log line. Dropped
lines are never lost silently: they are appended to `metrics.jsonl.dropped` and the console says
how many (e.g. a run that starts over at step 0 because its checkpoints are gone). A partly
written last line (a run killed while writing it) is moved there too, with a warning naming
`metrics.jsonl:N`; an unreadable line before the last is an error naming it. Values are strict
JSON: a non-finite number is written as null.

TensorBoard: every numeric value of a record becomes a scalar under `tensorboard/` of the
workdir, tagged by what it is (`TAG_GROUPS`: `train/loss`, `train/loss_terminal`, `train/lr`,
`eval/eval_terminal_ppl`, `syntax/live_sg`, …). A resumed writer starts with a purge step, so
TensorBoard discards the steps after the checkpoint that an earlier, killed writer had logged
(the same curve `metrics.jsonl` keeps). `read_scalars` reads the event files back without
TensorBoard or TensorFlow (tests, `slm_jax.plot`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import struct

from slm_jax import files

_LOG = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"
# (key prefix, tag group); the first match wins.
TAG_GROUPS = (("eval_", "eval"), ("live_", "syntax"), ("", "train"))


def tag_of(key: str) -> str:
  """The TensorBoard tag of a metrics key: `eval_loss` → `eval/eval_loss`, `lr` → `train/lr`."""
  return next(f"{group}/{key}" for prefix, group in TAG_GROUPS if key.startswith(prefix))


def _tensorboard(workdir: pathlib.Path, resume_step: int):
  from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  # purge_step: TensorBoard drops events at or after it that earlier writers of the run logged.
  # The suffix keeps a writer started in the same second as the last one (a quick resume) from
  # overwriting its file: tensorboardX names files by the second only.
  return SummaryWriter(str(workdir / TENSORBOARD_DIR), purge_step=resume_step + 1 if resume_step
                       else None, flush_secs=10, filename_suffix=f".{os.getpid()}.{resume_step}")


def _split_at(path: pathlib.Path, resume_step: int) -> tuple[list[str], list[str], list[str]]:
  """(lines up to `resume_step`, lines after it, a partly written last line) of a metrics file.
  Only the last line may be unreadable (a kill in the middle of a write); an unreadable line
  before it is an error naming `path:N`."""
  lines = [line for line in files.text_lines(path.read_text(encoding="utf-8", errors="replace"))
           if line.strip()]
  kept, dropped = [], []
  for number, line in enumerate(lines, 1):
    try:
      record = json.loads(line)
      problem = None if isinstance(record, dict) else f"a JSON {type(record).__name__}"
    except json.JSONDecodeError as error:
      problem = str(error)
    if problem is not None:
      if number == len(lines):
        return kept, dropped, [line]
      raise ValueError(f"{path}:{number}: not a metrics record ({problem}); only the last line "
                       "may be partly written: repair or move the file away")
    (kept if record.get("step", 0) <= resume_step else dropped).append(line)
  return kept, dropped, []


class MetricsWriter:
  """`enabled=False` (every host but process 0 of a multi-host run) writes nothing.
  `tensorboard=False` writes `metrics.jsonl` only."""

  def __init__(self, workdir: pathlib.Path, resume_step: int = 0, enabled: bool = True,
               tensorboard: bool = True):
    self.path = workdir / "metrics.jsonl"
    self.enabled = enabled
    if not enabled:
      return
    if self.path.exists():
      kept, dropped, partial = _split_at(self.path, resume_step)
      if dropped or partial:
        with files.appending(self.path.with_name(self.path.name + ".dropped")) as backup:
          backup.write("".join(line + "\n" for line in dropped + partial))
      if dropped:
        print(f"warning: {self.path}: {len(dropped)} lines after step {resume_step} (where this "
              f"run resumes) moved to {self.path.name}.dropped", flush=True)
      if partial:
        print(f"warning: {self.path}:{len(kept) + len(dropped) + 1}: a partly written last line "
              f"(the run was killed while writing it) moved to {self.path.name}.dropped",
              flush=True)
      files.write_text(self.path, "".join(line + "\n" for line in kept))
    self.file = files.appending(self.path)  # a failed write names the file
    self.tensorboard = _tensorboard(workdir, resume_step) if tensorboard else None

  def write(self, record: dict) -> None:
    if not self.enabled:
      return
    clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v
             for k, v in record.items()}
    self.file.write(json.dumps(clean, allow_nan=False) + "\n")
    self.file.flush()
    if self.tensorboard is not None:
      for key, value in clean.items():
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
          self.tensorboard.add_scalar(tag_of(key), value, global_step=record["step"])

  def close(self) -> None:
    if not self.enabled:
      return
    self.file.close()
    if self.tensorboard is not None:
      self.tensorboard.close()


def _records(path: pathlib.Path):
  """The records of one TFRecord-framed event file (u64 length, u32 crc, data, u32 crc)."""
  data = path.read_bytes()
  offset = 0
  while offset + 12 <= len(data):
    (length,) = struct.unpack_from("<Q", data, offset)
    start = offset + 12
    if start + length + 4 > len(data):
      break  # a record still being written
    yield data[start:start + length]
    offset = start + length + 4


def read_scalars(logdir: str | pathlib.Path) -> dict[str, list[tuple[int, float]]]:
  """tag → [(step, value)] of every event file under `logdir`, files in the order they were
  started, with purge steps applied as TensorBoard applies them (a later writer's purge step
  drops the earlier events at or after it)."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  files = [[event_pb2.Event.FromString(raw) for raw in _records(path)]
           for path in pathlib.Path(logdir).glob("events.out.tfevents.*")]
  scalars: dict[str, list[tuple[int, float]]] = {}
  for events in sorted((f for f in files if f), key=lambda f: f[0].wall_time):
    for event in events:
      if event.HasField("session_log") and event.session_log.status == event.session_log.START:
        for tag, points in scalars.items():
          scalars[tag] = [(s, v) for s, v in points if s < event.step]
      for value in event.summary.value:
        scalars.setdefault(value.tag, []).append((int(event.step), float(value.simple_value)))
  return scalars
