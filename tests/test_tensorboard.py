"""TensorBoard without TensorFlow: a training run writes event files (tensorboardX) holding the
same losses by kind, LR, grad norm and held-out metrics as metrics.jsonl, read back here with no
TensorBoard installed; a resumed writer's events are one curve, as its metrics.jsonl is."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from slm_jax.train import metrics_io, trainer
from tests.test_train import small_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _jsonl(workdir) -> list[dict]:
  return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def _as_tags(records: list[dict]) -> dict[str, list[tuple[int, float]]]:
  out: dict[str, list[tuple[int, float]]] = {}
  for record in records:
    for key, value in record.items():
      if key != "step" and isinstance(value, (int, float)):
        out.setdefault(metrics_io.tag_of(key), []).append((record["step"], value))
  return out


def _assert_same(events, records):
  want = _as_tags(records)
  assert sorted(events) == sorted(want)
  for tag, points in want.items():
    assert [s for s, _ in events[tag]] == [s for s, _ in points], tag
    assert [v for _, v in events[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag


def test_training_writes_the_metrics_as_tensorboard_events_and_resumes_one_curve(tmp_path):
  cfg = small_config("tgnomask_mix_tg", steps=6, **{"train.eval_every": 3,
                                                     "train.checkpoint_every": 3})
  trainer.train(cfg, tmp_path)
  events = metrics_io.read_scalars(tmp_path / metrics_io.TENSORBOARD_DIR)
  for tag in ("train/loss", "train/loss_terminal", "train/loss_structural", "train/lr",
              "train/grad_norm", "train/tokens_per_s", "eval/eval_loss",
              "eval/eval_terminal_ppl"):
    assert tag in events, sorted(events)
  assert [s for s, _ in events["train/loss"]] == [1, 2, 3, 4, 5, 6]
  assert [s for s, _ in events["eval/eval_loss"]] == [3, 6]
  _assert_same(events, _jsonl(tmp_path))

  # the trainer resumed from step 3 (the last checkpoint lost) logs steps 4-6 again: TensorBoard's
  # view (the purge step) is one curve of 6 steps, as metrics.jsonl is
  writer = metrics_io.MetricsWriter(tmp_path, resume_step=3)
  for step in (4, 5, 6):
    writer.write({"step": step, "loss": 1.0 / step, "lr": 0.5})
  writer.close()
  assert len(list((tmp_path / metrics_io.TENSORBOARD_DIR).glob("events.out.tfevents.*"))) == 2
  events = metrics_io.read_scalars(tmp_path / metrics_io.TENSORBOARD_DIR)
  assert [s for s, _ in events["train/loss"]] == [1, 2, 3, 4, 5, 6]
  assert [s for s, _ in events["eval/eval_loss"]] == [3]  # step 6's is gone with the old run
  _assert_same(events, _jsonl(tmp_path))


def test_the_writer_needs_no_tensorflow(tmp_path):
  probe = ("import sys, pathlib; from slm_jax.train import metrics_io; "
           f"w = metrics_io.MetricsWriter(pathlib.Path({str(tmp_path)!r})); "
           "w.write({'step': 1, 'loss': 2.5}); w.close(); "
           "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))")
  done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                        check=True, cwd=ROOT)
  assert done.stdout.strip() == "[]"
  assert metrics_io.read_scalars(tmp_path / "tensorboard") == {"train/loss": [(1, 2.5)]}


def test_tags_group_metrics_by_what_they_are():
  assert metrics_io.tag_of("loss_pause") == "train/loss_pause"
  assert metrics_io.tag_of("eval_joint_ppl") == "eval/eval_joint_ppl"
  assert metrics_io.tag_of("live_blimp") == "syntax/live_blimp"
  assert metrics_io.tag_of("mfu") == "train/mfu"
