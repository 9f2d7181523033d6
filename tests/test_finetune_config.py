"""`python -m slm_jax.finetune`'s settings through the one config loader: `--config=FILE|NAME`,
`--config.KEY=VALUE`, the old flags as aliases (same `finetune.json` record as before), and bad
settings refused in one line before anything is read or written."""

from __future__ import annotations

import pytest

from slm_jax import cli
from slm_jax.finetune import __main__ as finetune_cli
from slm_jax.finetune.settings import LOADER, TASK_DEFAULTS, FinetuneSettings


def settings(tmp_path, *argv):
  """The settings a command line gives (parsed as the CLI parses it)."""
  args, overrides = finetune_cli.parse_args([f"--workdir={tmp_path}", f"--out={tmp_path}/o",
                                             *argv])
  return finetune_cli.LOADER.load(args.config, overrides, finetune_cli.LOADER.flag_values(args),
                                  extra={"source": str(tmp_path)})


def test_the_old_flags_give_the_old_record(tmp_path):
  got = settings(tmp_path, "--task=boolq", "--epochs=2", "--lr=3e-3", "--batch-size=4",
                 "--max_len=256", "--warmup_steps=0", "--limit=8", "--micro_batches=2",
                 "--tree_source=flat", "--log_every=1", "--checkpoint_every=9")
  assert got.to_dict() == {
      "task": "boolq", "source": str(tmp_path), "epochs": 2, "lr": 3e-3, "batch_size": 4,
      "max_len": 256, "warmup_steps": 0, "min_lr": 1e-6, "weight_decay": 0.1, "b1": 0.9,
      "b2": 0.95, "eps": 1e-8, "clip": 1.0, "micro_batches": 2, "limit": 8,
      "tree_source": "flat", "log_every": 1, "checkpoint_every": 9, "xsum_train": "subset",
      "xsum_train_ids": ""}
  assert [type(got.epochs), type(got.lr)] == [int, float]


@pytest.mark.parametrize("task", sorted(TASK_DEFAULTS))
def test_unset_epochs_lr_and_batch_take_the_tasks_values(tmp_path, task):
  got = settings(tmp_path, f"--task={task}")
  assert {k: getattr(got, k) for k in ("epochs", "lr", "batch_size")} == TASK_DEFAULTS[task]
  assert got == FinetuneSettings(task, str(tmp_path), **TASK_DEFAULTS[task])


def test_config_name_file_and_overrides(tmp_path):
  tiny = settings(tmp_path, "--config=tiny", "--task=xsum")
  assert (tiny.epochs, tiny.batch_size, tiny.max_len, tiny.limit) == (1, 4, 256, 16)
  assert tiny.lr == TASK_DEFAULTS["xsum"]["lr"]
  path = tmp_path / "mine.py"
  path.write_text("def get_config():\n  return {'task': 'boolq', 'lr': 1e-4, 'clip': 0.5}\n")
  mine = settings(tmp_path, f"--config={path}", "--lr=2e-4", "--config.min_lr=1e-7",
                  "--config.tree-source=parser:DIR")
  assert (mine.task, mine.lr, mine.clip, mine.min_lr, mine.tree_source) == (
      "boolq", 2e-4, 0.5, 1e-7, "parser:DIR")
  assert LOADER.names() == ["tiny"]


def test_bad_settings_are_every_problem_in_one_line_naming_the_file(tmp_path, capsys):
  path = tmp_path / "bad.py"
  path.write_text("def get_config():\n  return {'task': 'xsum', 'epoch': 2, 'lr': 'fast', "
                  "'batch_size': 6, 'micro_batches': 4}\n")
  code = cli.run(finetune_cli.main, [f"--workdir={tmp_path}", f"--out={tmp_path / 'o'}",
                                     f"--config={path}", "--warmup_steps=soon",
                                     "--config.limt=3"])
  errors = capsys.readouterr().err.splitlines()
  assert code == cli.EXIT_USAGE and len(errors) == 1
  assert errors[0] == (
      "error: invalid config: --warmup_steps=soon: warmup_steps='soon' is not an int; unknown "
      "key limt in --config.limt=3; did you mean limit?; unknown key epoch in "
      f"{path}; did you mean epochs?; lr = 'fast' should be of type float, got str "
      f"(in {path})")
  code = cli.run(finetune_cli.main, [f"--workdir={tmp_path}", f"--out={tmp_path / 'o'}",
                                     f"--config={path}", "--lr=1e-3"])
  assert code == cli.EXIT_USAGE and capsys.readouterr().err == (
      "error: invalid config: unknown key epoch in "
      f"{path}; did you mean epochs?; batch_size=6 is not a multiple of micro_batches=4 "
      f"(in {path})\n")
  assert not (tmp_path / "o").exists()
