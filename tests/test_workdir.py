"""A workdir knows what it is: another run's command is refused before anything is written;
`train.steps` at the checkpoint does nothing; strict JSON outputs; dropped metric lines are kept."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from slm_jax.train import trainer
from slm_jax.train.workdir import NothingToDo, WorkdirError, check_workdir, differences
from tests.test_train import ROOT, SMALL, small_config


def cli_train(config: str, workdir, steps: int):
  """`python -m slm_jax.main` with the small test settings."""
  overrides = [f"--config.{k}={v}" for k, v in SMALL.items()]
  return subprocess.run([sys.executable, "-m", "slm_jax.main", f"--config={config}",
                         f"--config.train.steps={steps}", *overrides, f"--workdir={workdir}"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)


def snapshot(workdir):
  return {p.relative_to(workdir): p.stat().st_mtime_ns for p in workdir.rglob("*") if p.is_file()}


def test_another_configuration_shape_or_data_is_refused_and_nothing_is_written(tmp_path):
  trainer.train(small_config("tgtree", steps=2), tmp_path)
  before = snapshot(tmp_path)
  for other in (small_config("tg", steps=2),
                small_config("tgtree", steps=2, **{"model.d_model": 32}),
                small_config("tgtree", steps=2, **{"data.embedded_seed": 5}),
                small_config("tgtree", steps=2, **{"optimizer.peak_lr": 1e-4})):
    with pytest.raises(WorkdirError, match="holds another run.*use a new --workdir"):
      trainer.train(other, tmp_path)
  assert snapshot(tmp_path) == before  # config.json, checkpoints, metrics untouched
  with pytest.raises(WorkdirError, match=r"model.d_model: 64 in the workdir, 32 now"):
    check_workdir(small_config("tgtree", steps=2, **{"model.d_model": 32}), tmp_path)


def test_resumable_keys_may_change():
  base = small_config("tgtree", steps=2).to_dict()
  longer = small_config("tgtree", steps=9, **{"train.log_every": 1, "eval.max_batches": 1,
                                              "data.worker_count": 1}).to_dict()
  assert differences(base, longer) == []
  assert [k for k, _, _ in differences(base, small_config("tgtree", steps=2, **{
      "data.tokenizer": "gpt2"}).to_dict())] == ["data.tokenizer"]


def test_steps_at_the_checkpoint_do_nothing(tmp_path):
  trainer.train(small_config("tgtree", steps=3), tmp_path)
  before = snapshot(tmp_path)
  summary = json.loads((tmp_path / "summary.json").read_text())
  for steps in (3, 2):
    with pytest.raises(NothingToDo, match=r"already at step 3: nothing to do"):
      trainer.train(small_config("tgtree", steps=steps), tmp_path)
  assert snapshot(tmp_path) == before
  assert json.loads((tmp_path / "summary.json").read_text()) == summary
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == len(set(lines))  # no duplicated metric lines
  done = cli_train("configs/tgtree_tiny.py", tmp_path, steps=3)
  assert done.returncode == 0 and "already at step 3: nothing to do" in done.stdout, done.stderr
  assert "Traceback" not in done.stderr


def test_cli_refuses_another_run_in_one_line(tmp_path):
  trainer.train(small_config("tgtree", steps=2), tmp_path)
  done = cli_train("configs/tg_tiny.py", tmp_path, steps=2)
  assert done.returncode == 2
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "configuration.name: 'tgtree' in the workdir, 'tg' now" in errors[0]
  assert "Traceback" not in done.stderr


def test_no_held_out_data_is_null_not_nan(tmp_path):
  summary = trainer.train(small_config("tgtree", steps=2), tmp_path / "a")
  assert summary.eval_loss is not None
  from slm_jax.train.trainer import RunSummary
  empty = RunSummary(2, 10, 1.0, None, None, None, 1.0, 0, "w")
  assert json.loads(empty.to_json())["eval_loss"] is None
  with pytest.raises(ValueError):  # a NaN can never reach a file
    RunSummary(2, 10, float("nan"), None, None, None, 1.0, 0, "w").to_json()


def test_checkpoints_only_unreadable_are_refused_and_dropped_metrics_are_kept(tmp_path):
  trainer.train(small_config("tgtree", steps=2), tmp_path)
  checkpoints = tmp_path / "checkpoints"
  for step in checkpoints.iterdir():
    step.rename(checkpoints / f"{step.name}.unreadable")
  with pytest.raises(WorkdirError, match="only checkpoints moved aside as unreadable"):
    trainer.train(small_config("tgtree", steps=2), tmp_path)
  for step in list(checkpoints.iterdir()):  # checkpoints gone: the run starts over, says so
    step.rename(tmp_path / step.name)
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  trainer.train(small_config("tgtree", steps=1, **{"train.log_every": 1}), tmp_path)
  dropped = (tmp_path / "metrics.jsonl.dropped").read_text().splitlines()
  assert dropped and set(dropped) <= set(lines)


def test_a_failed_checkpoint_save_stops_training_naming_the_folder(tmp_path, monkeypatch):
  from slm_jax.train import checkpointing

  def full_disk(self, *args, **kwargs):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(checkpointing.ocp.CheckpointManager, "save", full_disk)
  with pytest.raises(checkpointing.CheckpointError,
                     match=r"cannot save a checkpoint in .*checkpoints \(at step 2\): No space left"):
    trainer.train(small_config("tgtree", steps=6, **{"train.checkpoint_every": 2}), tmp_path)
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert max(json.loads(line)["step"] for line in lines) <= 2  # stopped at once, not at step 6


def test_a_run_that_drops_most_of_its_corpus_warns_and_can_be_made_to_stop(tmp_path, capsys):
  """seq_len 16 drops most embedded sentences: a loud warning; max_drop_fraction stops it."""
  short = {"data.seq_len": 16}
  with pytest.raises(trainer.DataDropError, match=r"tokens \(\d+\.\d%\) dropped.*max_drop_"):
    trainer.train(small_config("tree", steps=1, **short, **{"data.max_drop_fraction": 0.5}),
                  tmp_path / "a")
  assert not (tmp_path / "a" / "checkpoints").exists()
  trainer.train(small_config("tree", steps=1, **short), tmp_path / "b")
  assert "WARNING: training data:" in capsys.readouterr().out


def test_two_trainers_on_one_workdir_one_is_refused_the_other_intact(tmp_path):
  """BAD 5: two `main` processes started on one workdir within a second: the second to reach the
  workdir is refused (exit 2, "in use by pid N"), the first trains; checkpoints and
  metrics.jsonl are the first's alone (no doubled lines)."""
  overrides = [f"--config.{k}={v}" for k, v in SMALL.items()]
  command = [sys.executable, "-m", "slm_jax.main", "--config=configs/tgtree_tiny.py",
             "--config.train.steps=4", "--config.train.log_every=1", *overrides,
             f"--workdir={tmp_path}"]
  first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
  time.sleep(0.5)
  second = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
  done = {p.pid: (p.wait(timeout=300), *p.communicate()) for p in (first, second)}
  codes = sorted(code for code, _, _ in done.values())
  assert codes == [0, 2], done
  (winner,) = [pid for pid, (code, _, _) in done.items() if code == 0]
  (refused,) = [err for code, _, err in done.values() if code == 2]
  errors = [line for line in refused.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "Traceback" not in refused
  assert errors[0].startswith(f"error: {tmp_path}: in use by pid {winner} on ")
  assert "(training)" in errors[0]
  lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  train_steps = [r["step"] for r in lines if "loss" in r and "eval_loss" not in r]
  assert train_steps == sorted(set(train_steps)) and train_steps[-1] == 4
  assert (tmp_path / "checkpoints" / "4").is_dir() and not (tmp_path / ".lock").exists()
